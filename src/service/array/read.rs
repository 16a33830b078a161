//! Slice reads and decoded chunk reads, streamed slab by slab: the
//! service's part of a read. The reading itself is the region engine's
//! ([`crate::zarr::region`]): this module opens the array, checks the
//! request and the limits, runs the engine with the service's cache
//! ([`ArrayCache`], revalidating against storage ETags), its CPU pool
//! ([`cpu::Pool`]) and its storage ([`MountChunkStore`]), and turns the
//! engine's slabs into a response body (raw, npy or JSON).
//!
//! A read is checked whole before anything is sent (array metadata, the
//! selection against the shape, the field, the format, the size limits),
//! then planned by the engine ([`plan_read`]: slabs of at most
//! `limits.read_slab_bytes` of decoded elements, only the units — chunks,
//! or inner chunks of shards — the selection touches, counted up front
//! against `limits.max_chunks_per_request`) and produced slab by slab
//! ([`read_slab`]: cached units, whole chunks, shard indexes and coalesced
//! inner chunk ranges conditioned on the index's ETag, decoded and copied
//! on the CPU pool).
//!
//! - Slabs of fixed-size elements are about a quarter of the answer (at
//!   least 1 MiB, at most `read_slab_bytes`), so sending one overlaps
//!   reading the next from the first slab on, and end where units end
//!   rather than cut them (a cut unit would be read and decoded for both
//!   slabs): a slab grows up to 2 × `read_slab_bytes` for that. Where
//!   chunks' parts are read straight into the slab for the cost of those
//!   parts alone (uncompressed chunks of a local mount, the decoded-chunk
//!   cache not keeping them), slabs are at most [`DIRECT_SLAB`] and cut
//!   chunks, and the first ones ramp up ([`FIRST_SLAB`], then doubling),
//!   so the first byte goes out after a read of 1 MiB rather than of a
//!   whole slab. Each slab
//!   is read on its own task, and the next one starts before this one's
//!   message is handed on, so reading it overlaps waiting for the socket.
//! - A producer task sends each slab's bytes through a channel of one, in
//!   messages of about a slab, so a read holds about four slabs (one
//!   message being written to the socket, one queued, one waiting to be
//!   queued and the next being read; variable-length elements: one being
//!   encoded and the slab it comes from) plus the chunks being decoded, whatever its size. A client that
//!   goes away stops the producer and the slab reads.
//! - Started answers are bounded together: an answer larger than
//!   1 MiB takes a share of `limits.read_answer_budget_bytes`
//!   (4 × its largest slab) before its first slab, and every message it
//!   sends holds the share until the socket has taken it, so clients that
//!   stop reading hold at most the budget (and `server` closes their
//!   connections after `limits.send_stall_timeout_seconds`).
//! - Variable-length elements are sized by their real bytes: a slab holds
//!   copies of at most `read_slab_bytes` (missing elements cost nothing: the
//!   fill value's JSON text is rendered once and repeated); a slab that
//!   would hold more is read again as smaller slabs (a quarter of its
//!   elements, down to one), growing back after small ones. Each slab's
//!   JSON text is counted against `limits.max_selection_bytes` before any
//!   of it is sent, and written in pieces (a long string cut between them).
//!
//! Errors found before the first message is sent (every check, and any
//! error in the first slab) are ordinary error answers. An error in a later
//! slab (a missing chunk with `fill_missing=false`, a corrupt chunk, storage
//! failing, variable-length text past the limit) can only abort the body:
//! the connection is closed, and the body is shorter than its
//! `Content-Length` (raw, npy) or a chunked body without its end (JSON),
//! which clients report as a failed transfer. The last message carries an
//! end mark ([`Pieces`]), so a producer that stops early fails the body too.
//!
//! The decoded-chunk endpoint is in `chunk` (through the engine's unit
//! reads); the answer's messages, budget share and JSON pieces in `stream`.
//!
//! Missing chunks read as the fill value unless the mount
//! (`fill_missing_data_reads = false`) or the request (`fill_missing=false`)
//! says otherwise; then the read fails naming the first missing chunk's key
//! (for sharded arrays: an inner chunk absent from its shard counts as
//! missing, named with its shard's key).

