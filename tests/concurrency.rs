//! No lost updates: 32 concurrent writers, each writing its own elements
//! into regions that share every chunk (plain and sharded arrays), end with
//! every element written — through the slice endpoint on one server (memory,
//! file and, when configured, S3 mounts), through two servers over one store
//! (whose only protection is the conditional write and its retry), and
//! through the raw key protocol with `If-Match` retries.
//!
//! Every writer has its own HTTP client (its own connections); every loop is
//! bounded in count and the whole test in time.
//!
//! The two-server test runs over an in-memory store (object_store's, whose
//! conditional update is atomic: the same `PutMode::Update` path S3, GCS and
//! Azure take), not over the harness's moto server: moto checks `If-Match`
//! and stores the object in separate steps without a lock, so under
//! concurrent conditional PUTs it loses updates itself.

mod common;
mod write_common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Backend;
use write_common::{le32, reply, v3_meta, Shared, Slow, WriteServer};

const WRITERS: u64 = 32;
const ROWS: u64 = 32;
const COLS: u64 = 64;
/// Row blocks each writer writes, one request each.
const BLOCKS: u64 = 4;
const TEST_TIMEOUT: Duration = Duration::from_secs(240);

/// The value writer `w` stores at row `r`.
fn value(w: u64, r: u64) -> u32 {
    u32::try_from(w * 1000 + r / (ROWS / BLOCKS) + 1).unwrap()
}

