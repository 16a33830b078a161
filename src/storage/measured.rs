//! A [`Storage`] wrapper that measures every operation of the backend it
//! wraps: latency and errors by kind, per mount ([`StorageMetrics`]).
//!
//! Every mount's backend is wrapped ([`super::Mount::from_storage`]), so all
//! storage access is measured without the layers above knowing.
//!
//! Every operation also spends a unit of the task's cooperative budget
//! ([`tokio::task::coop::consume_budget`]) first. A local directory answers
//! small reads, heads and misses inline, and a memory mount answers
//! everything inline: without it, a loop of such operations (a pyramid
//! copying a large grid of missing chunks, a walk over many nodes) never
//! returned to its runtime, so it held an async worker for as long as it
//! ran and could not be cancelled (a black-box attack's finding). With it,
//! such a loop yields every 128 operations.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    KeyPrefix, ListEntry, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, Storage, StorageError,
    StorageResult, StoreKey,
};
use crate::metrics::{StorageMetrics, StorageOp};

/// See the module documentation.
#[derive(Debug)]
pub struct Measured {
    inner: Arc<dyn Storage>,
    metrics: Arc<StorageMetrics>,
}

impl Measured {
    /// Wraps `inner`, recording into `metrics`.
    #[must_use]
    pub fn new(inner: Arc<dyn Storage>, metrics: Arc<StorageMetrics>) -> Self {
        Self { inner, metrics }
    }

    fn record<T>(&self, op: StorageOp, start: Instant, result: StorageResult<T>) -> StorageResult<T> {
        let figures = self.metrics.op(op);
        figures.latency.observe(start.elapsed());
        if let Err(e) = &result {
            figures.error(e.kind());
        }
        result
    }
}

/// Spends a unit of the task's cooperative budget, yielding to the
/// runtime when it is spent (see the module documentation).
async fn turn() {
    tokio::task::coop::consume_budget().await;
}

/// Refuses a read whose body is shorter (or longer) than the object or
/// range it claims to be: a truncated transfer is a failed read, never data.
fn complete(key: &StoreKey, request: &ReadRequest, out: ReadOutcome) -> StorageResult<ReadOutcome> {
    if request.head_only {
        return Ok(out);
    }
    let expected = out.range.as_ref().map_or(out.meta.size, |r| r.end - r.start);
    if out.len() == expected {
        Ok(out)
    } else {
        Err(StorageError::Unavailable {
            reason: format!("{key}: the backend returned {} of {expected} bytes", out.len()),
        })
    }
}

#[async_trait]
impl Storage for Measured {
    async fn read(&self, key: &StoreKey, request: &ReadRequest) -> StorageResult<ReadOutcome> {
        turn().await;
        let start = Instant::now();
        let result = self.inner.read(key, request).await.and_then(|out| complete(key, request, out));
        // A streamed answer's later reads count their failures here too.
        let result = result.map(|out| ReadOutcome { tail: out.tail.map(|t| t.measured(self.metrics.clone())), ..out });
        self.record(StorageOp::Read, start, result)
    }

    /// Counted as a read (the bytes follow outside the backend; the file
    /// counts its failed reads as this operation's errors).
    async fn open_file(&self, key: &StoreKey) -> StorageResult<Option<super::direct::OpenFile>> {
        turn().await;
        let start = Instant::now();
        let open = self.inner.open_file(key).await.map(|f| f.map(|f| f.measured(self.metrics.clone())));
        self.record(StorageOp::Read, start, open)
    }

    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::Head, start, self.inner.head(key).await)
    }

    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::Put, start, self.inner.put(key, body, condition).await)
    }

    async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::Delete, start, self.inner.delete(key).await)
    }

    async fn delete_many(&self, keys: &[StoreKey]) -> StorageResult<()> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::DeleteMany, start, self.inner.delete_many(keys).await)
    }

    async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::List, start, self.inner.list(prefix).await)
    }

    async fn list_limited(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListEntry>, bool)> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::List, start, self.inner.list_limited(prefix, limit).await)
    }

    async fn list_names_limited(
        &self,
        prefix: &KeyPrefix,
        limit: usize,
    ) -> StorageResult<(Vec<super::ListName>, bool)> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::List, start, self.inner.list_names_limited(prefix, limit).await)
    }

    async fn list_recursive(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::ListRecursive, start, self.inner.list_recursive(prefix, limit).await)
    }

    async fn visit_recursive(&self, prefix: &KeyPrefix, visit: super::Visitor) -> StorageResult<super::Visitor> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::ListRecursive, start, self.inner.visit_recursive(prefix, visit).await)
    }

    async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::IsPrefix, start, self.inner.is_prefix(key).await)
    }

    async fn probe(&self) -> StorageResult<()> {
        turn().await;
        let start = Instant::now();
        self.record(StorageOp::Probe, start, self.inner.probe().await)
    }

    fn opens_files(&self) -> bool {
        self.inner.opens_files()
    }

    fn cache_usage(&self) -> Option<super::CacheUsage> {
        self.inner.cache_usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::object::ObjectBackend;

    #[tokio::test]
    async fn operations_and_errors_are_counted() {
        let backend = ObjectBackend::new(Arc::new(object_store::memory::InMemory::new()), "").expect("backend");
        let metrics = Arc::new(StorageMetrics::default());
        let s = Measured::new(Arc::new(backend), Arc::clone(&metrics));
        let key = StoreKey::new("a/b").expect("key");
        assert!(s.read(&key, &ReadRequest::default()).await.is_err());
        s.put(&key, Bytes::from_static(b"x"), &PutCondition::None).await.expect("put");
        s.read(&key, &ReadRequest::default()).await.expect("read");
        assert_eq!(metrics.op(StorageOp::Read).latency.count(), 2);
        assert_eq!(metrics.op(StorageOp::Read).errors("not_found"), 1);
        assert_eq!(metrics.op(StorageOp::Put).latency.count(), 1);
        assert_eq!(metrics.op(StorageOp::Put).errors("not_found"), 0);
    }

    /// A loop of operations that a backend answers inline (misses in a
    /// local directory, anything in memory) returns to its runtime now and
    /// then: another task on the same single-threaded runtime runs before
    /// the loop ends.
    #[tokio::test(flavor = "current_thread")]
    async fn loops_of_inline_operations_yield() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = crate::storage::local::LocalBackend::new(dir.path().to_path_buf()).expect("local backend");
        let memory = ObjectBackend::new(Arc::new(object_store::memory::InMemory::new()), "").expect("backend");
        let backends: [Arc<dyn Storage>; 2] = [Arc::new(local), Arc::new(memory)];
        for backend in backends {
            let s = Arc::new(Measured::new(backend, Arc::new(StorageMetrics::default())));
            let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (flag, st) = (Arc::clone(&other_ran), Arc::clone(&s));
            let looping = tokio::spawn(async move {
                let key = StoreKey::new("missing/c/0").expect("key");
                let mut ops = 0u32;
                while ops < 10_000 && !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    assert!(st.head(&key).await.is_err());
                    ops += 1;
                }
                ops
            });
            let flag = Arc::clone(&other_ran);
            tokio::spawn(async move { flag.store(true, std::sync::atomic::Ordering::Relaxed) });
            let ops = looping.await.expect("loop");
            assert!(ops < 10_000, "{ops} operations ran before another task could");
        }
    }
}
