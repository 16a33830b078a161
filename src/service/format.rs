//! Output formats of decoded data (slice reads, decoded chunks): raw bytes,
//! `.npy` and JSON, chosen by `format=` or the `Accept` header.
//!
//! | format | media type | body |
//! |---|---|---|
//! | `raw` (default) | `application/octet-stream` | the elements, little-endian, C order, packed; shape, dtype and order in the `X-Zarr-Shape`, `X-Zarr-Dtype`, `X-Zarr-Order` headers |
//! | `npy` | `application/x-npy` | a `.npy` file ([`npy`], format version 1.0, or 2.0 for huge headers), loadable by `numpy.load` |
//! | `json` | `application/json` | nested lists, outermost dimension first ([`json`]) |
//!
//! Element layout is the engine's in-memory layout (`crate::zarr::data_type`):
//! every fixed-size element little-endian, `int4` one sign-extended byte per
//! element. The dtype is named as numpy names it ([`numpy_descr`]); types
//! numpy has no name for (`bfloat16`, `float8_*`) are `|V<n>` in a `.npy`
//! header and keep their Zarr name in `X-Zarr-Dtype`.
//!
//! Variable-length strings and bytes have no packed layout: only JSON
//! renders them; `raw` and `npy` are refused (400) before anything is read.
//! Decoders for request bodies (slice writes) live beside these encoders.

pub mod decode;
pub mod json;
pub mod npy;

use crate::zarr::data_type::DataType;

/// Why a format cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Packed little-endian elements, C order.
    #[default]
    Raw,
    /// A numpy `.npy` file.
    Npy,
    /// Nested JSON lists.
    Json,
}

impl OutputFormat {
    /// The value of `format=`: `raw`, `npy` or `json`.
    ///
    /// # Errors
    /// Any other name, listing the valid ones.
    pub fn parse(name: &str) -> Result<Self, FormatError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "raw" | "bin" | "octet-stream" => Ok(Self::Raw),
            "npy" | "numpy" => Ok(Self::Npy),
            "json" => Ok(Self::Json),
            other => Err(FormatError(format!("format `{other}` is unknown; use raw, npy or json"))),
        }
    }

    /// The first media type in an `Accept` header that names a format
    /// (quality values are not weighed: clients of this API send one type).
    #[must_use]
    pub fn from_accept(accept: &str) -> Option<Self> {
        accept.split(',').find_map(|item| {
            let media = item.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            match media.as_str() {
                "application/octet-stream" => Some(Self::Raw),
                "application/x-npy" | "application/npy" => Some(Self::Npy),
                "application/json" => Some(Self::Json),
                _ => None,
            }
        })
    }

    /// `format=` when given, else the `Accept` header, else raw.
    ///
    /// # Errors
    /// An unknown `format=` value.
    pub fn negotiate(param: Option<&str>, accept: Option<&str>) -> Result<Self, FormatError> {
        match param.filter(|p| !p.trim().is_empty()) {
            Some(p) => Self::parse(p),
            None => Ok(accept.and_then(Self::from_accept).unwrap_or_default()),
        }
    }

    /// The response's media type.
    #[must_use]
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Raw => "application/octet-stream",
            Self::Npy => "application/x-npy",
            Self::Json => "application/json",
        }
    }

    /// The format's name, as `format=` spells it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Npy => "npy",
            Self::Json => "json",
        }
    }

    /// Checks that elements of `dt` can be written in this format.
    ///
    /// # Errors
    /// Variable-length types in `raw` or `npy`.
    pub fn check(self, dt: &DataType) -> Result<(), FormatError> {
        match (self, dt) {
            (Self::Raw | Self::Npy, DataType::String | DataType::Bytes) => Err(FormatError(format!(
                "format {}: variable-length {} elements have no fixed-size layout; use format=json",
                self.name(),
                zarr_name(dt)
            ))),
            (Self::Json, DataType::Structured { fields, .. }) => {
                fields.iter().try_for_each(|f| self.check(&f.data_type))
            }
            _ => Ok(()),
        }
    }
}

