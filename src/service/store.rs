//! The Zarr store protocol: keys read, written, deleted and listed.
//!
//! Metadata documents (`zarr.json`, `.zarray`, `.zgroup`, `.zattrs`,
//! `.zmetadata`) are validated before they are stored; chunk bytes are
//! stored as given.

use bytes::Bytes;

use super::{App, ServiceError, ServiceResult};
use crate::storage::{
    KeyPrefix, ListEntry, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, StorageError, StoreKey,
};
use crate::zarr::metadata::DocumentKind;

/// A listing directly under a prefix.
#[derive(Debug, Clone)]
pub struct Listing {
    pub entries: Vec<ListEntry>,
    /// True when `limits.max_list_entries` cut the listing.
    pub truncated: bool,
}

/// What a WebDAV PROPFIND describes.
#[derive(Debug, Clone)]
pub enum DavTarget {
    /// The path names an object.
    Object { key: StoreKey, meta: ObjectMeta },
    /// The path names a collection (a prefix with entries, or the root) and
    /// these are its members, relative to it (prefixes end with `/`).
    Collection { prefix: KeyPrefix, members: Vec<(String, Option<ObjectMeta>)>, truncated: bool },
}

/// How deep a PROPFIND goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    Zero,
    One,
    Infinity,
}

/// Reads a key.
///
/// # Errors
/// Unknown mount, or the storage error (not found, not modified, precondition, range).
pub async fn read(app: &App, mount: &str, key: &StoreKey, request: &ReadRequest) -> ServiceResult<ReadOutcome> {
    let storage = app.mount(mount)?.storage();
    match storage.read(key, request).await {
        Err(StorageError::IsPrefix { key }) => Err(ServiceError::IsPrefix(key)),
        Err(StorageError::NotFound { key: missing }) => {
            // A missing chunk or metadata document is the common miss (clients
            // read it as the fill value); only other names are checked for being
            // a prefix (a LIST on object stores; local reads report it directly).
            let name = key.name();
            let worth_checking = !(is_chunk_like(name) || DocumentKind::from_key_name(name).is_some());
            if worth_checking && storage.is_prefix(key).await? {
                return Err(ServiceError::IsPrefix(key.to_string()));
            }
            Err(StorageError::NotFound { key: missing }.into())
        }
        other => Ok(other?),
    }
}

/// True for a last key segment that looks like a chunk key's (`0`, `0.1.2`):
/// digits and dots only.
fn is_chunk_like(name: &str) -> bool {
    name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// Writes a key, validating metadata documents first.
///
/// # Errors
/// Unknown or read-only mount, invalid metadata, failed precondition, storage failure.
pub async fn write(
    app: &App,
    mount: &str,
    key: &StoreKey,
    body: Bytes,
    condition: &PutCondition,
) -> ServiceResult<PutOutcome> {
    let m = app.mount(mount)?;
    if m.read_only() {
        return Err(ServiceError::ReadOnly(mount.to_string()));
    }
    let max_body = app.config().limits.max_body_bytes;
    if DocumentKind::from_key_name(key.name()).is_some() && body.len() as u64 > max_body {
        return Err(ServiceError::PayloadTooLarge { limit: max_body, option: "limits.max_body_bytes" });
    }
    // A metadata document is checked as zarrd will read it back (size,
    // depth, rules, array limits) before anything is stored.
    super::node::DocumentGate::of(app).check_document(key, body.clone(), &super::node::array_limits(app)).await?;
    // The same key lock a slice write's read-modify-write holds, and shared
    // on the node lock of any array being resized or deleted right now.
    let _guard = app.locks(mount)?.raw_key(key.as_str()).await;
    let outcome = m.put(key, body, condition).await?;
    forget_metadata(app, mount, key);
    Ok(outcome)
}

/// Drops the cached node whose metadata document `key` is.
fn forget_metadata(app: &App, mount: &str, key: &StoreKey) {
    if let Some(path) = super::nodes::node_of_document_key(key) {
        app.metadata_cache().invalidate(mount, &path);
    }
}

/// Deletes a key; deleting a missing key succeeds.
///
/// # Errors
/// Unknown or read-only mount, storage failure.
pub async fn delete(app: &App, mount: &str, key: &StoreKey) -> ServiceResult<()> {
    let m = app.mount(mount)?;
    if m.read_only() {
        return Err(ServiceError::ReadOnly(mount.to_string()));
    }
    let _guard = app.locks(mount)?.raw_key(key.as_str()).await;
    m.delete(key).await?;
    forget_metadata(app, mount, key);
    Ok(())
}

/// Checks a mount exists and may be written (for MKCOL).
///
/// # Errors
/// Unknown or read-only mount.
pub fn check_writable(app: &App, mount: &str) -> ServiceResult<()> {
    if app.mount(mount)?.read_only() {
        return Err(ServiceError::ReadOnly(mount.to_string()));
    }
    Ok(())
}

/// Lists directly under `prefix`; a prefix with nothing under it (other than
/// the root) is not found.
///
/// # Errors
/// Unknown mount, `PrefixNotFound`, storage failure.
pub async fn list(app: &App, mount: &str, prefix: &KeyPrefix) -> ServiceResult<Listing> {
    let mut entries = app.mount(mount)?.list(prefix).await?;
    if entries.is_empty() && !prefix.is_root() {
        return Err(ServiceError::PrefixNotFound(prefix.as_str().to_string()));
    }
    let limit = app.config().limits.max_list_entries;
    let truncated = entries.len() > limit;
    entries.truncate(limit);
    Ok(Listing { entries, truncated })
}

/// Describes a path for WebDAV PROPFIND.
///
/// # Errors
/// Unknown mount, not found (neither an object nor a non-empty prefix), storage failure.
pub async fn propfind(app: &App, mount: &str, path: &KeyPrefix, depth: Depth) -> ServiceResult<DavTarget> {
    let m = app.mount(mount)?;
    if !path.is_root() {
        let key = StoreKey::new(path.as_str())?;
        match m.storage().head(&key).await {
            Ok(meta) => return Ok(DavTarget::Object { key, meta }),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let limit = app.config().limits.max_list_entries;
    let (members, truncated) = match depth {
        Depth::Zero => {
            if !path.is_root() && m.list(path).await?.is_empty() {
                return Err(ServiceError::PrefixNotFound(path.as_str().to_string()));
            }
            (Vec::new(), false)
        }
        Depth::One => {
            let listing = list(app, mount, path).await?;
            let members = listing
                .entries
                .into_iter()
                .map(|e| match e {
                    ListEntry::Prefix { name } => (format!("{name}/"), None),
                    ListEntry::Object { name, meta } => (name, Some(meta)),
                })
                .collect();
            (members, listing.truncated)
        }
        Depth::Infinity => {
            let mut all = m.storage().list_recursive(path, limit + 1).await?;
            if all.is_empty() && !path.is_root() {
                return Err(ServiceError::PrefixNotFound(path.as_str().to_string()));
            }
            let truncated = all.len() > limit;
            all.truncate(limit);
            (all.into_iter().map(|(name, meta)| (name, Some(meta))).collect(), truncated)
        }
    };
    Ok(DavTarget::Collection { prefix: path.clone(), members, truncated })
}
