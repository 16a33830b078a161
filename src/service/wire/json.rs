//! JSON, both ways: answers rendered as nested lists, outermost dimension
//! first (numpy's `tolist()` shape), written piece by piece so a large
//! answer streams ([`JsonEncoder`]); and request bodies of slice writes
//! read back from the same shapes ([`decode`]: numbers also as `"NaN"`,
//! `"Infinity"`, `"-Infinity"`, `"NaT"` for datetimes, base64 strings for
//! variable-length bytes; raw bits, `float8_*` and structured types are not
//! accepted).
//!
//! Elements, by data type:
//!
//! - `bool`: `true` / `false`; integers (`int4` included): numbers;
//! - floats (`float16`, `bfloat16`, `float32`, `float64`): the shortest
//!   decimal that reads back as the same value; NaN and the infinities as the
//!   strings Zarr's `fill_value` uses: `"NaN"`, `"Infinity"`, `"-Infinity"`;
//! - complex: `[re, im]`, each a float as above;
//! - `datetime64` / `timedelta64`: the integer count of units (NaT is
//!   -9223372036854775808);
//! - `string`, `fixed_length_utf32`: strings (`fixed_length_utf32` without
//!   its trailing NULs, as numpy reads it; invalid code points as U+FFFD);
//! - `bytes`, `null_terminated_bytes` (trailing NULs removed, as numpy reads
//!   it) and raw bits (`r<n>`, `|V<n>`): standard base64 with padding;
//! - structured records: an object from field name to value, a field with a
//!   subarray shape as nested lists.
//!
//! - `float8_*`: numbers as floats above (their exact values).

use std::io::Write;

use base64::Engine;
use half::{bf16, f16};
use serde_json::Value;

use super::{count, err, type_name, DecodeError, DecodeResult, Decoded};
use crate::zarr::chunk::ChunkData;
use crate::zarr::data_type::DataType;

/// Writes the nested-list structure of an array of `shape` around elements
/// given in C order, in as many pieces as the caller likes.
#[derive(Debug, Clone)]
pub struct JsonEncoder {
    data_type: DataType,
    shape: Vec<u64>,
    idx: Vec<u64>,
    pos: u64,
    total: u64,
}

impl JsonEncoder {
    /// An encoder for `shape` elements of `data_type`.
    #[must_use]
    pub fn new(data_type: DataType, shape: Vec<u64>) -> Self {
        let total = shape.iter().product();
        let idx = vec![0; shape.len()];
        Self { data_type, shape, idx, pos: 0, total }
    }

    /// The element type.
    #[must_use]
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// How many elements are still expected.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.total - self.pos
    }

    fn before(&mut self, out: &mut Vec<u8>) {
        let rank = self.shape.len();
        if self.pos == 0 {
            out.resize(out.len() + rank, b'[');
            return;
        }
        // Dimensions (other than the outermost) that just wrapped to 0.
        let k = (1..rank).rev().take_while(|&d| self.idx[d] == 0).count();
        out.resize(out.len() + k, b']');
        out.push(b',');
        out.resize(out.len() + k, b'[');
    }

    fn after(&mut self) {
        self.pos += 1;
        for d in (0..self.shape.len()).rev() {
            self.idx[d] += 1;
            if self.idx[d] < self.shape[d] || d == 0 {
                break;
            }
            self.idx[d] = 0;
        }
    }

    /// Writes packed fixed-size elements (a whole number of them).
    pub fn fixed(&mut self, elements: &[u8], out: &mut Vec<u8>) {
        let size = self.data_type.size().unwrap_or(1).max(1);
        let dt = self.data_type.clone();
        for e in elements.chunks_exact(size) {
            self.before(out);
            write_fixed(&dt, e, out);
            self.after();
        }
    }

    /// Writes variable-length elements.
    pub fn variable(&mut self, elements: &[Vec<u8>], out: &mut Vec<u8>) {
        let dt = self.data_type.clone();
        for e in elements {
            self.before(out);
            write_variable(&dt, e, out);
            self.after();
        }
    }

    /// Closes the structure; for an empty array, writes all of it
    /// (`[[], []]` for shape `[2, 0]`).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.total == 0 {
            write_empty(&self.shape, out);
        } else {
            out.resize(out.len() + self.shape.len(), b']');
        }
    }
}

