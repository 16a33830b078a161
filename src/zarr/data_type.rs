//! Data types as the engine sees them: how many bytes an element takes and
//! what its bytes mean. Parsed metadata types (`metadata::DataType`,
//! `metadata::v2::dtype::DataTypeV2`) normalise into this.
//!
//! Spec: Zarr v3 core §"Data types"; Zarr v2 §"Data type encoding";
//! TensorStore's zarr and zarr3 driver data type tables.
//!
//! In-memory element layout (decoded chunks, fill values): fixed-size
//! elements in **little-endian** byte order, C order. Variable-length
//! elements (`String`, `Bytes`) are one byte string per element.
//!
//! What the document types and this one share is defined here, once: the
//! time unit of `datetime64` / `timedelta64` ([`TimeUnit`]) and the float8
//! formats with their conversions ([`float8`]). The document types
//! ([`crate::zarr::metadata::DataType`], v3 names;
//! [`crate::zarr::metadata::DataTypeV2`], numpy strings) keep how a type was
//! spelled, which decides its fill value form and what is written back.

pub mod float8;

use std::fmt;

pub use self::float8::Float8Kind;

/// Base units of `numpy.datetime64` / `numpy.timedelta64` (and v2 `M8[..]` /
/// `m8[..]`), as accepted by zarr-python 3.1.
pub const TIME_UNITS: &[&str] =
    &["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as", "generic"];

/// A unit of `datetime64` / `timedelta64`: a base unit and a multiplier
/// (`M8[10ms]` is `ms` × 10). Displays as numpy writes it inside the
/// brackets: `ms`, `10ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimeUnit {
    base: &'static str,
    scale_factor: u32,
}

impl TimeUnit {
    /// `base` (one of [`TIME_UNITS`]) times `scale_factor` (at least 1).
    #[must_use]
    pub fn new(base: &str, scale_factor: u32) -> Option<Self> {
        let base = TIME_UNITS.iter().find(|u| **u == base)?;
        (scale_factor >= 1).then_some(Self { base, scale_factor })
    }

    /// The base unit as written in metadata (`"ms"`, `"generic"`, ...).
    #[must_use]
    pub fn base(self) -> &'static str {
        self.base
    }

    /// The multiplier of the base unit (1 for plain `M8[s]`).
    #[must_use]
    pub fn scale_factor(self) -> u32 {
        self.scale_factor
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scale_factor == 1 {
            f.write_str(self.base)
        } else {
            write!(f, "{}{}", self.scale_factor, self.base)
        }
    }
}

/// One field of a structured (v2 record) data type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// Byte offset of the field inside one record.
    pub offset: usize,
    /// The field's element type (never `Structured` itself: nested structures
    /// are flattened into dotted names by the normaliser where needed).
    pub data_type: Box<DataType>,
    /// Big-endian on disk (v2 `>` fields); in memory every field is little-endian.
    pub big_endian: bool,
    /// Subarray shape appended to the array's dimensions when the field is read.
    pub subarray: Vec<u64>,
}

/// A data type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float16,
    BFloat16,
    Float32,
    Float64,
    Complex64,
    Complex128,
    /// TensorStore's `int4`: one element per byte, sign-extended in memory.
    Int4,
    /// TensorStore's float8 variants (v2): one byte, carried as stored.
    Float8(Float8Kind),
    /// `r<bits>` / v2 `|V<n>`: opaque bytes.
    RawBits(usize),
    /// v2 `|S<n>` / zarr-python `null_terminated_bytes`: fixed-length bytes.
    FixedBytes(usize),
    /// v2 `<U<n>` / zarr-python `fixed_length_utf32`: `n` UTF-32 code units.
    FixedUtf32(usize),
    /// `datetime64[unit]`: an 8-byte integer count of units.
    DateTime64(TimeUnit),
    /// `timedelta64[unit]`: an 8-byte integer count of units.
    TimeDelta64(TimeUnit),
    /// A v2 structured record of `size` bytes.
    Structured {
        size: usize,
        fields: Vec<Field>,
    },
    /// Variable-length UTF-8 (`string`, v2 `|O` + `vlen-utf8`).
    String,
    /// Variable-length bytes (`bytes`/`variable_length_bytes`, v2 `|O` + `vlen-bytes`).
    Bytes,
}

