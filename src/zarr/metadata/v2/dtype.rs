//! Zarr v2 `dtype`: numpy type strings and structured lists.
//!
//! Spec: Zarr v2, "Data type encoding": a byte-order character (`<`, `>`,
//! `|`), a kind (`b i u f c m M S U V`) and a size, e.g. `"<f8"`, `"|b1"`,
//! `"|S12"`; datetimes carry a unit, `"<M8[ns]"`, `"<m8[10s]"`; structured
//! types are lists of `[name, dtype]` or `[name, dtype, shape]`. Real clients
//! also write `"|O"` (object arrays, encoded by an object codec in `filters`)
//! and TensorStore writes `"bfloat16"` and `"int4"` without a byte order.
//!
//! Scalars map onto [`DataType`] so v2 and v3 share one type vocabulary.
//! TensorStore's `float8_*` names (one byte, no byte order) parse too.
//! Not supported: numpy `f16`/`c32` (long double), byte-order-less forms
//! other than TensorStore's.

use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::Value;

use super::super::data_type::{DataType, Field, Float8Kind, TimeUnit};
use super::super::error::{describe, index, MetadataError, Result};
use super::super::json::{array, shape, string};

/// Byte order prefix of a v2 dtype string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// `<`.
    Little,
    /// `>`.
    Big,
    /// `|` (single-byte and byte-string types).
    NotApplicable,
}

impl ByteOrder {
    fn prefix(self) -> char {
        match self {
            Self::Little => '<',
            Self::Big => '>',
            Self::NotApplicable => '|',
        }
    }
}

/// One field of a v2 structured dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructuredFieldV2 {
    /// Field name.
    pub name: String,
    /// Field type (scalar or nested structured; never object).
    pub dtype: DataTypeV2,
    /// Sub-array shape (empty for a scalar field).
    pub shape: Vec<u64>,
}

/// A parsed v2 `dtype`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataTypeV2 {
    /// A scalar type with its byte order.
    Scalar {
        /// Byte order as written (or implied, for TensorStore's names).
        byte_order: ByteOrder,
        /// The element type.
        data_type: DataType,
    },
    /// `"|O"`: Python objects, meaning given by the object codec in `filters`.
    Object,
    /// A structured (record) type.
    Structured(Vec<StructuredFieldV2>),
}

impl DataTypeV2 {
    /// Parses a v2 `dtype` value.
    ///
    /// # Errors
    ///
    /// Unknown or malformed type strings and structured lists.
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let parsed = match value {
            Value::String(s) => parse_str(s, path, value)?,
            Value::Array(_) => parse_structured(value, path).map(Self::Structured)?,
            other => {
                return Err(MetadataError::expected(
                    path,
                    "a numpy dtype string such as \"<f8\" or a list of [name, dtype] fields",
                    other,
                ))
            }
        };
        // Before anything is built from it (the fill value is).
        crate::zarr::metadata::data_type::check_element_size(parsed.size(), path)?;
        Ok(parsed)
    }

    /// Element size in bytes (`None` for object arrays or on overflow).
    #[must_use]
    pub fn size(&self) -> Option<usize> {
        match self {
            Self::Scalar { data_type, .. } => data_type.size(),
            Self::Object => None,
            Self::Structured(fields) => fields.iter().try_fold(0usize, |acc, f| {
                let count = f.shape.iter().try_fold(1usize, |n, d| n.checked_mul(usize::try_from(*d).ok()?))?;
                acc.checked_add(f.dtype.size()?.checked_mul(count)?)
            }),
        }
    }

    /// The JSON form: the numpy string or the structured list.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Self::Scalar { byte_order, data_type } => Value::String(scalar_str(*byte_order, data_type)),
            Self::Object => Value::String("|O".into()),
            Self::Structured(fields) => Value::Array(
                fields
                    .iter()
                    .map(|f| {
                        let mut item = vec![Value::String(f.name.clone()), f.dtype.to_json()];
                        if !f.shape.is_empty() {
                            item.push(f.shape.iter().copied().map(Value::from).collect());
                        }
                        Value::Array(item)
                    })
                    .collect(),
            ),
        }
    }
}

