//! Helpers of the slice-write tests: a zarrd whose `data` mount can also be
//! read directly (a second mount over the same storage: a shared in-memory
//! store, the same directory, or the same S3 prefix), array metadata, `.npy`
//! bodies and a dense model to compare with.

#![allow(dead_code)] // Each test crate uses a different part of this module.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};
use zarrd::service::array::source::MountChunkStore;
use zarrd::service::node::{self, Node, NodePath};
use zarrd::service::App;
use zarrd::storage::object::ObjectBackend;
use zarrd::storage::{
    KeyPrefix, ListEntry, Mount, MountSpec, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, Storage,
    StorageError, StorageResult, StoreKey,
};
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::region::read_region;
use zarrd::zarr::subset::ArraySubset;

use crate::common::{self, client, serve_app, Backend, Reply, S3_BUCKET, S3_ENDPOINT_VAR};

/// A store that answers reads a pause after reading (so read-modify-writes of
/// concurrent writers overlap) and counts the conditional writes it
/// refused.
#[derive(Debug)]
pub struct Slow {
    inner: Arc<dyn Storage>,
    pause: Duration,
    pub refused: AtomicU32,
}

impl Slow {
    /// An in-memory store whose reads take `pause`.
    pub fn memory(pause: Duration) -> Arc<Self> {
        let store = Arc::new(object_store::memory::InMemory::new());
        let inner = Arc::new(ObjectBackend::new(store, "").expect("memory backend"));
        Arc::new(Self { inner, pause, refused: AtomicU32::new(0) })
    }

    /// `inner` (any backend) whose reads take `pause`.
    pub fn over(inner: Arc<dyn Storage>, pause: Duration) -> Arc<Self> {
        Arc::new(Self { inner, pause, refused: AtomicU32::new(0) })
    }
}

