//! Building a [`CodecChain`] from metadata, once per array.
//!
//! Spec: Zarr v3 core §"Codecs" (the chain); Zarr v2 §"Chunks" (filters,
//! then the compressor, on the chunk in its `order`). A v2 array maps onto
//! the v3 pipeline as:
//!
//! - `order: "F"` → `transpose` with the reversed order (first, because
//!   numcodecs filters flatten the chunk in its memory order);
//! - numeric `filters` (`delta`, `fixedscaleoffset`) → array→array codecs;
//! - `vlen-utf8` / `vlen-bytes` filters (dtype `|O`) → the array→bytes codec;
//!   otherwise `bytes` with the endianness of the last array's byte order
//!   (the dtype's, or the last filter's `astype`);
//! - bytes→bytes `filters` and the `compressor` → bytes→bytes codecs through
//!   [`build_bytes_to_bytes_sized`] as `numcodecs.<id>`.
//!
//! Building walks the representations through the chain, so a mismatch (a
//! filter `dtype` that is not the array's, `bytes` on a variable-length type)
//! is found here, not when the first chunk is read.

use serde_json::Value;

use super::array_to_array::{DeltaCodec, FixedScaleOffsetCodec, TransposeCodec};
use super::array_to_bytes::{BytesCodec, ShardingCodec, VlenCodec, VlenKind};
use super::bytes_to_bytes::build_bytes_to_bytes_sized;
use super::{ArrayToArrayCodec, ArrayToBytesCodec, BytesToBytesCodec, CodecChain, CodecError, CodecResult};
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::codec::numcodecs::v3_kind;
use crate::zarr::metadata::codec::{CodecKind, Endian, ShardingCodec as ShardingSpec};
use crate::zarr::metadata::v2::dtype::{ByteOrder, DataTypeV2};
use crate::zarr::metadata::v2::{ArrayMetadataV2, CodecV2, Order};
use crate::zarr::metadata::CodecSpec;

/// The chain under construction, with the representation entering the next codec.
struct Builder {
    repr: ChunkRepr,
    array_to_array: Vec<Box<dyn ArrayToArrayCodec>>,
    array_to_bytes: Option<Box<dyn ArrayToBytesCodec>>,
    bytes_to_bytes: Vec<Box<dyn BytesToBytesCodec>>,
}

impl Builder {
    fn new(decoded: &ChunkRepr) -> Self {
        Self { repr: decoded.clone(), array_to_array: Vec::new(), array_to_bytes: None, bytes_to_bytes: Vec::new() }
    }

    fn array_to_array(&mut self, codec: Box<dyn ArrayToArrayCodec>) -> CodecResult<()> {
        if self.array_to_bytes.is_some() {
            return Err(CodecError::new(
                codec.name(),
                "an array -> array codec must come before the array -> bytes codec",
            ));
        }
        self.repr = codec.encoded_repr(&self.repr)?;
        self.array_to_array.push(codec);
        Ok(())
    }

    fn bytes(&mut self, endian: Option<Endian>) -> CodecResult<()> {
        let codec = BytesCodec::new(endian);
        codec.validate(&self.repr)?;
        self.array_to_bytes(Box::new(codec))
    }

    fn vlen(&mut self, kind: VlenKind) -> CodecResult<()> {
        let codec = VlenCodec::new(kind);
        codec.validate(&self.repr)?;
        self.array_to_bytes(Box::new(codec))
    }

    fn array_to_bytes(&mut self, codec: Box<dyn ArrayToBytesCodec>) -> CodecResult<()> {
        if self.array_to_bytes.is_some() {
            return Err(CodecError::new(codec.name(), "a chain has exactly one array -> bytes codec"));
        }
        self.array_to_bytes = Some(codec);
        Ok(())
    }

    fn bytes_to_bytes(&mut self, name: &str, configuration: &Value) -> CodecResult<()> {
        if self.array_to_bytes.is_none() {
            return Err(CodecError::new(name, "a bytes -> bytes codec must come after the array -> bytes codec"));
        }
        let element_size = self.repr.data_type.size().unwrap_or(1);
        self.bytes_to_bytes.push(build_bytes_to_bytes_sized(name, configuration, element_size)?);
        Ok(())
    }

