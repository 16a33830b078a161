//! Zarr data types, named as in Zarr v3 `zarr.json`.
//!
//! Spec: Zarr v3 core, "Data types" and `data-types/index.rst` (core types
//! `bool`, `{u,}int{8,16,32,64}`, `float{16,32,64}`, `complex{64,128}`,
//! `r*`), plus the extension data types real clients write:
//!
//! - zarr-python 3.1 (`zarr.core.dtype`): `string`, `variable_length_bytes`
//!   (alias `bytes` accepted on read), `fixed_length_utf32`,
//!   `null_terminated_bytes`, `raw_bytes` (each `{"length_bytes": n}`),
//!   `numpy.datetime64` / `numpy.timedelta64` (`{"unit", "scale_factor"}`)
//!   and `structured` (`{"fields": [[name, data_type], ...]}`);
//! - TensorStore `zarr3`: `bfloat16` and `int4`;
//! - TensorStore `zarr` and `zarr3` (0.1.86): the float8 variants
//!   `float8_e4m3fn`, `float8_e4m3fnuz`, `float8_e4m3b11fnuz`, `float8_e5m2`,
//!   `float8_e5m2fnuz` (one byte each, carried as raw bytes). TensorStore
//!   0.1.86 also knows `float8_e3m4`, `float8_e8m0fnu` and `float4_e2m1fn`;
//!   zarrd does not yet.
//!
//! The type itself is [`crate::zarr::data_type::DataType`], one enum for
//! documents and engine (re-exported here with [`TimeUnit`] and
//! [`Float8Kind`]); this module adds its v3 side: names, parsing, the JSON
//! form and the element-size limit. Zarr v2 `dtype` strings map onto the
//! same enum (see [`super::v2`]).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value};

use super::error::{index, MetadataError, Result};
use super::json::{array, enum_str, int_in, object, string, Obj};

pub use crate::zarr::data_type::{DataType, Field, Float8Kind, TimeUnit, TIME_UNITS};

/// Names accepted as string data types (parameterised types need the object
/// form and are listed separately in messages).
const SIMPLE_NAMES: &[&str] = &[
    "bool",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "string",
    "variable_length_bytes",
];

const PARAMETERISED_NAMES: &[&str] = &[
    "fixed_length_utf32",
    "null_terminated_bytes",
    "raw_bytes",
    "numpy.datetime64",
    "numpy.timedelta64",
    "structured",
];

/// The v3 document side of [`DataType`]: names, parsing, the JSON form.
impl DataType {
    /// The v3 name (`"float64"`, `"numpy.datetime64"`, `"r16"` ...).
    #[must_use]
    pub fn name(&self) -> String {
        let s = match self {
            Self::Bool => "bool",
            Self::Int4 => "int4",
            Self::Int8 => "int8",
            Self::Int16 => "int16",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::UInt8 => "uint8",
            Self::UInt16 => "uint16",
            Self::UInt32 => "uint32",
            Self::UInt64 => "uint64",
            Self::Float16 => "float16",
            Self::BFloat16 => "bfloat16",
            Self::Float8(kind) => kind.name(),
            Self::Float32 => "float32",
            Self::Float64 => "float64",
            Self::Complex64 => "complex64",
            Self::Complex128 => "complex128",
            Self::RawBits(size_bytes) => return format!("r{}", size_bytes.saturating_mul(8)),
            Self::String => "string",
            Self::Bytes => "variable_length_bytes",
            Self::FixedUtf32(_) => "fixed_length_utf32",
            Self::FixedBytes(_) => "null_terminated_bytes",
            Self::RawBytes(_) => "raw_bytes",
            Self::DateTime64(_) => "numpy.datetime64",
            Self::TimeDelta64(_) => "numpy.timedelta64",
            Self::Structured { .. } => "structured",
        };
        s.to_owned()
    }

