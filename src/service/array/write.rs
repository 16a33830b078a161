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

use super::source::{region_error, MountChunkStore};
use crate::service::error::product_text;
use crate::service::node::{self, ArrayNode, NodePath};
use crate::service::wire::{self as decode, WireFormat};
use crate::service::{cpu, App, NodeRef, ServiceError, ServiceResult};
use crate::zarr::chunk::ChunkData;
use crate::zarr::region::{write_plan_on, RegionOptions, WritePlan};
use crate::zarr::selection::{Selection, SelectionMode, SelectionSpec, INLINE_LISTED, MAX_SELECTION_INDICES};

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
    pub format: WireFormat,
    /// The body.
    pub body: Bytes,
    /// Store chunks equal to the fill value (`None`: as the array says).
    pub write_empty_chunks: Option<bool>,
}

/// A write may cover at most `limits.max_selection_bytes` decoded bytes,
/// as a read may: a one-element body broadcast over a huge selection would
/// otherwise make the server encode the whole array.
fn check_size(app: &App, dt: &crate::zarr::data_type::DataType, shape: &[u64]) -> ServiceResult<()> {
    let limit = app.config().limits.max_selection_bytes;
    let elements = shape.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let es = dt.size().map_or(16, |s| s as u64);
    let bytes = elements.saturating_mul(es);
    if bytes > limit {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection is {} bytes ({} elements, shape {shape:?}), more than \
             limits.max_selection_bytes = {limit}; write it in parts",
            product_text(shape.iter().copied().chain([es])),
            product_text(shape.iter().copied())
        )));
    }
    Ok(())
}

/// Most indices a strided, orthogonal or coordinate write may list (all
/// dimensions together): such a plan keeps every index with its position
/// in the body (about 24 bytes each), so this bounds a plan at some
/// 100 MiB. Boxes (`a:b` in every dimension) list none, whatever their size.
pub const MAX_INDEXED_WRITE: u64 = MAX_SELECTION_INDICES;

/// Refuses, before the body is decoded, a write whose plan would list too
/// many indices.
fn check_indices(selection: &Selection) -> ServiceResult<()> {
    if selection.mode != SelectionMode::Coordinate && selection.as_box().is_some() {
        return Ok(());
    }
    let listed = selection.dims.iter().fold(0u64, |a, d| a.saturating_add(d.len()));
    if listed > MAX_INDEXED_WRITE {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection lists {listed} indices, more than the {MAX_INDEXED_WRITE} a strided, orthogonal or \
             coordinate write may list; write it in parts or as boxes (start:stop)"
        )));
    }
    Ok(())
}

/// Refuses, before any chunk is read or written, a write touching more
/// than `limits.max_chunks_per_request` chunks (inner chunks for sharded
/// arrays).
fn check_chunks(app: &App, node: &ArrayNode, plan: &WritePlan<'_>) -> ServiceResult<()> {
    let limit = app.config().limits.max_chunks_per_request;
    let units = plan.work_units(&node.desc);
    if units > limit {
        let what = if node.desc.sharding.is_some() { "inner chunks" } else { "chunks" };
        return Err(ServiceError::SelectionTooLarge(format!(
            "the write touches {units} {what} (chunk shape {:?}), more than limits.max_chunks_per_request = \
             {limit}; write it in parts",
            node.desc.sharding.as_ref().map_or(&node.desc.chunk_shape[..], |s| s.inner_chunk_shape())
        )));
    }
    Ok(())
}

/// Decoded bytes a slice write keeps in flight at once (chunks being
/// read, updated and encoded): at most 16 chunks, fewer when chunks are
/// large, never fewer than one.
pub const WRITE_IN_FLIGHT_BYTES: u64 = 256 * 1024 * 1024;

/// How many chunks of `node` a slice write works on at once.
fn chunks_in_flight(node: &ArrayNode) -> usize {
    let elements = node.desc.chunk_shape.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let bytes = elements.saturating_mul(node.desc.data_type.size().map_or(24, |s| s as u64)).max(1);
    #[allow(clippy::cast_possible_truncation)] // at most 16
    let n = (WRITE_IN_FLIGHT_BYTES / bytes).clamp(1, 16) as usize;
    n
}

