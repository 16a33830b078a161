//! The region read: a planned selection ([`super::plan`]) read slab by
//! slab from a [`ChunkSource`], through a cache of decoded units
//! ([`UnitCache`]), with CPU work run where the caller's [`Offload`] says.
//! The server's streaming slice read and the engine's collecting reads
//! ([`read_selection`], [`read_region`]) are the same functions: the
//! server calls [`read_slab`] once per slab of its plan and encodes each
//! slab as it comes; [`read_selection`] plans with [`plan_read`] and
//! concatenates the slabs.
//!
//! Per slab, every unit (chunk, or inner chunk of a shard) it touches is
//! read once:
//!
//! - not sharded: the cache, else one request for the whole key, decoded
//!   and copied into the slab by one CPU job;
//! - sharded: the shard's index (cached, with a stamp; one range request
//!   when not), then the inner chunks not cached, their byte ranges
//!   coalesced ([`coalesce_ranges`], gap [`RegionOptions::coalesce_gap`])
//!   and read conditioned on the index's version, so a shard rewritten in
//!   between is detected ([`SourceError::Precondition`]) and read again
//!   (twice at most; then it is reported corrupt). Inner chunks go in
//!   batches of [`SHARD_BATCH`] per round, which bounds a shard's state;
//! - missing (no key, or empty in the index): the fill value, or with
//!   `fill_missing` off the first missing unit in grid order is the error
//!   ([`RegionError::Missing`]);
//! - units stored as the elements themselves (byte-layout codecs,
//!   [`super::partial`]): when a slab needs a small part of a chunk, only
//!   the coalesced byte ranges it needs, copied from the parts (nothing
//!   cached: no whole chunk was decoded); of an inner chunk whose index
//!   entry has its exact size, only those ranges of the shard, coalesced
//!   with the other inner chunks' ranges;
//! - compressed units over a byte layout (one zstd or blosc compressor,
//!   [`super::ranged`]): when the decoded-chunk cache is off for the read
//!   and the part the slab needs costs at most 3/4 of the unit (zstd: up
//!   to the part's end; blosc: the blocks it lies in), only that part is
//!   decoded and copied as a partial read's parts; anything doubtful
//!   decodes whole (damage after the part goes unseen, see there).
//!
//! - whole blosc chunks (not sharded; decoded-chunk cache off for the read,
//!   elements stored as they are; chunks of at least a span per core; a
//!   slab that copies every chunk whole): the chunks the slab copies whole are
//!   read first and then decoded together, span by span across the chunks
//!   (`decode_group`), so each job writes whole cache lines of a few MiB
//!   of the slab while the spans are still in the core's cache.
//!
//! Concurrency: units (shards) are read at most
//! [`RegionOptions::concurrency`] at a time on the calling task; decoding
//! and copying are handed to the [`Offload`] one job per unit (per span
//! index for a slab's group of whole blosc chunks), so the decoded unit
//! is dropped as soon as its part is copied (unless cached); chunks read
//! straight into the slab go one job per batch of them
//! ([`super::direct`]). Copies into a slab of at most [`INLINE_SLAB_BYTES`] from units already
//! decoded run inline (cheaper than the hand-off: a hot tile). Units that
//! complete at once pass [`Offload::yield_point`] so a long slab lets other
//! tasks run.
//!
//! Variable-length slabs hold copies up to a cap; a slab that would pass
//! it stops early and answers `None`, and the caller plans the rest again
//! smaller ([`ReadPlan::replan_smaller`]).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt, TryStreamExt};
use futures::FutureExt;

use super::copy::{copy_groups_span, copy_unit, fill_unit, needs_fill, slab_over, strided_groups, SlabData};
use super::direct::{direct_runs, read_batch, DirectBatch, DirectRead, Run};
use super::partial::{copy_parts, needed_ranges};
use super::plan::{plan_read, ReadPlan, Slab, Strided, Unit, UnitCopy, Units};
use super::ranged::ranged_span;
use super::{
    ChunkSource, Direct, DirectUnit, Inline, Offload, RegionError, RegionOptions, SizedParts, SourceError, Versioned,
};
use crate::zarr::array::ArrayDescription;
use crate::zarr::chunk::ChunkData;
use crate::zarr::codec::array_to_bytes::sharding::{coalesce_ranges, ShardIndex, ShardingCodec};
use crate::zarr::codec::bytes_to_bytes::blosc::SPAN_BYTES;
use crate::zarr::codec::{ArrayToBytesCodec, RangeDecode};
use crate::zarr::selection::{DimIndexer, Selection, SelectionMode};
use crate::zarr::subset::{ArraySubset, SubsetError};

/// Slabs up to this many bytes are filled inline from units already
/// decoded (cached or missing).
pub const INLINE_SLAB_BYTES: usize = 1 << 20;

/// Inner chunks of one shard read per round (their byte ranges coalesced,
/// their decodes in flight): bounds a shard's per-round state.
pub const SHARD_BATCH: usize = 256;

/// A shard index as a [`UnitCache`] holds it.
#[derive(Debug, Clone)]
pub struct IndexEntry {
    /// The shard's version (ETag) the index was read at; `None`: missing.
    pub version: Option<String>,
    /// A stamp unique to this reading of the index: inner chunks cached
    /// through it carry it, so a new reading retires them all at once.
    pub stamp: u64,
    /// The index (`None`: the shard is missing).
    pub index: Option<Arc<ShardIndex>>,
}

/// Decoded units cached across reads, keyed by key (relative to the array)
/// and version. An implementation decides when a cached entry may be used
/// (revalidating it against the store if it wants: lookups are async) and
/// whether a read's results may enter it; "tickets" let it drop values
/// read before an invalidation that happened meanwhile. Lookups count as
/// hits or misses as the implementation likes.
#[async_trait]
pub trait UnitCache: Send + Sync {
    /// A usable whole decoded chunk: `Some(None)` when the key is known to
    /// be missing; `None` when nothing usable is cached.
    ///
    /// # Errors
    /// A store failure while revalidating.
    async fn chunk(&self, key: &str) -> Result<Option<Option<Arc<ChunkData>>>, SourceError>;
    /// A ticket to note before reading the store for a value to insert.
    fn ticket(&self) -> u64;
    /// Caches a whole chunk read at `version` (`None` data: missing).
    fn insert_chunk(&self, key: &str, version: Option<String>, data: Option<Arc<ChunkData>>, ticket: u64);
    /// A usable shard index.
    ///
    /// # Errors
    /// A store failure while revalidating.
    async fn index(&self, key: &str) -> Result<Option<IndexEntry>, SourceError>;
    /// Caches a shard index read at `version`; answers its new stamp.
    fn insert_index(&self, key: &str, version: Option<String>, index: Option<Arc<ShardIndex>>, ticket: u64) -> u64;
    /// An inner chunk cached through the index reading `stamp`.
    fn inner(&self, key: &str, inner: &[u64], stamp: u64) -> Option<Arc<ChunkData>>;
    /// Caches an inner chunk read through the index reading `stamp`.
    fn insert_inner(&self, key: &str, inner: Vec<u64>, stamp: u64, data: Arc<ChunkData>, ticket: u64);
    /// Whether whole decoded units a read inserts may be kept (the
    /// default: yes). When not, a read may decode only the part of a unit
    /// it needs ([`super::ranged`]): nothing is lost by not caching it.
    fn keeps_units(&self) -> bool {
        true
    }
}

/// No cache: every lookup misses, nothing is kept.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCache;

