//! A slice that is exactly one whole unit — a chunk, or an inner chunk of a
//! shard — aligned to the grid and wholly inside the array, answered from
//! the decoded unit itself: no slab to zero and fill, no copy, no producer
//! task. The unit comes through the engine's unit reads
//! ([`region::read_chunk`], [`region::read_inner_chunk`]: the same cache,
//! shard index, revalidation and CPU pool as every read) and its bytes are
//! the answer's (`Bytes` owning the decoded unit, shared with the cache
//! when it is cached). A hot tile is a cache lookup and a response; an
//! aligned 4 MiB chunk is one decode and a write of its own bytes.
//!
//! Fixed-size types in raw or npy, no field, units of at most 4 ×
//! `read_slab_bytes` (the share an ordinary read takes; larger units go by
//! slabs). An answer larger than
//! [`SMALL_ANSWER`] first takes a share of `limits.read_answer_budget_bytes`
//! the size of the unit (the decoded unit is all it holds: the same bytes
//! are the body), released when the last byte is written or the connection
//! closes. A missing unit, or one that decoded to the wrong size, goes the
//! ordinary way, which fills it or reports it as every read does.
//!
//! A zstd unit of little-endian (or one-byte) elements larger than a
//! piece, which the cache would not take (the cache is off, or the unit
//! is more than half of it), streams: its stored bytes are decoded in
//! pieces on the CPU pool ([`pieces`]: [`FIRST_PIECE`], then [`PIECE`]
//! bytes), each sent while the next is decoded, so the client waits for
//! one piece's decode rather than the whole unit's (time ≈ max(decode,
//! send) + one piece). The decoded-chunk endpoint's one-chunk answers
//! stream the same way ([`read_streamed`]). A unit the cache would take is
//! decoded whole as before and cached, so the next read of it is a lookup:
//! the streamed unit's buffer is shared with the pieces in flight, so
//! caching it would cost a copy of every unit, for the first read only.
//! Only units whose stored bytes *declare* exactly the unit's size stream
//! (one zstd frame recording it; checksums verified first); the headers,
//! the first piece decoded, go out before the rest is decoded, so a frame
//! found corrupt, short or long at a later piece ends the body with an
//! error (the connection closes before `Content-Length` bytes: clients
//! report a failed transfer), never a short or padded answer. zstd decodes
//! straight into one buffer of the unit's size and the pieces are its
//! finished ranges (no copy). A unit read this way holds its stored bytes
//! (until the last piece is decoded) and the decoded unit, so it takes a
//! share of twice the unit's size of the answer budget (the whole-unit
//! answer drops the stored bytes before sending and takes the unit's
//! size); the decoding runs at most one piece ahead of the socket (one
//! piece queued in the channel of one).
//! Errors before the headers (the store, a checksum, the first piece) are
//! ordinary answers.

use std::sync::Arc;

use bytes::Bytes;

use tokio::sync::mpsc;

use super::stream::{held, Share, SMALL_ANSWER};
use super::{cpu_error, npy_header, DataRead, Engine, Opened, Pieces, CACHE_ENTRY_ESTIMATE};
use crate::service::array::source::region_error;
use crate::service::node::ArrayNode;
use crate::service::wire::WireFormat;
use crate::service::{cpu, ServiceError, ServiceResult};
use crate::zarr::array::ArrayDescription;
use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::codec::pieces::{self, PieceDecoder, Start};
use crate::zarr::codec::{CodecChain, CodecError};
use crate::zarr::region::{self, RegionError, UnitBytes};
use crate::zarr::selection::{DimIndexer, Selection, SelectionMode};

/// The one unit a selection is exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::service::array) enum WholeUnit {
    /// A chunk of an unsharded array (grid coordinates).
    Chunk(Vec<u64>),
    /// An inner chunk of a shard: the shard's grid coordinates, and the
    /// inner chunk's inside it.
    Inner(Vec<u64>, Vec<u64>),
}

