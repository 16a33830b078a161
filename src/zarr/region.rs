//! Region reads and writes on a whole array, over an async key-value
//! reader ([`ChunkSource`]) and writer ([`ChunkSink`]) that the service
//! implements on its storage.
//!
//! Spec: Zarr v3 core §"Chunk grids" (which chunks a region touches; edge
//! chunks stored at full size), §"Fill value" (a missing chunk reads as the
//! fill value), and `codecs/sharding-indexed` §"Implementation notes"
//! (reading the index by a prefix or suffix range, then only the inner
//! chunks needed).
//!
//! What a read does, per chunk the region overlaps:
//!
//! - not sharded, or the region covers the whole (in-array part of the)
//!   shard: one request for the whole key;
//! - sharded and only partly covered: one range request for the index, then
//!   one request per group of needed inner chunks (ranges coalesced by
//!   [`coalesce_ranges`] with [`RegionOptions::coalesce_gap`]);
//! - a missing key or empty inner chunk: the fill value, no decode.
//!
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
//! [`RegionOptions::concurrency`] at a time) on the calling task; decoding
//! and encoding run inline, so the service drives these functions from a
//! context where CPU work is allowed. The engine does not lock: a writer
//! must hold the service's per-chunk (or per-array) write lock around
//! [`write_region`] so two read-modify-writes of one chunk do not interleave.
//! The engine does not depend on tokio.

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};

use super::array::ArrayDescription;
use super::byte_range::ByteRangeRequest;
use super::chunk::{ChunkData, ChunkRepr};
use super::codec::array_to_bytes::sharding::{coalesce_ranges, ShardingCodec};
use super::codec::CodecError;
use super::subset::{copy_region, ArraySubset, ChunkOverlap, RegularChunkGrid, SubsetError};

/// Why a [`ChunkSource`] or [`ChunkSink`] failed, classified by meaning so
/// the service can map it to a status without reading messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The caller may not read or write this key.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A conditional request failed (the value changed underneath).
    #[error("precondition failed: {0}")]
    Precondition(String),
    /// The range asked for does not exist in the value.
    #[error("range not satisfiable: {0}")]
    RangeNotSatisfiable(String),
    /// The store failed.
    #[error("{0}")]
    Store(String),
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
}

/// Writes and deletes stored values by key (relative to the array).
#[async_trait]
pub trait ChunkSink: Send + Sync {
    /// Stores `bytes` under `key`, atomically.
    ///
    /// # Errors
    /// A store failure.
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError>;
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
    /// Stored bytes under `key` do not decode (or data does not encode).
    #[error("{key}: {source}")]
    Codec {
        /// The key.
        key: String,
        /// The codec and reason.
        source: CodecError,
    },
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
    /// How many chunks are fetched at once.
    pub concurrency: usize,
}

impl Default for RegionOptions {
    fn default() -> Self {
        Self { coalesce_gap: 4096, concurrency: 16 }
    }
}

/// Decoded data and where its part goes in the output.
struct Piece {
    data: ChunkData,
    shape: Vec<u64>,
    part: ArraySubset,
    dst_start: Vec<u64>,
}

fn codec_err(key: &str) -> impl FnOnce(CodecError) -> RegionError + '_ {
    move |source| RegionError::Codec { key: key.to_owned(), source }
}

fn source_err(key: &str) -> impl FnOnce(SourceError) -> RegionError + '_ {
    move |source| RegionError::Source { key: key.to_owned(), source }
}

/// The representation of a buffer of `shape` with the array's elements.
fn repr_of(desc: &ArrayDescription, shape: &[u64]) -> ChunkRepr {
    ChunkRepr { shape: shape.to_vec(), data_type: desc.data_type.clone(), fill_value: desc.fill_value.clone() }
}

