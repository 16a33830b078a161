//! The engine's key-value reader and writer ([`ChunkSource`], [`ChunkSink`])
//! over a mount, rooted at an array's path.
//!
//! Keys the engine passes are relative to the array (`c/0/1`, `0.1`); this
//! adapter prefixes the array's path, maps byte ranges onto the storage
//! layer's and classifies storage errors by meaning. A missing key (or a
//! range asked of a missing key) is `Ok(None)`: the engine reads it as the
//! fill value. Writes go through [`Mount::put`] / [`Mount::delete`], which
//! serialise writes to one key inside this process.
//!
//! Versioned reads answer the object's ETag, and conditional writes map
//! onto [`PutCondition::IfMatch`] / [`PutCondition::IfAbsent`], so the
//! engine's read-modify-write is as safe across processes as the backend's
//! conditional puts are (README, "Writing slices").

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::node::NodePath;
use crate::storage::request::ByteRange;
use crate::storage::{Mount, PutCondition, ReadRequest, StorageError, StoreKey};
use crate::zarr::byte_range::ByteRangeRequest;
use crate::zarr::region::{ChunkSink, ChunkSource, Expected, SourceError, Versioned};

/// An array's keys in a mount.
#[derive(Debug, Clone)]
pub struct MountChunkStore {
    mount: Arc<Mount>,
    path: NodePath,
}

impl MountChunkStore {
    /// The store for the array at `path` in `mount`.
    #[must_use]
    pub fn new(mount: Arc<Mount>, path: NodePath) -> Self {
        Self { mount, path }
    }

    fn key(&self, rel: &str) -> Result<StoreKey, SourceError> {
        self.path.key(rel).map_err(|e| SourceError::Store(e.to_string()))
    }
}

fn classify(e: StorageError) -> SourceError {
    match e {
        StorageError::PermissionDenied { .. } => SourceError::PermissionDenied(e.to_string()),
        StorageError::PreconditionFailed { .. } | StorageError::AlreadyExists { .. } => {
            SourceError::Precondition(e.to_string())
        }
        StorageError::RangeNotSatisfiable { .. } => SourceError::RangeNotSatisfiable(e.to_string()),
        StorageError::Conflict { .. } | StorageError::InvalidKey { .. } => SourceError::Refused(e.to_string()),
        _ => SourceError::Store(e.to_string()),
    }
}

fn to_storage_range(range: &ByteRangeRequest) -> Option<ByteRange> {
    match range {
        ByteRangeRequest::Bounded(r) if r.end > r.start => Some(ByteRange::Bounded { first: r.start, last: r.end - 1 }),
        // An empty bounded range: nothing to fetch (handled by the caller).
        ByteRangeRequest::Bounded(_) => None,
        ByteRangeRequest::Suffix(n) => Some(ByteRange::Suffix(*n)),
    }
}

#[async_trait]
impl ChunkSource for MountChunkStore {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        let key = self.key(key)?;
        let request = match &range {
            None => ReadRequest::default(),
            Some(r) => match to_storage_range(r) {
                Some(range) => ReadRequest { range: Some(range), ..ReadRequest::default() },
                None => {
                    // Zero bytes asked: still report whether the key exists.
                    return match self.mount.storage().head(&key).await {
                        Ok(_) => Ok(Some(Bytes::new())),
                        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
                        Err(e) => Err(classify(e)),
                    };
                }
            },
        };
        match self.mount.storage().read(&key, &request).await {
            Ok(outcome) => Ok(Some(outcome.body)),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
            // A range starting past the end of the object: the bytes that
            // exist (none), as the trait promises.
            Err(StorageError::RangeNotSatisfiable { .. }) if matches!(range, Some(ByteRangeRequest::Bounded(_))) => {
                Ok(Some(Bytes::new()))
            }
            Err(e) => Err(classify(e)),
        }
    }

    async fn get_versioned(&self, key: &str) -> Result<Option<Versioned>, SourceError> {
        let key = self.key(key)?;
        match self.mount.storage().read(&key, &ReadRequest::default()).await {
            Ok(outcome) => Ok(Some(Versioned { bytes: outcome.body, version: Some(outcome.meta.etag) })),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }
}

/// The longest pause before retrying a conflicting read-modify-write.
const MAX_CONFLICT_PAUSE_US: u64 = 20_000;

#[async_trait]
impl ChunkSink for MountChunkStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        let key = self.key(key)?;
        self.mount.put(&key, bytes, &PutCondition::None).await.map(|_| ()).map_err(classify)
    }

    async fn put_if(&self, key: &str, bytes: Bytes, expected: Option<&Expected>) -> Result<(), SourceError> {
        let key = self.key(key)?;
        let condition = match expected {
            None => PutCondition::None,
            Some(Expected::Absent) => PutCondition::IfAbsent,
            Some(Expected::Version(etag)) => PutCondition::IfMatch(vec![etag.clone()]),
        };
        self.mount.put(&key, bytes, &condition).await.map(|_| ()).map_err(classify)
    }

    async fn conflict_pause(&self, attempt: u32) {
        // Exponential with full jitter, so two processes that collided do
        // not collide again in lock step.
        let cap = (500u64 << attempt.min(8)).min(MAX_CONFLICT_PAUSE_US);
        let noise = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()) ^ (u64::from(attempt) << 20));
        tokio::time::sleep(std::time::Duration::from_micros(noise % cap.max(1))).await;
    }

    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        let key = self.key(key)?;
        match self.mount.delete(&key).await {
            Ok(()) | Err(StorageError::NotFound { .. }) => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MountSpec;

    fn memory_mount() -> Arc<Mount> {
        let spec = MountSpec::from_url("memory://");
        Arc::new(Mount::build("m", &spec).expect("memory mount"))
    }

    #[tokio::test]
    async fn reads_ranges_and_reports_missing_keys_as_none() {
        let mount = memory_mount();
        let store = MountChunkStore::new(mount.clone(), NodePath::new("a/b").unwrap());
        assert_eq!(store.get("c/0", None).await.unwrap(), None);
        store.put("c/0", Bytes::from_static(b"0123456789")).await.unwrap();
        let key = StoreKey::new("a/b/c/0").unwrap();
        assert!(mount.storage().head(&key).await.is_ok(), "written under the array's path");
        assert_eq!(store.get("c/0", None).await.unwrap().unwrap(), &b"0123456789"[..]);
        let r = store.get("c/0", Some(ByteRangeRequest::Bounded(2..5))).await.unwrap().unwrap();
        assert_eq!(r, &b"234"[..]);
        let r = store.get("c/0", Some(ByteRangeRequest::Suffix(3))).await.unwrap().unwrap();
        assert_eq!(r, &b"789"[..]);
        let r = store.get("c/0", Some(ByteRangeRequest::Bounded(8..20))).await.unwrap().unwrap();
        assert_eq!(r, &b"89"[..], "a bounded range past the end answers the bytes that exist");
        let r = store.get("c/0", Some(ByteRangeRequest::Bounded(50..60))).await.unwrap().unwrap();
        assert!(r.is_empty());
        assert_eq!(store.get("c/1", Some(ByteRangeRequest::Suffix(3))).await.unwrap(), None);
        store.delete("c/0").await.unwrap();
        store.delete("c/0").await.unwrap();
        assert_eq!(store.get("c/0", None).await.unwrap(), None);
    }
}
