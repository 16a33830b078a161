//! Resizing an array, as zarr-python and TensorStore do: `shape` is
//! rewritten and the chunks wholly outside the new shape are deleted
//! (chunks straddling the boundary keep their bytes). The document is
//! rewritten on the condition that it is still the version read, and the
//! resize runs again from a fresh read when another process changed it
//! meanwhile ([`super::versioned`]).

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;

use super::delete::delete_keys;
use super::documents::{checked_doc, put_checked, DocumentGate};
use super::open::existing_versioned;
use super::versioned::retry;
use super::{open_in_with, ArrayNode, Node};
use crate::service::{NodeRef, ServiceError, ServiceResult};
use crate::storage::Mount;
use crate::zarr::array::ZarrFormat;
use crate::zarr::metadata::MAX_EXTENT;

/// `InvalidRequest` about `field` of the request.
fn bad(field: impl Into<String>, reason: String) -> ServiceError {
    ServiceError::InvalidRequest { field: field.into(), reason }
}

/// A resize request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resize {
    /// The new shape (same rank).
    pub shape: Vec<u64>,
    /// Fail if any dimension would shrink.
    pub expand_only: bool,
    /// Fail if any dimension would grow.
    pub shrink_only: bool,
}

/// Resizes an array; returns it as now stored and how many chunks were
/// deleted.
///
/// # Errors
/// `ReadOnly`, `NodeNotFound`, `NotAnArray`, `InvalidRequest` naming the
/// dimension (rank, extent, guards), storage failures.
pub async fn resize(node: &NodeRef<'_>, req: &Resize) -> ServiceResult<(Arc<ArrayNode>, u64)> {
    let m = node.writable()?;
    let _guard = node.mount().locks().exclusive(node.path().as_str()).await;
    let deleted = retry(|| resize_once(node, m, req)).await?;
    match open_in_with(m.clone(), node.path(), &DocumentGate::of(node.app())).await? {
        Node::Array(a) => Ok((a, deleted)),
        Node::Group(_) => Err(node.not_an_array()),
    }
}

/// One read-modify-write of the array's document (the chunks outside the
/// new shape deleted first), conditional on the version read
/// ([`super::versioned`]); returns how many chunks were deleted.
async fn resize_once(node: &NodeRef<'_>, m: &Mount, req: &Resize) -> ServiceResult<u64> {
    let path = node.path();
    let (found, versions) = existing_versioned(node).await?;
    let array = match found {
        Some(Node::Array(a)) => a,
        Some(Node::Group(_)) => return Err(node.not_an_array()),
        None => return Err(node.not_found()),
    };
    let old = &array.desc.shape;
    if req.shape.len() != old.len() {
        return Err(bad(
            "shape",
            format!("expected {} dimensions (the array's rank), got {}", old.len(), req.shape.len()),
        ));
    }
    for (i, (&new, &cur)) in req.shape.iter().zip(old).enumerate() {
        if new > MAX_EXTENT {
            return Err(bad(
                format!("shape[{i}]"),
                format!(
                    "{new} is larger than zarrd supports (2^62 = {MAX_EXTENT}, the index space TensorStore and \
                     numpy address)"
                ),
            ));
        }
        if req.expand_only && new < cur {
            return Err(bad(
                format!("shape[{i}]"),
                format!("expand_only is set but {new} is smaller than the current {cur}"),
            ));
        }
        if req.shrink_only && new > cur {
            return Err(bad(
                format!("shape[{i}]"),
                format!("shrink_only is set but {new} is larger than the current {cur}"),
            ));
        }
    }
    // The new document must pass before anything changes; then chunks
    // wholly outside the new shape go first, then the document.
    let mut doc = array.metadata.clone();
    if let Some(o) = doc.as_object_mut() {
        o.insert("shape".into(), json!(req.shape));
    }
    let name = if array.format() == ZarrFormat::V3 { "zarr.json" } else { ".zarray" };
    let (key, bytes) = checked_doc(node, name, &doc).await?;
    let mut deleted = 0;
    if req.shape.iter().zip(old).any(|(n, c)| n < c) {
        let prefix = path.prefix()?;
        let chunk = &array.desc.chunk_shape;
        // Only the names of chunks outside the new shape are kept as the
        // listing goes, not every object with its metadata.
        let (encoding, rank, chunk, shape) =
            (array.desc.chunk_key_encoding, old.len(), chunk.clone(), req.shape.clone());
        let outside = Arc::new(Mutex::new(Vec::new()));
        let into = outside.clone();
        let visit: crate::storage::Visitor = Box::new(move |name, _| {
            let out = encoding.decode(name, rank).is_ok_and(|coords| {
                coords.iter().zip(&chunk).zip(&shape).any(|((&c, &size), &n)| c.saturating_mul(size) >= n)
            });
            if out {
                into.lock().unwrap_or_else(PoisonError::into_inner).push(name.to_string());
            }
        });
        drop(m.storage().visit_recursive(&prefix, visit).await?);
        let outside = std::mem::take(&mut *outside.lock().unwrap_or_else(PoisonError::into_inner));
        deleted = delete_keys(m, &prefix, outside.iter()).await?;
    }
    put_checked(node, m, &key, bytes, &versions).await?;
    Ok(deleted)
}