#[async_trait]
impl Storage for Slow {
    async fn read(&self, key: &StoreKey, request: &ReadRequest) -> StorageResult<ReadOutcome> {
        // The pause after the read: the value is already stale when it arrives.
        let r = self.inner.read(key, request).await;
        tokio::time::sleep(self.pause).await;
        r
    }
    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        self.inner.head(key).await
    }
    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        let r = self.inner.put(key, body, condition).await;
        if matches!(r, Err(StorageError::PreconditionFailed { .. } | StorageError::AlreadyExists { .. })) {
            self.refused.fetch_add(1, Ordering::Relaxed);
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

/// Where a test's data lives; mounts over it see the same keys.
pub enum Shared {
    /// One in-memory store behind every mount.
    Memory(Arc<dyn Storage>),
    /// A directory.
    File(tempfile::TempDir),
    /// An S3 prefix on the harness's server.
    S3(MountSpec),
}

impl Shared {
    /// Fresh storage for `backend`, or `None` when it is not configured.
    pub fn new(backend: Backend, test: &str) -> Option<Self> {
        match backend {
            Backend::Memory => {
                let store = Arc::new(object_store::memory::InMemory::new());
                Some(Self::Memory(Arc::new(ObjectBackend::new(store, "").expect("memory backend"))))
            }
            Backend::File => Some(Self::File(tempfile::tempdir().expect("tempdir"))),
            Backend::S3 => match std::env::var(S3_ENDPOINT_VAR) {
                Ok(endpoint) if !endpoint.is_empty() => Some(Self::S3(s3_spec(&endpoint, test))),
                _ => {
                    println!("{test}: S3 not configured ({S3_ENDPOINT_VAR} is not set); skipped");
                    None
                }
            },
        }
    }

    /// A mount named `name` over this storage.
    pub fn mount(&self, name: &str, read_only: bool) -> Mount {
        match self {
            Self::Memory(storage) => Mount::from_storage(name, "memory://", read_only, storage.clone()),
            Self::File(dir) => {
                let mut spec = MountSpec::from_url(&format!("file://{}", dir.path().display()));
                spec.read_only = read_only;
                Mount::build(name, &spec).expect("file mount")
            }
            Self::S3(spec) => {
                let mut spec = spec.clone();
                spec.read_only = read_only;
                Mount::build(name, &spec).expect("s3 mount")
            }
        }
    }
}

fn s3_spec(endpoint: &str, test: &str) -> MountSpec {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut spec = MountSpec::from_url(&format!("s3://{S3_BUCKET}/rust-{test}-{}-{nanos}", std::process::id()));
    let options = [
        ("endpoint", endpoint),
        ("allow_http", "true"),
        ("access_key_id", "testing"),
        ("secret_access_key", "testing"),
        ("region", "us-east-1"),
    ];
    spec.options = options.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect::<BTreeMap<_, _>>();
    spec
}

/// A running zarrd with a writable mount `data` and a read-only `ro` over
/// the same storage, and a mount of its own to check what was stored.
pub struct WriteServer {
    pub base: String,
    pub client: reqwest::Client,
    pub backend: Backend,
    pub reader: Arc<Mount>,
    pub shared: Arc<Shared>,
    _task: tokio::task::JoinHandle<()>,
}

impl WriteServer {
    /// Starts a server over `backend` (`None` when not configured).
    pub async fn start(backend: Backend, test: &str) -> Option<Self> {
        let shared = Arc::new(Shared::new(backend, test)?);
        Some(Self::over(shared, backend).await)
    }

    /// Another server over the same storage (a second zarrd process, as far
    /// as locks go: nothing but the storage is shared).
    pub async fn over(shared: Arc<Shared>, backend: Backend) -> Self {
        let mounts = vec![shared.mount("data", false), shared.mount("ro", true)];
        let (addr, task) = serve_app(App::with_mounts(common::test_config(), mounts)).await;
        let reader = Arc::new(shared.mount("check", true));
        Self { base: format!("http://{addr}"), client: client(), backend, reader, shared, _task: task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// PUT with a content type.
    pub async fn put(&self, path: &str, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        let rb = self.client.put(self.url(path)).header("content-type", content_type).body(body.into());
        reply(rb.send().await.expect("request failed")).await
    }

    /// PUT without a content type.
    pub async fn put_bare(&self, path: &str, body: impl Into<Vec<u8>>) -> Reply {
        let rb = self.client.put(self.url(path)).body(body.into());
        reply(rb.send().await.expect("request failed")).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        reply(self.client.get(self.url(path)).send().await.expect("request failed")).await
    }

    /// Creates an array from its `zarr.json` (or `.zarray` for v2) through
    /// the store protocol.
    pub async fn create(&self, path: &str, meta: &Value) {
        let name = if meta["zarr_format"] == 2 { ".zarray" } else { "zarr.json" };
        let key = if path.is_empty() { name.to_string() } else { format!("{path}/{name}") };
        let r = self.put(&format!("/zarr/data/{key}"), "application/json", meta.to_string()).await;
        assert!(r.status == 201 || r.status == 204, "creating {path}: {r}");
    }

    /// The whole array at `path`, read with the engine from the storage.
    pub async fn read_all(&self, path: &str) -> ChunkData {
        let path = NodePath::new(path).expect("path");
        let Node::Array(a) = node::open_in(self.reader.clone(), &path).await.expect("open") else {
            panic!("{path} is not an array");
        };
        let store = MountChunkStore::new(self.reader.clone(), path);
        read_region(&a.desc, &store, &ArraySubset::from_shape(&a.desc.shape)).await.expect("read")
    }

    /// The whole array of 2-byte elements.
    pub async fn read_u16(&self, path: &str) -> Vec<u16> {
        match self.read_all(path).await {
            ChunkData::Fixed(b) => b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect(),
            ChunkData::Variable(_) => panic!("not fixed-size"),
        }
    }

    /// The whole array of 4-byte elements.
    pub async fn read_u32(&self, path: &str) -> Vec<u32> {
        match self.read_all(path).await {
            ChunkData::Fixed(b) => b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ChunkData::Variable(_) => panic!("not fixed-size"),
        }
    }

    /// Whether a key exists in the storage.
    pub async fn exists(&self, key: &str) -> bool {
        let key = zarrd::storage::StoreKey::new(key).expect("key");
        self.reader.storage().head(&key).await.is_ok()
    }
}

/// Reads a whole response.
pub async fn reply(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let body = resp.bytes().await.expect("reading the response body").to_vec();
    Reply { status, headers, body }
}

/// A v3 array of `dtype` with regular chunks, the `bytes` codec (little
/// endian) and fill value 0; sharded when `inner` is given (inner chunks
/// `bytes`, index `bytes` + `crc32c` at the end).
#[must_use]
pub fn v3_meta(dtype: &str, shape: &[u64], chunks: &[u64], inner: Option<&[u64]>) -> Value {
    let bytes = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let codecs = match inner {
        None => json!([bytes]),
        Some(inner) => json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner,
            "codecs": [bytes],
            "index_codecs": [bytes, {"name": "crc32c"}],
            "index_location": "end"
        }}]),
    };
    json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": codecs, "attributes": {}
    })
}

/// An `.npy` (version 1.0) file.
#[must_use]
pub fn npy(descr: &str, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(header.len()).expect("short header").to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Little-endian bytes of `u16`s.
#[must_use]
pub fn le16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of `u32`s.
#[must_use]
pub fn le32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