    fn finish(self) -> CodecResult<CodecChain> {
        let a2b =
            self.array_to_bytes.ok_or_else(|| CodecError::new("codecs", "the chain has no array -> bytes codec"))?;
        Ok(CodecChain::new(self.array_to_array, a2b, self.bytes_to_bytes))
    }
}

/// The array→array numcodecs filters zarrd implements, by id.
fn numcodecs_array_to_array(
    id: &str,
    config: &serde_json::Map<String, Value>,
) -> CodecResult<Box<dyn ArrayToArrayCodec>> {
    match id {
        "delta" => Ok(Box::new(DeltaCodec::from_config(config)?)),
        "fixedscaleoffset" => Ok(Box::new(FixedScaleOffsetCodec::from_config(config)?)),
        other => Err(CodecError::new(
            other,
            "unsupported filter (zarrd implements the array filters delta and fixedscaleoffset)",
        )),
    }
}

/// Builds the chain of a v3 `codecs` list for chunks of representation `decoded`.
///
/// # Errors
/// Codecs zarrd does not implement (`numcodecs.*`
/// other than `delta`/`fixedscaleoffset` and the bytes→bytes ones the hook
/// provides), and representation mismatches; the error names the codec.
pub fn chain_from_v3(codecs: &[CodecSpec], decoded: &ChunkRepr) -> CodecResult<CodecChain> {
    let mut b = Builder::new(decoded);
    for spec in codecs {
        match spec {
            CodecSpec::Transpose(t) => b.array_to_array(Box::new(TransposeCodec::new(t.order.clone())?))?,
            CodecSpec::Bytes(c) => b.bytes(c.endian)?,
            CodecSpec::VlenUtf8 => b.vlen(VlenKind::Utf8)?,
            CodecSpec::VlenBytes => b.vlen(VlenKind::Bytes)?,
            CodecSpec::ShardingIndexed(s) => {
                let codec = build_sharding(s, &b.repr)?;
                b.array_to_bytes(Box::new(codec))?;
            }
            CodecSpec::Gzip(_) | CodecSpec::Zstd(_) | CodecSpec::Blosc(_) | CodecSpec::Crc32c => {
                let json = serde_json::to_value(spec).map_err(|e| CodecError::new(spec.name(), e.to_string()))?;
                let config = json.get("configuration").cloned().unwrap_or_else(|| Value::Object(Default::default()));
                b.bytes_to_bytes(&spec.name(), &config)?;
            }
            CodecSpec::Numcodecs(c) => match v3_kind(&c.id) {
                Some(CodecKind::ArrayToArray) => {
                    b.array_to_array(numcodecs_array_to_array(&c.id, &c.configuration)?)?
                }
                Some(CodecKind::BytesToBytes) => {
                    b.bytes_to_bytes(&spec.name(), &Value::Object(c.configuration.clone()))?;
                }
                _ => return Err(CodecError::new(spec.name(), "unsupported codec")),
            },
            // "must_understand": false: a reader may skip it.
            CodecSpec::Extension(_) => {}
        }
    }
    b.finish()
}

/// Builds a `sharding_indexed` codec for shards of representation `shard`:
/// the inner chain for inner chunks of `chunk_shape` (same data type and
/// fill value), the index chain for a `uint64` array of shape
/// `chunks_per_shard + [2]`.
///
/// # Errors
/// As [`chain_from_v3`] for either chain; an inner chunk shape that does not
/// divide the shard; index codecs of variable size.
pub fn build_sharding(spec: &ShardingSpec, shard: &ChunkRepr) -> CodecResult<ShardingCodec> {
    let inner_repr = ChunkRepr { shape: spec.chunk_shape.clone(), ..shard.clone() };
    let inner = chain_from_v3(&spec.codecs, &inner_repr)?;
    let mut index_shape: Vec<u64> =
        shard.shape.iter().zip(&spec.chunk_shape).map(|(s, i)| s.checked_div(*i).unwrap_or(0)).collect();
    index_shape.push(2);
    let index_repr = ChunkRepr { shape: index_shape, data_type: DataType::UInt64, fill_value: vec![0xff; 8] };
    let index = chain_from_v3(&spec.index_codecs, &index_repr)?;
    ShardingCodec::new(spec.chunk_shape.clone(), inner, index, spec.index_location, shard)
}

