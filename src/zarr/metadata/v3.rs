//! Zarr v3 `zarr.json`: array and group metadata.
//!
//! Spec: Zarr v3 core, "Array metadata", "Group metadata", "Extensions"
//! (`must_understand`); `chunk-grids/regular-grid`;
//! `chunk-key-encodings/default` and `chunk-key-encodings/v2`. zarr-python's
//! inline `consolidated_metadata` (`{"kind": "inline", "must_understand":
//! false, "metadata": {path: zarr.json document}}`) is parsed and every
//! contained document validated.
//!
//! Unknown top-level members are rejected unless they are objects with
//! `"must_understand": false`; those are kept in `extensions`.
//! `storage_transformers` must be absent or empty: zarrd implements none.

use std::collections::BTreeMap;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::codec::{parse_codec_chain, CodecSpec};
use super::data_type::DataType;
use super::error::{index, key, MetadataError, Result};
use super::fill_value::FillValue;
use super::json::{array, array_shape, enum_str, fmt_shape, object, shape, string, Obj};
use super::v2::Separator;

/// `chunk_grid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkGrid {
    /// `{"name": "regular", "configuration": {"chunk_shape": [...]}}`.
    Regular {
        /// Chunk shape (same rank as the array, each >= 1).
        chunk_shape: Vec<u64>,
    },
}

impl ChunkGrid {
    /// The chunk shape of a regular grid.
    #[must_use]
    pub fn chunk_shape(&self) -> &[u64] {
        match self {
            Self::Regular { chunk_shape } => chunk_shape,
        }
    }
}

impl Serialize for ChunkGrid {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let Self::Regular { chunk_shape } = self;
        let mut config = Map::new();
        config.insert("chunk_shape".into(), chunk_shape.clone().into());
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("name", "regular")?;
        m.serialize_entry("configuration", &config)?;
        m.end()
    }
}

/// `chunk_key_encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKeyEncoding {
    /// `default`: `c/1/2` (separator defaults to `/`).
    Default {
        /// Separator between indices.
        separator: Separator,
    },
    /// `v2`: `1.2` (separator defaults to `.`).
    V2 {
        /// Separator between indices.
        separator: Separator,
    },
}

impl Serialize for ChunkKeyEncoding {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let (name, separator) = match self {
            Self::Default { separator } => ("default", separator),
            Self::V2 { separator } => ("v2", separator),
        };
        let mut config = BTreeMap::new();
        config.insert("separator", separator);
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("name", name)?;
        m.serialize_entry("configuration", &config)?;
        m.end()
    }
}

/// A parsed array `zarr.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayMetadataV3 {
    /// Array shape.
    pub shape: Vec<u64>,
    /// Element type.
    pub data_type: DataType,
    /// Chunk grid.
    pub chunk_grid: ChunkGrid,
    /// Chunk key encoding.
    pub chunk_key_encoding: ChunkKeyEncoding,
    /// Fill value, typed by `data_type`.
    pub fill_value: FillValue,
    /// Codec chain (validated against data type and chunk shape).
    pub codecs: Vec<CodecSpec>,
    /// User attributes.
    pub attributes: Map<String, Value>,
    /// Dimension names (`None` entries are unnamed).
    pub dimension_names: Option<Vec<Option<String>>>,
    /// Ignorable (`"must_understand": false`) extension members, as written.
    pub extensions: Map<String, Value>,
}

/// A parsed group `zarr.json`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupMetadataV3 {
    /// User attributes.
    pub attributes: Map<String, Value>,
    /// zarr-python's inline consolidated metadata, if present.
    pub consolidated_metadata: Option<ConsolidatedMetadataV3>,
    /// Ignorable extension members, as written.
    pub extensions: Map<String, Value>,
}

/// zarr-python's inline `consolidated_metadata` of a group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsolidatedMetadataV3 {
    /// Documents by path relative to the group (`"sub/arr"`).
    pub metadata: BTreeMap<String, NodeMetadataV3>,
}

/// Any `zarr.json`.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeMetadataV3 {
    /// `node_type: "array"`.
    Array(Box<ArrayMetadataV3>),
    /// `node_type: "group"`.
    Group(GroupMetadataV3),
}

impl NodeMetadataV3 {
    /// Parses and validates `zarr.json` bytes.
    ///
    /// # Errors
    ///
    /// See [`super::validate_document`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        Self::from_json(&super::parse_json(bytes)?, "")
    }

    /// Parses and validates a `zarr.json` value; errors are reported under
    /// `path`.
    ///
    /// # Errors
    ///
    /// See [`super::validate_document`].
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(value, path)?;
        zarr_format_3(&mut o)?;
        let nt_path = o.at("node_type");
        match enum_str(o.required("node_type")?, &nt_path, &["array", "group"])? {
            "array" => Ok(Self::Array(Box::new(ArrayMetadataV3::parse_rest(o)?))),
            _ => Ok(Self::Group(GroupMetadataV3::parse_rest(o)?)),
        }
    }
}

impl Serialize for NodeMetadataV3 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Array(a) => a.serialize(s),
            Self::Group(g) => g.serialize(s),
        }
    }
}

