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
//! Versioned reads answer the object's ETag, conditional range reads map
//! onto `If-Match` (a shard's inner chunks read at its index's version),
//! and conditional writes map onto [`PutCondition::IfMatch`] /
//! [`PutCondition::IfAbsent`], so the engine's read-modify-write is as safe
//! across processes as the backend's conditional puts are (README,
//! "Writing slices").
//!
//! Errors keep their meaning both ways: [`classify`] turns a storage error
//! into the engine's [`SourceError`], and [`region_error`] turns the
//! engine's [`RegionError`] back into a service error naming the key in the
//! mount (an invalid key is a 400, a timeout a 504, a corrupt chunk a 502).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::service::node::NodePath;
use crate::service::ServiceError;
use crate::storage::request::ByteRange;
use crate::storage::{Mount, Preconditions, PutCondition, ReadRequest, StorageError, StoreKey};
use crate::zarr::byte_range::ByteRangeRequest;
use crate::zarr::region::{
    ChunkSink, ChunkSource, Direct, DirectUnit, Expected, RegionError, SizedParts, SourceError, Versioned,
};

/// An array's keys in a mount.
#[derive(Debug, Clone)]
pub struct MountChunkStore {
    mount: Arc<Mount>,
    path: NodePath,
    /// Reads are bulk reads (`ReadRequest::bulk`: they fill no cache).
    bulk: bool,
}

impl MountChunkStore {
    /// The store for the array at `path` in `mount`.
    #[must_use]
    pub fn new(mount: Arc<Mount>, path: NodePath) -> Self {
        Self { mount, path, bulk: false }
    }

    /// The same store reading in bulk: its reads fill no storage cache
    /// (a pyramid job, a large downsampled read).
    #[must_use]
    pub fn bulk(self) -> Self {
        Self { bulk: true, ..self }
    }

    /// A read of `range` (the whole object: `None`), bulk as the store is.
    fn request(&self, range: Option<ByteRange>) -> ReadRequest {
        ReadRequest { range, bulk: self.bulk, ..ReadRequest::default() }
    }

    fn key(&self, rel: &str) -> Result<StoreKey, SourceError> {
        self.path.key(rel).map_err(|e| SourceError::InvalidKey(e.to_string()))
    }

    /// The mount.
    #[must_use]
    pub fn mount(&self) -> &Arc<Mount> {
        &self.mount
    }

    /// The array's path in the mount.
    #[must_use]
    pub fn path(&self) -> &NodePath {
        &self.path
    }

    /// The key in the mount of `rel` (a key relative to the array), as
    /// messages name it (`rel` itself when it makes no valid key).
    #[must_use]
    pub fn full_key(&self, rel: &str) -> String {
        self.path.key(rel).map_or_else(|_| rel.to_owned(), |k| k.to_string())
    }
}

/// A storage error as the engine's, by meaning.
#[must_use]
pub fn classify(e: StorageError) -> SourceError {
    match e {
        StorageError::NotFound { .. } | StorageError::IsPrefix { .. } => SourceError::NotFound(e.to_string()),
        StorageError::PermissionDenied { .. } => SourceError::PermissionDenied(e.to_string()),
        StorageError::PreconditionFailed { .. }
        | StorageError::AlreadyExists { .. }
        | StorageError::NotModified { .. } => SourceError::Precondition(e.to_string()),
        StorageError::RangeNotSatisfiable { .. } => SourceError::RangeNotSatisfiable(e.to_string()),
        // The key is named again when it goes back ([`storage_error`]).
        StorageError::Conflict { reason, .. } => SourceError::Refused(reason),
        StorageError::InvalidKey { .. } => SourceError::InvalidKey(e.to_string()),
        StorageError::NotSupported { reason } => SourceError::NotSupported(reason),
        StorageError::Unavailable { reason } => SourceError::Unavailable(reason),
        StorageError::Timeout { reason } => SourceError::Timeout(reason),
        StorageError::TooLarge { size, limit, .. } => SourceError::too_large(size, limit),
    }
}

