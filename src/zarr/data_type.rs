//! The data type of an array: how many bytes an element takes and what its
//! bytes mean. One type for the documents and the engine: the v3 parser
//! (`metadata::data_type`, which adds the v3 names, parsing and JSON form)
//! produces it directly, and a v2 `dtype` (`metadata::v2::dtype::DataTypeV2`,
//! which keeps the numpy byte order and structured layout) holds it for
//! scalars and normalises into it for records.
//!
//! Spec: Zarr v3 core §"Data types"; Zarr v2 §"Data type encoding";
//! TensorStore's zarr and zarr3 driver data type tables.
//!
//! In-memory element layout (decoded chunks, fill values): fixed-size
//! elements in **little-endian** byte order, C order. Variable-length
//! elements (`String`, `Bytes`) are one byte string per element.
//!
//! Where two spellings mean the same layout but a different document form
//! (`r16` and zarr-python's `raw_bytes`, whose fill values are written
//! differently), both are variants ([`DataType::RawBits`],
//! [`DataType::RawBytes`]) so a document is written back as it was read.
//! The time unit of `datetime64` / `timedelta64` ([`TimeUnit`]) and the
//! float8 formats with their conversions ([`float8`]) live here too.

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

#[cfg(test)]
impl Field {
    /// A little-endian field (tests).
    pub(crate) fn little(name: &str, offset: usize, data_type: DataType, subarray: Vec<u64>) -> Self {
        Self { name: name.into(), offset, data_type: Box::new(data_type), big_endian: false, subarray }
    }
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
    /// `r<bits>` (v3 core): `n` opaque bytes.
    RawBits(usize),
    /// zarr-python `raw_bytes` / v2 `|V<n>`: `n` opaque bytes, as
    /// [`Self::RawBits`] but spelled (and its fill value written) as
    /// zarr-python does.
    RawBytes(usize),
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
            Self::RawBits(n) | Self::RawBytes(n) | Self::FixedBytes(n) | Self::Structured { size: n, .. } => *n,
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
            Self::RawBits(_)
            | Self::RawBytes(_)
            | Self::FixedBytes(_)
            | Self::Structured { .. }
            | Self::String
            | Self::Bytes => 1,
            other => other.size().unwrap_or(1),
        }
    }

    /// True for variable-length types.
    #[must_use]
    pub fn is_variable(&self) -> bool {
        self.size().is_none()
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
