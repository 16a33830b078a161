//! The wire formats of decoded data, both ways: answers (slice reads,
//! decoded chunks), chosen by `format=` or the `Accept` header
//! ([`WireFormat::negotiate`]), and request bodies (slice writes), chosen
//! by `format=` or the `Content-Type` ([`WireFormat::negotiate_body`]).
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
//!
//! Request bodies decode into engine data ([`ChunkData`]: little-endian
//! elements in C order, or one byte string per element for variable-length
//! types) with [`decode`]. A body holds either the whole selection (its
//! result shape, C order) or exactly one element, broadcast to every
//! selected position, as numpy assignment does:
//!
//! - **raw**: the elements' bytes, little-endian, C order:
//!   `elements × item size` bytes, or one item; fixed-size types only;
//! - **npy**: an `.npy` file (format versions 1–3) whose `descr` is the
//!   array's data type (either byte order) and whose `shape` is the
//!   selection's (Fortran order is accepted), or `()` ([`npy::decode`]);
//! - **json**: nested lists of the selection's shape, or one value
//!   ([`json::decode`]).
//!
//! Every decode error says what was expected and what arrived. Encoders and
//! decoders of a format sit side by side in its file.

pub mod json;
pub mod npy;

use crate::zarr::chunk::ChunkData;
use crate::zarr::data_type::DataType;

/// Why a format cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// Why the format of a request body is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyFormatError {
    /// A `format=` value that names no format.
    #[error("format `{0}`: expected raw, npy or json")]
    UnknownName(String),
    /// A `Content-Type` that names no format.
    #[error(
        "Content-Type `{0}`: expected application/octet-stream (raw), application/x-npy or application/json, or a \
         format= parameter"
    )]
    UnsupportedMediaType(String),
    /// Neither a `format=` nor a `Content-Type`.
    #[error("say how the body is encoded: a format= parameter (raw, npy, json) or a Content-Type")]
    Missing,
}

/// A wire format of decoded data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WireFormat {
    /// Packed little-endian elements, C order.
    #[default]
    Raw,
    /// A numpy `.npy` file.
    Npy,
    /// Nested JSON lists.
    Json,
}

impl WireFormat {
    /// The format a `format=` value names (`raw`, `npy`, `json`, and the
    /// aliases `bin`, `binary`, `octet-stream`, `numpy`); `None` for any
    /// other.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "raw" | "bin" | "binary" | "octet-stream" => Some(Self::Raw),
            "npy" | "numpy" => Some(Self::Npy),
            "json" => Some(Self::Json),
            _ => None,
        }
    }

    /// The value of `format=` for an answer.
    ///
    /// # Errors
    /// Any other name, listing the valid ones.
    pub fn parse(name: &str) -> Result<Self, FormatError> {
        Self::from_name(name).ok_or_else(|| {
            FormatError(format!("format `{}` is unknown; use raw, npy or json", name.trim().to_ascii_lowercase()))
        })
    }

    /// The format of one media type (`Content-Type`, or one item of
    /// `Accept`; parameters ignored).
    #[must_use]
    pub fn from_media_type(value: &str) -> Option<Self> {
        match value.split(';').next().unwrap_or("").trim().to_ascii_lowercase().as_str() {
            "application/octet-stream" => Some(Self::Raw),
            "application/x-npy" | "application/npy" => Some(Self::Npy),
            "application/json" => Some(Self::Json),
            _ => None,
        }
    }

    /// The first media type in an `Accept` header that names a format, by
    /// quality ([`accept_order`]: `q=0` is refused, not taken).
    #[must_use]
    pub fn from_accept(accept: &str) -> Option<Self> {
        accept_order(accept).iter().find_map(|m| Self::from_media_type(m))
    }

    /// The format of an answer: `format=` when given, else the `Accept`
    /// header, else raw.
    ///
    /// # Errors
    /// An unknown `format=` value.
    pub fn negotiate(param: Option<&str>, accept: Option<&str>) -> Result<Self, FormatError> {
        match param.filter(|p| !p.trim().is_empty()) {
            Some(p) => Self::parse(p),
            None => Ok(accept.and_then(Self::from_accept).unwrap_or_default()),
        }
    }

    /// The format of a request body: `format=` when given, else the
    /// `Content-Type`; there is no default.
    ///
    /// # Errors
    /// An unknown `format=` value or `Content-Type`, or neither given.
    pub fn negotiate_body(param: Option<&str>, content_type: Option<&str>) -> Result<Self, BodyFormatError> {
        if let Some(name) = param.filter(|p| !p.trim().is_empty()) {
            return Self::from_name(name).ok_or_else(|| BodyFormatError::UnknownName(name.trim().to_string()));
        }
        match content_type {
            Some(ct) => Self::from_media_type(ct).ok_or_else(|| BodyFormatError::UnsupportedMediaType(ct.to_string())),
            None => Err(BodyFormatError::Missing),
        }
    }

    /// The media type of data in this format.
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

