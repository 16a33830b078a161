//! Fill values, parsed according to the array's data type.
//!
//! Spec: Zarr v3 core, "Permitted fill values" (`data-types/index.rst`):
//! booleans, integers in range, floats as numbers or `"NaN"`, `"Infinity"`,
//! `"-Infinity"`, `"0x<hex bits>"`, complex as `[re, im]`, `r*` as arrays of
//! bytes. Extension types follow zarr-python 3.1: base64 strings for
//! byte-like and structured types, plain strings for text, integers or
//! `"NaT"` for times. Zarr v2 ("`fill_value`" in the v2 spec): `null` allowed
//! everywhere, no hex floats, base64 for `S`/`V`/structured, any JSON for
//! object (`|O`) arrays (its meaning depends on the object codec).
//!
//! Accepted leniencies, because zarr-python reads them: a whole-valued float
//! (`0.0`) for an integer type, a number for the `string` type.
//!
//! Serialising a [`FillValue`] writes the canonical JSON (integers without a
//! fraction, specials as strings, bytes as padded standard base64).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::Value;

use super::data_type::DataType;
use super::error::{describe, index, MetadataError, Result};
use super::v2::dtype::DataTypeV2;

/// A floating-point fill value, kept in the form it was written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FloatFill {
    /// A finite number (rounded to the data type when used).
    Number(f64),
    /// `"NaN"`: the quiet NaN with a zero payload.
    NaN,
    /// `"Infinity"`.
    Infinity,
    /// `"-Infinity"`.
    NegInfinity,
    /// `"0x..."`: the exact bit pattern of a `size_bytes`-byte float.
    Bits {
        /// The bits, as an unsigned integer.
        bits: u64,
        /// Width of the float type in bytes (2, 4 or 8).
        size_bytes: u8,
    },
}

/// A fill value, typed by the array's data type.
#[derive(Debug, Clone, PartialEq)]
pub enum FillValue {
    /// v2 `null`: no fill value (readers use zero).
    Null,
    /// `bool`.
    Bool(bool),
    /// Signed integers, `int4`, and datetime/timedelta (`"NaT"` is `i64::MIN`).
    Int(i64),
    /// Unsigned integers.
    UInt(u64),
    /// Real floating point.
    Float(FloatFill),
    /// Complex: real and imaginary parts.
    Complex(FloatFill, FloatFill),
    /// Text (`string`, `fixed_length_utf32`, v2 `U`).
    String(String),
    /// Byte strings, raw bytes and structured values (JSON: base64).
    Bytes(Vec<u8>),
    /// `r*` raw bits (JSON: array of byte values).
    RawBits(Vec<u8>),
    /// v2 object arrays: kept verbatim.
    Json(Value),
}

impl FillValue {
    /// Parses a v3 `fill_value` for `data_type`.
    ///
    /// # Errors
    ///
    /// When the value is not a valid representation of an element of
    /// `data_type` (wrong JSON type, out of range, wrong length).
    pub fn from_v3_json(value: &Value, data_type: &DataType, path: &str) -> Result<Self> {
        parse(value, data_type, path, Version::V3)
    }

    /// Parses a v2 `fill_value` for `dtype`.
    ///
    /// # Errors
    ///
    /// As [`FillValue::from_v3_json`]; `null` is always accepted.
    pub fn from_v2_json(value: &Value, dtype: &DataTypeV2, path: &str) -> Result<Self> {
        if value.is_null() {
            return Ok(Self::Null);
        }
        match dtype {
            DataTypeV2::Object => Ok(Self::Json(value.clone())),
            DataTypeV2::Structured(_) => {
                let size = dtype.size().ok_or_else(|| MetadataError::new(path, "structured data type is too large"))?;
                base64_fill(value, path, Some(size), true)
            }
            // zarr-python writes `b"xy"` for `|S4` as "eHk="; TensorStore's zarr
            // driver rejects fewer than 4 bytes. Padded with NULs (the same
            // element), the value serialises at full length, which both read.
            // Types too large to pad cheaply keep the form as written.
            DataTypeV2::Scalar { data_type: data_type @ DataType::FixedBytes(length_bytes), .. } => {
                match parse(value, data_type, path, Version::V2)? {
                    Self::Bytes(mut b) if *length_bytes <= MAX_PADDED_FILL => {
                        b.resize(*length_bytes, 0);
                        Ok(Self::Bytes(b))
                    }
                    other => Ok(other),
                }
            }
            DataTypeV2::Scalar { data_type, .. } => parse(value, data_type, path, Version::V2),
        }
    }
}

