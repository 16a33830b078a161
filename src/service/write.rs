//! Slice writes: a selection of an array and a body (raw, `.npy` or JSON)
//! holding its elements or one element to broadcast.
//!
//! Locking (DESIGN.md, "Behaviour that users rely on"): a write plans which
//! chunks (or shards) it touches, then holds the array's node lock shared
//! and those keys' stripes ([`super::locks::MountLocks::write_keys`]) across
//! all its reads and writes. Writes to disjoint chunks run in parallel;
//! writes sharing a chunk serialise, so no read-modify-write loses another's
//! update in this process; resize, attribute updates and deletes (exclusive
//! on the node) wait for it. Across processes, each read-modify-write writes
//! back conditionally on the version it read and starts again when the
//! chunk changed ([`crate::zarr::region`]), as far as the mount's backend
//! supports conditional writes.
//!
//! Because the metadata is read before the locks are taken, it is read
//! again under them: a write that raced a resize or overwrite is planned
//! again against the new metadata.

use std::sync::Arc;

use bytes::Bytes;

use super::chunk_store::MountChunkStore;
use super::format::decode::{self, BodyFormat};
use super::node::{self, ArrayNode, NodePath};
use super::{cpu, App, ServiceError, ServiceResult};
use crate::storage::StorageError;
use crate::zarr::region::{write_plan, RegionError, RegionOptions, SourceError, WritePlan};
use crate::zarr::selection::SelectionSpec;

/// How often a write is planned again when the array's metadata changed
/// between planning and locking.
const REPLANS: usize = 4;

/// Attribute that makes an array keep chunks equal to the fill value (as
/// zarr-python's `write_empty_chunks`); a request parameter overrides it.
pub const WRITE_EMPTY_CHUNKS_ATTRIBUTE: &str = "write_empty_chunks";

/// One slice write.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// What to write to.
    pub selection: SelectionSpec,
    /// How the body is encoded.
    pub format: BodyFormat,
    /// The body.
    pub body: Bytes,
    /// Store chunks equal to the fill value (`None`: as the array says).
    pub write_empty_chunks: Option<bool>,
}

/// Maps an engine error of a write to a service error.
fn region_error(e: RegionError) -> ServiceError {
    match e {
        RegionError::Region(e) => ServiceError::InvalidSelection(format!("selection: {e}")),
        RegionError::Data(m) => ServiceError::BadRequest(format!("body: {m}")),
        RegionError::Source { key, source } => match source {
            SourceError::Precondition(reason) => ServiceError::WriteConflict { key, reason },
            SourceError::PermissionDenied(reason) => {
                ServiceError::Storage(StorageError::PermissionDenied { key, reason })
            }
            SourceError::Refused(reason) => ServiceError::Storage(StorageError::Conflict { key, reason }),
            SourceError::RangeNotSatisfiable(reason) | SourceError::Store(reason) => {
                ServiceError::Storage(StorageError::Unavailable { reason: format!("{key}: {reason}") })
            }
        },
        RegionError::Codec { key, source } => ServiceError::CorruptChunk { key, reason: source.to_string() },
        RegionError::Corrupt { key, reason } => ServiceError::CorruptChunk { key, reason },
    }
}

/// A write may cover at most `limits.max_selection_bytes` decoded bytes,
/// as a read may: a one-element body broadcast over a huge selection would
/// otherwise make the server encode the whole array.
fn check_size(app: &App, dt: &crate::zarr::data_type::DataType, shape: &[u64]) -> ServiceResult<()> {
    let limit = app.config().limits.max_selection_bytes;
    let elements = shape.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let bytes = elements.saturating_mul(dt.size().map_or(16, |s| s as u64));
    if bytes > limit {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection is {bytes} bytes ({elements} elements, shape {shape:?}), more than \
             limits.max_selection_bytes = {limit}; write it in parts"
        )));
    }
    Ok(())
}

/// Whether the array keeps chunks equal to the fill value.
fn keeps_empty_chunks(node: &ArrayNode, requested: Option<bool>) -> bool {
    requested.unwrap_or_else(|| {
        node.desc.attributes.get(WRITE_EMPTY_CHUNKS_ATTRIBUTE).and_then(serde_json::Value::as_bool).unwrap_or(false)
    })
}

/// Writes a selection of the array at `path`.
///
/// # Errors
/// `UnknownMount`, `ReadOnly`, `NodeNotFound`/`NotAnArray`; `BadRequest`
/// for a selection or body that does not fit the array (the message says
/// what was expected); `WriteConflict` when other processes kept changing a
/// chunk; storage failures.
pub async fn write(app: &App, mount: &str, path: &NodePath, request: WriteRequest) -> ServiceResult<()> {
    let m = app.mount(mount)?.clone();
    if m.read_only() {
        return Err(ServiceError::ReadOnly(mount.to_string()));
    }
    let mut node = node::open_array(app, mount, path).await?;
    let request = Arc::new(request);
    for _ in 0..REPLANS {
        let selection = request
            .selection
            .resolve(&node.desc.shape, node.desc.dimension_names.as_deref())
            .map_err(|e| ServiceError::InvalidSelection(e.to_string()))?;
        let shape = selection.result_shape();
        check_size(app, &node.desc.data_type, &shape)?;
        let (req, dt) = (request.clone(), node.desc.data_type.clone());
        let decoded = cpu::run(move || decode::decode(req.format, &req.body, &dt, &shape))
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?
            .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        let plan =
            WritePlan::for_selection(&node.desc, &selection, &decoded.data, decoded.scalar).map_err(region_error)?;
        let keys = plan
            .chunk_keys(&node.desc)
            .iter()
            .map(|k| path.key(k).map(|k| k.to_string()))
            .collect::<ServiceResult<Vec<String>>>()?;
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let _guard = app.locks(mount)?.write_keys(path.as_str(), &key_refs).await;
        let current = node::open_array(app, mount, path).await?;
        if current.metadata != node.metadata || current.zattrs != node.zattrs {
            node = current;
            continue;
        }
        let options = RegionOptions {
            store_empty_chunks: keeps_empty_chunks(&node, request.write_empty_chunks),
            ..RegionOptions::default()
        };
        let store = MountChunkStore::new(m.clone(), path.clone());
        // Every key written or deleted went through `Mount::put`/`delete`,
        // which invalidate the decoded chunk cache (`service::chunk_cache`).
        return write_plan(&node.desc, &store, &store, &plan, &options).await.map_err(region_error);
    }
    Err(ServiceError::WriteConflict {
        key: path.to_string(),
        reason: format!("the array's metadata changed {REPLANS} times while the write was being planned"),
    })
}