/// Copies `part` of `src` (shape `src_shape`) into `dst` (shape `dst_shape`) at `dst_start`.
fn copy_data(
    src: &ChunkData,
    src_shape: &[u64],
    part: &ArraySubset,
    dst: &mut ChunkData,
    dst_shape: &[u64],
    dst_start: &[u64],
    elem: usize,
) -> Result<(), SubsetError> {
    match (src, dst) {
        (ChunkData::Fixed(s), ChunkData::Fixed(d)) => copy_region(s, src_shape, part, d, dst_shape, dst_start, elem),
        (ChunkData::Variable(s), ChunkData::Variable(d)) => copy_region(s, src_shape, part, d, dst_shape, dst_start, 1),
        _ => Err(SubsetError("fixed-size and variable-length data mixed".into())),
    }
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

/// Reads `region` of the array with explicit options.
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
    let grid = desc.grid();
    let overlaps: Vec<ChunkOverlap> = grid.overlaps(region)?.collect();
    let elem = desc.data_type.size().unwrap_or(1);
    let mut out = ChunkData::filled(&repr_of(desc, region.shape()));
    let grid = &grid;
    let mut pieces = stream::iter(overlaps)
        .map(|o| read_overlap(desc, grid, source, o, options))
        .buffer_unordered(options.concurrency.max(1));
    while let Some(result) = pieces.next().await {
        for p in result? {
            copy_data(&p.data, &p.shape, &p.part, &mut out, region.shape(), &p.dst_start, elem)?;
        }
    }
    Ok(out)
}

/// True when `o` covers all of its chunk that lies inside the array.
fn covers_chunk(grid: &RegularChunkGrid, o: &ChunkOverlap) -> bool {
    grid.chunk_subset(&o.chunk).is_some_and(|c| c.shape() == o.in_chunk.shape())
}

async fn read_overlap(
    desc: &ArrayDescription,
    grid: &RegularChunkGrid,
    source: &dyn ChunkSource,
    o: ChunkOverlap,
    options: &RegionOptions,
) -> Result<Vec<Piece>, RegionError> {
    let key = desc.chunk_key(&o.chunk);
    if let Some(sharding) = desc.sharding.as_deref().filter(|_| !covers_chunk(grid, &o)) {
        return read_inner_chunks(desc, sharding, source, &key, &o, options).await;
    }
    let Some(bytes) = source.get(&key, None).await.map_err(source_err(&key))? else {
        return Ok(Vec::new());
    };
    let data = desc.decode_chunk(Vec::from(bytes)).map_err(codec_err(&key))?;
    Ok(vec![Piece { data, shape: desc.chunk_shape.clone(), part: o.in_chunk, dst_start: o.in_region.start().to_vec() }])
}

