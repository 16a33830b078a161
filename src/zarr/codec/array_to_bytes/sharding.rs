//! The `sharding_indexed` codec: many inner chunks stored under one key,
//! with an index of `(offset, nbytes)` pairs at the start or the end.
//!
//! Spec: Zarr v3 `codecs/sharding-indexed` (binary shard format, empty inner
//! chunks marked `2^64 - 1` / `2^64 - 1`, `index_location`, index size from
//! the index codecs' `compute_encoded_size`).
//!
//! Two ways in:
//!
//! - **Whole shards**, through [`ArrayToBytesCodec`] (and
//!   [`ShardingCodec::encode_shard`]). Encoding skips inner chunks equal to
//!   the fill value and writes the rest in Morton order, as zarr-python
//!   does (so zarrd re-encodes zarr-python's shards byte for byte). A shard
//!   whose every inner chunk is fill has nothing to store:
//!   [`ShardingCodec::encode_shard`] answers `None` (the caller deletes the
//!   key); the trait's `encode`, which must produce bytes, answers an
//!   index-only shard (every entry empty), which decodes to fill.
//! - **Partial reads**, as plain synchronous planning and decoding steps the
//!   async service drives: [`ShardingCodec::index_byte_range`] (a suffix range
//!   when the index is at the end), [`ShardingCodec::decode_index`],
//!   [`ShardIndex::inner_range`], [`coalesce_ranges`] and
//!   [`ShardingCodec::decode_inner_chunk`].
//!
//! The index is never trusted: an entry with only one of its two values
//! `2^64 - 1`, an `offset + nbytes` that overflows, an inner chunk that
//! overlaps the index or runs past the end of the shard is an error naming
//! the inner chunk. When only the index was read (a suffix range, size of
//! the shard unknown), the checks that need the shard size happen when the
//! inner chunk's range comes back shorter than asked for.
//!
//! Nested sharding works because the inner chain is a [`CodecChain`], which
//! may itself end in a `sharding_indexed` codec.

use std::borrow::Cow;
use std::ops::Range;

use crate::zarr::byte_range::ByteRangeRequest;
use crate::zarr::chunk::{ChunkData, ChunkRepr};
use serde::Serialize;

use crate::zarr::codec::build::chain_from_v3;
use crate::zarr::codec::registry::{BuiltCodec, ChainState, CodecConfig, ParseContext};
use crate::zarr::codec::{ArrayToBytesCodec, CodecChain, CodecError, CodecResult};
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::codec::{parse_chain, CodecSpec, Role};
use crate::zarr::metadata::error::{MetadataError, Result};
use crate::zarr::metadata::json::{enum_str, fmt_shape, shape};
use crate::zarr::subset::{copy_region, ArraySubset};

const NAME: &str = "sharding_indexed";

/// Where the shard index lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexLocation {
    /// `"start"`.
    Start,
    /// `"end"` (the default when absent).
    #[default]
    End,
}

/// `sharding_indexed` codec configuration (v3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardingConfig {
    /// Inner chunk shape; divides the shard shape in every dimension.
    pub chunk_shape: Vec<u64>,
    /// Codec chain of each inner chunk.
    pub codecs: Vec<CodecSpec>,
    /// Codec chain of the shard index (fixed-size codecs only).
    pub index_codecs: Vec<CodecSpec>,
    /// Index position.
    pub index_location: IndexLocation,
}

