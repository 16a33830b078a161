//! Local directories: `object_store`'s `LocalFileSystem` for writes, deletes
//! and listings (atomic staged writes, empty-directory clean-up), and a
//! direct read path.
//!
//! Reads are the hot path of the store protocol, and a local directory is
//! served from the page cache: open, stat and a read of a chunk take a few
//! microseconds, less than handing the work to the blocking thread pool and
//! back (`bench/store_get.sh` measured the hop as the largest single cost).
//! So reads up to [`INLINE_READ_MAX`] bytes run inline on the async worker,
//! as nginx's do; larger reads go to the blocking pool. A mount on a slow
//! network filesystem would stall a worker for the duration of one read.
//!
//! Small objects (up to [`ObjectCacheSettings::max_object_bytes`]) are kept
//! in a byte-bounded cache and served from memory after one `stat` shows the
//! file unchanged (same inode, size, mtime and ctime: any write through zarrd
//! is a rename to a new inode, and any write in place changes ctime). That
//! saves the open, read, close and copy of hot chunks and metadata documents,
//! the way nginx's `open_file_cache` saves the open.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::local::LocalFileSystem;

use super::object::ObjectBackend;
use super::{
    request, KeyPrefix, ListEntry, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, Storage,
    StorageError, StorageResult, StoreKey,
};

/// Reads up to this many bytes run inline on the async worker.
pub const INLINE_READ_MAX: u64 = 4 * 1024 * 1024;

/// Sizes of the per-mount object cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectCacheSettings {
    /// Bytes the cache may hold; 0 disables it.
    pub capacity_bytes: u64,
    /// Larger objects are never cached.
    pub max_object_bytes: u64,
}

