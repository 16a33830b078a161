//! TensorStore's view of Zarr arrays: the `Schema` TensorStore reports for
//! a stored array, chunk layout selection for new arrays
//! ([`chunk_layout`]), and TensorStore-style creation specs ([`spec`]).
//!
//! Reference: "Mapping to TensorStore Schema" in
//! `reference/tensorstore-zarr3-driver.txt` and
//! `reference/tensorstore-zarr-driver.rst`:
//!
//! - `domain`: zero origin, resizable (implicit) upper bounds written
//!   `[[n]]`; v3 `dimension_names` become `labels` (`null` → `""`; left out
//!   when all are empty or the non-empty ones repeat);
//! - `chunk_layout`: zero `grid_origin`; `write_chunk` is the stored chunk,
//!   `read_chunk` the innermost sharding sub-chunk (else the same);
//!   `inner_order` from `transpose` codecs (v3) or `order` (v2: `F` is
//!   reversed);
//! - `codec`: `{"driver": "zarr3", "codecs": [...]}` with TensorStore's
//!   defaults filled in, or `{"driver": "zarr", "compressor", "filters"}`;
//! - `dtype`, `rank`, `fill_value` (left out for a v2 `null` fill value);
//! - `dimension_units` (v3): from the `dimension_units` attribute, each
//!   `"<number> <unit>"` string as `[number, "unit"]`.
//!
//! Arrays TensorStore cannot open — types it does not have (strings,
//! structured records, datetimes), codecs it does not have (`numcodecs.*`,
//! `vlen-*`), v2 filters — have no schema: [`schema_v3`] and [`schema_v2`]
//! return `None`.

pub mod chunk_layout;
pub mod spec;

use serde_json::{json, Map, Value};

use super::metadata::codec::{
    BloscConfig, CodecSpec, GzipConfig, IndexLocation, ShardingConfig, TransposeConfig, ZstdConfig,
};
use super::metadata::v2::dtype::DataTypeV2;
use super::metadata::v2::Order;
use super::metadata::{ArrayMetadataV2, ArrayMetadataV3, DataType, FillValue, FloatFill};

/// TensorStore's name of a data type, when TensorStore has it.
#[must_use]
pub fn dtype_name(dt: &DataType) -> Option<&'static str> {
    Some(match dt {
        DataType::Bool => "bool",
        DataType::Int4 => "int4",
        DataType::Int8 => "int8",
        DataType::Int16 => "int16",
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::UInt8 => "uint8",
        DataType::UInt16 => "uint16",
        DataType::UInt32 => "uint32",
        DataType::UInt64 => "uint64",
        DataType::Float16 => "float16",
        DataType::BFloat16 => "bfloat16",
        DataType::Float32 => "float32",
        DataType::Float64 => "float64",
        DataType::Complex64 => "complex64",
        DataType::Complex128 => "complex128",
        _ => return None,
    })
}

fn float_json(f: FloatFill, dt: &DataType) -> Value {
    let value = match f {
        FloatFill::Number(n) => n,
        FloatFill::NaN => f64::NAN,
        FloatFill::Infinity => f64::INFINITY,
        FloatFill::NegInfinity => f64::NEG_INFINITY,
        FloatFill::Bits { bits, size_bytes } => match size_bytes {
            2 if *dt == DataType::BFloat16 => f64::from(half::bf16::from_bits(bits_u16(bits))),
            2 => f64::from(half::f16::from_bits(bits_u16(bits))),
            4 => f64::from(f32::from_bits(u32::try_from(bits).unwrap_or(0))),
            _ => f64::from_bits(bits),
        },
    };
    if value.is_nan() {
        json!("NaN")
    } else if value == f64::INFINITY {
        json!("Infinity")
    } else if value == f64::NEG_INFINITY {
        json!("-Infinity")
    } else {
        json!(value)
    }
}

fn bits_u16(bits: u64) -> u16 {
    u16::try_from(bits).unwrap_or(0)
}

/// A fill value as TensorStore writes it in a schema (non-finite floats as
/// `"NaN"`, `"Infinity"`, `"-Infinity"`).
fn fill_json(fill: &FillValue, dt: &DataType) -> Option<Value> {
    let part = if *dt == DataType::Complex64 { DataType::Float32 } else { DataType::Float64 };
    Some(match fill {
        FillValue::Null => return None,
        FillValue::Bool(b) => json!(b),
        FillValue::Int(n) => json!(n),
        FillValue::UInt(n) => json!(n),
        FillValue::Float(f) => float_json(*f, dt),
        FillValue::Complex(re, im) => json!([float_json(*re, &part), float_json(*im, &part)]),
        _ => return None,
    })
}

