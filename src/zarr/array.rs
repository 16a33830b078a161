//! The one normalised description of an array that the engine works from,
//! whatever metadata format it came from.
//!
//! Spec: Zarr v3 core §"Array metadata" and Zarr v2 §"Metadata". A v2
//! `.zarray` (+ `.zattrs`) and a v3 `zarr.json` both become an
//! [`ArrayDescription`]: shape, engine [`DataType`], regular chunk grid,
//! fill value as one element in the in-memory layout, the prepared
//! [`CodecChain`], the chunk key encoding, dimension names and attributes.
//! The v2 specifics (`order`, dtype byte order, `filters`, `compressor`)
//! become codecs ([`crate::zarr::codec::build`]); v2 `dimension_separator`
//! becomes the `v2` chunk key encoding; a v2 `null` fill value reads as zero,
//! as TensorStore does.
//!
//! Construction validates everything once; an unsupported feature is an
//! error naming it. The description is immutable and `Send + Sync`: share it
//! behind an `Arc`.

use std::sync::Arc;

use half::{bf16, f16};
use serde_json::{Map, Value};

use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::chunk_key::ChunkKeyEncoding;
use crate::zarr::codec::array_to_bytes::{BytesCodec, ShardingCodec};
use crate::zarr::codec::build::{chain_from_v2, chain_from_v3, sharding_from_v3};
use crate::zarr::codec::{ArrayToBytesCodec, CodecChain, CodecError};
use crate::zarr::data_type::{DataType, Field};
use crate::zarr::field::{FieldError, FieldView};
use crate::zarr::metadata::v2::dtype::{ByteOrder, DataTypeV2, StructuredFieldV2};
use crate::zarr::metadata::v2::{ArrayMetadataV2, Separator};
use crate::zarr::metadata::{ArrayMetadataV3, FillValue, FloatFill};
use crate::zarr::subset::RegularChunkGrid;

/// Why metadata cannot become an [`ArrayDescription`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    /// A feature zarrd does not implement (named in the message).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A fill value that does not fit the data type.
    #[error("fill_value: {0}")]
    FillValue(String),
    /// The codec chain could not be built.
    #[error("codecs: {0}")]
    Codec(#[from] CodecError),
    /// The array declares more than a configured limit allows (the message
    /// names the limit, the shape and the size).
    #[error("{0}")]
    TooLarge(String),
}

/// What one array may declare, checked when an array is created or opened
/// ([`ArrayDescription::check_limits`]) so that no request on it can need
/// more: the engine then relies on these bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayLimits {
    /// Largest decoded chunk, shard or inner chunk, in bytes.
    pub max_decoded_chunk_bytes: u64,
    /// Most inner chunks per shard.
    pub max_inner_chunks_per_shard: u64,
    /// Largest fill value, in bytes.
    pub max_fill_value_bytes: u64,
}

impl Default for ArrayLimits {
    fn default() -> Self {
        Self { max_decoded_chunk_bytes: 1 << 30, max_inner_chunks_per_shard: 1 << 16, max_fill_value_bytes: 64 << 10 }
    }
}

/// Bytes one decoded element takes in memory: its size, or for
/// variable-length types the per-element buffer (`Vec<u8>`) before any
/// content.
#[must_use]
pub fn element_bytes(dt: &DataType) -> u64 {
    dt.size().map_or(std::mem::size_of::<Vec<u8>>() as u64, |s| s as u64)
}

/// The decoded size of a chunk of `shape`; `None` when it overflows `u64`.
#[must_use]
pub fn decoded_bytes(shape: &[u64], dt: &DataType) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?.checked_mul(element_bytes(dt))
}

/// Which metadata format an array is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZarrFormat {
    /// `.zarray`.
    V2,
    /// `zarr.json`.
    V3,
}

