//! Storage: named mounts over `object_store`, behind one small trait.
//!
//! The layers above see [`Storage`], [`StoreKey`] and [`StorageError`]; they
//! never name `object_store`. Errors keep their meaning (not found,
//! precondition failed, already exists, permission, unavailable) so the HTTP
//! layer maps them to statuses without string matching.
//!
//! HTTP semantics that every backend shares — byte ranges (RFC 9110 §14) and
//! preconditions (RFC 9110 §13) — are evaluated once, in [`request`], against
//! an object's [`ObjectMeta`], so a local file and an S3 object answer the
//! same request the same way.

pub mod beneath;
pub mod direct;
pub mod error;
pub mod fault;
pub mod key;
pub mod local;
pub mod measured;
pub mod mount;
pub mod object;
pub mod request;
pub mod retry;
pub mod tail;

use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

pub use error::{StorageError, StorageResult};
pub use key::{KeyPrefix, StoreKey};
pub use mount::{Mount, MountSpec};
pub use request::{ByteRange, Preconditions, ReadRequest};

/// What a store knows about one stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Size in bytes.
    pub size: u64,
    /// Last modification time, where the backend reports one.
    pub last_modified: Option<SystemTime>,
    /// Strong entity tag in HTTP form, quoted (`"abc"`).
    pub etag: String,
    /// The backend's own version token, handed back on conditional updates.
    pub(crate) version_token: Option<String>,
    /// The backend's object version (GCS generation, S3 version id), which
    /// GCS needs for a conditional update.
    pub(crate) version_id: Option<String>,
}

/// The answer to a read.
#[derive(Debug)]
pub struct ReadOutcome {
    pub meta: ObjectMeta,
    /// The byte range served, when the request asked for one; `None` means
    /// the whole object.
    pub range: Option<std::ops::Range<u64>>,
    /// The bytes (empty for `HEAD`), or their first part when `tail` is set.
    pub body: Bytes,
    /// The bytes after `body`, still in their file or still arriving from
    /// the store, handed on as the answer is written: only for a request
    /// with [`ReadRequest::stream`].
    pub tail: Option<tail::Tail>,
}

impl ReadOutcome {
    /// The answer's length: `body` and `tail` together.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.body.len() as u64 + self.tail.as_ref().map_or(0, tail::Tail::remaining)
    }

    /// True when the answer has no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a write is conditioned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PutCondition {
    /// Replace whatever is there.
    #[default]
    None,
    /// `If-None-Match: *`: only when no object exists.
    IfAbsent,
    /// `If-Match: <etags>`: only when the current object's ETag is one of these
    /// (`*` matches any existing object).
    IfMatch(Vec<String>),
}

/// The answer to a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutcome {
    /// True when no object existed before.
    pub created: bool,
    /// The new object's ETag, when the backend reports one.
    pub etag: Option<String>,
}

/// What [`Storage::visit_recursive`] calls for each object (handed back
/// when the walk is done, so it can own what it gathers).
pub type Visitor = Box<dyn FnMut(&str, &ObjectMeta) + Send + 'static>;

/// One entry of a delimited listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListEntry {
    /// An object directly under the prefix; `name` is its last segment.
    Object { name: String, meta: ObjectMeta },
    /// A common prefix ("directory") directly under the prefix.
    Prefix { name: String },
}

/// One entry of [`Storage::list_names_limited`]: a name directly under the
/// prefix and what it is, without the object's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListName {
    /// The last segment.
    pub name: String,
    /// A common prefix ("directory") rather than an object.
    pub prefix: bool,
    /// An object's size, when the listing had it without asking for it (an
    /// object store's listing has it; a local directory's names do not).
    pub size: Option<u64>,
}

/// The first `limit` of a whole listing, and whether there were more.
fn first_of(mut entries: Vec<ListEntry>, limit: usize) -> (Vec<ListEntry>, bool) {
    let more = entries.len() > limit;
    entries.truncate(limit);
    (entries, more)
}

/// How many deletes [`Storage::delete_many`] keeps in flight, on backends
/// that delete one object per request.
pub const DELETE_CONCURRENCY: usize = 16;