/// How many brackets the JSON of an empty array of `shape` has: the
/// product of the dimensions before the first zero (bounded by the
/// caller's limits before [`JsonEncoder::finish`] writes them).
#[must_use]
pub fn empty_size(shape: &[u64]) -> u64 {
    shape.iter().take_while(|&&d| d != 0).fold(1u64, |a, &d| a.saturating_mul(d))
}

fn write_empty(shape: &[u64], out: &mut Vec<u8>) {
    match shape.split_first() {
        None => out.extend_from_slice(b"null"),
        Some((0, _)) => out.extend_from_slice(b"[]"),
        Some((&n, rest)) => {
            out.push(b'[');
            for i in 0..n {
                if i > 0 {
                    out.push(b',');
                }
                write_empty(rest, out);
            }
            out.push(b']');
        }
    }
}

fn write_f64(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"\"Infinity\"" } else { b"\"-Infinity\"" });
    } else {
        let _ = write!(out, "{v:?}");
    }
}

fn write_f32(v: f32, out: &mut Vec<u8>) {
    if v.is_finite() {
        // f32's own shortest form, so a float32 reads back exactly.
        let _ = write!(out, "{v:?}");
    } else {
        write_f64(f64::from(v), out);
    }
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

fn write_base64(b: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    out.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(b).as_bytes());
    out.push(b'"');
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Writes one fixed-size element (`b` is exactly its bytes).
pub fn write_fixed(dt: &DataType, b: &[u8], out: &mut Vec<u8>) {
    match dt {
        DataType::Bool => out.extend_from_slice(if b[0] != 0 { b"true" } else { b"false" }),
        DataType::Int8 | DataType::Int4 => {
            let _ = write!(out, "{}", i8::from_le_bytes(arr(b)));
        }
        DataType::Int16 => {
            let _ = write!(out, "{}", i16::from_le_bytes(arr(b)));
        }
        DataType::Int32 => {
            let _ = write!(out, "{}", i32::from_le_bytes(arr(b)));
        }
        DataType::Int64 | DataType::DateTime64(_) | DataType::TimeDelta64(_) => {
            let _ = write!(out, "{}", i64::from_le_bytes(arr(b)));
        }
        DataType::UInt8 => {
            let _ = write!(out, "{}", b[0]);
        }
        DataType::UInt16 => {
            let _ = write!(out, "{}", u16::from_le_bytes(arr(b)));
        }
        DataType::UInt32 => {
            let _ = write!(out, "{}", u32::from_le_bytes(arr(b)));
        }
        DataType::UInt64 => {
            let _ = write!(out, "{}", u64::from_le_bytes(arr(b)));
        }
        DataType::Float16 => write_f32(f16::from_le_bytes(arr(b)).to_f32(), out),
        DataType::BFloat16 => write_f32(bf16::from_le_bytes(arr(b)).to_f32(), out),
        DataType::Float32 => write_f32(f32::from_le_bytes(arr(b)), out),
        DataType::Float64 => write_f64(f64::from_le_bytes(arr(b)), out),
        DataType::Complex64 => {
            out.push(b'[');
            write_f32(f32::from_le_bytes(arr(b)), out);
            out.push(b',');
            write_f32(f32::from_le_bytes(arr(&b[4..])), out);
            out.push(b']');
        }
        DataType::Complex128 => {
            out.push(b'[');
            write_f64(f64::from_le_bytes(arr(b)), out);
            out.push(b',');
            write_f64(f64::from_le_bytes(arr(&b[8..])), out);
            out.push(b']');
        }
        DataType::FixedBytes(_) => {
            let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
            write_base64(&b[..end], out);
        }
        DataType::Float8(kind) => write_f64(kind.to_f64(b[0]), out),
        DataType::RawBits(_) | DataType::RawBytes(_) => write_base64(b, out),
        DataType::FixedUtf32(_) => {
            let mut s: String = b
                .chunks_exact(4)
                .map(|c| char::from_u32(u32::from_le_bytes(arr(c))).unwrap_or(char::REPLACEMENT_CHARACTER))
                .collect();
            s.truncate(s.trim_end_matches('\0').len());
            write_str(&s, out);
        }
        DataType::Structured { fields, .. } => {
            out.push(b'{');
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(&f.name, out);
                out.push(b':');
                let size = f.data_type.size().unwrap_or(0);
                let count = usize::try_from(f.subarray.iter().product::<u64>()).unwrap_or(0);
                let bytes = b.get(f.offset..f.offset + size * count).unwrap_or(&[]);
                if f.subarray.is_empty() {
                    write_fixed(&f.data_type, bytes, out);
                } else {
                    let mut enc = JsonEncoder::new((*f.data_type).clone(), f.subarray.clone());
                    enc.fixed(bytes, out);
                    enc.finish(out);
                }
            }
            out.push(b'}');
        }
        DataType::String | DataType::Bytes => write_variable(dt, b, out),
    }
}

