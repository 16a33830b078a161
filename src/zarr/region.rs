//! Region reads and writes on a whole array, over an async key-value
//! reader ([`ChunkSource`]) and writer ([`ChunkSink`]) that the service
//! implements on its storage. This is the one engine: the server's slice
//! reads and writes and the engine's own tests (the fixture matrix, the
//! model proptests, the fuzz targets) run the same functions.
//!
//! Spec: Zarr v3 core §"Chunk grids" (which chunks a region touches; edge
//! chunks stored at full size), §"Fill value" (a missing chunk reads as the
//! fill value), and `codecs/sharding-indexed` §"Implementation notes"
//! (reading the index by a prefix or suffix range, then only the inner
//! chunks needed).
//!
//! The parts:
//!
//! - `projection`: a selection projected onto a chunk grid, per dimension
//!   (the touched units in order, and each one's runs of positions), one
//!   module for both directions: the read plan's axes and a write's
//!   touched chunks come from it;
//! - [`plan`]: a selection projected onto the unit grid (chunks, or inner
//!   chunks of shards) and split into slabs, lazily ([`plan_read`]);
//! - [`read`]: reading a slab's units (cache, whole chunks, shard indexes
//!   and coalesced inner chunk ranges, fill) into a slab ([`read_slab`]),
//!   and the collecting reads built on it ([`read_selection`],
//!   [`read_region`]);
//! - [`copy`]: the copy and fill kernels, unit to slab; [`buffers`]: the
//!   recycled buffers of large slabs; [`direct`]: uncompressed chunks
//!   read by the store straight into their places in a slab;
//! - this file: the traits the caller implements ([`ChunkSource`],
//!   [`ChunkSink`], [`UnitCache`], [`Offload`]), the errors, the options
//!   and the writes; `placement` is where a write's data goes.
//!
//! What a read does, per unit a slab touches: see [`read`]. In short: a
//! chunk is one request for the whole key; a shard is one range request for
//! its index, then one request per group of needed inner chunks (ranges
//! coalesced by `coalesce_ranges` with [`RegionOptions::coalesce_gap`],
//! conditioned on the index's version); a missing key or empty inner chunk
//! is the fill value, no decode.
//!
//! Writes take a box ([`write_region`]) or any selection
//! ([`write_selection`]: strided, orthogonal and coordinate selections
//! scatter into the chunks they touch; one element may be broadcast).
//! A write re-encodes every chunk it touches: a chunk the region covers
//! entirely is built from the data without reading; a partly covered chunk
//! is read, decoded, updated and re-encoded (read-modify-write). A partly
//! covered shard is read whole and rewritten at inner chunk granularity:
//! only the inner chunks the region touches are decoded (if partly
//! covered) and re-encoded, the others are copied as stored. A chunk equal
//! to the fill value afterwards is deleted, never stored; sharded chunks
//! omit inner chunks equal to the fill value.
//!
//! Concurrency: chunks are fetched concurrently (at most
//! [`RegionOptions::concurrency`] at a time) on the calling task; CPU work
//! (decoding, copying, encoding) runs where the caller's [`Offload`] puts
//! it: the service's CPU pool, or inline ([`Inline`]) in tests and tools.
//! The engine does not lock: a writer must hold the service's per-chunk
//! (or per-array) write lock around [`write_region`] so two
//! read-modify-writes of one chunk do not interleave. The engine does not
//! depend on tokio.
//!
//! Across processes, a read-modify-write reads the value with its version
//! ([`ChunkSource::get_versioned`]) and writes back only if it is unchanged
//! ([`ChunkSink::put_if`]); when it changed, the read-modify-write starts
//! again (at most [`RegionOptions::max_attempts`] times). Deleting a chunk
//! that became all fill cannot be conditional (stores offer no conditional
//! delete); whole-chunk writes read nothing and write unconditionally.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};

use super::array::ArrayDescription;
use super::byte_range::ByteRangeRequest;
use super::chunk::ChunkData;
use super::codec::CodecError;
use super::selection::Selection;
use super::subset::{ArraySubset, RegularChunkGrid, SubsetError};

pub mod buffers;
pub mod copy;
pub mod direct;
pub mod partial;
mod placement;
pub mod plan;
mod projection;
pub mod ranged;
pub mod read;

use placement::{DataRef, Placement};
use projection::TouchedChunks;

