//! New array metadata from a TensorStore-style spec.
//!
//! Reference: the `zarr` and `zarr3` driver documents
//! (`reference/tensorstore-zarr-driver.rst`,
//! `reference/tensorstore-zarr3-driver.txt`): a spec has a `driver`
//! (`"zarr3"` or `"zarr"`), an optional partial `metadata`, and `schema`
//! constraints (`dtype`, `domain` or `shape`, `chunk_layout`, `codec`,
//! `fill_value`, `dimension_units`). `dtype`, `shape`, `domain`,
//! `chunk_layout`, `codec`, `fill_value` and `dimension_units` are also
//! accepted at the top level of the spec, as the Python API's keyword
//! arguments are. Metadata members win over schema constraints.
//!
//! What TensorStore writes, zarrd writes: zarr3 defaults to a `bytes` codec
//! (little endian) and fill value zero, inserts `sharding_indexed` (index
//! `bytes` + `crc32c`, at the end) when the read and write chunks differ,
//! and a `transpose` before the array → bytes codec for a non-C
//! `inner_order`; `dimension_units` go to the `dimension_units` attribute.
//! zarr v2 defaults to blosc lz4 (`shuffle: -1`), a `null` fill value, `.`
//! separators and `C` order (`F` for a reversed `inner_order`), and has no
//! dimension units.
//!
//! The result is validated by the ordinary metadata parsers; every error
//! names the spec member at fault.

use serde_json::{json, Map, Value};

use super::chunk_layout::{choose_chunk_shape, choose_read_write, GridConstraints, LayoutError};
use super::{codec_json, format_unit};
use crate::zarr::metadata::{ArrayMetadataV2, DataType, MetadataError, NodeMetadataV3};

/// A spec that cannot become metadata.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// The spec member at fault (`schema.chunk_layout.read_chunk.shape`).
    pub field: String,
    /// What is wrong and what was expected.
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError { field: field.into(), message: message.into() }
}

impl From<LayoutError> for SpecError {
    fn from(e: LayoutError) -> Self {
        err(format!("schema.{}", e.field), e.message)
    }
}

impl From<MetadataError> for SpecError {
    fn from(e: MetadataError) -> Self {
        err(format!("metadata.{}", e.path).trim_end_matches('.').to_string(), e.message)
    }
}

/// The documents of a new array.
#[derive(Debug, Clone, PartialEq)]
pub enum NewArray {
    /// A `zarr.json` document.
    V3(Value),
    /// A `.zarray` document and `.zattrs` (when there are attributes).
    V2 {
        /// `.zarray`.
        zarray: Value,
        /// `.zattrs`.
        zattrs: Option<Map<String, Value>>,
    },
}

/// The schema constraints of a spec, gathered from `schema` and the top level.
struct Schema<'a> {
    members: Map<String, Value>,
    metadata: &'a Map<String, Value>,
}

impl Schema<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.members.get(key).filter(|v| !v.is_null())
    }
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, SpecError> {
    v.as_object().ok_or_else(|| err(field, "expected an object"))
}

