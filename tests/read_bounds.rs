//! Resource bounds of the read path (issue 12, findings 5 and 6): reads of
//! many small chunks are planned lazily and counted up front
//! (`limits.max_chunks_per_request`), 32-dimensional arrays plan without
//! blowing up, `/healthz` answers while the heaviest allowed reads run, and
//! decoded-chunk reads of missing chunks stream the fill value instead of
//! materialising the chunk.
//!
//! The tests that measure memory read this process's peak RSS (`VmHWM`,
//! reset through `/proc/self/clear_refs`), and the one that checks an
//! abandoned read stops reads its CPU time: the server runs in-process, and
//! every test here holds [`SERIAL`] so no other test of this binary
//! allocates or works meanwhile.

mod common;

use std::time::{Duration, Instant};

use common::{Backend, TestServer};
use futures::StreamExt;
use tokio::sync::Mutex;

/// One test at a time: the memory figures are the process's.
static SERIAL: Mutex<()> = Mutex::const_new(());

fn v3_array(shape: &[u64], chunks: &[u64], data_type: &str, fill: &str) -> String {
    format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":{shape:?},"data_type":"{data_type}",
 "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":{chunks:?}}}}},
 "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
 "fill_value":{fill},"codecs":[{{"name":"bytes","configuration":{{"endian":"little"}}}}],"attributes":{{}}}}"#
    )
}

fn sharded_array(shape: &[u64], shard: &[u64], inner: &[u64]) -> String {
    format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":{shape:?},"data_type":"uint8",
 "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":{shard:?}}}}},
 "chunk_key_encoding":{{"name":"default"}},"fill_value":5,
 "codecs":[{{"name":"sharding_indexed","configuration":{{"chunk_shape":{inner:?},
   "codecs":[{{"name":"bytes"}}],"index_codecs":[{{"name":"bytes","configuration":{{"endian":"little"}}}}]}}}}]}}"#
    )
}

fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.trim_start_matches(':').split_whitespace().next()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} not in /proc/self/status"))
}

/// Resets the peak RSS to the current RSS; the current RSS.
fn reset_peak() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM");
    proc_status_kib("VmRSS")
}

/// Streams a GET's body, counting bytes (never holding it whole); the status,
/// the length and the first `keep` bytes.
async fn get_streamed(s: &TestServer, path: &str, keep: usize) -> (u16, u64, Vec<u8>) {
    let resp = s.client.get(s.url(path)).timeout(Duration::from_secs(120)).send().await.expect("send");
    let status = resp.status().as_u16();
    let mut body = resp.bytes_stream();
    let (mut n, mut head) = (0u64, Vec::new());
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("body");
        if head.len() < keep {
            head.extend_from_slice(&chunk[..chunk.len().min(keep - head.len())]);
        }
        n += chunk.len() as u64;
    }
    (status, n, head)
}