pub use copy::{SlabData, VarSlab};
pub use partial::{MAX_PARTIAL_RANGES, MIN_PARTIAL_CHUNK};
pub use plan::{plan_read, PlanError, ReadPlan, Slab, Slabs};
pub use read::{chunk_bytes, inner_chunk_bytes, UnitBytes};
pub use read::{
    read_chunk, read_inner_chunk, read_region, read_region_with, read_selection, read_slab, IndexEntry, MissingUnit,
    NoCache, ReadCtx, UnitCache,
};

/// Why a [`ChunkSource`] or [`ChunkSink`] failed, classified by meaning so
/// the service can map it to a status without reading messages (the
/// storage layer's meanings, without its types). Each holds the store's
/// reason; [`RegionError::Source`] names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The key does not exist where it must (reads answer a missing key as
    /// `None`, never this).
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller may not read or write this key.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A conditional request failed (the value changed underneath).
    #[error("precondition failed: {0}")]
    Precondition(String),
    /// The range asked for does not exist in the value.
    #[error("range not satisfiable: {0}")]
    RangeNotSatisfiable(String),
    /// The key is not one the store can hold (a bad name): the request's
    /// fault, not the store's.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// What is there is in the way (a file where a directory is needed, a
    /// link leaving a local mount): not a failure, and retrying does not
    /// help.
    #[error("{0}")]
    Refused(String),
    /// The store cannot do what was asked.
    #[error("not supported: {0}")]
    NotSupported(String),
    /// The store failed or could not be reached.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The stored value is larger than any encoding of its unit can take
    /// ([`ChunkSource::get_versioned_within`]): damaged stored data.
    #[error("{0}")]
    TooLarge(String),
}

impl SourceError {
    /// A stored value of `size` bytes, more than the `limit` any encoding
    /// of its chunk can take.
    #[must_use]
    pub fn too_large(size: u64, limit: u64) -> Self {
        Self::TooLarge(format!("{size} bytes, more than any encoding of its chunk can take ({limit})"))
    }
}

/// Reads stored values by key (relative to the array), whole or by range.
#[async_trait]
pub trait ChunkSource: Send + Sync {
    /// The value of `key` (or the part `range` names); `None` when the key
    /// does not exist, which reads as the fill value. A bounded range that
    /// runs past the end of the value answers the bytes that exist.
    ///
    /// # Errors
    /// A store failure.
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError>;

    /// The whole value of `key` with its version (an ETag), for a
    /// read-modify-write that writes back conditionally; `None` when the key
    /// does not exist. The default knows no versions.
    ///
    /// # Errors
    /// A store failure.
    async fn get_versioned(&self, key: &str) -> Result<Option<Versioned>, SourceError> {
        Ok(self.get(key, None).await?.map(|bytes| Versioned { bytes, version: None }))
    }

    /// [`get_versioned`](Self::get_versioned) of a value that may take at
    /// most `max` bytes (a chunk's [`CodecChain::max_stored_size`]): a
    /// larger one is [`SourceError::TooLarge`]. A store that can tell the
    /// size first refuses it before reading a byte (the mount's store
    /// does); the default reads it, then checks.
    ///
    /// # Errors
    /// As `get_versioned`, and the value being too large.
    async fn get_versioned_within(&self, key: &str, max: u64) -> Result<Option<Versioned>, SourceError> {
        let got = self.get_versioned(key).await?;
        match &got {
            Some(v) if v.bytes.len() as u64 > max => Err(SourceError::too_large(v.bytes.len() as u64, max)),
            _ => Ok(got),
        }
    }

    /// The part `range` of `key` with the version of the value it was read
    /// from (a shard's index, so its inner chunks can be read at that
    /// version); `None` when the key does not exist. The default knows no
    /// versions.
    ///
    /// # Errors
    /// A store failure.
    async fn get_range_versioned(&self, key: &str, range: ByteRangeRequest) -> Result<Option<Versioned>, SourceError> {
        Ok(self.get(key, Some(range)).await?.map(|bytes| Versioned { bytes, version: None }))
    }

    /// Bytes `range` of `key`, only from the value at `version` (when
    /// given); `None` when the key does not exist. The default ignores the
    /// version.
    ///
    /// # Errors
    /// [`SourceError::Precondition`] when the value is at another version;
    /// [`SourceError::RangeNotSatisfiable`] (or fewer bytes) when the range
    /// runs past its end; a store failure.
    async fn get_range_if(
        &self,
        key: &str,
        range: Range<u64>,
        version: Option<&str>,
    ) -> Result<Option<Bytes>, SourceError> {
        let _ = version;
        self.get(key, Some(ByteRangeRequest::Bounded(range))).await
    }