#[async_trait]
impl UnitCache for NoCache {
    async fn chunk(&self, _: &str) -> Result<Option<Option<Arc<ChunkData>>>, SourceError> {
        Ok(None)
    }
    fn ticket(&self) -> u64 {
        0
    }
    fn insert_chunk(&self, _: &str, _: Option<String>, _: Option<Arc<ChunkData>>, _: u64) {}
    async fn index(&self, _: &str) -> Result<Option<IndexEntry>, SourceError> {
        Ok(None)
    }
    fn insert_index(&self, _: &str, _: Option<String>, _: Option<Arc<ShardIndex>>, _: u64) -> u64 {
        0
    }
    fn inner(&self, _: &str, _: &[u64], _: u64) -> Option<Arc<ChunkData>> {
        None
    }
    fn insert_inner(&self, _: &str, _: Vec<u64>, _: u64, _: Arc<ChunkData>, _: u64) {}
    fn keeps_units(&self) -> bool {
        false
    }
}

/// A unit found missing by a read that does not fill missing units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingUnit {
    /// A chunk (grid coordinates).
    Chunk(Vec<u64>),
    /// A whole shard (grid coordinates).
    Shard(Vec<u64>),
    /// An inner chunk absent from its shard.
    Inner {
        /// The shard's grid coordinates.
        shard: Vec<u64>,
        /// The inner chunk's coordinates inside it.
        inner: Vec<u64>,
    },
}

impl MissingUnit {
    /// What is missing, naming `key` (the chunk's or shard's).
    #[must_use]
    pub fn describe(&self, key: &str) -> String {
        match self {
            Self::Chunk(c) => format!("chunk {c:?} (key `{key}`) is missing"),
            Self::Shard(s) => format!("shard {s:?} (key `{key}`) is missing"),
            Self::Inner { shard, inner } => {
                format!("inner chunk {inner:?} of shard {shard:?} (key `{key}`) is missing")
            }
        }
    }
}

/// What a read goes by besides the store: the array, the cache, where CPU
/// work runs, whether missing units read as the fill value, the tuning.
pub struct ReadCtx<'a> {
    desc: Desc<'a>,
    /// The fill value (shared with fill jobs).
    fill: Arc<[u8]>,
    cache: Arc<dyn UnitCache>,
    offload: Arc<dyn Offload>,
    fill_missing: bool,
    coalesce_gap: u64,
    partial_min_chunk: u64,
    concurrency: usize,
    /// Element size (0: variable length).
    es: usize,
    variable: bool,
    unit_elems: u64,
    /// Units (chunks, or inner chunks of shards) stored as their elements:
    /// the layout's swap unit ([`ArrayToBytesCodec::byte_layout`]), for
    /// partial reads.
    layout: Option<usize>,
    /// Compressed units of which a part can be decoded alone
    /// ([`super::ranged`]): the layout's swap unit, how a part decodes.
    ranged: Option<(usize, RangeDecode)>,
    /// Chunks (not sharded) stored as their elements, which a store may
    /// read straight into a slab ([`super::direct`]): the layout's swap unit.
    direct: Option<usize>,
    /// The most bytes a stored chunk (or shard) can take
    /// ([`ArrayDescription::max_stored_chunk_bytes`]): a larger one is
    /// refused before it is read.
    max_stored: u64,
}

/// The array a read goes by: shared (CPU work may run on other threads),
/// or borrowed (all CPU work runs inline).
enum Desc<'a> {
    Shared(Arc<ArrayDescription>),
    Borrowed(&'a ArrayDescription),
}

impl std::fmt::Debug for ReadCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCtx").field("fill_missing", &self.fill_missing).finish_non_exhaustive()
    }
}

impl ReadCtx<'static> {
    /// A read of `desc` through `cache`, CPU work through `offload`.
    #[must_use]
    pub fn new(
        desc: Arc<ArrayDescription>,
        cache: Arc<dyn UnitCache>,
        offload: Arc<dyn Offload>,
        fill_missing: bool,
        options: &RegionOptions,
    ) -> Self {
        ReadCtx::make(Desc::Shared(desc), cache, offload, fill_missing, options)
    }
}

impl<'a> ReadCtx<'a> {
    /// A read of a borrowed `desc` through `cache`, all CPU work inline.
    #[must_use]
    pub fn inline(
        desc: &'a ArrayDescription,
        cache: Arc<dyn UnitCache>,
        fill_missing: bool,
        options: &RegionOptions,
    ) -> Self {
        Self::make(Desc::Borrowed(desc), cache, Arc::new(Inline), fill_missing, options)
    }

    fn make(
        desc: Desc<'a>,
        cache: Arc<dyn UnitCache>,
        offload: Arc<dyn Offload>,
        fill_missing: bool,
        options: &RegionOptions,
    ) -> Self {
        let d = match &desc {
            Desc::Shared(d) => &**d,
            Desc::Borrowed(d) => *d,
        };
        let unit_shape = match &d.sharding {
            Some(s) => s.inner_chunk_shape(),
            None => &d.chunk_shape,
        };
        let unit_elems = unit_shape.iter().fold(1u64, |a, &b| a.saturating_mul(b));
        let layout = match &d.sharding {
            _ if d.data_type.is_variable() => None,
            None => d.codecs.byte_layout(&d.chunk_repr()),
            Some(s) => s.inner_codecs().byte_layout(s.inner_chunk_repr()),
        };
        let ranged = match &d.sharding {
            _ if d.data_type.is_variable() || layout.is_some() => None,
            None => d.codecs.range_layout(&d.chunk_repr()),
            Some(s) => s.inner_codecs().range_layout(s.inner_chunk_repr()),
        };
        Self {
            max_stored: d.max_stored_chunk_bytes(),
            direct: if d.sharding.is_none() { layout } else { None },
            layout,
            ranged,
            es: d.data_type.size().unwrap_or(0),
            variable: d.data_type.is_variable(),
            fill: d.fill_value.clone().into(),
            unit_elems,
            desc,
            cache,
            offload,
            fill_missing,
            coalesce_gap: options.coalesce_gap,
            partial_min_chunk: options.partial_min_chunk,
            concurrency: options.concurrency.max(1),
        }
    }

    /// Whether this read takes the parts of chunks it needs straight into
    /// the slab ([`super::direct`]) from a store that opens files: chunks
    /// (not sharded) stored as their elements, and a cache that would not
    /// keep them. Such a read's slabs may cut chunks at no cost beyond
    /// the bytes they hold ([`ReadPlan::ramping_from`]).
    #[must_use]
    pub fn reads_parts_directly(&self, store_opens_files: bool) -> bool {
        store_opens_files && self.direct.is_some() && !self.cache.keeps_units()
    }

    /// The array.
    #[must_use]
    pub fn desc(&self) -> &ArrayDescription {
        match &self.desc {
            Desc::Shared(d) => d,
            Desc::Borrowed(d) => d,
        }
    }

    /// Runs `f(desc, input)`: here when `inline` (or the array is
    /// borrowed), else through the offload.
    async fn run_with_desc<T, R>(
        &self,
        inline: bool,
        input: T,
        f: fn(&ArrayDescription, T) -> R,
    ) -> Result<R, RegionError>
    where
        T: Send + 'static,
        R: Send + 'static,
    {
        match &self.desc {
            Desc::Shared(d) if !inline => {
                let d = d.clone();
                self.start(move || f(&d, input)).await
            }
            _ => {
                let d = self.desc();
                guarded(move || f(d, input))
            }
        }
    }

    /// Runs `f` here when `inline`, else through the offload.
    async fn run<R: Send + 'static>(
        &self,
        inline: bool,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, RegionError> {
        if inline {
            return guarded(f);
        }
        self.hand_off(false, f).await
    }

