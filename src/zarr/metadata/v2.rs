//! Zarr v2 metadata documents: `.zarray`, `.zgroup`, `.zattrs`, `.zmetadata`.
//!
//! Spec: Zarr v2, "Metadata" (array), "Groups", "Attributes"; consolidated
//! metadata (`.zmetadata`, `{"zarr_consolidated_format": 1, "metadata":
//! {key: document}}`) as written by zarr-python.
//!
//! Real-client leniencies: a missing `filters` reads as `null` (older
//! writers omit it); unknown `.zarray` members are kept, as the spec says
//! they "SHOULD be ignored"; `.zgroup` may carry zarr-python 3's
//! `consolidated_metadata` member (any other member is rejected, the spec
//! says "MUST NOT be present").

pub mod dtype;

use std::collections::BTreeMap;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use self::dtype::DataTypeV2;
use super::codec::numcodecs;
use super::error::{describe, index, key, MetadataError, Result};
use super::fill_value::FillValue;
use super::json::{array, array_shape, enum_str, fmt_shape, object, shape, string, Obj};

/// A numcodecs codec configuration: `{"id": ..., ...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct CodecV2 {
    /// The numcodecs id (one of [`numcodecs::V2_CODEC_IDS`]).
    pub id: String,
    /// The other members, as written.
    pub configuration: Map<String, Value>,
}

impl CodecV2 {
    /// Parses one `compressor` / `filters` entry.
    ///
    /// # Errors
    ///
    /// Not an object, missing or unknown `id`, out-of-range parameters.
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let map = object(value, path)?;
        let id_path = super::error::join(path, "id");
        let id_value = map.get("id").ok_or_else(|| MetadataError::new(&id_path, "required field is missing"))?;
        let id = string(id_value, &id_path)?;
        if !numcodecs::V2_CODEC_IDS.contains(&id) {
            return Err(MetadataError::new(
                id_path,
                format!(
                    "unknown codec id {}; expected one of {}",
                    describe(id_value),
                    numcodecs::V2_CODEC_IDS.join(", ")
                ),
            ));
        }
        let mut configuration = map.clone();
        configuration.remove("id");
        numcodecs::validate_config(id, &configuration, path)?;
        Ok(Self { id: id.to_owned(), configuration })
    }
}

impl Serialize for CodecV2 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.configuration.len() + 1))?;
        m.serialize_entry("id", &self.id)?;
        for (k, v) in &self.configuration {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Memory layout of a v2 chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Order {
    /// Row-major.
    C,
    /// Column-major (equivalent to a reversing v3 `transpose`).
    F,
}

/// Separator between chunk indices in v2 chunk keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Separator {
    /// `"."` (the v2 default).
    #[serde(rename = ".")]
    Dot,
    /// `"/"`.
    #[serde(rename = "/")]
    Slash,
}

impl Separator {
    pub(crate) fn parse(value: &Value, path: &str) -> Result<Self> {
        Ok(match enum_str(value, path, &[".", "/"])? {
            "." => Self::Dot,
            _ => Self::Slash,
        })
    }
}

/// A parsed `.zarray`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayMetadataV2 {
    /// Array shape.
    pub shape: Vec<u64>,
    /// Chunk shape (same rank, each >= 1).
    pub chunks: Vec<u64>,
    /// Element type.
    pub dtype: DataTypeV2,
    /// Primary compressor.
    pub compressor: Option<CodecV2>,
    /// Fill value (`Null` when unset).
    pub fill_value: FillValue,
    /// Chunk memory layout.
    pub order: Order,
    /// Filters applied before the compressor.
    pub filters: Option<Vec<CodecV2>>,
    /// Chunk key separator (`None`: absent, meaning `"."`).
    pub dimension_separator: Option<Separator>,
    /// Unknown members, kept as written.
    pub extra: Map<String, Value>,
}

