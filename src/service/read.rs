//! Slice reads and decoded chunk reads, streamed slab by slab.
//!
//! A read is checked whole before anything is sent (array metadata, the
//! selection against the shape, the field, the format, the size limits),
//! then produced as a sequence of *slabs*: contiguous runs of the output in
//! C order, each at most `limits.read_slab_bytes` of decoded elements.
//!
//! - Basic and orthogonal selections are split along the outermost output
//!   dimension whose rows fit the budget; the positions along it are grouped
//!   by the chunk they fall in, so a slab starts and ends on chunk
//!   boundaries wherever the budget allows. Coordinate selections are split
//!   into runs of points.
//! - For a slab, every dimension's selected indices are projected onto the
//!   chunk grid (per chunk: runs of `(output position, index in chunk,
//!   length, step)`), and only the chunks the selection touches are read —
//!   a strided or listed selection never reads the chunks between.
//! - The unit of decoding (and caching) is the chunk, or for sharded arrays
//!   the inner chunk: a shard's index is read by range (cached), then only
//!   the inner chunks needed, their byte ranges coalesced as the engine's
//!   partial shard reads do, conditioned on the index's ETag so a shard
//!   rewritten in between is detected and read again.
//! - Chunks are fetched concurrently (bounded); decoding and copying run on
//!   the CPU pool ([`super::cpu`]), one task per chunk, which drops the
//!   decoded chunk as soon as its part is copied (unless cached).
//! - A producer task sends each slab's bytes through a channel of one, in
//!   messages of about a slab, so a read holds about four slabs (one
//!   message being written to the socket, one queued, one being encoded and
//!   the slab it comes from) plus the chunks being decoded, whatever its
//!   size. A client that goes away stops the producer.
//! - Started answers are bounded together: an answer larger than
//!   1 MiB takes a share of `limits.read_answer_budget_bytes`
//!   (4 × `read_slab_bytes`) before its first slab, and every message it
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
//! Missing chunks read as the fill value unless the mount
//! (`fill_missing_data_reads = false`) or the request (`fill_missing=false`)
//! says otherwise; then the read fails naming the first missing chunk's key
//! (for sharded arrays: an inner chunk absent from its shard counts as
//! missing, named with its shard's key).

pub mod plan;

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::sync::mpsc;

use super::chunk_cache::{CacheKey, Cached, ChunkCache, Part, Version};
use super::node::{self, ArrayNode, NodePath};
use super::wire::json::{empty_size, variable_text_len, JsonEncoder, VarCursor, VarItem};
use super::wire::{npy, numpy_descr, zarr_name, WireFormat as OutputFormat};
use super::{cpu, App, ServiceError, ServiceResult};
use crate::storage::mount::RecheckPolicy;
use crate::storage::request::ByteRange;
use crate::storage::{Mount, ReadRequest, StorageError, StoreKey};
use crate::zarr::array::ArrayDescription;
use crate::zarr::byte_range::ByteRangeRequest;
use crate::zarr::chunk::ChunkData;
use crate::zarr::codec::array_to_bytes::sharding::{coalesce_ranges, ShardIndex, ShardingCodec};
use crate::zarr::data_type::DataType;
use crate::zarr::field::FieldView;
use crate::zarr::selection::{Selection, SelectionSpec};
use plan::{ReadPlan, Slab, Slabs, Unit, UnitCopy, Units};

/// What one cache entry costs beyond its data (the cache's own overhead,
/// the key, the map's bookkeeping), for deciding whether a read may fill it.
const CACHE_ENTRY_ESTIMATE: u64 = 512;

/// Byte ranges of inner chunks at most this far apart are read together.
const COALESCE_GAP: u64 = 4096;

/// What a slice read asks for.
#[derive(Debug, Clone, Default)]
pub struct ReadParams {
    /// The selection, as parsed.
    pub selection: SelectionSpec,
    /// A field of a structured array.
    pub field: Option<String>,
    /// The output format.
    pub format: OutputFormat,
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
    pub format: OutputFormat,
    /// Overrides the mount's `fill_missing_data_reads`.
    pub fill_missing: Option<bool>,
}

/// The pieces of one message of a read's body. The last message of an
/// answer ends with an empty piece (pieces are never empty otherwise): a
/// channel that closes before it is a failed answer, never a whole one.
pub type Pieces = Vec<Bytes>;

/// Whether `pieces` is an answer's last message (its end mark removed).
pub fn take_last(pieces: &mut Pieces) -> bool {
    if pieces.last().is_some_and(Bytes::is_empty) {
        pieces.pop();
        true
    } else {
        false
    }
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
    pub format: OutputFormat,
    /// Exact body length (raw and npy).
    pub content_length: Option<u64>,
    /// The first message of the body.
    pub first: Pieces,
    /// The rest of the body (`None`: the first message was all of it).
    pub rest: Option<mpsc::Receiver<ServiceResult<Pieces>>>,
}

/// A slab's (or chunk's) elements.
#[derive(Debug)]
enum SlabData {
    Fixed(Vec<u8>),
    Variable(VarSlab),
}

/// A slab of variable-length elements: copies of the elements read, `None`
/// for the fill value (never copied: its JSON text is rendered once per
/// read and repeated as the answer is written).
#[derive(Debug)]
struct VarSlab {
    items: Vec<Option<Vec<u8>>>,
    /// Bytes the slab holds: its list ([`VAR_ITEM_COST`] per element) and
    /// the copies.
    bytes: u64,
    /// What `bytes` may reach; a slab of one element may pass it (the
    /// element is at most one decoded unit).
    cap: u64,
    /// Past `cap`: copying stops, and the slab is planned again smaller.
    over: bool,
}

/// What one element of a [`VarSlab`] costs besides its bytes.
const VAR_ITEM_COST: u64 = std::mem::size_of::<Option<Vec<u8>>>() as u64;

/// Bytes a variable-length element is planned at (slabs of
/// `read_slab_bytes / 64` elements), until the real sizes say otherwise.
pub const VAR_ELEMENT_ESTIMATE: u64 = 64;

/// Answers up to this size (estimated decoded bytes) take no share of
/// `limits.read_answer_budget_bytes`: their messages and slabs are at most
/// this big, so a connection holds at most about three of them.
const SMALL_ANSWER: u64 = 1 << 20;

/// What bounds an answer once it has started: the budget of all started
/// answers, the slab size, the selection limit.
#[derive(Debug, Clone)]
struct AnswerLimits {
    budget: Arc<tokio::sync::Semaphore>,
    budget_kib: u64,
    slab_bytes: u64,
    max_selection: u64,
}

impl AnswerLimits {
    fn of(app: &App) -> Self {
        let l = &app.config().limits;
        Self {
            budget: app.read_answer_budget().clone(),
            budget_kib: l.read_answer_budget_bytes.div_ceil(1024).max(1),
            slab_bytes: l.read_slab_bytes,
            max_selection: l.max_selection_bytes,
        }
    }

    /// Takes `bytes` of the budget (all of it at most), waiting for room;
    /// `None` when the answer's client goes away meanwhile (a waiting
    /// producer holds its plan: it must not outlive its request).
    async fn share(&self, bytes: u64, tx: &mpsc::Sender<ServiceResult<Pieces>>) -> ServiceResult<Option<Share>> {
        #[allow(clippy::cast_possible_truncation)] // clamped to u32
        let kib = bytes.div_ceil(1024).clamp(1, self.budget_kib.min(u64::from(u32::MAX))) as u32;
        tokio::select! {
            permit = self.budget.clone().acquire_many_owned(kib) => {
                let permit =
                    permit.map_err(|_| ServiceError::Internal("the read answer budget is closed".into()))?;
                Ok((!tx.is_closed()).then(|| Arc::new(permit)))
            }
            () = tx.closed() => Ok(None),
        }
    }
}