/// An array, normalised.
#[derive(Debug)]
pub struct ArrayDescription {
    /// The metadata format.
    pub zarr_format: ZarrFormat,
    /// Array shape.
    pub shape: Vec<u64>,
    /// Element type.
    pub data_type: DataType,
    /// Shape of every chunk (edge chunks included).
    pub chunk_shape: Vec<u64>,
    /// One element in the in-memory layout (little-endian; bytes for
    /// variable-length types).
    pub fill_value: Vec<u8>,
    /// The prepared codec chain.
    pub codecs: CodecChain,
    /// How chunk coordinates become keys.
    pub chunk_key_encoding: ChunkKeyEncoding,
    /// Dimension names (`None` entries are unnamed).
    pub dimension_names: Option<Vec<Option<String>>>,
    /// User attributes.
    pub attributes: Map<String, Value>,
    /// The sharding codec when the chain is exactly one `sharding_indexed`
    /// codec: region reads then fetch only the inner chunks they need.
    pub sharding: Option<Arc<ShardingCodec>>,
}

impl ArrayDescription {
    /// Checks the array against `limits`: the decoded size of its chunks
    /// (shards) and, when sharded, of its inner chunks and the number of
    /// inner chunks per shard; the size of its fill value.
    ///
    /// # Errors
    /// [`ArrayError::TooLarge`] naming the limit, the shape and the size.
    pub fn check_limits(&self, limits: &ArrayLimits) -> Result<(), ArrayError> {
        let fill = self.fill_value.len() as u64;
        if fill > limits.max_fill_value_bytes {
            return Err(ArrayError::TooLarge(format!(
                "fill_value: {fill} bytes, more than limits.max_fill_value_bytes = {}",
                limits.max_fill_value_bytes
            )));
        }
        let max = limits.max_decoded_chunk_bytes;
        // A variable-length chunk filled with the fill value holds a copy of
        // it per element: that is its decoded size before any data.
        let per_fill = if self.data_type.is_variable() { self.fill_value.len() as u64 } else { 0 };
        let size = |shape: &[u64]| {
            let n = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
            n.checked_mul(element_bytes(&self.data_type).checked_add(per_fill)?)
        };
        let check_chunk = |what: &str, shape: &[u64]| match size(shape) {
            Some(n) if n <= max => Ok(()),
            n => Err(ArrayError::TooLarge(format!(
                "the {what} shape {shape:?} of {:?} is {} bytes decoded, more than \
                 limits.max_decoded_chunk_bytes = {max}",
                self.data_type,
                n.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
            ))),
        };
        // A shard is never decoded whole (reads and writes work per inner
        // chunk); it is bounded by its inner chunks and their number.
        if let Some(sharding) = &self.sharding {
            check_chunk("inner chunk", sharding.inner_chunk_shape())?;
            let outer = sharding.chunks_per_shard().iter().fold(1u64, |a, &d| a.saturating_mul(d));
            // A shard nested in each inner chunk counts its own inner chunks
            // (and theirs): each is a decode of its own.
            let nested = sharding.units_per_inner_chunk();
            let per_shard = outer.saturating_mul(nested);
            if per_shard > limits.max_inner_chunks_per_shard {
                let nesting = if nested > 1 {
                    format!(" each of them a shard of {nested} chunks (nested sharding),")
                } else {
                    String::new()
                };
                return Err(ArrayError::TooLarge(format!(
                    "a shard of shape {:?} holds {outer} inner chunks of shape {:?} (a {}-byte index),{nesting} \
                     {per_shard} in all, more than limits.max_inner_chunks_per_shard = {}",
                    self.chunk_shape,
                    sharding.inner_chunk_shape(),
                    sharding.index_size(),
                    limits.max_inner_chunks_per_shard
                )));
            }
        } else {
            check_chunk("chunk", &self.chunk_shape)?;
        }
        Ok(())
    }