/// Writes one variable-length element.
pub fn write_variable(dt: &DataType, b: &[u8], out: &mut Vec<u8>) {
    match dt {
        DataType::String => write_str(&String::from_utf8_lossy(b), out),
        _ => write_base64(b, out),
    }
}

/// One variable-length element for [`JsonEncoder::variable_until`]: its
/// stored bytes, or its JSON text already rendered (a fill value, rendered
/// once and repeated).
#[derive(Debug, Clone, Copy)]
pub enum VarItem<'a> {
    /// The element's bytes, rendered as [`write_variable`] does.
    Raw(&'a [u8]),
    /// The element's JSON text, written as it is.
    Text(&'a [u8]),
}

/// Where [`JsonEncoder::variable_until`] stopped: the next element, and how
/// far into it (bytes of its source) when it was cut between pieces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VarCursor {
    /// The next element to write (or to finish).
    pub index: usize,
    /// Bytes of that element's source already written (0: not started).
    pub offset: usize,
    /// Whether its opening quote (and separator) is written.
    pub open: bool,
}

/// Source bytes rendered per step of a long element, between the checks of
/// the piece's size (so a piece overshoots its limit by at most ~6 times this).
const VAR_BLOCK: usize = 16 * 1024;

impl JsonEncoder {
    /// Writes packed fixed-size elements until `out` holds at least `limit`
    /// bytes (at least one element is written); how many were written.
    pub fn fixed_until(&mut self, elements: &[u8], out: &mut Vec<u8>, limit: usize) -> usize {
        let size = self.data_type.size().unwrap_or(1).max(1);
        let dt = self.data_type.clone();
        let mut n = 0;
        for e in elements.chunks_exact(size) {
            if n > 0 && out.len() >= limit {
                break;
            }
            self.before(out);
            write_fixed(&dt, e, out);
            self.after();
            n += 1;
        }
        n
    }

