//! The `bytes` codec: fixed-size elements as packed bytes in a chosen
//! endianness.
//!
//! Spec: Zarr v3 `codecs/bytes` (`endian`: `"little"` or `"big"`, absent for
//! one-byte types). Complex numbers swap each component; UTF-32 text swaps
//! each code unit; v2 structured types swap the fields that are big-endian
//! on disk (their own byte order, not the codec's).
//!
//! Decoding with the host's (little) endianness is a move of the stored
//! buffer, not a copy. Decoded `bool` bytes must be 0 or 1; `int4` keeps the
//! low nibble, sign-extended (as TensorStore reads it); encoding `int4`
//! checks the range -8..=7 and writes the low nibble (as TensorStore writes
//! it).

use serde::Serialize;

mod swap;
pub(crate) use swap::swap_units;

use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::codec::registry::{BuiltCodec, CodecConfig, ParseContext};
use crate::zarr::codec::{ArrayToBytesCodec, CodecError, CodecResult};
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::error::{MetadataError, Result};
use crate::zarr::metadata::json::enum_str;

const NAME: &str = "bytes";

/// Byte order for the `bytes` codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Endian {
    /// `"little"`.
    Little,
    /// `"big"`.
    Big,
}

/// `bytes` codec configuration (v3): `{"endian": "little" | "big"}`.
///
/// ```
/// # use zarrd::zarr::codec::array_to_bytes::bytes::{BytesConfig, Endian};
/// let c = BytesConfig { endian: Some(Endian::Little) };
/// assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"endian":"little"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BytesConfig {
    /// Required for multi-byte data types, absent or ignored otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endian: Option<Endian>,
}

impl BytesConfig {
    /// Parses a v3 configuration for the data type entering the codec: it
    /// must be fixed-size, and multi-byte types need an `endian`.
    pub(crate) fn parse(cx: &mut ParseContext<'_, '_>) -> Result<Self> {
        let cfg = &mut cx.cfg;
        let endian = match cfg.optional("endian") {
            Some(v) => Some(match enum_str(v, &cfg.at("endian"), &["little", "big"])? {
                "little" => Endian::Little,
                _ => Endian::Big,
            }),
            None => None,
        };
        if let Some(dt) = &cx.state.data_type {
            if dt.is_variable() {
                let use_instead = if *dt == DataType::String { "vlen-utf8" } else { "vlen-bytes" };
                return Err(MetadataError::new(
                    cx.path,
                    format!(
                        "the bytes codec cannot encode the variable-length data type \"{}\"; \
                         use {use_instead}",
                        dt.name()
                    ),
                ));
            }
            if endian.is_none() && dt.endianness_matters() {
                return Err(MetadataError::new(
                    cfg.at("endian"),
                    format!("required for the multi-byte data type {}; expected \"little\" or \"big\"", dt.name()),
                ));
            }
        }
        cfg.deny_rest("\"endian\"")?;
        Ok(Self { endian })
    }

    /// The codec.
    #[must_use]
    pub fn build(&self) -> BytesCodec {
        BytesCodec::new(self.endian)
    }
}

impl CodecConfig for BytesConfig {
    fn to_json(&self) -> Option<serde_json::Value> {
        self.endian.and_then(|_| serde_json::to_value(self).ok())
    }

    fn is_fixed_size(&self) -> bool {
        true
    }

    fn build(&self, entering: &ChunkRepr) -> CodecResult<BuiltCodec> {
        let codec = BytesConfig::build(self);
        codec.validate(entering)?;
        Ok(BuiltCodec::ArrayToBytes(Box::new(codec)))
    }
}

/// The `bytes` codec, prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesCodec {
    endian: Option<Endian>,
}

impl BytesCodec {
    /// A `bytes` codec with the given `endian` (`None`: one-byte types only,
    /// or types with no byte order such as structured records).
    #[must_use]
    pub fn new(endian: Option<Endian>) -> Self {
        Self { endian }
    }