fn domain(shape: &[u64], labels: Option<Vec<String>>) -> Value {
    let mut d = Map::new();
    d.insert("exclusive_max".into(), shape.iter().map(|&n| json!([n])).collect());
    d.insert("inclusive_min".into(), vec![0; shape.len()].into());
    if let Some(labels) = labels {
        d.insert("labels".into(), labels.into());
    }
    Value::Object(d)
}

/// Dimension labels from v3 dimension names, as TensorStore derives them.
fn labels(names: Option<&Vec<Option<String>>>) -> Option<Vec<String>> {
    let labels: Vec<String> = names?.iter().map(|n| n.clone().unwrap_or_default()).collect();
    let non_empty: Vec<&String> = labels.iter().filter(|l| !l.is_empty()).collect();
    let unique = non_empty.iter().collect::<std::collections::BTreeSet<_>>().len() == non_empty.len();
    (!non_empty.is_empty() && unique).then_some(labels)
}

/// Parses a TensorStore unit string (`"4 nm"`, `"nm"`, `"2.5"`, `""`) into
/// `[multiplier, base_unit]`.
#[must_use]
pub fn parse_unit(s: &str) -> (f64, String) {
    let s = s.trim();
    let split = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '-' || c == '+') && i == 0) || c == 'e'))
        .map_or(s.len(), |(i, _)| i);
    // Try the longest numeric prefix that parses (so `"e"` in a unit name is not eaten).
    for end in (1..=split).rev() {
        if let Ok(n) = s[..end].parse::<f64>() {
            return (n, s[end..].trim().to_string());
        }
    }
    (1.0, s.to_string())
}

/// Formats `[multiplier, unit]` back to the attribute string TensorStore
/// writes (`"nm"` for a multiplier of 1, else `"2 s"`).
#[must_use]
pub fn format_unit(multiplier: f64, unit: &str) -> String {
    if (multiplier - 1.0).abs() < f64::EPSILON {
        unit.to_string()
    } else if unit.is_empty() {
        format!("{multiplier}")
    } else {
        format!("{multiplier} {unit}")
    }
}

fn dimension_units(attributes: &Map<String, Value>) -> Option<Value> {
    let Some(Value::Array(units)) = attributes.get("dimension_units") else { return None };
    Some(
        units
            .iter()
            .map(|u| match u {
                Value::String(s) => {
                    let (m, unit) = parse_unit(s);
                    json!([m, unit])
                }
                _ => Value::Null,
            })
            .collect(),
    )
}

/// A v3 codec as TensorStore reports it (its defaults made explicit).
pub(crate) fn codec_json(c: &CodecSpec, item_size: Option<usize>) -> Value {
    let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
    let Some(cfg) = v.as_object_mut().and_then(|o| {
        o.entry("configuration").or_insert_with(|| json!({}));
        o.get_mut("configuration")?.as_object_mut()
    }) else {
        return v;
    };
    if c.config::<GzipConfig>().is_some_and(|g| g.level.is_none()) {
        cfg.insert("level".into(), json!(6));
    } else if let Some(z) = c.config::<ZstdConfig>() {
        cfg.entry("level").or_insert(json!(3));
        if z.checksum.is_none() {
            cfg.insert("checksum".into(), json!(false));
        }
    } else if c.config::<BloscConfig>().is_some() {
        cfg.entry("cname").or_insert(json!("lz4"));
        cfg.entry("clevel").or_insert(json!(5));
        cfg.entry("blocksize").or_insert(json!(0));
        if let Some(size) = item_size {
            cfg.entry("typesize").or_insert(json!(size));
            cfg.entry("shuffle").or_insert(json!(if size == 1 { "bitshuffle" } else { "shuffle" }));
        }
    } else if let Some(s) = c.config::<ShardingConfig>() {
        cfg.insert("codecs".into(), s.codecs.iter().map(|c| codec_json(c, item_size)).collect());
        cfg.insert("index_codecs".into(), s.index_codecs.iter().map(|c| codec_json(c, None)).collect());
        let loc = if s.index_location == IndexLocation::Start { "start" } else { "end" };
        cfg.insert("index_location".into(), json!(loc));
    }
    if cfg.is_empty() {
        if let Some(o) = v.as_object_mut() {
            o.remove("configuration");
        }
    }
    v
}