fn u64_list(v: &Value, field: &str) -> Result<Vec<u64>, SpecError> {
    let items = v.as_array().ok_or_else(|| err(field, "expected an array of non-negative integers"))?;
    let max = crate::zarr::metadata::MAX_RANK;
    if items.len() > max {
        return Err(err(
            field,
            format!(
                "{} dimensions, more than zarrd supports ({max} dimensions, TensorStore's maximum rank)",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let x = match x {
                Value::Array(inner) if inner.len() == 1 => &inner[0],
                x => x,
            };
            x.as_u64().ok_or_else(|| err(format!("{field}[{i}]"), "expected a non-negative integer"))
        })
        .collect()
}

/// Schema members (TensorStore's, plus `shape` for convenience).
const SCHEMA_MEMBERS: [&str; 8] =
    ["dtype", "shape", "domain", "rank", "chunk_layout", "codec", "fill_value", "dimension_units"];

/// Spec members that say where and how TensorStore opens the array; zarrd's
/// URL says where, so they are accepted and ignored.
const IGNORED_MEMBERS: [&str; 9] = [
    "kvstore",
    "path",
    "context",
    "cache_pool",
    "metadata_cache_pool",
    "data_copy_concurrency",
    "recheck_cached_data",
    "recheck_cached_metadata",
    "assume_metadata",
];

fn gather(spec: &Map<String, Value>) -> Result<Map<String, Value>, SpecError> {
    for k in spec.keys() {
        let known = SCHEMA_MEMBERS.contains(&k.as_str())
            || IGNORED_MEMBERS.contains(&k.as_str())
            || ["driver", "metadata", "schema", "create", "open", "delete_existing"].contains(&k.as_str());
        if k == "transform" || k == "field" {
            return Err(err(k, "not supported by zarrd: a created array is described whole"));
        }
        if !known {
            return Err(err(k, "unknown spec member"));
        }
    }
    let mut members = match spec.get("schema") {
        None | Some(Value::Null) => Map::new(),
        Some(v) => object(v, "schema")?.clone(),
    };
    if let Some(k) = members.keys().find(|k| !SCHEMA_MEMBERS.contains(&k.as_str())) {
        return Err(err(
            format!("schema.{k}"),
            "unknown schema member; expected dtype, domain, rank, chunk_layout, codec, fill_value or dimension_units",
        ));
    }
    for key in SCHEMA_MEMBERS {
        if let Some(v) = spec.get(key).filter(|v| !v.is_null()) {
            match members.get(key) {
                Some(existing) if existing != v => {
                    return Err(err(key, format!("conflicts with schema.{key}")));
                }
                _ => {
                    members.insert(key.to_string(), v.clone());
                }
            }
        }
    }
    Ok(members)
}

/// The shape from `metadata.shape`, `schema.shape` or `schema.domain`;
/// where several are given they must agree (TensorStore refuses a spec
/// whose metadata and schema disagree).
fn resolve_shape(s: &Schema<'_>) -> Result<Vec<u64>, SpecError> {
    let mut given: Vec<(&str, Vec<u64>)> = Vec::new();
    if let Some(v) = s.metadata.get("shape") {
        given.push(("metadata.shape", u64_list(v, "metadata.shape")?));
    }
    if let Some(v) = s.get("shape") {
        given.push(("schema.shape", u64_list(v, "schema.shape")?));
    }
    if let Some(d) = s.get("domain") {
        let d = object(d, "schema.domain")?;
        if let Some(min) = d.get("inclusive_min") {
            if u64_list(min, "schema.domain.inclusive_min")?.iter().any(|&m| m != 0) {
                return Err(err("schema.domain.inclusive_min", "zarr arrays have a zero origin; expected all zeros"));
            }
        }
        if let Some(v) = d.get("shape") {
            given.push(("schema.domain.shape", u64_list(v, "schema.domain.shape")?));
        }
        if let Some(v) = d.get("exclusive_max") {
            given.push(("schema.domain.exclusive_max", u64_list(v, "schema.domain.exclusive_max")?));
        }
        if let Some(v) = d.get("inclusive_max") {
            let max = u64_list(v, "schema.domain.inclusive_max")?
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    m.checked_add(1).ok_or_else(|| err(format!("schema.domain.inclusive_max[{i}]"), "too large"))
                })
                .collect::<Result<Vec<u64>, SpecError>>()?;
            given.push(("schema.domain.inclusive_max", max));
        }
    }
    let mut given = given.into_iter();
    let Some((first, shape)) = given.next() else {
        return Err(err(
            "schema.domain",
            "the array's shape is required (metadata.shape, schema.shape or schema.domain.shape)",
        ));
    };
    for (name, other) in given {
        if other != shape {
            let as_shape = if name == "schema.domain.inclusive_max" { " (as a shape: each + 1)" } else { "" };
            return Err(err(
                name,
                format!("{other:?}{as_shape} conflicts with {first} {shape:?}: give the shape once, or the same"),
            ));
        }
    }
    Ok(shape)
}

