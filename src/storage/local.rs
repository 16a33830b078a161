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

/// A mount over a local directory.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    root: Arc<PathBuf>,
    inner: ObjectBackend,
}

impl LocalBackend {
    /// Serves the directory `root`, which must exist.
    ///
    /// # Errors
    /// `Unavailable` when `root` is not a directory.
    pub fn new(root: PathBuf) -> StorageResult<Self> {
        let root = root
            .canonicalize()
            .map_err(|e| StorageError::Unavailable { reason: format!("{}: {e}", root.display()) })?;
        if !root.is_dir() {
            return Err(StorageError::Unavailable { reason: format!("{} is not a directory", root.display()) });
        }
        let fs = LocalFileSystem::new_with_prefix(&root)
            .map_err(|e| StorageError::Unavailable { reason: e.to_string() })?
            .with_automatic_cleanup(true);
        Ok(Self { root: Arc::new(root), inner: ObjectBackend::new(Arc::new(fs), "")? })
    }

    fn file_path(&self, key: &StoreKey) -> PathBuf {
        // Segments are validated by `StoreKey`: never `..`, never absolute.
        let mut p = (*self.root).clone();
        p.extend(key.segments());
        p
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
        }
    }

    fn read_blocking(path: &std::path::Path, key: &StoreKey, req: &ReadRequest) -> StorageResult<ReadOutcome> {
        let io = |e: std::io::Error| StorageError::from_io(key.as_str(), &e);
        let file = File::open(path).map_err(io)?;
        let md = file.metadata().map_err(io)?;
        if !md.is_file() {
            return Err(StorageError::NotFound { key: key.to_string() });
        }
        let meta = Self::meta_of(&md);
        let range = request::evaluate(key.as_str(), &meta, req)?;
        if req.head_only {
            return Ok(ReadOutcome { meta, range, body: Bytes::new() });
        }
        let span = range.clone().unwrap_or(0..meta.size);
        let len = usize::try_from(span.end - span.start)
            .map_err(|_| StorageError::Unavailable { reason: format!("{key} is too large to read") })?;
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
        Ok(ReadOutcome { meta, range, body: Bytes::from(buf) })
    }
}

#[async_trait]
impl Storage for LocalBackend {
    async fn read(&self, key: &StoreKey, req: &ReadRequest) -> StorageResult<ReadOutcome> {
        let path = self.file_path(key);
        if req.head_only || req.range.is_some_and(|r| r.max_len() <= INLINE_READ_MAX) {
            return Self::read_blocking(&path, key, req);
        }
        // Open and stat inline; whole objects larger than INLINE_READ_MAX are
        // read on the blocking pool.
        let head = ReadRequest { head_only: true, ..req.clone() };
        let out = Self::read_blocking(&path, key, &head)?;
        let len = out.range.as_ref().map_or(out.meta.size, |r| r.end - r.start);
        if len <= INLINE_READ_MAX {
            return Self::read_blocking(&path, key, req);
        }
        let (key, req) = (key.clone(), req.clone());
        tokio::task::spawn_blocking(move || Self::read_blocking(&path, &key, &req))
            .await
            .map_err(|e| StorageError::Unavailable { reason: e.to_string() })?
    }

    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        let req = ReadRequest { head_only: true, ..ReadRequest::default() };
        Ok(self.read(key, &req).await?.meta)
    }

    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        let current = match self.head(key).await {
            Ok(m) => Some(m),
            Err(StorageError::NotFound { .. }) => None,
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

    fn cheap_prefix_check(&self) -> bool {
        true
    }

    async fn probe(&self) -> StorageResult<()> {
        let root = Arc::clone(&self.root);
        match tokio::fs::metadata(&*root).await {
            Ok(md) if md.is_dir() => Ok(()),
            Ok(_) => Err(StorageError::Unavailable { reason: format!("{} is not a directory", root.display()) }),
            Err(e) => Err(StorageError::Unavailable { reason: format!("{}: {e}", root.display()) }),
        }
    }
}