impl ShardingConfig {
    /// Parses a v3 configuration for shards of the shape entering the codec:
    /// the inner chunk shape must divide it; the inner chain is parsed for
    /// inner chunks, the index chain for the `uint64` index array
    /// (`chunks_per_shard + [2]`) and must be of fixed size.
    pub(crate) fn parse(cx: &mut ParseContext<'_, '_>) -> Result<Self> {
        if cx.configuration.is_none() {
            return Err(MetadataError::new(
                cx.configuration_path,
                "required field is missing (sharding_indexed needs chunk_shape, codecs and index_codecs)",
            ));
        }
        let cfg = &mut cx.cfg;
        let shape_path = cfg.at("chunk_shape");
        let inner = shape(cfg.required("chunk_shape")?, &shape_path, 1)?;
        let shard = &cx.state.shape;
        if inner.len() != shard.len() {
            return Err(MetadataError::new(
                shape_path,
                format!(
                    "expected {} dimensions to match the shard shape {}, got {}",
                    shard.len(),
                    fmt_shape(shard),
                    fmt_shape(&inner)
                ),
            ));
        }
        if let Some(d) = (0..inner.len()).find(|&d| {
            let (s, i) = (shard.get(d).copied().unwrap_or(0), inner.get(d).copied().unwrap_or(1));
            i == 0 || s % i != 0
        }) {
            return Err(MetadataError::new(
                shape_path,
                format!(
                    "the shard shape {} is not divisible by the inner chunk shape {} (dimension {d})",
                    fmt_shape(shard),
                    fmt_shape(&inner)
                ),
            ));
        }
        let codecs_path = cfg.at("codecs");
        let codecs = parse_chain(
            cfg.required("codecs")?,
            &codecs_path,
            ChainState { data_type: cx.state.data_type.clone(), shape: inner.clone() },
            Role::Chunk,
        )?;
        let mut index_shape: Vec<u64> = shard.iter().zip(&inner).map(|(s, i)| s.checked_div(*i).unwrap_or(0)).collect();
        index_shape.push(2);
        let index_path = cfg.at("index_codecs");
        let index_codecs = parse_chain(
            cfg.required("index_codecs")?,
            &index_path,
            ChainState { data_type: Some(DataType::UInt64), shape: index_shape },
            Role::Index,
        )?;
        let index_location = match cfg.optional("index_location") {
            Some(v) => match enum_str(v, &cfg.at("index_location"), &["start", "end"])? {
                "start" => IndexLocation::Start,
                _ => IndexLocation::End,
            },
            None => IndexLocation::End,
        };
        cfg.deny_rest("\"chunk_shape\", \"codecs\", \"index_codecs\" and \"index_location\"")?;
        Ok(Self { chunk_shape: inner, codecs, index_codecs, index_location })
    }

    /// Builds the codec for shards of representation `shard`: the inner
    /// chain for inner chunks of `chunk_shape` (same data type and fill
    /// value), the index chain for a `uint64` array of shape
    /// `chunks_per_shard + [2]`.
    ///
    /// # Errors
    /// As [`chain_from_v3`] for either chain; an inner chunk shape that does
    /// not divide the shard; index codecs of variable size.
    pub fn build(&self, shard: &ChunkRepr) -> CodecResult<ShardingCodec> {
        let inner_repr = ChunkRepr { shape: self.chunk_shape.clone(), ..shard.clone() };
        let inner = chain_from_v3(&self.codecs, &inner_repr)?;
        let mut index_shape: Vec<u64> =
            shard.shape.iter().zip(&self.chunk_shape).map(|(s, i)| s.checked_div(*i).unwrap_or(0)).collect();
        index_shape.push(2);
        let index_repr = ChunkRepr { shape: index_shape, data_type: DataType::UInt64, fill_value: vec![0xff; 8] };
        let index = chain_from_v3(&self.index_codecs, &index_repr)?;
        ShardingCodec::new(self.chunk_shape.clone(), inner, index, self.index_location, shard)
    }
}

impl CodecConfig for ShardingConfig {
    fn to_json(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn build(&self, entering: &ChunkRepr) -> CodecResult<BuiltCodec> {
        Ok(BuiltCodec::ArrayToBytes(Box::new(ShardingConfig::build(self, entering)?)))
    }
}

/// The marker of an empty inner chunk (both offset and nbytes).
pub const EMPTY: u64 = u64::MAX;

/// The most inner chunks one shard may hold: bounds the index a hostile
/// metadata document can make the engine allocate (16 bytes each: 256 MiB).
pub const MAX_INNER_CHUNKS: u64 = 1 << 24;

fn err(reason: impl Into<String>) -> CodecError {
    CodecError::new(NAME, reason)
}

/// What one shard shape implies: the grid of inner chunks and the index.
#[derive(Debug, Clone)]
struct Layout {
    shard_shape: Vec<u64>,
    chunks_per_shard: Vec<u64>,
    num_inner: usize,
    inner_repr: ChunkRepr,
    index_repr: ChunkRepr,
    index_size: u64,
}

/// The `sharding_indexed` codec, prepared for one shard representation.
///
/// Pure and `Send + Sync`; share it behind an `Arc`.
#[derive(Debug)]
pub struct ShardingCodec {
    inner_shape: Vec<u64>,
    inner: CodecChain,
    index_codecs: CodecChain,
    index_location: IndexLocation,
    /// The shard representation the codec was built for.
    shard: ChunkRepr,
    layout: Layout,
}

/// A decoded shard index: one `(offset, nbytes)` pair per inner chunk, C
/// order of inner chunk coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    chunks_per_shard: Vec<u64>,
    /// `offset, nbytes` pairs.
    entries: Vec<u64>,
}