impl Serialize for DataTypeV2 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.to_json() {
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in &items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

fn scalar_str(order: ByteOrder, dt: &DataType) -> String {
    let p = order.prefix();
    let time = |kind: char, unit: &TimeUnit| match (unit.base(), unit.scale_factor()) {
        ("generic", _) => format!("{p}{kind}8"),
        (u, 1) => format!("{p}{kind}8[{u}]"),
        (u, n) => format!("{p}{kind}8[{n}{u}]"),
    };
    match dt {
        DataType::Bool => "|b1".into(),
        DataType::Int4 => "int4".into(),
        DataType::BFloat16 => "bfloat16".into(),
        DataType::Float8(kind) => kind.name().into(),
        DataType::Int8 => "|i1".into(),
        DataType::UInt8 => "|u1".into(),
        DataType::Int16 => format!("{p}i2"),
        DataType::Int32 => format!("{p}i4"),
        DataType::Int64 => format!("{p}i8"),
        DataType::UInt16 => format!("{p}u2"),
        DataType::UInt32 => format!("{p}u4"),
        DataType::UInt64 => format!("{p}u8"),
        DataType::Float16 => format!("{p}f2"),
        DataType::Float32 => format!("{p}f4"),
        DataType::Float64 => format!("{p}f8"),
        DataType::Complex64 => format!("{p}c8"),
        DataType::Complex128 => format!("{p}c16"),
        DataType::FixedBytes(length_bytes) => format!("|S{length_bytes}"),
        DataType::RawBytes(length_bytes) | DataType::RawBits(length_bytes) => format!("|V{length_bytes}"),
        DataType::FixedUtf32(chars) => format!("{p}U{chars}"),
        DataType::DateTime64(unit) => time('M', unit),
        DataType::TimeDelta64(unit) => time('m', unit),
        // Not produced by the v2 parser; written as the closest numpy form.
        DataType::String | DataType::Bytes | DataType::Structured { .. } => "|O".into(),
    }
}

fn bad(path: &str, got: &Value, why: &str) -> MetadataError {
    MetadataError::new(path, format!("invalid numpy dtype {}: {why}", describe(got)))
}

fn parse_str(s: &str, path: &str, got: &Value) -> Result<DataTypeV2> {
    // TensorStore's extension types carry no byte order.
    match s {
        "bfloat16" | "int4" => {
            return Ok(DataTypeV2::Scalar {
                byte_order: ByteOrder::Little,
                data_type: if s == "int4" { DataType::Int4 } else { DataType::BFloat16 },
            })
        }
        "|O" => return Ok(DataTypeV2::Object),
        _ => {}
    }
    if let Some(kind) = Float8Kind::parse(s) {
        return Ok(DataTypeV2::Scalar { byte_order: ByteOrder::NotApplicable, data_type: DataType::Float8(kind) });
    }
    let mut chars = s.chars();
    let byte_order = match chars.next() {
        Some('<') => ByteOrder::Little,
        Some('>') => ByteOrder::Big,
        Some('|') => ByteOrder::NotApplicable,
        _ => {
            return Err(bad(
                path,
                got,
                "expected a byte order '<', '>' or '|' followed by a type code and size, e.g. \"<f8\"",
            ))
        }
    };
    let kind = chars.next().ok_or_else(|| bad(path, got, "missing type code"))?;
    let rest = chars.as_str();
    if kind == 'M' || kind == 'm' {
        return parse_time(kind, byte_order, rest, path, got);
    }
    let size: usize = (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        .then(|| rest.parse().ok())
        .flatten()
        .ok_or_else(|| bad(path, got, "expected a byte size after the type code"))?;
    let data_type = match (kind, size) {
        ('b', 1) => DataType::Bool,
        ('i', 1) => DataType::Int8,
        ('i', 2) => DataType::Int16,
        ('i', 4) => DataType::Int32,
        ('i', 8) => DataType::Int64,
        ('u', 1) => DataType::UInt8,
        ('u', 2) => DataType::UInt16,
        ('u', 4) => DataType::UInt32,
        ('u', 8) => DataType::UInt64,
        ('f', 2) => DataType::Float16,
        ('f', 4) => DataType::Float32,
        ('f', 8) => DataType::Float64,
        ('c', 8) => DataType::Complex64,
        ('c', 16) => DataType::Complex128,
        ('S', n) if n > 0 => DataType::FixedBytes(n),
        ('V', n) if n > 0 => DataType::RawBytes(n),
        ('U', n) if n > 0 => {
            // Its size in bytes must be representable.
            n.checked_mul(4).ok_or_else(|| bad(path, got, "size too large"))?;
            DataType::FixedUtf32(n)
        }
        ('b' | 'i' | 'u' | 'f' | 'c' | 'S' | 'V' | 'U', _) => {
            return Err(bad(path, got, "unsupported size for this type code"))
        }
        _ => return Err(bad(path, got, "unknown type code; expected one of b, i, u, f, c, m, M, S, U, V or \"|O\"")),
    };
    if byte_order == ByteOrder::NotApplicable && data_type.endianness_matters() {
        return Err(bad(path, got, "multi-byte types need a byte order '<' or '>', not '|'"));
    }
    // numpy reads "<i1" and ">S4" as "|i1" and "|S4", and that is what
    // serialising writes: keep the parsed value equal to its canonical form.
    let byte_order = if data_type.endianness_matters() { byte_order } else { ByteOrder::NotApplicable };
    Ok(DataTypeV2::Scalar { byte_order, data_type })
}

/// `M8`, `M8[ns]`, `m8[10s]`.
fn parse_time(kind: char, byte_order: ByteOrder, rest: &str, path: &str, got: &Value) -> Result<DataTypeV2> {
    let unit_part =
        rest.strip_prefix('8').ok_or_else(|| bad(path, got, "datetime types are 8 bytes, e.g. \"<M8[ns]\""))?;
    let (unit, scale_factor) = if unit_part.is_empty() {
        ("generic", 1)
    } else {
        let inner = unit_part
            .strip_prefix('[')
            .and_then(|u| u.strip_suffix(']'))
            .ok_or_else(|| bad(path, got, "expected a unit in brackets, e.g. \"<M8[ns]\""))?;
        let digits = inner.bytes().take_while(u8::is_ascii_digit).count();
        let (num, unit) = inner.split_at(digits);
        let scale = if num.is_empty() {
            1
        } else {
            num.parse::<u32>()
                .ok()
                .filter(|n| (1..=i32::MAX.unsigned_abs()).contains(n))
                .ok_or_else(|| bad(path, got, "invalid unit multiplier"))?
        };
        (unit, scale)
    };
    let unit = TimeUnit::new(unit, scale_factor).ok_or_else(|| {
        bad(path, got, "unknown time unit; expected Y, M, W, D, h, m, s, ms, us, μs, ns, ps, fs, as or generic")
    })?;
    if byte_order == ByteOrder::NotApplicable {
        return Err(bad(path, got, "datetime types need a byte order '<' or '>'"));
    }
    let data_type = if kind == 'M' { DataType::DateTime64(unit) } else { DataType::TimeDelta64(unit) };
    Ok(DataTypeV2::Scalar { byte_order, data_type })
}

fn parse_structured(value: &Value, path: &str) -> Result<Vec<StructuredFieldV2>> {
    let what = "a list of [name, dtype] or [name, dtype, shape] fields";
    let items = array(value, path, what)?;
    if items.is_empty() {
        return Err(MetadataError::new(path, "expected at least one field"));
    }
    let mut fields: Vec<StructuredFieldV2> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = index(path, i);
        let parts = array(item, &p, "a [name, dtype] or [name, dtype, shape] field")?;
        let (name, dtype, field_shape) = match parts {
            [name, dtype] => (name, dtype, None),
            [name, dtype, s] => (name, dtype, Some(s)),
            _ => return Err(MetadataError::expected(&p, "a [name, dtype] or [name, dtype, shape] field", item)),
        };
        let name = string(name, &index(&p, 0))?;
        if fields.iter().any(|f| f.name == name) {
            return Err(MetadataError::new(index(&p, 0), format!("duplicate field name \"{name}\"")));
        }
        let dtype_path = index(&p, 1);
        let dtype = DataTypeV2::from_json(dtype, &dtype_path)?;
        if dtype == DataTypeV2::Object {
            return Err(MetadataError::new(dtype_path, "object fields are not supported in structured dtypes"));
        }
        let field_shape = match field_shape {
            Some(s) => shape(s, &index(&p, 2), 0)?,
            None => Vec::new(),
        };
        fields.push(StructuredFieldV2 { name: name.to_owned(), dtype, shape: field_shape });
    }
    if DataTypeV2::Structured(fields.clone()).size().is_none() {
        return Err(MetadataError::new(path, "structured dtype is too large"));
    }
    Ok(fields)
}

/// The v3 view of a structured field list, when every field is a plain
/// scalar (sub-array fields have no v3 equivalent yet).
#[must_use]
pub fn structured_as_v3(fields: &[StructuredFieldV2]) -> Option<DataType> {
    let mut offset = 0usize;
    let fields = fields
        .iter()
        .map(|f| match &f.dtype {
            DataTypeV2::Scalar { data_type, .. } if f.shape.is_empty() => {
                let field = Field {
                    name: f.name.clone(),
                    offset,
                    data_type: Box::new(data_type.clone()),
                    big_endian: false,
                    subarray: Vec::new(),
                };
                offset = offset.checked_add(data_type.size()?)?;
                Some(field)
            }
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(DataType::Structured { size: offset, fields })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<DataTypeV2> {
        DataTypeV2::from_json(&v, "dtype")
    }

    #[test]
    fn absurd_element_sizes_are_refused_before_anything_is_built() {
        for dtype in [json!("<U200000000"), json!("|V1000000000000"), json!("|S400000000"), json!([["a", "|V2000000"]])]
        {
            let e = parse(dtype.clone()).unwrap_err().to_string();
            assert!(e.contains("larger than zarrd supports"), "{dtype}: {e}");
        }
        assert!(parse(json!("<U262144")).is_ok(), "exactly 1 MiB");
        assert!(parse(json!("<U262145")).is_err());
    }

    #[test]
    fn scalars_round_trip() {
        for s in [
            "<f8",
            ">f4",
            "<i2",
            "|u1",
            "|i1",
            "|b1",
            "<c16",
            ">c8",
            "<f2",
            "|S5",
            "<U3",
            "|V4",
            "<M8[ns]",
            "<m8[10s]",
            ">M8",
            "<u8",
            "bfloat16",
            "int4",
            "|O",
            "float8_e4m3fn",
            "float8_e4m3fnuz",
            "float8_e4m3b11fnuz",
            "float8_e5m2",
            "float8_e5m2fnuz",
        ] {
            let dt = parse(json!(s)).unwrap();
            assert_eq!(dt.to_json(), json!(s), "{s}");
        }
        assert_eq!(parse(json!("<U3")).unwrap().size(), Some(12));
    }

    #[test]
    fn one_byte_orders_are_canonical() {
        // Found by fuzzing: "<i1" parsed as little-endian but serialised as
        // "|i1", which parsed back as a different value.
        for (written, canonical) in [("<i1", "|i1"), (">u1", "|u1"), ("<b1", "|b1"), (">S4", "|S4"), ("<V2", "|V2")] {
            let dt = parse(json!(written)).unwrap();
            assert_eq!(dt.to_json(), json!(canonical), "{written}");
            assert_eq!(parse(dt.to_json()).unwrap(), dt, "{written}");
        }
    }

    #[test]
    fn structured() {
        let v = json!([["x", "<u2", [2, 3]], ["y", "<f4", [5]]]);
        let dt = parse(v.clone()).unwrap();
        assert_eq!(dt.size(), Some(32));
        assert_eq!(dt.to_json(), v);
        let v = json!([["r", "|u1"], ["g", "|u1"], ["b", "|u1"]]);
        let DataTypeV2::Structured(fields) = parse(v).unwrap() else { panic!() };
        assert_eq!(structured_as_v3(&fields).unwrap().size(), Some(3));
    }

    #[test]
    fn rejections() {
        for (v, path) in [
            (json!("f8"), "dtype"),
            (json!("<f3"), "dtype"),
            (json!("float8_e4m3"), "dtype"),
            (json!("<float8_e5m2"), "dtype"),
            (json!("|f8"), "dtype"),
            (json!("<x4"), "dtype"),
            (json!("<M8[fortnight]"), "dtype"),
            (json!("<M4[s]"), "dtype"),
            (json!("<M8[s"), "dtype"),
            (json!("|S0"), "dtype"),
            (json!("<"), "dtype"),
            (json!(""), "dtype"),
            (json!(7), "dtype"),
            (json!([]), "dtype"),
            (json!([["a"]]), "dtype[0]"),
            (json!([["a", "<f8"], ["a", "<f4"]]), "dtype[1][0]"),
            (json!([["a", "|O"]]), "dtype[0][1]"),
            (json!([["a", "<f8", [-1]]]), "dtype[0][2][0]"),
            (json!([["a", "<f8", [4_294_967_296_u64, 4_294_967_296_u64]]]), "dtype"),
        ] {
            let e = parse(v.clone()).unwrap_err();
            assert_eq!(e.path, path, "{v}: {e}");
        }
    }
}