/// An engine error about `key` (in the mount) as a storage error again.
#[must_use]
pub fn storage_error(key: String, e: SourceError) -> StorageError {
    match e {
        SourceError::NotFound(_) => StorageError::NotFound { key },
        SourceError::PermissionDenied(reason) => StorageError::PermissionDenied { key, reason },
        SourceError::Precondition(reason) => StorageError::PreconditionFailed { key, reason },
        SourceError::Refused(reason) => StorageError::Conflict { key, reason },
        SourceError::InvalidKey(reason) => StorageError::InvalidKey { reason },
        SourceError::NotSupported(reason) => StorageError::NotSupported { reason },
        SourceError::Timeout(reason) => StorageError::Timeout { reason },
        // Reported as damaged data by `region_error` before it gets here.
        SourceError::TooLarge(reason) => StorageError::Unavailable { reason },
        SourceError::Unavailable(reason) => StorageError::Unavailable { reason },
        // A range the engine asked for that the value does not have: the
        // engine reports shards that are too short as corrupt itself.
        SourceError::RangeNotSatisfiable(reason) => StorageError::Unavailable { reason: format!("{key}: {reason}") },
    }
}

/// An engine error of a read or write on the array at `path`, as a service
/// error. The engine names chunks by their key inside the array (`c/0`);
/// messages name them by their key in the mount (`path/to/array/c/0`). A
/// read-modify-write that kept losing its conditional write is a
/// [`ServiceError::WriteConflict`].
#[must_use]
pub fn region_error(path: &NodePath, e: RegionError) -> ServiceError {
    let full = |key: String| path.key(&key).map_or(key, |k| k.to_string());
    match e {
        RegionError::Region(e) => ServiceError::InvalidSelection(format!("selection: {e}")),
        RegionError::Data(m) => ServiceError::BadRequest(format!("body: {m}")),
        RegionError::Source { key, source: SourceError::Precondition(reason) } => {
            ServiceError::WriteConflict { key: full(key), reason }
        }
        // The message names the key already (`invalid key `a/c/0`: ...`),
        // as a read that checks its key before the store does answers.
        RegionError::Source { source: SourceError::InvalidKey(reason), .. } => ServiceError::BadRequest(reason),
        // A stored value larger than any encoding of its chunk: damage.
        RegionError::Source { key, source: SourceError::TooLarge(reason) } => {
            ServiceError::CorruptChunk { key: full(key), reason }
        }
        RegionError::Source { key, source } => ServiceError::Storage(storage_error(full(key), source)),
        RegionError::Codec { key, source } => ServiceError::CorruptChunk { key: full(key), reason: source.to_string() },
        RegionError::Corrupt { key, reason } => ServiceError::CorruptChunk { key: full(key), reason },
        RegionError::Missing { key, unit } => ServiceError::MissingChunk(unit.describe(&full(key))),
        RegionError::Encode { key, source } => {
            ServiceError::Internal(format!("{}: encoding the updated chunk failed: {source}", full(key)))
        }
        RegionError::Internal(m) => ServiceError::Internal(m),
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
            None => self.request(None),
            Some(r) => match to_storage_range(r) {
                Some(range) => self.request(Some(range)),
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
        self.get_versioned_within(key, u64::MAX).await
    }

    /// The bound goes to the store with the read, which refuses a larger
    /// object from its size before reading any of it.
    async fn get_versioned_within(&self, key: &str, max: u64) -> Result<Option<Versioned>, SourceError> {
        let key = self.key(key)?;
        let request = ReadRequest { max_len: (max < u64::MAX).then_some(max), ..self.request(None) };
        match self.mount.storage().read(&key, &request).await {
            Ok(outcome) => Ok(Some(Versioned { bytes: outcome.body, version: Some(outcome.meta.etag) })),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    async fn get_range_versioned(&self, key: &str, range: ByteRangeRequest) -> Result<Option<Versioned>, SourceError> {
        let key = self.key(key)?;
        let request = self.request(to_storage_range(&range));
        match self.mount.storage().read(&key, &request).await {
            Ok(outcome) => Ok(Some(Versioned { bytes: outcome.body, version: Some(outcome.meta.etag) })),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
            // Nothing of the range exists: the bytes that exist (none).
            Err(StorageError::RangeNotSatisfiable { size: 0, .. }) => {
                Ok(Some(Versioned { bytes: Bytes::new(), version: None }))
            }
            Err(e) => Err(classify(e)),
        }
    }

    async fn get_range_if(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
        version: Option<&str>,
    ) -> Result<Option<Bytes>, SourceError> {
        let key = self.key(key)?;
        let request = ReadRequest {
            range: to_storage_range(&ByteRangeRequest::Bounded(range)),
            preconditions: Preconditions { if_match: version.map(|v| vec![v.to_owned()]), ..Default::default() },
            ..self.request(None)
        };
        match self.mount.storage().read(&key, &request).await {
            Ok(outcome) => Ok(Some(outcome.body)),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    /// A file of a local mount, opened confined as every read of it.
    async fn open_direct(&self, key: &str) -> Result<Direct, SourceError> {
        let key = self.key(key)?;
        match self.mount.storage().open_file(&key).await {
            Ok(Some(file)) => Ok(Direct::Open(Box::new(file))),
            Ok(None) => Ok(Direct::Unsupported),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(Direct::Missing),
            Err(e) => Err(classify(e)),
        }
    }

    /// The ranges read at once, each answering the object's size and ETag:
    /// parts of two versions are a precondition failure (the engine reads
    /// the chunk again whole).
    async fn get_ranges_sized(
        &self,
        key: &str,
        ranges: &[std::ops::Range<u64>],
    ) -> Result<Option<SizedParts>, SourceError> {
        let key = self.key(key)?;
        let reads = ranges.iter().map(|r| {
            let request = self.request(to_storage_range(&ByteRangeRequest::Bounded(r.clone())));
            let key = &key;
            async move { self.mount.storage().read(key, &request).await }
        });
        let mut parts = Vec::with_capacity(ranges.len());
        let mut seen: Option<(u64, String)> = None;
        let mut missing = false;
        for outcome in futures::future::join_all(reads).await {
            match outcome {
                Ok(o) => {
                    let at = (o.meta.size, o.meta.etag);
                    if seen.as_ref().is_some_and(|s| *s != at) {
                        return Err(SourceError::Precondition(format!("{key} changed while it was read")));
                    }
                    seen = Some(at);
                    parts.push(o.body);
                }
                Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => missing = true,
                Err(e) => return Err(classify(e)),
            }
        }
        match (seen, missing) {
            (None, _) => Ok(None),
            (Some(_), true) => Err(SourceError::Precondition(format!("{key} was deleted while it was read"))),
            (Some((size, _)), false) => Ok(Some(SizedParts { parts, size })),
        }
    }
}

/// A local file read straight into a slab's places (the engine's direct
/// reads of uncompressed chunks).
impl DirectUnit for crate::storage::direct::OpenFile {
    fn size(&self) -> u64 {
        crate::storage::direct::OpenFile::size(self)
    }

    fn read_into(&self, runs: &mut [(u64, &mut [u8])]) -> Result<(), SourceError> {
        self.read_runs(runs).map_err(classify)
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

    /// A storage failure under an engine read or write reaches the service
    /// with its kind (so its status: 501, 503, 504, 403, 409, ...) and the
    /// chunk's key in the mount; the three the engine gives a meaning of its
    /// own become that meaning.
    #[test]
    fn storage_failures_keep_their_kind_through_the_engine() {
        let path = NodePath::new("a/b").unwrap();
        let through =
            |e: StorageError| region_error(&path, RegionError::Source { key: "c/0".into(), source: classify(e) });
        let reason = || "r".to_string();
        for e in [
            StorageError::NotFound { key: "k".into() },
            StorageError::PermissionDenied { key: "k".into(), reason: reason() },
            StorageError::Conflict { key: "k".into(), reason: reason() },
            StorageError::NotSupported { reason: reason() },
            StorageError::Unavailable { reason: reason() },
            StorageError::Timeout { reason: reason() },
        ] {
            let kind = e.kind();
            match through(e) {
                ServiceError::Storage(s) => {
                    assert_eq!(s.kind(), kind);
                    if let StorageError::NotFound { key } | StorageError::PermissionDenied { key, .. } = &s {
                        assert_eq!(key, "a/b/c/0", "{kind}");
                    }
                }
                other => panic!("{kind}: {other:?}"),
            }
        }
        let precondition = StorageError::PreconditionFailed { key: "k".into(), reason: reason() };
        assert!(matches!(through(precondition), ServiceError::WriteConflict { key, .. } if key == "a/b/c/0"));
        assert!(matches!(through(StorageError::InvalidKey { reason: reason() }), ServiceError::BadRequest(_)));
        let short = StorageError::RangeNotSatisfiable { key: "k".into(), size: 3 };
        assert!(matches!(through(short), ServiceError::Storage(StorageError::Unavailable { .. })));
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
    /// Ranged reads of a chunk answer each range's bytes and the whole
    /// object's size (the engine checks it against the chunk's).
    #[tokio::test]
    #[allow(clippy::single_range_in_vec_init)] // one range of a chunk, as the engine asks
    async fn ranges_answer_their_bytes_and_the_objects_size() {
        let store = MountChunkStore::new(memory_mount(), NodePath::new("a").unwrap());
        assert!(store.get_ranges_sized("c/0", &[1..3]).await.unwrap().is_none(), "missing: None");
        store.put("c/0", Bytes::from_static(b"0123456789")).await.unwrap();
        let got = store.get_ranges_sized("c/0", &[1..3, 5..6, 8..12]).await.unwrap().unwrap();
        assert_eq!(got.size, 10);
        assert_eq!(got.parts, vec![Bytes::from_static(b"12"), Bytes::from_static(b"5"), Bytes::from_static(b"89")]);
        // A range wholly past the end: not satisfiable (the engine reads whole).
        let past = store.get_ranges_sized("c/0", &[20..30]).await;
        assert!(matches!(past, Err(SourceError::RangeNotSatisfiable(_))), "{past:?}");
    }

    /// A local mount opens chunk files for direct reads (confined: a link
    /// leaving the mount is missing), reads runs into place and reports the
    /// size at the open; a memory mount has no files (the engine reads it
    /// whole); a directory or an absent key is missing.
    #[tokio::test]
    async fn local_files_open_for_direct_reads_and_memory_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let spec = MountSpec::from_url(dir.path().to_str().unwrap());
        let local = MountChunkStore::new(Arc::new(Mount::build("l", &spec).unwrap()), NodePath::new("a").unwrap());
        local.put("c/0", Bytes::from_static(b"0123456789")).await.unwrap();
        let Direct::Open(unit) = local.open_direct("c/0").await.unwrap() else { panic!("a local file opens") };
        assert_eq!(unit.size(), 10);
        let mut out = [0u8; 6];
        let (a, b) = out.split_at_mut(3);
        unit.read_into(&mut [(7, a), (1, b)]).unwrap();
        assert_eq!(&out, b"789123");
        assert!(matches!(local.open_direct("c/9").await.unwrap(), Direct::Missing));
        assert!(matches!(local.open_direct("c").await.unwrap(), Direct::Missing), "a directory: missing");
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("a/c/out")).unwrap();
        assert!(matches!(local.open_direct("c/out").await.unwrap(), Direct::Missing), "a link leaving the mount");
        // A file shorter when read than at its open: an error, never zeros.
        std::fs::OpenOptions::new().write(true).open(dir.path().join("a/c/0")).unwrap().set_len(4).unwrap();
        let mut out = [0u8; 6];
        let err = unit.read_into(&mut [(4, &mut out[..])]).unwrap_err();
        assert!(matches!(&err, SourceError::Unavailable(m) if m.contains("truncated")), "{err:?}");
        let memory = MountChunkStore::new(memory_mount(), NodePath::new("a").unwrap());
        memory.put("c/0", Bytes::from_static(b"0123456789")).await.unwrap();
        assert!(matches!(memory.open_direct("c/0").await.unwrap(), Direct::Unsupported));
    }

    #[test]
    fn a_conflict_names_its_key_once() {
        let e = StorageError::Conflict { key: "a/c/0".into(), reason: "a link leaves the mount".into() };
        let back = storage_error("a/c/0".into(), classify(e));
        assert_eq!(back.to_string(), "key a/c/0 conflicts with existing data: a link leaves the mount");
    }
}
