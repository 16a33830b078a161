//! A slice that is exactly one whole chunk (a tile aligned to the chunk
//! grid, wholly inside the array), answered from the decoded chunk itself:
//! no slab to zero and fill, no copy, no producer task. The chunk comes
//! through the engine's unit read ([`region::read_chunk`]: the same cache,
//! revalidation and CPU pool as every read) and its bytes are the answer's
//! (`Bytes` owning the decoded chunk, shared with the cache when it is
//! cached). A hot tile is a cache lookup and a response.
//!
//! Only small answers take this path ([`SMALL_ANSWER`]: one message, no
//! budget share), fixed-size types in raw or npy, unsharded arrays, no
//! field. A missing chunk, or one that decoded to the wrong size, goes the
//! ordinary way, which fills it or reports it as every read does.

use std::sync::Arc;

use bytes::Bytes;

use super::stream::SMALL_ANSWER;
use super::{npy_header, DataRead, Opened, CACHE_ENTRY_ESTIMATE};
use crate::service::array::source::region_error;
use crate::service::wire::WireFormat;
use crate::service::ServiceResult;
use crate::zarr::array::ArrayDescription;
use crate::zarr::chunk::ChunkData;
use crate::zarr::region;
use crate::zarr::selection::{DimIndexer, Selection, SelectionMode};

/// The grid coordinates of the chunk `sel` is exactly (every dimension a
/// unit-step slice over one whole chunk inside the array); `None` otherwise
/// or when the answer would not be small.
pub(super) fn whole_chunk(desc: &ArrayDescription, sel: &Selection) -> Option<Vec<u64>> {
    if desc.sharding.is_some() || sel.mode == SelectionMode::Coordinate || sel.dims.len() != desc.shape.len() {
        return None;
    }
    let es = desc.data_type.size()? as u64;
    let elements = desc.chunk_shape.iter().try_fold(1u64, |a, &c| a.checked_mul(c))?;
    if elements.checked_mul(es)? > SMALL_ANSWER {
        return None;
    }
    sel.dims
        .iter()
        .zip(desc.chunk_shape.iter().zip(&desc.shape))
        .map(|(d, (&c, &n))| match *d {
            DimIndexer::Slice { start, step: 1, len } if len == c && start % c == 0 && start + len <= n => {
                Some(start / c)
            }
            _ => None,
        })
        .collect()
}

/// A decoded chunk's bytes.
struct Decoded(Arc<ChunkData>);

impl AsRef<[u8]> for Decoded {
    fn as_ref(&self) -> &[u8] {
        match &*self.0 {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => &[],
        }
    }
}

/// The answer to a read of exactly the chunk at `coords`, when it is stored
/// and decodes to its size; `None`: read it the ordinary way.
///
/// # Errors
/// As the ordinary read's first slab: a store failure, a chunk that does
/// not decode.
pub(super) async fn read(
    src: &Opened,
    coords: &[u64],
    format: WireFormat,
    content_length: Option<u64>,
) -> ServiceResult<Option<DataRead>> {
    let desc = &src.array.desc;
    let want = desc.chunk_shape.iter().product::<u64>() * desc.data_type.size().unwrap_or(0) as u64;
    let fill_cache = want.max(CACHE_ENTRY_ESTIMATE) <= src.cache.capacity() / 2;
    let engine = src.engine(fill_cache);
    let data =
        region::read_chunk(&engine.ctx, &engine.store, coords).await.map_err(|e| region_error(&engine.path, e))?;
    let Some(data) = data.filter(|d| matches!(&**d, ChunkData::Fixed(b) if b.len() as u64 == want)) else {
        return Ok(None);
    };
    let mut first = Vec::with_capacity(2);
    if format == WireFormat::Npy {
        first.push(Bytes::from(npy_header(&desc.data_type, &desc.chunk_shape)));
    }
    first.push(Bytes::from_owner(Decoded(data)));
    Ok(Some(DataRead {
        shape: desc.chunk_shape.clone(),
        data_type: desc.data_type.clone(),
        format,
        content_length,
        first,
        rest: None,
    }))
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

    fn slices(s: &[(u64, i64, u64)]) -> Selection {
        let dims = s.iter().map(|&(start, step, len)| DimIndexer::Slice { start, step, len }).collect();
        Selection { dims, mode: SelectionMode::Basic }
    }

    #[test]
    fn only_one_whole_chunk_inside_the_array_is_a_whole_chunk() {
        let bytes = serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
        let d = desc(&[40, 48], &[16, 16], bytes.clone());
        assert_eq!(whole_chunk(&d, &slices(&[(16, 1, 16), (32, 1, 16)])), Some(vec![1, 2]));
        assert_eq!(whole_chunk(&d, &slices(&[(8, 1, 16), (32, 1, 16)])), None, "off the grid");
        assert_eq!(whole_chunk(&d, &slices(&[(16, 1, 16), (32, 1, 15)])), None, "part of a chunk");
        assert_eq!(whole_chunk(&d, &slices(&[(0, 2, 16), (32, 1, 16)])), None, "a step");
        assert_eq!(whole_chunk(&d, &slices(&[(32, 1, 8), (0, 1, 16)])), None, "the edge chunk");
        let mut one = slices(&[(16, 1, 16), (32, 1, 16)]);
        one.dims[0] = DimIndexer::Index(16);
        assert_eq!(whole_chunk(&d, &one), None, "an index drops a dimension");
        let big = desc(&[1024, 1024], &[1024, 1024], bytes);
        assert_eq!(whole_chunk(&big, &slices(&[(0, 1, 1024), (0, 1, 1024)])), None, "4 MiB is not a small answer");
        let sharded = desc(
            &[32, 32],
            &[16, 16],
            serde_json::json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]),
        );
        assert_eq!(whole_chunk(&sharded, &slices(&[(0, 1, 16), (0, 1, 16)])), None, "sharded");
    }
}