    /// Whether the `bytes` codec needs an `endian` for this type: multi-byte
    /// numbers, UTF-32 text and times. Single-byte and opaque byte types
    /// (`raw_bytes`, `null_terminated_bytes`, `structured`, `r*`) do not, which
    /// matches what zarr-python writes.
    #[must_use]
    pub fn endianness_matters(&self) -> bool {
        match self {
            Self::Int16
            | Self::Int32
            | Self::Int64
            | Self::UInt16
            | Self::UInt32
            | Self::UInt64
            | Self::Float16
            | Self::BFloat16
            | Self::Float32
            | Self::Float64
            | Self::Complex64
            | Self::Complex128
            | Self::FixedUtf32(_)
            | Self::DateTime64(_)
            | Self::TimeDelta64(_) => true,
            Self::Bool
            | Self::Int4
            | Self::Int8
            | Self::UInt8
            | Self::Float8(_)
            | Self::RawBits(_)
            | Self::String
            | Self::Bytes
            | Self::FixedBytes(_)
            | Self::RawBytes(_)
            | Self::Structured { .. } => false,
        }
    }

    /// Parses a v3 `data_type` value: a name string or a
    /// `{"name", "configuration"}` object.
    ///
    /// # Errors
    ///
    /// Unknown names, missing or malformed configurations, elements larger
    /// than [`MAX_ELEMENT_BYTES`].
    pub fn from_v3_json(value: &Value, path: &str) -> Result<Self> {
        let parsed = Self::from_v3_json_unchecked(value, path)?;
        check_element_size(parsed.size(), path)?;
        Ok(parsed)
    }

    fn from_v3_json_unchecked(value: &Value, path: &str) -> Result<Self> {
        match value {
            Value::String(name) => parse_simple_name(name).ok_or_else(|| {
                if PARAMETERISED_NAMES.contains(&name.as_str()) {
                    MetadataError::new(
                        path,
                        format!(
                            "data type \"{name}\" needs the object form \
                             {{\"name\": \"{name}\", \"configuration\": {{...}}}}"
                        ),
                    )
                } else {
                    unknown(path, value)
                }
            }),
            Value::Object(_) => parse_object(value, path),
            other => {
                Err(MetadataError::expected(path, "a data type name or a {\"name\", \"configuration\"} object", other))
            }
        }
    }

    /// The v3 JSON form (string for plain types, object for parameterised).
    #[must_use]
    pub fn to_v3_json(&self) -> Value {
        let length = |n: usize| json!({"name": self.name(), "configuration": {"length_bytes": n}});
        match self {
            Self::FixedUtf32(chars) => length(chars.saturating_mul(4)),
            Self::FixedBytes(length_bytes) | Self::RawBytes(length_bytes) => length(*length_bytes),
            Self::DateTime64(unit) | Self::TimeDelta64(unit) => {
                json!({"name": self.name(),
                       "configuration": {"unit": unit.base(), "scale_factor": unit.scale_factor()}})
            }
            Self::Structured { fields, .. } => {
                let fields: Vec<Value> = fields.iter().map(|f| json!([f.name, f.data_type.to_v3_json()])).collect();
                json!({"name": "structured", "configuration": {"fields": fields}})
            }
            _ => Value::String(self.name()),
        }
    }
}