mod chunk;
mod stream;
pub(super) mod whole;

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::source::{region_error, MountChunkStore};
use crate::service::cache::chunk::{ArrayCache, ChunkCache};
use crate::service::error::product_text;
use crate::service::node::{self, ArrayNode, NodePath};
use crate::service::wire::json::{empty_size, JsonEncoder};
use crate::service::wire::{npy, numpy_descr, zarr_name, WireFormat};
use crate::service::{cpu, App, NodeRef, ServiceError, ServiceResult};
use crate::storage::Mount;
use crate::zarr::data_type::DataType;
use crate::zarr::field::FieldView;
use crate::zarr::region::plan::{self, VAR_ELEMENT_ESTIMATE};
use crate::zarr::region::{plan_read, read_slab, ReadCtx, ReadPlan, RegionOptions, Slab, SlabData, Slabs};
use crate::zarr::selection::SelectionSpec;

pub use chunk::read_chunk;
use stream::{first_message, json_fixed, json_variable, project, AnswerLimits, Out, SMALL_ANSWER};
pub use stream::{take_last, Pieces};

/// What one cache entry costs beyond its data (the cache's own overhead,
/// the key, the map's bookkeeping), for deciding whether a read may fill it.
const CACHE_ENTRY_ESTIMATE: u64 = 512;

/// Byte ranges of inner chunks at most this far apart are read together.
const COALESCE_GAP: u64 = 4096;

/// The engine's tuning for the server's reads: the coalescing gap, and
/// units read at once (four per CPU pool thread, eight at least).
fn region_options() -> RegionOptions {
    RegionOptions {
        coalesce_gap: COALESCE_GAP,
        concurrency: (rayon::current_num_threads() * 4).max(8),
        ..RegionOptions::default()
    }
}

/// What a slice read asks for.
#[derive(Debug, Clone, Default)]
pub struct ReadParams {
    /// The selection, as parsed.
    pub selection: SelectionSpec,
    /// A field of a structured array.
    pub field: Option<String>,
    /// The output format.
    pub format: WireFormat,
    /// Overrides the mount's `fill_missing_data_reads`.
    pub fill_missing: Option<bool>,
}

/// What a decoded chunk read asks for.
#[derive(Debug, Clone, Default)]
pub struct ChunkParams {
    /// Chunk grid coordinates (of the shard, for sharded arrays).
    pub coords: Vec<u64>,
    /// Inner chunk coordinates inside the shard (sharded arrays only).
    pub inner: Option<Vec<u64>>,
    /// A field of a structured array.
    pub field: Option<String>,
    /// The output format.
    pub format: WireFormat,
    /// Overrides the mount's `fill_missing_data_reads`.
    pub fill_missing: Option<bool>,
}

/// A read, checked and started: what the answer's headers say, the first
/// slab (already produced, so its errors are ordinary answers) and the rest
/// of the body.
#[derive(Debug)]
pub struct DataRead {
    /// Output shape (the selection's, plus a field's subarray shape).
    pub shape: Vec<u64>,
    /// Output element type.
    pub data_type: DataType,
    /// Output format.
    pub format: WireFormat,
    /// Exact body length (raw and npy).
    pub content_length: Option<u64>,
    /// The first message of the body.
    pub first: Pieces,
    /// The rest of the body (`None`: the first message was all of it).
    pub rest: Option<mpsc::Receiver<ServiceResult<Pieces>>>,
}

fn cpu_error(e: &cpu::CpuError) -> ServiceError {
    ServiceError::Cpu(e.clone())
}

/// An array opened for reading: the node, its mount, and whether missing
/// chunks read as the fill value.
#[derive(Debug)]
struct Opened {
    array: Arc<ArrayNode>,
    mount: Arc<Mount>,
    mount_name: Arc<str>,
    cache: Arc<ChunkCache>,
    fill_missing: bool,
}

impl Opened {
    /// The engine's read context and chunk source for this array; `fill`:
    /// whether decoded data read now may enter the cache.
    fn engine(&self, fill: bool) -> Engine {
        let cache = ArrayCache::new(self.cache.clone(), self.mount_name.clone(), &self.array, fill);
        let ctx = ReadCtx::new(
            self.array.desc.clone(),
            Arc::new(cache),
            Arc::new(cpu::Pool),
            self.fill_missing,
            &region_options(),
        );
        Engine {
            ctx: Arc::new(ctx),
            store: MountChunkStore::new(self.mount.clone(), self.array.path.clone()),
            path: self.array.path.clone(),
        }
    }
}

/// What a read runs the engine with.
#[derive(Debug)]
struct Engine {
    ctx: Arc<ReadCtx<'static>>,
    store: MountChunkStore,
    path: NodePath,
}

/// The whole read, checked.
#[derive(Debug)]
struct Plan {
    engine: Engine,
    cache: Arc<ChunkCache>,
    plan: Arc<ReadPlan>,
    /// Record size (0 for variable-length types).
    es: usize,
    variable: bool,
    field: Option<FieldView>,
    format: WireFormat,
    out_type: DataType,
    out_shape: Vec<u64>,
    answer: AnswerLimits,
    /// Whether the answer is small enough to take no budget share.
    small: bool,
    /// The fill value's JSON text (variable-length types).
    fill_text: Arc<Vec<u8>>,
}

