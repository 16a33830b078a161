//! Request bodies of slice writes, decoded into engine data
//! ([`ChunkData`]: little-endian elements in C order, or one byte string
//! per element for variable-length types).
//!
//! A body holds either the whole selection (its result shape, C order) or
//! exactly one element, broadcast to every selected position, as numpy
//! assignment does:
//!
//! - **raw** (`application/octet-stream`): the elements' bytes,
//!   little-endian, C order: `elements × item size` bytes, or one item;
//!   fixed-size types only;
//! - **npy** (`application/x-npy`): an `.npy` file (format versions 1–3)
//!   whose `descr` is the array's data type (either byte order) and whose
//!   `shape` is the selection's (Fortran order is accepted), or `()`;
//! - **json** (`application/json`): nested lists of the selection's shape,
//!   or one value. Numbers for numeric types (floats also `"NaN"`,
//!   `"Infinity"`, `"-Infinity"`), `[re, im]` for complex, `true`/`false`,
//!   integers (or `"NaT"`) for datetimes, strings for strings, base64
//!   strings for variable-length bytes.
//!
//! Spec of `.npy`: <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>.
//! Every error says what was expected and what arrived.

use base64::Engine as _;
use half::{bf16, f16};
use serde_json::Value;

use crate::zarr::chunk::ChunkData;
use crate::zarr::data_type::DataType;

/// The format of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// Little-endian elements, C order.
    Raw,
    /// A `.npy` file.
    Npy,
    /// Nested JSON lists.
    Json,
}

impl BodyFormat {
    /// The format named by a `format=` value (`raw`, `npy`, `json`).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "raw" | "bin" | "binary" => Some(Self::Raw),
            "npy" => Some(Self::Npy),
            "json" => Some(Self::Json),
            _ => None,
        }
    }

    /// The format of a `Content-Type` (parameters ignored).
    #[must_use]
    pub fn from_content_type(value: &str) -> Option<Self> {
        match value.split(';').next().unwrap_or("").trim().to_ascii_lowercase().as_str() {
            "application/octet-stream" => Some(Self::Raw),
            "application/x-npy" | "application/npy" => Some(Self::Npy),
            "application/json" => Some(Self::Json),
            _ => None,
        }
    }
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

type Result<T> = std::result::Result<T, DecodeError>;

fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(DecodeError(msg.into()))
}

/// A short name of a data type for messages (`float32`, `uint8`, ...).
#[must_use]
pub fn type_name(dt: &DataType) -> String {
    match dt {
        DataType::Structured { size, .. } => format!("structured ({size} bytes)"),
        DataType::DateTime64(u) => format!("datetime64[{u}]"),
        DataType::TimeDelta64(u) => format!("timedelta64[{u}]"),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

fn count(shape: &[u64]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)))
        .ok_or_else(|| DecodeError(format!("a selection of shape {shape:?} is too large")))
}

/// Decodes `body` for a selection of `shape` of an array of `dt`.
///
/// # Errors
/// A body that is not in `format`, or does not hold `shape` (or one)
/// elements of `dt`; the message says what was expected.
pub fn decode(format: BodyFormat, body: &[u8], dt: &DataType, shape: &[u64]) -> Result<Decoded> {
    match format {
        BodyFormat::Raw => decode_raw(body, dt, shape),
        BodyFormat::Npy => decode_npy(body, dt, shape),
        BodyFormat::Json => decode_json(body, dt, shape),
    }
}