impl Default for ObjectCacheSettings {
    fn default() -> Self {
        Self { capacity_bytes: 256 * 1024 * 1024, max_object_bytes: 4 * 1024 * 1024 }
    }
}

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Validator {
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Validator {
    fn of(md: &std::fs::Metadata) -> Self {
        Self {
            ino: md.ino(),
            size: md.len(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
        }
    }
}

#[derive(Debug)]
struct CachedObject {
    validator: Validator,
    meta: ObjectMeta,
    body: Bytes,
}

/// What [`LocalBackend::read_inline`] did.
#[derive(Debug)]
enum Inline {
    Done(ReadOutcome),
    /// Too large to read on the async worker.
    Large,
}

/// A mount over a local directory.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    root: Arc<PathBuf>,
    inner: ObjectBackend,
    cache: Option<moka::sync::Cache<StoreKey, Arc<CachedObject>>>,
    max_cached: u64,
}

impl LocalBackend {
    /// Serves the directory `root`, which must exist.
    ///
    /// # Errors
    /// `Unavailable` when `root` is not a directory.
    pub fn new(root: PathBuf) -> StorageResult<Self> {
        Self::with_cache(root, ObjectCacheSettings::default())
    }

    /// Serves the directory `root` with an object cache of the given sizes.
    ///
    /// # Errors
    /// `Unavailable` when `root` is not a directory.
    pub fn with_cache(root: PathBuf, cache: ObjectCacheSettings) -> StorageResult<Self> {
        let root = root
            .canonicalize()
            .map_err(|e| StorageError::Unavailable { reason: format!("{}: {e}", root.display()) })?;
        if !root.is_dir() {
            return Err(StorageError::Unavailable { reason: format!("{} is not a directory", root.display()) });
        }
        let fs = LocalFileSystem::new_with_prefix(&root)
            .map_err(|e| StorageError::Unavailable { reason: e.to_string() })?
            .with_automatic_cleanup(true);
        let object_cache = (cache.capacity_bytes > 0).then(|| {
            moka::sync::Cache::builder()
                .max_capacity(cache.capacity_bytes)
                .weigher(|_: &StoreKey, v: &Arc<CachedObject>| {
                    u32::try_from(v.body.len().saturating_add(64)).unwrap_or(u32::MAX)
                })
                .build()
        });
        Ok(Self {
            root: Arc::new(root),
            inner: ObjectBackend::new(Arc::new(fs), "")?,
            cache: object_cache,
            max_cached: cache.max_object_bytes.min(cache.capacity_bytes),
        })
    }

    fn file_path(&self, key: &StoreKey) -> PathBuf {
        // Segments are validated by `StoreKey`: never `..`, never empty,
        // never absolute, no backslash; `/` separates them on every platform
        // Rust's paths run on here.
        let mut p = std::ffi::OsString::with_capacity(self.root.as_os_str().len() + 1 + key.as_str().len());
        p.push(self.root.as_os_str());
        p.push("/");
        p.push(key.as_str());
        PathBuf::from(p)
    }

    /// Why `key` cannot be a file here, if it cannot: an ancestor is a file,
    /// or the key itself is a directory. Checked only after a failed write.
    fn conflict(&self, key: &StoreKey) -> Option<StorageError> {
        let conflict = |reason: String| StorageError::Conflict { key: key.to_string(), reason };
        let mut path = (*self.root).clone();
        let segments: Vec<&str> = key.segments().collect();
        for (i, segment) in segments.iter().enumerate() {
            path.push(segment);
            let Ok(md) = std::fs::symlink_metadata(&path) else { return None };
            let last = i + 1 == segments.len();
            if !last && !md.is_dir() {
                return Some(conflict(format!("{} is an object, not a prefix", segments[..=i].join("/"))));
            }
            if last && md.is_dir() {
                return Some(conflict("it is a prefix with keys below it".into()));
            }
        }
        None
    }

    fn meta_of(md: &std::fs::Metadata) -> ObjectMeta {
        let modified = md.modified().ok();
        let micros = modified.and_then(|m| m.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_micros());
        ObjectMeta {
            size: md.len(),
            last_modified: modified,
            etag: format!("\"{:x}-{:x}-{:x}\"", md.ino(), micros, md.len()),
            version_token: None,
            version_id: None,
        }
    }

    /// The part of a read done on the async worker, after one `stat`: a
    /// cached, unchanged object is served from memory; HEAD requests, failed
    /// preconditions and reads up to [`INLINE_READ_MAX`] bytes are answered
    /// here; a larger read is handed back ([`Inline::Large`]) for the
    /// blocking pool. A directory is a prefix; a missing file is not found.
    fn read_inline(&self, path: &std::path::Path, key: &StoreKey, req: &ReadRequest) -> StorageResult<Inline> {
        let io = |e: std::io::Error| StorageError::from_io(key.as_str(), &e);
        let md = std::fs::metadata(path).map_err(io)?;
        if md.is_dir() {
            return Err(StorageError::IsPrefix { key: key.to_string() });
        }
        if !md.is_file() {
            return Err(StorageError::NotFound { key: key.to_string() });
        }
        if let Some(hit) = self.cache.as_ref().and_then(|c| c.get(key)) {
            // Same inode, size and times: the cached metadata (ETag
            // included, which is made of them) is this file's.
            if hit.validator == Validator::of(&md) {
                let meta = hit.meta.clone();
                let range = request::evaluate(key.as_str(), &meta, req)?;
                let body = match (&range, req.head_only) {
                    (_, true) => Bytes::new(),
                    (None, false) => hit.body.clone(),
                    (Some(r), false) => hit.body.slice(to_usize(r.start)?..to_usize(r.end)?),
                };
                return Ok(Inline::Done(ReadOutcome { meta, range, body }));
            }
        }
        if !req.head_only {
            // A range never reads past the end of the file.
            let len = req.range.map_or(md.len(), |r| r.max_len().min(md.len()));
            if len > INLINE_READ_MAX {
                return Ok(Inline::Large);
            }
        }
        Self::read_file(path, key, req, self.cache.as_ref().map(|c| (c, self.max_cached))).map(Inline::Done)
    }

    /// Opens, stats and reads a file; caches it whole when it is small enough.
    fn read_file(
        path: &std::path::Path,
        key: &StoreKey,
        req: &ReadRequest,
        cache: Option<(&moka::sync::Cache<StoreKey, Arc<CachedObject>>, u64)>,
    ) -> StorageResult<ReadOutcome> {
        let io = |e: std::io::Error| StorageError::from_io(key.as_str(), &e);
        let file = File::open(path).map_err(io)?;
        let md = file.metadata().map_err(io)?;
        if md.is_dir() {
            return Err(StorageError::IsPrefix { key: key.to_string() });
        }
        if !md.is_file() {
            return Err(StorageError::NotFound { key: key.to_string() });
        }
        let meta = Self::meta_of(&md);
        let range = request::evaluate(key.as_str(), &meta, req)?;
        if req.head_only {
            return Ok(ReadOutcome { meta, range, body: Bytes::new() });
        }
        let cacheable = cache.filter(|(_, max)| meta.size <= *max);
        let span = if cacheable.is_some() { 0..meta.size } else { range.clone().unwrap_or(0..meta.size) };
        let len = to_usize(span.end - span.start)?;
        // Read into spare capacity (no zero-filling): `take` stops at `len`
        // without a further syscall, `read_to_end` never over-allocates here.
        let mut buf = Vec::with_capacity(len);
        let mut reader = &file;
        reader.seek(SeekFrom::Start(span.start)).map_err(io)?;
        reader.take(len as u64).read_to_end(&mut buf).map_err(io)?;
        if buf.len() != len {
            // The file shrank under us (an overwrite is a rename, so the open
            // handle keeps the old inode; this guards truncation in place).
            return Err(StorageError::Unavailable { reason: format!("{key} was truncated while being read") });
        }
        let mut body = Bytes::from(buf);
        if let Some((cache, _)) = cacheable {
            let cached = CachedObject { validator: Validator::of(&md), meta: meta.clone(), body: body.clone() };
            cache.insert(key.clone(), Arc::new(cached));
            if let Some(r) = &range {
                body = body.slice(to_usize(r.start)?..to_usize(r.end)?);
            }
        }
        Ok(ReadOutcome { meta, range, body })
    }
}

fn to_usize(n: u64) -> StorageResult<usize> {
    usize::try_from(n).map_err(|_| StorageError::Unavailable { reason: format!("{n} bytes do not fit in memory") })
}

#[async_trait]
impl Storage for LocalBackend {
    async fn read(&self, key: &StoreKey, req: &ReadRequest) -> StorageResult<ReadOutcome> {
        let path = self.file_path(key);
        match self.read_inline(&path, key, req)? {
            Inline::Done(out) => Ok(out),
            Inline::Large => {
                let (key, req) = (key.clone(), req.clone());
                tokio::task::spawn_blocking(move || Self::read_file(&path, &key, &req, None))
                    .await
                    .map_err(|e| StorageError::Unavailable { reason: e.to_string() })?
            }
        }
    }

    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        let req = ReadRequest { head_only: true, ..ReadRequest::default() };
        Ok(self.read(key, &req).await?.meta)
    }

    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        let current = match self.head(key).await {
            Ok(m) => Some(m),
            Err(StorageError::NotFound { .. }) => None,
            Err(StorageError::IsPrefix { .. }) => {
                return Err(StorageError::Conflict {
                    key: key.to_string(),
                    reason: "it is a prefix with keys below it".into(),
                })
            }
            Err(e) => return Err(e),
        };
        let mut outcome = match self.inner.put_with_current(key, body, condition, current).await {
            Ok(outcome) => outcome,
            Err(e) => return Err(self.conflict(key).unwrap_or(e)),
        };
        outcome.etag = Some(self.head(key).await?.etag);
        Ok(outcome)
    }

    async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
        self.inner.delete(key).await
    }

    async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>> {
        let mut entries = self.inner.list(prefix).await?;
        // Report the same ETags as reads do.
        for e in &mut entries {
            if let ListEntry::Object { name, meta } = e {
                if let Ok(key) = prefix.child(name) {
                    if let Ok(md) = std::fs::metadata(self.file_path(&key)) {
                        *meta = Self::meta_of(&md);
                    }
                }
            }
        }
        Ok(entries)
    }

    async fn list_recursive(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>> {
        let mut entries = self.inner.list_recursive(prefix, limit).await?;
        for (name, meta) in &mut entries {
            if let Ok(key) = prefix.child(name) {
                if let Ok(md) = std::fs::metadata(self.file_path(&key)) {
                    *meta = Self::meta_of(&md);
                }
            }
        }
        Ok(entries)
    }

    async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool> {
        // A stat, inline, as reads are (see the module documentation).
        Ok(std::fs::metadata(self.file_path(key)).is_ok_and(|m| m.is_dir()))
    }

    async fn probe(&self) -> StorageResult<()> {
        let root = Arc::clone(&self.root);
        match tokio::fs::metadata(&*root).await {
            Ok(md) if md.is_dir() => Ok(()),
            Ok(_) => Err(StorageError::Unavailable { reason: format!("{} is not a directory", root.display()) }),
            Err(e) => Err(StorageError::Unavailable { reason: format!("{}: {e}", root.display()) }),
        }
    }

    fn cache_usage(&self) -> Option<super::CacheUsage> {
        self.cache.as_ref().map(|c| {
            // moka's counts lag until its housekeeping runs.
            c.run_pending_tasks();
            super::CacheUsage { entries: c.entry_count(), bytes: c.weighted_size() }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> StoreKey {
        StoreKey::new(k).unwrap()
    }

    #[tokio::test]
    async fn cached_objects_follow_changes_made_behind_our_back() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"0123456789").unwrap();
        let whole = ReadRequest::default();
        assert_eq!(&b.read(&key("a"), &whole).await.unwrap().body[..], b"0123456789");
        // Served from the cache, including ranges.
        let ranged = ReadRequest { range: Some(request::ByteRange::Suffix(3)), ..ReadRequest::default() };
        let out = b.read(&key("a"), &ranged).await.unwrap();
        assert_eq!((&out.body[..], out.range), (&b"789"[..], Some(7..10)));
        // Rewritten in place with the same size: ctime changes, the cache misses.
        std::fs::write(&path, b"abcdefghij").unwrap();
        assert_eq!(&b.read(&key("a"), &whole).await.unwrap().body[..], b"abcdefghij");
        // Replaced by rename (as zarrd writes): a new inode.
        std::fs::write(dir.path().join("tmp"), b"XYZ").unwrap();
        std::fs::rename(dir.path().join("tmp"), &path).unwrap();
        assert_eq!(&b.read(&key("a"), &whole).await.unwrap().body[..], b"XYZ");
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(b.read(&key("a"), &whole).await, Err(StorageError::NotFound { .. })));
    }

    #[tokio::test]
    async fn large_objects_are_not_cached_and_ranges_read_only_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let settings = ObjectCacheSettings { capacity_bytes: 1024, max_object_bytes: 16 };
        let b = LocalBackend::with_cache(dir.path().to_path_buf(), settings).unwrap();
        std::fs::write(dir.path().join("big"), vec![7u8; 100]).unwrap();
        let ranged = ReadRequest { range: Some(request::ByteRange::From(90)), ..ReadRequest::default() };
        let out = b.read(&key("big"), &ranged).await.unwrap();
        assert_eq!(out.body.len(), 10);
        assert!(b.cache.as_ref().unwrap().get(&key("big")).is_none());
        std::fs::create_dir(dir.path().join("d")).unwrap();
        assert!(matches!(b.read(&key("d"), &ReadRequest::default()).await, Err(StorageError::IsPrefix { .. })));
    }
}
