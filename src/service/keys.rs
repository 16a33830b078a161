//! Operations on the raw keys of a mount: the Zarr store protocol
//! (`/store/...`: keys read, written, deleted and listed) and WebDAV's
//! PROPFIND. (Named for its unit, the key, to tell it from `storage/`, the
//! backends, and from `array/source.rs`, the engine's chunk source on a
//! mount.)
//!
//! Metadata documents (`zarr.json`, `.zarray`, `.zgroup`, `.zattrs`,
//! `.zmetadata`) are validated before they are stored; chunk bytes are
//! stored as given. Every operation takes the [`MountRef`] the request
//! resolved.

use bytes::Bytes;

use super::node::{array_limits, node_of_document_key, DocumentGate};
use super::{MountRef, ServiceError, ServiceResult};
use crate::storage::{
    request, KeyPrefix, ListEntry, Mount, ObjectMeta, Preconditions, PutCondition, PutOutcome, ReadOutcome,
    ReadRequest, StorageError, StoreKey,
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
/// The storage error (not found, not modified, precondition, range);
/// `IsPrefix` for a key that names a prefix.
pub async fn read(mount: &MountRef<'_>, key: &StoreKey, request: &ReadRequest) -> ServiceResult<ReadOutcome> {
    let storage = mount.mount().storage();
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
/// Read-only mount, invalid metadata, failed precondition, storage failure.
pub async fn write(
    mount: &MountRef<'_>,
    key: &StoreKey,
    body: Bytes,
    preconditions: &Preconditions,
) -> ServiceResult<PutOutcome> {
    let m = mount.writable()?;
    let app = mount.app();
    let max_body = app.config().limits.max_body_bytes;
    if DocumentKind::from_key_name(key.name()).is_some() && body.len() as u64 > max_body {
        return Err(ServiceError::PayloadTooLarge { limit: max_body, option: "limits.max_body_bytes" });
    }
    // A metadata document is checked as zarrd will read it back (size,
    // depth, rules, array limits) before anything is stored.
    DocumentGate::of(app).check_document(key, body.clone(), &array_limits(app)).await?;
    // The same key lock a slice write's read-modify-write holds, and shared
    // on the node lock of any array being resized or deleted right now.
    let _guard = mount.locks().raw_key(key.as_str()).await;
    let condition = put_condition(m, key, preconditions).await?;
    let outcome = m.put(key, body, &condition).await?;
    forget_metadata(mount, key);
    Ok(outcome)
}

/// The store's conditional write for a PUT's preconditions. `If-None-Match:
/// *` alone and `If-Match` alone are the store's own conditions (atomic
/// across processes and replicas); any other (an `If-None-Match` ETag list,
/// `If-Unmodified-Since`, several together) is evaluated against the
/// object as it is now ([`request::evaluate_write`]), and the write is then
/// made on the condition that the object is still that version (its ETag,
/// or still absent), so what was evaluated is what is replaced.
async fn put_condition(m: &Mount, key: &StoreKey, p: &Preconditions) -> ServiceResult<PutCondition> {
    let p = p.for_write();
    if p.is_empty() {
        return Ok(PutCondition::None);
    }
    if p == (Preconditions { if_none_match: Some(vec!["*".into()]), ..Preconditions::default() }) {
        return Ok(PutCondition::IfAbsent);
    }
    if let (Some(list), true) = (&p.if_match, p.if_none_match.is_none() && p.if_unmodified_since.is_none()) {
        return Ok(PutCondition::IfMatch(list.clone()));
    }
    let current = current_meta(m, key).await?;
    request::evaluate_write(key.as_str(), current.as_ref(), &p)?;
    Ok(current.map_or(PutCondition::IfAbsent, |meta| PutCondition::IfMatch(vec![meta.etag])))
}

/// The object's metadata, `None` when absent.
async fn current_meta(m: &Mount, key: &StoreKey) -> ServiceResult<Option<ObjectMeta>> {
    match m.storage().head(key).await {
        Ok(meta) => Ok(Some(meta)),
        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Drops the cached node whose metadata document `key` is.
fn forget_metadata(mount: &MountRef<'_>, key: &StoreKey) {
    if let Some(path) = node_of_document_key(key) {
        mount.app().metadata_cache().invalidate(mount.name(), &path);
    }
}

/// Deletes a key; deleting a missing key succeeds.
///
/// # Errors
/// Read-only mount, storage failure.
pub async fn delete(mount: &MountRef<'_>, key: &StoreKey, preconditions: &Preconditions) -> ServiceResult<()> {
    let m = mount.writable()?;
    let _guard = mount.locks().raw_key(key.as_str()).await;
    // Stores have no conditional delete: the preconditions are evaluated
    // against the object as it is, under the key's lock (so no write
    // through this process comes between); a write by another process or
    // replica in between is not seen.
    let p = preconditions.for_write();
    if !p.is_empty() {
        request::evaluate_write(key.as_str(), current_meta(m, key).await?.as_ref(), &p)?;
    }
    m.delete(key).await?;
    forget_metadata(mount, key);
    Ok(())
}

/// Lists directly under `prefix`; a prefix with nothing under it (other than
/// the root) is not found.
///
/// # Errors
/// `PrefixNotFound`, storage failure.
pub async fn list(mount: &MountRef<'_>, prefix: &KeyPrefix) -> ServiceResult<Listing> {
    let limit = mount.app().config().limits.max_list_entries;
    let (entries, truncated) = mount.mount().storage().list_limited(prefix, limit).await?;
    if entries.is_empty() && !truncated && !prefix.is_root() {
        return Err(ServiceError::PrefixNotFound(prefix.as_str().to_string()));
    }
    Ok(Listing { entries, truncated })
}

/// True when an object is stored under `path` (WebDAV MKCOL, which makes a
/// collection only where nothing is).
///
/// # Errors
/// A storage failure other than not found.
pub async fn is_object(mount: &MountRef<'_>, path: &KeyPrefix) -> ServiceResult<bool> {
    if path.is_root() {
        return Ok(false);
    }
    Ok(current_meta(mount.mount(), &StoreKey::new(path.as_str())?).await?.is_some())
}

/// Describes a path for WebDAV PROPFIND.
///
/// # Errors
/// Not found (neither an object nor a non-empty prefix), storage failure.
pub async fn propfind(mount: &MountRef<'_>, path: &KeyPrefix, depth: Depth) -> ServiceResult<DavTarget> {
    let m = mount.mount();
    if !path.is_root() {
        let key = StoreKey::new(path.as_str())?;
        if let Some(meta) = current_meta(m, &key).await? {
            return Ok(DavTarget::Object { key, meta });
        }
    }
    let limit = mount.app().config().limits.max_list_entries;
    let (members, truncated) = match depth {
        Depth::Zero => {
            if !path.is_root() {
                let (entries, more) = m.storage().list_names_limited(path, 1).await?;
                if entries.is_empty() && !more {
                    return Err(ServiceError::PrefixNotFound(path.as_str().to_string()));
                }
            }
            (Vec::new(), false)
        }
        Depth::One => {
            let listing = list(mount, path).await?;
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