impl ShardIndex {
    /// Number of inner chunks along each dimension.
    #[must_use]
    pub fn chunks_per_shard(&self) -> &[u64] {
        &self.chunks_per_shard
    }

    fn linear(&self, coords: &[u64]) -> Option<usize> {
        if coords.len() != self.chunks_per_shard.len() {
            return None;
        }
        let mut lin = 0u64;
        for (c, n) in coords.iter().zip(&self.chunks_per_shard) {
            if c >= n {
                return None;
            }
            lin = lin * n + c;
        }
        usize::try_from(lin).ok()
    }

    /// The byte range of the inner chunk at `inner_coords` inside the shard;
    /// `None` when it is empty (fill value) or the coordinates are outside
    /// the shard.
    #[must_use]
    pub fn inner_range(&self, inner_coords: &[u64]) -> Option<Range<u64>> {
        let i = self.linear(inner_coords)?;
        let (offset, nbytes) = (self.entries[2 * i], self.entries[2 * i + 1]);
        // decode_index checked that non-empty entries do not overflow.
        (offset != EMPTY).then(|| offset..offset + nbytes)
    }

    /// True when every inner chunk is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.chunks_exact(2).all(|e| e[0] == EMPTY)
    }

    /// The stored inner chunks: coordinates and byte ranges, C order.
    pub fn stored(&self) -> impl Iterator<Item = (Vec<u64>, Range<u64>)> + '_ {
        self.entries
            .chunks_exact(2)
            .enumerate()
            .filter(|(_, e)| e[0] != EMPTY)
            .map(|(i, e)| (unravel(i as u64, &self.chunks_per_shard), e[0]..e[0] + e[1]))
    }

    /// Checks every stored inner chunk lies inside `data`, the part of a
    /// shard of `shard_len` bytes that is not the index.
    fn check_within(&self, data: &Range<u64>, shard_len: u64) -> CodecResult<()> {
        for (coords, r) in self.stored() {
            if r.end > shard_len {
                return Err(err(format!(
                    "inner chunk {coords:?}: bytes {}..{} are past the end of the {shard_len}-byte shard",
                    r.start, r.end
                )));
            }
            if r.start < data.start || r.end > data.end {
                return Err(err(format!(
                    "inner chunk {coords:?}: bytes {}..{} overlap the shard index (inner chunks must lie in {}..{})",
                    r.start, r.end, data.start, data.end
                )));
            }
        }
        Ok(())
    }
}

/// One read covering the byte ranges of several inner chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoalescedRange {
    /// The bytes to read.
    pub range: Range<u64>,
    /// Indices (into the input of [`coalesce_ranges`]) of the ranges this
    /// read covers; range `i` is at `input[i].start - range.start` in the
    /// bytes read.
    pub members: Vec<usize>,
}

/// Merges byte ranges into few reads: ranges that overlap, touch, or are
/// separated by at most `max_gap` bytes share one read. The reads come out
/// sorted by offset; empty input ranges are kept as members of the read
/// around them.
#[must_use]
pub fn coalesce_ranges(ranges: &[Range<u64>], max_gap: u64) -> Vec<CoalescedRange> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
    let mut out: Vec<CoalescedRange> = Vec::new();
    for i in order {
        let r = &ranges[i];
        match out.last_mut() {
            Some(last) if r.start <= last.range.end.saturating_add(max_gap) => {
                last.range.end = last.range.end.max(r.end);
                last.members.push(i);
            }
            _ => out.push(CoalescedRange { range: r.clone(), members: vec![i] }),
        }
    }
    out
}

