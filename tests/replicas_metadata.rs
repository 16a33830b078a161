//! Metadata read-modify-writes across processes lose nothing (issue 17):
//! two servers (separate locks, as two processes have) over one in-memory
//! store with atomic conditional writes, whose reads are slow enough that
//! the servers' read-modify-writes overlap. Attribute merges of distinct
//! keys, resizes racing merges, consolidations racing merges, and creates
//! of one node: every acknowledged change is in the stored document, and
//! the store refused some conditional writes (so the race happened and the
//! retry, not luck, kept the changes).
//!
//! The same over one local directory written through two backends (as
//! two processes sharing it do: `If-Match` is checked under the
//! directory's `flock`). The same races through three zarrd processes on
//! Azurite are in `tests/python/test_replicas_metadata.py`.

mod common;
mod write_common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use write_common::{v3_meta, Shared, Slow, WriteServer};
use zarrd::storage::error::StorageResult;
use zarrd::storage::local::LocalBackend;
use zarrd::storage::object::ObjectBackend;
use zarrd::storage::{
    KeyPrefix, ListEntry, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, Storage, StorageError,
    StoreKey,
};

use common::Backend;

const TEST_TIMEOUT: Duration = Duration::from_secs(120);

async fn servers() -> (Arc<Slow>, Vec<Arc<WriteServer>>) {
    let slow = Slow::memory(Duration::from_millis(3));
    let shared = Arc::new(Shared::Memory(slow.clone()));
    let a = Arc::new(WriteServer::over(shared.clone(), Backend::Memory).await);
    let b = Arc::new(WriteServer::over(shared, Backend::Memory).await);
    (slow, vec![a, b])
}