/// The next slab of `slabs`, made on the CPU pool (a slab's planning costs
/// up to its rows or points) unless the whole plan is `cheap`.
async fn next_slab(slabs: Slabs, cheap: bool) -> ServiceResult<(Slabs, Option<Arc<Slab>>)> {
    cpu::run_or_inline(cheap, move || {
        let mut slabs = slabs;
        let next = slabs.next();
        (slabs, next)
    })
    .await
    .map_err(|e| cpu_error(&e))
}

/// Bytes of JSON text per byte of a fixed-size element, at most (a 1-byte
/// integer or bool as `-128,`/`false,`; a float as 24 characters of 4 or 8
/// bytes; complex and structured values likewise): sizes a JSON answer's
/// budget share.
const JSON_TEXT_PER_BYTE: u64 = 8;

/// A slab's bytes as a message piece: its buffer goes back to the engine's
/// pool ([`crate::zarr::region::buffers`]) once the socket has taken it.
fn recycled(b: Vec<u8>) -> Bytes {
    struct Recycled(Vec<u8>);
    impl AsRef<[u8]> for Recycled {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }
    impl Drop for Recycled {
        fn drop(&mut self) {
            crate::zarr::region::buffers::give(std::mem::take(&mut self.0));
        }
    }
    Bytes::from_owner(Recycled(b))
}

/// Encodes one slab into `out`; false when the client went away.
async fn encode_slab(
    plan: &Plan,
    data: SlabData,
    json: &mut Option<JsonEncoder>,
    text: &mut u64,
    out: &mut Out,
) -> ServiceResult<bool> {
    match (data, json.as_mut()) {
        (SlabData::Fixed(bytes), None) => {
            out.push(recycled(project(plan.field.as_ref(), bytes).await?));
            Ok(out.flush(false).await)
        }
        (SlabData::Fixed(bytes), Some(enc)) => {
            let bytes = project(plan.field.as_ref(), bytes).await?;
            json_fixed(enc, bytes, plan.out_type.size().unwrap_or(1), out).await
        }
        (SlabData::Variable(v), Some(enc)) => {
            let max = plan.answer.max_selection;
            json_variable(enc, Arc::new(v.items), plan.fill_text.clone(), max, text, out).await
        }
        (SlabData::Variable(_), None) => Err(ServiceError::UnsupportedFormat(
            "variable-length elements are answered in JSON only (format=json)".into(),
        )),
    }
}

/// Opens the array for reading.
async fn open(at: &NodeRef<'_>, fill_missing: Option<bool>) -> ServiceResult<Opened> {
    let array = node::open_array(at).await?;
    let m = at.mount().mount().clone();
    let app = at.app();
    Ok(Opened {
        mount_name: at.mount_name().into(),
        fill_missing: fill_missing.unwrap_or_else(|| m.fill_missing_data_reads()),
        mount: m,
        cache: app.chunk_cache().clone(),
        array,
    })
}

/// The output type and shape, after an optional field.
fn output_of(
    dt: &DataType,
    shape: Vec<u64>,
    field: Option<&str>,
) -> ServiceResult<(Option<FieldView>, DataType, Vec<u64>)> {
    match field {
        None => Ok((None, dt.clone(), shape)),
        Some(name) => {
            let f =
                FieldView::of(dt, name).map_err(|e| ServiceError::InvalidSelection(format!("field `{name}`: {e}")))?;
            let shape = f.shape(&shape);
            let t = f.data_type.clone();
            Ok((Some(f), t, shape))
        }
    }
}

/// Checks the size limits; the exact body length for raw and npy.
pub(super) fn check_limits(
    app: &App,
    format: WireFormat,
    out_type: &DataType,
    out_shape: &[u64],
) -> ServiceResult<Option<u64>> {
    let limits = &app.config().limits;
    let elements = out_shape.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    // Variable-length elements: at least their JSON text `""` and a
    // separator here; counted by their real text as the answer is made.
    let es = out_type.size().map_or(3, |s| s as u64);
    let bytes = elements.saturating_mul(es);
    if bytes > limits.max_selection_bytes {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection is {} bytes ({} elements of {}, shape {out_shape:?}), more than limits.max_selection_bytes = {}",
            product_text(out_shape.iter().copied().chain([es])),
            product_text(out_shape.iter().copied()),
            zarr_name(out_type),
            limits.max_selection_bytes
        )));
    }
    if format == WireFormat::Json {
        let n = elements.max(empty_size(out_shape));
        if n > limits.max_json_elements {
            return Err(ServiceError::SelectionTooLarge(format!(
                "the selection has {n} elements, more than limits.max_json_elements = {} for format=json; use raw or npy",
                limits.max_json_elements
            )));
        }
    }
    format.check(out_type).map_err(|e| ServiceError::UnsupportedFormat(e.0))?;
    Ok(match format {
        WireFormat::Raw => Some(bytes),
        WireFormat::Npy => Some(npy_header(out_type, out_shape).len() as u64 + bytes),
        WireFormat::Json => None,
    })
}