/// The partial read of one shard: its index, then the inner chunks `o` needs.
async fn read_inner_chunks(
    desc: &ArrayDescription,
    sharding: &ShardingCodec,
    source: &dyn ChunkSource,
    key: &str,
    o: &ChunkOverlap,
    options: &RegionOptions,
) -> Result<Vec<Piece>, RegionError> {
    let Some(index_bytes) = source.get(key, Some(sharding.index_byte_range())).await.map_err(source_err(key))? else {
        return Ok(Vec::new());
    };
    if index_bytes.len() as u64 != sharding.index_size() {
        return Err(RegionError::Corrupt {
            key: key.to_owned(),
            reason: format!(
                "the shard is {} bytes, shorter than its {}-byte index",
                index_bytes.len(),
                sharding.index_size()
            ),
        });
    }
    let index = sharding.decode_index(Vec::from(index_bytes)).map_err(codec_err(key))?;
    let inner_grid = RegularChunkGrid::new(desc.chunk_shape.clone(), sharding.inner_chunk_shape().to_vec())?;
    let mut needed: Vec<(ChunkOverlap, Range<u64>)> = Vec::new();
    for inner in inner_grid.overlaps(&o.in_chunk)? {
        if let Some(r) = index.inner_range(&inner.chunk) {
            needed.push((inner, r));
        }
    }
    let ranges: Vec<Range<u64>> = needed.iter().map(|(_, r)| r.clone()).collect();
    let reads = coalesce_ranges(&ranges, options.coalesce_gap);
    let needed = &needed;
    let fetched: Vec<(Range<u64>, Bytes)> = stream::iter(reads.iter().map(|read| async move {
        let range = read.range.clone();
        let bytes = source
            .get(key, Some(ByteRangeRequest::Bounded(range.clone())))
            .await
            .map_err(|e| match e {
                // The index pointed past the end of the shard.
                SourceError::RangeNotSatisfiable(_) => RegionError::Corrupt {
                    key: key.to_owned(),
                    reason: format!(
                        "{}: bytes {}..{} are past the end of the shard",
                        name_inner_chunks(read.members.iter().map(|&m| &needed[m].0.chunk)),
                        range.start,
                        range.end
                    ),
                },
                e => source_err(key)(e),
            })?
            .ok_or_else(|| RegionError::Corrupt {
                key: key.to_owned(),
                reason: "the shard disappeared between reading its index and its inner chunks".into(),
            })?;
        Ok::<_, RegionError>((range, bytes))
    }))
    .buffered(options.concurrency.max(1))
    .try_collect()
    .await?;
    let mut pieces = Vec::with_capacity(needed.len());
    for (read, (range, bytes)) in reads.iter().zip(fetched) {
        for &m in &read.members {
            let (inner, r) = &needed[m];
            let (lo, hi) = (r.start - range.start, r.end - range.start);
            if hi > bytes.len() as u64 {
                return Err(RegionError::Corrupt {
                    key: key.to_owned(),
                    reason: format!(
                        "inner chunk {:?}: bytes {}..{} are past the end of the shard",
                        inner.chunk, r.start, r.end
                    ),
                });
            }
            #[allow(clippy::cast_possible_truncation)] // hi <= bytes.len()
            let slice = bytes.slice(lo as usize..hi as usize);
            let data = sharding.decode_inner_chunk(Vec::from(slice), &inner.chunk).map_err(codec_err(key))?;
            let dst_start: Vec<u64> =
                o.in_region.start().iter().zip(inner.in_region.start()).map(|(a, b)| a + b).collect();
            pieces.push(Piece {
                data,
                shape: sharding.inner_chunk_shape().to_vec(),
                part: inner.in_chunk.clone(),
                dst_start,
            });
        }
    }
    Ok(pieces)
}