async fn send(s: &WriteServer, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let rb = s.client.request(method, s.url(path)).header("content-type", "application/json");
    let r = rb.body(body.to_string()).send().await.expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The stored document, read from the storage (not through a server).
async fn stored(s: &WriteServer, key: &str) -> Value {
    let r = s.get(&format!("/zarr/data/{key}")).await;
    assert_eq!(r.status, 200, "{key}: {r}");
    serde_json::from_slice(&r.body).expect("json")
}

/// `n` attribute merges of distinct keys (`{prefix}{i}`) on `node`, all at
/// once, alternating between the servers; each must be acknowledged.
async fn merges(servers: &[Arc<WriteServer>], node: &str, prefix: &str, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let s = servers[i % servers.len()].clone();
            let (node, key) = (node.to_string(), format!("{prefix}{i}"));
            tokio::spawn(async move {
                let (status, body) =
                    send(&s, "PATCH", &format!("/api/v1/attributes/data/{node}"), &json!({key: i})).await;
                assert_eq!(status, 200, "merge {i}: {body}");
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("merge task");
    }
}

fn missing(attrs: &Value, prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).filter(|k| attrs.get(k).is_none()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_merges_through_two_servers_all_land() {
    let (slow, servers) = servers().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        servers[0].create("a", &v3_meta("uint8", &[8], &[4], None)).await;
        let group = json!({"zarr_format": 2, "attributes": {"kept": 1}});
        assert_eq!(send(&servers[0], "PUT", "/api/v1/nodes/data/g2", &group).await.0, 201);
        merges(&servers, "a", "k", 64).await;
        merges(&servers, "g2", "k", 64).await;
        let v3 = stored(&servers[0], "a/zarr.json").await;
        assert_eq!(missing(&v3["attributes"], "k", 64), Vec::<String>::new(), "v3 merges lost");
        assert_eq!(v3["shape"], json!([8]));
        let v2 = stored(&servers[0], "g2/.zattrs").await;
        assert_eq!(missing(&v2, "k", 64), Vec::<String>::new(), "v2 merges lost");
        assert_eq!(v2["kept"], json!(1));
        let refused = slow.refused.load(Ordering::Relaxed);
        println!("128 merges through two servers: 0 lost, {refused} conditional writes refused and retried");
        assert!(refused > 0, "the servers' merges never overlapped; the test proves nothing");
    })
    .await
    .expect("the test finishes in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resizes_and_consolidations_racing_merges_lose_nothing() {
    let (slow, servers) = servers().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        servers[0].create("r", &v3_meta("uint8", &[100], &[10], None)).await;
        let resizer = {
            let s = servers[1].clone();
            tokio::spawn(async move {
                for k in 1..=16u64 {
                    let (status, body) =
                        send(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [100 + k], "expand_only": true}))
                            .await;
                    assert_eq!(status, 200, "resize {k}: {body}");
                }
            })
        };
        merges(&servers, "r", "m", 48).await;
        resizer.await.expect("resizer");
        let doc = stored(&servers[0], "r/zarr.json").await;
        assert_eq!(doc["shape"], json!([116]), "a merge wrote back an older shape");
        assert_eq!(missing(&doc["attributes"], "m", 48), Vec::<String>::new(), "resizes lost merges");

        let group = json!({"zarr_format": 3, "node_type": "group"});
        assert_eq!(send(&servers[0], "PUT", "/api/v1/nodes/data/g", &group).await.0, 201);
        servers[0].create("g/x", &v3_meta("uint8", &[4], &[2], None)).await;
        let consolidator = {
            let servers = servers.clone();
            tokio::spawn(async move {
                for k in 0..12 {
                    let (status, body) =
                        send(&servers[k % 2], "POST", "/api/v1/consolidate/data/g", &json!(null)).await;
                    assert_eq!(status, 200, "consolidate {k}: {body}");
                }
            })
        };
        merges(&servers, "g", "c", 48).await;
        consolidator.await.expect("consolidator");
        let doc = stored(&servers[0], "g/zarr.json").await;
        assert_eq!(missing(&doc["attributes"], "c", 48), Vec::<String>::new(), "consolidations lost merges");
        assert!(doc["consolidated_metadata"]["metadata"]["x"].is_object(), "a merge dropped the consolidation: {doc}");
        assert!(slow.refused.load(Ordering::Relaxed) > 0, "nothing raced");
    })
    .await
    .expect("the test finishes in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_of_one_node_through_two_servers_have_one_winner() {
    let (_slow, servers) = servers().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let tasks: Vec<_> = (0..16u64)
            .map(|i| {
                let s = servers[usize::try_from(i % 2).unwrap()].clone();
                tokio::spawn(async move {
                    // Parents `p` and `p/q` are created on the way by whichever create gets there first.
                    let doc = v3_meta("uint8", &[i + 1], &[1], None);
                    send(&s, "PUT", "/api/v1/nodes/data/p/q/a", &doc).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            let (status, body) = t.await.expect("create task");
            match status {
                201 => winners.push(i as u64),
                409 => assert_eq!(body["error"]["code"], "already_exists", "{body}"),
                other => panic!("create {i}: {other} {body}"),
            }
        }
        assert_eq!(winners.len(), 1, "winners: {winners:?}");
        assert_eq!(stored(&servers[0], "p/q/a/zarr.json").await["shape"], json!([winners[0] + 1]));
        for parent in ["p", "p/q"] {
            assert_eq!(stored(&servers[0], &format!("{parent}/zarr.json")).await["node_type"], "group");
        }
    })
    .await
    .expect("the test finishes in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_merges_through_two_servers_on_one_directory_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let backend = || Arc::new(LocalBackend::new(dir.path().to_path_buf()).unwrap()) as Arc<dyn Storage>;
    // Two backends on the directory (no lock of zarrd's shared between them), reads slowed so
    // that the servers' read-modify-writes overlap.
    let (slow_a, slow_b) =
        (Slow::over(backend(), Duration::from_millis(3)), Slow::over(backend(), Duration::from_millis(3)));
    let a = Arc::new(WriteServer::over(Arc::new(Shared::Memory(slow_a.clone())), Backend::File).await);
    let b = Arc::new(WriteServer::over(Arc::new(Shared::Memory(slow_b.clone())), Backend::File).await);
    let servers = vec![a, b];
    tokio::time::timeout(TEST_TIMEOUT, async {
        servers[0].create("a", &v3_meta("uint8", &[8], &[4], None)).await;
        merges(&servers, "a", "k", 64).await;
        let doc = stored(&servers[1], "a/zarr.json").await;
        assert_eq!(missing(&doc["attributes"], "k", 64), Vec::<String>::new(), "merges lost on a shared directory");
        let refused = slow_a.refused.load(Ordering::Relaxed) + slow_b.refused.load(Ordering::Relaxed);
        println!("64 merges through two servers on one directory: 0 lost, {refused} conditional writes refused");
        assert!(refused > 0, "the servers' merges never overlapped; the test proves nothing");
    })
    .await
    .expect("the test finishes in time");
}

/// Attribute merges through one server do not make slice writes through
/// the other start over until they give up: a write re-plans only when the
/// array's layout changed, not its attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slice_writes_racing_attribute_merges_all_land() {
    let (_slow, servers) = servers().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        servers[0].create("w", &v3_meta("uint8", &[64], &[4], None)).await;
        let writer = {
            let s = servers[1].clone();
            tokio::spawn(async move {
                for i in 0..16u8 {
                    let path = format!("/api/v1/data/data/w?sel={}:{}", i * 4, i * 4 + 4);
                    let r = s.put(&path, "application/octet-stream", vec![i + 1; 4]).await;
                    assert_eq!(r.status, 204, "write {i}: {r}");
                }
            })
        };
        let only_a = vec![servers[0].clone()];
        for round in 0..8 {
            merges(&only_a, "w", &format!("r{round}-"), 8).await;
        }
        writer.await.expect("writer");
        let got = servers[0].get("/api/v1/data/data/w?format=raw").await;
        let want: Vec<u8> = (0..16u8).flat_map(|i| [i + 1; 4]).collect();
        assert_eq!(got.body, want);
    })
    .await
    .expect("the test finishes in time");
}

