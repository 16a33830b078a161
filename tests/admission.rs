//! Fair admission (issue 12, finding 12): 1,100 uploads trickling one byte
//! every 2 s must not starve other clients. Bodies still arriving count
//! against `limits.max_concurrent_uploads`, not the request slots, so reads
//! keep being answered 200 (not 503) while they are held, and the server's
//! memory stays bounded meanwhile.

mod common;

use std::time::{Duration, Instant};

use common::{client, serve_app};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

/// More than the default `limits.max_concurrent_requests` (1,024).
const UPLOADS: usize = 1_100;

/// This process's resident set (the server runs in it), in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_served_while_a_thousand_uploads_trickle() {
    // The defaults, but for the test's small body limits.
    let config = common::test_config();
    assert_eq!(config.limits.max_concurrent_requests, 1024, "the test assumes the default");
    let app = App::with_mounts(config, vec![Mount::build("data", &MountSpec::from_url("memory://")).unwrap()]);
    let (addr, _task) = serve_app(app).await;
    let c = client();
    let r = c.put(format!("http://{addr}/zarr/data/present")).body("here").send().await.unwrap();
    assert_eq!(r.status(), 201);
    let before = rss_kib();

    // Each upload announces 100 bytes and sends one.
    let started = Instant::now();
    let mut uploads = Vec::with_capacity(UPLOADS);
    for i in 0..UPLOADS {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let head = format!("PUT /zarr/data/up{i} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 100\r\n\r\nx");
        conn.write_all(head.as_bytes()).await.unwrap();
        uploads.push(conn);
    }
    assert!(started.elapsed() < Duration::from_secs(30), "opening took {:?}", started.elapsed());
    // Let the server read every head.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Three rounds, 2 s apart: every held upload gets one more byte, and a
    // burst of reads must all be answered 200 at once.
    let mut answered = 0;
    for round in 0..3 {
        for conn in &mut uploads {
            // Uploads past the uploads budget were refused and may be closed.
            let _ = conn.write_all(b"x").await;
        }
        let reads = (0..20).map(|_| {
            let c = c.clone();
            async move {
                let t = Instant::now();
                let r = c.get(format!("http://{addr}/zarr/data/present")).send().await.unwrap();
                (r.status().as_u16(), t.elapsed())
            }
        });
        for (status, took) in futures::future::join_all(reads).await {
            assert_eq!(status, 200, "round {round}: a read got {status} while {UPLOADS} uploads trickle");
            assert!(took < Duration::from_secs(2), "round {round}: a read took {took:?}");
            answered += 1;
        }
        let r = c.get(format!("http://{addr}/api/v1/mounts")).send().await.unwrap();
        assert_eq!(r.status(), 200, "round {round}: the REST API");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert_eq!(answered, 60);
    // Memory: the held uploads cost their connections, not request slots'
    // worth of work. 1,100 connections (both ends, in this process) stay
    // well under 100 MiB.
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 100 * 1024, "RSS grew by {grown} KiB while {UPLOADS} uploads trickled");
    eprintln!("RSS grew by {grown} KiB with {UPLOADS} trickling uploads held");
    drop(uploads);
}