/// Inner chunk coordinates in the Morton (Z) order zarr-python writes them:
/// bit `b` of every dimension in turn (dimension 0 first), dimensions with
/// fewer bits dropping out, coordinates outside `chunks_per_shard` skipped.
#[must_use]
pub fn morton_order(chunks_per_shard: &[u64]) -> Vec<Vec<u64>> {
    let bits: Vec<u32> =
        chunks_per_shard.iter().map(|&n| if n <= 1 { 0 } else { 64 - (n - 1).leading_zeros() }).collect();
    let total_bits: u32 = bits.iter().sum();
    let max_bits = bits.iter().copied().max().unwrap_or(0);
    let count = chunks_per_shard.iter().product::<u64>();
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    // Each dimension at most doubles the code space, so this loop runs
    // fewer than `count * 2^rank` times.
    for z in 0..(1u128 << total_bits) {
        let mut coords = vec![0u64; chunks_per_shard.len()];
        let mut input_bit = 0;
        for b in 0..max_bits {
            for (d, &nbits) in bits.iter().enumerate() {
                if b < nbits {
                    coords[d] |= u64::try_from((z >> input_bit) & 1).unwrap_or(0) << b;
                    input_bit += 1;
                }
            }
        }
        if coords.iter().zip(chunks_per_shard).all(|(c, n)| c < n) {
            out.push(coords);
        }
    }
    out
}

/// Copies the inner chunk `region` (shard-relative) out of a shard's data.
fn extract(data: &ChunkData, shard_shape: &[u64], region: &ArraySubset, elem: usize) -> CodecResult<ChunkData> {
    let n = usize::try_from(region.num_elements()).map_err(|_| err("inner chunk too large"))?;
    let origin = vec![0; region.rank()];
    let e = |e: crate::zarr::subset::SubsetError| err(e.0);
    Ok(match data {
        ChunkData::Fixed(src) => {
            let mut dst = vec![0u8; n * elem];
            copy_region(src, shard_shape, region, &mut dst, region.shape(), &origin, elem).map_err(e)?;
            ChunkData::Fixed(dst)
        }
        ChunkData::Variable(src) => {
            let mut dst = vec![Vec::new(); n];
            copy_region(src, shard_shape, region, &mut dst, region.shape(), &origin, 1).map_err(e)?;
            ChunkData::Variable(dst)
        }
    })
}

/// Copies a decoded inner chunk into its place in a shard's data.
fn insert(
    chunk: ChunkData,
    into: &mut ChunkData,
    shard_shape: &[u64],
    region: &ArraySubset,
    elem: usize,
) -> CodecResult<()> {
    let whole = ArraySubset::from_shape(region.shape());
    let e = |e: crate::zarr::subset::SubsetError| err(e.0);
    match (chunk, into) {
        (ChunkData::Fixed(src), ChunkData::Fixed(dst)) => {
            copy_region(&src, region.shape(), &whole, dst, shard_shape, region.start(), elem).map_err(e)
        }
        (ChunkData::Variable(src), ChunkData::Variable(dst)) => {
            copy_region(&src, region.shape(), &whole, dst, shard_shape, region.start(), 1).map_err(e)
        }
        _ => Err(err("an inner chunk decoded to the wrong kind of elements")),
    }
}

fn unravel(mut lin: u64, shape: &[u64]) -> Vec<u64> {
    let mut out = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        out[d] = lin % shape[d].max(1);
        lin /= shape[d].max(1);
    }
    out
}

impl ShardingCodec {
    /// A sharding codec for shards of representation `shard`, with inner
    /// chunks of `inner_shape` encoded by `inner` and the index encoded by
    /// `index_codecs`.
    ///
    /// # Errors
    /// When `inner_shape` does not divide the shard shape, the shard holds
    /// more than [`MAX_INNER_CHUNKS`] inner chunks, or the index codecs do
    /// not produce a fixed-size encoding.
    pub fn new(
        inner_shape: Vec<u64>,
        inner: CodecChain,
        index_codecs: CodecChain,
        index_location: IndexLocation,
        shard: &ChunkRepr,
    ) -> CodecResult<Self> {
        let layout = Self::compute_layout(&inner_shape, &index_codecs, shard)?;
        Ok(Self { inner_shape, inner, index_codecs, index_location, shard: shard.clone(), layout })
    }