fn decode_raw(body: &[u8], dt: &DataType, shape: &[u64]) -> Result<Decoded> {
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

/// The `.npy` descr of `dt` without its byte-order character.
fn npy_descr(dt: &DataType) -> Option<String> {
    Some(match dt {
        DataType::Bool => "b1".into(),
        DataType::Int8 => "i1".into(),
        DataType::Int16 => "i2".into(),
        DataType::Int32 => "i4".into(),
        DataType::Int64 => "i8".into(),
        DataType::UInt8 => "u1".into(),
        DataType::UInt16 => "u2".into(),
        DataType::UInt32 => "u4".into(),
        DataType::UInt64 => "u8".into(),
        DataType::Float16 => "f2".into(),
        DataType::Float32 => "f4".into(),
        DataType::Float64 => "f8".into(),
        DataType::Complex64 => "c8".into(),
        DataType::Complex128 => "c16".into(),
        DataType::DateTime64(u) => format!("M8[{u}]"),
        DataType::TimeDelta64(u) => format!("m8[{u}]"),
        DataType::FixedBytes(n) => format!("S{n}"),
        DataType::FixedUtf32(n) => format!("U{n}"),
        DataType::RawBits(n) | DataType::RawBytes(n) => format!("V{n}"),
        _ => return None,
    })
}

/// The value of `'key': ...` in an npy header dict, as text.
fn header_field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(q) = rest.strip_prefix('\'') {
        return q.split_once('\'').map(|(v, _)| v);
    }
    if rest.starts_with('(') {
        return rest.split_once(')').map(|(v, _)| &v[1..]);
    }
    Some(rest.split([',', '}']).next().unwrap_or("").trim())
}

fn decode_npy(body: &[u8], dt: &DataType, shape: &[u64]) -> Result<Decoded> {
    let bad = |why: &str| DecodeError(format!("npy body: {why}"));
    if body.len() < 10 || &body[..6] != b"\x93NUMPY" {
        return Err(bad("does not start with the .npy magic `\\x93NUMPY`"));
    }
    let (header_len, start): (usize, usize) = match body[6] {
        1 => (usize::from(u16::from_le_bytes([body[8], body[9]])), 10),
        2 | 3 if body.len() >= 12 => {
            let len = u32::from_le_bytes([body[8], body[9], body[10], body[11]]);
            (usize::try_from(len).map_err(|_| bad("header too long"))?, 12)
        }
        v => return Err(bad(&format!("format version {v} is not 1, 2 or 3"))),
    };
    let end = start.checked_add(header_len).filter(|&e| e <= body.len()).ok_or_else(|| bad("truncated header"))?;
    let header = std::str::from_utf8(&body[start..end]).map_err(|_| bad("header is not text"))?;
    let descr = header_field(header, "descr").ok_or_else(|| bad("header has no 'descr' string"))?;
    let Some(want) = npy_descr(dt) else {
        return err(format!("npy body: {} arrays cannot be written from .npy; send raw bytes or JSON", type_name(dt)));
    };
    let (order, got) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('|', descr),
    };
    let size = dt.size().unwrap_or(1);
    let show = if size > 1 && dt.swap_unit() > 1 { format!("<{want}") } else { format!("|{want}") };
    if got != want {
        return err(format!(
            "npy body: dtype '{descr}' does not match the array's {} (expected '{show}')",
            type_name(dt)
        ));
    }
    let fortran = match header_field(header, "fortran_order") {
        Some("True") => true,
        Some("False") => false,
        _ => return Err(bad("header has no 'fortran_order' True or False")),
    };
    let shape_text = header_field(header, "shape").ok_or_else(|| bad("header has no 'shape' tuple"))?;
    let npy_shape: Vec<u64> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| bad(&format!("shape item `{s}` is not a length"))))
        .collect::<Result<_>>()?;
    let scalar = npy_shape.is_empty() && !shape.is_empty();
    if !scalar && npy_shape != shape {
        return err(format!(
            "npy body: shape {npy_shape:?} does not match the selection's shape {shape:?} (or () for one value, broadcast)"
        ));
    }
    let n = count(&npy_shape)?;
    let data = &body[end..];
    if Some(data.len()) != n.checked_mul(size) {
        return err(format!(
            "npy body: shape {npy_shape:?} of '{descr}' needs {} data bytes, got {}",
            n.saturating_mul(size),
            data.len()
        ));
    }
    let mut bytes = data.to_vec();
    let unit = dt.swap_unit();
    if order == '>' && unit > 1 {
        for e in bytes.chunks_exact_mut(unit) {
            e.reverse();
        }
    }
    if fortran && npy_shape.len() > 1 {
        bytes = fortran_to_c(&bytes, &npy_shape, size);
    }
    Ok(Decoded { data: ChunkData::Fixed(bytes), scalar })
}