    /// Normalises a parsed `zarr.json`.
    ///
    /// # Errors
    /// Unsupported codecs (named), fill values that do not fit.
    pub fn from_v3(meta: &ArrayMetadataV3) -> Result<Self, ArrayError> {
        let data_type = meta.data_type.clone();
        let fill_value = fill_value_bytes(&meta.fill_value, &data_type)?;
        let chunk_shape = meta.chunk_grid.chunk_shape().to_vec();
        let repr =
            ChunkRepr { shape: chunk_shape.clone(), data_type: data_type.clone(), fill_value: fill_value.clone() };
        let codecs = chain_from_v3(&meta.codecs, &repr)?;
        let sharding = sharding_from_v3(&meta.codecs, &repr)?.map(Arc::new);
        Ok(Self {
            zarr_format: ZarrFormat::V3,
            shape: meta.shape.clone(),
            data_type,
            chunk_shape,
            fill_value,
            codecs,
            chunk_key_encoding: meta.chunk_key_encoding.into(),
            dimension_names: meta.dimension_names.clone(),
            attributes: meta.attributes.clone(),
            sharding,
        })
    }

    /// Normalises a parsed `.zarray` and its `.zattrs` (empty when absent).
    ///
    /// # Errors
    /// Unsupported dtypes, filters or compressors (named), fill values that
    /// do not fit.
    pub fn from_v2(meta: &ArrayMetadataV2, attributes: Map<String, Value>) -> Result<Self, ArrayError> {
        let data_type = data_type_v2(meta)?;
        let fill_value = fill_value_bytes(&meta.fill_value, &data_type)?;
        let repr =
            ChunkRepr { shape: meta.chunks.clone(), data_type: data_type.clone(), fill_value: fill_value.clone() };
        let codecs = chain_from_v2(meta, &repr)?;
        let separator = match meta.dimension_separator.unwrap_or(Separator::Dot) {
            Separator::Dot => '.',
            Separator::Slash => '/',
        };
        Ok(Self {
            zarr_format: ZarrFormat::V2,
            shape: meta.shape.clone(),
            data_type,
            chunk_shape: meta.chunks.clone(),
            fill_value,
            codecs,
            chunk_key_encoding: ChunkKeyEncoding::V2 { separator },
            dimension_names: None,
            attributes,
            sharding: None,
        })
    }

    /// The most bytes a stored chunk (a shard, for a sharded array) can
    /// take ([`CodecChain::max_stored_size`]): a reader refuses a larger
    /// stored value as damaged before reading it.
    #[must_use]
    pub fn max_stored_chunk_bytes(&self) -> u64 {
        self.codecs.max_stored_size(&self.chunk_repr())
    }

    /// The representation of one decoded chunk.
    #[must_use]
    pub fn chunk_repr(&self) -> ChunkRepr {
        ChunkRepr {
            shape: self.chunk_shape.clone(),
            data_type: self.data_type.clone(),
            fill_value: self.fill_value.clone(),
        }
    }

    /// The chunk grid.
    #[must_use]
    pub fn grid(&self) -> RegularChunkGrid {
        // Shapes were validated (same rank, chunk extents >= 1) by the metadata parsers.
        RegularChunkGrid::new(self.shape.clone(), self.chunk_shape.clone())
            .unwrap_or_else(|_| RegularChunkGrid::new(Vec::new(), Vec::new()).expect("empty grid"))
    }

    /// The store key (relative to the array) of the chunk at `coords`.
    #[must_use]
    pub fn chunk_key(&self, coords: &[u64]) -> String {
        self.chunk_key_encoding.encode(coords)
    }

    /// Decodes stored chunk bytes.
    ///
    /// # Errors
    /// Bytes that are not a valid encoding of a chunk (the error names the codec).
    pub fn decode_chunk(&self, bytes: Vec<u8>) -> Result<ChunkData, CodecError> {
        // The process-wide decode budget (see `codec::budget`).
        let expected = decoded_bytes(&self.chunk_shape, &self.data_type).unwrap_or(u64::MAX);
        let _budget = crate::zarr::codec::budget::reserve(expected);
        self.codecs.decode(bytes, &self.chunk_repr())
    }

    /// One field of a structured array, to read or write as an array of its
    /// own (subarray dimensions appended), as TensorStore's `field` does.
    ///
    /// # Errors
    /// The array is not structured, or has no field of that name.
    pub fn field(&self, name: &str) -> Result<FieldView, FieldError> {
        FieldView::of(&self.data_type, name)
    }