    /// Writes variable-length elements `cursor.index..count` (`item(i)` is
    /// element `i`) until `out` holds at least `limit` bytes, cutting a long
    /// element between calls (its text is the same as written whole); true
    /// once every element is written. Each call makes progress.
    pub fn variable_until<'a>(
        &mut self,
        count: usize,
        item: impl Fn(usize) -> VarItem<'a>,
        cursor: &mut VarCursor,
        out: &mut Vec<u8>,
        limit: usize,
    ) -> bool {
        let start = out.len();
        let string = self.data_type == DataType::String;
        while cursor.index < count {
            if out.len() >= limit && out.len() > start {
                return false;
            }
            let element = item(cursor.index);
            if !cursor.open {
                self.before(out);
                if matches!(element, VarItem::Raw(_)) {
                    out.push(b'"');
                }
                cursor.open = true;
            }
            let (src, done) = match element {
                VarItem::Text(t) => (t, t.len()),
                VarItem::Raw(b) => (b, b.len()),
            };
            // One block of the element.
            let from = cursor.offset;
            let consumed = match element {
                VarItem::Text(_) => {
                    let end = (from + VAR_BLOCK * 4).min(done);
                    out.extend_from_slice(&src[from..end]);
                    end - from
                }
                VarItem::Raw(_) if string => escape_lossy_block(&src[from..], out),
                VarItem::Raw(_) => {
                    let end = (from + VAR_BLOCK / 3 * 3).min(done);
                    out.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(&src[from..end]).as_bytes());
                    end - from
                }
            };
            cursor.offset = from + consumed;
            if cursor.offset >= done {
                if matches!(element, VarItem::Raw(_)) {
                    out.push(b'"');
                }
                self.after();
                *cursor = VarCursor { index: cursor.index + 1, offset: 0, open: false };
            }
        }
        true
    }
}

/// Renders the start of `b` (bytes of a string; invalid UTF-8 as U+FFFD,
/// as `String::from_utf8_lossy`) escaped as serde_json escapes, about
/// [`VAR_BLOCK`] bytes of it; how many bytes of `b` it took (at least one
/// unless `b` is empty). It stops before a byte that is not a UTF-8
/// continuation byte, where a sequence (valid or not) starts, so a later
/// call goes on with the same result as rendering `b` whole.
fn escape_lossy_block(b: &[u8], out: &mut Vec<u8>) -> usize {
    let mut end = b.len().min(VAR_BLOCK);
    while end < b.len() && b[end] & 0xC0 == 0x80 {
        end += 1;
    }
    for chunk in b[..end].utf8_chunks() {
        escape_valid(chunk.valid().as_bytes(), out);
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{FFFD}".as_bytes());
        }
    }
    end
}

/// The length of each byte's escaped form in a string (1: written as it is).
const ESCAPED_LEN: [u8; 256] = {
    let mut t = [1u8; 256];
    let mut c = 0;
    while c < 32 {
        t[c] = 6;
        c += 1;
    }
    t[b'"' as usize] = 2;
    t[b'\\' as usize] = 2;
    t[b'\n' as usize] = 2;
    t[b'\r' as usize] = 2;
    t[b'\t' as usize] = 2;
    t[0x08] = 2;
    t[0x0c] = 2;
    t
};

/// The escape of byte `c` of a string (`None`: written as it is).
fn escape_of(c: u8) -> Option<&'static [u8]> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    const CONTROL: [[u8; 6]; 32] = {
        let mut t = [[0u8; 6]; 32];
        let mut i = 0;
        while i < 32 {
            t[i] = [b'\\', b'u', b'0', b'0', HEX[i >> 4], HEX[i & 15]];
            i += 1;
        }
        t
    };
    match c {
        b'"' => Some(b"\\\""),
        b'\\' => Some(b"\\\\"),
        b'\n' => Some(b"\\n"),
        b'\r' => Some(b"\\r"),
        b'\t' => Some(b"\\t"),
        0x08 => Some(b"\\b"),
        0x0c => Some(b"\\f"),
        0..=0x1f => Some(&CONTROL[c as usize]),
        _ => None,
    }
}

/// Writes valid UTF-8 `s` escaped (without quotes), as serde_json does.
fn escape_valid(s: &[u8], out: &mut Vec<u8>) {
    let mut from = 0;
    for (i, &c) in s.iter().enumerate() {
        if ESCAPED_LEN[c as usize] == 1 {
            continue;
        }
        if let Some(e) = escape_of(c) {
            out.extend_from_slice(&s[from..i]);
            out.extend_from_slice(e);
            from = i + 1;
        }
    }
    out.extend_from_slice(&s[from..]);
}