/// An answer's share of `limits.read_answer_budget_bytes`: held by the
/// producer and by every message it sent, until the last is written.
type Share = Arc<tokio::sync::OwnedSemaphorePermit>;

/// Bytes of a message, holding the answer's share until they are dropped
/// (written to the socket, or the connection closed).
struct Held(Bytes, #[allow(dead_code)] Share);

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Where an answer's bytes go: pieces collected into messages of about
/// `message` bytes, sent through the channel of one; the last one carries
/// the end mark ([`Pieces`]).
struct Out {
    tx: mpsc::Sender<ServiceResult<Pieces>>,
    pending: Pieces,
    pending_len: usize,
    message: usize,
    share: Option<Share>,
}

impl Out {
    fn new(tx: mpsc::Sender<ServiceResult<Pieces>>, message: u64) -> Self {
        Self {
            tx,
            pending: Vec::new(),
            pending_len: 0,
            message: usize::try_from(message).unwrap_or(usize::MAX),
            share: None,
        }
    }

    fn push(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.pending_len += b.len();
        let b = match &self.share {
            Some(s) => Bytes::from_owner(Held(b, s.clone())),
            None => b,
        };
        self.pending.push(b);
    }

    /// Sends the pending pieces once they make a message (`all`: whatever
    /// there is); false when the client went away.
    async fn flush(&mut self, all: bool) -> bool {
        if self.pending.is_empty() || (!all && self.pending_len < self.message) {
            return true;
        }
        self.pending_len = 0;
        self.tx.send(Ok(std::mem::take(&mut self.pending))).await.is_ok()
    }

    /// Ends the answer: its last message (with the end mark), or the error
    /// (an ordinary error answer when nothing was sent yet).
    async fn finish(mut self, result: ServiceResult<bool>) {
        match result {
            Ok(true) => {
                let mut last = std::mem::take(&mut self.pending);
                last.push(Bytes::new());
                let _ = self.tx.send(Ok(last)).await;
            }
            Ok(false) => {}
            Err(e) => {
                let _ = self.tx.send(Err(e)).await;
            }
        }
    }
}

fn cpu_error(e: &cpu::CpuError) -> ServiceError {
    ServiceError::Internal(e.to_string())
}
/// Where a read's chunks come from, and how they are cached.
#[derive(Debug)]
struct Source {
    mount: Arc<Mount>,
    mount_name: Arc<str>,
    array: Arc<ArrayNode>,
    cache: Arc<ChunkCache>,
    recheck: RecheckPolicy,
    fill_missing: bool,
    /// Whether decoded data read now may enter the cache.
    fill_cache: bool,
    /// Decoding unit shape: the chunk, or the inner chunk when sharded.
    unit_shape: Vec<u64>,
}

/// A whole chunk: cached, or its stored bytes still to decode.
enum Fetched {
    Ready(Option<Arc<ChunkData>>),
    Stored { bytes: Bytes, etag: String, generation: u64 },
}

fn corrupt(key: &str, reason: impl std::fmt::Display) -> ServiceError {
    ServiceError::CorruptChunk { key: key.to_string(), reason: reason.to_string() }
}

fn storage_range(r: &ByteRangeRequest) -> Option<ByteRange> {
    match r {
        ByteRangeRequest::Bounded(r) if r.end > r.start => Some(ByteRange::Bounded { first: r.start, last: r.end - 1 }),
        ByteRangeRequest::Bounded(_) => None,
        ByteRangeRequest::Suffix(n) => Some(ByteRange::Suffix(*n)),
    }
}

impl Source {
    fn cache_key(&self, key: &StoreKey, part: Part) -> CacheKey {
        CacheKey { mount: self.mount_name.clone(), key: key.as_str().into(), part }
    }

    /// The current ETag of `key` (`None`: missing).
    async fn etag(&self, key: &StoreKey) -> ServiceResult<Option<String>> {
        match self.mount.storage().head(key).await {
            Ok(meta) => Ok(Some(meta.etag)),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the cached `version` of `key` may be used now (revalidating
    /// by ETag when the policy asks; a confirmed entry is stored again with
    /// the new check time by `refresh`).
    async fn usable(&self, key: &StoreKey, version: &Version) -> ServiceResult<bool> {
        if !version.needs_recheck(self.recheck) {
            return Ok(true);
        }
        Ok(self.etag(key).await? == version.etag)
    }

    async fn chunk(&self, key: &StoreKey) -> ServiceResult<Fetched> {
        let ck = self.cache_key(key, Part::Chunk);
        if let Some(entry) = self.cache.get(&ck) {
            if let Cached::Chunk { version, data } = &*entry {
                let g = self.cache.generation();
                if self.usable(key, version).await? {
                    self.cache.record(true);
                    if version.needs_recheck(self.recheck) {
                        let version = Version { etag: version.etag.clone(), checked: Instant::now() };
                        self.cache.insert(ck, Cached::Chunk { version, data: data.clone() }, g);
                    }
                    return Ok(Fetched::Ready(data.clone()));
                }
            }
        }
        self.cache.record(false);
        let generation = self.cache.generation();
        match self.mount.storage().read(key, &ReadRequest::default()).await {
            Ok(outcome) => Ok(Fetched::Stored { bytes: outcome.body, etag: outcome.meta.etag, generation }),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => {
                if self.fill_cache {
                    let version = Version { etag: None, checked: Instant::now() };
                    self.cache.insert(ck, Cached::Chunk { version, data: None }, generation);
                }
                Ok(Fetched::Ready(None))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Decodes stored chunk bytes (on the CPU pool's thread) and caches them.
    fn decode_chunk(
        &self,
        key: &StoreKey,
        bytes: Bytes,
        etag: String,
        generation: u64,
    ) -> ServiceResult<Arc<ChunkData>> {
        let data = self.array.desc.decode_chunk(Vec::from(bytes)).map_err(|e| corrupt(key.as_str(), e))?;
        let data = Arc::new(data);
        if self.fill_cache {
            let version = Version { etag: Some(etag), checked: Instant::now() };
            self.cache.insert(
                self.cache_key(key, Part::Chunk),
                Cached::Chunk { version, data: Some(data.clone()) },
                generation,
            );
        }
        Ok(data)
    }

    /// The shard index of `key`: its ETag, stamp and entries (`None`: the
    /// shard is missing).
    async fn shard_index(
        &self,
        key: &StoreKey,
        sharding: &ShardingCodec,
        fresh: bool,
    ) -> ServiceResult<(Option<String>, u64, Option<Arc<ShardIndex>>)> {
        let ck = self.cache_key(key, Part::Index);
        if !fresh {
            if let Some(entry) = self.cache.get(&ck) {
                if let Cached::Index { version, stamp, index } = &*entry {
                    let g = self.cache.generation();
                    if self.usable(key, version).await? {
                        if version.needs_recheck(self.recheck) {
                            let v = Version { etag: version.etag.clone(), checked: Instant::now() };
                            self.cache.insert(ck, Cached::Index { version: v, stamp: *stamp, index: index.clone() }, g);
                        }
                        return Ok((version.etag.clone(), *stamp, index.clone()));
                    }
                }
            }
        }
        let generation = self.cache.generation();
        let request = ReadRequest { range: storage_range(&sharding.index_byte_range()), ..ReadRequest::default() };
        let (etag, index) = match self.mount.storage().read(key, &request).await {
            Ok(outcome) => {
                if outcome.body.len() as u64 != sharding.index_size() {
                    return Err(corrupt(
                        key.as_str(),
                        format!(
                            "the shard is {} bytes, shorter than its {}-byte index",
                            outcome.body.len(),
                            sharding.index_size()
                        ),
                    ));
                }
                let index = sharding.decode_index(Vec::from(outcome.body)).map_err(|e| corrupt(key.as_str(), e))?;
                (Some(outcome.meta.etag), Some(Arc::new(index)))
            }
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => (None, None),
            Err(StorageError::RangeNotSatisfiable { size, .. }) => {
                return Err(corrupt(
                    key.as_str(),
                    format!("the shard is {size} bytes, shorter than its {}-byte index", sharding.index_size()),
                ))
            }
            Err(e) => return Err(e.into()),
        };
        let stamp = self.cache.new_stamp();
        let version = Version { etag: etag.clone(), checked: Instant::now() };
        self.cache.insert(ck, Cached::Index { version, stamp, index: index.clone() }, generation);
        Ok((etag, stamp, index))
    }
}

/// The fill value written into missing parts, when it is not all zeros (a
/// fresh buffer is zeros already) or the type is variable-length.
fn needs_fill(fill: &[u8], variable: bool) -> bool {
    // Variable-length: a fresh slab's elements are the fill value already.
    !variable && fill.iter().any(|&b| b != 0)
}

/// Copies `data` (one decoded unit) into `slab` as `spec` says.
fn copy_unit(
    data: &ChunkData,
    unit_elems: u64,
    spec: &UnitCopy,
    slab: &Mutex<SlabData>,
    es: usize,
    key: &str,
) -> ServiceResult<()> {
    let mut guard = slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match (data, &mut *guard) {
        (ChunkData::Fixed(src), SlabData::Fixed(dst)) => {
            if src.len() as u64 != unit_elems * es as u64 {
                return Err(corrupt(
                    key,
                    format!("decoded to {} bytes, expected {}", src.len(), unit_elems * es as u64),
                ));
            }
            #[allow(clippy::cast_possible_truncation)] // within the buffers, checked above and by construction
            spec.each(&mut |s, d, n| {
                let (s, d, n) = (s as usize * es, d as usize * es, n as usize * es);
                dst[d..d + n].copy_from_slice(&src[s..s + n]);
            });
        }
        (ChunkData::Variable(src), SlabData::Variable(dst)) => {
            if src.len() as u64 != unit_elems {
                return Err(corrupt(key, format!("decoded to {} elements, expected {unit_elems}", src.len())));
            }
            let single = dst.items.len() == 1;
            #[allow(clippy::cast_possible_truncation)]
            spec.each(&mut |s, d, n| {
                for i in 0..n as usize {
                    if dst.over {
                        return;
                    }
                    let e = &src[s as usize + i];
                    dst.bytes = dst.bytes.saturating_add(e.len() as u64);
                    if dst.bytes > dst.cap && !single {
                        dst.over = true;
                        return;
                    }
                    dst.items[d as usize + i] = Some(e.clone());
                }
            });
        }
        _ => return Err(corrupt(key, "decoded to the wrong kind of elements")),
    }
    Ok(())
}

/// Writes the fill value where `spec` would copy.
fn fill_unit(fill: &[u8], spec: &UnitCopy, slab: &Mutex<SlabData>) {
    let mut guard = slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let es = fill.len();
    #[allow(clippy::cast_possible_truncation)]
    match &mut *guard {
        SlabData::Fixed(dst) => spec.each(&mut |_, d, n| {
            for i in 0..n as usize {
                let at = (d as usize + i) * es;
                dst[at..at + es].copy_from_slice(fill);
            }
        }),
        // `None` is the fill value already.
        SlabData::Variable(_) => {}
    }
}

/// Whether a slab of variable-length elements went past its cap (its
/// remaining units need not be read).
fn slab_over(slab: &Mutex<SlabData>) -> bool {
    matches!(&*slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner), SlabData::Variable(v) if v.over)
}
/// The first missing unit met while assembling a slab (with fill_missing
/// off): grid coordinates and a description naming the key.
type Missing = Mutex<Option<(Vec<u64>, String)>>;

/// The whole read, checked.
#[derive(Debug)]
struct Plan {
    src: Arc<Source>,
    plan: Arc<ReadPlan>,
    /// Record size (0 for variable-length types).
    es: usize,
    variable: bool,
    field: Option<FieldView>,
    format: OutputFormat,
    out_type: DataType,
    out_shape: Vec<u64>,
    answer: AnswerLimits,
    /// Whether the answer is small enough to take no budget share.
    small: bool,
    /// The fill value's JSON text (variable-length types).
    fill_text: Arc<Vec<u8>>,
}

fn concurrency() -> usize {
    (rayon::current_num_threads() * 4).max(8)
}

/// Inner chunks of one shard read per round (their byte ranges coalesced,
/// their decodes in flight): bounds a shard's per-round state.
const SHARD_BATCH: usize = 256;

/// The next slab of `slabs`, made on the CPU pool (a slab's planning costs
/// up to its rows or points) unless the whole plan is `cheap`.
async fn next_slab(slabs: Slabs, cheap: bool) -> ServiceResult<(Slabs, Option<Arc<Slab>>)> {
    cpu::run_or_inline(cheap, move || {
        let mut slabs = slabs;
        let next = slabs.next();
        (slabs, next)
    })
    .await
    .map_err(|e| ServiceError::Internal(e.to_string()))
}

/// Reads one slab's units into a fresh buffer (`None`: a slab of
/// variable-length elements that went past `cap` bytes).
async fn assemble(plan: &Arc<Plan>, slab: Arc<Slab>, cap: u64) -> ServiceResult<Option<SlabData>> {
    let src = &plan.src;
    let n = usize::try_from(slab.len).map_err(|_| ServiceError::BadRequest("slab too large".into()))?;
    let data = if plan.variable {
        let bytes = (n as u64).saturating_mul(VAR_ITEM_COST);
        SlabData::Variable(VarSlab { items: vec![None; n], bytes, cap, over: bytes > cap && n > 1 })
    } else {
        SlabData::Fixed(vec![0u8; n * plan.es])
    };
    // Copies into a small slab from chunks already decoded cost less than
    // the hand-off to the CPU pool: they run inline (a hot tile).
    let inline = !plan.variable && n.saturating_mul(plan.es) <= INLINE_SLAB_BYTES;
    let data = Arc::new(Mutex::new(data));
    let missing: Arc<Missing> = Arc::new(Mutex::new(None));
    match src.array.desc.sharding.clone() {
        None => {
            stream::iter(slab.units())
                .map(|unit| {
                    let (data, missing, plan) = (data.clone(), missing.clone(), plan.clone());
                    async move { read_chunk_unit(&plan, unit, data, missing, inline).await }
                })
                .buffer_unordered(concurrency())
                .try_for_each(|()| async { Ok(()) })
                .await?;
        }
        Some(sharding) => {
            stream::iter(slab.shards())
                .map(|s| {
                    let (data, missing, plan, sharding) =
                        (data.clone(), missing.clone(), plan.clone(), sharding.clone());
                    async move { read_shard_units(&plan, &sharding, s.shard, s.units, data, missing, inline).await }
                })
                .buffer_unordered(concurrency())
                .try_for_each(|()| async { Ok(()) })
                .await?;
        }
    }
    let missing = missing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some((_, what)) = missing {
        return Err(ServiceError::MissingChunk(what));
    }
    let data = Arc::try_unwrap(data).map_err(|_| ServiceError::Internal("slab still shared".into()))?;
    match data.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
        SlabData::Variable(v) if v.over => Ok(None),
        data => Ok(Some(data)),
    }
}

/// Whether a missing unit needs any work: noting it (fill_missing off), or
/// writing a fill value that is not what a fresh slab holds already.
fn missing_needs_work(plan: &Plan) -> bool {
    !plan.src.fill_missing || needs_fill(&plan.src.array.desc.fill_value, plan.variable)
}

/// A missing unit: filled, or noted as missing (the first, in grid order).
fn on_missing(plan: &Plan, coords: Vec<u64>, what: String, spec: &UnitCopy, slab: &Mutex<SlabData>, missing: &Missing) {
    let src = &plan.src;
    if !src.fill_missing {
        let mut first = missing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.as_ref().is_none_or(|(c, _)| coords < *c) {
            *first = Some((coords, what));
        }
    } else if needs_fill(&src.array.desc.fill_value, plan.variable) {
        fill_unit(&src.array.desc.fill_value, spec, slab);
    }
}

/// Slabs up to this size are filled inline from decoded chunks ([`cpu::run_or_inline`]).
const INLINE_SLAB_BYTES: usize = 1 << 20;

/// Bytes of JSON text per byte of a fixed-size element, at most (a 1-byte
/// integer or bool as `-128,`/`false,`; a float as 24 characters of 4 or 8
/// bytes; complex and structured values likewise): sizes a JSON answer's
/// budget share.
const JSON_TEXT_PER_BYTE: u64 = 8;

/// Fixed-size elements up to this size are projected (a field) and written
/// as JSON inline: cheaper than the hand-off to the CPU pool.
const INLINE_ENCODE_BYTES: usize = 64 << 10;

fn unit_elements(src: &Source) -> u64 {
    src.unit_shape.iter().fold(1u64, |a, &b| a.saturating_mul(b))
}

async fn read_chunk_unit(
    plan: &Arc<Plan>,
    unit: Unit,
    slab: Arc<Mutex<SlabData>>,
    missing: Arc<Missing>,
    inline: bool,
) -> ServiceResult<()> {
    // Units that complete at once (cached, missing, in memory) would let a
    // slab of many of them run in one poll: each takes from the task's
    // budget, so the producer yields to other requests every so often.
    tokio::task::coop::consume_budget().await;
    if plan.variable && slab_over(&slab) {
        return Ok(());
    }
    let src = plan.src.clone();
    let Unit { coords, copy } = unit;
    let key = src.array.chunk_key(&coords)?;
    let es = plan.es.max(1);
    let unit_elems = unit_elements(&src);
    match src.chunk(&key).await? {
        Fetched::Ready(None) if !missing_needs_work(plan) => Ok(()),
        Fetched::Ready(None) => {
            let what = format!("chunk {coords:?} (key `{key}`) is missing");
            let plan = plan.clone();
            // Filling runs off the async threads too: it may be a large copy.
            cpu::run_or_inline(inline || !src.fill_missing, move || {
                on_missing(&plan, coords, what, &copy, &slab, &missing);
            })
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))
        }
        Fetched::Ready(Some(data)) => {
            cpu::run_or_inline(inline, move || copy_unit(&data, unit_elems, &copy, &slab, es, key.as_str()))
                .await
                .map_err(|e| ServiceError::Internal(e.to_string()))?
        }
        Fetched::Stored { bytes, etag, generation } => cpu::run(move || {
            let data = src.decode_chunk(&key, bytes, etag, generation)?;
            copy_unit(&data, unit_elems, &copy, &slab, es, key.as_str())
        })
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))?,
    }
}

async fn read_shard_units(
    plan: &Arc<Plan>,
    sharding: &Arc<ShardingCodec>,
    shard: Vec<u64>,
    units: Units,
    slab: Arc<Mutex<SlabData>>,
    missing: Arc<Missing>,
    inline: bool,
) -> ServiceResult<()> {
    if plan.variable && slab_over(&slab) {
        return Ok(());
    }
    let src = plan.src.clone();
    let key = src.array.chunk_key(&shard)?;
    let mut fresh = false;
    // A shard rewritten between reading its index and its inner chunks is
    // read again (once more; then the error stands). Every round of inner
    // chunks is conditioned on the same index.
    for attempt in 0..3 {
        let (etag, stamp, index) = src.shard_index(&key, sharding, fresh).await?;
        let mut it = units.clone();
        let result = async {
            loop {
                let batch: Vec<Unit> = it.by_ref().take(SHARD_BATCH).collect();
                if batch.is_empty() {
                    return Ok(());
                }
                let at = ShardAt { shard: &shard, key: &key, etag: etag.clone(), stamp, index: index.clone() };
                read_shard_once(plan, sharding, &at, &batch, &slab, &missing, inline).await?;
            }
        }
        .await;
        match result {
            Err(ServiceError::Storage(StorageError::PreconditionFailed { .. })) if attempt < 2 => fresh = true,
            other => return other,
        }
    }
    Err(corrupt(key.as_str(), "the shard kept changing while it was read"))
}

/// A shard, and the version of its index a read goes by.
struct ShardAt<'a> {
    shard: &'a [u64],
    key: &'a StoreKey,
    etag: Option<String>,
    stamp: u64,
    index: Option<Arc<ShardIndex>>,
}

async fn read_shard_once(
    plan: &Arc<Plan>,
    sharding: &Arc<ShardingCodec>,
    at: &ShardAt<'_>,
    inners: &[Unit],
    slab: &Arc<Mutex<SlabData>>,
    missing: &Arc<Missing>,
    inline: bool,
) -> ServiceResult<()> {
    let ShardAt { shard, key, etag, stamp, index } = at;
    let (key, stamp) = (*key, *stamp);
    let src = plan.src.clone();
    let es = plan.es.max(1);
    let unit_elems = unit_elements(&src);
    let global = |inner: &[u64]| -> Vec<u64> {
        inner.iter().zip(*shard).zip(sharding.chunks_per_shard()).map(|((i, s), n)| s * n + i).collect()
    };
    let mut copies = Vec::new();
    let mut needed: Vec<(usize, Range<u64>)> = Vec::new();
    for (i, Unit { coords: inner, copy: spec }) in inners.iter().enumerate() {
        tokio::task::coop::consume_budget().await;
        let range = index.as_ref().and_then(|ix| ix.inner_range(inner));
        let Some(range) = range else {
            if !missing_needs_work(plan) {
                continue;
            }
            let what = if index.is_some() {
                format!("inner chunk {inner:?} of shard {shard:?} (key `{key}`) is missing")
            } else {
                format!("shard {shard:?} (key `{key}`) is missing")
            };
            let (plan, spec, slab, missing, coords) =
                (plan.clone(), spec.clone(), slab.clone(), missing.clone(), global(inner));
            let work = move || {
                on_missing(&plan, coords, what, &spec, &slab, &missing);
                Ok(())
            };
            if inline || !src.fill_missing {
                cpu::run_or_inline(true, work).await.map_err(|e| ServiceError::Internal(e.to_string()))??;
            } else {
                copies.push(tokio::spawn(async move { cpu::run(work).await }));
            }
            continue;
        };
        let ck = src.cache_key(key, Part::Inner(inner.clone()));
        if let Some(entry) = src.cache.get(&ck) {
            if let Cached::Inner { stamp: s, data: Some(data) } = &*entry {
                if *s == stamp {
                    src.cache.record(true);
                    let (data, spec, slab, key) = (data.clone(), spec.clone(), slab.clone(), key.to_string());
                    let copy = move || copy_unit(&data, unit_elems, &spec, &slab, es, &key);
                    if inline {
                        cpu::run_or_inline(true, copy).await.map_err(|e| ServiceError::Internal(e.to_string()))??;
                    } else {
                        copies.push(tokio::spawn(async move { cpu::run(copy).await }));
                    }
                    continue;
                }
            }
        }
        src.cache.record(false);
        needed.push((i, range));
    }
    let generation = src.cache.generation();
    let ranges: Vec<Range<u64>> = needed.iter().map(|(_, r)| r.clone()).collect();
    let reads = coalesce_ranges(&ranges, COALESCE_GAP);
    let etag_list = etag.clone().map(|e| vec![e]);
    let read_ranges: Vec<Range<u64>> = reads.iter().map(|r| r.range.clone()).collect();
    let fetched: Vec<(Range<u64>, Bytes)> = stream::iter(read_ranges)
        .map(|range| {
            let request = ReadRequest {
                range: storage_range(&ByteRangeRequest::Bounded(range.clone())),
                preconditions: crate::storage::Preconditions { if_match: etag_list.clone(), ..Default::default() },
                head_only: false,
            };
            let (src, key) = (src.clone(), key.clone());
            async move { fetch_range(&src, &key, range, request).await }
        })
        .buffered(concurrency())
        .try_collect()
        .await?;
    for (read, (range, bytes)) in reads.iter().zip(fetched) {
        for &m in &read.members {
            let (i, r) = &needed[m];
            let Unit { coords: inner, copy: spec } = &inners[*i];
            let (lo, hi) = (r.start - range.start, r.end - range.start);
            if hi > bytes.len() as u64 {
                return Err(corrupt(
                    key.as_str(),
                    format!("inner chunk {inner:?}: bytes {}..{} are past the end of the shard", r.start, r.end),
                ));
            }
            #[allow(clippy::cast_possible_truncation)] // hi <= bytes.len()
            let part = bytes.slice(lo as usize..hi as usize);
            let (src, sharding, inner, spec, slab, key) =
                (src.clone(), sharding.clone(), inner.clone(), spec.clone(), slab.clone(), key.to_string());
            copies.push(tokio::spawn(async move {
                cpu::run(move || {
                    let data = sharding.decode_inner_chunk(Vec::from(part), &inner).map_err(|e| corrupt(&key, e))?;
                    let data = Arc::new(data);
                    if src.fill_cache {
                        let ck = CacheKey {
                            mount: src.mount_name.clone(),
                            key: key.as_str().into(),
                            part: Part::Inner(inner),
                        };
                        src.cache.insert(ck, Cached::Inner { stamp, data: Some(data.clone()) }, generation);
                    }
                    copy_unit(&data, unit_elems, &spec, &slab, es, &key)
                })
                .await
            }));
        }
    }
    for c in copies {
        c.await
            .map_err(|e| ServiceError::Internal(e.to_string()))?
            .map_err(|e| ServiceError::Internal(e.to_string()))??;
    }
    Ok(())
}

/// Reads `range` of a shard (conditioned on the index's ETag).
async fn fetch_range(
    src: &Source,
    key: &StoreKey,
    range: Range<u64>,
    request: ReadRequest,
) -> ServiceResult<(Range<u64>, Bytes)> {
    if range.is_empty() {
        return Ok((range, Bytes::new()));
    }
    match src.mount.storage().read(key, &request).await {
        Ok(o) => Ok((range, o.body)),
        Err(StorageError::RangeNotSatisfiable { size, .. }) => Err(corrupt(
            key.as_str(),
            format!("bytes {}..{} are past the end of the {size}-byte shard", range.start, range.end),
        )),
        // The shard vanished after its index was read: read it again.
        Err(StorageError::NotFound { .. }) => Err(ServiceError::Storage(StorageError::PreconditionFailed {
            key: key.to_string(),
            reason: "the shard was deleted while it was read".into(),
        })),
        Err(e) => Err(e.into()),
    }
}

/// A slab's fixed-size elements after the field projection.
async fn project(field: Option<&FieldView>, bytes: Vec<u8>) -> ServiceResult<Vec<u8>> {
    let Some(f) = field.cloned() else { return Ok(bytes) };
    cpu::run_or_inline(bytes.len() <= INLINE_ENCODE_BYTES, move || {
        f.extract(&bytes).map_err(|e| ServiceError::Internal(e.to_string()))
    })
    .await
    .map_err(|e| cpu_error(&e))?
}

/// Writes fixed-size elements (already projected) as JSON into `out`, in
/// pieces of about a message each, encoded on the CPU pool; false when the
/// client went away.
async fn json_fixed(enc: &mut JsonEncoder, bytes: Vec<u8>, es: usize, out: &mut Out) -> ServiceResult<bool> {
    let bytes = Arc::new(bytes);
    let (mut at, limit) = (0usize, out.message);
    while at < bytes.len() {
        let (b, mut e) = (bytes.clone(), enc.clone());
        let (e, piece, n) = cpu::run_or_inline(bytes.len() - at <= INLINE_ENCODE_BYTES, move || {
            let rest = &b[at..];
            let mut piece = Vec::with_capacity(rest.len().saturating_mul(4).min(limit.saturating_add(4096)));
            let n = e.fixed_until(rest, &mut piece, limit);
            (e, piece, n)
        })
        .await
        .map_err(|e| cpu_error(&e))?;
        *enc = e;
        at += n.max(1) * es.max(1);
        out.push(Bytes::from(piece));
        if !out.flush(false).await {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes variable-length elements (`None`: the fill value, whose text is
/// `fill`) as JSON into `out`, in pieces of about a message each (a long
/// element is cut between pieces), encoded on the CPU pool. Their text
/// (each element's, plus a separator) is counted first and added to
/// `*text`, which may not pass `max_selection` (413 when nothing was sent
/// yet). False when the client went away.
async fn json_variable(
    enc: &mut JsonEncoder,
    items: Arc<dyn VarItems>,
    fill: Arc<Vec<u8>>,
    max_selection: u64,
    text: &mut u64,
    out: &mut Out,
) -> ServiceResult<bool> {
    let (it, dt, fill_len) = (items.clone(), enc_type(enc), fill.len() as u64);
    let len = cpu::run(move || {
        (0..it.len()).map(|i| it.get(i).map_or(fill_len, |b| variable_text_len(&dt, b)) + 1).sum::<u64>()
    })
    .await
    .map_err(|e| cpu_error(&e))?;
    let before = *text;
    *text = text.saturating_add(len);
    if *text > max_selection {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection's variable-length elements come to more than limits.max_selection_bytes = {max_selection} \
             bytes of JSON text (at least {}; they count by their text, the fill value's included)",
            before.saturating_add(len)
        )));
    }
    let limit = out.message;
    let reserve = usize::try_from(len).unwrap_or(usize::MAX).min(limit.saturating_add(128 * 1024));
    let mut cursor = VarCursor::default();
    loop {
        let (it, f, mut e) = (items.clone(), fill.clone(), enc.clone());
        let (e, piece, c, done) = cpu::run(move || {
            let mut piece = Vec::with_capacity(reserve);
            let item = |i: usize| it.get(i).map_or(VarItem::Text(&f), VarItem::Raw);
            let done = e.variable_until(it.len(), item, &mut cursor, &mut piece, limit);
            (e, piece, cursor, done)
        })
        .await
        .map_err(|e| cpu_error(&e))?;
        (*enc, cursor) = (e, c);
        out.push(Bytes::from(piece));
        if !out.flush(false).await {
            return Ok(false);
        }
        if done {
            return Ok(true);
        }
    }
}

fn enc_type(enc: &JsonEncoder) -> DataType {
    enc.data_type().clone()
}

/// Variable-length elements to answer, by index (`None`: the fill value).
trait VarItems: Send + Sync {
    fn len(&self) -> usize;
    fn get(&self, i: usize) -> Option<&[u8]>;
}

impl VarItems for Vec<Option<Vec<u8>>> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn get(&self, i: usize) -> Option<&[u8]> {
        self[i].as_deref()
    }
}