impl DataType {
    /// Bytes per element, or `None` for variable-length types.
    #[must_use]
    pub fn size(&self) -> Option<usize> {
        Some(match self {
            Self::Bool | Self::Int8 | Self::UInt8 | Self::Int4 | Self::Float8(_) => 1,
            Self::Int16 | Self::UInt16 | Self::Float16 | Self::BFloat16 => 2,
            Self::Int32 | Self::UInt32 | Self::Float32 => 4,
            Self::Int64 | Self::UInt64 | Self::Float64 | Self::Complex64 => 8,
            Self::DateTime64(_) | Self::TimeDelta64(_) => 8,
            Self::Complex128 => 16,
            Self::RawBits(n) | Self::FixedBytes(n) | Self::Structured { size: n, .. } => *n,
            Self::FixedUtf32(n) => n * 4,
            Self::String | Self::Bytes => return None,
        })
    }

    /// The size of the unit the `bytes` codec swaps for endianness: the whole
    /// element for numbers, each component for complex numbers, 4 for
    /// UTF-32, 1 (no swapping) for byte-like, raw and structured types.
    #[must_use]
    pub fn swap_unit(&self) -> usize {
        match self {
            Self::Complex64 => 4,
            Self::Complex128 => 8,
            Self::FixedUtf32(_) => 4,
            Self::RawBits(_) | Self::FixedBytes(_) | Self::Structured { .. } | Self::String | Self::Bytes => 1,
            other => other.size().unwrap_or(1),
        }
    }

    /// True for variable-length types.
    #[must_use]
    pub fn is_variable(&self) -> bool {
        self.size().is_none()
    }
}

impl From<&crate::zarr::metadata::DataType> for DataType {
    /// The engine type of a parsed (v3-named) data type. Structured fields
    /// are packed in order and little-endian (zarr-python's v3 `structured`).
    fn from(dt: &crate::zarr::metadata::DataType) -> Self {
        use crate::zarr::metadata::DataType as M;
        match dt {
            M::Bool => Self::Bool,
            M::Int4 => Self::Int4,
            M::Int8 => Self::Int8,
            M::Int16 => Self::Int16,
            M::Int32 => Self::Int32,
            M::Int64 => Self::Int64,
            M::UInt8 => Self::UInt8,
            M::UInt16 => Self::UInt16,
            M::UInt32 => Self::UInt32,
            M::UInt64 => Self::UInt64,
            M::Float16 => Self::Float16,
            M::BFloat16 => Self::BFloat16,
            M::Float8(kind) => Self::Float8(*kind),
            M::Float32 => Self::Float32,
            M::Float64 => Self::Float64,
            M::Complex64 => Self::Complex64,
            M::Complex128 => Self::Complex128,
            M::RawBits { size_bytes } => Self::RawBits(*size_bytes),
            M::RawBytes { length_bytes } => Self::RawBits(*length_bytes),
            M::NullTerminatedBytes { length_bytes } => Self::FixedBytes(*length_bytes),
            M::FixedLengthUtf32 { length_bytes } => Self::FixedUtf32(length_bytes / 4),
            M::DateTime64(unit) => Self::DateTime64(*unit),
            M::TimeDelta64(unit) => Self::TimeDelta64(*unit),
            M::String => Self::String,
            M::VariableLengthBytes => Self::Bytes,
            M::Structured { fields } => {
                let mut offset = 0usize;
                let fields = fields
                    .iter()
                    .map(|f| {
                        let data_type = Self::from(&f.data_type);
                        let field = Field {
                            name: f.name.clone(),
                            offset,
                            data_type: Box::new(data_type.clone()),
                            big_endian: false,
                            subarray: Vec::new(),
                        };
                        offset += data_type.size().unwrap_or(0);
                        field
                    })
                    .collect();
                Self::Structured { size: offset, fields }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(DataType::Complex128.size(), Some(16));
        assert_eq!(DataType::Complex128.swap_unit(), 8);
        assert_eq!(DataType::FixedUtf32(3).size(), Some(12));
        assert_eq!(DataType::String.size(), None);
        assert_eq!(DataType::Int4.size(), Some(1));
    }

    #[test]
    fn time_units() {
        let ms = TimeUnit::new("ms", 1).unwrap();
        assert_eq!((ms.to_string(), ms.base(), ms.scale_factor()), ("ms".to_owned(), "ms", 1));
        assert_eq!(TimeUnit::new("us", 10).unwrap().to_string(), "10us");
        assert_eq!(TimeUnit::new("generic", 1).unwrap().to_string(), "generic");
        assert!(TimeUnit::new("fortnight", 1).is_none());
        assert!(TimeUnit::new("s", 0).is_none());
    }
}