    fn compute_layout(inner_shape: &[u64], index_codecs: &CodecChain, shard: &ChunkRepr) -> CodecResult<Layout> {
        let shard_shape = &shard.shape;
        if inner_shape.len() != shard_shape.len()
            || inner_shape.iter().zip(shard_shape).any(|(i, s)| *i == 0 || s % i != 0)
        {
            return Err(err(format!(
                "the inner chunk shape {inner_shape:?} does not divide the shard shape {shard_shape:?}"
            )));
        }
        let chunks_per_shard: Vec<u64> = shard_shape.iter().zip(inner_shape).map(|(s, i)| s / i).collect();
        let count = chunks_per_shard.iter().try_fold(1u64, |a, &n| a.checked_mul(n)).filter(|&n| n <= MAX_INNER_CHUNKS);
        let Some(count) = count else {
            return Err(err(format!(
                "a shard of {chunks_per_shard:?} inner chunks holds more than {MAX_INNER_CHUNKS} inner chunks"
            )));
        };
        let mut index_shape = chunks_per_shard.clone();
        index_shape.push(2);
        let index_repr =
            ChunkRepr { shape: index_shape, data_type: DataType::UInt64, fill_value: EMPTY.to_le_bytes().to_vec() };
        let index_size = index_codecs
            .encoded_size(&index_repr)
            .ok_or_else(|| err("index_codecs must produce an encoding of fixed size (no compressors)"))?;
        let inner_repr = ChunkRepr { shape: inner_shape.to_vec(), ..shard.clone() };
        Ok(Layout {
            shard_shape: shard_shape.clone(),
            chunks_per_shard,
            num_inner: usize::try_from(count).map_err(|_| err("too many inner chunks"))?,
            inner_repr,
            index_repr,
            index_size,
        })
    }