pub(super) fn npy_header(dt: &DataType, shape: &[u64]) -> Vec<u8> {
    npy::header(&numpy_descr(dt).unwrap_or_else(|| "|V1".into()), shape)
}

/// Reads a selection of an array.
///
/// # Errors
/// Unknown mount or node, a group, invalid or unsupported metadata; a
/// selection that is malformed, of the wrong rank or out of bounds (400
/// naming the dimension); an unknown field; a format that cannot hold the
/// type; a selection over the limits (413); in the first slab: a missing
/// chunk with `fill_missing=false`, a corrupt chunk, a storage failure.
pub async fn read(at: &NodeRef<'_>, params: ReadParams) -> ServiceResult<DataRead> {
    let app = at.app();
    let src = open(at, params.fill_missing).await?;
    // Checking listed indices against the shape costs up to the lists:
    // on the CPU pool (which also frees the parsed lists) unless they are short.
    let (spec, array) = (params.selection, src.array.clone());
    let sel = cpu::run_or_inline(spec.listed() <= crate::zarr::selection::INLINE_LISTED, move || {
        spec.resolve_owned(&array.desc.shape, array.desc.dimension_names.as_deref())
    })
    .await
    .map_err(|e| cpu_error(&e))??;
    let desc = &src.array.desc;
    let (field, out_type, out_shape) = output_of(&desc.data_type, sel.result_shape(), params.field.as_deref())?;
    let content_length = check_limits(app, params.format, &out_type, &out_shape)?;
    // Exactly one whole chunk or inner chunk (a hot tile, an aligned box):
    // its decoded bytes are the answer.
    if field.is_none() && params.format != WireFormat::Json {
        if let Some(unit) = whole::whole_chunk(desc, &sel) {
            let budget = AnswerLimits::of(app);
            if let Some(read) = whole::read(&src, &unit, params.format, content_length, &budget).await? {
                return Ok(read);
            }
        }
    }
    let es = desc.data_type.size().unwrap_or(0);
    let variable = desc.data_type.is_variable();
    let total = sel.num_elements().saturating_mul(es.max(16) as u64);
    let limits = &app.config().limits;
    let (budget, max_units) = (limits.read_slab_bytes, limits.max_chunks_per_request);
    let sharded = desc.sharding.is_some();
    let array = src.array.clone();
    // Planning (and counting the units touched) runs on the CPU pool: it
    // costs up to the selection's lists.
    let slab_budget = slab_budget(sel.num_elements(), es, variable, budget);
    let (read_plan, touched) = cpu::run_or_inline(plan::is_cheap(&sel), move || {
        let plan = plan_read(&array.desc, sel, slab_budget)?;
        // Fixed-size slabs end where units end rather than cut them (a cut
        // unit is read and decoded for each slab), up to twice the limit.
        let plan = if variable { plan } else { plan.growing_to(budget.saturating_mul(2)) };
        let touched = plan.touched_units();
        Ok::<_, plan::PlanError>((plan, touched))
    })
    .await
    .map_err(|e| cpu_error(&e))?
    .map_err(|e| plan_error(&e))?;
    // Inner chunks that are shards themselves are decoded as their inner
    // chunks (and theirs): each counts.
    let nested = desc.sharding.as_ref().map_or(1, |s| s.units_per_inner_chunk());
    let decodes = touched.saturating_mul(nested);
    if decodes > max_units {
        let what = match (sharded, nested > 1) {
            (true, true) => "inner chunks of nested shards",
            (true, false) => "inner chunks",
            _ => "chunks",
        };
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection touches {decodes} {what}, more than limits.max_chunks_per_request = {max_units}"
        )));
    }
    // A scan larger than half the cache would only evict hot chunks (each
    // entry, even of a missing chunk, weighs its overhead too; each stored
    // one its whole decoded unit, however little of it the selection takes:
    // the last element of 256 chunks of 64 MiB would otherwise fill the
    // cache with 16 GiB, faster than it evicts).
    let unit_shape = desc.sharding.as_ref().map_or(&desc.chunk_shape[..], |s| s.inner_chunk_shape());
    let unit_bytes = crate::zarr::array::decoded_bytes(unit_shape, &desc.data_type).unwrap_or(u64::MAX);
    let cached = touched.saturating_mul(unit_bytes.saturating_add(CACHE_ENTRY_ESTIMATE));
    let fill_cache = total.max(cached) <= src.cache.capacity() / 2;
    let engine = src.engine(fill_cache);
    // Chunks whose parts are read straight into the slab may be cut by
    // slabs at no cost beyond the bytes each holds: slabs of at most
    // `DIRECT_SLAB`, never grown to end on a chunk, the first ones small
    // and growing, so the first bytes go out early.
    let direct = !variable
        && long_runs(&read_plan, &src.array.desc.chunk_shape, es)
        && engine.ctx.reads_parts_directly(src.mount.storage().opens_files());
    let read_plan = if direct && slab_budget > FIRST_SLAB {
        let (budget, cheap) = (slab_budget.min(DIRECT_SLAB), read_plan.is_cheap());
        // Planned again (it copies the selection's lists): on the CPU pool
        // unless cheap.
        cpu::run_or_inline(cheap, move || read_plan.replan(budget, 0).map(|p| p.ramping_from(FIRST_SLAB)))
            .await
            .map_err(|e| cpu_error(&e))?
            .map_err(|e| plan_error(&e))?
    } else {
        read_plan
    };
    let estimate = if variable { VAR_ELEMENT_ESTIMATE } else { es as u64 };
    let small = read_plan.elements().saturating_mul(estimate) <= SMALL_ANSWER;
    let fill_text = Arc::new(if variable { variable_text(&out_type, &src.array.desc.fill_value) } else { Vec::new() });
    let plan = Plan {
        engine,
        cache: src.cache.clone(),
        plan: Arc::new(read_plan),
        es,
        variable,
        field,
        format: params.format,
        out_type: out_type.clone(),
        out_shape: out_shape.clone(),
        answer: AnswerLimits::of(app),
        small,
        fill_text,
    };
    start(Arc::new(plan), content_length).await
}