    /// Runs `f`, a direct read (it blocks on a file and on the slab's
    /// lock), here when `inline`, else on the offload's I/O threads
    /// ([`Offload::spawn_io`]).
    async fn run_io<R: Send + 'static>(
        &self,
        inline: bool,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, RegionError> {
        if inline {
            return guarded(f);
        }
        self.hand_off(true, f).await
    }

    /// Hands `f` to the offload now; the result arrives later.
    fn start<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> impl std::future::Future<Output = Result<R, RegionError>> {
        self.hand_off(false, f)
    }

    /// Hands `f` to the offload's CPU threads, or its I/O threads when
    /// `io`; the result arrives later.
    fn hand_off<R: Send + 'static>(
        &self,
        io: bool,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> impl std::future::Future<Output = Result<R, RegionError>> {
        let (tx, rx) = oneshot::channel();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            // A read cancelled while this waited for a thread (the client
            // went away) leaves its queued units undone.
            if tx.is_canceled() {
                return;
            }
            // The receiver may be gone since (the read was cancelled).
            let _ = tx.send(f());
        });
        if io {
            self.offload.spawn_io(job);
        } else {
            self.offload.spawn(job);
        }
        async move { rx.await.map_err(|_| RegionError::Internal("the work of a read failed on its thread".into())) }
    }

    /// The decoded bytes of a compressed unit to decode alone for `copy`
    /// (and the layout's swap unit), when that pays and the cache would not
    /// keep the whole unit ([`super::ranged`]).
    fn ranged(&self, copy: &UnitCopy) -> Option<(usize, Range<usize>)> {
        let (unit, kind) = self.ranged?;
        if self.cache.keeps_units() {
            return None;
        }
        let es = self.es as u64;
        Some((unit, ranged_span(copy, es, self.unit_elems.saturating_mul(es), kind)?))
    }

    /// Whether whole compressed chunks decode span by span, with the other
    /// chunks of their slab ([`decode_group`]): fixed-size elements stored
    /// as they are under one compressor that decodes by blocks (blosc), and
    /// a cache that would not keep the whole unit.
    /// Only chunks of at least [`SPAN_BYTES`] per core decoded: a group's
    /// jobs are one per span index, so smaller chunks would leave cores
    /// idle (each takes its own job instead, as any chunk).
    fn spans(&self) -> bool {
        !self.variable
            && matches!(self.ranged, Some((unit, RangeDecode::Blocks)) if unit <= 1)
            && !self.cache.keeps_units()
            && self.unit_elems.saturating_mul(self.es as u64) >= (SPAN_BYTES as u64).saturating_mul(cores())
    }

    /// The swap unit and byte runs of a chunk to read straight into the
    /// slab for `copy`, when that pays and the cache would not keep the
    /// whole chunk ([`super::direct`]).
    fn direct_runs(&self, copy: &UnitCopy) -> Option<(usize, Vec<Run>)> {
        let swap = self.direct?;
        if self.cache.keeps_units() {
            return None;
        }
        let es = self.es as u64;
        Some((swap, direct_runs(copy, es, self.unit_elems.saturating_mul(es))?))
    }

    async fn yield_point(&self) {
        if let Some(y) = self.offload.yield_point() {
            y.await;
        }
    }

    /// Whether a missing unit needs any work: noting it (fill_missing off),
    /// or writing a fill value that is not what a fresh slab holds already.
    fn missing_needs_work(&self) -> bool {
        !self.fill_missing || needs_fill(self.variable)
    }

    /// The work for a missing unit, to run anywhere.
    fn on_missing(&self, at: Missed, spec: UnitCopy, slab: Arc<Mutex<SlabData>>, missing: Arc<Missing>) -> OnMissing {
        OnMissing {
            fill: self.fill.clone(),
            fill_missing: self.fill_missing,
            variable: self.variable,
            at,
            spec,
            slab,
            missing,
        }
    }
}

/// A missing unit: filled, or noted as missing (the first, in grid order).
struct OnMissing {
    fill: Arc<[u8]>,
    fill_missing: bool,
    variable: bool,
    at: Missed,
    spec: UnitCopy,
    slab: Arc<Mutex<SlabData>>,
    missing: Arc<Missing>,
}

impl OnMissing {
    fn run(self) {
        if !self.fill_missing {
            let mut first = self.missing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if first.as_ref().is_none_or(|m| self.at.coords < m.coords) {
                *first = Some(self.at);
            }
        } else if needs_fill(self.variable) {
            fill_unit(&self.fill, &self.spec, &self.slab);
        }
    }
}

fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, RegionError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(ToString::to_string)
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string());
        RegionError::Internal(format!("CPU work failed: {what}"))
    })
}

/// The first missing unit met while assembling a slab (fill_missing off).
struct Missed {
    /// Global grid coordinates of the unit (for "first").
    coords: Vec<u64>,
    key: String,
    unit: MissingUnit,
}

type Missing = Mutex<Option<Missed>>;

fn source_err(key: &str) -> impl FnOnce(SourceError) -> RegionError + '_ {
    move |source| RegionError::Source { key: key.to_owned(), source }
}

fn corrupt(key: &str, reason: String) -> RegionError {
    RegionError::Corrupt { key: key.to_owned(), reason }
}

/// Reads one slab's units into a fresh buffer: `None` for a slab of
/// variable-length elements that went past `cap` bytes (plan it again
/// smaller).
///
/// # Errors
/// A store failure, an undecodable or inconsistent unit (naming the key),
/// a missing unit when `fill_missing` is off (the first in grid order).
pub fn read_slab<'a>(
    ctx: &'a ReadCtx<'_>,
    source: &'a dyn ChunkSource,
    slab: Arc<Slab>,
    cap: u64,
) -> BoxFuture<'a, Result<Option<SlabData>, RegionError>> {
    // Boxed: one allocation per slab, and callers that spawn the read need
    // not prove its closures `Send` for every lifetime.
    Box::pin(slab_units(ctx, source, slab, cap))
}

async fn slab_units(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    slab: Arc<Slab>,
    cap: u64,
) -> Result<Option<SlabData>, RegionError> {
    let n = usize::try_from(slab.len).map_err(|_| SubsetError("the slab is too large to hold".into()))?;
    // A large fixed-size slab is a recycled buffer (unzeroed: every element
    // is written) or a fresh one the allocator may zero (a memset of up to
    // 2 × read_slab_bytes): that runs on the offload, never on the async
    // worker.
    let (es, variable) = (ctx.es, ctx.variable);
    let data = if !variable && n.saturating_mul(es) > INLINE_SLAB_BYTES {
        ctx.run(false, move || SlabData::new(n, es, variable, cap)).await?
    } else {
        SlabData::new(n, es, variable, cap)
    };
    // Copies into a small slab from units already decoded cost less than
    // the hand-off to the offload: they run inline (a hot tile).
    let inline = !ctx.variable && n.saturating_mul(ctx.es) <= INLINE_SLAB_BYTES;
    let data = Arc::new(Mutex::new(data));
    let missing: Arc<Missing> = Arc::new(Mutex::new(None));
    match ctx.desc().sharding.clone() {
        None => {
            // Chunks the slab copies whole, decoded together (see
            // `decode_group`), and direct reads in batches, once every
            // unit is read.
            // Only slabs that copy every chunk whole (whole arrays, boxes on
            // chunk bounds): where some are cut, waiting for every read
            // before decoding cost more than the grouped copies saved
            // (bench/README, round 8).
            let cap = group_cap(n.saturating_mul(ctx.es) as u64);
            let whole = || slab.units().all(|u| u.copy.elements() == ctx.unit_elems);
            let group = (ctx.spans() && whole()).then(|| Mutex::new(Group { units: Vec::new(), bytes: 0, cap }));
            let deferred = Deferred { group, batch: DirectBatch::default() };
            stream::iter(slab.units())
                .map(|unit| read_chunk_unit(ctx, source, unit, data.clone(), missing.clone(), inline, &deferred))
                .buffer_unordered(ctx.concurrency)
                .try_for_each(|()| async { Ok(()) })
                .await?;
            // The direct reads of a batch not full ([`super::direct`]).
            let rest = deferred.batch.take();
            if !rest.is_empty() {
                let slab = data.clone();
                ctx.run_io(inline, move || read_batch(rest, &slab)).await??;
            }
            if let Some(group) = deferred.group {
                let group = group.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
                decode_group(ctx, group.units, data.clone()).await?;
            }
        }
        Some(sharding) => {
            stream::iter(slab.shards())
                .map(|s| {
                    let sharding = sharding.clone();
                    let (data, missing) = (data.clone(), missing.clone());
                    async move { read_shard_units(ctx, source, &sharding, s.shard, s.units, data, missing, inline).await }
                })
                .buffer_unordered(ctx.concurrency)
                .try_for_each(|()| async { Ok(()) })
                .await?;
        }
    }
    let missing = missing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(m) = missing {
        return Err(RegionError::Missing { key: m.key, unit: m.unit });
    }
    let data = Arc::try_unwrap(data).map_err(|_| RegionError::Internal("slab still shared".into()))?;
    match data.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
        SlabData::Variable(v) if v.over => Ok(None),
        data => Ok(Some(data)),
    }
}

