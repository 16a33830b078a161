//! Local directories: `object_store`'s `LocalFileSystem` for writes, deletes
//! and listings (atomic staged writes, empty-directory clean-up), and a
//! direct read path.
//!
//! Reads are the hot path of the store protocol. One blocking task opens,
//! stats and reads the file with `pread`, instead of `object_store`'s two
//! hops (open + stat, then read), which measured slower under load.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
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
        let mut buf = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            // The file may shrink under us (an overwrite is a rename, so the open
            // handle keeps the old inode; this guards truncation in place).
            let n = file.read_at(&mut buf[filled..], span.start + filled as u64).map_err(io)?;
            if n == 0 {
                return Err(StorageError::Unavailable { reason: format!("{key} was truncated while being read") });
            }
            filled += n;
        }
        Ok(ReadOutcome { meta, range, body: Bytes::from(buf) })
    }
}

#[async_trait]
impl Storage for LocalBackend {
    async fn read(&self, key: &StoreKey, req: &ReadRequest) -> StorageResult<ReadOutcome> {
        let path = self.file_path(key);
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
        Ok(tokio::fs::metadata(self.file_path(key)).await.is_ok_and(|m| m.is_dir()))
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