impl ArrayMetadataV2 {
    /// Parses and validates `.zarray` bytes.
    ///
    /// # Errors
    ///
    /// See [`super::validate_document`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        Self::from_json(&super::parse_json(bytes)?, "")
    }

    /// Parses and validates a `.zarray` JSON value; errors are reported
    /// under `path`.
    ///
    /// # Errors
    ///
    /// See [`super::validate_document`].
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(value, path)?;
        zarr_format_2(&mut o)?;
        let shape_v = array_shape(o.required("shape")?, &o.at("shape"))?;
        let chunks_path = o.at("chunks");
        let chunks = shape(o.required("chunks")?, &chunks_path, 1)?;
        if chunks.len() != shape_v.len() {
            return Err(MetadataError::new(
                chunks_path,
                format!(
                    "expected {} dimensions to match shape {}, got {}",
                    shape_v.len(),
                    fmt_shape(&shape_v),
                    fmt_shape(&chunks)
                ),
            ));
        }
        let dtype = DataTypeV2::from_json(o.required("dtype")?, &o.at("dtype"))?;
        let compressor_path = o.at("compressor");
        let compressor = match o.required("compressor")? {
            Value::Null => None,
            v => Some(CodecV2::from_json(v, &compressor_path)?),
        };
        let fill_value = FillValue::from_v2_json(o.required("fill_value")?, &dtype, &o.at("fill_value"))?;
        let order = match enum_str(o.required("order")?, &o.at("order"), &["C", "F"])? {
            "C" => Order::C,
            _ => Order::F,
        };
        let filters_path = o.at("filters");
        let filters = match o.optional_non_null("filters") {
            None => None,
            Some(v) => Some(
                array(v, &filters_path, "null or an array of codec objects")?
                    .iter()
                    .enumerate()
                    .map(|(i, f)| CodecV2::from_json(f, &index(&filters_path, i)))
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        let chain = filters.as_ref().map_or(0, Vec::len) + usize::from(compressor.is_some());
        super::codec::check_chain_length(chain, &filters_path)?;
        if dtype == DataTypeV2::Object {
            let has_object_codec =
                filters.iter().flatten().any(|f| numcodecs::V2_OBJECT_CODEC_IDS.contains(&f.id.as_str()));
            if !has_object_codec {
                return Err(MetadataError::new(
                    filters_path,
                    format!(
                        "dtype \"|O\" needs an object codec in filters (one of {})",
                        numcodecs::V2_OBJECT_CODEC_IDS.join(", ")
                    ),
                ));
            }
        }
        let dimension_separator = match o.optional("dimension_separator") {
            Some(v) => Some(Separator::parse(v, &o.at("dimension_separator"))?),
            None => None,
        };
        let extra: Map<String, Value> = o.rest().map(|(k, v)| (k.clone(), v.clone())).collect();
        Ok(Self { shape: shape_v, chunks, dtype, compressor, fill_value, order, filters, dimension_separator, extra })
    }
}

impl Serialize for ArrayMetadataV2 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("zarr_format", &2)?;
        m.serialize_entry("shape", &self.shape)?;
        m.serialize_entry("chunks", &self.chunks)?;
        m.serialize_entry("dtype", &self.dtype)?;
        m.serialize_entry("compressor", &self.compressor)?;
        m.serialize_entry("fill_value", &self.fill_value)?;
        m.serialize_entry("order", &self.order)?;
        m.serialize_entry("filters", &self.filters)?;
        if let Some(sep) = &self.dimension_separator {
            m.serialize_entry("dimension_separator", sep)?;
        }
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A parsed `.zgroup`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupMetadataV2 {
    /// zarr-python 3's `consolidated_metadata` member, kept as written.
    pub consolidated_metadata: Option<Value>,
}

impl GroupMetadataV2 {
    /// Parses and validates a `.zgroup` JSON value.
    ///
    /// # Errors
    ///
    /// Wrong `zarr_format`, unknown members.
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(value, path)?;
        zarr_format_2(&mut o)?;
        let consolidated_metadata = match o.optional("consolidated_metadata") {
            Some(v @ (Value::Object(_) | Value::Null)) => Some(v.clone()),
            Some(v) => return Err(MetadataError::expected(o.at("consolidated_metadata"), "a JSON object or null", v)),
            None => None,
        };
        o.deny_rest("\"zarr_format\" (and zarr-python's \"consolidated_metadata\")")?;
        Ok(Self { consolidated_metadata })
    }
}

impl Serialize for GroupMetadataV2 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("zarr_format", &2)?;
        if let Some(c) = &self.consolidated_metadata {
            m.serialize_entry("consolidated_metadata", c)?;
        }
        m.end()
    }
}

/// `.zattrs`: any JSON object.
///
/// # Errors
///
/// When `value` is not an object.
pub fn attributes_from_json(value: &Value, path: &str) -> Result<Map<String, Value>> {
    object(value, path).cloned()
}

/// One document inside `.zmetadata`, typed by its key's last segment.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsolidatedEntryV2 {
    /// `<path>/.zarray`.
    Array(Box<ArrayMetadataV2>),
    /// `<path>/.zgroup`.
    Group(GroupMetadataV2),
    /// `<path>/.zattrs`.
    Attributes(Map<String, Value>),
}

impl Serialize for ConsolidatedEntryV2 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Array(a) => a.serialize(s),
            Self::Group(g) => g.serialize(s),
            Self::Attributes(a) => a.serialize(s),
        }
    }
}