/// The largest `|S<n>` whose fill value is padded to `n` bytes.
const MAX_PADDED_FILL: usize = 64 * 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    V2,
    V3,
}

fn parse(value: &Value, dt: &DataType, path: &str, version: Version) -> Result<FillValue> {
    let ty = dt.name();
    Ok(match dt {
        DataType::Bool => FillValue::Bool(
            value.as_bool().ok_or_else(|| MetadataError::expected(path, "true or false for data type bool", value))?,
        ),
        DataType::Int4 => FillValue::Int(signed(value, path, &ty, -8, 7)?),
        DataType::Int8 => FillValue::Int(signed(value, path, &ty, i8::MIN.into(), i8::MAX.into())?),
        DataType::Int16 => FillValue::Int(signed(value, path, &ty, i16::MIN.into(), i16::MAX.into())?),
        DataType::Int32 => FillValue::Int(signed(value, path, &ty, i32::MIN.into(), i32::MAX.into())?),
        DataType::Int64 => FillValue::Int(signed(value, path, &ty, i64::MIN, i64::MAX)?),
        DataType::UInt8 => FillValue::UInt(unsigned(value, path, &ty, u8::MAX.into())?),
        DataType::UInt16 => FillValue::UInt(unsigned(value, path, &ty, u16::MAX.into())?),
        DataType::UInt32 => FillValue::UInt(unsigned(value, path, &ty, u32::MAX.into())?),
        DataType::UInt64 => FillValue::UInt(unsigned(value, path, &ty, u64::MAX)?),
        DataType::Float16 | DataType::BFloat16 | DataType::Float32 | DataType::Float64 => {
            FillValue::Float(float(value, path, dt, version)?)
        }
        DataType::Float8(kind) => {
            let f = float(value, path, dt, version)?;
            let infinite = matches!(f, FloatFill::Infinity | FloatFill::NegInfinity);
            if infinite && kind.from_f64(f64::INFINITY).is_none() {
                return Err(MetadataError::new(path, format!("data type {ty} has no infinities, got {value}")));
            }
            FillValue::Float(f)
        }
        DataType::Complex64 | DataType::Complex128 => {
            let part = if matches!(dt, DataType::Complex64) { DataType::Float32 } else { DataType::Float64 };
            let pair = value.as_array().map(Vec::as_slice);
            let Some([re, im]) = pair else {
                return Err(MetadataError::expected(
                    path,
                    &format!("a [real, imaginary] pair for data type {ty}"),
                    value,
                ));
            };
            FillValue::Complex(float(re, &index(path, 0), &part, version)?, float(im, &index(path, 1), &part, version)?)
        }
        // TensorStore 0.1.86 writes (and only reads) base64 here; the spec's form is a byte array.
        DataType::RawBits(size_bytes) if value.is_string() => base64_fill(value, path, Some(*size_bytes), true)?,
        DataType::RawBits(size_bytes) => {
            let what = format!("an array of {size_bytes} integers 0..=255 (or base64) for data type {ty}");
            let items = value
                .as_array()
                .filter(|a| a.len() == *size_bytes)
                .ok_or_else(|| MetadataError::expected(path, &what, value))?;
            let bytes = items
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    b.as_u64()
                        .and_then(|b| u8::try_from(b).ok())
                        .ok_or_else(|| MetadataError::expected(index(path, i), "an integer 0..=255", b))
                })
                .collect::<Result<Vec<u8>>>()?;
            FillValue::RawBits(bytes)
        }
        DataType::String => match value {
            Value::String(s) => FillValue::String(s.clone()),
            // zarr-python reads numbers here (and some 3.0 versions wrote 0).
            Value::Number(n) => FillValue::String(n.to_string()),
            other => return Err(MetadataError::expected(path, "a string for data type string", other)),
        },
        DataType::Bytes => base64_fill(value, path, None, false)?,
        DataType::FixedUtf32(max_chars) => {
            let max_chars = *max_chars;
            match value.as_str() {
                Some(s) if s.chars().count() <= max_chars => FillValue::String(s.to_owned()),
                _ => {
                    return Err(MetadataError::expected(
                        path,
                        &format!("a string of at most {max_chars} characters"),
                        value,
                    ))
                }
            }
        }
        DataType::FixedBytes(length_bytes) => base64_fill(value, path, Some(*length_bytes), false)?,
        DataType::RawBytes(length_bytes) => base64_fill(value, path, Some(*length_bytes), true)?,
        DataType::Structured { .. } => {
            let size = dt.size().ok_or_else(|| MetadataError::new(path, "structured data type is too large"))?;
            base64_fill(value, path, Some(size), true)?
        }
        DataType::DateTime64(_) | DataType::TimeDelta64(_) => {
            if value.as_str() == Some("NaT") {
                FillValue::Int(i64::MIN)
            } else {
                match value.as_i64() {
                    Some(n) => FillValue::Int(n),
                    None => {
                        return Err(MetadataError::expected(
                            path,
                            &format!("a 64-bit integer or \"NaT\" for data type {ty}"),
                            value,
                        ))
                    }
                }
            }
        }
    })
}