/// A store whose first create of each `zarr.json` takes effect but is
/// reported as refused, as when the store's answer is lost and the storage
/// client's retry of the create is refused because the first one landed.
#[derive(Debug)]
struct AnswerLost {
    inner: Arc<dyn Storage>,
    lost: std::sync::Mutex<std::collections::HashSet<String>>,
}

#[async_trait::async_trait]
impl Storage for AnswerLost {
    async fn read(&self, key: &StoreKey, request: &ReadRequest) -> StorageResult<ReadOutcome> {
        self.inner.read(key, request).await
    }
    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        self.inner.head(key).await
    }
    async fn put(&self, key: &StoreKey, body: bytes::Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        let first = key.name() == "zarr.json" && self.lost.lock().unwrap().insert(key.to_string());
        let r = self.inner.put(key, body, condition).await;
        if first && *condition == PutCondition::IfAbsent && r.is_ok() {
            return Err(StorageError::AlreadyExists { key: key.to_string() });
        }
        r
    }
    async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
        self.inner.delete(key).await
    }
    async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>> {
        self.inner.list(prefix).await
    }
    async fn list_recursive(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>> {
        self.inner.list_recursive(prefix, limit).await
    }
    async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool> {
        self.inner.is_prefix(key).await
    }
    async fn probe(&self) -> StorageResult<()> {
        self.inner.probe().await
    }
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_answers_created() {
    let memory = Arc::new(ObjectBackend::new(Arc::new(object_store::memory::InMemory::new()), "").unwrap());
    let storage = Arc::new(AnswerLost { inner: memory, lost: std::sync::Mutex::default() });
    let s = WriteServer::over(Arc::new(Shared::Memory(storage)), Backend::Memory).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        // The array and its parent group: each first write landed, its answer "lost".
        let (status, body) = send(&s, "PUT", "/api/v1/nodes/data/g/a", &v3_meta("uint8", &[4], &[2], None)).await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(stored(&s, "g/a/zarr.json").await["shape"], json!([4]));
        // Another create of it is refused: it exists now.
        let (status, body) = send(&s, "PUT", "/api/v1/nodes/data/g/a", &v3_meta("uint8", &[4], &[2], None)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("already_exists")));
        // A create that finds another document than it asked for is refused too.
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {"mine": 1}});
        let (status, _) = send(&s, "PUT", "/api/v1/nodes/data/h", &group).await;
        assert_eq!(status, 201);
        let other = json!({"zarr_format": 3, "node_type": "group", "attributes": {"mine": 2}});
        assert_eq!(send(&s, "PUT", "/api/v1/nodes/data/h", &other).await.0, 409);
    })
    .await
    .expect("the test finishes in time");
}