/// Reorders Fortran-order elements into C order.
fn fortran_to_c(src: &[u8], shape: &[u64], size: usize) -> Vec<u8> {
    #[allow(clippy::cast_possible_truncation)] // the data is in memory
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let mut f_strides = vec![1usize; dims.len()];
    for d in 1..dims.len() {
        f_strides[d] = f_strides[d - 1] * dims[d - 1];
    }
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(src.len());
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        let off: usize = idx.iter().zip(&f_strides).map(|(i, s)| i * s).sum::<usize>() * size;
        out.extend_from_slice(&src[off..off + size]);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Elements being collected from JSON.
enum Out {
    Fixed(Vec<u8>),
    Variable(Vec<Vec<u8>>),
}

fn json_supported(dt: &DataType) -> bool {
    !matches!(dt, DataType::RawBits(_) | DataType::RawBytes(_) | DataType::Float8(_) | DataType::Structured { .. })
}

fn decode_json(body: &[u8], dt: &DataType, shape: &[u64]) -> Result<Decoded> {
    if !json_supported(dt) {
        return err(format!("JSON body: {} arrays cannot be written from JSON; send raw bytes", type_name(dt)));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| DecodeError(format!("JSON body: not valid JSON: {e}")))?;
    let n = count(shape)?;
    let mut out = if dt.is_variable() {
        Out::Variable(Vec::with_capacity(n.min(1 << 20)))
    } else {
        Out::Fixed(Vec::with_capacity(n.saturating_mul(dt.size().unwrap_or(1)).min(1 << 24)))
    };
    let expected = || format!("nested lists of shape {shape:?} of {} (or one value, broadcast)", type_name(dt));
    // Nested lists when the value is a list and the selection has dimensions
    // (a complex element is a list too: it is one value only when it does not
    // fit the shape).
    if !shape.is_empty() && value.is_array() {
        let mut path = String::new();
        match walk(&value, shape, dt, &mut out, &mut path) {
            Ok(()) => return Ok(Decoded { data: out.finish(), scalar: false }),
            Err(e) if !matches!(dt, DataType::Complex64 | DataType::Complex128) => {
                return err(format!("JSON body: expected {}; {e}", expected()));
            }
            Err(e) => {
                out.clear();
                if element(&value, dt, &mut out).is_err() {
                    return err(format!("JSON body: expected {}; {e}", expected()));
                }
                return Ok(Decoded { data: out.finish(), scalar: true });
            }
        }
    }
    element(&value, dt, &mut out).map_err(|e| DecodeError(format!("JSON body: expected {}; {e}", expected())))?;
    Ok(Decoded { data: out.finish(), scalar: !shape.is_empty() })
}

impl Out {
    fn finish(self) -> ChunkData {
        match self {
            Self::Fixed(b) => ChunkData::Fixed(b),
            Self::Variable(v) => ChunkData::Variable(v),
        }
    }

    fn clear(&mut self) {
        match self {
            Self::Fixed(b) => b.clear(),
            Self::Variable(v) => v.clear(),
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        match self {
            Self::Fixed(v) => v.extend_from_slice(b),
            Self::Variable(v) => v.push(b.to_vec()),
        }
    }
}

fn walk(v: &Value, shape: &[u64], dt: &DataType, out: &mut Out, path: &mut String) -> std::result::Result<(), String> {
    let Some((&len, rest)) = shape.split_first() else {
        return element(v, dt, out).map_err(|e| format!("at {}: {e}", if path.is_empty() { "top" } else { path }));
    };
    let Value::Array(items) = v else {
        return Err(format!(
            "at {}: expected a list of {len} items, got {}",
            if path.is_empty() { "top" } else { path },
            brief(v)
        ));
    };
    if items.len() as u64 != len {
        return Err(format!(
            "at {}: expected a list of {len} items, got {}",
            if path.is_empty() { "top" } else { path },
            items.len()
        ));
    }
    for (i, item) in items.iter().enumerate() {
        let at = path.len();
        path.push_str(&format!("[{i}]"));
        walk(item, rest, dt, out, path)?;
        path.truncate(at);
    }
    Ok(())
}

fn brief(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

fn float_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" | "nan" => Some(f64::NAN),
            "Infinity" | "inf" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// One element of `dt` from JSON.
fn element(v: &Value, dt: &DataType, out: &mut Out) -> std::result::Result<(), String> {
    let wrong = || format!("{} is not a {} value", brief(v), type_name(dt));
    macro_rules! int {
        ($t:ty) => {{
            let x = match v {
                Value::Number(n) => n
                    .as_i64()
                    .and_then(|x| <$t>::try_from(x).ok())
                    .or_else(|| n.as_u64().and_then(|x| <$t>::try_from(x).ok())),
                _ => None,
            }
            .ok_or_else(|| format!("{} is not an integer in the range of {}", brief(v), type_name(dt)))?;
            out.bytes(&x.to_le_bytes());
        }};
    }
    match dt {
        DataType::Bool => out.bytes(&[u8::from(v.as_bool().ok_or_else(wrong)?)]),
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        DataType::UInt8 => int!(u8),
        DataType::UInt16 => int!(u16),
        DataType::UInt32 => int!(u32),
        DataType::UInt64 => int!(u64),
        DataType::Int4 => {
            let x = v
                .as_i64()
                .filter(|x| (-8..=7).contains(x))
                .ok_or_else(|| format!("{} is not an integer in -8..=7", brief(v)))?;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // checked range
            out.bytes(&[(x as i8) as u8]);
        }
        DataType::Float16 => out.bytes(&f16::from_f64(float_of(v).ok_or_else(wrong)?).to_le_bytes()),
        DataType::BFloat16 => out.bytes(&bf16::from_f64(float_of(v).ok_or_else(wrong)?).to_le_bytes()),
        #[allow(clippy::cast_possible_truncation)] // float32 elements
        DataType::Float32 => out.bytes(&(float_of(v).ok_or_else(wrong)? as f32).to_le_bytes()),
        DataType::Float64 => out.bytes(&float_of(v).ok_or_else(wrong)?.to_le_bytes()),
        DataType::Complex64 | DataType::Complex128 => {
            let parts = v.as_array().filter(|a| a.len() == 2).ok_or_else(|| format!("{} is not [re, im]", brief(v)))?;
            for p in parts {
                let x = float_of(p).ok_or_else(|| format!("{} is not [re, im]", brief(v)))?;
                if *dt == DataType::Complex64 {
                    #[allow(clippy::cast_possible_truncation)] // complex64 parts are float32
                    out.bytes(&(x as f32).to_le_bytes());
                } else {
                    out.bytes(&x.to_le_bytes());
                }
            }
        }
        DataType::DateTime64(_) | DataType::TimeDelta64(_) => {
            let x = match v {
                Value::String(s) if s == "NaT" => Some(i64::MIN),
                _ => v.as_i64(),
            }
            .ok_or_else(|| format!("{} is not an integer count of units (or \"NaT\")", brief(v)))?;
            out.bytes(&x.to_le_bytes());
        }
        DataType::String => out.bytes(v.as_str().ok_or_else(wrong)?.as_bytes()),
        DataType::Bytes => {
            let s = v.as_str().ok_or_else(|| format!("{} is not a base64 string", brief(v)))?;
            let b = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| format!("{} is not base64: {e}", brief(v)))?;
            out.bytes(&b);
        }
        DataType::FixedBytes(n) => {
            let s = v.as_str().ok_or_else(wrong)?;
            if s.len() > *n {
                return Err(format!("{} is longer than {n} bytes", brief(v)));
            }
            let mut b = s.as_bytes().to_vec();
            b.resize(*n, 0);
            out.bytes(&b);
        }
        DataType::FixedUtf32(n) => {
            let s = v.as_str().ok_or_else(wrong)?;
            if s.chars().count() > *n {
                return Err(format!("{} is longer than {n} characters", brief(v)));
            }
            let mut b: Vec<u8> = s.chars().flat_map(|c| u32::from(c).to_le_bytes()).collect();
            b.resize(n * 4, 0);
            out.bytes(&b);
        }
        DataType::RawBits(_) | DataType::RawBytes(_) | DataType::Float8(_) | DataType::Structured { .. } => {
            return Err(wrong())
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': ({shape}), }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn fixed(d: &Decoded) -> &[u8] {
        match &d.data {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => panic!("variable"),
        }
    }

    #[test]
    fn raw_whole_or_one_element() {
        let d = decode(BodyFormat::Raw, &[1, 0, 2, 0], &DataType::UInt16, &[2]).unwrap();
        assert_eq!((fixed(&d), d.scalar), (&[1u8, 0, 2, 0][..], false));
        let d = decode(BodyFormat::Raw, &[7, 0], &DataType::UInt16, &[3, 3]).unwrap();
        assert!(d.scalar);
        let e = decode(BodyFormat::Raw, &[1, 2, 3], &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("expected 4 bytes") && e.contains("got 3 bytes") && e.contains("uint16"), "{e}");
        assert!(decode(BodyFormat::Raw, b"x", &DataType::String, &[1]).unwrap_err().0.contains("send JSON"));
    }

    #[test]
    fn npy_checks_dtype_and_shape_and_converts_order() {
        let body = npy("<u2", false, "2,", &[1, 0, 2, 0]);
        assert_eq!(fixed(&decode(BodyFormat::Npy, &body, &DataType::UInt16, &[2]).unwrap()), &[1, 0, 2, 0]);
        let body = npy(">u2", false, "2,", &[0, 1, 0, 2]);
        assert_eq!(fixed(&decode(BodyFormat::Npy, &body, &DataType::UInt16, &[2]).unwrap()), &[1, 0, 2, 0]);
        // Fortran order [[1, 2, 3], [4, 5, 6]] is stored 1 4 2 5 3 6.
        let body = npy("|u1", true, "2, 3", &[1, 4, 2, 5, 3, 6]);
        assert_eq!(fixed(&decode(BodyFormat::Npy, &body, &DataType::UInt8, &[2, 3]).unwrap()), &[1, 2, 3, 4, 5, 6]);
        let scalar = decode(BodyFormat::Npy, &npy("|u1", false, "", &[9]), &DataType::UInt8, &[4]).unwrap();
        assert!(scalar.scalar);
        let e = decode(BodyFormat::Npy, &npy("<f4", false, "2,", &[0; 8]), &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("'<f4'") && e.contains("expected '<u2'"), "{e}");
        let e = decode(BodyFormat::Npy, &npy("<u2", false, "3,", &[0; 6]), &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("shape [3]") && e.contains("[2]"), "{e}");
        let e = decode(BodyFormat::Npy, &npy("<u2", false, "2,", &[0; 3]), &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("needs 4 data bytes, got 3"), "{e}");
        assert!(decode(BodyFormat::Npy, b"not npy at all", &DataType::UInt8, &[1]).unwrap_err().0.contains("magic"));
    }

    #[test]
    fn json_nested_lists_scalars_and_errors() {
        let d = decode(BodyFormat::Json, b"[[1, 2], [3, 4]]", &DataType::Int16, &[2, 2]).unwrap();
        assert_eq!(fixed(&d), &[1, 0, 2, 0, 3, 0, 4, 0]);
        let d = decode(BodyFormat::Json, b"\"NaN\"", &DataType::Float64, &[5]).unwrap();
        assert!(d.scalar && f64::from_le_bytes(fixed(&d).try_into().unwrap()).is_nan());
        // Float64 values parse to the exact double (numpy's repr round-trips).
        let d = decode(BodyFormat::Json, b"[-250.45421916374374, 0.1]", &DataType::Float64, &[2]).unwrap();
        let want: Vec<u8> = [-250.454_219_163_743_74_f64, 0.1].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(fixed(&d), &want[..]);
        let d = decode(BodyFormat::Json, b"[1.5, -2]", &DataType::Complex64, &[3]).unwrap();
        assert!(d.scalar, "a complex value that does not fit the shape is one value");
        let d = decode(BodyFormat::Json, br#"["a", "bc"]"#, &DataType::String, &[2]).unwrap();
        assert_eq!(d.data, ChunkData::Variable(vec![b"a".to_vec(), b"bc".to_vec()]));
        let e = decode(BodyFormat::Json, b"[[1, 2], [3]]", &DataType::Int16, &[2, 2]).unwrap_err().0;
        assert!(e.contains("shape [2, 2]") && e.contains("at [1]: expected a list of 2 items, got 1"), "{e}");
        let e = decode(BodyFormat::Json, b"[300]", &DataType::UInt8, &[1]).unwrap_err().0;
        assert!(e.contains("300") && e.contains("uint8"), "{e}");
        assert!(decode(BodyFormat::Json, b"[1,", &DataType::UInt8, &[1]).unwrap_err().0.contains("not valid JSON"));
    }
}