/// Writer `w` owns the columns `w, w + 32`: every chunk (16 or 8 columns
/// wide) is shared by 8 or 16 writers. It writes them one row block at a
/// time, in an order of its own, to `servers[w % len]`.
async fn writers(servers: &[Arc<WriteServer>], path: &str) {
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let servers: Vec<Arc<WriteServer>> = servers.to_vec();
        let path = path.to_string();
        tasks.push(tokio::spawn(async move {
            let client = common::client();
            let rows_per = ROWS / BLOCKS;
            for i in 0..BLOCKS {
                let k = (i + w) % BLOCKS;
                // Half the writers on each server: every chunk gets writes through both.
                let s = &servers[usize::try_from(w % servers.len() as u64).unwrap()];
                let cols = COLS / WRITERS;
                let data: Vec<u32> =
                    (k * rows_per..(k + 1) * rows_per).flat_map(|r| std::iter::repeat_n(value(w, r), 2)).collect();
                assert_eq!(data.len() as u64, rows_per * cols);
                let url = s.url(&format!(
                    "/api/v1/data/data/{path}?sel={}:{},{w}::{WRITERS}",
                    k * rows_per,
                    (k + 1) * rows_per
                ));
                let resp = client
                    .put(url)
                    .header("content-type", "application/octet-stream")
                    .body(le32(&data))
                    .send()
                    .await
                    .expect("request");
                reply(resp).await.expect_status(204);
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer task");
    }
}

fn expected() -> Vec<u32> {
    (0..ROWS).flat_map(|r| (0..COLS).map(move |c| value(c % WRITERS, r))).collect()
}

async fn check(s: &WriteServer, path: &str) {
    let got = s.read_u32(path).await;
    let want = expected();
    let lost: Vec<(u64, u64)> = (0..ROWS * COLS)
        .filter(|&i| got[usize::try_from(i).unwrap()] != want[usize::try_from(i).unwrap()])
        .map(|i| (i / COLS, i % COLS))
        .collect();
    assert!(
        lost.is_empty(),
        "{path} on {:?}: {} elements lost, first {:?}",
        s.backend,
        lost.len(),
        &lost[..lost.len().min(8)]
    );
}

async fn create_arrays(s: &WriteServer) {
    s.create("plain", &v3_meta("uint32", &[ROWS, COLS], &[8, 16], None)).await;
    s.create("sharded", &v3_meta("uint32", &[ROWS, COLS], &[16, 32], Some(&[8, 8]))).await;
}

async fn slice_writers_share_chunks(backend: Backend) {
    let Some(s) = WriteServer::start(backend, "concurrent-slices").await else { return };
    let s = Arc::new(s);
    tokio::time::timeout(TEST_TIMEOUT, async {
        create_arrays(&s).await;
        for path in ["plain", "sharded"] {
            writers(std::slice::from_ref(&s), path).await;
            check(&s, path).await;
        }
    })
    .await
    .expect("the test finishes in time");
}

#[tokio::test]
async fn slice_writers_share_chunks_memory() {
    slice_writers_share_chunks(Backend::Memory).await;
}

#[tokio::test]
async fn slice_writers_share_chunks_file() {
    slice_writers_share_chunks(Backend::File).await;
}

#[tokio::test]
async fn slice_writers_share_chunks_s3() {
    slice_writers_share_chunks(Backend::S3).await;
}

/// Two servers (separate locks, as two processes have) over one store with
/// real conditional writes, whose reads are slow enough that the two
/// servers' read-modify-writes of a chunk overlap: only If-Match and the
/// retry keep every update (without them this test loses updates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_store() {
    let slow = Slow::memory(Duration::from_millis(2));
    let shared = Arc::new(Shared::Memory(slow.clone()));
    let a = Arc::new(WriteServer::over(shared.clone(), Backend::Memory).await);
    let b = Arc::new(WriteServer::over(shared, Backend::Memory).await);
    tokio::time::timeout(TEST_TIMEOUT, async {
        create_arrays(&a).await;
        for path in ["plain", "sharded"] {
            let before = slow.refused.load(Ordering::Relaxed);
            writers(&[a.clone(), b.clone()], path).await;
            check(&a, path).await;
            let refused = slow.refused.load(Ordering::Relaxed) - before;
            println!("{path}: {refused} conditional writes refused and retried");
            assert!(refused > 0, "{path}: the servers' read-modify-writes never overlapped; the test proves nothing");
        }
    })
    .await
    .expect("the test finishes in time");
}

/// The raw key protocol: each client reads the one chunk with its ETag,
/// sets its own element, and writes back with `If-Match` (or
/// `If-None-Match: *` when there is no chunk yet), retrying on 412.
async fn raw_key_writers(backend: Backend) {
    const ATTEMPTS: u32 = 2000;
    let Some(s) = WriteServer::start(backend, "raw-if-match").await else { return };
    let s = Arc::new(s);
    let conflicts = Arc::new(AtomicU32::new(0));
    tokio::time::timeout(TEST_TIMEOUT, async {
        s.create("raw", &v3_meta("uint32", &[WRITERS], &[WRITERS], None)).await;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let (s, conflicts) = (s.clone(), conflicts.clone());
            tasks.push(tokio::spawn(async move {
                let client = common::client();
                let url = s.url("/zarr/data/raw/c/0");
                for attempt in 0..ATTEMPTS {
                    let got = reply(client.get(&url).send().await.expect("get")).await;
                    let (mut chunk, condition) = match got.status {
                        404 => (vec![0u8; usize::try_from(WRITERS * 4).unwrap()], ("if-none-match", "*".to_string())),
                        200 => (got.body.clone(), ("if-match", got.must_header("etag").to_string())),
                        _ => panic!("GET: {got}"),
                    };
                    let at = usize::try_from(w * 4).unwrap();
                    chunk[at..at + 4].copy_from_slice(&u32::try_from(w + 1).unwrap().to_le_bytes());
                    let put = client.put(&url).header(condition.0, condition.1).body(chunk).send().await.expect("put");
                    let put = reply(put).await;
                    match put.status {
                        201 | 204 => return,
                        412 => {
                            conflicts.fetch_add(1, Ordering::Relaxed);
                            let pause = (w * 7 + u64::from(attempt) * 13) % 5;
                            tokio::time::sleep(Duration::from_millis(pause)).await;
                        }
                        _ => panic!("PUT: {put}"),
                    }
                }
                panic!("writer {w}: no successful conditional PUT in {ATTEMPTS} attempts");
            }));
        }
        for t in tasks {
            t.await.expect("writer task");
        }
        let got = s.read_u32("raw").await;
        let want: Vec<u32> = (1..=u32::try_from(WRITERS).unwrap()).collect();
        assert_eq!(got, want, "every writer's element is present");
    })
    .await
    .expect("the test finishes in time");
    let conflicts = conflicts.load(Ordering::Relaxed);
    println!("{backend:?}: {conflicts} conditional PUTs were refused and retried");
    assert!(conflicts > 0, "32 clients creating one chunk: all but one must have been refused at first");
}

#[tokio::test]
async fn raw_key_writers_with_if_match_memory() {
    raw_key_writers(Backend::Memory).await;
}

#[tokio::test]
async fn raw_key_writers_with_if_match_file() {
    raw_key_writers(Backend::File).await;
}