/// A JSON integer (or whole-valued float) as i128, for range checks.
fn integer(value: &Value) -> Option<i128> {
    if let Some(n) = value.as_i64() {
        return Some(n.into());
    }
    if let Some(n) = value.as_u64() {
        return Some(n.into());
    }
    let f = value.as_f64()?;
    // 2^64 bounds every integer type here; beyond it a cast would saturate.
    #[allow(clippy::cast_possible_truncation)]
    (f.fract() == 0.0 && f.abs() <= 1.9e19).then_some(f as i128)
}

fn signed(value: &Value, path: &str, ty: &str, lo: i64, hi: i64) -> Result<i64> {
    integer(value)
        .filter(|n| (i128::from(lo)..=i128::from(hi)).contains(n))
        .and_then(|n| i64::try_from(n).ok())
        .ok_or_else(|| MetadataError::expected(path, &format!("an integer {lo}..={hi} for data type {ty}"), value))
}

fn unsigned(value: &Value, path: &str, ty: &str, hi: u64) -> Result<u64> {
    integer(value)
        .filter(|n| (0..=i128::from(hi)).contains(n))
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| MetadataError::expected(path, &format!("an integer 0..={hi} for data type {ty}"), value))
}

fn float(value: &Value, path: &str, dt: &DataType, version: Version) -> Result<FloatFill> {
    let ty = dt.name();
    let (size_bytes, max) = match dt {
        DataType::Float16 => (2u8, 65504.0),
        DataType::BFloat16 => (2, 3.389_531_389_251_535_5e38),
        DataType::Float8(kind) => (1, kind.max()),
        DataType::Float32 => (4, f64::from(f32::MAX)),
        _ => (8, f64::MAX),
    };
    let expected = || {
        let hex =
            if version == Version::V3 { format!(", \"0x<{} hex digits>\"", 2 * size_bytes) } else { String::new() };
        MetadataError::expected(
            path,
            &format!("a number, \"NaN\", \"Infinity\", \"-Infinity\"{hex} for data type {ty}"),
            value,
        )
    };
    match value {
        Value::Number(n) => {
            let f = n.as_f64().ok_or_else(expected)?;
            if f.abs() > max {
                return Err(MetadataError::new(
                    path,
                    format!("{} is out of range for data type {ty} (largest finite value {max:e})", describe(value)),
                ));
            }
            Ok(FloatFill::Number(f))
        }
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(FloatFill::NaN),
            "Infinity" => Ok(FloatFill::Infinity),
            "-Infinity" => Ok(FloatFill::NegInfinity),
            _ if version == Version::V3 => {
                let digits = s.strip_prefix("0x").ok_or_else(expected)?;
                let width = 2 * usize::from(size_bytes);
                if digits.is_empty() || digits.len() > width || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(expected());
                }
                let bits = u64::from_str_radix(digits, 16).map_err(|_| expected())?;
                Ok(FloatFill::Bits { bits, size_bytes })
            }
            _ => Err(expected()),
        },
        _ => Err(expected()),
    }
}