    /// Bytes `ranges` (sorted, disjoint, none empty) of `key`, all from one
    /// version of the value, with the size of that whole value (so a reader
    /// that expects a size can tell a stored value of the wrong length);
    /// `None` when the key does not exist. A part may be shorter than its
    /// range when the value ends first. The default reads the whole value
    /// (and so moves every byte).
    ///
    /// # Errors
    /// [`SourceError::Precondition`] when the value changed between the
    /// ranges (read it again whole); a store failure.
    async fn get_ranges_sized(&self, key: &str, ranges: &[Range<u64>]) -> Result<Option<SizedParts>, SourceError> {
        let Some(bytes) = self.get(key, None).await? else {
            return Ok(None);
        };
        let len = bytes.len() as u64;
        #[allow(clippy::cast_possible_truncation)] // clamped to the value's length
        let parts = ranges.iter().map(|r| bytes.slice(r.start.min(len) as usize..r.end.min(len) as usize)).collect();
        Ok(Some(SizedParts { parts, size: len }))
    }

    /// The value of `key` opened for reading straight into a slab's places
    /// ([`direct`]: uncompressed chunks wholly inside a selection): a
    /// store with files to read that way answers [`Direct::Open`]. The
    /// default, [`Direct::Unsupported`], reads the value with
    /// [`ChunkSource::get_versioned`] and copies it, as every other unit.
    ///
    /// # Errors
    /// A store failure.
    async fn open_direct(&self, key: &str) -> Result<Direct, SourceError> {
        let _ = key;
        Ok(Direct::Unsupported)
    }
}

/// A value opened for reading into a caller's buffers
/// ([`ChunkSource::open_direct`]).
pub enum Direct {
    /// This store does not read that way: read the value whole.
    Unsupported,
    /// The key does not exist (the fill value).
    Missing,
    /// The value, open.
    Open(Box<dyn DirectUnit>),
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Unsupported => "Unsupported",
            Self::Missing => "Missing",
            Self::Open(_) => "Open",
        })
    }
}

/// An open stored value whose bytes are read into the caller's buffers
/// (blocking: called from CPU work, never an async worker).
pub trait DirectUnit: Send + Sync {
    /// The value's size when it was opened.
    fn size(&self) -> u64;
    /// Fills every `(offset, buffer)` with the value's bytes from `offset`
    /// on, in any order.
    ///
    /// # Errors
    /// The value ending before a run does (changed while read), or a store
    /// failure: never a buffer left partly unread without an error.
    fn read_into(&self, runs: &mut [(u64, &mut [u8])]) -> Result<(), SourceError>;
}

/// Byte ranges of one stored value ([`ChunkSource::get_ranges_sized`]).
#[derive(Debug, Clone)]
pub struct SizedParts {
    /// The bytes of each range asked for, in order.
    pub parts: Vec<Bytes>,
    /// The size of the whole value they were read from.
    pub size: u64,
}

/// A stored value and the version it was read at.
#[derive(Debug, Clone)]
pub struct Versioned {
    /// The value.
    pub bytes: Bytes,
    /// Its version (ETag), when the store reports one.
    pub version: Option<String>,
}

/// What a conditional write expects to find under its key: what the read
/// of its read-modify-write saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Nothing.
    Absent,
    /// The value at this version (ETag).
    Version(String),
}

/// Writes and deletes stored values by key (relative to the array).
#[async_trait]
pub trait ChunkSink: Send + Sync {
    /// Stores `bytes` under `key`, atomically.
    ///
    /// # Errors
    /// A store failure.
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError>;
    /// Stores `bytes` under `key` only when the key still holds what
    /// `expected` says (unconditionally when `None`). The default ignores
    /// the condition, for sinks that only one writer uses.
    ///
    /// # Errors
    /// [`SourceError::Precondition`] when the key changed; a store failure.
    async fn put_if(&self, key: &str, bytes: Bytes, expected: Option<&Expected>) -> Result<(), SourceError> {
        let _ = expected;
        self.put(key, bytes).await
    }
    /// Waits before the `attempt`-th retry of a read-modify-write whose
    /// conditional write failed (the default retries at once).
    async fn conflict_pause(&self, attempt: u32) {
        let _ = attempt;
    }
    /// Deletes `key`; deleting a missing key succeeds.
    ///
    /// # Errors
    /// A store failure.
    async fn delete(&self, key: &str) -> Result<(), SourceError>;
}