/// The sharding codec of a v3 chain that is exactly one `sharding_indexed`
/// codec (ignorable extensions aside): such arrays can read parts of a
/// shard by byte ranges. `None` for any other chain (a `transpose` before
/// the shard or a checksum after it hides the inner chunks' byte ranges).
///
/// # Errors
/// As [`build_sharding`].
pub fn sharding_from_v3(codecs: &[CodecSpec], decoded: &ChunkRepr) -> CodecResult<Option<ShardingCodec>> {
    let mut real = codecs.iter().filter(|c| !matches!(c, CodecSpec::Extension(_)));
    match (real.next(), real.next()) {
        (Some(CodecSpec::ShardingIndexed(s)), None) => build_sharding(s, decoded).map(Some),
        _ => Ok(None),
    }
}

/// Builds the chain of a v2 array (order, dtype byte order, filters,
/// compressor) for chunks of representation `decoded`.
///
/// # Errors
/// Filters zarrd does not implement, filters in an order the v3 pipeline
/// cannot express, a `|O` dtype without `vlen-utf8`/`vlen-bytes`, and
/// representation mismatches; the error names the filter or codec.
pub fn chain_from_v2(meta: &ArrayMetadataV2, decoded: &ChunkRepr) -> CodecResult<CodecChain> {
    let mut b = Builder::new(decoded);
    if meta.order == Order::F && decoded.shape.len() > 1 {
        b.array_to_array(Box::new(TransposeCodec::fortran(decoded.shape.len())))?;
    }
    let mut big_endian = matches!(meta.dtype, DataTypeV2::Scalar { byte_order: ByteOrder::Big, .. });
    let bytes_endian = |big: bool| Some(if big { Endian::Big } else { Endian::Little });
    for f in meta.filters.iter().flatten() {
        match f.id.as_str() {
            "delta" => {
                let c = DeltaCodec::from_config(&f.configuration)?;
                big_endian = c.astype_big_endian();
                b.array_to_array(Box::new(c))?;
            }
            "fixedscaleoffset" => {
                let c = FixedScaleOffsetCodec::from_config(&f.configuration)?;
                big_endian = c.astype_big_endian();
                b.array_to_array(Box::new(c))?;
            }
            "vlen-utf8" => b.vlen(VlenKind::Utf8)?,
            "vlen-bytes" => b.vlen(VlenKind::Bytes)?,
            id if v3_kind(id) == Some(CodecKind::BytesToBytes) => {
                if b.array_to_bytes.is_none() {
                    b.bytes(bytes_endian(big_endian))?;
                }
                b.bytes_to_bytes(&format!("numcodecs.{id}"), &Value::Object(f.configuration.clone()))?;
            }
            id => return Err(filter_unsupported(id)),
        }
    }
    if b.array_to_bytes.is_none() {
        if b.repr.data_type.is_variable() {
            return Err(CodecError::new("filters", "an object (|O) array needs a vlen-utf8 or vlen-bytes filter"));
        }
        let endian = if b.repr.data_type.swap_unit() > 1 { bytes_endian(big_endian) } else { None };
        b.bytes(endian)?;
    }
    if let Some(c) = &meta.compressor {
        compressor(&mut b, c)?;
    }
    b.finish()
}

fn compressor(b: &mut Builder, c: &CodecV2) -> CodecResult<()> {
    b.bytes_to_bytes(&format!("numcodecs.{}", c.id), &Value::Object(c.configuration.clone()))
}