/// Decoding a whole stored chunk (and caching it).
struct DecodeJob {
    cache: Arc<dyn UnitCache>,
    key: String,
    stored: Versioned,
    ticket: u64,
}

impl DecodeJob {
    fn run(self, desc: &ArrayDescription) -> Result<Arc<ChunkData>, RegionError> {
        let Self { cache, key, stored, ticket } = self;
        let data = desc
            .decode_chunk(Vec::from(stored.bytes))
            .map_err(|source| RegionError::Codec { key: key.clone(), source })?;
        let data = Arc::new(data);
        cache.insert_chunk(&key, stored.version, Some(data.clone()), ticket);
        Ok(data)
    }
}

/// A whole chunk: cached, or its stored bytes still to decode.
enum Fetched {
    Ready(Option<Arc<ChunkData>>),
    Stored(Versioned, u64),
}

async fn fetch_chunk(ctx: &ReadCtx<'_>, source: &dyn ChunkSource, key: &str) -> Result<Fetched, RegionError> {
    if let Some(data) = ctx.cache.chunk(key).await.map_err(source_err(key))? {
        return Ok(Fetched::Ready(data));
    }
    let ticket = ctx.cache.ticket();
    match source.get_versioned_within(key, ctx.max_stored).await.map_err(source_err(key))? {
        Some(stored) => Ok(Fetched::Stored(stored, ticket)),
        None => {
            ctx.cache.insert_chunk(key, None, None, ticket);
            Ok(Fetched::Ready(None))
        }
    }
}

/// A chunk read by byte ranges, or (cached, missing, or the parts not
/// usable) as a whole chunk.
enum Partial {
    Parts(Vec<(u64, Bytes)>),
    Whole(Fetched),
}

/// The chunk `key` through the cache, else (when reading part of it pays)
/// only the byte ranges `copy` needs (see [`super::partial`]): a stored
/// value of the wrong size, or one that changed between the ranges, is
/// read again whole.
async fn fetch_partial(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    key: &str,
    copy: &UnitCopy,
) -> Result<Partial, RegionError> {
    if let Some(data) = ctx.cache.chunk(key).await.map_err(source_err(key))? {
        return Ok(Partial::Whole(Fetched::Ready(data)));
    }
    let ticket = ctx.cache.ticket();
    let want = ctx.unit_elems.saturating_mul(ctx.es as u64);
    if let Some(ranges) = needed_ranges(copy, ctx.es as u64, want, ctx.coalesce_gap, ctx.partial_min_chunk) {
        match source.get_ranges_sized(key, &ranges).await {
            Ok(None) => {
                ctx.cache.insert_chunk(key, None, None, ticket);
                return Ok(Partial::Whole(Fetched::Ready(None)));
            }
            Ok(Some(SizedParts { parts, size }))
                if size == want
                    && parts.len() == ranges.len()
                    && parts.iter().zip(&ranges).all(|(p, r)| p.len() as u64 == r.end - r.start) =>
            {
                return Ok(Partial::Parts(ranges.iter().map(|r| r.start).zip(parts).collect()));
            }
            // The wrong size (decoding the whole value reports it), or changed
            // between the ranges: read it whole.
            Ok(Some(_)) | Err(SourceError::Precondition(_) | SourceError::RangeNotSatisfiable(_)) => {}
            Err(e) => return Err(source_err(key)(e)),
        }
    }
    match source.get_versioned_within(key, ctx.max_stored).await.map_err(source_err(key))? {
        Some(stored) => Ok(Partial::Whole(Fetched::Stored(stored, ticket))),
        None => {
            ctx.cache.insert_chunk(key, None, None, ticket);
            Ok(Partial::Whole(Fetched::Ready(None)))
        }
    }
}

/// What opening a chunk for a direct read found ([`super::direct`]).
enum DirectFetch {
    /// The chunk's file, of the chunk's size.
    Open(Box<dyn DirectUnit>),
    /// Cached, or missing.
    Fetched(Fetched),
    /// Read it the ordinary way: the store has no files, or this one is
    /// not the chunk's size (the ordinary read reports it).
    Ordinary,
}

/// The chunk `key` opened for a direct read; cached (a cache that would
/// not keep it may hold it still) or missing as any read finds it.
async fn fetch_direct(ctx: &ReadCtx<'_>, source: &dyn ChunkSource, key: &str) -> Result<DirectFetch, RegionError> {
    // Opened first: a store without files answers at once, with no second
    // cache lookup (a revalidation) on the ordinary path.
    let ticket = ctx.cache.ticket();
    let open = source.open_direct(key).await.map_err(source_err(key))?;
    if matches!(open, Direct::Unsupported) {
        return Ok(DirectFetch::Ordinary);
    }
    if let Some(data) = ctx.cache.chunk(key).await.map_err(source_err(key))? {
        return Ok(DirectFetch::Fetched(Fetched::Ready(data)));
    }
    Ok(match open {
        Direct::Open(unit) if unit.size() == ctx.unit_elems.saturating_mul(ctx.es as u64) => DirectFetch::Open(unit),
        Direct::Missing => {
            ctx.cache.insert_chunk(key, None, None, ticket);
            DirectFetch::Fetched(Fetched::Ready(None))
        }
        Direct::Open(_) | Direct::Unsupported => DirectFetch::Ordinary,
    })
}

/// Work a slab's chunk units leave to be done together once they are all
/// read: whole blosc chunks decoded as a group ([`decode_group`]), chunks
/// read straight into the slab in batches ([`super::direct`]).
struct Deferred {
    /// The group (`None`: the read takes no group, see `ReadCtx::spans`).
    group: Option<Mutex<Group>>,
    /// Direct reads not yet handed on.
    batch: DirectBatch,
}