/// The Zarr (v3) name of a data type, for messages and headers.
#[must_use]
pub fn zarr_name(dt: &DataType) -> String {
    match dt {
        DataType::Bool => "bool".into(),
        DataType::Int8 => "int8".into(),
        DataType::Int16 => "int16".into(),
        DataType::Int32 => "int32".into(),
        DataType::Int64 => "int64".into(),
        DataType::UInt8 => "uint8".into(),
        DataType::UInt16 => "uint16".into(),
        DataType::UInt32 => "uint32".into(),
        DataType::UInt64 => "uint64".into(),
        DataType::Float16 => "float16".into(),
        DataType::BFloat16 => "bfloat16".into(),
        DataType::Float32 => "float32".into(),
        DataType::Float64 => "float64".into(),
        DataType::Complex64 => "complex64".into(),
        DataType::Complex128 => "complex128".into(),
        DataType::Int4 => "int4".into(),
        DataType::Float8(kind) => kind.name().into(),
        DataType::RawBits(n) | DataType::RawBytes(n) => format!("r{}", n * 8),
        DataType::FixedBytes(n) => format!("null_terminated_bytes({n})"),
        DataType::FixedUtf32(n) => format!("fixed_length_utf32({n})"),
        DataType::DateTime64(u) => format!("datetime64[{u}]"),
        DataType::TimeDelta64(u) => format!("timedelta64[{u}]"),
        DataType::Structured { .. } => "structured".into(),
        DataType::String => "string".into(),
        DataType::Bytes => "bytes".into(),
    }
}

/// numpy's `descr` of a fixed-size type in the in-memory layout
/// (little-endian): `<f4`, `|b1`, `<U5`, `[('a', '<i4'), ('b', '<f8', (2,))]`.
/// `bfloat16` and `float8_*` (no numpy type) are `|V2` and `|V1`; `int4`
/// is `|i1` (one sign-extended byte per element). `None` for
/// variable-length types.
#[must_use]
pub fn numpy_descr(dt: &DataType) -> Option<String> {
    Some(match dt {
        DataType::Bool => "|b1".into(),
        DataType::Int8 | DataType::Int4 => "|i1".into(),
        DataType::UInt8 => "|u1".into(),
        DataType::Int16 => "<i2".into(),
        DataType::Int32 => "<i4".into(),
        DataType::Int64 => "<i8".into(),
        DataType::UInt16 => "<u2".into(),
        DataType::UInt32 => "<u4".into(),
        DataType::UInt64 => "<u8".into(),
        DataType::Float16 => "<f2".into(),
        DataType::Float32 => "<f4".into(),
        DataType::Float64 => "<f8".into(),
        DataType::Complex64 => "<c8".into(),
        DataType::Complex128 => "<c16".into(),
        DataType::BFloat16 => "|V2".into(),
        DataType::Float8(_) => "|V1".into(),
        DataType::RawBits(n) | DataType::RawBytes(n) => format!("|V{n}"),
        DataType::FixedBytes(n) => format!("|S{n}"),
        DataType::FixedUtf32(n) => format!("<U{n}"),
        DataType::DateTime64(u) => format!("<M8[{u}]"),
        DataType::TimeDelta64(u) => format!("<m8[{u}]"),
        DataType::Structured { size, fields } => {
            let mut items = Vec::with_capacity(fields.len());
            let mut offset = 0usize;
            for f in fields {
                if f.offset > offset {
                    // Padding numpy would name with an empty field.
                    items.push(format!("('', '|V{}')", f.offset - offset));
                }
                let descr = numpy_descr(&f.data_type)?;
                let name = python_str(&f.name);
                if f.subarray.is_empty() {
                    items.push(format!("({name}, '{descr}')"));
                } else {
                    items.push(format!("({name}, '{descr}', {})", python_tuple(&f.subarray)));
                }
                let count: u64 = f.subarray.iter().product();
                offset = f.offset + usize::try_from(count).unwrap_or(0) * f.data_type.size().unwrap_or(0);
            }
            if *size > offset {
                items.push(format!("('', '|V{}')", size - offset));
            }
            return Some(format!("[{}]", items.join(", ")));
        }
        DataType::String | DataType::Bytes => return None,
    })
}