/// Slabs of fixed-size elements are at least this big (unless the answer
/// is smaller): smaller ones cost more in hand-offs than they gain.
const MIN_SLAB: u64 = 1 << 20;

/// The first slab of a read whose chunks' parts are read straight into
/// the slab (uncompressed chunks of a local mount, caches aside): its
/// slabs ramp up from this size, doubling up to the plan's
/// ([`ReadPlan::ramping_from`]), so the first byte goes out after a read
/// of about this much rather than of a whole slab (a quarter of the
/// answer, up to 2 × `limits.read_slab_bytes`).
const FIRST_SLAB: u64 = 1 << 20;

/// Whether the selection of `plan` takes runs of at least
/// [`MIN_DIRECT_RUN`](crate::zarr::region::direct::MIN_DIRECT_RUN) bytes
/// from each chunk it touches in full (elements of `es` bytes, chunks of
/// `chunk`): contiguous step-1 slices from the last dimension on, each
/// dimension counting while the ones after it cover whole chunk extents
/// from a chunk's start (a slice starting inside a chunk counts that
/// chunk's part, the shortest). Chunks read in shorter runs (a plane across the last dimension) are
/// read whole, not directly: their slabs must not cut them.
fn long_runs(plan: &ReadPlan, chunk: &[u64], es: usize) -> bool {
    let dims = &plan.selection().dims;
    let mut run = es as u64;
    for (ix, &c) in dims.iter().zip(chunk).rev() {
        // The elements a run takes in this dimension, and whether they are
        // whole chunk extents (the run goes on into the next dimension).
        let (n, whole) = match ix {
            // From a start inside a chunk, that chunk gives the shortest.
            crate::zarr::selection::DimIndexer::Slice { start, step: 1, len } if c > 0 => {
                ((*len).min(c - start % c), *len >= c && start % c == 0)
            }
            _ => (1, c == 1),
        };
        run = run.saturating_mul(n);
        if !whole {
            break;
        }
    }
    run >= crate::zarr::region::direct::MIN_DIRECT_RUN
}

/// The slabs of such a read are at most this big (a quarter of the answer
/// when that is less), and never grow to end where a chunk ends (cutting
/// one costs nothing): four of them (the answer's share) stay in the slab
/// buffer pool ([`crate::zarr::region::buffers::POOL_BYTES`]) and, on the
/// test machine, in the last-level cache between the read into the slab
/// and the write to the socket. Slabs of 64 MiB (a whole 2048×2048×64
/// float32 array: a quarter of the answer, grown to whole chunks) missed
/// the pool, and clearing fresh pages took a quarter of the server's CPU.
const DIRECT_SLAB: u64 = 8 << 20;