    /// Encodes a decoded chunk.
    ///
    /// # Errors
    /// Data that does not match the chunk representation.
    pub fn encode_chunk(&self, data: ChunkData) -> Result<Vec<u8>, CodecError> {
        self.codecs.encode(data, &self.chunk_repr())
    }
}

/// The engine type of a v2 dtype.
fn data_type_v2(meta: &ArrayMetadataV2) -> Result<DataType, ArrayError> {
    match &meta.dtype {
        DataTypeV2::Scalar { data_type, .. } => Ok(data_type.clone()),
        DataTypeV2::Object => {
            let ids: Vec<&str> = meta.filters.iter().flatten().map(|f| f.id.as_str()).collect();
            if ids.contains(&"vlen-utf8") {
                Ok(DataType::String)
            } else if ids.contains(&"vlen-bytes") {
                Ok(DataType::Bytes)
            } else {
                Err(ArrayError::Unsupported(format!(
                    "object (|O) arrays with filters {ids:?}; zarrd reads vlen-utf8 and vlen-bytes"
                )))
            }
        }
        DataTypeV2::Structured(fields) => {
            let mut out = Vec::new();
            let size = flatten_structured(fields, 0, "", &mut out)?;
            Ok(DataType::Structured { size, fields: out })
        }
    }
}

/// Flattens nested structured fields into dotted names with absolute offsets.
fn flatten_structured(
    fields: &[StructuredFieldV2],
    base: usize,
    prefix: &str,
    out: &mut Vec<Field>,
) -> Result<usize, ArrayError> {
    let mut offset = base;
    for f in fields {
        let name = format!("{prefix}{}", f.name);
        match &f.dtype {
            DataTypeV2::Scalar { byte_order, data_type } => {
                let dt = data_type.clone();
                let count = f.shape.iter().product::<u64>();
                let len = usize::try_from(count)
                    .ok()
                    .and_then(|c| c.checked_mul(dt.size().unwrap_or(0)))
                    .ok_or_else(|| ArrayError::Unsupported(format!("structured field {name} is too large")))?;
                out.push(Field {
                    name,
                    offset,
                    data_type: Box::new(dt),
                    big_endian: *byte_order == ByteOrder::Big,
                    subarray: f.shape.clone(),
                });
                offset += len;
            }
            DataTypeV2::Structured(inner) if f.shape.is_empty() => {
                offset = flatten_structured(inner, offset, &format!("{name}."), out)?;
            }
            DataTypeV2::Structured(_) => {
                return Err(ArrayError::Unsupported(format!(
                    "structured field {name}: nested records with a subarray shape"
                )))
            }
            DataTypeV2::Object => return Err(ArrayError::Unsupported(format!("object field {name}"))),
        }
    }
    Ok(offset)
}

fn float_bytes(f: &FloatFill, dt: &DataType) -> Result<Vec<u8>, ArrayError> {
    let size = dt.size().unwrap_or(0);
    let value = match *f {
        FloatFill::Bits { bits, size_bytes } => {
            if usize::from(size_bytes) != size {
                return Err(ArrayError::FillValue(format!("a {size_bytes}-byte bit pattern for {dt:?}")));
            }
            return Ok(bits.to_le_bytes()[..size].to_vec());
        }
        FloatFill::NaN => f64::NAN,
        FloatFill::Infinity => f64::INFINITY,
        FloatFill::NegInfinity => f64::NEG_INFINITY,
        FloatFill::Number(n) => n,
    };
    Ok(match dt {
        DataType::Float8(kind) => vec![kind
            .from_f64(value)
            .ok_or_else(|| ArrayError::FillValue(format!("{value} is not a value of {}", kind.name())))?],
        // The canonical quiet NaN of each type (zero payload).
        DataType::Float16 if value.is_nan() => 0x7e00u16.to_le_bytes().to_vec(),
        DataType::BFloat16 if value.is_nan() => 0x7fc0u16.to_le_bytes().to_vec(),
        DataType::Float32 if value.is_nan() => 0x7fc0_0000u32.to_le_bytes().to_vec(),
        _ if value.is_nan() => 0x7ff8_0000_0000_0000u64.to_le_bytes().to_vec(),
        DataType::Float16 => f16::from_f64(value).to_le_bytes().to_vec(),
        DataType::BFloat16 => bf16::from_f64(value).to_le_bytes().to_vec(),
        DataType::Float32 => (value as f32).to_le_bytes().to_vec(),
        _ => value.to_le_bytes().to_vec(),
    })
}