async fn read_chunk_unit(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    unit: Unit,
    slab: Arc<Mutex<SlabData>>,
    missing: Arc<Missing>,
    inline: bool,
    deferred: &Deferred,
) -> Result<(), RegionError> {
    // Units that complete at once (cached, missing, in memory) would let a
    // slab of many of them run in one poll.
    ctx.yield_point().await;
    if ctx.variable && slab_over(&slab) {
        return Ok(());
    }
    let Unit { coords, copy } = unit;
    let key = ctx.desc().chunk_key(&coords);
    let (es, unit_elems) = (ctx.es.max(1), ctx.unit_elems);
    // An uncompressed chunk read straight into the slab ([`super::direct`]).
    let mut direct = None;
    if let Some((swap, runs)) = ctx.direct_runs(&copy) {
        match fetch_direct(ctx, source, &key).await? {
            DirectFetch::Open(unit) => {
                // Read with the slab's other chunks ([`super::direct`]).
                let Some(full) = deferred.batch.push(DirectRead { unit, runs, swap, key }) else { return Ok(()) };
                return ctx.run_io(inline, move || read_batch(full, &slab)).await?;
            }
            DirectFetch::Fetched(fetched) => direct = Some(fetched),
            DirectFetch::Ordinary => {}
        }
    }
    let fetched = match (direct, ctx.layout) {
        (Some(fetched), _) => fetched,
        (None, Some(unit)) => match fetch_partial(ctx, source, &key, &copy).await? {
            Partial::Parts(parts) => {
                return ctx.run(inline, move || copy_parts(&parts, &copy, &slab, es, unit)).await?;
            }
            Partial::Whole(fetched) => fetched,
        },
        (None, None) => fetch_chunk(ctx, source, &key).await?,
    };
    match fetched {
        Fetched::Ready(None) if !ctx.missing_needs_work() => Ok(()),
        Fetched::Ready(None) => {
            let at = Missed { unit: MissingUnit::Chunk(coords.clone()), coords, key };
            let work = ctx.on_missing(at, copy, slab, missing);
            // Filling runs off the async threads too: it may be a large copy.
            ctx.run(inline || !ctx.fill_missing, move || work.run()).await
        }
        Fetched::Ready(Some(data)) => {
            ctx.run(inline, move || copy_unit(&data, unit_elems, &copy, &slab, es, &key)).await?
        }
        Fetched::Stored(stored, ticket) => {
            if let Some((unit, span)) = ctx.ranged(&copy) {
                let job = DecodeJob { cache: ctx.cache.clone(), key, stored, ticket };
                let input = (job, copy, slab, es, unit_elems, unit, span);
                return ctx
                    .run_with_desc(false, input, |desc, (job, copy, slab, es, unit_elems, unit, span)| {
                        let part = desc.codecs.decode_range(&job.stored.bytes, &desc.chunk_repr(), span);
                        if let Some((at, part)) = part {
                            return copy_parts(&[(at as u64, Bytes::from(part))], &copy, &slab, es, unit);
                        }
                        // Not decodable by parts: whole, as any read (and its errors).
                        let key = job.key.clone();
                        let data = job.run(desc)?;
                        copy_unit(&data, unit_elems, &copy, &slab, es, &key)
                    })
                    .await?;
            }
            if let Some(group) = &deferred.group {
                let mut group = group.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if grouped(ctx, &stored, &copy, &group) {
                    group.bytes = group.bytes.saturating_add(stored.bytes.len() as u64);
                    group
                        .units
                        .push(Grouped { job: DecodeJob { cache: ctx.cache.clone(), key, stored, ticket }, copy });
                    return Ok(());
                }
            }
            let job = DecodeJob { cache: ctx.cache.clone(), key, stored, ticket };
            ctx.run_with_desc(false, (job, copy, slab, es, unit_elems), |desc, (job, copy, slab, es, unit_elems)| {
                let key = job.key.clone();
                let data = job.run(desc)?;
                copy_unit(&data, unit_elems, &copy, &slab, es, &key)
            })
            .await?
        }
    }
}

/// A whole chunk of a slab to decode with the slab's other such chunks
/// ([`decode_group`]).
struct Grouped {
    job: DecodeJob,
    copy: UnitCopy,
}

/// A slab's chunks to decode together ([`decode_group`]) and the stored
/// bytes they hold, which may not pass `cap` ([`group_cap`]).
struct Group {
    units: Vec<Grouped>,
    bytes: u64,
    cap: u64,
}

/// What a slab of `slab_bytes` decoded bytes lets its group hold of
/// stored bytes: what valid encodings of that much take (blosc adds at
/// most a header and 1/8 besides), so a read holds its slab's chunks
/// stored once more at most, whatever the stored files claim.
fn group_cap(slab_bytes: u64) -> u64 {
    slab_bytes.saturating_add(slab_bytes / 8).saturating_add(64 << 10)
}

