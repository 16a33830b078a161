//! Limits and protection, each against a real server on loopback:
//! document body size, body read timeout (a stalled body is 408, a steady
//! trickle is fine), request timeout (504), the global concurrency limit
//! (503 + `Retry-After`, health exempt), and slow clients (the header read
//! timeout closes them; a normal client is served meanwhile).
//! (`max_put_bytes` is in the store conformance suite, `max_selection_bytes`
//! a unit test of `App::check_selection_bytes`.)

mod common;

use common::put_waiting_for_body;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{client, parse_response, serve_app, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zarrd::config::Config;
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

fn app(config: Config) -> App {
    App::with_mounts(config, vec![Mount::build("data", &MountSpec::from_url("memory://")).unwrap()])
}

async fn start(config: Config) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    serve_app(app(config)).await
}

/// Reads the answer until the server closes the connection (bounded).
async fn answer(mut conn: TcpStream) -> Reply {
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), async {
        let mut chunk = [0u8; 4096];
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("no answer within 15 s");
    parse_response(&buf, false)
}

#[tokio::test]
async fn a_stalled_body_is_408_and_a_steady_trickle_is_fine() {
    let mut config = common::test_config();
    config.limits.body_read_timeout_seconds = 1;
    // The idle timeout alone (the trickle below is far under any minimum rate).
    config.limits.min_body_bytes_per_second = 0;
    let (addr, _task) = start(config).await;

    let mut conn = put_waiting_for_body(addr, "stalled", 10).await;
    conn.write_all(b"abc").await.unwrap();
    let started = Instant::now();
    let r = answer(conn).await;
    r.expect_error(408, "body_timeout");
    assert!(r.error_message().contains("limits.body_read_timeout_seconds"), "{r}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(800) && waited < Duration::from_secs(10), "answered after {waited:?}");

    // One byte every 300 ms: 3 s in all, three times the timeout, never idle for 1 s.
    let mut conn = put_waiting_for_body(addr, "trickle", 10).await;
    for _ in 0..10 {
        conn.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    answer(conn).await.expect_status(201);
    let r = client().get(format!("http://{addr}/zarr/data/trickle")).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"xxxxxxxxxx");
}

/// A body that keeps arriving, but below `limits.min_body_bytes_per_second`
/// on average after the grace (`body_read_timeout_seconds`), is 408 naming
/// the limit; one above it is stored.
#[tokio::test]
async fn a_body_below_the_minimum_rate_is_408() {
    let mut config = common::test_config();
    config.limits.body_read_timeout_seconds = 1;
    config.limits.min_body_bytes_per_second = 1000;
    config.limits.max_put_bytes = 1 << 20;
    let (addr, _task) = start(config).await;

    // 100 bytes every 200 ms: 500 a second, never idle for 1 s. Due whole
    // by 1 s + 1 ms a byte: fails at about 2 s.
    let mut conn = put_waiting_for_body(addr, "slow", 100_000).await;
    let started = Instant::now();
    let feeding = async {
        for _ in 0..50 {
            if conn.write_all(&[7u8; 100]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        conn
    };
    let r = answer(feeding.await).await;
    r.expect_error(408, "body_timeout");
    assert!(r.error_message().contains("limits.min_body_bytes_per_second = 1000"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(15));
    let r = client().get(format!("http://{addr}/zarr/data/slow")).send().await.unwrap();
    assert_eq!(r.status(), 404, "nothing stored");

    // 2000 bytes every 100 ms (20,000 a second) for 1.5 s: stored.
    let mut conn = put_waiting_for_body(addr, "steady", 30_000).await;
    for _ in 0..15 {
        conn.write_all(&[9u8; 2000]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    answer(conn).await.expect_status(201);
    let r = client().get(format!("http://{addr}/zarr/data/steady")).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), 30_000);
}

/// Array-data bodies count against `limits.upload_budget_bytes` as their
/// bytes arrive: while one upload holds a 2 MiB budget, another is 503
/// `overloaded` with `Retry-After` at once (nothing waits for room, so
/// nothing can wait on anything else), an empty PUT and reads go on, and
/// the refused upload goes through once the first is stored.
#[tokio::test]
async fn uploads_past_the_upload_budget_are_shed_at_once() {
    let mut config = common::test_config();
    config.limits.upload_budget_bytes = 2 << 20;
    config.limits.max_put_bytes = 4 << 20;
    config.limits.max_concurrent_requests = 2;
    let (addr, _task) = start(config).await;
    // Declares 3 MiB, sends 1.5 MiB: its buffer's room ahead takes the
    // whole budget.
    let mut a = put_waiting_for_body(addr, "a", 3 << 20).await;
    a.write_all(&vec![1u8; 3 << 19]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let r = client().put(format!("http://{addr}/zarr/data/b")).body("hello").send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["retry-after"].to_str().unwrap()), (503, "1"));
    // Its body was not read to its end: the connection closes, and says so.
    assert_eq!(r.headers().get("connection").map(|v| v.to_str().unwrap()), Some("close"));
    let text = r.text().await.unwrap();
    assert!(text.contains("overloaded") && text.contains("limits.upload_budget_bytes"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5), "shed at once");
    // Empty bodies hold nothing of it, and reads have their slots.
    for key in ["z0", "z1", "z2"] {
        let r = client().put(format!("http://{addr}/zarr/data/{key}")).body("").send().await.unwrap();
        assert_eq!(r.status(), 201, "empty PUT {key}");
    }
    let r = client().get(format!("http://{addr}/api/v1/mounts")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    a.write_all(&vec![2u8; 3 << 19]).await.unwrap();
    answer(a).await.expect_status(201);
    let r = client().put(format!("http://{addr}/zarr/data/b")).body("hello").send().await.unwrap();
    assert_eq!(r.status(), 201);
    let r = client().get(format!("http://{addr}/zarr/data/a")).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), 3 << 20);
}

#[tokio::test]
async fn a_request_over_the_time_limit_is_504() {
    let mut config = common::test_config();
    config.limits.request_timeout_seconds = 1;
    let (addr, _task) = start(config).await;
    let mut conn = put_waiting_for_body(addr, "slow", 10).await;
    conn.write_all(b"abc").await.unwrap();
    let started = Instant::now();
    let r = answer(conn).await;
    r.expect_error(504, "timeout");
    assert!(r.error_message().contains("limits.request_timeout_seconds"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Nothing was stored.
    let r = client().get(format!("http://{addr}/zarr/data/slow")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn uploads_past_their_limit_are_shed_with_retry_after_and_never_take_request_slots() {
    let mut config = common::test_config();
    config.limits.max_concurrent_requests = 2;
    config.limits.max_concurrent_uploads = 2;
    let (addr, _task) = start(config).await;
    let base = format!("http://{addr}");
    let c = client();

    // Two bodies arriving: the uploads budget is spent...
    let mut first = put_waiting_for_body(addr, "one", 3).await;
    let mut second = put_waiting_for_body(addr, "two", 3).await;
    let started = Instant::now();
    let r = Reply::from_response(c.put(format!("{base}/zarr/data/three")).body("abc").send().await.unwrap()).await;
    r.expect_error(503, "overloaded");
    assert_eq!(r.must_header("retry-after"), "1");
    assert!(r.error_message().contains("limits.max_concurrent_uploads"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(2), "shedding must not queue");
    // ... but not the request slots: reads (more than the two slots, one
    // after the other and at once) are served.
    for _ in 0..4 {
        assert_eq!(c.get(format!("{base}/zarr/data/one")).send().await.unwrap().status(), 404);
    }
    let gets = (0..2).map(|_| c.get(format!("{base}/zarr/data/")).send());
    for r in futures::future::join_all(gets).await {
        assert_eq!(r.unwrap().status(), 200);
    }
    assert_eq!(c.get(format!("{base}/healthz")).send().await.unwrap().status(), 200);

    // Once their bodies are whole, they are served.
    first.write_all(b"one").await.unwrap();
    answer(first).await.expect_status(201);
    let r = c.get(format!("{base}/zarr/data/one")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    second.write_all(b"two").await.unwrap();
    answer(second).await.expect_status(201);
    // And the uploads budget is free again.
    let r = c.put(format!("{base}/zarr/data/three")).body("abc").send().await.unwrap();
    assert_eq!(r.status(), 201);
}

#[tokio::test]
async fn document_bodies_over_max_body_bytes_are_413() {
    let mut config = common::test_config();
    config.limits.max_body_bytes = 1024;
    let (addr, _task) = start(config).await;
    let base = format!("http://{addr}");
    let c = client();
    let propfind = reqwest::Method::from_bytes(b"PROPFIND").unwrap();

    let r = c.request(propfind.clone(), format!("{base}/zarr/data/")).body(vec![b' '; 2048]).send().await.unwrap();
    let r = Reply::from_response(r).await;
    r.expect_error(413, "payload_too_large");
    assert!(r.error_message().contains("limits.max_body_bytes"), "{r}");
    let r = c
        .request(propfind, format!("{base}/zarr/data/"))
        .header("depth", "1")
        .body(vec![b' '; 100])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 207);
    // Array data is bounded by max_put_bytes instead.
    let r = c.put(format!("{base}/zarr/data/k")).body(vec![0u8; 4096]).send().await.unwrap();
    assert_eq!(r.status(), 201);
    // With a length: refused before the handler runs.
    let r = c.put(format!("{base}/api/v1/attributes/data/a")).body(vec![b'x'; 2048]).send().await.unwrap();
    let r = Reply::from_response(r).await;
    r.expect_error(413, "payload_too_large");
    assert!(r.error_message().contains("limits.max_body_bytes"), "{r}");
    // Chunked, without a length: the extractor's limit.
    let chunks = futures::stream::iter((0..4).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 512])));
    let r = c
        .put(format!("{base}/api/v1/attributes/data/a"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // The REST API's documents (an attribute update here) under the limit pass.
    let r = c
        .put(format!("{base}/api/v1/nodes/data/a"))
        .header("content-type", "application/json")
        .body(r#"{"zarr_format": 3, "node_type": "group"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let attributes = format!(r#"{{"note": "{}"}}"#, "x".repeat(1000 - 12));
    assert_eq!(attributes.len(), 1000);
    let r = c
        .put(format!("{base}/api/v1/attributes/data/a"))
        .header("content-type", "application/json")
        .body(attributes)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = Reply::from_response(c.get(format!("{base}/api/v1/attributes/data/a")).send().await.unwrap()).await;
    assert_eq!(r.json()["note"].as_str().map(str::len), Some(1000 - 12), "{r}");
}

#[tokio::test]
async fn two_hundred_slow_clients_do_not_stop_a_normal_one_and_are_cut_off() {
    const SLOW: usize = 200;
    let mut config = common::test_config();
    config.limits.header_read_timeout_seconds = 2;
    let (addr, _task) = start(config).await;
    let started = Instant::now();
    let mut slow = Vec::with_capacity(SLOW);
    for i in 0..SLOW {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        // Half of them send half a request head, never finished; the others nothing at all.
        if i % 2 == 0 {
            conn.write_all(format!("GET /zarr/data/{i} HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ").as_bytes())
                .await
                .unwrap();
        }
        slow.push(conn);
    }
    let c = client();
    let t = Instant::now();
    let r = c.put(format!("http://{addr}/zarr/data/normal")).body("ok").send().await.unwrap();
    assert_eq!(r.status(), 201);
    let r = c.get(format!("http://{addr}/zarr/data/normal")).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"ok");
    assert!(t.elapsed() < Duration::from_secs(2), "a normal client waited {:?}", t.elapsed());

    // Every slow connection is closed by the server after the header timeout.
    let closed = futures::future::join_all(slow.into_iter().map(|mut conn| async move {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }))
    .await;
    let open = closed.iter().filter(|c| !**c).count();
    assert_eq!(open, 0, "{open} slow connections still open 15 s after the header timeout");
    assert!(started.elapsed() >= Duration::from_millis(1800), "closed before the timeout: {:?}", started.elapsed());
}

/// Sends a keep-alive `GET /healthz` and reads the start of its answer.
async fn health_on(conn: &mut TcpStream, within: Duration) -> Option<String> {
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(within, conn.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

#[tokio::test]
async fn connections_past_max_connections_wait_to_be_accepted() {
    let mut config = common::test_config();
    config.limits.max_connections = 2;
    config.limits.header_read_timeout_seconds = 30;
    let (addr, _task) = start(config).await;
    // Two idle keep-alive connections take both slots.
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    for conn in [&mut a, &mut b] {
        let head = health_on(conn, Duration::from_secs(5)).await.expect("answered");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    // A third connects (the kernel's queue) but is not served...
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert_eq!(health_on(&mut c, Duration::from_millis(800)).await, None, "served past max_connections");
    // ... until one of the two closes.
    drop(a);
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await.expect("served once a slot freed");
    assert!(String::from_utf8_lossy(&buf[..n.unwrap()]).starts_with("HTTP/1.1 200"));
    // The open connection is still served.
    assert!(health_on(&mut b, Duration::from_secs(5)).await.is_some_and(|h| h.starts_with("HTTP/1.1 200")));
}

/// A client that announces a large document body and trickles it holds only
/// what it sent: the parse budget is taken once a body is whole. Before,
/// the share came from the announced length, so one stalled body announcing
/// `max_body_bytes` here held the whole `document_parse_budget_bytes` and
/// every other request with a document body waited until it timed out.
#[tokio::test]
async fn announced_document_bodies_hold_no_parse_budget() {
    let mut config = common::test_config();
    config.limits.max_body_bytes = 1 << 20;
    config.limits.document_parse_budget_bytes = 32 << 20;
    config.limits.body_read_timeout_seconds = 30;
    let (addr, _task) = start(config).await;
    let base = format!("http://{addr}");
    let c = client();
    let spec = r#"{"driver": "zarr3", "dtype": "uint8", "shape": [4]}"#;
    let r = c.put(format!("{base}/api/v1/nodes/data/a")).header("content-type", "application/json").body(spec);
    assert_eq!(r.send().await.unwrap().status(), 201);
    // Announces 1 MiB (32 MiB once parsed: the whole budget) and sends one byte.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /api/v1/attributes/data/a HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{{",
        1 << 20
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Other document requests are answered meanwhile.
    let quick = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build().unwrap();
    for _ in 0..3 {
        let r = quick
            .patch(format!("{base}/api/v1/attributes/data/a"))
            .header("content-type", "application/json")
            .body(r#"{"k": 1}"#)
            .send()
            .await
            .expect("a small document request is answered while a large body trickles");
        assert_eq!(r.status(), 200);
        let r = quick
            .post(format!("{base}/api/v1/data/data/a"))
            .header("content-type", "application/json")
            .body(r#"{"selection": "0:2", "format": "json"}"#)
            .send()
            .await
            .expect("a POST selection is answered while a large body trickles");
        assert_eq!(r.status(), 200);
    }
    drop(slow);
}