impl ArrayMetadataV3 {
    /// Parses and validates an array `zarr.json` value.
    ///
    /// # Errors
    ///
    /// As [`NodeMetadataV3::from_json`], plus a `node_type` other than
    /// `"array"`.
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(value, path)?;
        zarr_format_3(&mut o)?;
        let nt_path = o.at("node_type");
        enum_str(o.required("node_type")?, &nt_path, &["array"])?;
        Self::parse_rest(o)
    }

    /// Rank (number of dimensions).
    #[must_use]
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    fn parse_rest(mut o: Obj<'_>) -> Result<Self> {
        let shape_v = array_shape(o.required("shape")?, &o.at("shape"))?;
        let data_type = DataType::from_v3_json(o.required("data_type")?, &o.at("data_type"))?;
        let chunk_grid = chunk_grid(o.required("chunk_grid")?, &o.at("chunk_grid"), &shape_v)?;
        let chunk_key_encoding = chunk_key_encoding(o.required("chunk_key_encoding")?, &o.at("chunk_key_encoding"))?;
        let fill_value = FillValue::from_v3_json(o.required("fill_value")?, &data_type, &o.at("fill_value"))?;
        let codecs = parse_codec_chain(o.required("codecs")?, &o.at("codecs"), &data_type, chunk_grid.chunk_shape())?;
        let attributes = attributes(&mut o)?;
        let dn_path = o.at("dimension_names");
        let dimension_names = match o.optional_non_null("dimension_names") {
            Some(v) => Some(dimension_names(v, &dn_path, shape_v.len())?),
            None => None,
        };
        if let Some(v) = o.optional("storage_transformers") {
            let st_path = o.at("storage_transformers");
            if !array(v, &st_path, "an array")?.is_empty() {
                return Err(MetadataError::new(
                    index(&st_path, 0),
                    "storage transformers are not supported; expected an empty list",
                ));
            }
        }
        let extensions = extensions(&o)?;
        Ok(Self {
            shape: shape_v,
            data_type,
            chunk_grid,
            chunk_key_encoding,
            fill_value,
            codecs,
            attributes,
            dimension_names,
            extensions,
        })
    }
}

impl Serialize for ArrayMetadataV3 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("zarr_format", &3)?;
        m.serialize_entry("node_type", "array")?;
        m.serialize_entry("shape", &self.shape)?;
        m.serialize_entry("data_type", &self.data_type)?;
        m.serialize_entry("chunk_grid", &self.chunk_grid)?;
        m.serialize_entry("chunk_key_encoding", &self.chunk_key_encoding)?;
        m.serialize_entry("fill_value", &self.fill_value)?;
        m.serialize_entry("codecs", &self.codecs)?;
        m.serialize_entry("attributes", &self.attributes)?;
        if let Some(names) = &self.dimension_names {
            m.serialize_entry("dimension_names", names)?;
        }
        m.serialize_entry("storage_transformers", &[] as &[Value])?;
        for (k, v) in &self.extensions {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl GroupMetadataV3 {
    /// Parses and validates a group `zarr.json` value.
    ///
    /// # Errors
    ///
    /// As [`NodeMetadataV3::from_json`], plus a `node_type` other than
    /// `"group"`.
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(value, path)?;
        zarr_format_3(&mut o)?;
        let nt_path = o.at("node_type");
        enum_str(o.required("node_type")?, &nt_path, &["group"])?;
        Self::parse_rest(o)
    }

    fn parse_rest(mut o: Obj<'_>) -> Result<Self> {
        let attributes = attributes(&mut o)?;
        let cm_path = o.at("consolidated_metadata");
        let consolidated_metadata = match o.optional_non_null("consolidated_metadata") {
            Some(v) => Some(ConsolidatedMetadataV3::from_json(v, &cm_path)?),
            None => None,
        };
        let extensions = extensions(&o)?;
        Ok(Self { attributes, consolidated_metadata, extensions })
    }
}

impl Serialize for GroupMetadataV3 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("zarr_format", &3)?;
        m.serialize_entry("node_type", "group")?;
        m.serialize_entry("attributes", &self.attributes)?;
        if let Some(c) = &self.consolidated_metadata {
            m.serialize_entry("consolidated_metadata", c)?;
        }
        for (k, v) in &self.extensions {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl ConsolidatedMetadataV3 {
    /// Parses `consolidated_metadata`, validating every contained document.
    ///
    /// # Errors
    ///
    /// `kind` other than `"inline"`, or any invalid contained document
    /// (path `consolidated_metadata.metadata["sub/arr"]...`).
    pub fn from_json(value: &Value, path: &str) -> Result<Self> {
        let mut o = Obj::new(value, path)?;
        let kind_path = o.at("kind");
        enum_str(o.required("kind")?, &kind_path, &["inline"])?;
        if let Some(v) = o.optional("must_understand") {
            super::json::boolean(v, &o.at("must_understand"))?;
        }
        let md_path = o.at("metadata");
        let docs = object(o.required("metadata")?, &md_path)?;
        o.deny_rest("\"kind\", \"must_understand\" and \"metadata\"")?;
        let mut metadata = BTreeMap::new();
        for (k, doc) in docs {
            metadata.insert(k.clone(), NodeMetadataV3::from_json(doc, &key(&md_path, k))?);
        }
        Ok(Self { metadata })
    }
}

impl Serialize for ConsolidatedMetadataV3 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("kind", "inline")?;
        m.serialize_entry("must_understand", &false)?;
        m.serialize_entry("metadata", &self.metadata)?;
        m.end()
    }
}