impl Serialize for DataType {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self.to_v3_json() {
            Value::String(s) => serializer.serialize_str(&s),
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in &map {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// The largest element a fixed-size data type may have. Fill values and
/// every per-element buffer are built from the element size as soon as a
/// document is parsed, before any configured limit can be checked, so the
/// parser itself refuses absurd ones (`<U200000000`, `r8000000000`): far
/// above any real fixed-length string or raw type, far below what hurts.
pub const MAX_ELEMENT_BYTES: usize = 1 << 20;

/// An error naming [`MAX_ELEMENT_BYTES`] when `size` exceeds it.
///
/// # Errors
/// The element is larger than [`MAX_ELEMENT_BYTES`].
pub fn check_element_size(size: Option<usize>, path: &str) -> Result<()> {
    match size {
        Some(n) if n > MAX_ELEMENT_BYTES => Err(MetadataError::new(
            path,
            format!("elements of {n} bytes are larger than zarrd supports ({MAX_ELEMENT_BYTES} bytes)"),
        )),
        _ => Ok(()),
    }
}

fn unknown(path: &str, got: &Value) -> MetadataError {
    MetadataError::new(
        path,
        format!(
            "unknown data type {}; expected one of {}, r<bits> or an object for {}",
            super::error::describe(got),
            SIMPLE_NAMES.join(", "),
            PARAMETERISED_NAMES.join(", "),
        ),
    )
}

fn parse_simple_name(name: &str) -> Option<DataType> {
    Some(match name {
        "bool" => DataType::Bool,
        "int4" => DataType::Int4,
        "int8" => DataType::Int8,
        "int16" => DataType::Int16,
        "int32" => DataType::Int32,
        "int64" => DataType::Int64,
        "uint8" => DataType::UInt8,
        "uint16" => DataType::UInt16,
        "uint32" => DataType::UInt32,
        "uint64" => DataType::UInt64,
        "float16" => DataType::Float16,
        "bfloat16" => DataType::BFloat16,
        "float32" => DataType::Float32,
        "float64" => DataType::Float64,
        "complex64" => DataType::Complex64,
        "complex128" => DataType::Complex128,
        "string" => DataType::String,
        // zarr-python 3.1 reads the short alias "bytes" as well.
        "variable_length_bytes" | "bytes" => DataType::Bytes,
        _ => return Float8Kind::parse(name).map(DataType::Float8).or_else(|| parse_raw_bits(name)),
    })
}

/// `r8`, `r16`, ...: a positive multiple of 8 bits.
fn parse_raw_bits(name: &str) -> Option<DataType> {
    let digits = name.strip_prefix('r')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    let bits: usize = digits.parse().ok()?;
    (bits % 8 == 0).then_some(DataType::RawBits(bits / 8))
}

fn parse_object(value: &Value, path: &str) -> Result<DataType> {
    let mut obj = Obj::new(value, path)?;
    let name_path = obj.at("name");
    let name_value = obj.required("name")?;
    let name = string(name_value, &name_path)?;
    if let Some(mu) = obj.optional("must_understand") {
        // The spec does not allow data types to be ignored.
        if !super::json::boolean(mu, &obj.at("must_understand"))? {
            return Err(MetadataError::new(
                obj.at("must_understand"),
                "must_understand: false is not allowed for data types",
            ));
        }
    }
    let config_path = obj.at("configuration");
    let config = obj.optional("configuration");
    obj.deny_rest("\"name\", \"configuration\" and \"must_understand\"")?;

    if let Some(simple) = parse_simple_name(name) {
        if let Some(c) = config {
            if !object(c, &config_path)?.is_empty() {
                return Err(MetadataError::new(config_path, format!("data type \"{name}\" takes no configuration")));
            }
        }
        return Ok(simple);
    }
    if !PARAMETERISED_NAMES.contains(&name) {
        return Err(unknown(&name_path, name_value));
    }
    let config = config.ok_or_else(|| {
        MetadataError::new(
            config_path.clone(),
            format!("required field is missing (data type \"{name}\" is parameterised)"),
        )
    })?;
    let mut cfg = Obj::new(config, &config_path)?;
    let parsed = match name {
        "fixed_length_utf32" => DataType::FixedUtf32(length_bytes(&mut cfg, 4)? / 4),
        "null_terminated_bytes" => DataType::FixedBytes(length_bytes(&mut cfg, 1)?),
        "raw_bytes" => DataType::RawBytes(length_bytes(&mut cfg, 1)?),
        "numpy.datetime64" | "numpy.timedelta64" => {
            let unit_path = cfg.at("unit");
            let base = enum_str(cfg.required("unit")?, &unit_path, TIME_UNITS)?;
            let sf_path = cfg.at("scale_factor");
            let scale_factor = scale(cfg.required("scale_factor")?, &sf_path)?;
            let unit =
                TimeUnit::new(base, scale_factor).ok_or_else(|| MetadataError::new(unit_path, "unknown unit"))?;
            if name == "numpy.datetime64" {
                DataType::DateTime64(unit)
            } else {
                DataType::TimeDelta64(unit)
            }
        }
        _ => {
            let fields_path = cfg.at("fields");
            let (size, fields) = structured_fields(cfg.required("fields")?, &fields_path)?;
            DataType::Structured { size, fields }
        }
    };
    cfg.deny_rest(match name {
        "numpy.datetime64" | "numpy.timedelta64" => "\"unit\" and \"scale_factor\"",
        "structured" => "\"fields\"",
        _ => "\"length_bytes\"",
    })?;
    Ok(parsed)
}

fn length_bytes(cfg: &mut Obj<'_>, multiple_of: u64) -> Result<usize> {
    let path = cfg.at("length_bytes");
    let v = cfg.required("length_bytes")?;
    let what = if multiple_of == 1 {
        "a positive integer".to_owned()
    } else {
        format!("a positive multiple of {multiple_of}")
    };
    match v.as_u64() {
        Some(n) if n > 0 && n % multiple_of == 0 => {
            usize::try_from(n).map_err(|_| MetadataError::expected(&path, &what, v))
        }
        _ => Err(MetadataError::expected(&path, &what, v)),
    }
}

/// A datetime scale factor: `1..2^31` as in zarr-python.
pub(crate) fn scale(v: &Value, path: &str) -> Result<u32> {
    let n = int_in(v, path, 1, i64::from(i32::MAX))?;
    u32::try_from(n).map_err(|_| MetadataError::expected(path, "a positive integer", v))
}

/// zarr-python's `structured`: fields packed in order, little-endian in
/// memory like every engine type; answers the record size and the fields.
fn structured_fields(v: &Value, path: &str) -> Result<(usize, Vec<Field>)> {
    let items = array(v, path, "an array of [name, data_type] pairs")?;
    if items.is_empty() {
        return Err(MetadataError::new(path, "expected at least one field"));
    }
    let mut fields: Vec<Field> = Vec::with_capacity(items.len());
    let mut offset = 0usize;
    for (i, item) in items.iter().enumerate() {
        let p = index(path, i);
        let pair = array(item, &p, "a [name, data_type] pair")?;
        let [name, dt] = pair else {
            return Err(MetadataError::expected(&p, "a [name, data_type] pair", item));
        };
        let name = string(name, &index(&p, 0))?;
        if fields.iter().any(|f| f.name == name) {
            return Err(MetadataError::new(index(&p, 0), format!("duplicate field name \"{name}\"")));
        }
        let dt_path = index(&p, 1);
        let data_type = DataType::from_v3_json(dt, &dt_path)?;
        let Some(size) = data_type.size() else {
            return Err(MetadataError::new(
                dt_path,
                format!("structured fields need a fixed-size data type, got \"{}\"", data_type.name()),
            ));
        };
        fields.push(Field {
            name: name.to_owned(),
            offset,
            data_type: Box::new(data_type),
            big_endian: false,
            subarray: Vec::new(),
        });
        offset =
            offset.checked_add(size).ok_or_else(|| MetadataError::new(path, "structured data type is too large"))?;
    }
    Ok((offset, fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<DataType> {
        DataType::from_v3_json(&v, "data_type")
    }

    #[test]
    fn absurd_element_sizes_are_refused() {
        for dt in [json!("r8000000000"), json!({"name": "raw_bytes", "configuration": {"length_bytes": 2_000_000}})] {
            let e = parse(dt.clone()).unwrap_err().to_string();
            assert!(e.contains("larger than zarrd supports"), "{dt}: {e}");
        }
        assert!(parse(json!("r8388608")).is_ok(), "exactly 1 MiB");
    }

    #[test]
    fn core_names() {
        assert_eq!(parse(json!("float64")).unwrap(), DataType::Float64);
        assert_eq!(parse(json!("bool")).unwrap().size(), Some(1));
        assert_eq!(parse(json!("r16")).unwrap(), DataType::RawBits(2));
        assert!(parse(json!("r12")).is_err());
        assert!(parse(json!("r0")).is_err());
        assert!(parse(json!("r")).is_err());
        assert_eq!(parse(json!({"name": "int16"})).unwrap(), DataType::Int16);
        assert_eq!(parse(json!("bytes")).unwrap(), DataType::Bytes);
    }

    #[test]
    fn zarr_python_object_forms() {
        let dt = parse(json!({"name":"fixed_length_utf32","configuration":{"length_bytes":28}})).unwrap();
        assert_eq!(dt, DataType::FixedUtf32(7));
        assert!(dt.endianness_matters());
        let dt = parse(json!({"name":"numpy.datetime64","configuration":{"unit":"ms","scale_factor":1}})).unwrap();
        assert_eq!(dt.size(), Some(8));
        let dt = parse(json!({"name":"structured","configuration":{"fields":[["x","float32"],["y",{"name":"raw_bytes","configuration":{"length_bytes":2}}]]}}))
            .unwrap();
        assert_eq!(dt.size(), Some(6));
        assert!(!dt.endianness_matters());
    }

    #[test]
    fn round_trip_json() {
        for v in [
            json!("uint16"),
            json!("r24"),
            json!({"name":"raw_bytes","configuration":{"length_bytes":4}}),
            json!({"name":"numpy.timedelta64","configuration":{"unit":"s","scale_factor":10}}),
            json!({"name":"structured","configuration":{"fields":[["a","int8"],["b","float64"]]}}),
        ] {
            let dt = parse(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&dt).unwrap(), v);
        }
    }

    #[test]
    fn float8_names() {
        for kind in Float8Kind::ALL {
            assert_eq!(parse(json!(kind.name())).unwrap(), DataType::Float8(kind));
            assert_eq!(DataType::Float8(kind).size(), Some(1));
            assert!(!DataType::Float8(kind).endianness_matters());
        }
        // TensorStore 0.1.86's zarr3 driver writes them in zarr.json too.
        assert_eq!(parse(json!("float8_e5m2fnuz")).unwrap(), DataType::Float8(Float8Kind::E5M2Fnuz));
        assert_eq!(serde_json::to_value(DataType::Float8(Float8Kind::E4M3Fn)).unwrap(), json!("float8_e4m3fn"));
        assert!(parse(json!("float8_e3m4")).is_err());
    }

    #[test]
    fn errors() {
        let e = parse(json!("float128")).unwrap_err();
        assert_eq!(e.path, "data_type");
        assert!(e.message.starts_with("unknown data type \"float128\""), "{e}");
        let e = parse(json!({"name": "foo"})).unwrap_err();
        assert_eq!(e.path, "data_type.name");
        let e = parse(json!("fixed_length_utf32")).unwrap_err();
        assert!(e.message.contains("object form"), "{e}");
        let e = parse(json!({"name":"fixed_length_utf32","configuration":{"length_bytes":6}})).unwrap_err();
        assert_eq!(e.path, "data_type.configuration.length_bytes");
        let e = parse(json!({"name":"numpy.datetime64","configuration":{"unit":"fortnight","scale_factor":1}}))
            .unwrap_err();
        assert_eq!(e.path, "data_type.configuration.unit");
        let e = parse(json!({"name":"structured","configuration":{"fields":[["a","string"]]}})).unwrap_err();
        assert_eq!(e.path, "data_type.configuration.fields[0][1]");
        let e = parse(json!({"name":"int8","configuration":{"x":1}})).unwrap_err();
        assert_eq!(e.path, "data_type.configuration");
        let e = parse(json!({"name":"int8","must_understand":false})).unwrap_err();
        assert_eq!(e.path, "data_type.must_understand");
        assert!(parse(json!(5)).is_err());
    }
}