impl WholeUnit {
    /// The unit, decoded through the engine's unit reads
    /// ([`region::read_chunk`], [`region::read_inner_chunk`]: cache, shard
    /// index, revalidation, CPU pool), when it is stored and decodes to
    /// `want` bytes of fixed-size elements; `None` otherwise (the ordinary
    /// read fills a missing unit and reports a bad one).
    ///
    /// # Errors
    /// A store failure, a unit that does not decode.
    pub(in crate::service::array) async fn read(
        &self,
        ctx: &region::ReadCtx<'_>,
        store: &dyn region::ChunkSource,
        want: u64,
    ) -> Result<Option<Arc<ChunkData>>, region::RegionError> {
        let data = match self {
            Self::Chunk(coords) => region::read_chunk(ctx, store, coords).await?,
            Self::Inner(shard, inner) => region::read_inner_chunk(ctx, store, shard, inner).await?,
        };
        Ok(data.filter(|d| matches!(&**d, ChunkData::Fixed(b) if b.len() as u64 == want)))
    }
}

/// The unit `sel` is exactly (every dimension a unit-step slice over one
/// whole chunk, or inner chunk of a shard, inside the array); `None`
/// otherwise.
pub(in crate::service::array) fn whole_chunk(desc: &ArrayDescription, sel: &Selection) -> Option<WholeUnit> {
    if sel.mode == SelectionMode::Coordinate || sel.dims.len() != desc.shape.len() {
        return None;
    }
    desc.data_type.size()?;
    let unit_shape = match &desc.sharding {
        Some(s) => s.inner_chunk_shape(),
        None => &desc.chunk_shape,
    };
    let at: Vec<u64> = sel
        .dims
        .iter()
        .zip(unit_shape.iter().zip(&desc.shape))
        .map(|(d, (&c, &n))| match *d {
            DimIndexer::Slice { start, step: 1, len }
                if c > 0 && len == c && start % c == 0 && start.checked_add(len)? <= n =>
            {
                Some(start / c)
            }
            _ => None,
        })
        .collect::<Option<_>>()?;
    match &desc.sharding {
        None => Some(WholeUnit::Chunk(at)),
        Some(s) => {
            let per = s.chunks_per_shard();
            if per.len() != at.len() || per.contains(&0) {
                return None;
            }
            let shard = at.iter().zip(per).map(|(&i, &p)| i / p).collect();
            let inner = at.iter().zip(per).map(|(&i, &p)| i % p).collect();
            Some(WholeUnit::Inner(shard, inner))
        }
    }
}

/// A decoded unit's bytes.
struct Decoded(Arc<ChunkData>);

impl AsRef<[u8]> for Decoded {
    fn as_ref(&self) -> &[u8] {
        match &*self.0 {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => &[],
        }
    }
}

/// Pieces of the answer's body: hyper writes each as it comes, so a large
/// unit is cut into pieces of this size (no copy: slices of one `Bytes`),
/// and a streamed unit is decoded a piece of this size at a time.
const PIECE: usize = 1 << 20;

/// A streamed unit's first piece, decoded before the headers go out:
/// smaller, so the body starts sooner (`bench/unit_stream.py`: the first
/// byte of a 4 MiB zstd unit after 1.2 ms rather than 1.8 with a first
/// piece of 1 MiB, and 3.9 decoded whole; later pieces of [`PIECE`]).
const FIRST_PIECE: usize = 256 << 10;

/// The answer to a read of exactly the unit `unit`, when it is stored and
/// decodes to its size; `None`: read it the ordinary way.
///
/// # Errors
/// As the ordinary read's first slab: a store failure, a unit that does
/// not decode.
pub(super) async fn read(
    src: &Opened,
    unit: &WholeUnit,
    format: WireFormat,
    content_length: Option<u64>,
    budget: &super::stream::AnswerLimits,
) -> ServiceResult<Option<DataRead>> {
    let Some((shape, want)) = unit_size(src, budget) else { return Ok(None) };
    let fill_cache = cache_keeps(src, want);
    let engine = src.engine(fill_cache);
    if !fill_cache && streams(src, want) {
        let share = budget.share_now(streamed_share(want)).await?;
        let head = Head { shape, format, content_length, want };
        return stream(src, unit, &engine, head, share).await;
    }
    // A large answer holds the decoded unit until its last byte is written:
    // its share is taken before the unit is read.
    let share: Option<Share> = if want > SMALL_ANSWER { Some(budget.share_now(want).await?) } else { None };
    let data = unit.read(&engine.ctx, &engine.store, want).await.map_err(|e| region_error(&engine.path, e))?;
    let Some(data) = data else { return Ok(None) };
    Ok(Some(answer(&src.array.desc, data, shape, format, content_length, share.as_ref())?))
}