fn zarr_format_3(o: &mut Obj<'_>) -> Result<()> {
    let path = o.at("zarr_format");
    let v = o.required("zarr_format")?;
    match v.as_u64() {
        Some(3) => Ok(()),
        Some(2) => Err(MetadataError::new(path, "expected 3, got 2 (Zarr v2 metadata is stored in .zarray / .zgroup)")),
        _ => Err(MetadataError::expected(path, "3", v)),
    }
}

fn attributes(o: &mut Obj<'_>) -> Result<Map<String, Value>> {
    let path = o.at("attributes");
    match o.optional("attributes") {
        Some(v) => object(v, &path).cloned(),
        None => Ok(Map::new()),
    }
}

/// Remaining members must be `{"must_understand": false, ...}` objects.
fn extensions(o: &Obj<'_>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for (name, value) in o.rest() {
        let ignorable = value.get("must_understand").and_then(Value::as_bool).is_some_and(|mu| !mu);
        if !ignorable {
            return Err(MetadataError::new(
                o.at(name),
                "unknown field; extension fields must be objects with \"must_understand\": false",
            ));
        }
        out.insert(name.clone(), value.clone());
    }
    Ok(out)
}

/// `{"name", "configuration"}` (or a bare name) of a non-ignorable
/// extension point: returns the name and the configuration reader.
fn named<'a>(value: &'a Value, path: &str, empty: &'a Value) -> Result<(&'a str, String, Obj<'a>)> {
    if let Value::String(name) = value {
        let config_path = super::error::join(path, "configuration");
        return Ok((name, path.to_owned(), Obj::new(empty, &config_path)?));
    }
    let mut o = Obj::new(value, path)?;
    let name_path = o.at("name");
    let name = string(o.required("name")?, &name_path)?;
    let config_path = o.at("configuration");
    let config = match o.optional("configuration") {
        Some(c) => Obj::new(c, &config_path)?,
        None => Obj::new(empty, &config_path)?,
    };
    if let Some(mu) = o.optional("must_understand") {
        if !super::json::boolean(mu, &o.at("must_understand"))? {
            return Err(MetadataError::new(o.at("must_understand"), "must_understand: false is not allowed here"));
        }
    }
    o.deny_rest("\"name\" and \"configuration\"")?;
    Ok((name, name_path, config))
}

fn chunk_grid(value: &Value, path: &str, array_shape: &[u64]) -> Result<ChunkGrid> {
    let empty = Value::Object(Map::new());
    let (name, name_path, mut cfg) = named(value, path, &empty)?;
    if name != "regular" {
        return Err(MetadataError::new(name_path, format!("unknown chunk grid \"{name}\"; expected \"regular\"")));
    }
    let cs_path = cfg.at("chunk_shape");
    let chunk_shape = shape(cfg.required("chunk_shape")?, &cs_path, 1)?;
    cfg.deny_rest("\"chunk_shape\"")?;
    if chunk_shape.len() != array_shape.len() {
        return Err(MetadataError::new(
            cs_path,
            format!(
                "expected {} dimensions to match shape {}, got {}",
                array_shape.len(),
                fmt_shape(array_shape),
                fmt_shape(&chunk_shape)
            ),
        ));
    }
    Ok(ChunkGrid::Regular { chunk_shape })
}

fn chunk_key_encoding(value: &Value, path: &str) -> Result<ChunkKeyEncoding> {
    let empty = Value::Object(Map::new());
    let (name, name_path, mut cfg) = named(value, path, &empty)?;
    let default_sep = match name {
        "default" => Separator::Slash,
        "v2" => Separator::Dot,
        _ => {
            return Err(MetadataError::new(
                name_path,
                format!("unknown chunk key encoding \"{name}\"; expected \"default\" or \"v2\""),
            ))
        }
    };
    let sep_path = cfg.at("separator");
    let separator = match cfg.optional("separator") {
        Some(v) => Separator::parse(v, &sep_path)?,
        None => default_sep,
    };
    cfg.deny_rest("\"separator\"")?;
    Ok(if name == "default" { ChunkKeyEncoding::Default { separator } } else { ChunkKeyEncoding::V2 { separator } })
}

fn dimension_names(value: &Value, path: &str, rank: usize) -> Result<Vec<Option<String>>> {
    let items = array(value, path, "an array of strings or nulls")?;
    if items.len() != rank {
        return Err(MetadataError::new(
            path,
            format!("expected {rank} names (one per dimension), got {}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            other => Err(MetadataError::expected(index(path, i), "a string or null", other)),
        })
        .collect()
}
