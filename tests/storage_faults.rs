//! A failing backend (issue 12, "What to build" 9): with faults injected by
//! `storage::fault::Faulty` under a real in-process server, the store
//! protocol and `/api/v1/data` answer a clear 503 (unavailable, a truncated
//! read) or 504 (timed out), never 200 with wrong data; and once the faults
//! stop, every acknowledged write reads back and no chunk is torn.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{client, serve_app, test_config, Reply};
use serde_json::{json, Value};
use zarrd::metrics::StorageOp;
use zarrd::service::App;
use zarrd::storage::fault::{Fault, FaultPlan, FaultRule, Faulty};
use zarrd::storage::local::LocalBackend;
use zarrd::storage::Mount;

const CHUNK: usize = 8;
const CHUNKS: usize = 8;

struct Server {
    base: String,
    plan: Arc<FaultPlan>,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(seed: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let plan = FaultPlan::seeded(seed);
        let local = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        let storage = Faulty::new(Arc::new(local), Arc::clone(&plan));
        let url = format!("file://{}", dir.path().display());
        let mount = Mount::from_storage("data", &url, false, Arc::new(storage));
        let (addr, _task) = serve_app(App::with_mounts(test_config(), vec![mount])).await;
        let s = Self { base: format!("http://{addr}"), plan, client: client(), _dir: dir };
        let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [CHUNK * CHUNKS], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {}});
        s.send("PUT", "/zarr/data/a/zarr.json", doc.to_string()).await.expect_status(201);
        s
    }

    async fn send(&self, method: &str, path: &str, body: impl Into<Vec<u8>>) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let rb = self.client.request(method, format!("{}{path}", self.base));
        let rb = if path.starts_with("/api/") { rb.header("content-type", "application/json") } else { rb };
        Reply::from_response(rb.body(body.into()).send().await.expect("request")).await
    }

    async fn write_chunk(&self, chunk: usize, value: u8) -> Reply {
        let sel = format!("{}:{}", chunk * CHUNK, (chunk + 1) * CHUNK);
        self.send("PUT", &format!("/api/v1/data/data/a?sel={sel}&format=json"), value.to_string()).await
    }

    async fn read_all(&self) -> Reply {
        self.send("GET", "/api/v1/data/data/a?format=json", Vec::new()).await
    }
}

#[tokio::test]
async fn store_protocol_answers_503_and_504_and_never_truncated_data() {
    let s = Server::start(1).await;
    s.send("PUT", "/zarr/data/k/obj", vec![7u8; 1000]).await.expect_status(201);

    s.plan.set(vec![FaultRule::new(Fault::Unavailable).ops(&[StorageOp::Read]).prefix("k/")]);
    s.send("GET", "/zarr/data/k/obj", Vec::new()).await.expect_error(503, "storage_unavailable");
    s.send("HEAD", "/zarr/data/k/obj", Vec::new()).await.expect_status(503);

    s.plan.set(vec![FaultRule::new(Fault::Timeout(Duration::from_millis(20))).prefix("k/")]);
    s.send("GET", "/zarr/data/k/obj", Vec::new()).await.expect_error(504, "storage_timeout");
    s.send("PUT", "/zarr/data/k/other", "x").await.expect_error(504, "storage_timeout");

    // A truncated transfer is a failed read, not 200 with 10 bytes.
    s.plan.set(vec![FaultRule::new(Fault::ShortRead(10)).ops(&[StorageOp::Read])]);
    s.send("GET", "/zarr/data/k/obj", Vec::new()).await.expect_error(503, "storage_unavailable");
    let r = s.client.get(format!("{}/zarr/data/k/obj", s.base)).header("Range", "bytes=0-99").send().await.unwrap();
    assert_eq!(r.status(), 503);

    s.plan.set(vec![FaultRule::new(Fault::Unavailable).ops(&[StorageOp::Put, StorageOp::Delete])]);
    s.send("PUT", "/zarr/data/k/obj", "new").await.expect_error(503, "storage_unavailable");
    s.send("DELETE", "/zarr/data/k/obj", Vec::new()).await.expect_error(503, "storage_unavailable");

    s.plan.set(vec![FaultRule::new(Fault::Unavailable).ops(&[StorageOp::List, StorageOp::ListRecursive])]);
    let r = s.client.get(format!("{}/zarr/data/k/", s.base)).header("Accept", "application/json").send().await.unwrap();
    assert_eq!(r.status(), 503);

    // Healthy again: nothing was changed by the refused calls.
    s.plan.clear();
    let r = s.send("GET", "/zarr/data/k/obj", Vec::new()).await;
    r.expect_status(200);
    assert_eq!(r.body, vec![7u8; 1000]);
    s.send("GET", "/zarr/data/k/other", Vec::new()).await.expect_status(404);
    assert!(s.plan.injected() >= 9, "{}", s.plan.injected());
}