    /// Checks that the codec can encode `repr` (fixed size; an endian when
    /// the type needs one).
    ///
    /// # Errors
    /// Variable-length types, or a multi-byte type without `endian`.
    pub fn validate(&self, repr: &ChunkRepr) -> CodecResult<()> {
        let dt = &repr.data_type;
        if dt.is_variable() {
            return Err(CodecError::new(NAME, format!("cannot encode the variable-length data type {dt:?}")));
        }
        if self.endian.is_none() && dt.swap_unit() > 1 {
            return Err(CodecError::new(NAME, format!("endian is required for the multi-byte data type {dt:?}")));
        }
        Ok(())
    }

    fn swap(&self, bytes: &mut [u8], dt: &DataType) {
        if let DataType::Structured { size, fields } = dt {
            for f in fields.iter().filter(|f| f.big_endian) {
                let unit = f.data_type.swap_unit();
                let count: u64 = f.subarray.iter().product();
                let len = f.data_type.size().unwrap_or(0) * usize::try_from(count).unwrap_or(0);
                if unit > 1 && *size > 0 {
                    for record in bytes.chunks_exact_mut(*size) {
                        if let Some(field) = record.get_mut(f.offset..f.offset + len) {
                            field.chunks_exact_mut(unit).for_each(<[u8]>::reverse);
                        }
                    }
                }
            }
            return;
        }
        let unit = dt.swap_unit();
        if self.endian == Some(Endian::Big) && unit > 1 {
            swap_units(bytes, unit);
        }
    }
}

fn expected_len(repr: &ChunkRepr) -> CodecResult<usize> {
    repr.num_bytes().ok_or_else(|| CodecError::new(NAME, format!("chunk shape {:?} is too large", repr.shape)))
}