/// The slab budget of a read of `elements` elements of `es` bytes: about a
/// quarter of the answer, so that sending one slab overlaps reading the
/// next from the start (one slab of `limits.read_slab_bytes` would be read
/// whole before its first byte is sent), within [`MIN_SLAB`] and `limit`.
/// Variable-length elements: `limit` (their slabs are sized as they go).
fn slab_budget(elements: u64, es: usize, variable: bool, limit: u64) -> u64 {
    if variable {
        return limit;
    }
    (elements.saturating_mul(es as u64) / 4).clamp(MIN_SLAB.min(limit), limit)
}

/// The JSON text of one variable-length element.
fn variable_text(dt: &DataType, b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::service::wire::json::write_variable(dt, b, &mut out);
    out
}

/// Starts the producer; waits for its first message.
async fn start(plan: Arc<Plan>, content_length: Option<u64>) -> ServiceResult<DataRead> {
    let (tx, mut rx) = mpsc::channel::<ServiceResult<Pieces>>(1);
    let header = match plan.format {
        WireFormat::Npy => vec![Bytes::from(npy_header(&plan.out_type, &plan.out_shape))],
        _ => Vec::new(),
    };
    let producer = plan.clone();
    tokio::spawn(async move {
        let cache = producer.cache.clone();
        let message = if producer.small {
            SMALL_ANSWER
        } else if producer.variable {
            producer.answer.slab_bytes
        } else if producer.format == WireFormat::Json {
            producer.plan.budget()
        } else {
            // A message per slab, sent by `produce_fixed` once the next
            // slab is being read.
            u64::MAX
        };
        let mut out = Out::new(tx, message);
        for h in header {
            out.push(h);
        }
        let result = produce(&producer, &mut out).await;
        out.finish(result).await;
        log_cache(&cache);
    });
    let (first, ended) = first_message(&mut rx).await?;
    Ok(DataRead {
        shape: plan.out_shape.clone(),
        data_type: plan.out_type.clone(),
        format: plan.format,
        content_length,
        first,
        rest: (!ended).then_some(rx),
    })
}

/// A plan that cannot be made from a selection already checked against
/// the array: a fault of zarrd.
fn plan_error(e: &plan::PlanError) -> ServiceError {
    ServiceError::Internal(format!("planning a checked selection failed: {e}"))
}

/// The same read planned again (on the CPU pool: it copies the selection).
async fn replan<F>(plan: &Arc<ReadPlan>, f: F) -> ServiceResult<Option<Arc<ReadPlan>>>
where
    F: FnOnce(&ReadPlan) -> Result<Option<ReadPlan>, plan::PlanError> + Send + 'static,
{
    let p = plan.clone();
    let new = cpu::run(move || f(&p)).await.map_err(|e| cpu_error(&e))?.map_err(|e| plan_error(&e))?;
    Ok(new.map(Arc::new))
}

