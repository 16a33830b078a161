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
//! - bytes→bytes `filters` and the `compressor` → bytes→bytes codecs,
//!   numcodecs' (their configurations were checked when the metadata was
//!   parsed, and are not checked again).
//!
//! Each v3 codec comes from its configuration ([`CodecSpec::build`], which
//! the codec's file implements: this module never asks which codec it is);
//! v2 filters and compressors from their numcodecs constructors
//! (`numcodecs::NUMCODECS`). The order rule is
//! [`super::registry::order_problem`], the same the metadata parser applies.
//!
//! Building walks the representations through the chain, so a mismatch (a
//! filter `dtype` that is not the array's, `bytes` on a variable-length type)
//! is found here, not when the first chunk is read.

use super::array_to_array::{CastCodec, DeltaCodec, FixedScaleOffsetCodec, TransposeCodec};
use super::array_to_bytes::bytes::Endian;
use super::array_to_bytes::sharding::ShardingConfig;
use super::array_to_bytes::{BytesCodec, ShardingCodec, VlenCodec, VlenKind};
use super::bytes_to_bytes::from_checked_numcodecs;
use super::numcodecs::v3_kind;
use super::registry::{order_problem, BuiltCodec, CodecKind, OrderProblem};
use super::{ArrayToArrayCodec, ArrayToBytesCodec, BytesToBytesCodec, CodecChain, CodecError, CodecResult};
use crate::zarr::chunk::ChunkRepr;
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

    /// The chain rule ([`order_problem`]) for a codec of `kind` named `name`.
    fn check_order(&self, kind: CodecKind, name: &str) -> CodecResult<()> {
        let Some(problem) = order_problem(kind, self.array_to_bytes.is_some()) else { return Ok(()) };
        let reason = match problem {
            OrderProblem::ArrayToArrayAfterBytes => "an array -> array codec must come before the array -> bytes codec",
            OrderProblem::SecondArrayToBytes => "a chain has exactly one array -> bytes codec",
            OrderProblem::BytesToBytesBeforeArray => "a bytes -> bytes codec must come after the array -> bytes codec",
        };
        Err(CodecError::new(name, reason))
    }

    fn array_to_array(&mut self, codec: Box<dyn ArrayToArrayCodec>) -> CodecResult<()> {
        self.check_order(CodecKind::ArrayToArray, codec.name())?;
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
        self.check_order(CodecKind::ArrayToBytes, codec.name())?;
        self.array_to_bytes = Some(codec);
        Ok(())
    }

    /// The size of the elements entering the array -> bytes codec (blosc's
    /// default `typesize`; 1 for variable-length types).
    fn element_size(&self) -> usize {
        self.repr.data_type.size().unwrap_or(1)
    }

    /// A v2 bytes -> bytes filter or compressor.
    fn bytes_to_bytes(&mut self, codec: &CodecV2) -> CodecResult<()> {
        self.check_order(CodecKind::BytesToBytes, &format!("numcodecs.{}", codec.id))?;
        let codec = from_checked_numcodecs(&codec.id, &codec.configuration, self.element_size())?;
        self.bytes_to_bytes.push(codec);
        Ok(())
    }

    /// A codec of a v3 chain, built from its configuration for the
    /// representation entering it.
    fn v3(&mut self, spec: &CodecSpec) -> CodecResult<()> {
        match spec.build(&self.repr)? {
            BuiltCodec::ArrayToArray(codec) => self.array_to_array(codec),
            BuiltCodec::ArrayToBytes(codec) => self.array_to_bytes(codec),
            BuiltCodec::BytesToBytes(codec) => {
                self.check_order(CodecKind::BytesToBytes, spec.name())?;
                self.bytes_to_bytes.push(codec);
                Ok(())
            }
        }
    }

    fn finish(self) -> CodecResult<CodecChain> {
        let a2b =
            self.array_to_bytes.ok_or_else(|| CodecError::new("codecs", "the chain has no array -> bytes codec"))?;
        Ok(CodecChain::new(self.array_to_array, a2b, self.bytes_to_bytes))
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
    // "must_understand": false: a reader may skip what it does not know.
    for spec in codecs.iter().filter(|c| !c.is_extension()) {
        b.v3(spec)?;
    }
    b.finish()
}