impl ArrayToBytesCodec for BytesCodec {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, decoded: &ChunkRepr) -> Option<u64> {
        decoded.num_bytes().map(|n| n as u64)
    }

    /// Elements as stored, swapped or not: every fixed-size type but
    /// `bool` and `int4` (their decode checks or rewrites every byte) and
    /// structured types with big-endian fields (swapped per field).
    fn byte_layout(&self, decoded: &ChunkRepr) -> Option<usize> {
        let dt = &decoded.data_type;
        match dt {
            DataType::Bool | DataType::Int4 => None,
            _ if self.validate(decoded).is_err() => None,
            DataType::Structured { fields, .. } => fields.iter().all(|f| !f.big_endian).then_some(1),
            _ if self.endian == Some(Endian::Big) && dt.swap_unit() > 1 => Some(dt.swap_unit()),
            _ => Some(1),
        }
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<Vec<u8>> {
        self.validate(decoded)?;
        let ChunkData::Fixed(mut bytes) = data else {
            return Err(CodecError::new(NAME, "expected fixed-size elements, got variable-length data"));
        };
        let want = expected_len(decoded)?;
        if bytes.len() != want {
            return Err(CodecError::new(NAME, format!("expected {want} bytes of decoded data, got {}", bytes.len())));
        }
        match decoded.data_type {
            DataType::Bool => {
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    return Err(CodecError::new(NAME, format!("bool element {i} is {} (expected 0 or 1)", bytes[i])));
                }
            }
            DataType::Int4 => {
                if let Some(i) = bytes.iter().position(|&b| !(-8..=7).contains(&i8::from_le_bytes([b]))) {
                    return Err(CodecError::new(
                        NAME,
                        format!("int4 element {i} is {} (expected -8..=7)", i8::from_le_bytes([bytes[i]])),
                    ));
                }
                bytes.iter_mut().for_each(|b| *b &= 0x0f);
            }
            _ => self.swap(&mut bytes, &decoded.data_type),
        }
        Ok(bytes)
    }

    fn decode(&self, bytes: Vec<u8>, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        self.validate(decoded)?;
        let mut bytes = bytes;
        let want = expected_len(decoded)?;
        if bytes.len() != want {
            return Err(CodecError::new(
                NAME,
                format!(
                    "expected {want} bytes for a chunk of shape {:?} and data type {:?}, got {}",
                    decoded.shape,
                    decoded.data_type,
                    bytes.len()
                ),
            ));
        }
        match decoded.data_type {
            DataType::Bool => {
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    return Err(CodecError::new(
                        NAME,
                        format!("bool element {i} is stored as {} (expected 0 or 1)", bytes[i]),
                    ));
                }
            }
            // Sign-extend the low nibble, as TensorStore does.
            DataType::Int4 => bytes.iter_mut().for_each(|b| *b = (((*b << 4) as i8) >> 4) as u8),
            _ => self.swap(&mut bytes, &decoded.data_type),
        }
        Ok(ChunkData::Fixed(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::data_type::Field;
    use proptest::prelude::*;

    fn repr(dt: DataType, shape: &[u64]) -> ChunkRepr {
        let size = dt.size().unwrap_or(0);
        ChunkRepr { shape: shape.to_vec(), data_type: dt, fill_value: vec![0; size] }
    }

    #[test]
    fn little_endian_decode_is_a_move() {
        let codec = BytesCodec::new(Some(Endian::Little));
        let stored: Vec<u8> = (0u8..32).collect();
        let ptr = stored.as_ptr();
        let ChunkData::Fixed(out) = codec.decode(stored, &repr(DataType::Float32, &[2, 4])).unwrap() else { panic!() };
        assert_eq!(out.as_ptr(), ptr);
        let ptr = out.as_ptr();
        let enc = codec.encode(ChunkData::Fixed(out), &repr(DataType::Float32, &[2, 4])).unwrap();
        assert_eq!(enc.as_ptr(), ptr);
    }

    #[test]
    fn big_endian_and_complex() {
        let codec = BytesCodec::new(Some(Endian::Big));
        // numpy: np.array([1+2j], dtype='>c8').tobytes()
        let stored = vec![0x3f, 0x80, 0, 0, 0x40, 0, 0, 0];
        let ChunkData::Fixed(out) = codec.decode(stored, &repr(DataType::Complex64, &[1])).unwrap() else { panic!() };
        assert_eq!(out, [1f32.to_le_bytes(), 2f32.to_le_bytes()].concat());
        // np.array([258], dtype='>u2').tobytes()
        let ChunkData::Fixed(out) = codec.decode(vec![1, 2], &repr(DataType::UInt16, &[1])).unwrap() else { panic!() };
        assert_eq!(out, 258u16.to_le_bytes());
    }

    #[test]
    fn bool_and_int4() {
        let codec = BytesCodec::new(None);
        let e = codec.decode(vec![0, 1, 2], &repr(DataType::Bool, &[3])).unwrap_err();
        assert_eq!(e.codec, "bytes");
        assert!(codec.encode(ChunkData::Fixed(vec![0, 3]), &repr(DataType::Bool, &[2])).is_err());
        // TensorStore writes -8, -1, 3, 7 as 08 0f 03 07.
        let enc = codec.encode(ChunkData::Fixed(vec![0xf8, 0xff, 3, 7]), &repr(DataType::Int4, &[4])).unwrap();
        assert_eq!(enc, vec![0x08, 0x0f, 0x03, 0x07]);
        let ChunkData::Fixed(dec) = codec.decode(enc, &repr(DataType::Int4, &[4])).unwrap() else { panic!() };
        assert_eq!(dec, vec![0xf8, 0xff, 3, 7]);
        assert!(codec.encode(ChunkData::Fixed(vec![8]), &repr(DataType::Int4, &[1])).is_err());
    }

    #[test]
    fn structured_big_endian_fields() {
        // np.dtype([('a', '>u2'), ('b', '<u2'), ('c', '|u1')])
        let field = |name: &str, offset, dt, big_endian| Field {
            name: name.into(),
            offset,
            data_type: Box::new(dt),
            big_endian,
            subarray: vec![],
        };
        let dt = DataType::Structured {
            size: 5,
            fields: vec![
                field("a", 0, DataType::UInt16, true),
                field("b", 2, DataType::UInt16, false),
                field("c", 4, DataType::UInt8, false),
            ],
        };
        let codec = BytesCodec::new(None);
        let ChunkData::Fixed(out) = codec.decode(vec![1, 2, 3, 4, 5], &repr(dt, &[1])).unwrap() else { panic!() };
        assert_eq!(out, vec![2, 1, 3, 4, 5]);
    }

    #[test]
    fn hostile_sizes() {
        let codec = BytesCodec::new(Some(Endian::Little));
        let e = codec.decode(vec![0; 7], &repr(DataType::Float64, &[1])).unwrap_err();
        assert_eq!(e.codec, "bytes");
        assert!(codec.decode(vec![0; 9], &repr(DataType::Float64, &[1])).is_err());
        assert!(codec.encode(ChunkData::Variable(vec![]), &repr(DataType::UInt8, &[0])).is_err());
        assert!(codec.decode(vec![], &repr(DataType::String, &[0])).is_err());
        assert!(BytesCodec::new(None).decode(vec![0; 8], &repr(DataType::Float64, &[1])).is_err());
    }

    fn fixed_types() -> Vec<DataType> {
        vec![
            DataType::Int8,
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::UInt8,
            DataType::UInt16,
            DataType::UInt32,
            DataType::UInt64,
            DataType::Float16,
            DataType::BFloat16,
            DataType::Float32,
            DataType::Float64,
            DataType::Complex64,
            DataType::Complex128,
            DataType::DateTime64(crate::zarr::data_type::TimeUnit::new("ns", 1).unwrap()),
            DataType::TimeDelta64(crate::zarr::data_type::TimeUnit::new("s", 1).unwrap()),
            DataType::FixedUtf32(3),
            DataType::FixedBytes(5),
            DataType::RawBits(3),
        ]
    }

    proptest! {
        #[test]
        fn round_trip_every_fixed_type(t in 0usize..19, n in 0u64..20, big in any::<bool>(), seed in any::<u64>()) {
            let dt = fixed_types()[t].clone();
            let r = repr(dt.clone(), &[n]);
            let len = r.num_bytes().unwrap();
            let data: Vec<u8> = (0..len).map(|i| (seed.rotate_left(i as u32 % 64) as u8) ^ i as u8).collect();
            let codec = BytesCodec::new(Some(if big { Endian::Big } else { Endian::Little }));
            let enc = codec.encode(ChunkData::Fixed(data.clone()), &r).unwrap();
            // Big endian reverses each swap unit; little leaves the bytes alone.
            let unit = dt.swap_unit();
            for (i, chunk) in enc.chunks(unit).enumerate() {
                let orig = &data[i * unit..(i + 1) * unit];
                if big { prop_assert!(chunk.iter().eq(orig.iter().rev())); } else { prop_assert_eq!(chunk, orig); }
            }
            prop_assert_eq!(codec.decode(enc, &r).unwrap(), ChunkData::Fixed(data));
        }
    }

    use crate::zarr::codec::registry::parse_for_test as chain;

    #[test]
    fn configuration() {
        use crate::zarr::data_type::DataType as D;
        let entry = serde_json::json!({"name": "bytes", "configuration": {"endian": "big"}});
        let specs = chain(serde_json::json!([entry]), &D::Float64, &[4]).unwrap();
        assert_eq!(specs[0].config::<BytesConfig>(), Some(&BytesConfig { endian: Some(Endian::Big) }));
        assert_eq!(serde_json::to_value(&specs[0]).unwrap(), entry);
        assert_eq!(BytesConfig { endian: Some(Endian::Big) }.build(), BytesCodec::new(Some(Endian::Big)));
        // One-byte types need no endian; multi-byte types do.
        assert!(chain(serde_json::json!(["bytes"]), &D::UInt8, &[4]).is_ok());
        let e = chain(serde_json::json!(["bytes"]), &D::Float64, &[4]).unwrap_err();
        assert_eq!(e.path, "codecs[0].configuration.endian");
        let e = chain(serde_json::json!(["bytes"]), &D::String, &[4]).unwrap_err();
        assert_eq!(e.path, "codecs[0]");
        assert!(e.message.contains("use vlen-utf8"), "{e}");
        let e = chain(serde_json::json!([{"name": "bytes", "configuration": {"endian": "middle"}}]), &D::UInt16, &[4])
            .unwrap_err();
        assert_eq!(e.path, "codecs[0].configuration.endian");
    }
}