/// The cores the offload's jobs spread over (the machine's; read once; 2
/// in unit tests, so they take the same paths on every machine).
fn cores() -> u64 {
    if cfg!(test) {
        return 2;
    }
    static CORES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// Whether a stored chunk joins its slab's group ([`decode_group`]): the
/// read decodes by spans ([`ReadCtx::spans`]), the slab copies every
/// element of the chunk, its stored bytes are no more than a valid
/// encoding of it can take, and the group has room for them (what the
/// group holds is bounded by its slab, [`group_cap`]). Others are decoded
/// one job each, as any chunk.
fn grouped(ctx: &ReadCtx<'_>, stored: &Versioned, copy: &UnitCopy, group: &Group) -> bool {
    let unit_bytes = ctx.unit_elems.saturating_mul(ctx.es as u64);
    let len = stored.bytes.len() as u64;
    len <= group_cap(unit_bytes) && group.bytes.saturating_add(len) <= group.cap && copy.elements() == ctx.unit_elems
}

/// Decodes the chunks of a slab that the slab copies whole, span by span
/// across the chunks: job `i` (on the offload, one per span index) decodes
/// span `i` of every chunk and copies it into the slab while it is still
/// in the core's cache. Chunks of one slab split alike (one chunk shape)
/// put the spans of one job in the same rows of the slab, so the job
/// writes whole cache lines of a few MiB of it instead of every chunk
/// writing its share of each line of the whole slab (a chunk's last
/// dimension narrower than the slab's leaves each line to several
/// chunks). A chunk that does not decode by spans, or fails to, is decoded
/// whole afterwards (which reports any error as a whole read does, and
/// copies all of it over what spans were copied).
///
/// Memory: the stored bytes of the group (at most about the slab's size,
/// [`group_cap`]) until the slab is done, plus a span's scratch per job.
/// The decode starts once the slab's chunks are all read (reading the
/// next slab overlaps it: the service reads one slab ahead).
async fn decode_group(ctx: &ReadCtx<'_>, group: Vec<Grouped>, slab: Arc<Mutex<SlabData>>) -> Result<(), RegionError> {
    if group.is_empty() {
        return Ok(());
    }
    let (es, unit_elems) = (ctx.es.max(1), ctx.unit_elems);
    let repr = ctx.desc().chunk_repr();
    // Each chunk's spans (`None`: not by spans, decoded whole below).
    let counts: Vec<Option<usize>> =
        group.iter().map(|g| ctx.desc().codecs.span_count(&g.job.stored.bytes, &repr)).collect();
    let spans = counts.iter().flatten().copied().max().unwrap_or(0);
    let mut whole: Vec<usize> = (0..group.len()).filter(|&u| counts[u].is_none()).collect();
    // Each chunk's copy, listed once for all its spans.
    let groups: Vec<Vec<Strided>> = group.iter().map(|g| strided_groups(&g.copy)).collect();
    let (group, counts, groups) = (Arc::new(group), Arc::new(counts), Arc::new(groups));
    let failed: Vec<Vec<usize>> = stream::iter(0..spans)
        .map(|i| {
            let input = (group.clone(), counts.clone(), groups.clone(), slab.clone(), i, es);
            ctx.run_with_desc(false, input, |desc, (group, counts, groups, slab, i, es)| {
                let repr = desc.chunk_repr();
                let mut out = Vec::new();
                let mut failed = Vec::new();
                for (u, g) in group.iter().enumerate().filter(|&(u, _)| counts[u].is_some_and(|n| i < n)) {
                    match desc.codecs.decode_span(&g.job.stored.bytes, &repr, i, &mut out) {
                        Some(at) => copy_groups_span(&out, at, &groups[u], &slab, es)?,
                        None => failed.push(u),
                    }
                }
                Ok::<_, RegionError>(failed)
            })
        })
        .buffer_unordered(spans.max(1))
        .map(|r| r.and_then(|r| r))
        .try_collect()
        .await?;
    drop((counts, groups));
    whole.extend(failed.into_iter().flatten());
    let mut failed = whole;
    failed.sort_unstable();
    failed.dedup();
    if failed.is_empty() {
        return Ok(());
    }
    // Whole, one after another: the first that fails is the error.
    let Ok(group) = Arc::try_unwrap(group) else {
        return Err(RegionError::Internal("a slab's group still shared".into()));
    };
    let mut group: Vec<Option<Grouped>> = group.into_iter().map(Some).collect();
    for u in failed {
        let Some(Grouped { job, copy }) = group[u].take() else { continue };
        let input = (job, copy, slab.clone(), es, unit_elems);
        ctx.run_with_desc(false, input, |desc, (job, copy, slab, es, unit_elems)| {
            let key = job.key.clone();
            let data = job.run(desc)?;
            copy_unit(&data, unit_elems, &copy, &slab, es, &key)
        })
        .await??;
    }
    Ok(())
}

/// The index of the shard `key`: cached unless `fresh`, else read by range
/// (and cached with a new stamp).
async fn shard_index(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    key: &str,
    sharding: &ShardingCodec,
    fresh: bool,
) -> Result<IndexEntry, RegionError> {
    if !fresh {
        if let Some(entry) = ctx.cache.index(key).await.map_err(source_err(key))? {
            return Ok(entry);
        }
    }
    let ticket = ctx.cache.ticket();
    let (version, index) = match source.get_range_versioned(key, sharding.index_byte_range()).await {
        Ok(Some(stored)) => {
            if stored.bytes.len() as u64 != sharding.index_size() {
                return Err(corrupt(
                    key,
                    format!(
                        "the shard is {} bytes, shorter than its {}-byte index",
                        stored.bytes.len(),
                        sharding.index_size()
                    ),
                ));
            }
            let index = sharding
                .decode_index(Vec::from(stored.bytes))
                .map_err(|source| RegionError::Codec { key: key.to_owned(), source })?;
            (stored.version, Some(Arc::new(index)))
        }
        Ok(None) => (None, None),
        Err(SourceError::RangeNotSatisfiable(_)) => {
            return Err(corrupt(key, format!("the shard is shorter than its {}-byte index", sharding.index_size())))
        }
        Err(e) => return Err(source_err(key)(e)),
    };
    let stamp = ctx.cache.insert_index(key, version.clone(), index.clone(), ticket);
    Ok(IndexEntry { version, stamp, index })
}

#[allow(clippy::too_many_arguments)]
async fn read_shard_units(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    sharding: &Arc<ShardingCodec>,
    shard: Vec<u64>,
    units: Units,
    slab: Arc<Mutex<SlabData>>,
    missing: Arc<Missing>,
    inline: bool,
) -> Result<(), RegionError> {
    if ctx.variable && slab_over(&slab) {
        return Ok(());
    }
    let key = ctx.desc().chunk_key(&shard);
    let mut fresh = false;
    // A shard rewritten between reading its index and its inner chunks is
    // read again (once more; then the error stands). Every round of inner
    // chunks is conditioned on the same index.
    for attempt in 0..3 {
        let entry = shard_index(ctx, source, &key, sharding, fresh).await?;
        let mut it = units.clone();
        let result = async {
            loop {
                let batch: Vec<Unit> = it.by_ref().take(SHARD_BATCH).collect();
                if batch.is_empty() {
                    return Ok(());
                }
                let at = ShardAt { shard: &shard, key: &key, entry: &entry };
                read_shard_once(ctx, source, sharding, &at, &batch, &slab, &missing, inline).await?;
            }
        }
        .await;
        match result {
            Err(RegionError::Source { source: SourceError::Precondition(_), .. }) if attempt < 2 => fresh = true,
            other => return other,
        }
    }
    Err(corrupt(&key, "the shard kept changing while it was read".into()))
}

/// A shard, and the reading of its index a read goes by.
struct ShardAt<'a> {
    shard: &'a [u64],
    key: &'a str,
    entry: &'a IndexEntry,
}

/// Reads `range` of a shard, conditioned on `version`.
async fn fetch_range(
    source: &dyn ChunkSource,
    key: &str,
    range: Range<u64>,
    version: Option<&str>,
) -> Result<(Range<u64>, Bytes), RegionError> {
    if range.is_empty() {
        return Ok((range, Bytes::new()));
    }
    match source.get_range_if(key, range.clone(), version).await {
        Ok(Some(bytes)) => Ok((range, bytes)),
        // The shard vanished after its index was read: read it again.
        Ok(None) => Err(RegionError::Source {
            key: key.to_owned(),
            source: SourceError::Precondition("the shard was deleted while it was read".into()),
        }),
        Err(SourceError::RangeNotSatisfiable(_)) => {
            Err(corrupt(key, format!("bytes {}..{} are past the end of the shard", range.start, range.end)))
        }
        Err(e) => Err(source_err(key)(e)),
    }
}

/// Parts of one unit read by byte ranges: each range's offset in the unit
/// and its bytes.
type Parts = Vec<(u64, Bytes)>;