/// A unit's shape and decoded size, when it may be answered whole: fixed
/// -size elements, no larger than the share an ordinary read takes (4 ×
/// read_slab_bytes: it is held whole until its last byte is written, so a
/// huge chunk cannot hold more than the budget says nor take all of it;
/// larger units go the ordinary way, by slabs).
fn unit_size(src: &Opened, budget: &super::stream::AnswerLimits) -> Option<(Vec<u64>, u64)> {
    let desc = &src.array.desc;
    let shape = match &desc.sharding {
        Some(s) => s.inner_chunk_shape().to_vec(),
        None => desc.chunk_shape.clone(),
    };
    let elements = shape.iter().try_fold(1u64, |a, &c| a.checked_mul(c))?;
    let want = elements.checked_mul(desc.data_type.size()? as u64)?;
    (want <= budget.slab_bytes.saturating_mul(4)).then_some((shape, want))
}

/// The share of the answer budget a streamed unit of `want` decoded bytes
/// takes: its stored frame stays in memory until the last piece is decoded
/// (about the whole transfer), beside the decoded buffer, and a frame may
/// be a little larger than the unit (zstd's raw blocks) — twice the unit,
/// taken at once before the unit is read (a second share taken later could
/// wait on answers that wait for it).
fn streamed_share(want: u64) -> u64 {
    want.saturating_mul(2)
}

/// Whether the decoded-chunk cache would keep a unit of `want` bytes (at
/// most half its capacity): such a unit is decoded whole and cached.
fn cache_keeps(src: &Opened, want: u64) -> bool {
    want.max(CACHE_ENTRY_ESTIMATE) <= src.cache.capacity() / 2
}

/// Whether a unit of `want` bytes streams (see the module doc): large
/// enough to be worth pieces, its codecs of the shape that streams.
fn streams(src: &Opened, want: u64) -> bool {
    let (chain, repr) = unit_codecs(&src.array.desc);
    want > PIECE as u64 && want > SMALL_ANSWER && pieces::streams(chain, &repr)
}

/// The decoded-chunk endpoint's answer for one unit when it streams (as
/// [`read`] streams it: a unit the cache would not keep, of a chain that
/// streams); `None`: answer it the endpoint's own way.
///
/// # Errors
/// As [`read`].
pub(super) async fn read_streamed(
    src: &Opened,
    unit: &WholeUnit,
    format: WireFormat,
    content_length: Option<u64>,
    budget: &super::stream::AnswerLimits,
) -> ServiceResult<Option<DataRead>> {
    let Some((shape, want)) = unit_size(src, budget) else { return Ok(None) };
    if cache_keeps(src, want) || !streams(src, want) {
        return Ok(None);
    }
    let share = budget.share_now(streamed_share(want)).await?;
    let engine = src.engine(false);
    stream(src, unit, &engine, Head { shape, format, content_length, want }, share).await
}

/// The answer from a decoded unit's own bytes, in pieces of [`PIECE`].
fn answer(
    desc: &ArrayDescription,
    data: Arc<ChunkData>,
    shape: Vec<u64>,
    format: WireFormat,
    content_length: Option<u64>,
    share: Option<&Share>,
) -> ServiceResult<DataRead> {
    let bytes = Bytes::from_owner(Decoded(data));
    let mut first = Vec::with_capacity(2 + bytes.len() / PIECE);
    if format == WireFormat::Npy {
        first.push(Bytes::from(npy_header(&desc.data_type, &shape)));
    }
    let mut at = 0;
    while at < bytes.len() {
        let end = bytes.len().min(at + PIECE);
        let piece = bytes.slice(at..end);
        first.push(match share {
            Some(s) => held(piece, s),
            None => piece,
        });
        at = end;
    }
    if first.is_empty() {
        return Err(ServiceError::Internal("an empty whole-unit answer".into()));
    }
    Ok(DataRead { shape, data_type: desc.data_type.clone(), format, content_length, first, rest: None })
}