/// `inner chunk [1, 2]` or `inner chunks [1, 2], [1, 3]`.
fn name_inner_chunks<'a>(coords: impl Iterator<Item = &'a Vec<u64>>) -> String {
    let names: Vec<String> = coords.map(|c| format!("{c:?}")).collect();
    format!("inner chunk{} {}", if names.len() == 1 { "" } else { "s" }, names.join(", "))
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
    let n = usize::try_from(region.num_elements()).map_err(|_| RegionError::Data("region too large".into()))?;
    let ok = match (data, desc.data_type.size()) {
        (ChunkData::Fixed(b), Some(size)) => n.checked_mul(size) == Some(b.len()),
        (ChunkData::Variable(items), None) => items.len() == n,
        _ => false,
    };
    if !ok {
        return Err(RegionError::Data(format!("expected {n} elements of {:?} for region {region}", desc.data_type)));
    }
    let grid = desc.grid();
    let overlaps: Vec<ChunkOverlap> = grid.overlaps(region)?.collect();
    let grid = &grid;
    stream::iter(overlaps)
        .map(|o| write_overlap(desc, grid, source, sink, region, data, o))
        .buffer_unordered(options.concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn write_overlap(
    desc: &ArrayDescription,
    grid: &RegularChunkGrid,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    region: &ArraySubset,
    data: &ChunkData,
    o: ChunkOverlap,
) -> Result<(), RegionError> {
    let key = desc.chunk_key(&o.chunk);
    if let Some(sharding) = desc.sharding.as_deref().filter(|_| !covers_chunk(grid, &o)) {
        return write_inner_chunks(desc, sharding, source, sink, &key, region, data, &o).await;
    }
    let repr = desc.chunk_repr();
    let mut chunk = if covers_chunk(grid, &o) {
        ChunkData::filled(&repr)
    } else {
        match source.get(&key, None).await.map_err(source_err(&key))? {
            Some(bytes) => desc.decode_chunk(Vec::from(bytes)).map_err(codec_err(&key))?,
            None => ChunkData::filled(&repr),
        }
    };
    let elem = desc.data_type.size().unwrap_or(1);
    copy_data(data, region.shape(), &o.in_region, &mut chunk, &desc.chunk_shape, o.in_chunk.start(), elem)?;
    let encoded = if chunk.is_fill(&repr) {
        None
    } else if let Some(sharding) = &desc.sharding {
        sharding.encode_shard(chunk, &repr).map_err(codec_err(&key))?
    } else {
        Some(desc.encode_chunk(chunk).map_err(codec_err(&key))?)
    };
    match encoded {
        Some(bytes) => sink.put(&key, Bytes::from(bytes)).await.map_err(source_err(&key)),
        None => sink.delete(&key).await.map_err(source_err(&key)),
    }
}

/// The read-modify-write of part of one shard at inner chunk granularity:
/// only the inner chunks the region touches are decoded (when partly
/// covered) and re-encoded; the others are copied as stored.
#[allow(clippy::too_many_arguments)]
async fn write_inner_chunks(
    desc: &ArrayDescription,
    sharding: &ShardingCodec,
    source: &dyn ChunkSource,
    sink: &dyn ChunkSink,
    key: &str,
    region: &ArraySubset,
    data: &ChunkData,
    o: &ChunkOverlap,
) -> Result<(), RegionError> {
    let existing = source.get(key, None).await.map_err(source_err(key))?;
    let index = match &existing {
        Some(bytes) => Some(sharding.shard_index(bytes).map_err(codec_err(key))?),
        None => None,
    };
    let inner_repr = sharding.inner_chunk_repr();
    let inner_shape = sharding.inner_chunk_shape();
    let inner_grid = RegularChunkGrid::new(desc.chunk_shape.clone(), inner_shape.to_vec())?;
    let elem = desc.data_type.size().unwrap_or(1);
    let mut replacements = Vec::new();
    for inner in inner_grid.overlaps(&o.in_chunk)? {
        let stored = match (&existing, &index) {
            (Some(bytes), Some(index)) => index.inner_range(&inner.chunk).map(|r| (bytes, r)),
            _ => None,
        };
        let covered = inner.in_chunk.shape() == inner_shape;
        let mut chunk = match stored.filter(|_| !covered) {
            #[allow(clippy::cast_possible_truncation)] // shard_index checked r against the shard's length
            Some((bytes, r)) => sharding
                .decode_inner_chunk(Vec::from(bytes.slice(r.start as usize..r.end as usize)), &inner.chunk)
                .map_err(codec_err(key))?,
            None => ChunkData::filled(inner_repr),
        };
        // The part of the region this inner chunk receives, region-relative.
        let start: Vec<u64> = o.in_region.start().iter().zip(inner.in_region.start()).map(|(a, b)| a + b).collect();
        let part = ArraySubset::new(start, inner.in_chunk.shape().to_vec())?;
        copy_data(data, region.shape(), &part, &mut chunk, inner_shape, inner.in_chunk.start(), elem)?;
        let encoded = if chunk.is_fill(inner_repr) {
            None
        } else {
            Some(sharding.encode_inner_chunk(chunk, &inner.chunk).map_err(codec_err(key))?)
        };
        replacements.push((inner.chunk, encoded));
    }
    let existing = existing.as_deref().zip(index.as_ref());
    match sharding.merge_shard(existing, replacements).map_err(codec_err(key))? {
        Some(bytes) => sink.put(key, Bytes::from(bytes)).await.map_err(source_err(key)),
        None => sink.delete(key).await.map_err(source_err(key)),
    }
}

#[cfg(test)]
mod tests;