/// One attempt at the inner chunks `inners` of one shard, under one index:
/// what is done inline is done, what is handed to the offload is awaited,
/// on success and failure alike.
#[allow(clippy::too_many_arguments, clippy::too_many_lines)]
async fn read_shard_once(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    sharding: &Arc<ShardingCodec>,
    at: &ShardAt<'_>,
    inners: &[Unit],
    slab: &Arc<Mutex<SlabData>>,
    missing: &Arc<Missing>,
    inline: bool,
) -> Result<(), RegionError> {
    let mut jobs: Vec<BoxFuture<'static, Result<Result<(), RegionError>, RegionError>>> = Vec::new();
    let started = async {
        let ShardAt { shard, key, entry } = *at;
        let IndexEntry { version, stamp, index } = entry;
        let stamp = *stamp;
        let (es, unit_elems) = (ctx.es.max(1), ctx.unit_elems);
        let global = |inner: &[u64]| -> Vec<u64> {
            inner.iter().zip(shard).zip(sharding.chunks_per_shard()).map(|((i, s), n)| s * n + i).collect()
        };
        // Byte ranges to read: (inner chunk, range in the shard, the partial
        // read it belongs to when only part of the inner chunk is read).
        let mut needed: Vec<(usize, Range<u64>, Option<usize>)> = Vec::new();
        // Partial reads: (inner chunk, its first byte in the shard, swap unit,
        // the parts read: offset in the inner chunk and bytes).
        let mut partials: Vec<(usize, u64, usize, Parts)> = Vec::new();
        let unit_bytes = unit_elems.saturating_mul(es as u64);
        for (i, Unit { coords: inner, copy: spec }) in inners.iter().enumerate() {
            ctx.yield_point().await;
            let range = index.as_ref().and_then(|ix| ix.inner_range(inner));
            let Some(range) = range else {
                if !ctx.missing_needs_work() {
                    continue;
                }
                let unit = if index.is_some() {
                    MissingUnit::Inner { shard: shard.to_vec(), inner: inner.clone() }
                } else {
                    MissingUnit::Shard(shard.to_vec())
                };
                let at = Missed { coords: global(inner), key: key.to_owned(), unit };
                let work = ctx.on_missing(at, spec.clone(), slab.clone(), missing.clone());
                if inline || !ctx.fill_missing {
                    ctx.run(true, move || work.run()).await?;
                } else {
                    let job = ctx.start(move || {
                        work.run();
                        Ok(())
                    });
                    jobs.push(job.boxed());
                }
                continue;
            };
            if let Some(data) = ctx.cache.inner(key, inner, stamp) {
                let (spec, slab, key) = (spec.clone(), slab.clone(), key.to_owned());
                let copy = move || copy_unit(&data, unit_elems, &spec, &slab, es, &key);
                if inline {
                    ctx.run(true, copy).await??;
                } else {
                    jobs.push(ctx.start(copy).boxed());
                }
                continue;
            }
            // An inner chunk stored as its elements, at its exact size, of
            // which the slab needs a small part: only those bytes.
            let sub = ctx.layout.filter(|_| range.end - range.start == unit_bytes).and_then(|unit| {
                Some((unit, needed_ranges(spec, es as u64, unit_bytes, ctx.coalesce_gap, ctx.partial_min_chunk)?))
            });
            match sub {
                Some((unit, subs)) => {
                    let p = partials.len();
                    partials.push((i, range.start, unit, Vec::with_capacity(subs.len())));
                    needed.extend(subs.into_iter().map(|r| (i, range.start + r.start..range.start + r.end, Some(p))));
                }
                None => needed.push((i, range, None)),
            }
        }
        let ticket = ctx.cache.ticket();
        let ranges: Vec<Range<u64>> = needed.iter().map(|(_, r, _)| r.clone()).collect();
        let reads = coalesce_ranges(&ranges, ctx.coalesce_gap);
        let version = version.as_deref();
        let to_read: Vec<(usize, Range<u64>)> = reads.iter().map(|r| r.range.clone()).enumerate().collect();
        let mut reading = stream::iter(to_read)
            .map(|(n, range)| async move { (n, fetch_range(source, key, range, version).await) })
            .buffered(ctx.concurrency);
        let mut fetched: Vec<(Range<u64>, Bytes)> = Vec::with_capacity(reads.len());
        while let Some((n, result)) = reading.next().await {
            match result {
                Ok(got) => fetched.push(got),
                // The index pointed past the end of the shard.
                Err(RegionError::Corrupt { key, reason }) => {
                    let names = name_inner_chunks(reads[n].members.iter().map(|&m| &inners[needed[m].0].coords));
                    return Err(RegionError::Corrupt { key, reason: format!("{names}: {reason}") });
                }
                Err(e) => return Err(e),
            }
        }
        drop(reading);
        for (read, (range, bytes)) in reads.iter().zip(fetched) {
            for &m in &read.members {
                let (i, r, part) = &needed[m];
                let Unit { coords: inner, copy: spec } = &inners[*i];
                let (lo, hi) = (r.start - range.start, r.end - range.start);
                if hi > bytes.len() as u64 {
                    return Err(corrupt(
                        key,
                        format!("inner chunk {inner:?}: bytes {}..{} are past the end of the shard", r.start, r.end),
                    ));
                }
                #[allow(clippy::cast_possible_truncation)] // hi <= bytes.len()
                let bytes_of = bytes.slice(lo as usize..hi as usize);
                if let Some(p) = part {
                    let (_, base, _, parts) = &mut partials[*p];
                    parts.push((r.start - *base, bytes_of));
                    continue;
                }
                let part = bytes_of;
                let (cache, sharding, inner, spec, slab, key) =
                    (ctx.cache.clone(), sharding.clone(), inner.clone(), spec.clone(), slab.clone(), key.to_owned());
                let ranged = ctx.ranged(&spec);
                jobs.push(
                    ctx.start(move || {
                        if let Some((unit, span)) = ranged {
                            let (codecs, repr) = (sharding.inner_codecs(), sharding.inner_chunk_repr());
                            if let Some((at, part)) = codecs.decode_range(&part, repr, span) {
                                return copy_parts(&[(at as u64, Bytes::from(part))], &spec, &slab, es, unit);
                            }
                        }
                        let data = sharding
                            .decode_inner_chunk(Vec::from(part), &inner)
                            .map_err(|source| RegionError::Codec { key: key.clone(), source })?;
                        let data = Arc::new(data);
                        cache.insert_inner(&key, inner, stamp, data.clone(), ticket);
                        copy_unit(&data, unit_elems, &spec, &slab, es, &key)
                    })
                    .boxed(),
                );
            }
        }
        for (i, _, unit, mut parts) in partials {
            parts.sort_by_key(|p| p.0);
            let (spec, slab) = (inners[i].copy.clone(), slab.clone());
            let copy = move || copy_parts(&parts, &spec, &slab, es, unit);
            if inline {
                ctx.run(true, copy).await??;
            } else {
                jobs.push(ctx.start(copy).boxed());
            }
        }
        Ok(())
    }
    .await;
    // Every job started is awaited, whatever failed: a job of an attempt
    // given up (a shard rewritten under the read) must never write into
    // the slab the next attempt fills, nor keep it shared after the read.
    let mut first = started.err();
    for job in jobs {
        if let Err(e) = job.await.and_then(|r| r) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// `inner chunk [1, 2]` or `inner chunks [1, 2], [1, 3]`.
fn name_inner_chunks<'a>(coords: impl Iterator<Item = &'a Vec<u64>>) -> String {
    let names: Vec<String> = coords.map(|c| format!("{c:?}")).collect();
    format!("inner chunk{} {}", if names.len() == 1 { "" } else { "s" }, names.join(", "))
}

/// One decoded chunk (a whole chunk or shard), through the cache (`None`:
/// missing). For a decoded-chunk answer.
///
/// # Errors
/// A store failure, undecodable stored bytes (naming the key).
pub async fn read_chunk(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    coords: &[u64],
) -> Result<Option<Arc<ChunkData>>, RegionError> {
    let key = ctx.desc().chunk_key(coords);
    match fetch_chunk(ctx, source, &key).await? {
        Fetched::Ready(data) => Ok(data),
        Fetched::Stored(stored, ticket) => {
            let job = DecodeJob { cache: ctx.cache.clone(), key, stored, ticket };
            ctx.run_with_desc(false, job, |desc, job| job.run(desc)).await?.map(Some)
        }
    }
}

/// One inner chunk `inner` of the shard at `shard`, decoded, through the
/// cache (`None`: the shard is missing or the inner chunk empty).
///
/// # Errors
/// As [`read_chunk`]; an inconsistent shard.
pub async fn read_inner_chunk(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    shard: &[u64],
    inner: &[u64],
) -> Result<Option<Arc<ChunkData>>, RegionError> {
    let Some(sharding) = ctx.desc().sharding.clone() else {
        return Err(SubsetError("the array is not sharded".into()).into());
    };
    let key = ctx.desc().chunk_key(shard);
    let (bytes, stamp, ticket) = match fetch_inner(ctx, source, &sharding, &key, inner).await? {
        InnerFetched::Ready(data) => return Ok(data),
        InnerFetched::Stored { bytes, stamp, ticket } => (bytes, stamp, ticket),
    };
    let (cache, inner, k) = (ctx.cache.clone(), inner.to_vec(), key);
    let data = ctx
        .run(false, move || {
            let data = sharding
                .decode_inner_chunk(Vec::from(bytes), &inner)
                .map_err(|source| RegionError::Codec { key: k.clone(), source })?;
            let data = Arc::new(data);
            cache.insert_inner(&k, inner, stamp, data.clone(), ticket);
            Ok::<_, RegionError>(data)
        })
        .await??;
    Ok(Some(data))
}

/// An inner chunk: cached or missing (`None`), or its stored bytes read
/// through the index reading `stamp`, with the cache ticket noted before.
enum InnerFetched {
    Ready(Option<Arc<ChunkData>>),
    Stored { bytes: Bytes, stamp: u64, ticket: u64 },
}

/// The inner chunk `inner` of the shard `key` through the cache, else its
/// stored bytes (conditioned on the index's version; a shard rewritten
/// meanwhile is read again, twice at most).
async fn fetch_inner(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    sharding: &ShardingCodec,
    key: &str,
    inner: &[u64],
) -> Result<InnerFetched, RegionError> {
    let mut fresh = false;
    for attempt in 0..3 {
        let IndexEntry { version, stamp, index } = shard_index(ctx, source, key, sharding, fresh).await?;
        let Some(r) = index.as_ref().and_then(|ix| ix.inner_range(inner)) else {
            return Ok(InnerFetched::Ready(None));
        };
        if let Some(data) = ctx.cache.inner(key, inner, stamp) {
            return Ok(InnerFetched::Ready(Some(data)));
        }
        let ticket = ctx.cache.ticket();
        let bytes = match fetch_range(source, key, r.clone(), version.as_deref()).await {
            Ok((_, b)) => b,
            Err(RegionError::Source { source: SourceError::Precondition(_), .. }) if attempt < 2 => {
                fresh = true;
                continue;
            }
            Err(e) => return Err(e),
        };
        if bytes.len() as u64 != r.end - r.start {
            return Err(corrupt(
                key,
                format!("inner chunk {inner:?}: bytes {}..{} are past the end of the shard", r.start, r.end),
            ));
        }
        return Ok(InnerFetched::Stored { bytes, stamp, ticket });
    }
    Err(corrupt(key, "the shard kept changing while it was read".into()))
}

/// A unit (a chunk, or an inner chunk of a shard) as a reader that decodes
/// it itself finds it: decoded already (cached; `None`: missing), or its
/// stored bytes.
#[derive(Debug)]
pub enum UnitBytes {
    /// Cached (`None`: missing).
    Decoded(Option<Arc<ChunkData>>),
    /// Its stored bytes, not decoded: nothing read this way enters the
    /// cache but a missing chunk.
    Stored(Bytes),
}

/// The chunk at `coords` through the cache, its stored bytes not decoded:
/// for a reader that decodes it itself (in pieces, see
/// [`crate::zarr::codec::pieces`]).
///
/// # Errors
/// A store failure.
pub async fn chunk_bytes(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    coords: &[u64],
) -> Result<UnitBytes, RegionError> {
    let key = ctx.desc().chunk_key(coords);
    Ok(match fetch_chunk(ctx, source, &key).await? {
        Fetched::Ready(data) => UnitBytes::Decoded(data),
        Fetched::Stored(stored, _) => UnitBytes::Stored(stored.bytes),
    })
}

/// As [`chunk_bytes`], for the inner chunk `inner` of the shard at `shard`
/// (its byte range from the shard's index, read conditioned on the index).
///
/// # Errors
/// As [`read_inner_chunk`].
pub async fn inner_chunk_bytes(
    ctx: &ReadCtx<'_>,
    source: &dyn ChunkSource,
    shard: &[u64],
    inner: &[u64],
) -> Result<UnitBytes, RegionError> {
    let Some(sharding) = ctx.desc().sharding.clone() else {
        return Err(SubsetError("the array is not sharded".into()).into());
    };
    let key = ctx.desc().chunk_key(shard);
    Ok(match fetch_inner(ctx, source, &sharding, &key, inner).await? {
        InnerFetched::Ready(data) => UnitBytes::Decoded(data),
        InnerFetched::Stored { bytes, .. } => UnitBytes::Stored(bytes),
    })
}

/// Reads `selection` of the array (checked against its shape) into one
/// buffer, C order over the selection's result shape, the fill value where
/// nothing is stored: [`plan_read`] in slabs of
/// [`RegionOptions::slab_bytes`], then [`read_slab`] for each, with no
/// cache and CPU work inline.
///
/// # Errors
/// A selection of the wrong rank; a store failure, undecodable chunk or
/// inconsistent shard (naming the key).
pub async fn read_selection(
    desc: &ArrayDescription,
    source: &dyn ChunkSource,
    selection: &Selection,
    options: &RegionOptions,
) -> Result<ChunkData, RegionError> {
    let plan = plan_read(desc, selection.clone(), options.slab_bytes.max(1)).map_err(|e| SubsetError(e.0))?;
    let plan = Arc::new(plan);
    let ctx = ReadCtx::inline(desc, Arc::new(NoCache), true, options);
    collect(&ctx, source, &plan).await
}

/// Every slab of `plan`, concatenated.
async fn collect(ctx: &ReadCtx<'_>, source: &dyn ChunkSource, plan: &Arc<ReadPlan>) -> Result<ChunkData, RegionError> {
    let n = usize::try_from(plan.elements()).map_err(|_| SubsetError("the selection is too large to hold".into()))?;
    let mut fixed = Vec::new();
    let mut items = Vec::new();
    if ctx.variable {
        items.reserve(n);
    } else {
        fixed.reserve(n.saturating_mul(ctx.es));
    }
    for slab in plan.slabs() {
        match read_slab(ctx, source, slab, u64::MAX).await? {
            Some(SlabData::Fixed(b)) => fixed.extend_from_slice(&b),
            Some(SlabData::Variable(v)) => {
                items.extend(v.items.into_iter().map(|i| i.unwrap_or_else(|| ctx.fill.to_vec())));
            }
            None => return Err(RegionError::Internal("an uncapped slab went past its cap".into())),
        }
    }
    Ok(if ctx.variable { ChunkData::Variable(items) } else { ChunkData::Fixed(fixed) })
}

/// The selection of the box `region`.
fn box_selection(region: &ArraySubset) -> Selection {
    let dims = region
        .start()
        .iter()
        .zip(region.shape())
        .map(|(&start, &len)| DimIndexer::Slice { start, step: 1, len })
        .collect();
    Selection { dims, mode: SelectionMode::Basic }
}

/// Reads `region` of the array: every element, C order, fill value where
/// nothing is stored. Uses [`RegionOptions::default`].
///
/// # Errors
/// See [`read_region_with`].
pub async fn read_region(
    desc: &ArrayDescription,
    source: &dyn ChunkSource,
    region: &ArraySubset,
) -> Result<ChunkData, RegionError> {
    read_region_with(desc, source, region, &RegionOptions::default()).await
}

/// Reads `region` of the array with explicit options: [`read_selection`]
/// of the box.
///
/// # Errors
/// A region outside the array; a store failure, undecodable chunk or
/// inconsistent shard (naming the key).
pub async fn read_region_with(
    desc: &ArrayDescription,
    source: &dyn ChunkSource,
    region: &ArraySubset,
    options: &RegionOptions,
) -> Result<ChunkData, RegionError> {
    if region.rank() != desc.shape.len() || !region.is_within(&desc.shape) {
        return Err(SubsetError(format!("{region} is outside the array of shape {:?}", desc.shape)).into());
    }
    read_selection(desc, source, &box_selection(region), options).await
}