/// A decoded chunk's elements (or, `None`, `n` fill values).
struct ChunkItems(Option<Arc<ChunkData>>, usize);

impl VarItems for ChunkItems {
    fn len(&self) -> usize {
        self.1
    }
    fn get(&self, i: usize) -> Option<&[u8]> {
        match self.0.as_deref() {
            Some(ChunkData::Variable(items)) => items.get(i).map(Vec::as_slice),
            _ => None,
        }
    }
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
            out.push(Bytes::from(project(plan.field.as_ref(), bytes).await?));
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

/// Opens the array and the source of its chunks.
async fn open(app: &Arc<App>, mount: &str, path: &NodePath, fill_missing: Option<bool>) -> ServiceResult<Source> {
    let array = node::open_array(&app.node(mount, path)?).await?;
    let m = app.mount(mount)?.clone();
    let unit_shape = match &array.desc.sharding {
        Some(s) => s.inner_chunk_shape().to_vec(),
        None => array.desc.chunk_shape.clone(),
    };
    Ok(Source {
        mount_name: mount.into(),
        recheck: m.recheck_policy(),
        fill_missing: fill_missing.unwrap_or_else(|| m.fill_missing_data_reads()),
        mount: m,
        cache: app.chunk_cache().clone(),
        fill_cache: true,
        unit_shape,
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
fn check_limits(app: &App, format: OutputFormat, out_type: &DataType, out_shape: &[u64]) -> ServiceResult<Option<u64>> {
    let limits = &app.config().limits;
    let elements = out_shape.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    // Variable-length elements: at least their JSON text `""` and a
    // separator here; counted by their real text as the answer is made.
    let es = out_type.size().map_or(3, |s| s as u64);
    let bytes = elements.saturating_mul(es);
    if bytes > limits.max_selection_bytes {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection is {bytes} bytes ({elements} elements of {}, shape {out_shape:?}), more than limits.max_selection_bytes = {}",
            zarr_name(out_type),
            limits.max_selection_bytes
        )));
    }
    if format == OutputFormat::Json {
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
        OutputFormat::Raw => Some(bytes),
        OutputFormat::Npy => Some(npy_header(out_type, out_shape).len() as u64 + bytes),
        OutputFormat::Json => None,
    })
}