fn filter_unsupported(id: &str) -> CodecError {
    CodecError::new(
        id,
        "unsupported filter (zarrd implements delta, fixedscaleoffset, vlen-utf8, vlen-bytes and bytes -> bytes filters)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk::ChunkData;
    use crate::zarr::data_type::DataType;
    use crate::zarr::metadata::codec::parse_codec_chain;
    use crate::zarr::metadata::DataType as MetaDataType;
    use proptest::prelude::*;
    use serde_json::json;

    fn v3_chain(codecs: Value, dt: &MetaDataType, shape: &[u64]) -> CodecResult<CodecChain> {
        let specs = parse_codec_chain(&codecs, "codecs", dt, shape).unwrap();
        let data_type = DataType::from(dt);
        let fill_value = vec![0; data_type.size().unwrap_or(0)];
        chain_from_v3(&specs, &ChunkRepr { shape: shape.to_vec(), data_type, fill_value })
    }

    fn repr(shape: &[u64], data_type: DataType) -> ChunkRepr {
        let fill_value = vec![0; data_type.size().unwrap_or(0)];
        ChunkRepr { shape: shape.to_vec(), data_type, fill_value }
    }

    #[test]
    fn v3_numcodecs_filters_map_onto_the_same_codecs() {
        let chain = v3_chain(
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
                   {"name": "numcodecs.delta", "configuration": {"dtype": "<i4", "astype": "<i2"}},
                   {"name": "bytes", "configuration": {"endian": "big"}}]),
            &MetaDataType::Int32,
            &[2, 2],
        )
        .unwrap();
        let r = repr(&[2, 2], DataType::Int32);
        // [[1, 2], [3, 4]] -> transposed [1, 3, 2, 4] -> delta [1, 2, -1, 2] as >i2
        let data: Vec<u8> = [1i32, 2, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        let enc = chain.encode(ChunkData::Fixed(data.clone()), &r).unwrap();
        assert_eq!(enc, [1i16, 2, -1, 2].iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<u8>>());
        assert_eq!(chain.encoded_size(&r), Some(8));
        assert_eq!(chain.decode(enc, &r).unwrap(), ChunkData::Fixed(data));
    }

    #[test]
    fn unsupported_codecs_are_named() {
        let e = v3_chain(
            json!([{"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}, {"name": "bytes", "configuration": {"endian": "little"}}]),
            &MetaDataType::Float32,
            &[4],
        )
        .unwrap_err();
        assert_eq!(e.codec, "bitround");
        assert!(v3_chain(
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.zstd", "configuration": {"level": 1}}]),
            &MetaDataType::Float32,
            &[4],
        )
        .is_ok());
        assert!(v3_chain(json!(["bytes", "crc32c"]), &MetaDataType::UInt8, &[4]).is_ok());
        let e = v3_chain(
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.lzma", "configuration": {}}]),
            &MetaDataType::Float32,
            &[4],
        )
        .unwrap_err();
        assert_eq!(e.codec, "lzma");
    }

    #[test]
    fn v2_filter_order() {
        let meta = |filters: Value| {
            ArrayMetadataV2::from_json(
                &json!({"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<i4", "compressor": null,
                        "fill_value": 0, "order": "C", "filters": filters}),
                "",
            )
            .unwrap()
        };
        let r = repr(&[4], DataType::Int32);
        // A bytes -> bytes filter goes to the bytes -> bytes builder (here: unsupported, named).
        let e = chain_from_v2(&meta(json!([{"id": "shuffle", "elementsize": 4}])), &r).unwrap_err();
        assert_eq!(e.codec, "shuffle");
        let e = chain_from_v2(&meta(json!([{"id": "vlen-utf8"}])), &r).unwrap_err();
        assert_eq!(e.codec, "vlen-utf8");
        assert!(chain_from_v2(&meta(json!([{"id": "delta", "dtype": "<i4"}])), &r).is_ok());
    }

    proptest! {
        /// Arbitrary stored bytes never panic a chain: they decode or fail with a named codec.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80), which in 0usize..3) {
            let (chain, r) = match which {
                0 => (
                    v3_chain(json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}]), &MetaDataType::Float32, &[2, 3]).unwrap(),
                    repr(&[2, 3], DataType::Float32),
                ),
                1 => (v3_chain(json!(["vlen-utf8"]), &MetaDataType::String, &[3]).unwrap(), repr(&[3], DataType::String)),
                _ => (
                    v3_chain(json!([{"name": "numcodecs.fixedscaleoffset", "configuration": {"offset": 1, "scale": 10, "dtype": "<f8", "astype": "|u1"}}, "bytes"]), &MetaDataType::Float64, &[8]).unwrap(),
                    repr(&[8], DataType::Float64),
                ),
            };
            if let Err(e) = chain.decode(bytes, &r) {
                prop_assert!(!e.codec.is_empty());
            }
        }
    }
}