/// Produces every slab of `plan` into `out`; false when the client went
/// away.
///
/// A large answer first takes its share of the answer budget (4 ×
/// `read_slab_bytes`: one message being written, one queued, one being
/// encoded and the slab it comes from). Slabs of variable-length elements
/// hold copies of at most `read_slab_bytes` (1 MiB for a small answer): a
/// slab that would hold more is read again as slabs of a quarter of its
/// elements (down to one element, which may be larger), and after a slab
/// that used less than a quarter of its cap, slabs double again (up to the
/// first plan's).
async fn produce(plan: &Arc<Plan>, out: &mut Out) -> ServiceResult<bool> {
    let a = &plan.answer;
    let mut small = plan.small;
    // Four slabs' worth (one message being sent, one queued, one being
    // encoded and its slab; for fixed-size elements: one being sent, one
    // queued, one waiting and the next being read), or less for a fixed-size answer that is
    // smaller: a 2 MiB answer does not hold 128 MiB of the budget.
    let largest = if plan.variable { a.slab_bytes } else { plan.plan.max_slab_bytes() };
    let full = largest.saturating_mul(4);
    let share = if plan.variable {
        full
    } else {
        let per = if plan.format == WireFormat::Json { JSON_TEXT_PER_BYTE } else { 1 };
        let answer = plan.plan.elements().saturating_mul(plan.es as u64).saturating_mul(per);
        full.min(answer.saturating_mul(4))
    };
    if !small {
        let Some(held) = a.share(share, &out.tx).await? else {
            return Ok(false); // Gone while waiting for the share.
        };
        out.share = Some(held);
    }
    let mut json =
        (plan.format == WireFormat::Json).then(|| JsonEncoder::new(plan.out_type.clone(), plan.out_shape.clone()));
    if !plan.variable {
        return produce_fixed(plan, out, json).await;
    }
    let mut read_plan = plan.plan.clone();
    // Slabs are planned inline when that costs less than the hand-off: the
    // plan is the same for all of them (a variable-length read's new plans
    // cover fewer elements, so stay as cheap).
    let cheap = read_plan.is_cheap();
    let (mut slabs, mut offset, mut text) = (read_plan.slabs(), 0u64, 0u64);
    loop {
        let (rest, current) = next_slab(slabs, cheap).await?;
        slabs = rest;
        let Some(slab) = current else { break };
        // A message per slab at least, sent once the next slab is known to
        // exist: the last one's pieces go with the end mark (one message for
        // a one-slab answer), and an error in a later slab cuts the body
        // (the first slab's errors are the answer's).
        if !out.flush(true).await {
            return Ok(false);
        }
        let cap = if small { SMALL_ANSWER } else { a.slab_bytes };
        let engine = &plan.engine;
        // A client that goes away ends the read now, not after the slab
        // (which may take minutes of decoding): its queued units are dropped.
        let read = tokio::select! {
            read = read_slab(&engine.ctx, &engine.store, slab.clone(), cap) => read,
            () = out.tx.closed() => return Ok(false),
        };
        let Some(data) = read.map_err(|e| region_error(&engine.path, e))? else {
            if small {
                // Larger than it looked: take a share, then go on as a large answer.
                small = false;
                out.message = usize::try_from(a.slab_bytes).unwrap_or(usize::MAX);
                let Some(held) = a.share(full, &out.tx).await? else {
                    return Ok(false); // Gone while waiting for the share.
                };
                out.share = Some(held);
            } else {
                let len = slab.len;
                let smaller = replan(&read_plan, move |p| p.replan_smaller(len, offset).map(Some)).await?;
                read_plan = smaller.unwrap_or(read_plan);
            }
            slabs = read_plan.slabs_from(offset);
            continue;
        };
        offset += slab.len;
        let light = data.is_light(cap);
        if !encode_slab(plan, data, &mut json, &mut text, out).await? {
            return Ok(false);
        }
        if light && read_plan.budget() < plan.plan.budget() {
            let max = plan.plan.budget();
            if let Some(larger) = replan(&read_plan, move |p| p.replan_larger(max, offset)).await? {
                read_plan = larger;
                slabs = read_plan.slabs_from(offset);
            }
        }
    }
    if let Some(enc) = json.as_mut() {
        let mut end = Vec::new();
        enc.finish(&mut end);
        out.push(Bytes::from(end));
    }
    Ok(true)
}

/// One slab being read on its own task; dropping it stops the read.
struct SlabTask(tokio::task::JoinHandle<ServiceResult<Option<SlabData>>>);

impl SlabTask {
    fn spawn(plan: &Arc<Plan>, slab: Arc<Slab>) -> Self {
        let plan = plan.clone();
        Self(tokio::spawn(async move {
            let engine = &plan.engine;
            // Fixed-size slabs have no cap.
            let read = read_slab(&engine.ctx, &engine.store, slab, u64::MAX).await;
            read.map_err(|e| region_error(&engine.path, e))
        }))
    }

    async fn join(mut self) -> ServiceResult<SlabData> {
        match (&mut self.0).await {
            Ok(Ok(Some(data))) => Ok(data),
            Ok(Ok(None)) => Err(ServiceError::Internal("a slab of fixed-size elements went past its cap".into())),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(ServiceError::Internal(format!("reading a slab failed: {e}"))),
        }
    }
}