    /// The layout for `shard`: the prepared one, or one computed for a
    /// representation other than the one the codec was built for.
    fn layout_for(&self, shard: &ChunkRepr) -> CodecResult<Cow<'_, Layout>> {
        if *shard == self.shard {
            Ok(Cow::Borrowed(&self.layout))
        } else {
            Self::compute_layout(&self.inner_shape, &self.index_codecs, shard).map(Cow::Owned)
        }
    }

    /// Where the index is.
    #[must_use]
    pub fn index_location(&self) -> IndexLocation {
        self.index_location
    }

    /// The shape of an inner chunk.
    #[must_use]
    pub fn inner_chunk_shape(&self) -> &[u64] {
        &self.inner_shape
    }

    /// The representation of one decoded inner chunk.
    #[must_use]
    pub fn inner_chunk_repr(&self) -> &ChunkRepr {
        &self.layout.inner_repr
    }

    /// How many chunks each inner chunk is decoded as: 1, or a nested
    /// shard's inner chunks (and theirs).
    #[must_use]
    pub fn units_per_inner_chunk(&self) -> u64 {
        self.inner.units_per_chunk(&self.layout.inner_repr)
    }

    /// The inner chain (which may itself shard).
    #[must_use]
    pub fn inner_codecs(&self) -> &CodecChain {
        &self.inner
    }

    /// Number of inner chunks along each dimension of a shard.
    #[must_use]
    pub fn chunks_per_shard(&self) -> &[u64] {
        &self.layout.chunks_per_shard
    }

    /// The encoded size of the index in bytes.
    #[must_use]
    pub fn index_size(&self) -> u64 {
        self.layout.index_size
    }

    /// The range to read for the index: the first `N` bytes (index at the
    /// start) or the last `N` (index at the end).
    #[must_use]
    pub fn index_byte_range(&self) -> ByteRangeRequest {
        match self.index_location {
            IndexLocation::Start => ByteRangeRequest::Bounded(0..self.layout.index_size),
            IndexLocation::End => ByteRangeRequest::Suffix(self.layout.index_size),
        }
    }

    /// Decodes index bytes (exactly [`ShardingCodec::index_size`] of them).
    ///
    /// # Errors
    /// Wrong length, index codec failure (a crc32c mismatch), and entries
    /// that cannot be right whatever the shard's size: one of offset/nbytes
    /// `2^64 - 1` but not both, `offset + nbytes` overflowing, an `nbytes`
    /// above [`Self::max_inner_stored_size`], an inner chunk overlapping an
    /// index at the start. Errors name the inner chunk.
    pub fn decode_index(&self, bytes: Vec<u8>) -> CodecResult<ShardIndex> {
        self.decode_index_with(&self.layout, bytes)
    }

    fn decode_index_with(&self, layout: &Layout, bytes: Vec<u8>) -> CodecResult<ShardIndex> {
        if bytes.len() as u64 != layout.index_size {
            return Err(err(format!("the shard index is {} bytes, expected {}", bytes.len(), layout.index_size)));
        }
        let decoded =
            self.index_codecs.decode(bytes, &layout.index_repr).map_err(|e| err(format!("shard index: {e}")))?;
        let ChunkData::Fixed(raw) = decoded else {
            return Err(err("shard index: decoded to variable-length data"));
        };
        if raw.len() != layout.num_inner * 16 {
            return Err(err(format!(
                "shard index: decoded to {} bytes, expected {}",
                raw.len(),
                layout.num_inner * 16
            )));
        }
        let entries: Vec<u64> =
            raw.chunks_exact(8).map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect();
        let max_inner = self.inner.max_stored_size(&layout.inner_repr);
        for (i, e) in entries.chunks_exact(2).enumerate() {
            let (offset, nbytes) = (e[0], e[1]);
            let at = || unravel(i as u64, &layout.chunks_per_shard);
            match (offset == EMPTY, nbytes == EMPTY) {
                (true, true) => continue,
                (false, false) => {}
                _ => {
                    return Err(err(format!(
                        "inner chunk {:?}: offset {offset} and nbytes {nbytes}: an empty inner chunk has both 2^64-1",
                        at()
                    )))
                }
            }
            if offset.checked_add(nbytes).is_none() {
                return Err(err(format!("inner chunk {:?}: offset {offset} + nbytes {nbytes} overflows", at())));
            }
            if nbytes > max_inner {
                return Err(err(format!(
                    "inner chunk {:?}: nbytes {nbytes} is more than any encoding of it can take ({max_inner})",
                    at()
                )));
            }
            if self.index_location == IndexLocation::Start && offset < layout.index_size {
                return Err(err(format!(
                    "inner chunk {:?}: offset {offset} overlaps the shard index (its first {} bytes)",
                    at(),
                    layout.index_size
                )));
            }
        }
        Ok(ShardIndex { chunks_per_shard: layout.chunks_per_shard.clone(), entries })
    }

    /// The most bytes an inner chunk's stored value can take
    /// ([`CodecChain::max_stored_size`] of the inner codecs): an index entry
    /// claiming more is damage, refused before its range is read.
    #[must_use]
    pub fn max_inner_stored_size(&self) -> u64 {
        self.inner.max_stored_size(&self.layout.inner_repr)
    }

    /// Decodes one inner chunk from its stored bytes (the range
    /// [`ShardIndex::inner_range`] gave).
    ///
    /// # Errors
    /// When the bytes are not a valid encoding of an inner chunk; the error
    /// names the inner chunk.
    pub fn decode_inner_chunk(&self, bytes: Vec<u8>, inner_coords: &[u64]) -> CodecResult<ChunkData> {
        // The process-wide decode budget (see `codec::budget`).
        let repr = &self.layout.inner_repr;
        let expected = repr.num_elements().saturating_mul(repr.data_type.size().map_or(24, |s| s as u64));
        let _budget = crate::zarr::codec::budget::reserve(expected);
        self.inner.decode(bytes, &self.layout.inner_repr).map_err(|e| err(format!("inner chunk {inner_coords:?}: {e}")))
    }

    /// Encodes one inner chunk with the inner codecs.
    ///
    /// # Errors
    /// When the data does not match the inner chunk representation.
    pub fn encode_inner_chunk(&self, data: ChunkData, inner_coords: &[u64]) -> CodecResult<Vec<u8>> {
        self.inner.encode(data, &self.layout.inner_repr).map_err(|e| err(format!("inner chunk {inner_coords:?}: {e}")))
    }

    /// Reads and checks the index of a whole stored shard: every stored
    /// inner chunk must lie inside the shard and outside the index.
    ///
    /// # Errors
    /// As [`ShardingCodec::decode_index`], plus inner chunks past the end or
    /// overlapping the index; errors name the inner chunk.
    pub fn shard_index(&self, shard: &[u8]) -> CodecResult<ShardIndex> {
        self.shard_index_with(&self.layout, shard)
    }

    fn shard_index_with(&self, layout: &Layout, bytes: &[u8]) -> CodecResult<ShardIndex> {
        let len = bytes.len() as u64;
        if len < layout.index_size {
            return Err(err(format!("the shard is {len} bytes, shorter than its {}-byte index", layout.index_size)));
        }
        let split = usize::try_from(layout.index_size).map_err(|_| err("index too large"))?;
        let (index_bytes, data) = match self.index_location {
            IndexLocation::Start => (bytes[..split].to_vec(), layout.index_size..len),
            IndexLocation::End => (bytes[bytes.len() - split..].to_vec(), 0..len - layout.index_size),
        };
        let index = self.decode_index_with(layout, index_bytes)?;
        index.check_within(&data, len)?;
        Ok(index)
    }

    /// A new shard from an existing one (`existing`: its bytes and checked
    /// index, from [`ShardingCodec::shard_index`]) with some inner chunks
    /// replaced by already encoded bytes (`None`: now fill, omitted). Inner
    /// chunks not replaced are copied as stored, without decoding. `None`
    /// when nothing is left to store.
    ///
    /// # Errors
    /// Replacement coordinates outside the shard; an index codec failure.
    pub fn merge_shard(
        &self,
        existing: Option<(&[u8], &ShardIndex)>,
        replacements: Vec<(Vec<u64>, Option<Vec<u8>>)>,
    ) -> CodecResult<Option<Vec<u8>>> {
        let layout = &self.layout;
        let linear = |coords: &[u64]| -> Option<usize> {
            if coords.len() != layout.chunks_per_shard.len()
                || coords.iter().zip(&layout.chunks_per_shard).any(|(c, n)| c >= n)
            {
                return None;
            }
            usize::try_from(coords.iter().zip(&layout.chunks_per_shard).fold(0u64, |a, (c, n)| a * n + c)).ok()
        };
        let mut replaced: Vec<Option<Option<Vec<u8>>>> = vec![None; layout.num_inner];
        for (coords, bytes) in replacements {
            let i = linear(&coords).ok_or_else(|| err(format!("inner chunk {coords:?} is outside the shard")))?;
            replaced[i] = Some(bytes);
        }
        let mut entries = vec![EMPTY; layout.num_inner * 2];
        let mut body = Vec::new();
        for coords in morton_order(&layout.chunks_per_shard) {
            let Some(i) = linear(&coords) else { continue };
            let stored = match &replaced[i] {
                Some(Some(bytes)) => bytes.as_slice(),
                Some(None) => continue,
                None => match existing.and_then(|(shard, index)| Some((shard, index.inner_range(&coords)?))) {
                    // shard_index checked the range against the shard's length.
                    Some((shard, r)) => &shard[r.start as usize..r.end as usize],
                    None => continue,
                },
            };
            entries[2 * i] = body.len() as u64;
            entries[2 * i + 1] = stored.len() as u64;
            body.extend_from_slice(stored);
        }
        if entries.iter().all(|&e| e == EMPTY) {
            return Ok(None);
        }
        self.assemble(layout, entries, body).map(Some)
    }

    /// Encodes a whole shard; `None` when every inner chunk equals the fill
    /// value (nothing to store: delete the key).
    ///
    /// # Errors
    /// When the data does not match `decoded`, or an inner or index codec fails.
    pub fn encode_shard(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<Option<Vec<u8>>> {
        let layout = self.layout_for(decoded)?;
        let elem = check_data(&data, decoded)?;
        let mut entries = vec![EMPTY; layout.num_inner * 2];
        let mut body = Vec::new();
        let mut any = false;
        for coords in morton_order(&layout.chunks_per_shard) {
            let start: Vec<u64> = coords.iter().zip(&self.inner_shape).map(|(c, i)| c * i).collect();
            let region = ArraySubset::new(start, self.inner_shape.clone()).map_err(|e| err(e.0))?;
            let chunk = extract(&data, &layout.shard_shape, &region, elem)?;
            if chunk.is_fill(&layout.inner_repr) {
                continue;
            }
            let encoded = self
                .inner
                .encode(chunk, &layout.inner_repr)
                .map_err(|e| err(format!("inner chunk {coords:?}: {e}")))?;
            let lin = usize::try_from(coords.iter().zip(&layout.chunks_per_shard).fold(0u64, |a, (c, n)| a * n + c))
                .unwrap_or(0);
            entries[2 * lin] = body.len() as u64;
            entries[2 * lin + 1] = encoded.len() as u64;
            body.extend_from_slice(&encoded);
            any = true;
        }
        if !any {
            return Ok(None);
        }
        Ok(Some(self.assemble(&layout, entries, body)?))
    }

    /// Index + inner chunk bytes, with offsets relative to `body`.
    fn assemble(&self, layout: &Layout, mut entries: Vec<u64>, body: Vec<u8>) -> CodecResult<Vec<u8>> {
        if self.index_location == IndexLocation::Start {
            for e in entries.chunks_exact_mut(2).filter(|e| e[0] != EMPTY) {
                e[0] += layout.index_size;
            }
        }
        let raw: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
        let index = self
            .index_codecs
            .encode(ChunkData::Fixed(raw), &layout.index_repr)
            .map_err(|e| err(format!("shard index: {e}")))?;
        if index.len() as u64 != layout.index_size {
            return Err(err(format!("the index encoded to {} bytes, expected {}", index.len(), layout.index_size)));
        }
        Ok(match self.index_location {
            IndexLocation::Start => [index, body].concat(),
            IndexLocation::End => {
                let mut body = body;
                body.extend_from_slice(&index);
                body
            }
        })
    }
}