/// A decoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The elements.
    pub data: ChunkData,
    /// True when `data` is one element to broadcast.
    pub scalar: bool,
}

/// Why a body does not fit the selection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// A decode result.
pub type DecodeResult<T> = std::result::Result<T, DecodeError>;

fn err<T>(msg: impl Into<String>) -> DecodeResult<T> {
    Err(DecodeError(msg.into()))
}

/// A short name of a data type for decode messages (`float32`, `uint8`, ...).
#[must_use]
pub fn type_name(dt: &DataType) -> String {
    match dt {
        DataType::Structured { size, .. } => format!("structured ({size} bytes)"),
        DataType::DateTime64(u) => format!("datetime64[{u}]"),
        DataType::TimeDelta64(u) => format!("timedelta64[{u}]"),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

/// How many elements `shape` holds, as a length in memory.
fn count(shape: &[u64]) -> DecodeResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)))
        .ok_or_else(|| DecodeError(format!("a selection of shape {shape:?} is too large")))
}

/// The media types of an `Accept` header (lower case, parameters dropped),
/// highest quality first, in the header's order among equals; those of
/// `q=0` (not acceptable, RFC 9110 §12.4.2) and unreadable quality values
/// left out.
#[must_use]
pub fn accept_order(accept: &str) -> Vec<String> {
    let mut items: Vec<(u16, String)> = accept
        .split(',')
        .filter_map(|item| {
            let mut parts = item.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let mut q = 1000u16;
            for p in parts {
                if let Some((k, v)) = p.split_once('=') {
                    if k.trim().eq_ignore_ascii_case("q") {
                        let v: f64 = v.trim().parse().ok().filter(|v: &f64| (0.0..=1.0).contains(v))?;
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0..=1000
                        let thousandths = (v * 1000.0).round() as u16;
                        q = thousandths;
                    }
                }
            }
            (q > 0 && !media.is_empty()).then_some((q, media))
        })
        .collect();
    items.sort_by_key(|item| std::cmp::Reverse(item.0));
    items.into_iter().map(|(_, m)| m).collect()
}

/// Decodes `body` for a selection of `shape` of an array of `dt`.
///
/// # Errors
/// A body that is not in `format`, or does not hold `shape` (or one)
/// elements of `dt`; the message says what was expected.
pub fn decode(format: WireFormat, body: &[u8], dt: &DataType, shape: &[u64]) -> DecodeResult<Decoded> {
    let decoded = match format {
        WireFormat::Raw => decode_raw(body, dt, shape)?,
        WireFormat::Npy => npy::decode(body, dt, shape)?,
        WireFormat::Json => return json::decode(body, dt, shape),
    };
    // Raw bytes may hold values the type has no room for: refused here,
    // before any chunk is written (the chunk's encoder would refuse them
    // after the chunks before it were stored).
    if let ChunkData::Fixed(bytes) = &decoded.data {
        check_values(dt, bytes).map_err(DecodeError)?;
    }
    Ok(decoded)
}