/// The codecs of one unit (the array's, or a shard's inner chunks') and the
/// representation they decode to.
fn unit_codecs(desc: &ArrayDescription) -> (&CodecChain, ChunkRepr) {
    match &desc.sharding {
        Some(s) => (s.inner_codecs(), s.inner_chunk_repr().clone()),
        None => (&desc.codecs, desc.chunk_repr()),
    }
}

/// What the answer's headers say.
struct Head {
    shape: Vec<u64>,
    format: WireFormat,
    content_length: Option<u64>,
    /// The unit's decoded size.
    want: u64,
}

/// How a unit's decoding started on the CPU pool.
enum Started {
    /// Decoded whole (it does not declare its size).
    Whole(ChunkData),
    /// The first piece, and the decoder of the rest.
    Pieces(Bytes, PieceDecoder),
}

/// A unit's codec error, named as the engine names it.
fn codec_error(unit: &WholeUnit, desc: &ArrayDescription, source: CodecError) -> RegionError {
    match unit {
        WholeUnit::Chunk(c) => RegionError::Codec { key: desc.chunk_key(c), source },
        WholeUnit::Inner(shard, inner) => RegionError::Codec {
            key: desc.chunk_key(shard),
            source: CodecError::new("sharding_indexed", format!("inner chunk {inner:?}: {source}")),
        },
    }
}

/// Answers the unit decoded in pieces (see the module doc): cached units
/// from the cache, missing ones the ordinary way.
async fn stream(
    src: &Opened,
    unit: &WholeUnit,
    engine: &Engine,
    head: Head,
    share: Share,
) -> ServiceResult<Option<DataRead>> {
    let desc = &src.array.desc;
    let fetched = match unit {
        WholeUnit::Chunk(coords) => region::chunk_bytes(&engine.ctx, &engine.store, coords).await,
        WholeUnit::Inner(shard, inner) => region::inner_chunk_bytes(&engine.ctx, &engine.store, shard, inner).await,
    }
    .map_err(|e| region_error(&engine.path, e))?;
    let stored = match fetched {
        UnitBytes::Decoded(Some(data)) => return whole_answer(desc, data, head, &share),
        UnitBytes::Decoded(None) => return Ok(None),
        UnitBytes::Stored(b) => b,
    };
    let array: Arc<ArrayNode> = src.array.clone();
    let at = unit.clone();
    let started = cpu::run(move || {
        let desc = &array.desc;
        let (chain, repr) = unit_codecs(desc);
        let started = match PieceDecoder::start(chain, &repr, Vec::from(stored)) {
            Ok(Start::Whole(data)) => Ok(Started::Whole(data)),
            Ok(Start::Pieces(mut d)) => d.next_piece(FIRST_PIECE).map(|first| Started::Pieces(first, d)),
            Err(e) => Err(e),
        };
        started.map_err(|e| codec_error(&at, desc, e))
    })
    .await
    .map_err(|e| cpu_error(&e))?
    .map_err(|e| region_error(&engine.path, e))?;
    let (first, decoder) = match started {
        Started::Whole(data) => return whole_answer(desc, Arc::new(data), head, &share),
        Started::Pieces(first, decoder) => (first, decoder),
    };
    let mut pieces = Vec::with_capacity(2);
    if head.format == WireFormat::Npy {
        pieces.push(Bytes::from(npy_header(&desc.data_type, &head.shape)));
    }
    pieces.push(held(first, &share));
    let rest = (decoder.remaining() > 0).then(|| {
        let (tx, rx) = mpsc::channel(1);
        let fail = {
            let (unit, array, path) = (unit.clone(), src.array.clone(), engine.path.clone());
            move |e: CodecError| region_error(&path, codec_error(&unit, &array.desc, e))
        };
        tokio::spawn(produce(decoder, tx, share, fail));
        rx
    });
    Ok(Some(DataRead {
        shape: head.shape,
        data_type: desc.data_type.clone(),
        format: head.format,
        content_length: head.content_length,
        first: pieces,
        rest,
    }))
}

/// The answer from a unit decoded whole, when it has the unit's size
/// (`None`: the ordinary read reports it).
fn whole_answer(
    desc: &ArrayDescription,
    data: Arc<ChunkData>,
    head: Head,
    share: &Share,
) -> ServiceResult<Option<DataRead>> {
    if !matches!(&*data, ChunkData::Fixed(b) if b.len() as u64 == head.want) {
        return Ok(None);
    }
    answer(desc, data, head.shape, head.format, head.content_length, Some(share)).map(Some)
}