impl Drop for SlabTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// [`produce`] for fixed-size elements: each slab read on its own task,
/// the next one started before this one's message is handed on, so reading
/// it overlaps waiting for the socket; one message being written, one
/// queued, one waiting to be queued and the next slab being read are all
/// the slabs the answer holds.
async fn produce_fixed(plan: &Arc<Plan>, out: &mut Out, mut json: Option<JsonEncoder>) -> ServiceResult<bool> {
    let cheap = plan.plan.is_cheap();
    let mut slabs = plan.plan.slabs();
    let mut text = 0u64;
    let (rest, first) = next_slab(slabs, cheap).await?;
    slabs = rest;
    let mut next = first.map(|slab| SlabTask::spawn(plan, slab));
    while let Some(task) = next.take() {
        // A client that goes away ends the read now, not after the slab
        // (which may take minutes of decoding): the slab's task is aborted
        // and its queued units dropped.
        let data = tokio::select! {
            data = task.join() => data?,
            () = out.tx.closed() => return Ok(false),
        };
        if !encode_slab(plan, data, &mut json, &mut text, out).await? {
            return Ok(false);
        }
        let (rest, following) = next_slab(slabs, cheap).await?;
        slabs = rest;
        next = following.map(|slab| SlabTask::spawn(plan, slab));
        // This slab's message goes when another slab follows (the last
        // one's goes with the end mark; an error in a later slab cuts the
        // body, the first slab's errors are the answer's).
        if next.is_some() && !out.flush(true).await {
            return Ok(false);
        }
    }
    if let Some(enc) = json.as_mut() {
        let mut end = Vec::new();
        enc.finish(&mut end);
        out.push(Bytes::from(end));
    }
    Ok(true)
}

/// The cache's figures, at debug level (`RUST_LOG=zarrd::cache=debug`).
fn log_cache(cache: &ChunkCache) {
    if tracing::enabled!(target: "zarrd::cache", tracing::Level::DEBUG) {
        let st = cache.stats();
        tracing::debug!(
            target: "zarrd::cache",
            hits = st.hits,
            misses = st.misses,
            invalidations = st.invalidations,
            entries = st.entries,
            bytes = st.bytes,
            capacity = st.capacity,
            "decoded chunk cache"
        );
    }
}

/// Parses a coordinate list (`1,2,3`) for `what`.
///
/// # Errors
/// A value that is not a non-negative integer, naming its position.
pub fn parse_coords(text: &str, what: &str) -> ServiceResult<Vec<u64>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .enumerate()
        .map(|(i, s)| {
            s.trim().parse::<u64>().map_err(|_| {
                ServiceError::InvalidSelection(format!(
                    "{what}: dimension {i}: expected a non-negative integer, got `{}`",
                    s.trim()
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selections_in_long_runs_read_chunks_directly() {
        use crate::zarr::selection::SelectionMode;
        let shape = [2048u64, 2048, 64];
        let chunk = [128u64, 128, 64];
        let runs = |sel: &str| {
            let sel = SelectionSpec::parse(sel, SelectionMode::Basic).unwrap().resolve(&shape, None).unwrap();
            long_runs(&ReadPlan::new(sel, chunk.to_vec(), None, 4, 1 << 20).unwrap(), &chunk, 4)
        };
        // Whole rows of chunks: 32 KiB runs; 16 elements: 64 bytes.
        assert!(runs(":,:,:") && runs("512:1024,512:1024,:") && runs("7,:,:") && runs("0:3,5:100,:"));
        assert!(!runs(":,:,7") && !runs("100:1100,200:1200,3:50") && !runs(":,:,0:16") && !runs(":,::2,:"));
        // A step-1 run of 16 whole last dimensions (16 x 256 bytes): 4 KiB.
        assert!(runs("0,0:16,:") && !runs("0,0:15,:"));
        // Last dimensions not starting on a chunk's start: each chunk gives
        // runs of part of it, not whole extents.
        let shape = [4096u64, 4096];
        let chunk = [1024u64, 1024];
        let runs2 = |sel: &str| {
            let sel = SelectionSpec::parse(sel, SelectionMode::Basic).unwrap().resolve(&shape, None).unwrap();
            long_runs(&ReadPlan::new(sel, chunk.to_vec(), None, 4, 1 << 20).unwrap(), &chunk, 4)
        };
        assert!(!runs2(":,512:1536") && runs2(":,1024:3072") && runs2(":,:"));
    }

    #[test]
    fn fields_name_the_choices() {
        use crate::zarr::data_type::Field;
        let field = Field::little;
        let dt = DataType::Structured {
            size: 6,
            fields: vec![field("a", 0, DataType::UInt16, vec![]), field("b", 2, DataType::UInt8, vec![4])],
        };
        let (f, t, shape) = output_of(&dt, vec![3], Some("b")).unwrap();
        assert_eq!((t, shape), (DataType::UInt8, vec![3, 4]));
        assert_eq!(f.unwrap().extract(&[1, 0, 9, 8, 7, 6]).unwrap(), vec![9, 8, 7, 6]);
        let e = output_of(&dt, vec![3], Some("z")).unwrap_err().to_string();
        assert!(e.contains("field `z`") && e.contains("a, b"), "{e}");
        assert!(output_of(&DataType::Int8, vec![], Some("a")).unwrap_err().to_string().contains("no fields"));
    }
}