fn config(max_chunks: u64) -> zarrd::config::Config {
    let mut c = common::test_config();
    c.limits.max_chunks_per_request = max_chunks;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touched_chunks_are_counted_before_any_work() {
    let _serial = SERIAL.lock().await;
    let s = TestServer::start_with(Backend::Memory, "chunk_count", config(1000)).await.unwrap();
    let huge = 1u64 << 62;
    s.put("/zarr/data/tiny/zarr.json", v3_array(&[huge, huge], &[1, 1], "uint8", "3")).await.expect_status(201);
    // 100 x 11 chunks: one too many.
    let r = s.get("/api/v1/data/data/tiny?sel=0:100,0:11").await;
    r.expect_error(413, "selection_too_large");
    let msg = r.error_message();
    assert!(msg.contains("1100") && msg.contains("max_chunks_per_request = 1000"), "{msg}");
    // Exactly at the limit: read, every element the fill value.
    let r = s.get("/api/v1/data/data/tiny?sel=0:100,0:10").await;
    r.expect_status(200);
    assert_eq!(r.body, vec![3u8; 1000]);
    // Strided and listed selections count the chunks they touch, not the span.
    s.put("/zarr/data/wide/zarr.json", v3_array(&[huge, huge], &[10, 10], "uint8", "3")).await.expect_status(201);
    s.get("/api/v1/data/data/wide?sel=0:100000:7,0:20").await.expect_error(413, "selection_too_large");
    let r = s.get("/api/v1/data/data/wide?sel=0:10000:1000,[1,2,3,95,11]").await;
    r.expect_status(200);
    assert_eq!(r.body.len(), 50);
    // Coordinate selections: the distinct chunks among the points.
    let pts: Vec<String> = (0..1001).map(|i| (i * 10).to_string()).collect();
    let list = pts.join(",");
    let r = s.get(&format!("/api/v1/data/data/wide?sel=[{list}],[{list}]&mode=coordinate")).await;
    r.expect_error(413, "selection_too_large");
    assert!(r.error_message().contains("1001 chunks"), "{}", r.error_message());
    let list = pts[..1000].join(",");
    s.get(&format!("/api/v1/data/data/wide?sel=[{list}],[{list}]&mode=coordinate")).await.expect_status(200);
    // Sharded arrays count inner chunks.
    s.put("/zarr/data/sh/zarr.json", sharded_array(&[huge, huge], &[64, 64], &[2, 2])).await.expect_status(201);
    let r = s.get("/api/v1/data/data/sh?sel=0:64,0:64").await;
    r.expect_error(413, "selection_too_large");
    assert!(r.error_message().contains("1024 inner chunks"), "{}", r.error_message());
    let r = s.get("/api/v1/data/data/sh?sel=0:62,0:64").await;
    r.expect_status(200);
    assert_eq!(r.body, vec![5u8; 62 * 64]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_dimensions_plan_without_blowing_up() {
    let _serial = SERIAL.lock().await;
    let s = TestServer::start_with(Backend::Memory, "dims32", config(1 << 16)).await.unwrap();
    let shape = vec![2u64; 32];
    s.put("/zarr/data/d32/zarr.json", v3_array(&shape, &[1; 32], "uint8", "9")).await.expect_status(201);
    let before = reset_peak();
    // The whole array: 2^32 elements (4 GiB, within max_selection_bytes),
    // 2^32 chunks: refused up front, naming both numbers.
    let r = s.get("/api/v1/data/data/d32").await;
    r.expect_error(413, "selection_too_large");
    let msg = r.error_message();
    assert!(msg.contains("4294967296 chunks") && msg.contains("65536"), "{msg}");
    // Within the limits: 16 dimensions fixed, 2^16 chunks of one element.
    let sel = vec!["1"; 16].join(",");
    let t = Instant::now();
    let r = s.get(&format!("/api/v1/data/data/d32?sel={sel}")).await;
    r.expect_status(200);
    assert_eq!(r.body, vec![9u8; 1 << 16]);
    // One element written, read back through a 32-dimensional selection.
    let mut coords = vec!["0"; 32];
    coords[31] = "1";
    let key = format!("/zarr/data/d32/c/{}", coords.join("/"));
    s.put(&key, vec![42u8]).await.expect_status(201);
    let r = s.get(&format!("/api/v1/data/data/d32?sel={}", vec!["0"; 31].join(","))).await;
    r.expect_status(200);
    assert_eq!(r.body, vec![9, 42]);
    let rise = proc_status_kib("VmHWM").saturating_sub(before);
    println!("32 dimensions: 2^16 chunks read in {:?}, peak RSS rise {rise} KiB", t.elapsed());
    assert!(rise < 256 * 1024, "peak RSS rose by {rise} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_answer_while_the_heaviest_reads_run() {
    let _serial = SERIAL.lock().await;
    // The heaviest reads these limits allow: 2^16 chunks of one element
    // each, every one missing, filled with a non-zero value (so every chunk
    // means work), three at once.
    let s = TestServer::start_with(Backend::Memory, "healthz", config(1 << 16)).await.unwrap();
    s.put("/zarr/data/t/zarr.json", v3_array(&[1 << 40, 1 << 40], &[1, 1], "uint16", "513")).await.expect_status(201);
    let before = reset_peak();
    let started = Instant::now();
    let reads: Vec<_> = (0..3u64)
        .map(|i| {
            let (client, url) = (s.client.clone(), s.url(&format!("/api/v1/data/data/t?sel={i}:{},0:256", i + 256)));
            tokio::spawn(async move {
                let r = client.get(url).timeout(Duration::from_secs(300)).send().await.expect("read");
                assert_eq!(r.status(), 200);
                let body = r.bytes().await.expect("body");
                assert_eq!(body.len(), 2 << 16);
                assert!(body.chunks(2).all(|c| c == [1, 2]), "fill value 513");
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    let mut checks = 0;
    // Bounded: at most 600 checks (~5 minutes), stops when the reads end.
    while checks < 600 && reads.iter().any(|r| !r.is_finished()) {
        let t = Instant::now();
        let r = s.client.get(s.url("/healthz")).timeout(Duration::from_secs(30)).send().await.expect("healthz");
        assert_eq!(r.status(), 200);
        worst = worst.max(t.elapsed());
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for r in reads {
        r.await.expect("read task");
    }
    let rise = proc_status_kib("VmHWM").saturating_sub(before);
    println!(
        "3 reads of 2^16 chunks: {:?}; {checks} health checks, slowest {worst:?}; peak RSS rise {rise} KiB",
        started.elapsed()
    );
    assert!(checks > 0);
    assert!(worst < Duration::from_secs(1), "/healthz took {worst:?} while reads ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_decoded_chunks_stream_the_fill_value() {
    let _serial = SERIAL.lock().await;
    let s = TestServer::start(Backend::Memory, "fill_chunk").await.unwrap();
    // One chunk of 256 MiB, missing.
    let side = 16384u64;
    s.put("/zarr/data/big/zarr.json", v3_array(&[side, side], &[side, side], "uint8", "7")).await.expect_status(201);
    let before = reset_peak();
    let (status, n, head) = get_streamed(&s, "/api/v1/chunks/data/big?coords=0,0", 1 << 20).await;
    let rise = proc_status_kib("VmHWM").saturating_sub(before);
    assert_eq!(status, 200);
    assert_eq!(n, side * side);
    assert!(head.iter().all(|&b| b == 7));
    println!("a missing 256 MiB chunk streamed; peak RSS rise {rise} KiB");
    // The chunk is 256 MiB: filling it (and cloning it) would show here.
    assert!(rise < 128 * 1024, "peak RSS rose by {rise} KiB");
    // npy and a stored chunk: shared, not copied.
    let (status, n, head) = get_streamed(&s, "/api/v1/chunks/data/big?coords=0,0&format=npy", 16).await;
    assert_eq!(status, 200);
    assert!(n > side * side && head.starts_with(b"\x93NUMPY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planning_huge_reads_leaves_the_workers_free() {
    let _serial = SERIAL.lock().await;
    // 8 GiB selections (within max_selection_bytes) of 1 GiB chunks: the
    // split into slabs must not walk the 2^33 positions on an async worker.
    let s = TestServer::start(Backend::Memory, "plan_off_workers").await.unwrap();
    s.put("/zarr/data/long/zarr.json", v3_array(&[1 << 40], &[1 << 30], "uint8", "0")).await.expect_status(201);
    let reads: Vec<_> = (0..2)
        .map(|i| {
            let (client, url) =
                (s.client.clone(), s.url(&format!("/api/v1/data/data/long?sel={i}:{}", (1u64 << 33) + i)));
            tokio::spawn(async move {
                let r = client.get(url).timeout(Duration::from_secs(120)).send().await.expect("read");
                assert_eq!(r.status(), 200);
                let mut body = r.bytes_stream();
                let first = body.next().await.expect("a first piece").expect("body");
                assert!(first.iter().all(|&b| b == 0));
                // Dropped here: the server stops producing.
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        let r = s.client.get(s.url("/healthz")).timeout(Duration::from_secs(60)).send().await.expect("healthz");
        assert_eq!(r.status(), 200);
        worst = worst.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for r in reads {
        r.await.expect("read task");
    }
    println!("two 8 GiB reads starting: slowest health check {worst:?}");
    assert!(worst < Duration::from_secs(1), "/healthz took {worst:?} while reads were planned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_chunks_stay_within_the_memory_formula() {
    let _serial = SERIAL.lock().await;
    // README, "Memory bounds": read ≈ 3 × read_slab_bytes + cores × (stored
    // + decoded unit) + max(4 × cores, 8) × stored unit + the selection's
    // lists, plus the shared chunk cache. Here: 1 MiB slabs, a 4 MiB cache,
    // units of 16 bytes, no lists.
    let mut c = config(1 << 20);
    c.limits.read_slab_bytes = 1 << 20;
    c.cache.chunk_bytes = 4 << 20;
    let s = TestServer::start_with(Backend::Memory, "formula", c).await.unwrap();
    s.put("/zarr/data/m/zarr.json", v3_array(&[1 << 30, 1 << 30], &[4, 4], "uint8", "17")).await.expect_status(201);
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get) as u64;
    let unit = 16u64;
    let formula_kib = (3 * (1 << 20) + cores * 2 * unit + (4 * cores).max(8) * unit + (4 << 20)) / 1024;
    let before = reset_peak();
    let t = Instant::now();
    // 2048 x 2048 elements (4 MiB), 2^18 chunks, all missing: fill value.
    let (status, n, head) = get_streamed(&s, "/api/v1/data/data/m?sel=0:2048,0:2048", 4096).await;
    let rise = proc_status_kib("VmHWM").saturating_sub(before);
    assert_eq!(status, 200);
    assert_eq!(n, 2048 * 2048);
    assert!(head.iter().all(|&b| b == 17));
    println!("2^18 chunks, 4 MiB in {:?}: peak RSS rise {rise} KiB, formula {formula_kib} KiB", t.elapsed());
    assert!(rise < formula_kib, "peak RSS rose by {rise} KiB, the formula says {formula_kib} KiB");
}

/// numcodecs' vlen framing: a `u32` count, then per item a `u32` length and its bytes.
fn vlen(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = (items.len() as u32).to_le_bytes().to_vec();
    for it in items {
        out.extend_from_slice(&(it.len() as u32).to_le_bytes());
        out.extend_from_slice(it);
    }
    out
}

fn string_array(shape: &[u64], chunks: &[u64], fill: &str) -> String {
    format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":{shape:?},"data_type":"string",
 "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":{chunks:?}}}}},
 "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
 "fill_value":"{fill}","codecs":[{{"name":"vlen-utf8"}}],"attributes":{{}}}}"#
    )
}

fn vlen_config() -> zarrd::config::Config {
    let mut c = config(1 << 20);
    c.limits.max_selection_bytes = 8 << 20;
    c.limits.read_slab_bytes = 64 << 10;
    c.limits.max_put_bytes = 16 << 20;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variable_length_reads_count_their_real_bytes() {
    let _serial = SERIAL.lock().await;
    let s = TestServer::start_with(Backend::Memory, "vlen_bytes", vlen_config()).await.unwrap();
    let before = reset_peak();
    // A 65,000-byte fill value (the limit is 64 KiB), every chunk missing:
    // 20,000 elements are 1.3 GB of JSON text (3.67 GB peak before the fix).
    let fill = "f".repeat(65_000);
    s.put("/zarr/data/fill/zarr.json", string_array(&[20_000], &[1000], &fill)).await.expect_status(201);
    let r = s.get("/api/v1/data/data/fill?sel=0:20000&format=json").await;
    r.expect_error(413, "selection_too_large");
    let msg = r.error_message();
    assert!(msg.contains("limits.max_selection_bytes = 8388608") && msg.contains("JSON text"), "{msg}");
    let r = s.get("/api/v1/chunks/data/fill?coords=3&format=json").await;
    r.expect_error(413, "selection_too_large");
    assert!(r.error_message().contains("limits.max_selection_bytes"), "{}", r.error_message());
    // Within the limit: the fill value, 100 times (6.5 MB of text).
    let r = s.get("/api/v1/data/data/fill?sel=0:100&format=json").await;
    r.expect_status(200);
    let v: Vec<String> = serde_json::from_slice(&r.body).expect("JSON");
    assert!(v.len() == 100 && v.iter().all(|x| *x == fill));
    // Stored strings far larger than a slab (64 KiB here) are read whole,
    // a slab of fewer elements at a time; missing ones are the fill value.
    s.put("/zarr/data/big/zarr.json", string_array(&[8], &[4], "-")).await.expect_status(201);
    let strings: Vec<Vec<u8>> =
        (0..4u8).map(|i| format!("{}\"\n{}", i, "é".repeat(150_000 + usize::from(i))).into_bytes()).collect();
    s.put("/zarr/data/big/c/0", vlen(&strings)).await.expect_status(201);
    let r = s.get("/api/v1/data/data/big?format=json").await;
    r.expect_status(200);
    let v: Vec<String> = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(v.len(), 8);
    for (i, want) in strings.iter().enumerate() {
        assert_eq!(v[i].as_bytes(), &want[..], "element {i}");
    }
    assert!(v[4..].iter().all(|x| x == "-"));
    let r = s.get("/api/v1/chunks/data/big?coords=0&format=json").await;
    r.expect_status(200);
    let v: Vec<String> = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(v[3].as_bytes(), &strings[3][..]);
    let rise = proc_status_kib("VmHWM").saturating_sub(before);
    println!("variable-length reads: peak RSS rise {rise} KiB");
    assert!(rise < 256 * 1024, "peak RSS rose by {rise} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variable_length_text_past_the_limit_cuts_a_started_answer() {
    let _serial = SERIAL.lock().await;
    let s = TestServer::start_with(Backend::Memory, "vlen_cut", vlen_config()).await.unwrap();
    // 40 strings of 300 kB, one per chunk: 12 MB of text, the limit is 8 MiB.
    s.put("/zarr/data/many/zarr.json", string_array(&[40], &[1], "")).await.expect_status(201);
    for i in 0..40 {
        s.put(&format!("/zarr/data/many/c/{i}"), vlen(&[vec![b'a' + (i % 26) as u8; 300_000]]))
            .await
            .expect_status(201);
    }
    // The first 25 are within the limit: an ordinary answer.
    let r = s.get("/api/v1/data/data/many?sel=0:25&format=json").await;
    r.expect_status(200);
    let v: Vec<String> = serde_json::from_slice(&r.body).expect("JSON");
    assert!(v.len() == 25 && v[24].len() == 300_000);
    // All of it: the answer has started when the limit is passed, so the
    // body is cut short and the transfer fails (never a short, valid body).
    let resp = s.client.get(s.url("/api/v1/data/data/many?format=json")).send().await.expect("send");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let (mut n, mut failed) = (0usize, false);
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => n += c.len(),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the body ended without an error after {n} bytes");
    assert!(n > 300_000 && n <= 8 << 20, "{n} bytes before the cut");
}

/// Sends a GET on a connection with a small receive buffer, and reads nothing.
async fn stalled_get(s: &TestServer, path: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut conn = socket.connect(s.addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    tokio::io::AsyncWriteExt::write_all(&mut conn, request.as_bytes()).await.expect("send");
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_are_cut_off_and_others_are_served() {
    let _serial = SERIAL.lock().await;
    let mut c = config(1 << 20);
    c.limits.read_slab_bytes = 1 << 20;
    // Room for three large answers' shares (4 MiB each), and a 1 s stall timeout.
    c.limits.read_answer_budget_bytes = 12 << 20;
    c.limits.send_stall_timeout_seconds = 1;
    let s = TestServer::start_with(Backend::Memory, "stall", c).await.unwrap();
    s.put("/zarr/data/big/zarr.json", v3_array(&[1 << 30], &[1 << 20], "uint8", "3")).await.expect_status(201);
    let big = "/api/v1/data/data/big?sel=0:268435456";
    let mut stalled = Vec::new();
    for _ in 0..3 {
        stalled.push(stalled_get(&s, big).await);
    }
    // The budget is taken; small answers and health checks need none of it.
    let t = Instant::now();
    let r = s.get("/api/v1/data/data/big?sel=10:20").await;
    r.expect_status(200);
    assert_eq!(r.body, vec![3u8; 10]);
    s.get("/healthz").await.expect_status(200);
    assert!(t.elapsed() < Duration::from_secs(2), "small read and health check took {:?}", t.elapsed());
    // After the stall timeout the connections are closed: what the kernel held, then the end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (i, conn) in stalled.iter_mut().enumerate() {
        let mut n = 0usize;
        let mut buf = vec![0u8; 1 << 20];
        let ended = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match tokio::io::AsyncReadExt::read(conn, &mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => n += k,
                }
            }
        })
        .await;
        assert!(ended.is_ok() && n < 64 << 20, "connection {i}: {n} bytes, ended: {}", ended.is_ok());
    }
    // Their shares are back: a large answer read at once gets everything.
    let (status, n, _) = get_streamed(&s, "/api/v1/data/data/big?sel=0:33554432", 0).await;
    assert_eq!((status, n), (200, 32 << 20));
}

/// This process's CPU time so far (user + system, all threads), from
/// `/proc/self/stat` in clock ticks (100 per second on Linux).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which is in parentheses): utime is the
    // 14th field of the line, stime the 15th.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A slice read whose client goes away stops working at once, not after
/// the slab in progress: the slab's task is aborted and its queued units
/// are never decoded. The array is the attack's shape: one shard whose
/// 8192 index entries all point at one zstd blob of 8 MiB of zeros, read
/// one element per inner chunk, so one 8 KiB slab stands for 64 GiB of
/// decoding. The client gives up after 0.5 s; the process must then be
/// idle, where before the slab went on for seconds on every core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_read_stops_decoding() {
    let _serial = SERIAL.lock().await;
    let (inner_rows, cols, inners) = (2048u64, 4096u64, 8192u64);
    let mut config = common::test_config();
    config.cache.chunk_bytes = 0;
    config.limits.max_put_bytes = 1 << 20;
    let s = TestServer::start_with(Backend::Memory, "abandoned_read", config).await.expect("server");
    let meta = format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":[{rows},{cols}],"data_type":"uint8",
 "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":[{rows},{cols}]}}}},
 "chunk_key_encoding":{{"name":"default"}},"fill_value":0,
 "codecs":[{{"name":"sharding_indexed","configuration":{{"chunk_shape":[{inner_rows},{cols}],
   "codecs":[{{"name":"bytes"}},{{"name":"zstd","configuration":{{"level":1,"checksum":false}}}}],
   "index_codecs":[{{"name":"bytes","configuration":{{"endian":"little"}}}}]}}}}]}}"#,
        rows = inner_rows * inners
    );
    s.put("/zarr/data/a/zarr.json", meta).await.expect_status(201);
    let blob = zstd::bulk::compress(&vec![0u8; (inner_rows * cols) as usize], 1).unwrap();
    let mut shard = blob.clone();
    for _ in 0..inners {
        shard.extend_from_slice(&0u64.to_le_bytes());
        shard.extend_from_slice(&(blob.len() as u64).to_le_bytes());
    }
    s.put("/zarr/data/a/c/0/0", shard).await.expect_status(201);
    // The shape is right: a read of two inner chunks answers their last elements.
    let r = s
        .get(&format!("/api/v1/data/data/a?sel={}:{}:{inner_rows},-1&format=raw", inner_rows - 1, 2 * inner_rows))
        .await;
    r.expect_status(200);
    assert_eq!(r.body, [0, 0]);
    let path = format!("/api/v1/data/data/a?sel={}::{inner_rows},-1&format=raw", inner_rows - 1);
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_millis(500)).build().unwrap();
    let started = Instant::now();
    let gave_up = client.get(s.url(&path)).send().await;
    assert!(gave_up.is_err(), "the read should take longer than the client waits: {gave_up:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Let the units already on a thread finish, then watch the process.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = cpu_ticks();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu_ticks() - before;
    assert!(spent < 20, "{spent} ticks (1/100 s) of CPU in 2 s after the client left: the read went on");
}