/// A base64 string, optionally of an exact or maximum decoded length.
fn base64_fill(value: &Value, path: &str, len: Option<usize>, exact: bool) -> Result<FillValue> {
    let what = match (len, exact) {
        (None, _) => "a base64 string".to_owned(),
        (Some(n), true) => format!("a base64 string of exactly {n} bytes"),
        (Some(n), false) => format!("a base64 string of at most {n} bytes"),
    };
    let bytes = value
        .as_str()
        .and_then(|s| BASE64.decode(s).ok())
        .ok_or_else(|| MetadataError::expected(path, &what, value))?;
    match len {
        Some(n) if (exact && bytes.len() != n) || bytes.len() > n => {
            Err(MetadataError::new(path, format!("expected {what}, got {} bytes", bytes.len())))
        }
        _ => Ok(FillValue::Bytes(bytes)),
    }
}

impl Serialize for FloatFill {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Number(f) => s.serialize_f64(*f),
            Self::NaN => s.serialize_str("NaN"),
            Self::Infinity => s.serialize_str("Infinity"),
            Self::NegInfinity => s.serialize_str("-Infinity"),
            Self::Bits { bits, size_bytes } => {
                let width = 2 * usize::from(*size_bytes);
                s.serialize_str(&format!("0x{bits:0width$x}"))
            }
        }
    }
}

impl Serialize for FillValue {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Null => s.serialize_unit(),
            Self::Bool(b) => s.serialize_bool(*b),
            Self::Int(n) => s.serialize_i64(*n),
            Self::UInt(n) => s.serialize_u64(*n),
            Self::Float(f) => f.serialize(s),
            Self::Complex(re, im) => {
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element(re)?;
                seq.serialize_element(im)?;
                seq.end()
            }
            Self::String(text) => s.serialize_str(text),
            Self::Bytes(bytes) => s.serialize_str(&BASE64.encode(bytes)),
            Self::RawBits(bytes) => bytes.serialize(s),
            Self::Json(v) => v.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v3(v: Value, dt: &DataType) -> Result<FillValue> {
        FillValue::from_v3_json(&v, dt, "fill_value")
    }

    fn round_trip(v: Value, dt: &DataType) {
        let fill = v3(v.clone(), dt).unwrap();
        assert_eq!(serde_json::to_value(&fill).unwrap(), v, "{dt:?}");
    }

    #[test]
    fn canonical_round_trips() {
        round_trip(json!(true), &DataType::Bool);
        round_trip(json!(-3), &DataType::Int16);
        round_trip(json!(18_446_744_073_709_551_615_u64), &DataType::UInt64);
        round_trip(json!(-9_223_372_036_854_775_808_i64), &DataType::Int64);
        round_trip(json!(0.0), &DataType::Float64);
        round_trip(json!("NaN"), &DataType::Float32);
        round_trip(json!("-Infinity"), &DataType::Float16);
        round_trip(json!("0x7ff8000000000001"), &DataType::Float64);
        round_trip(json!([1.0, "-Infinity"]), &DataType::Complex128);
        round_trip(json!(["NaN", 2.5]), &DataType::Complex64);
        round_trip(json!([0, 255]), &DataType::RawBits(2));
        round_trip(json!(""), &DataType::String);
        round_trip(json!("YWI="), &DataType::FixedBytes(5));
        round_trip(json!("AAAAAA=="), &DataType::RawBytes(4));
    }

    #[test]
    fn short_v2_byte_string_fills_serialise_at_full_length() {
        // zarr-python writes b"xy" for |S4 as "eHk="; TensorStore's zarr driver rejects fewer than 4 bytes.
        let s = |n| DataTypeV2::Scalar {
            byte_order: super::super::v2::dtype::ByteOrder::NotApplicable,
            data_type: DataType::FixedBytes(n),
        };
        let fill = FillValue::from_v2_json(&json!("eHk="), &s(4), "fill_value").unwrap();
        assert_eq!(fill, FillValue::Bytes(b"xy\0\0".to_vec()));
        assert_eq!(serde_json::to_value(&fill).unwrap(), json!("eHkAAA=="));
        // No allocation of a size only the dtype claims.
        let huge = FillValue::from_v2_json(&json!("eHk="), &s(1 << 40), "fill_value").unwrap();
        assert_eq!(huge, FillValue::Bytes(b"xy".to_vec()));
        assert!(FillValue::from_v2_json(&json!("eHkAAAA="), &s(4), "fill_value").is_err());
    }