/// The sharding codec of a v3 chain that is exactly one `sharding_indexed`
/// codec (ignorable extensions aside): such arrays can read parts of a
/// shard by byte ranges. `None` for any other chain (a `transpose` before
/// the shard or a checksum after it hides the inner chunks' byte ranges).
///
/// # Errors
/// As [`ShardingConfig::build`](super::array_to_bytes::sharding::ShardingConfig::build).
pub fn sharding_from_v3(codecs: &[CodecSpec], decoded: &ChunkRepr) -> CodecResult<Option<ShardingCodec>> {
    let mut real = codecs.iter().filter(|c| !c.is_extension());
    match (real.next().and_then(CodecSpec::config::<ShardingConfig>), real.next()) {
        (Some(s), None) => s.build(decoded).map(Some),
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
            "astype" | "quantize" | "bitround" => {
                let c = match f.id.as_str() {
                    "astype" => CastCodec::astype(&f.configuration)?,
                    "quantize" => CastCodec::quantize(&f.configuration)?,
                    _ => CastCodec::bitround(&f.configuration)?,
                };
                big_endian = c.astype_big_endian().unwrap_or(big_endian);
                b.array_to_array(Box::new(c))?;
            }
            "vlen-utf8" => b.vlen(VlenKind::Utf8)?,
            "vlen-bytes" => b.vlen(VlenKind::Bytes)?,
            id if v3_kind(id) == Some(CodecKind::BytesToBytes) => {
                if b.array_to_bytes.is_none() {
                    b.bytes(bytes_endian(big_endian))?;
                }
                b.bytes_to_bytes(f)?;
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
        b.bytes_to_bytes(c)?;
    }
    b.finish()
}

fn filter_unsupported(id: &str) -> CodecError {
    CodecError::new(
        id,
        "unsupported filter (zarrd implements delta, fixedscaleoffset, astype, quantize, bitround, vlen-utf8, \
         vlen-bytes and bytes -> bytes filters)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk::ChunkData;
    use crate::zarr::data_type::DataType;
    use crate::zarr::metadata::codec::parse_codec_chain;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn v3_chain(codecs: Value, dt: &DataType, shape: &[u64]) -> CodecResult<CodecChain> {
        let specs = parse_codec_chain(&codecs, "codecs", dt, shape).unwrap();
        let data_type = dt.clone();
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
            &DataType::Int32,
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
            json!([{"name": "numcodecs.packbits", "configuration": {}}, {"name": "bytes", "configuration": {"endian": "little"}}]),
            &DataType::Bool,
            &[4],
        )
        .unwrap_err();
        assert_eq!(e.codec, "packbits");
        assert!(v3_chain(
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.zstd", "configuration": {"level": 1}}]),
            &DataType::Float32,
            &[4],
        )
        .is_ok());
        assert!(v3_chain(json!(["bytes", "crc32c"]), &DataType::UInt8, &[4]).is_ok());
        let e = v3_chain(
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.lzma", "configuration": {}}]),
            &DataType::Float32,
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
        let e = chain_from_v2(&meta(json!([{"id": "fletcher32"}])), &r).unwrap_err();
        assert_eq!(e.codec, "fletcher32");
        assert!(chain_from_v2(&meta(json!([{"id": "shuffle", "elementsize": 4}])), &r).is_ok());
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
                    v3_chain(json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}]), &DataType::Float32, &[2, 3]).unwrap(),
                    repr(&[2, 3], DataType::Float32),
                ),
                1 => (v3_chain(json!(["vlen-utf8"]), &DataType::String, &[3]).unwrap(), repr(&[3], DataType::String)),
                _ => (
                    v3_chain(json!([{"name": "numcodecs.fixedscaleoffset", "configuration": {"offset": 1, "scale": 10, "dtype": "<f8", "astype": "|u1"}}, "bytes"]), &DataType::Float64, &[8]).unwrap(),
                    repr(&[8], DataType::Float64),
                ),
            };
            if let Err(e) = chain.decode(bytes, &r) {
                prop_assert!(!e.codec.is_empty());
            }
        }
    }
}