/// Whether the array keeps chunks equal to the fill value.
pub(crate) fn keeps_empty_chunks(node: &ArrayNode, requested: Option<bool>) -> bool {
    requested.unwrap_or_else(|| {
        node.desc.attributes.get(WRITE_EMPTY_CHUNKS_ATTRIBUTE).and_then(serde_json::Value::as_bool).unwrap_or(false)
    })
}

/// The full store keys to lock for `plan`; `None` when the write touches
/// at least as many chunks as there are lock stripes (it then takes them
/// all, without listing its keys).
async fn lock_keys(
    node: &Arc<ArrayNode>,
    path: &NodePath,
    plan: &Arc<WritePlan<'static>>,
) -> ServiceResult<Option<Vec<String>>> {
    if plan.chunk_count() >= crate::service::locks::STRIPES as u64 {
        return Ok(None);
    }
    let (node, path, plan) = (node.clone(), path.clone(), plan.clone());
    cpu::run(move || {
        plan.chunk_keys(&node.desc)
            .map(|k| path.key(&k).map(|k| k.to_string()))
            .collect::<ServiceResult<Vec<String>>>()
            .map(Some)
    })
    .await
    .map_err(ServiceError::from)?
}

/// Writes a selection of the array at `path`.
///
/// # Errors
/// `UnknownMount`, `ReadOnly`, `NodeNotFound`/`NotAnArray`; `BadRequest`
/// for a selection or body that does not fit the array (the message says
/// what was expected); `WriteConflict` when other processes kept changing a
/// chunk; storage failures.
pub async fn write(at: &NodeRef<'_>, request: WriteRequest) -> ServiceResult<()> {
    let m = at.writable()?.clone();
    let (app, path) = (at.app(), at.path());
    let mut node = node::open_array(at).await?;
    let request = Arc::new(request);
    for _ in 0..REPLANS {
        // Checking listed indices against the shape costs up to the lists.
        let (req, desc) = (request.clone(), node.desc.clone());
        let selection = cpu::run_or_inline(request.selection.listed() <= INLINE_LISTED, move || {
            req.selection.resolve(&desc.shape, desc.dimension_names.as_deref())
        })
        .await
        .map_err(ServiceError::from)??;
        let shape = selection.result_shape();
        check_size(app, &node.desc.data_type, &shape)?;
        check_indices(&selection)?;
        let (req, dt) = (request.clone(), node.desc.data_type.clone());
        let decoded = cpu::run(move || decode::decode(req.format, &req.body, &dt, &shape))
            .await
            .map_err(ServiceError::from)?
            .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        let data: Arc<ChunkData> = Arc::new(decoded.data);
        let (desc, scalar) = (node.desc.clone(), decoded.scalar);
        // Planning lists the selection's indices: CPU work, off the async workers.
        let plan = cpu::run(move || WritePlan::for_selection_shared(&desc, &selection, data, scalar))
            .await
            .map_err(ServiceError::from)?
            .map_err(|e| region_error(path, e))?;
        check_chunks(app, &node, &plan)?;
        let plan = Arc::new(plan);
        let keys = lock_keys(&node, path, &plan).await?;
        let locks = at.mount().locks();
        let _guard = match &keys {
            Some(keys) => {
                let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                locks.write_keys(path.as_str(), &key_refs).await
            }
            None => locks.write_all_keys(path.as_str()).await,
        };
        let current = node::open_array(at).await?;
        // Attributes changed meanwhile (another replica's merge) leave the plan valid.
        let replan = !current.same_layout(&node);
        node = current;
        if replan {
            continue;
        }
        let options = RegionOptions {
            store_empty_chunks: keeps_empty_chunks(&node, request.write_empty_chunks),
            concurrency: chunks_in_flight(&node),
            ..RegionOptions::default()
        };
        let store = MountChunkStore::new(m.clone(), path.clone());
        // Every key written or deleted went through `Mount::put`/`delete`,
        // which invalidate the decoded chunk cache (`service::cache::chunk`).
        let written = write_plan_on(&node.desc, &store, &store, &plan, &options, &cpu::Pool)
            .await
            .map_err(|e| region_error(path, e));
        // The body and the decoded elements are freed off the async worker.
        cpu::drop_on_pool((plan, request));
        return written;
    }
    Err(ServiceError::WriteConflict {
        key: path.to_string(),
        reason: format!("the array's metadata changed {REPLANS} times while the write was being planned"),
    })
}