/// Why a region read or write failed. Every variant about stored data names
/// the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// The region is not inside the array, or its rank is wrong.
    #[error("region: {0}")]
    Region(#[from] SubsetError),
    /// The data to write does not match the region.
    #[error("data: {0}")]
    Data(String),
    /// The store failed for `key`.
    #[error("{key}: {source}")]
    Source {
        /// The key.
        key: String,
        /// What the store said.
        source: SourceError,
    },
    /// Stored bytes under `key` do not decode.
    #[error("{key}: {source}")]
    Codec {
        /// The key.
        key: String,
        /// The codec and reason.
        source: CodecError,
    },
    /// Updated data under `key` did not encode (a fault of zarrd, not of
    /// the stored bytes).
    #[error("{key}: encoding failed: {source}")]
    Encode {
        /// The key.
        key: String,
        /// The codec and reason.
        source: CodecError,
    },
    /// A read that does not fill missing units met one (the first in grid
    /// order); `key` is the chunk's or shard's.
    #[error("{}", .unit.describe(.key))]
    Missing {
        /// The key.
        key: String,
        /// What is missing.
        unit: MissingUnit,
    },
    /// Work failed inside zarrd (a CPU job was dropped).
    #[error("internal error: {0}")]
    Internal(String),
    /// Stored bytes under `key` are inconsistent (a shard shorter than its
    /// index claims, a shard that vanished between two reads).
    #[error("{key}: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// Tuning for region reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionOptions {
    /// Inner chunk byte ranges at most this many bytes apart are read in one
    /// request (reading a few unneeded bytes beats another round trip).
    pub coalesce_gap: u64,
    /// Uncompressed chunks of at least this many bytes are read by the byte
    /// ranges a slice needs ([`partial`]); smaller ones whole.
    pub partial_min_chunk: u64,
    /// How many chunks are fetched at once.
    pub concurrency: usize,
    /// How many times a read-modify-write of one chunk is tried when its
    /// conditional write finds the chunk changed.
    pub max_attempts: u32,
    /// Store chunks (and inner chunks) equal to the fill value instead of
    /// deleting (omitting) them.
    pub store_empty_chunks: bool,
    /// Decoded bytes per slab of the collecting reads ([`read_selection`]).
    pub slab_bytes: u64,
}

impl Default for RegionOptions {
    fn default() -> Self {
        Self {
            coalesce_gap: 4096,
            partial_min_chunk: partial::MIN_PARTIAL_CHUNK,
            concurrency: 16,
            max_attempts: 16,
            store_empty_chunks: false,
            slab_bytes: 16 << 20,
        }
    }
}

fn codec_err(key: &str) -> impl FnOnce(CodecError) -> RegionError + '_ {
    move |source| RegionError::Codec { key: key.to_owned(), source }
}

fn encode_err(key: &str) -> impl FnOnce(CodecError) -> RegionError + '_ {
    move |source| RegionError::Encode { key: key.to_owned(), source }
}

fn source_err(key: &str) -> impl FnOnce(SourceError) -> RegionError + '_ {
    move |source| RegionError::Source { key: key.to_owned(), source }
}

/// Writes `data` (C order, the shape of `region`) into the array. Uses
/// [`RegionOptions::default`].
///
/// # Errors
/// See [`write_region_with`].
pub async fn write_region(
    desc: &ArrayDescription,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    region: &ArraySubset,
    data: &ChunkData,
) -> Result<(), RegionError> {
    write_region_with(desc, source, sink, region, data, &RegionOptions::default()).await
}

/// Checks that `data` holds `n` elements of the array's type.
fn check_data(
    desc: &ArrayDescription,
    data: &ChunkData,
    n: u64,
    what: &dyn std::fmt::Display,
) -> Result<(), RegionError> {
    let n = usize::try_from(n).map_err(|_| RegionError::Data("region too large".into()))?;
    let ok = match (data, desc.data_type.size()) {
        (ChunkData::Fixed(b), Some(size)) => n.checked_mul(size) == Some(b.len()),
        (ChunkData::Variable(items), None) => items.len() == n,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(RegionError::Data(format!("expected {n} elements of {:?} for {what}", desc.data_type)))
    }
}

/// Writes `data` into `region` with explicit options. Chunks are written
/// independently: on an error, chunks already written stay written.
///
/// # Errors
/// A region outside the array; data of the wrong size or kind; a store
/// failure, undecodable existing chunk or encode failure (naming the key).
pub async fn write_region_with(
    desc: &ArrayDescription,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    region: &ArraySubset,
    data: &ChunkData,
    options: &RegionOptions,
) -> Result<(), RegionError> {
    check_data(desc, data, region.num_elements(), &format_args!("region {region}"))?;
    if !region.is_within(&desc.shape) {
        return Err(SubsetError(format!("region {region} is outside the array of shape {:?}", desc.shape)).into());
    }
    let plan = WritePlan::build(
        desc,
        Placement::Box { region: region.clone(), data: DataRef::Borrowed(data), scalar: false },
    )?;
    write_plan(desc, source, sink, &plan, options).await
}