/// The read chunk and inner order implied by a v3 codec chain.
fn read_chunk_and_order(codecs: &[CodecSpec], write_chunk: &[u64]) -> (Vec<u64>, Vec<usize>) {
    let mut order: Vec<usize> = (0..write_chunk.len()).collect();
    let mut chunk = write_chunk.to_vec();
    let mut chain = codecs;
    loop {
        let mut next = None;
        for c in chain {
            if let Some(t) = c.config::<TransposeConfig>().filter(|t| t.order.len() == order.len()) {
                order = t.order.iter().map(|&i| order[i]).collect();
            } else if let Some(s) = c.config::<ShardingConfig>() {
                chunk.clone_from(&s.chunk_shape);
                next = Some(&s.codecs);
            }
        }
        match next {
            Some(inner) => chain = inner,
            None => return (chunk, order),
        }
    }
}

/// The TensorStore schema of a v3 array; `None` for data types TensorStore
/// does not have.
#[must_use]
pub fn schema_v3(meta: &ArrayMetadataV3) -> Option<Value> {
    let dtype = dtype_name(&meta.data_type)?;
    if !meta.codecs.iter().all(tensorstore_codec) {
        return None;
    }
    let write_chunk = meta.chunk_grid.chunk_shape();
    let (read_chunk, inner_order) = read_chunk_and_order(&meta.codecs, write_chunk);
    let rank = meta.shape.len();
    let item_size = meta.data_type.size();
    let mut s = Map::new();
    s.insert(
        "chunk_layout".into(),
        json!({
            "grid_origin": vec![0; rank],
            "inner_order": inner_order,
            "read_chunk": {"shape": read_chunk},
            "write_chunk": {"shape": write_chunk},
        }),
    );
    let codecs: Vec<Value> = meta.codecs.iter().map(|c| codec_json(c, item_size)).collect();
    s.insert("codec".into(), json!({"codecs": codecs, "driver": "zarr3"}));
    if let Some(units) = dimension_units(&meta.attributes) {
        s.insert("dimension_units".into(), units);
    }
    s.insert("domain".into(), domain(&meta.shape, labels(meta.dimension_names.as_ref())));
    s.insert("dtype".into(), json!(dtype));
    if let Some(fill) = fill_json(&meta.fill_value, &meta.data_type) {
        s.insert("fill_value".into(), fill);
    }
    s.insert("rank".into(), json!(rank));
    Some(Value::Object(s))
}

/// Whether TensorStore's zarr3 driver has this codec (and all it contains).
fn tensorstore_codec(c: &CodecSpec) -> bool {
    match c.config::<ShardingConfig>() {
        Some(s) => s.codecs.iter().chain(&s.index_codecs).all(tensorstore_codec),
        None => matches!(c.name(), "bytes" | "transpose" | "gzip" | "zstd" | "blosc" | "crc32c"),
    }
}