/// A fill value as one element in the in-memory layout of `dt`.
///
/// # Errors
/// When the value's form does not fit the data type (length, kind).
pub fn fill_value_bytes(fill: &FillValue, dt: &DataType) -> Result<Vec<u8>, ArrayError> {
    let size = dt.size();
    let mismatch = || ArrayError::FillValue(format!("{fill:?} is not a value of data type {dt:?}"));
    let exact = |b: &[u8]| if Some(b.len()) == size { Ok(b.to_vec()) } else { Err(mismatch()) };
    let padded = |b: &[u8]| match size {
        Some(n) if b.len() <= n => {
            let mut v = b.to_vec();
            v.resize(n, 0);
            Ok(v)
        }
        _ => Err(mismatch()),
    };
    match (fill, dt) {
        (FillValue::Null, _) => Ok(vec![0; size.unwrap_or(0)]),
        (FillValue::Bool(b), DataType::Bool) => Ok(vec![u8::from(*b)]),
        (FillValue::Int(n), _) if !dt.is_variable() && size.is_some_and(|s| s <= 8) && !is_float(dt) => {
            Ok(n.to_le_bytes()[..size.unwrap_or(0)].to_vec())
        }
        (FillValue::UInt(n), _) if size.is_some_and(|s| s <= 8) && !is_float(dt) => {
            Ok(n.to_le_bytes()[..size.unwrap_or(0)].to_vec())
        }
        (
            FillValue::Float(f),
            DataType::Float16 | DataType::BFloat16 | DataType::Float8(_) | DataType::Float32 | DataType::Float64,
        ) => float_bytes(f, dt),
        (FillValue::Complex(re, im), DataType::Complex64 | DataType::Complex128) => {
            let part = if *dt == DataType::Complex64 { DataType::Float32 } else { DataType::Float64 };
            Ok([float_bytes(re, &part)?, float_bytes(im, &part)?].concat())
        }
        (FillValue::String(s), DataType::String) => Ok(s.as_bytes().to_vec()),
        (FillValue::String(s), DataType::FixedUtf32(_)) => {
            padded(&s.chars().flat_map(|c| u32::from(c).to_le_bytes()).collect::<Vec<u8>>())
        }
        (FillValue::Bytes(b), DataType::Bytes) => Ok(b.clone()),
        (FillValue::Bytes(b), DataType::FixedBytes(_)) => padded(b),
        (FillValue::Bytes(b) | FillValue::RawBits(b), DataType::RawBits(_) | DataType::RawBytes(_)) => exact(b),
        (FillValue::Bytes(b), DataType::Structured { .. }) => {
            // Stored layout (numpy, per-field byte order) -> in-memory layout.
            let repr = ChunkRepr { shape: Vec::new(), data_type: dt.clone(), fill_value: Vec::new() };
            match BytesCodec::new(None).decode(exact(b)?, &repr) {
                Ok(ChunkData::Fixed(v)) => Ok(v),
                _ => Err(mismatch()),
            }
        }
        // v2 object arrays.
        (FillValue::Json(Value::String(s)), DataType::String | DataType::Bytes) => Ok(s.as_bytes().to_vec()),
        (FillValue::Json(Value::Number(n)), DataType::String | DataType::Bytes) => Ok(n.to_string().into_bytes()),
        _ => Err(mismatch()),
    }
}

fn is_float(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Float16
            | DataType::BFloat16
            | DataType::Float8(_)
            | DataType::Float32
            | DataType::Float64
            | DataType::Complex64
            | DataType::Complex128
    )
}

#[cfg(test)]
mod tests;