/// Checks `data` has `repr`'s element count and kind; returns the element
/// size (1 for variable-length data, which is copied as one item per element).
fn check_data(data: &ChunkData, repr: &ChunkRepr) -> CodecResult<usize> {
    let n = usize::try_from(repr.num_elements()).map_err(|_| err("shard too large"))?;
    match (data, repr.data_type.size()) {
        (ChunkData::Fixed(b), Some(size)) if Some(b.len()) == n.checked_mul(size) => Ok(size),
        (ChunkData::Variable(items), None) if items.len() == n => Ok(1),
        _ => Err(err(format!(
            "the data does not match a shard of shape {:?} and data type {:?}",
            repr.shape, repr.data_type
        ))),
    }
}

impl ArrayToBytesCodec for ShardingCodec {
    fn name(&self) -> &str {
        NAME
    }

    /// Shards omit empty inner chunks, so their size depends on the values.
    fn encoded_size(&self, _decoded: &ChunkRepr) -> Option<u64> {
        None
    }

    /// Its inner chunks, each as many as its own chain decodes it as.
    fn units_per_chunk(&self, decoded: &ChunkRepr) -> u64 {
        let Ok(layout) = self.layout_for(decoded) else { return 1 };
        (layout.num_inner as u64).saturating_mul(self.inner.units_per_chunk(&layout.inner_repr))
    }