/// Decodes the rest of a unit on the CPU pool, a piece at a time, each
/// sent through the channel of one (the last with the end mark): one
/// piece being decoded while one waits in the channel and the socket
/// writes another. A decoding error ends the body with that error; a
/// client gone stops the decoding.
async fn produce(
    mut decoder: PieceDecoder,
    tx: mpsc::Sender<ServiceResult<Pieces>>,
    share: Share,
    fail: impl Fn(CodecError) -> ServiceError,
) {
    while decoder.remaining() > 0 && !tx.is_closed() {
        let decoded = cpu::run(move || {
            let piece = decoder.next_piece(PIECE);
            (decoder, piece)
        })
        .await;
        let (d, piece) = match decoded {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(cpu_error(&e))).await;
                return;
            }
        };
        decoder = d;
        let mut message = match piece {
            Ok(p) => vec![held(p, &share)],
            Err(e) => {
                let _ = tx.send(Err(fail(e))).await;
                return;
            }
        };
        if decoder.remaining() == 0 {
            message.push(Bytes::new());
        }
        if tx.send(Ok(message)).await.is_err() {
            return;
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::NodeMetadataV3;

    fn desc(shape: &[u64], chunks: &[u64], codecs: serde_json::Value) -> ArrayDescription {
        let doc = serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs});
        let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&doc, "").unwrap() else { panic!() };
        ArrayDescription::from_v3(&meta).unwrap()
    }

    /// A float32 array of `shape` in 16×16 shards of 8×8 inner chunks.
    fn sharded_desc(shape: &[u64]) -> ArrayDescription {
        desc(
            shape,
            &[16, 16],
            serde_json::json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]),
        )
    }

    fn slices(s: &[(u64, i64, u64)]) -> Selection {
        let dims = s.iter().map(|&(start, step, len)| DimIndexer::Slice { start, step, len }).collect();
        Selection { dims, mode: SelectionMode::Basic }
    }

    #[test]
    fn only_one_whole_chunk_inside_the_array_is_a_whole_chunk() {
        let bytes = serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
        let d = desc(&[40, 48], &[16, 16], bytes.clone());
        assert_eq!(whole_chunk(&d, &slices(&[(16, 1, 16), (32, 1, 16)])), Some(WholeUnit::Chunk(vec![1, 2])));
        assert_eq!(whole_chunk(&d, &slices(&[(8, 1, 16), (32, 1, 16)])), None, "off the grid");
        assert_eq!(whole_chunk(&d, &slices(&[(16, 1, 16), (32, 1, 15)])), None, "part of a chunk");
        assert_eq!(whole_chunk(&d, &slices(&[(0, 2, 16), (32, 1, 16)])), None, "a step");
        assert_eq!(whole_chunk(&d, &slices(&[(32, 1, 8), (0, 1, 16)])), None, "the edge chunk");
        let mut one = slices(&[(16, 1, 16), (32, 1, 16)]);
        one.dims[0] = DimIndexer::Index(16);
        assert_eq!(whole_chunk(&d, &one), None, "an index drops a dimension");
        let big = desc(&[1024, 1024], &[1024, 1024], bytes);
        let all = slices(&[(0, 1, 1024), (0, 1, 1024)]);
        assert_eq!(whole_chunk(&big, &all), Some(WholeUnit::Chunk(vec![0, 0])), "a 4 MiB chunk too");
        let sharded = sharded_desc(&[32, 32]);
        assert_eq!(whole_chunk(&sharded, &slices(&[(0, 1, 16), (0, 1, 16)])), None, "a whole shard is four units");
        assert_eq!(
            whole_chunk(&sharded, &slices(&[(24, 1, 8), (8, 1, 8)])),
            Some(WholeUnit::Inner(vec![1, 0], vec![1, 1])),
            "one inner chunk"
        );
        assert_eq!(whole_chunk(&sharded, &slices(&[(20, 1, 8), (8, 1, 8)])), None, "off the inner grid");
        let edge = sharded_desc(&[30, 32]);
        assert_eq!(whole_chunk(&edge, &slices(&[(24, 1, 6), (8, 1, 8)])), None, "an inner chunk past the end");
    }
}