/// A write, planned: where its elements go and which chunks (or shards) it
/// touches. The service locks [`WritePlan::chunk_keys`] before running it
/// with [`write_plan`] or [`write_plan_on`].
///
/// A plan's memory is in the selection's length (its per-dimension index
/// lists, or its points), never in the number of chunks it touches: the
/// touched chunks are enumerated on demand.
#[derive(Debug)]
pub struct WritePlan<'a> {
    placement: Placement<'a>,
    /// Every touched chunk (grid coordinates).
    chunks: TouchedChunks,
}

impl<'a> WritePlan<'a> {
    /// Plans writing `data` to `selection` (resolved against this array):
    /// `data` has the selection's result shape in C order, or is one
    /// element broadcast to every selected position when `scalar`.
    ///
    /// # Errors
    /// Data of the wrong number or kind of elements.
    pub fn for_selection(
        desc: &ArrayDescription,
        selection: &Selection,
        data: &'a ChunkData,
        scalar: bool,
    ) -> Result<Self, RegionError> {
        Self::of_selection(desc, selection, DataRef::Borrowed(data), scalar)
    }

    fn of_selection(
        desc: &ArrayDescription,
        selection: &Selection,
        data: DataRef<'a>,
        scalar: bool,
    ) -> Result<Self, RegionError> {
        let n = if scalar { 1 } else { selection.num_elements() };
        let shape = selection.result_shape();
        check_data(desc, &data, n, &format_args!("a selection of shape {shape:?}"))?;
        if selection.dims.len() != desc.shape.len() {
            return Err(RegionError::Data(format!(
                "the selection has {} dimensions but the array has {}",
                selection.dims.len(),
                desc.shape.len()
            )));
        }
        Self::build(desc, Placement::of_selection(selection, data, scalar, &desc.chunk_shape))
    }

    fn build(desc: &ArrayDescription, placement: Placement<'a>) -> Result<Self, RegionError> {
        if let Some(bbox) = placement.bounding_box() {
            if !bbox.is_within(&desc.shape) {
                return Err(SubsetError(format!("{bbox} is outside the array of shape {:?}", desc.shape)).into());
            }
        }
        let chunks = placement.touched_chunks(&desc.chunk_shape);
        Ok(Self { placement, chunks })
    }

    /// How many chunks (shards, for a sharded array) the write touches.
    #[must_use]
    pub fn chunk_count(&self) -> u64 {
        self.chunks.len()
    }

    /// How many chunks the write touches, counting inner chunks for a
    /// sharded array (the unit of decode and encode work).
    #[must_use]
    pub fn work_units(&self, desc: &ArrayDescription) -> u64 {
        match &desc.sharding {
            Some(sharding) => self.placement.touched_chunks(sharding.inner_chunk_shape()).len(),
            None => self.chunks.len(),
        }
    }

    /// The keys (relative to the array) of the chunks or shards the write
    /// touches, in grid order, enumerated on demand (see
    /// [`WritePlan::chunk_count`] before collecting them).
    pub fn chunk_keys<'s>(&'s self, desc: &'s ArrayDescription) -> impl Iterator<Item = String> + 's {
        self.chunks.iter().map(|c| desc.chunk_key(&c))
    }
}

impl WritePlan<'static> {
    /// As [`WritePlan::for_selection`], for data the plan shares, so the
    /// plan can be run with [`write_plan_on`] (CPU work on another thread).
    ///
    /// # Errors
    /// As [`WritePlan::for_selection`].
    pub fn for_selection_shared(
        desc: &ArrayDescription,
        selection: &Selection,
        data: Arc<ChunkData>,
        scalar: bool,
    ) -> Result<Self, RegionError> {
        Self::of_selection(desc, selection, DataRef::Shared(data), scalar)
    }
}

/// Writes `data` to `selection` (see [`WritePlan::for_selection`]).
///
/// # Errors
/// As [`write_plan`], and data that does not match the selection.
pub async fn write_selection(
    desc: &ArrayDescription,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    selection: &Selection,
    data: &ChunkData,
    scalar: bool,
    options: &RegionOptions,
) -> Result<(), RegionError> {
    let plan = WritePlan::for_selection(desc, selection, data, scalar)?;
    write_plan(desc, source, sink, &plan, options).await
}