    /// The index and every inner chunk at its most, twice over: room for
    /// the unused bytes a writer that appends changed inner chunks leaves
    /// behind (the format allows gaps), while a shard file of gigabytes
    /// behind a small shard is still refused before it is read.
    fn max_encoded_size(&self, decoded: &ChunkRepr) -> Option<u64> {
        let layout = self.layout_for(decoded).ok()?;
        let inner = self.inner.max_stored_size(&layout.inner_repr);
        Some(inner.saturating_mul(layout.num_inner as u64).saturating_mul(2).saturating_add(layout.index_size))
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<Vec<u8>> {
        if let Some(bytes) = self.encode_shard(data, decoded)? {
            return Ok(bytes);
        }
        let layout = self.layout_for(decoded)?;
        self.assemble(&layout, vec![EMPTY; layout.num_inner * 2], Vec::new())
    }

    fn decode(&self, bytes: Vec<u8>, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        let layout = self.layout_for(decoded)?;
        let index = self.shard_index_with(&layout, &bytes)?;
        let elem = decoded.data_type.size().unwrap_or(1);
        let mut out = ChunkData::filled(decoded);
        for (coords, r) in index.stored() {
            // check_within bounded the range by the shard's length.
            let slice = bytes[r.start as usize..r.end as usize].to_vec();
            let chunk = self
                .inner
                .decode(slice, &layout.inner_repr)
                .map_err(|e| err(format!("inner chunk {coords:?}: {e}")))?;
            let start: Vec<u64> = coords.iter().zip(&self.inner_shape).map(|(c, i)| c * i).collect();
            let region = ArraySubset::new(start, self.inner_shape.clone()).map_err(|e| err(e.0))?;
            insert(chunk, &mut out, &layout.shard_shape, &region, elem)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