/// The `X-Zarr-Dtype` value: numpy's descr where numpy has the type, else
/// the Zarr name (`bfloat16`, `float8_e4m3fn`, `string`, `bytes`).
#[must_use]
pub fn dtype_header(dt: &DataType) -> String {
    match dt {
        DataType::BFloat16 | DataType::Float8(_) | DataType::String | DataType::Bytes => zarr_name(dt),
        other => numpy_descr(other).unwrap_or_else(|| zarr_name(other)),
    }
}

/// A Python string literal (single-quoted).
fn python_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c) & 0xff)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A Python tuple of integers: `()`, `(3,)`, `(3, 4)`.
#[must_use]
pub fn python_tuple(shape: &[u64]) -> String {
    match shape {
        [] => "()".into(),
        [one] => format!("({one},)"),
        many => format!("({})", many.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// The `X-Zarr-Shape` value: `3,4` (empty for a scalar).
#[must_use]
pub fn shape_header(shape: &[u64]) -> String {
    shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::data_type::Field;

    #[test]
    fn negotiation() {
        assert_eq!(OutputFormat::negotiate(None, None).unwrap(), OutputFormat::Raw);
        assert_eq!(OutputFormat::negotiate(Some("npy"), Some("application/json")).unwrap(), OutputFormat::Npy);
        assert_eq!(
            OutputFormat::negotiate(None, Some("text/html, application/json;q=0.9")).unwrap(),
            OutputFormat::Json
        );
        assert_eq!(OutputFormat::negotiate(None, Some("*/*")).unwrap(), OutputFormat::Raw);
        assert_eq!(OutputFormat::negotiate(None, Some("application/x-npy")).unwrap(), OutputFormat::Npy);
        let e = OutputFormat::negotiate(Some("png"), None).unwrap_err();
        assert!(e.0.contains("png") && e.0.contains("raw, npy or json"), "{e}");
    }

    #[test]
    fn descrs() {
        assert_eq!(numpy_descr(&DataType::Float32).unwrap(), "<f4");
        assert_eq!(numpy_descr(&DataType::Bool).unwrap(), "|b1");
        assert_eq!(numpy_descr(&DataType::FixedUtf32(5)).unwrap(), "<U5");
        assert_eq!(
            numpy_descr(&DataType::DateTime64(crate::zarr::data_type::TimeUnit::new("ms", 10).unwrap())).unwrap(),
            "<M8[10ms]"
        );
        assert_eq!(numpy_descr(&DataType::String), None);
        assert_eq!(dtype_header(&DataType::BFloat16), "bfloat16");
        let st = DataType::Structured {
            size: 20,
            fields: vec![
                Field {
                    name: "a".into(),
                    offset: 0,
                    data_type: Box::new(DataType::Int32),
                    big_endian: true,
                    subarray: vec![],
                },
                Field {
                    name: "b'".into(),
                    offset: 4,
                    data_type: Box::new(DataType::Float64),
                    big_endian: false,
                    subarray: vec![2],
                },
            ],
        };
        assert_eq!(numpy_descr(&st).unwrap(), r"[('a', '<i4'), ('b\'', '<f8', (2,))]");
        assert_eq!(python_tuple(&[]), "()");
        assert_eq!(python_tuple(&[3]), "(3,)");
        assert_eq!(python_tuple(&[3, 4]), "(3, 4)");
    }

    #[test]
    fn variable_length_types_only_in_json() {
        let e = OutputFormat::Raw.check(&DataType::String).unwrap_err();
        assert!(e.0.contains("variable-length string") && e.0.contains("format=json"), "{e}");
        assert!(OutputFormat::Npy.check(&DataType::Bytes).is_err());
        assert!(OutputFormat::Json.check(&DataType::Bytes).is_ok());
    }
}