/// Runs CPU work (decoding, placing and encoding one chunk) somewhere other
/// than the calling task: the service hands it to its CPU pool. A job that
/// panics must be dropped (its result channel closes).
pub trait Offload: Send + Sync {
    /// Runs `job` soon, on some other thread (or right here, see [`Inline`]).
    fn spawn(&self, job: Box<dyn FnOnce() + Send>);

    /// Runs `job`, which waits on a file read and may wait on a slab's lock
    /// (a direct read, [`direct`]), on a thread that may block without
    /// holding up CPU work: the service's blocking pool. The default: as
    /// [`Offload::spawn`].
    fn spawn_io(&self, job: Box<dyn FnOnce() + Send>) {
        self.spawn(job);
    }

    /// A point where a read that finds many units ready at once (cached,
    /// missing) lets other tasks run: the service's runtime budget. `None`
    /// (the default): go on.
    fn yield_point(&self) -> Option<BoxFuture<'static, ()>> {
        None
    }
}

/// CPU work run right where it is asked for, on the calling task: for
/// tests, tools and the collecting reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inline;

impl Offload for Inline {
    fn spawn(&self, job: Box<dyn FnOnce() + Send>) {
        job();
    }
}

/// Where a write's CPU work runs.
enum Ctx<'c, 'a> {
    /// Inline, on the calling task.
    Inline { desc: &'c ArrayDescription, plan: &'c WritePlan<'a> },
    /// On another thread, through `offload`.
    Pool { desc: &'c Arc<ArrayDescription>, plan: &'c Arc<WritePlan<'static>>, offload: &'c dyn Offload },
}

impl Ctx<'_, '_> {
    fn desc(&self) -> &ArrayDescription {
        match self {
            Self::Inline { desc, .. } => desc,
            Self::Pool { desc, .. } => desc,
        }
    }

    fn plan(&self) -> &WritePlan<'_> {
        match self {
            Self::Inline { plan, .. } => plan,
            Self::Pool { plan, .. } => plan,
        }
    }