fn npy_header(dt: &DataType, shape: &[u64]) -> Vec<u8> {
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
pub async fn read(app: &Arc<App>, mount: &str, path: &NodePath, params: ReadParams) -> ServiceResult<DataRead> {
    let mut src = open(app, mount, path, params.fill_missing).await?;
    // Checking listed indices against the shape costs up to the lists:
    // on the CPU pool (which also frees the parsed lists) unless they are short.
    let (spec, array) = (params.selection, src.array.clone());
    let sel = cpu::run_or_inline(spec.listed() <= crate::zarr::selection::INLINE_LISTED, move || {
        spec.resolve_owned(&array.desc.shape, array.desc.dimension_names.as_deref())
    })
    .await
    .map_err(|e| ServiceError::Internal(e.to_string()))??;
    let desc = &src.array.desc;
    let (field, out_type, out_shape) = output_of(&desc.data_type, sel.result_shape(), params.field.as_deref())?;
    let content_length = check_limits(app, params.format, &out_type, &out_shape)?;
    let es = desc.data_type.size().unwrap_or(0);
    let variable = desc.data_type.is_variable();
    let total = sel.num_elements().saturating_mul(es.max(16) as u64);
    let limits = &app.config().limits;
    let (budget, max_units) = (limits.read_slab_bytes, limits.max_chunks_per_request);
    let sharded = desc.sharding.is_some();
    let array = src.array.clone();
    // Planning (and counting the units touched) runs on the CPU pool: it
    // costs up to the selection's lists.
    let (read_plan, touched) = cpu::run_or_inline(plan::is_cheap(&sel), move || {
        let plan = plan_read(&array.desc, sel, budget)?;
        let touched = plan.touched_units();
        Ok::<_, plan::PlanError>((plan, touched))
    })
    .await
    .map_err(|e| ServiceError::Internal(e.to_string()))?
    .map_err(|e| ServiceError::Internal(e.to_string()))?;
    if touched > max_units {
        let what = if sharded { "inner chunks" } else { "chunks" };
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection touches {touched} {what}, more than limits.max_chunks_per_request = {max_units}"
        )));
    }
    // A scan larger than half the cache would only evict hot chunks (each
    // entry, even of a missing chunk, weighs its overhead too).
    src.fill_cache = total.max(touched.saturating_mul(CACHE_ENTRY_ESTIMATE)) <= src.cache.capacity() / 2;
    let estimate = if variable { VAR_ELEMENT_ESTIMATE } else { es as u64 };
    let small = read_plan.elements().saturating_mul(estimate) <= SMALL_ANSWER;
    let fill_text = Arc::new(if variable { variable_text(&out_type, &src.array.desc.fill_value) } else { Vec::new() });
    let plan = Plan {
        src: Arc::new(src),
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

/// The plan of reading `sel` (checked against `desc`'s shape) in slabs of
/// at most `budget` bytes: what [`read`] does after its checks (public for
/// the `read_plan` fuzz target). Units are chunks, or inner chunks of
/// shards; elements of variable-length types count as
/// [`VAR_ELEMENT_ESTIMATE`] bytes (the read plans smaller slabs again when
/// their real sizes do not fit).
///
/// # Errors
/// A selection whose rank does not match the array's.
pub fn plan_read(desc: &ArrayDescription, sel: Selection, budget: u64) -> Result<ReadPlan, plan::PlanError> {
    let (unit, per_shard) = match &desc.sharding {
        Some(s) => (s.inner_chunk_shape().to_vec(), Some(s.chunks_per_shard().to_vec())),
        None => (desc.chunk_shape.clone(), None),
    };
    let elem_estimate =
        if desc.data_type.is_variable() { VAR_ELEMENT_ESTIMATE } else { desc.data_type.size().unwrap_or(1) as u64 };
    ReadPlan::new(sel, unit, per_shard, elem_estimate, budget)
}

/// The JSON text of one variable-length element.
fn variable_text(dt: &DataType, b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::service::wire::json::write_variable(dt, b, &mut out);
    out
}

/// Waits for a producer's first message: an error then is the answer's.
async fn first_message(rx: &mut mpsc::Receiver<ServiceResult<Pieces>>) -> ServiceResult<(Pieces, bool)> {
    match rx.recv().await {
        Some(Ok(mut pieces)) => {
            let last = take_last(&mut pieces);
            Ok((pieces, last))
        }
        Some(Err(e)) => Err(e),
        None => Err(ServiceError::Internal("the read stopped before its first slab".into())),
    }
}

/// Starts the producer; waits for its first message.
async fn start(plan: Arc<Plan>, content_length: Option<u64>) -> ServiceResult<DataRead> {
    let (tx, mut rx) = mpsc::channel::<ServiceResult<Pieces>>(1);
    let header = match plan.format {
        OutputFormat::Npy => vec![Bytes::from(npy_header(&plan.out_type, &plan.out_shape))],
        _ => Vec::new(),
    };
    let producer = plan.clone();
    tokio::spawn(async move {
        let cache = producer.src.cache.clone();
        let message = if producer.small { SMALL_ANSWER } else { producer.answer.slab_bytes };
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

/// The same read planned again with slabs of `budget`, from element `offset`.
async fn replan(plan: &Arc<ReadPlan>, budget: u64, offset: u64) -> ServiceResult<Arc<ReadPlan>> {
    let p = plan.clone();
    let new = cpu::run(move || p.replan(budget, offset))
        .await
        .map_err(|e| cpu_error(&e))?
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    Ok(Arc::new(new))
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
    // encoded and its slab), or less for a fixed-size answer that is
    // smaller: a 2 MiB answer does not hold 128 MiB of the budget.
    let full = a.slab_bytes.saturating_mul(4);
    let share = if plan.variable {
        full
    } else {
        let per = if plan.format == OutputFormat::Json { JSON_TEXT_PER_BYTE } else { 1 };
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
        (plan.format == OutputFormat::Json).then(|| JsonEncoder::new(plan.out_type.clone(), plan.out_shape.clone()));
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
        let Some(data) = assemble(plan, slab.clone(), cap).await? else {
            if small {
                // Larger than it looked: take a share, then go on as a large answer.
                small = false;
                out.message = usize::try_from(a.slab_bytes).unwrap_or(usize::MAX);
                let Some(held) = a.share(full, &out.tx).await? else {
                    return Ok(false); // Gone while waiting for the share.
                };
                out.share = Some(held);
            } else {
                // A quarter of this slab's elements (a slab may be far
                // shorter than the plan's budget allows).
                let elements = (slab.len / 4).max(1).min(read_plan.budget() / VAR_ELEMENT_ESTIMATE);
                read_plan = replan(&read_plan, elements.saturating_mul(VAR_ELEMENT_ESTIMATE).max(1), offset).await?;
            }
            slabs = read_plan.slabs_from(offset);
            continue;
        };
        offset += slab.len;
        let light = matches!(&data, SlabData::Variable(v) if v.bytes < cap / 4);
        if !encode_slab(plan, data, &mut json, &mut text, out).await? {
            return Ok(false);
        }
        if light && read_plan.budget() < plan.plan.budget() {
            let budget = read_plan.budget().saturating_mul(2).min(plan.plan.budget());
            read_plan = replan(&read_plan, budget, offset).await?;
            slabs = read_plan.slabs_from(offset);
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

fn check_coords(coords: &[u64], grid: &[u64], what: &str) -> ServiceResult<()> {
    if coords.len() != grid.len() {
        return Err(ServiceError::InvalidSelection(format!(
            "{what}: {} coordinates given, the grid has {} dimensions",
            coords.len(),
            grid.len()
        )));
    }
    for (d, (&c, &n)) in coords.iter().zip(grid).enumerate() {
        if c >= n {
            return Err(ServiceError::InvalidSelection(format!(
                "{what}: dimension {d}: chunk {c} is outside the grid ({n} chunks along it)"
            )));
        }
    }
    Ok(())
}

/// Reads one decoded chunk (a whole chunk or shard, or one inner chunk of
/// a shard), full size as stored (edge chunks include the part past the
/// array's end, holding whatever was written there: usually the fill value).
///
/// # Errors
/// As [`read`]; coordinates of the wrong rank or outside the grid (400
/// naming the dimension); `inner` on an array that is not sharded.
pub async fn read_chunk(app: &Arc<App>, mount: &str, path: &NodePath, params: ChunkParams) -> ServiceResult<DataRead> {
    let src = Arc::new(open(app, mount, path, params.fill_missing).await?);
    let desc = &src.array.desc;
    check_coords(&params.coords, &desc.grid().grid_shape(), "coords")?;
    let shape = match (&params.inner, &desc.sharding) {
        (None, _) => desc.chunk_shape.clone(),
        (Some(inner), Some(s)) => {
            check_coords(inner, s.chunks_per_shard(), "inner")?;
            s.inner_chunk_shape().to_vec()
        }
        (Some(_), None) => {
            return Err(ServiceError::InvalidSelection(
                "inner: the array is not sharded; address its chunks with coords alone".into(),
            ))
        }
    };
    let (field, out_type, out_shape) = output_of(&desc.data_type, shape.clone(), params.field.as_deref())?;
    let content_length = check_limits(app, params.format, &out_type, &out_shape)?;
    let key = src.array.chunk_key(&params.coords)?;
    let data = match (&params.inner, &desc.sharding) {
        (Some(inner), Some(sharding)) => read_one_inner(&src, sharding, &key, inner).await?,
        _ => match src.chunk(&key).await? {
            Fetched::Ready(d) => d,
            Fetched::Stored { bytes, etag, generation } => {
                let (s, k) = (src.clone(), key.clone());
                Some(
                    cpu::run(move || s.decode_chunk(&k, bytes, etag, generation))
                        .await
                        .map_err(|e| ServiceError::Internal(e.to_string()))??,
                )
            }
        },
    };
    let data = match data {
        Some(d) => ChunkOut::Data(d),
        None if !src.fill_missing => {
            return Err(ServiceError::MissingChunk(match &params.inner {
                Some(i) => format!("inner chunk {i:?} of shard {:?} (key `{key}`) is missing", params.coords),
                None => format!("chunk {:?} (key `{key}`) is missing", params.coords),
            }))
        }
        // Never materialised: the answer repeats the fill value, a slab at a time.
        None => ChunkOut::Filled,
    };
    let es = desc.data_type.size().unwrap_or(0);
    let variable = desc.data_type.is_variable();
    let elements = shape.iter().fold(1u64, |a, &b| a.saturating_mul(b));
    if let ChunkOut::Data(d) = &data {
        let ok = match &**d {
            ChunkData::Fixed(b) => !variable && b.len() as u64 == elements.saturating_mul(es as u64),
            ChunkData::Variable(items) => variable && items.len() as u64 == elements,
        };
        if !ok {
            return Err(corrupt(key.as_str(), "decoded to the wrong number or kind of elements"));
        }
    }
    let answer = AnswerLimits::of(app);
    let estimate = if variable { VAR_ELEMENT_ESTIMATE } else { es.max(1) as u64 };
    let small = elements.saturating_mul(estimate) <= SMALL_ANSWER;
    let message = if small { SMALL_ANSWER } else { answer.slab_bytes };
    let per = (message / es.max(1) as u64).max(1);
    // A large answer holds its share while it is written: four messages,
    // and the decoded chunk it answers from (unless it was missing).
    let held = match &data {
        ChunkOut::Data(_) if !variable => elements.saturating_mul(es as u64),
        _ => 0,
    };
    let fill_text = Arc::new(if variable { variable_text(&out_type, &desc.fill_value) } else { Vec::new() });
    let job = ChunkJob {
        data,
        fill: desc.fill_value.clone(),
        fill_text,
        es,
        variable,
        elements,
        per,
        field,
        format: params.format,
        out_type: out_type.clone(),
        out_shape: out_shape.clone(),
        share: (!small).then(|| message.saturating_mul(4).max(held)),
        answer,
    };
    let (tx, mut rx) = mpsc::channel::<ServiceResult<Pieces>>(1);
    tokio::spawn(async move {
        let mut out = Out::new(tx, message);
        let result = produce_chunk(&Arc::new(job), &mut out).await;
        out.finish(result).await;
    });
    let (first, ended) = first_message(&mut rx).await?;
    Ok(DataRead {
        shape: out_shape,
        data_type: out_type,
        format: params.format,
        content_length,
        first,
        rest: (!ended).then_some(rx),
    })
}

/// A decoded chunk to answer, or a missing one (the fill value).
#[derive(Debug)]
enum ChunkOut {
    Data(Arc<ChunkData>),
    Filled,
}

/// A decoded chunk's bytes, shared (never copied) into the answer.
struct ChunkBytes(Arc<ChunkData>);

impl AsRef<[u8]> for ChunkBytes {
    fn as_ref(&self) -> &[u8] {
        match &*self.0 {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => &[],
        }
    }
}

/// One decoded chunk read, streamed in slabs of `per` elements.
#[derive(Debug)]
struct ChunkJob {
    data: ChunkOut,
    fill: Vec<u8>,
    /// The fill value's JSON text (variable-length types).
    fill_text: Arc<Vec<u8>>,
    es: usize,
    variable: bool,
    elements: u64,
    per: u64,
    field: Option<FieldView>,
    format: OutputFormat,
    out_type: DataType,
    out_shape: Vec<u64>,
    /// The share of the answer budget a large answer takes.
    share: Option<u64>,
    answer: AnswerLimits,
}

impl ChunkJob {
    /// Fixed-size elements `range` (a copy of that part only).
    #[allow(clippy::cast_possible_truncation)] // ranges inside the chunk, which is in memory (or at most `per`)
    fn fixed(&self, range: Range<u64>) -> Vec<u8> {
        let (a, b) = (range.start as usize, range.end as usize);
        match &self.data {
            ChunkOut::Data(d) => match &**d {
                ChunkData::Fixed(bytes) => bytes[a * self.es..b * self.es].to_vec(),
                ChunkData::Variable(_) => Vec::new(),
            },
            ChunkOut::Filled => self.fill.repeat(b - a),
        }
    }
}

/// Sends a decoded chunk read's body: raw and npy answers share the decoded
/// bytes (or one slab of fill values, sent as often as needed); JSON and
/// field answers are encoded a slab at a time on the CPU pool, in pieces of
/// about a message; variable-length elements are answered from the decoded
/// chunk itself (never copied), the fill value's text repeated.
async fn produce_chunk(job: &Arc<ChunkJob>, out: &mut Out) -> ServiceResult<bool> {
    if let Some(bytes) = job.share {
        let Some(held) = job.answer.share(bytes, &out.tx).await? else {
            return Ok(false); // Gone while waiting for the share.
        };
        out.share = Some(held);
    }
    if job.format == OutputFormat::Npy {
        out.push(Bytes::from(npy_header(&job.out_type, &job.out_shape)));
    }
    let mut json =
        (job.format == OutputFormat::Json).then(|| JsonEncoder::new(job.out_type.clone(), job.out_shape.clone()));
    if job.variable {
        let Some(enc) = json.as_mut() else {
            return Err(ServiceError::UnsupportedFormat(
                "variable-length elements are answered in JSON only (format=json)".into(),
            ));
        };
        let data = match &job.data {
            ChunkOut::Data(d) => Some(d.clone()),
            ChunkOut::Filled => None,
        };
        let n = usize::try_from(job.elements).map_err(|_| ServiceError::Internal("chunk too large".into()))?;
        let items: Arc<dyn VarItems> = Arc::new(ChunkItems(data, n));
        let mut text = 0;
        if !json_variable(enc, items, job.fill_text.clone(), job.answer.max_selection, &mut text, out).await? {
            return Ok(false);
        }
    } else {
        let plain = json.is_none() && job.field.is_none();
        #[allow(clippy::cast_possible_truncation)] // at most one slab
        let shared: Option<Bytes> = match (&job.data, plain) {
            (ChunkOut::Data(d), true) => Some(Bytes::from_owner(ChunkBytes(d.clone()))),
            (ChunkOut::Filled, true) => Some(Bytes::from(job.fill.repeat(job.per.min(job.elements) as usize))),
            _ => None,
        };
        let mut at = 0u64;
        while at < job.elements {
            let end = at.saturating_add(job.per).min(job.elements);
            #[allow(clippy::cast_possible_truncation)] // inside the chunk or the fill slab
            let alive = match (&shared, &job.data) {
                (Some(b), ChunkOut::Data(_)) => {
                    out.push(b.slice(at as usize * job.es..end as usize * job.es));
                    out.flush(false).await
                }
                (Some(b), ChunkOut::Filled) => {
                    out.push(b.slice(..(end - at) as usize * job.es));
                    out.flush(false).await
                }
                (None, _) => {
                    let j = job.clone();
                    let slab = cpu::run(move || j.fixed(at..end)).await.map_err(|e| cpu_error(&e))?;
                    let bytes = project(job.field.as_ref(), slab).await?;
                    match json.as_mut() {
                        Some(enc) => json_fixed(enc, bytes, job.out_type.size().unwrap_or(1), out).await?,
                        None => {
                            out.push(Bytes::from(bytes));
                            out.flush(false).await
                        }
                    }
                }
            };
            if !alive {
                return Ok(false);
            }
            at = end;
        }
    }
    if let Some(enc) = json.as_mut() {
        let mut end = Vec::new();
        enc.finish(&mut end);
        out.push(Bytes::from(end));
    }
    Ok(true)
}

/// One inner chunk of a shard, decoded (`None`: missing or empty).
async fn read_one_inner(
    src: &Arc<Source>,
    sharding: &Arc<ShardingCodec>,
    key: &StoreKey,
    inner: &[u64],
) -> ServiceResult<Option<Arc<ChunkData>>> {
    let (etag, _, index) = src.shard_index(key, sharding, false).await?;
    let Some(r) = index.as_ref().and_then(|ix| ix.inner_range(inner)) else {
        return Ok(None);
    };
    let bytes = if r.is_empty() {
        Bytes::new()
    } else {
        let request = ReadRequest {
            range: storage_range(&ByteRangeRequest::Bounded(r.clone())),
            preconditions: crate::storage::Preconditions { if_match: etag.map(|e| vec![e]), ..Default::default() },
            head_only: false,
        };
        match src.mount.storage().read(key, &request).await {
            Ok(o) if o.body.len() as u64 == r.end - r.start => o.body,
            Ok(_) | Err(StorageError::RangeNotSatisfiable { .. }) => {
                return Err(corrupt(
                    key.as_str(),
                    format!("inner chunk {inner:?}: bytes {}..{} are past the end of the shard", r.start, r.end),
                ))
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (sharding, inner, k) = (sharding.clone(), inner.to_vec(), key.to_string());
    let data = cpu::run(move || sharding.decode_inner_chunk(Vec::from(bytes), &inner).map_err(|e| corrupt(&k, e)))
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))??;
    Ok(Some(Arc::new(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_the_choices() {
        use crate::zarr::data_type::Field;
        let field = |name: &str, offset, data_type, subarray| Field {
            name: name.into(),
            offset,
            data_type: Box::new(data_type),
            big_endian: false,
            subarray,
        };
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