/// Whether every element of `bytes` (packed `dt` elements, little-endian)
/// is a value of `dt`: a bool is 0 or 1 (in a structured element's bool
/// fields too), an int4 is -8..=7 (one per byte); the message names the
/// first that is not.
fn check_values(dt: &DataType, bytes: &[u8]) -> Result<(), String> {
    match dt {
        DataType::Bool => match bytes.iter().position(|&b| b > 1) {
            Some(i) => Err(format!("element {i} is {}: a bool must be 0 or 1", bytes[i])),
            None => Ok(()),
        },
        DataType::Int4 => match bytes.iter().position(|&b| !(-8..=7).contains(&i8::from_le_bytes([b]))) {
            Some(i) => Err(format!("element {i} is {}: an int4 must be -8..=7", i8::from_le_bytes([bytes[i]]))),
            None => Ok(()),
        },
        DataType::Structured { size, fields } if *size > 0 => {
            for field in fields.iter().filter(|f| matches!(*f.data_type, DataType::Bool)) {
                let n = usize::try_from(field.subarray.iter().product::<u64>()).unwrap_or(usize::MAX);
                for (i, record) in bytes.chunks_exact(*size).enumerate() {
                    let values = record.get(field.offset..field.offset.saturating_add(n)).unwrap_or_default();
                    if let Some(b) = values.iter().find(|&&b| b > 1) {
                        return Err(format!("element {i}, field `{}`: {b}: a bool must be 0 or 1", field.name));
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn decode_raw(body: &[u8], dt: &DataType, shape: &[u64]) -> DecodeResult<Decoded> {
    let Some(size) = dt.size() else {
        return err(format!("raw body: {} elements have no fixed size; send JSON", type_name(dt)));
    };
    let n = count(shape)?;
    let expected = n.checked_mul(size).ok_or_else(|| DecodeError("the selection is too large".into()))?;
    if body.len() == expected {
        return Ok(Decoded { data: ChunkData::Fixed(body.to_vec()), scalar: false });
    }
    if body.len() == size {
        return Ok(Decoded { data: ChunkData::Fixed(body.to_vec()), scalar: true });
    }
    err(format!(
        "raw body: expected {expected} bytes ({n} elements of shape {shape:?} × {size}-byte {}, little-endian, C order) \
         or {size} bytes (one element, broadcast); got {} bytes",
        type_name(dt),
        body.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::data_type::Field;

    #[test]
    fn raw_values_outside_the_type_are_refused() {
        let e = decode(WireFormat::Raw, &[1, 0, 7, 1], &DataType::Bool, &[4]).unwrap_err();
        assert!(e.0.contains("element 2 is 7: a bool must be 0 or 1"), "{e}");
        assert!(decode(WireFormat::Raw, &[1, 0, 0, 1], &DataType::Bool, &[4]).is_ok());
        // One element, broadcast, too.
        assert!(decode(WireFormat::Raw, &[2], &DataType::Bool, &[4]).is_err());
        let e = decode(WireFormat::Raw, &[0xF8, 7, 100], &DataType::Int4, &[3]).unwrap_err();
        assert!(e.0.contains("element 2 is 100: an int4 must be -8..=7"), "{e}");
        assert!(decode(WireFormat::Raw, &[0xF8, 7, 0], &DataType::Int4, &[3]).is_ok());
        // A structured element's bool field (a subarray of two), after a u16.
        let field = Field::little;
        let dt = DataType::Structured {
            size: 4,
            fields: vec![field("n", 0, DataType::UInt16, vec![]), field("ok", 2, DataType::Bool, vec![2])],
        };
        assert!(decode(WireFormat::Raw, &[9, 9, 1, 0, 9, 9, 0, 1], &dt, &[2]).is_ok());
        let e = decode(WireFormat::Raw, &[9, 9, 1, 0, 9, 9, 0, 5], &dt, &[2]).unwrap_err();
        assert!(e.0.contains("element 1, field `ok`: 5"), "{e}");
        // npy bodies are checked alike.
        let mut npy = crate::service::wire::npy::header("|b1", &[2]);
        npy.extend([1, 3]);
        assert!(decode(WireFormat::Npy, &npy, &DataType::Bool, &[2]).unwrap_err().0.contains("element 1 is 3"));
    }

    #[test]
    fn negotiation() {
        assert_eq!(WireFormat::negotiate(None, None).unwrap(), WireFormat::Raw);
        assert_eq!(WireFormat::negotiate(Some("npy"), Some("application/json")).unwrap(), WireFormat::Npy);
        assert_eq!(WireFormat::negotiate(None, Some("text/html, application/json;q=0.9")).unwrap(), WireFormat::Json);
        assert_eq!(WireFormat::negotiate(None, Some("*/*")).unwrap(), WireFormat::Raw);
        assert_eq!(WireFormat::negotiate(None, Some("application/x-npy")).unwrap(), WireFormat::Npy);
        // Quality values: weighed, and q=0 is refusal (round 11, a black-box attack).
        let got = |a: &str| WireFormat::negotiate(None, Some(a)).unwrap();
        assert_eq!(got("application/x-npy;q=0, application/json"), WireFormat::Json);
        assert_eq!(got("application/x-npy;q=0.2, application/json;q=0.9"), WireFormat::Json);
        assert_eq!(got("application/json;q=0.5, application/x-npy"), WireFormat::Npy);
        assert_eq!(got("application/json;q=0"), WireFormat::Raw);
        assert_eq!(accept_order("a/b;q=0.5, c/d;Q=1, e/f;q=0, g/h;q=x, i/j"), ["c/d", "i/j", "a/b"]);
        let e = WireFormat::negotiate(Some("png"), None).unwrap_err();
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
    fn body_negotiation() {
        assert_eq!(WireFormat::negotiate_body(Some("npy"), Some("application/json")), Ok(WireFormat::Npy));
        assert_eq!(WireFormat::negotiate_body(None, Some("application/json; charset=utf-8")), Ok(WireFormat::Json));
        assert_eq!(WireFormat::negotiate_body(None, Some("application/octet-stream")), Ok(WireFormat::Raw));
        let e = WireFormat::negotiate_body(Some("png"), None).unwrap_err();
        assert_eq!(e.to_string(), "format `png`: expected raw, npy or json");
        let e = WireFormat::negotiate_body(None, Some("text/csv")).unwrap_err();
        assert!(matches!(&e, BodyFormatError::UnsupportedMediaType(ct) if ct == "text/csv"), "{e}");
        assert!(e.to_string().starts_with("Content-Type `text/csv`: expected application/octet-stream"), "{e}");
        assert_eq!(WireFormat::negotiate_body(None, None), Err(BodyFormatError::Missing));
        // One name table both ways.
        for name in ["raw", "bin", "binary", "octet-stream", "npy", "numpy", "json"] {
            assert_eq!(WireFormat::negotiate_body(Some(name), None).ok(), WireFormat::parse(name).ok(), "{name}");
        }
    }

    #[test]
    fn raw_bodies_whole_or_one_element() {
        let fixed = |d: &Decoded| match &d.data {
            ChunkData::Fixed(b) => b.clone(),
            ChunkData::Variable(_) => panic!("variable"),
        };
        let d = decode(WireFormat::Raw, &[1, 0, 2, 0], &DataType::UInt16, &[2]).unwrap();
        assert_eq!((fixed(&d), d.scalar), (vec![1u8, 0, 2, 0], false));
        let d = decode(WireFormat::Raw, &[7, 0], &DataType::UInt16, &[3, 3]).unwrap();
        assert!(d.scalar);
        let e = decode(WireFormat::Raw, &[1, 2, 3], &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("expected 4 bytes") && e.contains("got 3 bytes") && e.contains("uint16"), "{e}");
        assert!(decode(WireFormat::Raw, b"x", &DataType::String, &[1]).unwrap_err().0.contains("send JSON"));
    }

    #[test]
    fn variable_length_types_only_in_json() {
        let e = WireFormat::Raw.check(&DataType::String).unwrap_err();
        assert!(e.0.contains("variable-length string") && e.0.contains("format=json"), "{e}");
        assert!(WireFormat::Npy.check(&DataType::Bytes).is_err());
        assert!(WireFormat::Json.check(&DataType::Bytes).is_ok());
    }
}