/// The length of one variable-length element's JSON text, as
/// [`write_variable`] writes it, computed without writing it.
#[must_use]
pub fn variable_text_len(dt: &DataType, b: &[u8]) -> u64 {
    if *dt != DataType::String {
        return 2 + (b.len() as u64).div_ceil(3) * 4;
    }
    let mut n = 2u64;
    for chunk in b.utf8_chunks() {
        n += chunk.valid().as_bytes().iter().map(|&c| u64::from(ESCAPED_LEN[c as usize])).sum::<u64>();
        if !chunk.invalid().is_empty() {
            n += 3;
        }
    }
    n
}

/// Elements being collected from JSON.
enum Out {
    Fixed(Vec<u8>),
    Variable(Vec<Vec<u8>>),
}

fn json_supported(dt: &DataType) -> bool {
    !matches!(dt, DataType::RawBits(_) | DataType::RawBytes(_) | DataType::Float8(_) | DataType::Structured { .. })
}

/// Decodes a JSON body for a selection of `shape` of an array of `dt`.
///
/// # Errors
/// A body that is not JSON, or not nested lists of `shape` (or one value)
/// of `dt`; the message names the position at fault.
pub fn decode(body: &[u8], dt: &DataType, shape: &[u64]) -> DecodeResult<Decoded> {
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

/// `narrow`, the value `x` (from `v`) as an element of the narrower float
/// type `dt`, unless a finite number became infinite: a number beyond the
/// type's range is refused rather than stored as an infinity nobody wrote
/// (`1e39` as float32; the infinities are written `"Infinity"`).
fn in_range<T: Copy>(
    v: &Value,
    dt: &DataType,
    x: f64,
    narrow: T,
    infinite: impl Fn(T) -> bool,
) -> std::result::Result<T, String> {
    if x.is_finite() && infinite(narrow) {
        return Err(format!(
            "{} is beyond the range of {} (write \"Infinity\" for an infinity)",
            brief(v),
            type_name(dt)
        ));
    }
    Ok(narrow)
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
        DataType::Float16 => {
            let x = float_of(v).ok_or_else(wrong)?;
            out.bytes(&in_range(v, dt, x, f16::from_f64(x), f16::is_infinite)?.to_le_bytes());
        }
        DataType::BFloat16 => {
            let x = float_of(v).ok_or_else(wrong)?;
            out.bytes(&in_range(v, dt, x, bf16::from_f64(x), bf16::is_infinite)?.to_le_bytes());
        }
        #[allow(clippy::cast_possible_truncation)] // float32 elements
        DataType::Float32 => {
            let x = float_of(v).ok_or_else(wrong)?;
            out.bytes(&in_range(v, dt, x, x as f32, f32::is_infinite)?.to_le_bytes());
        }
        DataType::Float64 => out.bytes(&float_of(v).ok_or_else(wrong)?.to_le_bytes()),
        DataType::Complex64 | DataType::Complex128 => {
            let parts = v.as_array().filter(|a| a.len() == 2).ok_or_else(|| format!("{} is not [re, im]", brief(v)))?;
            for p in parts {
                let x = float_of(p).ok_or_else(|| format!("{} is not [re, im]", brief(v)))?;
                if *dt == DataType::Complex64 {
                    #[allow(clippy::cast_possible_truncation)] // complex64 parts are float32
                    out.bytes(&in_range(v, dt, x, x as f32, f32::is_infinite)?.to_le_bytes());
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

    fn fixed(d: &Decoded) -> &[u8] {
        match &d.data {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => panic!("variable"),
        }
    }

    fn render(dt: DataType, shape: Vec<u64>, bytes: &[u8], pieces: usize) -> String {
        let size = dt.size().unwrap();
        let mut enc = JsonEncoder::new(dt, shape);
        let mut out = Vec::new();
        let n = bytes.len() / size;
        let per = n.div_ceil(pieces.max(1)).max(1);
        for part in bytes.chunks(per * size) {
            enc.fixed(part, &mut out);
        }
        enc.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn nesting_matches_tolist_in_any_number_of_pieces() {
        let data: Vec<u8> = (0u8..24).collect();
        for pieces in [1, 2, 5, 24] {
            assert_eq!(
                render(DataType::UInt8, vec![2, 3, 4], &data, pieces),
                "[[[0,1,2,3],[4,5,6,7],[8,9,10,11]],[[12,13,14,15],[16,17,18,19],[20,21,22,23]]]"
            );
        }
        assert_eq!(render(DataType::UInt8, vec![], &[7], 1), "7");
        assert_eq!(render(DataType::UInt8, vec![3], &[1, 2, 3], 2), "[1,2,3]");
        assert_eq!(render(DataType::UInt8, vec![2, 0], &[], 1), "[[],[]]");
        assert_eq!(render(DataType::UInt8, vec![0, 5], &[], 1), "[]");
        assert_eq!(empty_size(&[3, 4, 0, 2]), 12);
    }

    #[test]
    fn variable_elements_cut_between_pieces_read_as_written_whole() {
        let long: Vec<u8> =
            (0..100_000u32).map(|i| [b'a', b'"', 0x01, 0xff, b'\\', 0xc3, 0xa9][i as usize % 7]).collect();
        let items: Vec<Vec<u8>> = vec![b"x\ny".to_vec(), long.clone(), Vec::new(), "é€".as_bytes().to_vec(), long];
        for dt in [DataType::String, DataType::Bytes] {
            let mut fill = Vec::new();
            write_variable(&dt, b"F", &mut fill);
            let mut whole = Vec::new();
            let mut enc = JsonEncoder::new(dt.clone(), vec![6]);
            let all: Vec<Vec<u8>> = items.iter().cloned().chain([b"F".to_vec()]).collect();
            enc.variable(&all, &mut whole);
            enc.finish(&mut whole);
            for limit in [1, 100, 5000, 1 << 20] {
                let mut enc = JsonEncoder::new(dt.clone(), vec![6]);
                let mut cursor = VarCursor::default();
                let mut out = Vec::new();
                let item = |i: usize| if i < items.len() { VarItem::Raw(&items[i]) } else { VarItem::Text(&fill) };
                let mut calls = 0;
                loop {
                    let mut piece = Vec::new();
                    let done = enc.variable_until(6, item, &mut cursor, &mut piece, limit);
                    assert!(!piece.is_empty() || done);
                    out.extend_from_slice(&piece);
                    calls += 1;
                    if done {
                        break;
                    }
                }
                enc.finish(&mut out);
                assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&whole), "limit {limit}");
                assert!(limit > 1 << 19 || calls > 2, "limit {limit}: {calls} calls");
            }
            for it in &items {
                let mut one = Vec::new();
                write_variable(&dt, it, &mut one);
                assert_eq!(variable_text_len(&dt, it), one.len() as u64);
            }
        }
        let mut out = Vec::new();
        let mut enc = JsonEncoder::new(DataType::UInt8, vec![5]);
        assert_eq!(enc.fixed_until(&[1, 2, 3, 4, 5], &mut out, 3), 2);
        assert_eq!(enc.fixed_until(&[3, 4, 5], &mut out, usize::MAX), 3);
        enc.finish(&mut out);
        assert_eq!(out, b"[1,2,3,4,5]");
    }

    #[test]
    fn element_renderings() {
        let f: Vec<u8> =
            [1.5f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.1].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(render(DataType::Float32, vec![5], &f, 1), r#"[1.5,"NaN","Infinity","-Infinity",0.1]"#);
        let c: Vec<u8> = [1.0f64, -2.5].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(render(DataType::Complex128, vec![1], &c, 1), "[[1.0,-2.5]]");
        let h: Vec<u8> = f16::from_f32(0.5).to_le_bytes().to_vec();
        assert_eq!(render(DataType::Float16, vec![], &h, 1), "0.5");
        assert_eq!(render(DataType::Bool, vec![2], &[1, 0], 1), "[true,false]");
        assert_eq!(render(DataType::Int4, vec![2], &[0xf9, 7], 1), "[-7,7]");
        assert_eq!(render(DataType::FixedBytes(4), vec![1], b"ab\0\0", 1), r#"["YWI="]"#);
        let u: Vec<u8> = ['h', 'i', '\0'].iter().flat_map(|&c| u32::from(c).to_le_bytes()).collect();
        assert_eq!(render(DataType::FixedUtf32(3), vec![1], &u, 1), r#"["hi"]"#);
        let mut out = Vec::new();
        let mut enc = JsonEncoder::new(DataType::String, vec![2]);
        enc.variable(&[b"a\"b".to_vec(), "é".as_bytes().to_vec()], &mut out);
        enc.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), r#"["a\"b","é"]"#);
        let mut out = Vec::new();
        write_variable(&DataType::Bytes, &[0, 255], &mut out);
        assert_eq!(out, b"\"AP8=\"");
    }

    #[test]
    fn json_nested_lists_scalars_and_errors() {
        let d = decode(b"[[1, 2], [3, 4]]", &DataType::Int16, &[2, 2]).unwrap();
        assert_eq!(fixed(&d), &[1, 0, 2, 0, 3, 0, 4, 0]);
        let d = decode(b"\"NaN\"", &DataType::Float64, &[5]).unwrap();
        assert!(d.scalar && f64::from_le_bytes(fixed(&d).try_into().unwrap()).is_nan());
        // Float64 values parse to the exact double (numpy's repr round-trips).
        let d = decode(b"[-250.45421916374374, 0.1]", &DataType::Float64, &[2]).unwrap();
        let want: Vec<u8> = [-250.454_219_163_743_74_f64, 0.1].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(fixed(&d), &want[..]);
        let d = decode(b"[1.5, -2]", &DataType::Complex64, &[3]).unwrap();
        assert!(d.scalar, "a complex value that does not fit the shape is one value");
        let d = decode(br#"["a", "bc"]"#, &DataType::String, &[2]).unwrap();
        assert_eq!(d.data, ChunkData::Variable(vec![b"a".to_vec(), b"bc".to_vec()]));
        let e = decode(b"[[1, 2], [3]]", &DataType::Int16, &[2, 2]).unwrap_err().0;
        assert!(e.contains("shape [2, 2]") && e.contains("at [1]: expected a list of 2 items, got 1"), "{e}");
        let e = decode(b"[300]", &DataType::UInt8, &[1]).unwrap_err().0;
        assert!(e.contains("300") && e.contains("uint8"), "{e}");
        assert!(decode(b"[1,", &DataType::UInt8, &[1]).unwrap_err().0.contains("not valid JSON"));
    }

    /// A finite number beyond a narrower float type's range is refused,
    /// naming the element and the type; the largest finite values, the
    /// infinities written as such, and values that round to zero are not.
    #[test]
    fn numbers_beyond_a_float_types_range_are_refused() {
        for (body, dt, shape) in [
            (&b"[1, 1e39]"[..], DataType::Float32, 2),
            (b"[1, -3.5e38]", DataType::Float32, 2),
            (b"[[1e39, 0], [0, 0]]", DataType::Complex64, 2),
            (b"[70000]", DataType::Float16, 1),
            (b"[1e39]", DataType::BFloat16, 1),
        ] {
            let e = decode(body, &dt, &[shape]).unwrap_err().0;
            assert!(e.contains("beyond the range of") && e.contains(&type_name(&dt)), "{dt:?}: {e}");
        }
        let d = decode(br#"[3.4028234e38, "Infinity", 1e-50]"#, &DataType::Float32, &[3]).unwrap();
        let got: Vec<f32> = fixed(&d).chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![f32::MAX, f32::INFINITY, 0.0]);
        assert!(decode(b"[65504]", &DataType::Float16, &[1]).is_ok(), "float16's largest");
        let e = decode(b"[1e39]", &DataType::Float32, &[1]).unwrap_err().0;
        assert!(e.contains("at [0]") || e.contains("1e39"), "{e}");
    }
}