    /// Runs `f` on the plan's description and placement with `input`.
    async fn cpu<T, R>(&self, input: T, f: fn(&ArrayDescription, &Placement<'_>, T) -> R) -> Result<R, RegionError>
    where
        T: Send + 'static,
        R: Send + 'static,
    {
        match self {
            Self::Inline { desc, plan } => Ok(f(desc, &plan.placement, input)),
            Self::Pool { desc, plan, offload } => {
                let (desc, plan) = (Arc::clone(desc), Arc::clone(plan));
                let (tx, rx) = futures::channel::oneshot::channel();
                offload.spawn(Box::new(move || {
                    // A write cancelled while this waited for a thread
                    // leaves the chunk undone (nothing was stored yet).
                    if tx.is_canceled() {
                        return;
                    }
                    let _ = tx.send(f(&desc, &plan.placement, input));
                }));
                rx.await.map_err(|_| RegionError::Internal("the CPU work of a chunk write failed".into()))
            }
        }
    }
}

/// Runs a planned write: every touched chunk is written independently (at
/// most [`RegionOptions::concurrency`] at a time); on an error, chunks
/// already written stay written. Decoding and encoding run inline.
///
/// # Errors
/// A store failure, undecodable existing chunk or encode failure (naming
/// the key); a chunk that kept changing underneath through
/// [`RegionOptions::max_attempts`] conditional writes
/// ([`SourceError::Precondition`]).
pub async fn write_plan(
    desc: &ArrayDescription,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    plan: &WritePlan<'_>,
    options: &RegionOptions,
) -> Result<(), RegionError> {
    run_plan(&Ctx::Inline { desc, plan }, source, sink, options).await
}

/// As [`write_plan`], with every chunk's decoding, placing and encoding run
/// through `offload`: the calling task only fetches and stores. Memory is
/// bounded by the chunks in flight ([`RegionOptions::concurrency`]), each
/// holding its stored bytes, its decoded chunk and its encoding.
///
/// # Errors
/// As [`write_plan`]; [`RegionError::Internal`] when a job was dropped.
pub async fn write_plan_on(
    desc: &Arc<ArrayDescription>,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    plan: &Arc<WritePlan<'static>>,
    options: &RegionOptions,
    offload: &dyn Offload,
) -> Result<(), RegionError> {
    run_plan(&Ctx::Pool { desc, plan, offload }, source, sink, options).await
}

async fn run_plan(
    ctx: &Ctx<'_, '_>,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    options: &RegionOptions,
) -> Result<(), RegionError> {
    let desc = ctx.desc();
    let grid = desc.grid();
    let grid = &grid;
    let touched = ctx.plan().chunks.iter().filter_map(|chunk| {
        let area = grid.chunk_subset(&chunk)?;
        Some(write_chunk(ctx, source, sink, chunk, area, options))
    });
    let mut writes = stream::iter(touched).buffer_unordered(options.concurrency.max(1));
    while let Some(result) = writes.next().await {
        result?;
    }
    Ok(())
}

/// What a read-modify-write saw, for its conditional write.
fn expected_of(read: Option<&Versioned>) -> Option<Expected> {
    match read {
        None => Some(Expected::Absent),
        Some(v) => v.version.clone().map(Expected::Version),
    }
}

/// Stores `encoded` under `key` (conditionally when `expected` is given),
/// or deletes the key when there is nothing to store.
async fn store(
    sink: &dyn ChunkSink,
    key: &str,
    encoded: Option<Vec<u8>>,
    expected: Option<&Expected>,
) -> Result<(), SourceError> {
    match encoded {
        Some(bytes) => sink.put_if(key, Bytes::from(bytes), expected).await,
        None => sink.delete(key).await,
    }
}

/// Runs one read-modify-write attempt after another while the conditional
/// write fails, at most `options.max_attempts` times.
async fn with_retries<F, Fut>(
    sink: &dyn ChunkSink,
    key: &str,
    options: &RegionOptions,
    mut attempt: F,
) -> Result<(), RegionError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), RegionError>>,
{
    let max = options.max_attempts.max(1);
    let mut n = 0u32;
    loop {
        match attempt().await {
            Err(RegionError::Source { source: SourceError::Precondition(reason), .. }) => {
                n += 1;
                if n >= max {
                    return Err(RegionError::Source {
                        key: key.to_owned(),
                        source: SourceError::Precondition(format!(
                            "the chunk changed underneath {n} read-modify-writes in a row (last: {reason})"
                        )),
                    });
                }
                sink.conflict_pause(n).await;
            }
            other => return other,
        }
    }
}

/// Encodes a whole (outer) chunk; `None` when it is all fill and empty
/// chunks are not stored.
fn encode_outer(
    desc: &ArrayDescription,
    chunk: ChunkData,
    key: &str,
    store_empty_chunks: bool,
) -> Result<Option<Vec<u8>>, RegionError> {
    let repr = desc.chunk_repr();
    if chunk.is_fill(&repr) && !store_empty_chunks {
        return Ok(None);
    }
    if let Some(sharding) = &desc.sharding {
        sharding.encode_shard(chunk, &repr).map_err(encode_err(key))
    } else {
        desc.encode_chunk(chunk).map(Some).map_err(encode_err(key))
    }
}

/// The CPU part of writing one whole (outer) chunk or shard: the stored
/// bytes when read-modify-writing (`None`: start from the fill value),
/// decoded, updated and encoded.
struct ChunkJob {
    key: String,
    origin: Vec<u64>,
    current: Option<Bytes>,
    store_empty_chunks: bool,
}

fn rewrite_chunk(
    desc: &ArrayDescription,
    placement: &Placement<'_>,
    job: ChunkJob,
) -> Result<Option<Vec<u8>>, RegionError> {
    let elem = desc.data_type.size().unwrap_or(1);
    let mut data = match job.current {
        Some(bytes) => desc.decode_chunk(Vec::from(bytes)).map_err(codec_err(&job.key))?,
        None => ChunkData::filled(&desc.chunk_repr()),
    };
    placement.place(&job.origin, &desc.chunk_shape, &mut data, elem)?;
    encode_outer(desc, data, &job.key, job.store_empty_chunks)
}

async fn write_chunk(
    ctx: &Ctx<'_, '_>,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    chunk: Vec<u64>,
    area: ArraySubset,
    options: &RegionOptions,
) -> Result<(), RegionError> {
    let desc = ctx.desc();
    let key = desc.chunk_key(&chunk);
    let origin: Vec<u64> = chunk.iter().zip(&desc.chunk_shape).map(|(c, s)| c * s).collect();
    let store_empty_chunks = options.store_empty_chunks;
    let max_stored = desc.max_stored_chunk_bytes();
    if desc.sharding.is_none() && ctx.plan().placement.covers(&area) {
        // Whole chunk: built from the data alone, nothing read. (A shard is
        // always written per inner chunk, never built whole in memory.)
        let job = ChunkJob { key: key.clone(), origin, current: None, store_empty_chunks };
        let encoded = ctx.cpu(job, rewrite_chunk).await??;
        return store(sink, &key, encoded, None).await.map_err(source_err(&key));
    }
    if desc.sharding.is_some() {
        return with_retries(sink, &key, options, || async {
            let existing = source.get_versioned_within(&key, max_stored).await.map_err(source_err(&key))?;
            let expected = expected_of(existing.as_ref());
            let job = ChunkJob {
                key: key.clone(),
                origin: origin.clone(),
                current: existing.map(|v| v.bytes),
                store_empty_chunks,
            };
            let merged = ctx.cpu(job, rewrite_inner_chunks).await??;
            store(sink, &key, merged, expected.as_ref()).await.map_err(source_err(&key))
        })
        .await;
    }
    with_retries(sink, &key, options, || async {
        let current = source.get_versioned_within(&key, max_stored).await.map_err(source_err(&key))?;
        let expected = expected_of(current.as_ref());
        let job = ChunkJob {
            key: key.clone(),
            origin: origin.clone(),
            current: current.map(|v| v.bytes),
            store_empty_chunks,
        };
        let encoded = ctx.cpu(job, rewrite_chunk).await??;
        store(sink, &key, encoded, expected.as_ref()).await.map_err(source_err(&key))
    })
    .await
}

/// The read-modify-write of part of one shard at inner chunk granularity:
/// only the inner chunks the write touches are decoded (when partly
/// covered) and re-encoded; the others are copied as stored. Answers the
/// new shard (`None`: nothing left to store).
fn rewrite_inner_chunks(
    desc: &ArrayDescription,
    placement: &Placement<'_>,
    job: ChunkJob,
) -> Result<Option<Vec<u8>>, RegionError> {
    let Some(sharding) = desc.sharding.as_deref() else {
        return rewrite_chunk(desc, placement, job);
    };
    let (key, origin) = (job.key.as_str(), job.origin.as_slice());
    let existing = job.current;
    let index = match &existing {
        Some(bytes) => Some(sharding.shard_index(bytes).map_err(codec_err(key))?),
        None => None,
    };
    let inner_repr = sharding.inner_chunk_repr();
    let inner_shape = sharding.inner_chunk_shape();
    let inner_grid = RegularChunkGrid::new(desc.chunk_shape.clone(), inner_shape.to_vec())?;
    let elem = desc.data_type.size().unwrap_or(1);
    // The shard's in-array part, shard-relative, bounded by what the write touches.
    let shard = ArraySubset::new(origin.to_vec(), desc.chunk_shape.clone())?;
    let Some(touched) = placement
        .bounding_box()
        .and_then(|b| b.intersect(&shard))
        .and_then(|b| b.intersect(&ArraySubset::from_shape(&desc.shape)))
    else {
        return Ok(existing.map(Vec::from));
    };
    let touched = touched.relative_to(origin);
    let mut replacements = Vec::new();
    for inner in inner_grid.overlaps(&touched)? {
        let inner_origin: Vec<u64> =
            origin.iter().zip(&inner.chunk).zip(inner_shape).map(|((o, c), s)| o + c * s).collect();
        let in_array: Vec<u64> = inner_origin
            .iter()
            .zip(inner_shape)
            .zip(&desc.shape)
            .map(|((o, s), a)| (*s).min(a.saturating_sub(*o)))
            .collect();
        let area = ArraySubset::new(inner_origin.clone(), in_array)?;
        if !placement.touches(&area) {
            continue;
        }
        let stored = match (&existing, &index) {
            (Some(bytes), Some(index)) => index.inner_range(&inner.chunk).map(|r| (bytes, r)),
            _ => None,
        };
        let mut chunk = match stored.filter(|_| !placement.covers(&area)) {
            #[allow(clippy::cast_possible_truncation)] // shard_index checked r against the shard's length
            Some((bytes, r)) => sharding
                .decode_inner_chunk(Vec::from(bytes.slice(r.start as usize..r.end as usize)), &inner.chunk)
                .map_err(codec_err(key))?,
            None => ChunkData::filled(inner_repr),
        };
        placement.place(&inner_origin, inner_shape, &mut chunk, elem)?;
        let encoded = if chunk.is_fill(inner_repr) && !job.store_empty_chunks {
            None
        } else {
            Some(sharding.encode_inner_chunk(chunk, &inner.chunk).map_err(encode_err(key))?)
        };
        replacements.push((inner.chunk, encoded));
    }
    let existing = existing.as_deref().zip(index.as_ref());
    sharding.merge_shard(existing, replacements).map_err(codec_err(key))
}

#[cfg(test)]
mod tests;