/// A storage backend. Implementations must be cheap to share (`Arc`).
///
/// Concurrency: every method may be called concurrently. Writes are atomic
/// per key (readers see the old or the new object, never a torn one).
#[async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug + 'static {
    /// Reads an object (or part of it), evaluating preconditions and the range.
    ///
    /// # Errors
    /// `NotFound`, `NotModified`, `PreconditionFailed`, `RangeNotSatisfiable`,
    /// or a backend failure.
    async fn read(&self, key: &StoreKey, request: &ReadRequest) -> StorageResult<ReadOutcome>;

    /// Metadata of one object.
    ///
    /// # Errors
    /// `NotFound` or a backend failure.
    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta>;

    /// Stores an object atomically. Must not be called concurrently for the
    /// same key with a condition: [`mount::Mount`] serialises writes per key.
    ///
    /// # Errors
    /// `PreconditionFailed` when the condition does not hold, or a backend failure.
    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome>;

    /// Deletes an object; deleting a missing object succeeds.
    ///
    /// # Errors
    /// A backend failure.
    async fn delete(&self, key: &StoreKey) -> StorageResult<()>;

    /// Deletes many objects; deleting missing ones succeeds. On an error
    /// some of them may be deleted. (The default deletes
    /// [`DELETE_CONCURRENCY`] at a time; S3 and Azure send one request per
    /// 1,000 and 256 keys.)
    ///
    /// # Errors
    /// A backend failure.
    async fn delete_many(&self, keys: &[StoreKey]) -> StorageResult<()> {
        for batch in keys.chunks(DELETE_CONCURRENCY) {
            futures::future::try_join_all(batch.iter().map(|k| self.delete(k))).await?;
        }
        Ok(())
    }

    /// Lists the objects and common prefixes directly under `prefix`.
    ///
    /// # Errors
    /// A backend failure.
    async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>>;

    /// [`Storage::list`], the first `limit` entries in name order, and
    /// whether there were more. (The default lists them all first; a local
    /// directory looks up only the entries it answers; S3, GCS and Azure
    /// ask for them a page at a time and stop after `limit + 1`.)
    ///
    /// # Errors
    /// A backend failure.
    async fn list_limited(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListEntry>, bool)> {
        Ok(first_of(self.list(prefix).await?, limit))
    }

    /// [`Storage::list_limited`] without the objects' metadata: what a page
    /// of a directory needs to count and order its entries, before it looks
    /// up the few it shows. (The default is `list_limited`; a local
    /// directory reads its names and their types and looks up only links
    /// and entries of unknown type, none of its files.)
    ///
    /// # Errors
    /// A backend failure.
    async fn list_names_limited(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListName>, bool)> {
        let (entries, more) = self.list_limited(prefix, limit).await?;
        let names = entries
            .into_iter()
            .map(|entry| match entry {
                ListEntry::Prefix { name } => ListName { name, prefix: true, size: None },
                ListEntry::Object { name, meta } => ListName { name, prefix: false, size: Some(meta.size) },
            })
            .collect();
        Ok((names, more))
    }

    /// Lists every object below `prefix`, at any depth, up to `limit` entries.
    /// Names are relative to `prefix`.
    ///
    /// # Errors
    /// A backend failure.
    async fn list_recursive(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>>;

    /// Calls `visit` with the name (relative to `prefix`) and metadata of
    /// every object below `prefix`, at any depth, in no particular order,
    /// as the listing goes, holding none of them: counting what is stored
    /// under a node costs no memory per object. (The default lists them all
    /// first; the backends override it.)
    ///
    /// # Errors
    /// A backend failure.
    async fn visit_recursive(&self, prefix: &KeyPrefix, visit: Visitor) -> StorageResult<Visitor> {
        let mut visit = visit;
        for (name, meta) in self.list_recursive(prefix, usize::MAX).await? {
            visit(&name, &meta);
        }
        Ok(visit)
    }

    /// True when `key` names a non-empty prefix (a "directory") rather than
    /// an object, so a read of it can be redirected to its listing.
    ///
    /// # Errors
    /// A backend failure.
    async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool>;

    /// Checks the backend answers (used by `/readyz` and start-up validation).
    ///
    /// # Errors
    /// The backend's failure.
    async fn probe(&self) -> StorageResult<()>;

    /// The object at `key` opened for reading straight into a caller's
    /// buffers ([`direct::OpenFile`]), for backends with files to read that
    /// way; `None` (the default): read it with [`Storage::read`].
    ///
    /// # Errors
    /// `NotFound`, `IsPrefix`, or a backend failure.
    async fn open_file(&self, key: &StoreKey) -> StorageResult<Option<direct::OpenFile>> {
        let _ = key;
        Ok(None)
    }

    /// Whether [`Storage::open_file`] opens objects (a backend with files)
    /// rather than answering `None`: readers plan for reading parts of
    /// objects that way (false, the default).
    fn opens_files(&self) -> bool {
        false
    }

    /// What an in-process object cache of this backend holds, if it has one
    /// (for metrics).
    fn cache_usage(&self) -> Option<CacheUsage> {
        None
    }
}

/// Entries and bytes held by a backend's object cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheUsage {
    pub entries: u64,
    pub bytes: u64,
}

/// Wraps an ETag in the HTTP form (quoted), leaving an already quoted one alone.
#[must_use]
pub fn http_etag(raw: &str) -> String {
    let raw = raw.strip_prefix("W/").unwrap_or(raw);
    if raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"') {
        raw.to_string()
    } else {
        format!("\"{raw}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::http_etag;

    #[test]
    fn etags_are_quoted_once() {
        assert_eq!(http_etag("abc"), "\"abc\"");
        assert_eq!(http_etag("\"abc\""), "\"abc\"");
        assert_eq!(http_etag("W/\"abc\""), "\"abc\"");
    }
}