fn labels(s: &Schema<'_>, rank: usize) -> Result<Option<Vec<String>>, SpecError> {
    let Some(d) = s.get("domain") else { return Ok(None) };
    let Some(v) = object(d, "schema.domain")?.get("labels") else { return Ok(None) };
    let items = v
        .as_array()
        .filter(|a| a.len() == rank)
        .ok_or_else(|| err("schema.domain.labels", format!("expected {rank} strings (one per dimension)")))?;
    let labels = items
        .iter()
        .enumerate()
        .map(|(i, l)| {
            l.as_str().map(str::to_string).ok_or_else(|| err(format!("schema.domain.labels[{i}]"), "expected a string"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // TensorStore: "Dimension label(s) ... not unique" (empty ones may repeat).
    for (i, l) in labels.iter().enumerate() {
        if !l.is_empty() && labels[..i].contains(l) {
            return Err(err(
                format!("schema.domain.labels[{i}]"),
                format!("\"{l}\" is given twice; labels are unique"),
            ));
        }
    }
    Ok(labels.iter().any(|l| !l.is_empty()).then_some(labels))
}

fn layout(s: &Schema<'_>, rank: usize) -> Result<(GridConstraints, GridConstraints, Option<Vec<usize>>), SpecError> {
    let (mut read, mut write) = (GridConstraints::default(), GridConstraints::default());
    let Some(cl) = s.get("chunk_layout") else { return Ok((read, write, None)) };
    let cl = object(cl, "schema.chunk_layout")?;
    let mut inner_order = None;
    let mut both = GridConstraints::default();
    for (k, v) in cl {
        let field = format!("chunk_layout.{k}");
        match k.as_str() {
            "read_chunk" => read.merge(&GridConstraints::from_json(v, &field, rank)?, &field)?,
            "write_chunk" => write.merge(&GridConstraints::from_json(v, &field, rank)?, &field)?,
            "chunk" => both.merge(&GridConstraints::from_json(v, &field, rank)?, &field)?,
            // zarr has no separate codec chunk; TensorStore ignores a soft one.
            "codec_chunk" => {}
            "grid_origin" | "grid_origin_soft_constraint" => {
                if u64_list(v, &format!("schema.{field}"))?.iter().any(|&o| o != 0) {
                    return Err(err(format!("schema.{field}"), "zarr chunk grids start at the origin; expected zeros"));
                }
            }
            "inner_order" | "inner_order_soft_constraint" => {
                let order = u64_list(v, &format!("schema.{field}"))?;
                let mut seen = vec![false; rank];
                let valid = order.len() == rank
                    && order
                        .iter()
                        .all(|&i| usize::try_from(i).is_ok_and(|i| i < rank && !std::mem::replace(&mut seen[i], true)));
                if !valid {
                    return Err(err(format!("schema.{field}"), format!("expected a permutation of 0..{rank}")));
                }
                inner_order = Some(order.iter().map(|&i| usize::try_from(i).unwrap_or(0)).collect());
            }
            "rank" => {}
            _ => return Err(err(format!("schema.{field}"), "unknown chunk_layout member")),
        }
    }
    read.merge(&both, "chunk_layout.read_chunk")?;
    write.merge(&both, "chunk_layout.write_chunk")?;
    Ok((read, write, inner_order))
}

fn check_driver(s: &Schema<'_>, driver: &str) -> Result<Option<Map<String, Value>>, SpecError> {
    let Some(codec) = s.get("codec") else { return Ok(None) };
    let codec = object(codec, "schema.codec")?;
    match codec.get("driver").and_then(Value::as_str) {
        Some(d) if d == driver => Ok(Some(codec.clone())),
        None => Ok(Some(codec.clone())),
        Some(d) => Err(err("schema.codec.driver", format!("expected \"{driver}\" (the spec's driver), got \"{d}\""))),
    }
}

fn dtype_v3(s: &Schema<'_>) -> Result<Value, SpecError> {
    if let Some(v) = s.metadata.get("data_type") {
        return Ok(v.clone());
    }
    s.get("dtype")
        .cloned()
        .ok_or_else(|| err("schema.dtype", "the data type is required (metadata.data_type or schema.dtype)"))
}

fn default_fill(dt: &DataType) -> Value {
    match dt {
        DataType::Bool => json!(false),
        DataType::Float16 | DataType::BFloat16 | DataType::Float32 | DataType::Float64 => json!(0.0),
        DataType::Complex64 | DataType::Complex128 => json!([0.0, 0.0]),
        _ => json!(0),
    }
}

fn units_attribute(s: &Schema<'_>, rank: usize) -> Result<Option<Value>, SpecError> {
    let Some(v) = s.get("dimension_units") else { return Ok(None) };
    let items = v
        .as_array()
        .filter(|a| a.len() == rank)
        .ok_or_else(|| err("schema.dimension_units", format!("expected {rank} units (one per dimension)")))?;
    let units = items
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let field = format!("schema.dimension_units[{i}]");
            match u {
                Value::Null => Ok(Value::Null),
                Value::String(s) => Ok(json!(s)),
                Value::Array(pair) if pair.len() == 2 => {
                    let m = pair[0].as_f64().ok_or_else(|| err(&field, "expected [multiplier, \"unit\"]"))?;
                    let unit = pair[1].as_str().ok_or_else(|| err(&field, "expected [multiplier, \"unit\"]"))?;
                    Ok(json!(format_unit(m, unit)))
                }
                _ => Err(err(field, "expected a unit string, [multiplier, \"unit\"] or null")),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(units.iter().any(|u| !u.is_null()).then_some(Value::Array(units)))
}

fn is_array_to_bytes(c: &Value) -> bool {
    matches!(c.get("name").and_then(Value::as_str), Some("bytes" | "sharding_indexed" | "vlen-utf8" | "vlen-bytes"))
}

fn bytes_codec(dt: &DataType) -> Value {
    if dt.size().is_some_and(|n| n > 1) {
        json!({"name": "bytes", "configuration": {"endian": "little"}})
    } else {
        json!({"name": "bytes"})
    }
}

/// Completes a chunk codec chain: an array → bytes codec where missing, and
/// a `transpose` before it for a non-C `inner_order`.
fn complete_chain(mut codecs: Vec<Value>, dt: &DataType, inner_order: Option<&Vec<usize>>) -> Vec<Value> {
    let pos = codecs.iter().position(is_array_to_bytes).unwrap_or_else(|| {
        let at = codecs.iter().take_while(|c| c.get("name").and_then(Value::as_str) == Some("transpose")).count();
        codecs.insert(at, bytes_codec(dt));
        at
    });
    let identity = inner_order.is_none_or(|o| o.iter().enumerate().all(|(i, &d)| i == d));
    let has_transpose = codecs.iter().any(|c| c.get("name").and_then(Value::as_str) == Some("transpose"));
    if !identity && !has_transpose {
        codecs.insert(pos, json!({"name": "transpose", "configuration": {"order": inner_order}}));
    }
    codecs
}

fn spec_v3(spec: &Map<String, Value>, s: &Schema<'_>) -> Result<NewArray, SpecError> {
    let shape = resolve_shape(s)?;
    let rank = shape.len();
    let dtype_json = dtype_v3(s)?;
    let dt = DataType::from_v3_json(&dtype_json, "data_type").map_err(|e| err("schema.dtype", e.message))?;
    let (read, mut write, inner_order) = layout(s, rank)?;
    let codec = check_driver(s, "zarr3")?;
    let mut doc = s.metadata.clone();
    let meta_codecs = doc.remove("codecs");
    let explicit_grid = doc.get("chunk_grid").map(|g| {
        g.pointer("/configuration/chunk_shape").map_or_else(
            || Err(err("metadata.chunk_grid", "expected a regular grid with configuration.chunk_shape")),
            |c| u64_list(c, "metadata.chunk_grid.configuration.chunk_shape"),
        )
    });
    if let Some(grid) = explicit_grid {
        let grid = grid?;
        write.merge(
            &GridConstraints {
                shape: Some(grid.iter().map(|&n| i64::try_from(n).unwrap_or(i64::MAX)).collect()),
                ..Default::default()
            },
            "metadata.chunk_grid",
        )?;
    }
    let codecs: Vec<Value> = match (meta_codecs, codec.as_ref().and_then(|c| c.get("codecs"))) {
        (Some(v), _) => v.as_array().cloned().ok_or_else(|| err("metadata.codecs", "expected an array of codecs"))?,
        (None, Some(v)) => {
            v.as_array().cloned().ok_or_else(|| err("schema.codec.codecs", "expected an array of codecs"))?
        }
        (None, None) => Vec::new(),
    };
    let sharded = codecs.iter().any(|c| c.get("name").and_then(Value::as_str) == Some("sharding_indexed"));
    let codecs = if sharded {
        // The chain fixes the read chunk; only the write chunk is chosen.
        let (_, w) = choose_read_write(&GridConstraints::default(), &write, &shape)?;
        doc.insert("chunk_grid".into(), json!({"name": "regular", "configuration": {"chunk_shape": w}}));
        codecs
    } else {
        let (r, w) = choose_read_write(&read, &write, &shape)?;
        doc.insert("chunk_grid".into(), json!({"name": "regular", "configuration": {"chunk_shape": w}}));
        let inner = complete_chain(codecs, &dt, inner_order.as_ref());
        if r == w {
            inner
        } else {
            vec![json!({"name": "sharding_indexed", "configuration": {
                "chunk_shape": r,
                "codecs": inner,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end",
            }})]
        }
    };
    doc.insert("codecs".into(), Value::Array(codecs));
    doc.insert("zarr_format".into(), json!(3));
    doc.insert("node_type".into(), json!("array"));
    doc.insert("shape".into(), json!(shape));
    doc.insert("data_type".into(), dtype_json);
    if !doc.contains_key("fill_value") {
        if s.get("fill_value").is_some() && matches!(dt, DataType::Complex64 | DataType::Complex128) {
            // As TensorStore: a schema fill value is a JSON scalar, which cannot be complex.
            return Err(err(
                "schema.fill_value",
                "a complex fill value cannot be given as a schema constraint (as in TensorStore); \
                 give it as metadata.fill_value [re, im]",
            ));
        }
        let fill = s.get("fill_value").cloned().unwrap_or_else(|| default_fill(&dt));
        doc.insert("fill_value".into(), fill);
    }
    doc.entry("chunk_key_encoding").or_insert_with(|| json!({"name": "default", "configuration": {"separator": "/"}}));
    if !doc.contains_key("dimension_names") {
        if let Some(labels) = labels(s, rank)? {
            doc.insert("dimension_names".into(), json!(labels));
        }
    }
    if let Some(units) = units_attribute(s, rank)? {
        let attrs = doc.entry("attributes").or_insert_with(|| json!({}));
        let attrs = attrs.as_object_mut().ok_or_else(|| err("metadata.attributes", "expected an object"))?;
        attrs.insert("dimension_units".into(), units);
    }
    let _ = spec;
    let mut doc = Value::Object(doc);
    // TensorStore writes its codec defaults out (zstd level 3, gzip level 6, blosc typesize...).
    if let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&doc, "")? {
        let item_size = meta.data_type.size();
        doc["codecs"] = meta.codecs.iter().map(|c| codec_json(c, item_size)).collect();
    }
    NodeMetadataV3::from_json(&doc, "")?;
    Ok(NewArray::V3(doc))
}

fn dtype_v2(s: &Schema<'_>) -> Result<Value, SpecError> {
    if let Some(v) = s.metadata.get("dtype") {
        return Ok(v.clone());
    }
    let name = s
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| err("schema.dtype", "the data type is required (metadata.dtype or schema.dtype)"))?;
    let v2 = match name {
        "bool" => "|b1",
        "int8" => "|i1",
        "uint8" => "|u1",
        "int16" => "<i2",
        "uint16" => "<u2",
        "int32" => "<i4",
        "uint32" => "<u4",
        "int64" => "<i8",
        "uint64" => "<u8",
        "float16" => "<f2",
        "float32" => "<f4",
        "float64" => "<f8",
        "complex64" => "<c8",
        "complex128" => "<c16",
        "bfloat16" => "bfloat16",
        other => return Err(err("schema.dtype", format!("data type \"{other}\" is not supported by the zarr driver"))),
    };
    Ok(json!(v2))
}

fn spec_v2(s: &Schema<'_>) -> Result<NewArray, SpecError> {
    let shape = resolve_shape(s)?;
    let rank = shape.len();
    let dtype = dtype_v2(s)?;
    let (mut read, write, inner_order) = layout(s, rank)?;
    if s.get("dimension_units").is_some() {
        return Err(err("schema.dimension_units", "dimension units are not supported by the zarr (v2) driver"));
    }
    let codec = check_driver(s, "zarr")?;
    let mut doc = s.metadata.clone();
    let attributes = match doc.remove("attributes") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err(err("metadata.attributes", "expected an object")),
    };
    // One grid in zarr v2: read and write constraints combine.
    read.merge(&write, "chunk_layout.write_chunk")?;
    let chunks = match doc.get("chunks") {
        Some(c) => u64_list(c, "metadata.chunks")?,
        None => choose_chunk_shape(&read, &shape),
    };
    let order = match (doc.get("order"), inner_order) {
        (Some(o), _) => o.clone(),
        (None, None) => json!("C"),
        (None, Some(o)) if o.iter().enumerate().all(|(i, &d)| i == d) => json!("C"),
        (None, Some(o)) if o.iter().enumerate().all(|(i, &d)| d == rank - 1 - i) => json!("F"),
        (None, Some(_)) => {
            return Err(err(
                "schema.chunk_layout.inner_order",
                "zarr v2 supports only C order [0, 1, ...] or F order [..., 1, 0]",
            ))
        }
    };
    let compressor = match (doc.get("compressor"), codec.as_ref().and_then(|c| c.get("compressor"))) {
        (Some(c), _) | (None, Some(c)) => c.clone(),
        (None, None) => json!({"blocksize": 0, "clevel": 5, "cname": "lz4", "id": "blosc", "shuffle": -1}),
    };
    let filters = match (doc.get("filters"), codec.as_ref().and_then(|c| c.get("filters"))) {
        (Some(f), _) | (None, Some(f)) => f.clone(),
        (None, None) => Value::Null,
    };
    doc.insert("zarr_format".into(), json!(2));
    doc.insert("shape".into(), json!(shape));
    doc.insert("chunks".into(), json!(chunks));
    doc.insert("dtype".into(), dtype);
    doc.insert("compressor".into(), compressor);
    doc.insert("filters".into(), filters);
    doc.insert("order".into(), order);
    if !doc.contains_key("fill_value") {
        doc.insert("fill_value".into(), s.get("fill_value").cloned().unwrap_or(Value::Null));
    }
    doc.entry("dimension_separator").or_insert(json!("."));
    let doc = Value::Object(doc);
    ArrayMetadataV2::from_json(&doc, "")?;
    Ok(NewArray::V2 { zarray: doc, zattrs: attributes })
}

/// The metadata documents of a new array described by a TensorStore spec.
///
/// # Errors
/// A [`SpecError`] naming the member at fault: an unknown driver, a
/// missing shape or data type, constraints that conflict, or metadata that
/// does not validate.
pub fn new_array(spec: &Value) -> Result<NewArray, SpecError> {
    let spec = object(spec, "spec")?;
    let driver =
        spec.get("driver").and_then(Value::as_str).ok_or_else(|| err("driver", "expected \"zarr3\" or \"zarr\""))?;
    let empty = Map::new();
    let metadata = match spec.get("metadata") {
        None | Some(Value::Null) => &empty,
        Some(v) => object(v, "metadata")?,
    };
    let s = Schema { members: gather(spec)?, metadata };
    if let Some(rank) = s.get("rank") {
        let shape = resolve_shape(&s)?;
        if rank.as_u64() != Some(shape.len() as u64) {
            return Err(err("schema.rank", format!("expected {} (the rank of the shape)", shape.len())));
        }
    }
    match driver {
        "zarr3" => spec_v3(spec, &s),
        "zarr" => spec_v2(&s),
        other => Err(err("driver", format!("expected \"zarr3\" or \"zarr\", got \"{other}\""))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v3(spec: Value) -> Value {
        match new_array(&spec).unwrap() {
            NewArray::V3(doc) => doc,
            NewArray::V2 { .. } => panic!("expected v3"),
        }
    }

    #[test]
    fn labels_are_unique() {
        let spec = json!({"driver": "zarr3", "dtype": "uint8", "schema": {"domain": {"shape": [2, 2, 2], "labels": ["x", "", "x"]}}});
        let e = new_array(&spec).unwrap_err();
        assert_eq!(e.field, "schema.domain.labels[2]", "{e}");
        let spec =
            json!({"driver": "zarr3", "dtype": "uint8", "schema": {"domain": {"shape": [2, 2], "labels": ["", ""]}}});
        assert!(new_array(&spec).is_ok());
    }

    #[test]
    fn shapes_given_twice_must_agree() {
        let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [4, 5], "metadata": {"shape": [4, 6]}});
        let e = new_array(&spec).unwrap_err();
        assert_eq!(e.field, "schema.shape", "{e}");
        assert!(e.to_string().contains("[4, 5] conflicts with metadata.shape [4, 6]"), "{e}");
        let spec =
            json!({"driver": "zarr", "dtype": "uint8", "schema": {"domain": {"shape": [3], "inclusive_max": [3]}}});
        let e = new_array(&spec).unwrap_err();
        assert_eq!(e.field, "schema.domain.inclusive_max", "{e}");
        let same = json!({"driver": "zarr3", "dtype": "uint8", "shape": [3],
            "schema": {"domain": {"exclusive_max": [3], "inclusive_max": [2]}}, "metadata": {"shape": [3]}});
        assert!(new_array(&same).is_ok());
    }

    #[test]
    fn zarr3_defaults_match_tensorstore() {
        let doc = v3(json!({"driver": "zarr3", "dtype": "uint16", "shape": [1000, 2000, 3000]}));
        assert_eq!(doc["chunk_grid"]["configuration"]["chunk_shape"], json!([101, 101, 101]));
        assert_eq!(doc["codecs"], json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        assert_eq!(doc["fill_value"], json!(0));
    }

    #[test]
    fn zarr3_read_write_split_inserts_sharding() {
        let doc = v3(json!({"driver": "zarr3", "schema": {"dtype": "uint16", "domain": {"shape": [1000, 2000, 3000]},
            "chunk_layout": {"read_chunk": {"shape": [64, 64, 64]}, "write_chunk": {"shape": [512, 512, 512]}},
            "codec": {"driver": "zarr3", "codecs": [{"name": "zstd"}]}}}));
        assert_eq!(doc["chunk_grid"]["configuration"]["chunk_shape"], json!([512, 512, 512]));
        let shard = &doc["codecs"][0];
        assert_eq!(shard["name"], "sharding_indexed");
        assert_eq!(shard["configuration"]["chunk_shape"], json!([64, 64, 64]));
        assert_eq!(shard["configuration"]["codecs"][0]["name"], "bytes");
        assert_eq!(shard["configuration"]["codecs"][1]["name"], "zstd");
    }

    #[test]
    fn zarr3_order_labels_units() {
        let doc = v3(json!({"driver": "zarr3", "dtype": "float32", "shape": [10, 20, 30],
            "schema": {"chunk_layout": {"inner_order": [2, 0, 1]}, "dimension_units": ["nm", null, [2, "s"]],
                       "domain": {"labels": ["x", "y", "z"]}}}));
        assert_eq!(doc["codecs"][0], json!({"name": "transpose", "configuration": {"order": [2, 0, 1]}}));
        assert_eq!(doc["dimension_names"], json!(["x", "y", "z"]));
        assert_eq!(doc["attributes"]["dimension_units"], json!(["nm", null, "2 s"]));
        assert_eq!(doc["fill_value"], json!(0.0));
    }

    #[test]
    fn zarr_v2_defaults_match_tensorstore() {
        let NewArray::V2 { zarray, zattrs } = new_array(&json!({"driver": "zarr", "dtype": "uint16",
            "shape": [1000, 2000, 3000], "schema": {"chunk_layout": {"inner_order": [2, 1, 0]}},
            "metadata": {"attributes": {"a": 1}}}))
        .unwrap() else {
            panic!("expected v2")
        };
        assert_eq!(
            zarray,
            json!({"chunks": [101, 101, 101], "compressor": {"blocksize": 0, "clevel": 5, "cname": "lz4",
                   "id": "blosc", "shuffle": -1}, "dimension_separator": ".", "dtype": "<u2", "fill_value": null,
                   "filters": null, "order": "F", "shape": [1000, 2000, 3000], "zarr_format": 2})
        );
        assert_eq!(zattrs.unwrap()["a"], 1);
    }

    /// (read, write) chunk shapes of a zarr3 array created from a chunk layout.
    fn layout_of(shape: Value, chunk_layout: Value) -> (Value, Value) {
        let doc = v3(json!({"driver": "zarr3", "dtype": "uint16", "shape": shape, "chunk_layout": chunk_layout}));
        let write = doc["chunk_grid"]["configuration"]["chunk_shape"].clone();
        let read = match doc["codecs"][0]["name"].as_str() {
            Some("sharding_indexed") => doc["codecs"][0]["configuration"]["chunk_shape"].clone(),
            _ => write.clone(),
        };
        (read, write)
    }

    // Outputs of TensorStore 0.1.86 for the same constraints (the edge cases of its
    // rules: snapping to divisors and multiples, -1 sizes, narrow factor windows).
    #[test]
    fn chunk_layouts_as_tensorstore_chooses_them() {
        let cases = [
            (
                json!([1000, 10, 3000, 3000]),
                json!({"write_chunk": {"shape": [0, 0, 1, -1], "aspect_ratio": [0, 0.5, 2, 1]}}),
                json!([337, 10, 1, 300]),
                json!([337, 10, 1, 3000]),
            ),
            (
                json!([1000, 10, 5, 1000]),
                json!({"write_chunk": {"elements": 1_000_000_000}}),
                json!([144, 10, 5, 144]),
                json!([1008, 10, 5, 1008]),
            ),
            (
                json!([1, 100_000, 100_000, 3000]),
                json!({"read_chunk": {"shape": [-1, 1, 16, 16], "elements": 1000}, "write_chunk": {"shape": [512, 0, 0, -1]},
                    "chunk": {"aspect_ratio": [1, 0.5, 3, 2]}}),
                json!([1, 1, 16, 16]),
                json!([512, 1, 16, 2992]),
            ),
            (
                json!([10, 10]),
                json!({"write_chunk": {"shape": [100, 16], "aspect_ratio": [0, 2]}, "chunk": {"shape": [0, -1]}}),
                json!([10, 8]),
                json!([100, 16]),
            ),
            (
                json!([3000, 1, 3000]),
                json!({"read_chunk": {"aspect_ratio": [2, 0, 1.5]}, "write_chunk": {"aspect_ratio": [3, 2, 0.5]}}),
                json!([1182, 1, 887]),
                json!([1182, 1, 887]),
            ),
            (
                json!([100, 3000, 5, 10]),
                json!({"write_chunk": {"shape": [128, 0, 128, 16], "elements": 100_000}}),
                json!([128, 256, 4, 8]),
                json!([128, 256, 128, 16]),
            ),
            (json!([10, 100, 5]), json!({"read_chunk": {"elements": 10}}), json!([2, 2, 2]), json!([10, 100, 4])),
        ];
        for (shape, cl, read, write) in cases {
            assert_eq!(layout_of(shape, cl.clone()), (read, write), "{cl}");
        }
    }

    #[test]
    fn errors_name_the_member() {
        let e = new_array(&json!({"driver": "n5", "dtype": "uint8", "shape": [1]})).unwrap_err();
        assert_eq!(e.field, "driver");
        let e = new_array(&json!({"driver": "zarr3", "dtype": "uint8", "shape": [1], "chunk_layuot": {}})).unwrap_err();
        assert_eq!(e.field, "chunk_layuot");
        let e = new_array(&json!({"driver": "zarr3", "schema": {"dtype": "uint8", "shape": [1], "units": []}}))
            .unwrap_err();
        assert_eq!(e.field, "schema.units");
        let e = new_array(&json!({"driver": "zarr3", "dtype": "uint8", "shape": [1], "transform": {}})).unwrap_err();
        assert_eq!(e.field, "transform");
        // Where TensorStore would open it is zarrd's URL: accepted and ignored.
        let spec =
            json!({"driver": "zarr3", "dtype": "uint8", "shape": [1], "kvstore": {"driver": "memory"}, "path": "x"});
        assert!(new_array(&spec).is_ok());
        let e = new_array(&json!({"driver": "zarr3", "dtype": "uint8"})).unwrap_err();
        assert_eq!(e.field, "schema.domain");
        let e = new_array(&json!({"driver": "zarr3", "shape": [4]})).unwrap_err();
        assert_eq!(e.field, "schema.dtype");
        let e = new_array(&json!({"driver": "zarr3", "dtype": "uint8", "shape": [4],
            "chunk_layout": {"read_chunk": {"shape": [3]}, "write_chunk": {"shape": [4]}}}))
        .unwrap_err();
        assert_eq!(e.field, "schema.chunk_layout.write_chunk.shape[0]");
        let e = new_array(&json!({"driver": "zarr", "dtype": "uint8", "shape": [4], "dimension_units": ["m"]}))
            .unwrap_err();
        assert_eq!(e.field, "schema.dimension_units");
        let e = new_array(&json!({"driver": "zarr3", "dtype": "uint8", "shape": [4, 4],
            "chunk_layout": {"inner_order": [0, 0]}}))
        .unwrap_err();
        assert_eq!(e.field, "schema.chunk_layout.inner_order");
        let e = new_array(&json!({"driver": "zarr3", "dtype": "uint8", "shape": [4], "fill_value": 300})).unwrap_err();
        assert_eq!(e.field, "metadata.fill_value");
    }
}