#[tokio::test]
async fn data_api_answers_503_and_504_on_a_failing_backend() {
    let s = Server::start(2).await;
    s.write_chunk(0, 5).await.expect_status(204);

    // Every operation on the chunks (the metadata stays readable).
    for (fault, status, code) in [
        (Fault::Unavailable, 503, "storage_unavailable"),
        (Fault::ShortRead(1), 503, "storage_unavailable"),
        (Fault::Timeout(Duration::from_millis(20)), 504, "storage_timeout"),
    ] {
        s.plan.set(vec![FaultRule::new(fault.clone()).prefix("a/c/")]);
        let r = s.read_all().await;
        assert_eq!(r.status, status, "{fault:?}: {r}");
        assert_eq!(r.json()["error"]["code"], code, "{fault:?}: {r}");
    }
    // Slice writes keep the storage meaning too: unavailable is 503, a
    // timeout 504 (it was 503 while engine errors were strings).
    for (fault, status, code) in [
        (Fault::Unavailable, 503, "storage_unavailable"),
        (Fault::Timeout(Duration::from_millis(20)), 504, "storage_timeout"),
    ] {
        s.plan.set(vec![FaultRule::new(fault.clone()).ops(&[StorageOp::Put]).prefix("a/c/")]);
        let r = s.write_chunk(1, 9).await;
        assert_eq!(r.status, status, "{fault:?}: {r}");
        assert_eq!(r.json()["error"]["code"], code, "{fault:?}: {r}");
    }
    s.plan.clear();
    let r = s.read_all().await;
    r.expect_status(200);
    let got: Vec<u64> = serde_json::from_value(r.json()).unwrap();
    assert_eq!(&got[..CHUNK], &[5; CHUNK]);
    assert_eq!(&got[CHUNK..2 * CHUNK], &[0; CHUNK], "a refused write changed data");
}

/// Writers replace whole chunks while a third of the backend's writes fail
/// (before or after taking effect) and reads are slow: every acknowledged
/// write is there afterwards (or a later attempt whose outcome was unknown),
/// and every chunk holds one value throughout (never torn).
#[tokio::test]
async fn no_acknowledged_write_is_lost_and_no_chunk_is_torn() {
    let s = Arc::new(Server::start(3).await);
    s.plan.set(vec![
        FaultRule::new(Fault::Unavailable).ops(&[StorageOp::Put]).rate(0.2),
        FaultRule::new(Fault::LostReply).ops(&[StorageOp::Put]).rate(0.15),
        FaultRule::new(Fault::Latency(Duration::from_millis(2))).ops(&[StorageOp::Read, StorageOp::Head]).rate(0.5),
    ]);
    let mut tasks = Vec::new();
    for chunk in 0..CHUNKS {
        let s = Arc::clone(&s);
        tasks.push(tokio::spawn(async move {
            // (value, acknowledged) of every attempt, in order.
            let mut attempts = Vec::new();
            for round in 1..=12u8 {
                let value = u8::try_from(chunk).unwrap() * 16 + round;
                let r = s.write_chunk(chunk, value).await;
                assert!(r.status == 204 || r.status == 503, "chunk {chunk}: {r}");
                attempts.push((value, r.status == 204));
            }
            attempts
        }));
    }
    // Readers meanwhile: every chunk they see is uniform.
    for _ in 0..10 {
        let r = s.read_all().await;
        if r.status == 200 {
            let got: Vec<u64> = serde_json::from_value(r.json()).unwrap();
            for c in got.chunks(CHUNK) {
                assert!(c.iter().all(|v| *v == c[0]), "torn chunk seen: {c:?}");
            }
        } else {
            assert_eq!(r.status, 503, "{r}");
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.push(tokio::time::timeout(Duration::from_secs(60), t).await.unwrap().unwrap());
    }
    assert!(s.plan.injected() > 10, "too few faults to mean anything: {}", s.plan.injected());
    s.plan.clear();
    let r = s.read_all().await;
    r.expect_status(200);
    let got: Vec<u64> = serde_json::from_value::<Value>(r.json()).map(|v| serde_json::from_value(v).unwrap()).unwrap();
    let mut acknowledged = 0;
    for (chunk, attempts) in all.iter().enumerate() {
        let found = &got[chunk * CHUNK..(chunk + 1) * CHUNK];
        assert!(found.iter().all(|v| *v == found[0]), "chunk {chunk} torn: {found:?}");
        // The last acknowledged write, or an attempt after it whose outcome
        // was unknown (a lost reply takes effect).
        let last_ack = attempts.iter().rposition(|(_, ok)| *ok);
        acknowledged += attempts.iter().filter(|(_, ok)| *ok).count();
        let allowed: Vec<u64> = match last_ack {
            Some(i) => attempts[i..]
                .iter()
                .enumerate()
                .filter(|(j, _)| *j == 0 || !attempts[i + j].1)
                .map(|(_, a)| u64::from(a.0))
                .collect(),
            None => std::iter::once(0).chain(attempts.iter().map(|a| u64::from(a.0))).collect(),
        };
        assert!(allowed.contains(&found[0]), "chunk {chunk}: {} is not among {allowed:?} ({attempts:?})", found[0]);
    }
    assert!(acknowledged > CHUNKS * 4, "only {acknowledged} writes acknowledged");
}