/// A parsed `.zmetadata`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsolidatedMetadataV2 {
    /// Documents by store key relative to the group (`"a/.zarray"`).
    pub metadata: BTreeMap<String, ConsolidatedEntryV2>,
}

impl ConsolidatedMetadataV2 {
    /// Parses `.zmetadata`, validating every contained document by the last
    /// segment of its key.
    ///
    /// # Errors
    ///
    /// Wrong `zarr_consolidated_format`, keys that are not v2 metadata keys,
    /// or any invalid contained document (path `metadata["a/.zarray"]...`).
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(value, path)?;
        let fmt_path = o.at("zarr_consolidated_format");
        let fmt = o.required("zarr_consolidated_format")?;
        if fmt.as_u64() != Some(1) {
            return Err(MetadataError::expected(fmt_path, "1", fmt));
        }
        let md_path = o.at("metadata");
        let docs = object(o.required("metadata")?, &md_path)?;
        o.deny_rest("\"zarr_consolidated_format\" and \"metadata\"")?;
        let mut metadata = BTreeMap::new();
        for (k, doc) in docs {
            let p = key(&md_path, k);
            let last = k.rsplit('/').next().unwrap_or(k);
            let entry = match last {
                ".zarray" => ConsolidatedEntryV2::Array(Box::new(ArrayMetadataV2::from_json(doc, &p)?)),
                ".zgroup" => ConsolidatedEntryV2::Group(GroupMetadataV2::from_json(doc, &p)?),
                ".zattrs" => ConsolidatedEntryV2::Attributes(attributes_from_json(doc, &p)?),
                _ => {
                    return Err(MetadataError::new(
                        p,
                        "unexpected key; consolidated v2 metadata holds only keys ending in \
                         .zarray, .zgroup or .zattrs",
                    ))
                }
            };
            metadata.insert(k.clone(), entry);
        }
        Ok(Self { metadata })
    }
}

impl Serialize for ConsolidatedMetadataV2 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("zarr_consolidated_format", &1)?;
        m.serialize_entry("metadata", &self.metadata)?;
        m.end()
    }
}

fn zarr_format_2(o: &mut Obj<'_>) -> Result<()> {
    let path = o.at("zarr_format");
    let v = o.required("zarr_format")?;
    match v.as_u64() {
        Some(2) => Ok(()),
        Some(3) => Err(MetadataError::new(path, "expected 2, got 3 (Zarr v3 metadata is stored in zarr.json)")),
        _ => Err(MetadataError::expected(path, "2", v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codec_v2() {
        let c =
            CodecV2::from_json(&json!({"id":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0}), "compressor")
                .unwrap();
        assert_eq!(c.id, "blosc");
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"id":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0})
        );
        assert_eq!(CodecV2::from_json(&json!({"cname":"lz4"}), "compressor").unwrap_err().path, "compressor.id");
        assert_eq!(CodecV2::from_json(&json!({"id":"pickle"}), "filters[0]").unwrap_err().path, "filters[0].id");
        assert_eq!(
            CodecV2::from_json(&json!({"id":"zlib","level":10}), "compressor").unwrap_err().path,
            "compressor.level"
        );
    }

    /// `filters` and the `compressor` make one chain, at most 16 codecs long.
    #[test]
    fn long_filter_chains_are_refused() {
        let doc = |filters: usize, compressor: bool| {
            json!({"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "|u1", "fill_value": 0, "order": "C",
                   "compressor": if compressor { json!({"id": "zlib", "level": 1}) } else { Value::Null },
                   "filters": vec![json!({"id": "zlib", "level": 1}); filters]})
        };
        assert!(ArrayMetadataV2::from_json(&doc(16, false), "").is_ok());
        assert!(ArrayMetadataV2::from_json(&doc(15, true), "").is_ok());
        let e = ArrayMetadataV2::from_json(&doc(16, true), "").unwrap_err();
        assert_eq!((e.path.as_str(), e.message.as_str()), ("filters", "17 codecs in one chain; at most 16"));
    }

    #[test]
    fn group_members() {
        assert!(GroupMetadataV2::from_json(&json!({"zarr_format":2}), "").is_ok());
        assert!(GroupMetadataV2::from_json(
            &json!({"zarr_format":2,"consolidated_metadata":{"metadata":{},"must_understand":false,"kind":"inline"}}),
            ""
        )
        .is_ok());
        assert_eq!(GroupMetadataV2::from_json(&json!({"zarr_format":2,"x":1}), "").unwrap_err().path, "x");
        assert_eq!(GroupMetadataV2::from_json(&json!({"zarr_format":3}), "").unwrap_err().path, "zarr_format");
    }
}