/// The TensorStore schema of a v2 array (scalar data types, no filters:
/// TensorStore's zarr driver supports neither structured types here nor
/// filters).
#[must_use]
pub fn schema_v2(meta: &ArrayMetadataV2) -> Option<Value> {
    let DataTypeV2::Scalar { data_type, .. } = &meta.dtype else { return None };
    if meta.filters.as_ref().is_some_and(|f| !f.is_empty()) {
        return None;
    }
    let dtype = dtype_name(data_type)?;
    let rank = meta.shape.len();
    let inner_order: Vec<usize> = match meta.order {
        Order::C => (0..rank).collect(),
        Order::F => (0..rank).rev().collect(),
    };
    let mut s = Map::new();
    s.insert(
        "chunk_layout".into(),
        json!({
            "grid_origin": vec![0; rank],
            "inner_order": inner_order,
            "read_chunk": {"shape": meta.chunks},
            "write_chunk": {"shape": meta.chunks},
        }),
    );
    let compressor = serde_json::to_value(&meta.compressor).unwrap_or(Value::Null);
    let filters = serde_json::to_value(&meta.filters).unwrap_or(Value::Null);
    s.insert("codec".into(), json!({"compressor": compressor, "driver": "zarr", "filters": filters}));
    s.insert("domain".into(), domain(&meta.shape, None));
    s.insert("dtype".into(), json!(dtype));
    if let Some(fill) = fill_json(&meta.fill_value, data_type) {
        s.insert("fill_value".into(), fill);
    }
    s.insert("rank".into(), json!(rank));
    Some(Value::Object(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::NodeMetadataV3;

    fn v3(doc: Value) -> ArrayMetadataV3 {
        match NodeMetadataV3::from_json(&doc, "").unwrap() {
            NodeMetadataV3::Array(a) => *a,
            NodeMetadataV3::Group(_) => panic!("not an array"),
        }
    }

    // "Mapping to TensorStore Schema", zarr3 driver document.
    #[test]
    fn zarr3_document_example() {
        let meta = v3(json!({
          "zarr_format": 3, "node_type": "array", "shape": [1000, 2000, 3000],
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [100, 200, 300]}},
          "chunk_key_encoding": {"name": "default"}, "data_type": "uint16",
          "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "fill_value": 42
        }));
        assert_eq!(
            schema_v3(&meta).unwrap(),
            json!({
              "chunk_layout": {
                "grid_origin": [0, 0, 0], "inner_order": [0, 1, 2],
                "read_chunk": {"shape": [100, 200, 300]}, "write_chunk": {"shape": [100, 200, 300]}
              },
              "codec": {"codecs": [{"configuration": {"endian": "little"}, "name": "bytes"}], "driver": "zarr3"},
              "domain": {"exclusive_max": [[1000], [2000], [3000]], "inclusive_min": [0, 0, 0]},
              "dtype": "uint16", "fill_value": 42, "rank": 3
            })
        );
    }

    #[test]
    fn zarr3_labels_units_sharding_transpose() {
        let meta = v3(json!({
          "zarr_format": 3, "node_type": "array", "shape": [16, 16], "data_type": "int32",
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
          "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
          "dimension_names": ["a", null], "attributes": {"dimension_units": ["nm", "2 s"]},
          "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 4],
            "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                       {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]
        }));
        let s = schema_v3(&meta).unwrap();
        assert_eq!(s["chunk_layout"]["read_chunk"]["shape"], json!([4, 4]));
        assert_eq!(s["chunk_layout"]["write_chunk"]["shape"], json!([8, 8]));
        assert_eq!(s["chunk_layout"]["inner_order"], json!([1, 0]));
        assert_eq!(s["domain"]["labels"], json!(["a", ""]));
        assert_eq!(s["dimension_units"], json!([[1.0, "nm"], [2.0, "s"]]));
        let shard = &s["codec"]["codecs"][0]["configuration"];
        assert_eq!(shard["index_location"], "end");
        assert_eq!(shard["codecs"][2], json!({"name": "zstd", "configuration": {"level": 3, "checksum": false}}));
        assert_eq!(shard["index_codecs"][1], json!({"name": "crc32c"}));
    }

    // "Mapping to TensorStore Schema", zarr driver document (scalar example).
    #[test]
    fn zarr_document_example() {
        let meta = ArrayMetadataV2::from_json(
            &json!({"zarr_format": 2, "shape": [1000, 2000, 3000], "chunks": [100, 200, 300], "dtype": "<u2",
                    "compressor": null, "fill_value": 42, "order": "C", "filters": null}),
            "",
        )
        .unwrap();
        assert_eq!(
            schema_v2(&meta).unwrap(),
            json!({
              "chunk_layout": {
                "grid_origin": [0, 0, 0], "inner_order": [0, 1, 2],
                "read_chunk": {"shape": [100, 200, 300]}, "write_chunk": {"shape": [100, 200, 300]}
              },
              "codec": {"compressor": null, "driver": "zarr", "filters": null},
              "domain": {"exclusive_max": [[1000], [2000], [3000]], "inclusive_min": [0, 0, 0]},
              "dtype": "uint16", "fill_value": 42, "rank": 3
            })
        );
        let f = ArrayMetadataV2::from_json(
            &json!({"zarr_format": 2, "shape": [4, 5], "chunks": [2, 5], "dtype": ">f4",
                    "compressor": null, "fill_value": "NaN", "order": "F", "filters": null}),
            "",
        )
        .unwrap();
        let s = schema_v2(&f).unwrap();
        assert_eq!(s["chunk_layout"]["inner_order"], json!([1, 0]));
        assert_eq!(s["fill_value"], "NaN");
        assert_eq!(s["dtype"], "float32");
    }

    #[test]
    fn no_schema_where_tensorstore_cannot_open() {
        let v2 = ArrayMetadataV2::from_json(
            &json!({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4", "compressor": null,
                    "fill_value": 0, "order": "C", "filters": [{"id": "delta", "dtype": "<i4"}]}),
            "",
        )
        .unwrap();
        assert_eq!(schema_v2(&v2), None);
        let numcodecs = v3(json!({
          "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int32",
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
          "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
          "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                     {"name": "numcodecs.zlib", "configuration": {"level": 1}}]
        }));
        assert_eq!(schema_v3(&numcodecs), None);
    }

    #[test]
    fn units_parse_and_format() {
        assert_eq!(parse_unit("4 nm"), (4.0, "nm".to_string()));
        assert_eq!(parse_unit("nm"), (1.0, "nm".to_string()));
        assert_eq!(parse_unit("2.5"), (2.5, String::new()));
        assert_eq!(parse_unit("1e3 m"), (1000.0, "m".to_string()));
        assert_eq!(format_unit(1.0, "nm"), "nm");
        assert_eq!(format_unit(2.0, "s"), "2 s");
    }
}