    #[test]
    fn raw_bits_fill_in_tensorstore_base64() {
        let dt = DataType::RawBits(2);
        assert_eq!(v3(json!("AQI="), &dt).unwrap(), FillValue::Bytes(vec![1, 2]));
        assert_eq!(v3(json!([1, 2]), &dt).unwrap(), FillValue::RawBits(vec![1, 2]));
        assert!(v3(json!("AQID"), &dt).is_err());
    }

    #[test]
    fn lenient_forms() {
        assert_eq!(v3(json!(1.0), &DataType::UInt8).unwrap(), FillValue::UInt(1));
        assert_eq!(v3(json!(0), &DataType::String).unwrap(), FillValue::String("0".into()));
        let nat = v3(json!("NaT"), &DataType::DateTime64(super::super::data_type::TimeUnit::new("ms", 1).unwrap()));
        assert_eq!(nat.unwrap(), FillValue::Int(i64::MIN));
    }

    #[test]
    fn rejections() {
        let e = v3(json!(300), &DataType::UInt8).unwrap_err();
        assert_eq!(e.to_string(), "fill_value: expected an integer 0..=255 for data type uint8, got 300");
        assert!(v3(json!(-1), &DataType::UInt64).is_err());
        assert!(v3(json!(1.5), &DataType::Int32).is_err());
        assert!(v3(json!("1"), &DataType::Int32).is_err());
        assert!(v3(json!(8), &DataType::Int4).is_err());
        assert!(v3(json!(1), &DataType::Bool).is_err());
        assert!(v3(json!(1e6), &DataType::Float16).is_err());
        assert!(v3(json!(1e39), &DataType::Float32).is_err());
        assert!(v3(json!("nan"), &DataType::Float32).is_err());
        assert!(v3(json!("0x123456789"), &DataType::Float32).is_err());
        assert!(v3(json!("0x"), &DataType::Float32).is_err());
        assert!(v3(json!(null), &DataType::Float32).is_err());
        let e = v3(json!([1.0]), &DataType::Complex64).unwrap_err();
        assert_eq!(e.path, "fill_value");
        let e = v3(json!([1.0, "x"]), &DataType::Complex64).unwrap_err();
        assert_eq!(e.path, "fill_value[1]");
        let e = v3(json!([0, 256]), &DataType::RawBits(2)).unwrap_err();
        assert_eq!(e.path, "fill_value[1]");
        assert!(v3(json!("AAAA"), &DataType::RawBytes(4)).is_err());
        assert!(v3(json!("!!"), &DataType::FixedBytes(4)).is_err());
        assert!(v3(json!("abc"), &DataType::FixedUtf32(2)).is_err());
    }

    #[test]
    fn float8_fill_values() {
        use super::super::data_type::Float8Kind;
        let v2 = |v: Value, kind| {
            let dt = DataTypeV2::Scalar {
                byte_order: super::super::v2::dtype::ByteOrder::NotApplicable,
                data_type: DataType::Float8(kind),
            };
            FillValue::from_v2_json(&v, &dt, "fill_value")
        };
        assert_eq!(v2(json!(-2), Float8Kind::E5M2).unwrap(), FillValue::Float(FloatFill::Number(-2.0)));
        assert_eq!(v2(json!("NaN"), Float8Kind::E4M3Fnuz).unwrap(), FillValue::Float(FloatFill::NaN));
        assert_eq!(v2(json!("Infinity"), Float8Kind::E5M2).unwrap(), FillValue::Float(FloatFill::Infinity));
        let e = v2(json!("-Infinity"), Float8Kind::E4M3Fn).unwrap_err();
        assert_eq!(e.to_string(), "fill_value: data type float8_e4m3fn has no infinities, got \"-Infinity\"");
        let e = v2(json!(449), Float8Kind::E4M3Fn).unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
        assert!(v2(json!(31), Float8Kind::E4M3B11Fnuz).is_err());
    }
}
