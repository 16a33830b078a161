//! Zarr v3 codec specifications and codec-chain validation.
//!
//! Spec: Zarr v3 core, "Chunk encoding" / "Codecs" (a chain is zero or more
//! array -> array codecs, exactly one array -> bytes codec, zero or more
//! bytes -> bytes codecs) and the codec specs in `codecs/*/index.rst`:
//! `bytes`, `transpose`, `gzip`, `blosc`, `crc32c`, `sharding_indexed`; plus
//! `zstd` (zarr-extensions; parameters as TensorStore documents them),
//! `vlen-utf8` / `vlen-bytes` (zarr-python) and `numcodecs.<id>`
//! ([`numcodecs`]).
//!
//! Parsing checks each codec against the representation it receives (data
//! type and chunk shape, updated by `transpose` and by sharding), so errors
//! such as a missing `endian` or an inner chunk shape that does not divide the
//! shard come out at the codec that is wrong. Unknown codecs are rejected
//! unless marked `"must_understand": false` (Zarr v3 core, "Extensions").

pub mod numcodecs;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Serialize as DeriveSerialize;
use serde_json::{Map, Value};

use super::data_type::DataType;
use super::error::{describe, index, MetadataError, Result};
use super::json::{array, boolean, enum_str, fmt_shape, int_in, object, shape, string, uint_min, Obj};

/// What a codec consumes and produces (Zarr v3 core, "Codecs").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodecKind {
    /// Array in, array out (e.g. `transpose`).
    ArrayToArray,
    /// Array in, bytes out (e.g. `bytes`, `sharding_indexed`).
    ArrayToBytes,
    /// Bytes in, bytes out (compressors, checksums).
    BytesToBytes,
}

impl CodecKind {
    fn describe(self) -> &'static str {
        match self {
            Self::ArrayToArray => "array -> array",
            Self::ArrayToBytes => "array -> bytes",
            Self::BytesToBytes => "bytes -> bytes",
        }
    }
}

/// Byte order for the `bytes` codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, DeriveSerialize)]
#[serde(rename_all = "lowercase")]
pub enum Endian {
    /// `"little"`.
    Little,
    /// `"big"`.
    Big,
}

/// `bytes` codec configuration.
#[derive(Debug, Clone, PartialEq, Eq, DeriveSerialize)]
pub struct BytesCodec {
    /// Required for multi-byte data types, absent or ignored otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endian: Option<Endian>,
}

/// `transpose` codec configuration.
#[derive(Debug, Clone, PartialEq, Eq, DeriveSerialize)]
pub struct TransposeCodec {
    /// A permutation of `0..rank`: encoded dimension `i` is decoded
    /// dimension `order[i]`.
    pub order: Vec<usize>,
}

/// `gzip` codec configuration.
#[derive(Debug, Clone, PartialEq, Eq, DeriveSerialize)]
pub struct GzipCodec {
    /// Compression level 0..=9 (clients default it when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
}

/// `zstd` codec configuration.
#[derive(Debug, Clone, PartialEq, Eq, DeriveSerialize)]
pub struct ZstdCodec {
    /// Compression level -131072..=22.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<i32>,
    /// Whether frames carry a content checksum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<bool>,
}

/// Blosc internal compressor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, DeriveSerialize)]
#[serde(rename_all = "lowercase")]
pub enum BloscCname {
    /// `"blosclz"`.
    Blosclz,
    /// `"lz4"`.
    Lz4,
    /// `"lz4hc"`.
    Lz4hc,
    /// `"snappy"`.
    Snappy,
    /// `"zlib"`.
    Zlib,
    /// `"zstd"`.
    Zstd,
}

/// Blosc shuffle mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, DeriveSerialize)]
#[serde(rename_all = "lowercase")]
pub enum BloscShuffle {
    /// `"noshuffle"`.
    Noshuffle,
    /// `"shuffle"` (byte-wise).
    Shuffle,
    /// `"bitshuffle"`.
    Bitshuffle,
}

/// `blosc` codec configuration. Members are optional because zarr-python
/// and TensorStore fill defaults for absent ones when reading.
#[derive(Debug, Clone, PartialEq, Eq, DeriveSerialize)]
pub struct BloscCodec {
    /// Internal compressor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cname: Option<BloscCname>,
    /// Level 0..=9.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clevel: Option<u8>,
    /// Shuffle mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shuffle: Option<BloscShuffle>,
    /// Shuffle stride in bytes (>= 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub typesize: Option<u64>,
    /// Block size in bytes (0 = automatic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocksize: Option<u64>,
}

/// Where the shard index lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, DeriveSerialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexLocation {
    /// `"start"`.
    Start,
    /// `"end"` (the default when absent).
    #[default]
    End,
}

/// `sharding_indexed` codec configuration.
#[derive(Debug, Clone, PartialEq, DeriveSerialize)]
pub struct ShardingCodec {
    /// Inner chunk shape; divides the shard shape in every dimension.
    pub chunk_shape: Vec<u64>,
    /// Codec chain of each inner chunk.
    pub codecs: Vec<CodecSpec>,
    /// Codec chain of the shard index (fixed-size codecs only).
    pub index_codecs: Vec<CodecSpec>,
    /// Index position.
    pub index_location: IndexLocation,
}

/// A `numcodecs.<id>` codec written by zarr-python 3.
#[derive(Debug, Clone, PartialEq)]
pub struct NumcodecsCodec {
    /// The numcodecs id (`"zlib"` for `numcodecs.zlib`).
    pub id: String,
    /// Its configuration, as written.
    pub configuration: Map<String, Value>,
}

/// An unknown codec marked `"must_understand": false`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtensionCodec {
    /// Codec name.
    pub name: String,
    /// Configuration, as written.
    pub configuration: Option<Map<String, Value>>,
}

/// One entry of a v3 `codecs` list.
#[derive(Debug, Clone, PartialEq)]
pub enum CodecSpec {
    /// `bytes`.
    Bytes(BytesCodec),
    /// `transpose`.
    Transpose(TransposeCodec),
    /// `gzip`.
    Gzip(GzipCodec),
    /// `zstd`.
    Zstd(ZstdCodec),
    /// `blosc`.
    Blosc(BloscCodec),
    /// `crc32c`.
    Crc32c,
    /// `sharding_indexed`.
    ShardingIndexed(Box<ShardingCodec>),
    /// `vlen-utf8`.
    VlenUtf8,
    /// `vlen-bytes`.
    VlenBytes,
    /// `numcodecs.<id>`.
    Numcodecs(NumcodecsCodec),
    /// An ignorable extension codec.
    Extension(ExtensionCodec),
}

const CORE_NAMES: &[&str] =
    &["bytes", "transpose", "gzip", "zstd", "blosc", "crc32c", "sharding_indexed", "vlen-utf8", "vlen-bytes"];

impl CodecSpec {
    /// The codec's `name` in metadata.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Self::Bytes(_) => "bytes".into(),
            Self::Transpose(_) => "transpose".into(),
            Self::Gzip(_) => "gzip".into(),
            Self::Zstd(_) => "zstd".into(),
            Self::Blosc(_) => "blosc".into(),
            Self::Crc32c => "crc32c".into(),
            Self::ShardingIndexed(_) => "sharding_indexed".into(),
            Self::VlenUtf8 => "vlen-utf8".into(),
            Self::VlenBytes => "vlen-bytes".into(),
            Self::Numcodecs(c) => format!("numcodecs.{}", c.id),
            Self::Extension(c) => c.name.clone(),
        }
    }

    /// The codec's kind; `None` for ignorable extensions.
    #[must_use]
    pub fn kind(&self) -> Option<CodecKind> {
        match self {
            Self::Transpose(_) => Some(CodecKind::ArrayToArray),
            Self::Bytes(_) | Self::ShardingIndexed(_) | Self::VlenUtf8 | Self::VlenBytes => {
                Some(CodecKind::ArrayToBytes)
            }
            Self::Gzip(_) | Self::Zstd(_) | Self::Blosc(_) | Self::Crc32c => Some(CodecKind::BytesToBytes),
            Self::Numcodecs(c) => numcodecs::v3_kind(&c.id),
            Self::Extension(_) => None,
        }
    }

    /// Whether the encoded size depends only on the decoded size (required
    /// of sharding index codecs).
    #[must_use]
    pub fn is_fixed_size(&self) -> bool {
        match self {
            Self::Bytes(_) | Self::Transpose(_) | Self::Crc32c => true,
            Self::Numcodecs(c) => numcodecs::FIXED_SIZE_IDS.contains(&c.id.as_str()),
            _ => false,
        }
    }
}

impl Serialize for CodecSpec {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let empty = Map::new();
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name())?;
        match self {
            Self::Bytes(c) if c.endian.is_some() => m.serialize_entry("configuration", c)?,
            Self::Bytes(_) | Self::Crc32c => {}
            Self::Transpose(c) => m.serialize_entry("configuration", c)?,
            Self::Gzip(c) => m.serialize_entry("configuration", c)?,
            Self::Zstd(c) => m.serialize_entry("configuration", c)?,
            Self::Blosc(c) => m.serialize_entry("configuration", c)?,
            Self::ShardingIndexed(c) => m.serialize_entry("configuration", c)?,
            // zarr-python writes an empty configuration for these.
            Self::VlenUtf8 | Self::VlenBytes => m.serialize_entry("configuration", &empty)?,
            Self::Numcodecs(c) => m.serialize_entry("configuration", &c.configuration)?,
            Self::Extension(c) => {
                if let Some(cfg) = &c.configuration {
                    m.serialize_entry("configuration", cfg)?;
                }
                m.serialize_entry("must_understand", &false)?;
            }
        }
        m.end()
    }
}

/// Which codec list is being parsed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The array's `codecs`, or a shard's inner `codecs`.
    Chunk,
    /// A shard's `index_codecs`.
    Index,
}

/// The representation a codec receives while walking a chain.
struct State {
    /// `None` once an opaque array -> array codec (e.g. `numcodecs.astype`)
    /// may have changed the data type; type-dependent checks stop there.
    data_type: Option<DataType>,
    shape: Vec<u64>,
}

/// Parses and validates a v3 codec chain for chunks of `data_type` and
/// `chunk_shape`.
///
/// # Errors
///
/// Unknown codecs, bad configurations, wrong chain order, and mismatches
/// with the data type or chunk shape, each at the offending codec's path.
pub fn parse_codec_chain(
    value: &Value,
    path: &str,
    data_type: &DataType,
    chunk_shape: &[u64],
) -> Result<Vec<CodecSpec>> {
    chain(value, path, State { data_type: Some(data_type.clone()), shape: chunk_shape.to_vec() }, Role::Chunk)
}

fn chain(value: &Value, path: &str, mut state: State, role: Role) -> Result<Vec<CodecSpec>> {
    let items = array(value, path, "an array of codecs")?;
    let mut out = Vec::with_capacity(items.len());
    let mut seen_array_to_bytes = false;
    for (i, item) in items.iter().enumerate() {
        let p = index(path, i);
        let envelope = Envelope::parse(item, &p)?;
        let kind = match kind_of(envelope.name) {
            Some(kind) => Some(kind),
            None if !envelope.must_understand => None,
            None => return Err(unknown_codec(&envelope, item)),
        };
        if let Some(kind) = kind {
            check_order(kind, seen_array_to_bytes, &envelope, &p)?;
            seen_array_to_bytes |= kind == CodecKind::ArrayToBytes;
        }
        let spec = codec(&envelope, &p, &mut state)?;
        if role == Role::Index && !spec.is_fixed_size() && spec.kind().is_some() {
            return Err(MetadataError::new(
                p,
                format!("index_codecs must not contain the variable-size codec \"{}\"", spec.name()),
            ));
        }
        out.push(spec);
    }
    if !seen_array_to_bytes {
        return Err(MetadataError::new(
            path,
            "expected exactly one array -> bytes codec (bytes, sharding_indexed, vlen-utf8, \
             vlen-bytes, numcodecs.pcodec or numcodecs.zfpy), found none",
        ));
    }
    Ok(out)
}

fn kind_of(name: &str) -> Option<CodecKind> {
    match name {
        "transpose" => Some(CodecKind::ArrayToArray),
        "bytes" | "sharding_indexed" | "vlen-utf8" | "vlen-bytes" => Some(CodecKind::ArrayToBytes),
        "gzip" | "zstd" | "blosc" | "crc32c" => Some(CodecKind::BytesToBytes),
        _ => numcodecs::v3_kind(name.strip_prefix("numcodecs.")?),
    }
}

fn check_order(kind: CodecKind, seen_a2b: bool, env: &Envelope<'_>, path: &str) -> Result<()> {
    let problem = match (kind, seen_a2b) {
        (CodecKind::ArrayToArray, true) => "must come before the array -> bytes codec",
        (CodecKind::ArrayToBytes, true) => "is a second array -> bytes codec; a chain has exactly one",
        (CodecKind::BytesToBytes, false) => "must come after the array -> bytes codec",
        _ => return Ok(()),
    };
    Err(MetadataError::new(path, format!("{} codec \"{}\" {problem}", kind.describe(), env.name)))
}

fn unknown_codec(env: &Envelope<'_>, item: &Value) -> MetadataError {
    let numcodecs: Vec<&str> = numcodecs::V3_NUMCODECS.iter().map(|(id, _)| *id).collect();
    MetadataError::new(
        env.name_path.clone(),
        format!(
            "unknown codec {}; expected one of {} or numcodecs.<id> with id one of {} \
             (or mark an ignorable extension \"must_understand\": false)",
            describe(item.get("name").unwrap_or(item)),
            CORE_NAMES.join(", "),
            numcodecs.join(", "),
        ),
    )
}

/// `"name"` or `{"name", "configuration", "must_understand"}`.
struct Envelope<'a> {
    name: &'a str,
    name_path: String,
    configuration: Option<&'a Map<String, Value>>,
    configuration_path: String,
    must_understand: bool,
}

impl<'a> Envelope<'a> {
    fn parse(value: &'a Value, path: &str) -> Result<Self> {
        if let Value::String(name) = value {
            return Ok(Self {
                name,
                name_path: path.to_owned(),
                configuration: None,
                configuration_path: super::error::join(path, "configuration"),
                must_understand: true,
            });
        }
        let mut obj = Obj::new(value, path).map_err(|_| {
            MetadataError::expected(path, "a codec name or a {\"name\", \"configuration\"} object", value)
        })?;
        let name_path = obj.at("name");
        let name = string(obj.required("name")?, &name_path)?;
        let configuration_path = obj.at("configuration");
        let configuration = match obj.optional("configuration") {
            Some(c) => Some(object(c, &configuration_path)?),
            None => None,
        };
        let must_understand = match obj.optional("must_understand") {
            Some(v) => boolean(v, &obj.at("must_understand"))?,
            None => true,
        };
        obj.deny_rest("\"name\", \"configuration\" and \"must_understand\"")?;
        Ok(Self { name, name_path, configuration, configuration_path, must_understand })
    }

    /// The configuration as an object reader (empty when absent).
    fn config(&self, empty: &'a Value) -> Result<Obj<'a>> {
        match self.configuration {
            Some(map) => Ok(Obj::from_map(map, &self.configuration_path)),
            None => Obj::new(empty, &self.configuration_path),
        }
    }
}

fn codec(env: &Envelope<'_>, path: &str, state: &mut State) -> Result<CodecSpec> {
    let empty = Value::Object(Map::new());
    let mut cfg = env.config(&empty)?;
    let spec = match env.name {
        "bytes" => {
            let endian = match cfg.optional("endian") {
                Some(v) => Some(match enum_str(v, &cfg.at("endian"), &["little", "big"])? {
                    "little" => Endian::Little,
                    _ => Endian::Big,
                }),
                None => None,
            };
            if let Some(dt) = &state.data_type {
                if !dt.is_fixed_size() {
                    let use_instead = if *dt == DataType::String { "vlen-utf8" } else { "vlen-bytes" };
                    return Err(MetadataError::new(
                        path,
                        format!(
                            "the bytes codec cannot encode the variable-length data type \"{}\"; \
                             use {use_instead}",
                            dt.name()
                        ),
                    ));
                }
                if endian.is_none() && dt.endianness_matters() {
                    return Err(MetadataError::new(
                        cfg.at("endian"),
                        format!("required for the multi-byte data type {}; expected \"little\" or \"big\"", dt.name()),
                    ));
                }
            }
            cfg.deny_rest("\"endian\"")?;
            CodecSpec::Bytes(BytesCodec { endian })
        }
        "transpose" => {
            let order_path = cfg.at("order");
            let order = permutation(cfg.required("order")?, &order_path, state.shape.len())?;
            cfg.deny_rest("\"order\"")?;
            state.shape = order.iter().filter_map(|&d| state.shape.get(d).copied()).collect();
            CodecSpec::Transpose(TransposeCodec { order })
        }
        "gzip" => {
            let level = match cfg.optional("level") {
                Some(v) => Some(small(int_in(v, &cfg.at("level"), 0, 9)?)),
                None => None,
            };
            cfg.deny_rest("\"level\"")?;
            CodecSpec::Gzip(GzipCodec { level })
        }
        "zstd" => {
            let level = match cfg.optional("level") {
                Some(v) => {
                    let n = int_in(v, &cfg.at("level"), -131_072, 22)?;
                    Some(i32::try_from(n).unwrap_or_default())
                }
                None => None,
            };
            let checksum = match cfg.optional("checksum") {
                Some(v) => Some(boolean(v, &cfg.at("checksum"))?),
                None => None,
            };
            cfg.deny_rest("\"level\" and \"checksum\"")?;
            CodecSpec::Zstd(ZstdCodec { level, checksum })
        }
        "blosc" => CodecSpec::Blosc(blosc(&mut cfg)?),
        "crc32c" => {
            cfg.deny_rest("no members")?;
            CodecSpec::Crc32c
        }
        "vlen-utf8" | "vlen-bytes" => {
            cfg.deny_rest("no members")?;
            if let Some(dt) = state.data_type.as_ref().filter(|dt| dt.is_fixed_size()) {
                return Err(MetadataError::new(
                    path,
                    format!(
                        "the {} codec needs a variable-length data type (string or \
                         variable_length_bytes), got \"{}\"",
                        env.name,
                        dt.name()
                    ),
                ));
            }
            if env.name == "vlen-utf8" {
                CodecSpec::VlenUtf8
            } else {
                CodecSpec::VlenBytes
            }
        }
        "sharding_indexed" => {
            if env.configuration.is_none() {
                return Err(MetadataError::new(
                    env.configuration_path.clone(),
                    "required field is missing (sharding_indexed needs chunk_shape, codecs and index_codecs)",
                ));
            }
            CodecSpec::ShardingIndexed(Box::new(sharding(&mut cfg, state)?))
        }
        name => match name.strip_prefix("numcodecs.") {
            Some(id) if numcodecs::v3_kind(id).is_some() => {
                let configuration = env.configuration.cloned().unwrap_or_default();
                numcodecs::validate_config(id, &configuration, &env.configuration_path)?;
                if numcodecs::v3_kind(id) == Some(CodecKind::ArrayToArray) {
                    state.data_type = None;
                }
                CodecSpec::Numcodecs(NumcodecsCodec { id: id.to_owned(), configuration })
            }
            _ => CodecSpec::Extension(ExtensionCodec {
                name: name.to_owned(),
                configuration: env.configuration.cloned(),
            }),
        },
    };
    Ok(spec)
}

/// Levels already range-checked to 0..=9.
fn small(n: i64) -> u8 {
    u8::try_from(n).unwrap_or_default()
}

fn permutation(value: &Value, path: &str, rank: usize) -> Result<Vec<usize>> {
    let expected = format!("a permutation of 0..{rank} (one entry per dimension of the {rank}-dimensional chunk)");
    let err = || MetadataError::expected(path, &expected, value);
    let items = value.as_array().ok_or_else(err)?;
    if items.len() != rank {
        return Err(err());
    }
    let mut seen = vec![false; rank];
    let mut order = Vec::with_capacity(rank);
    for item in items {
        let d = item.as_u64().and_then(|d| usize::try_from(d).ok()).filter(|&d| d < rank).ok_or_else(err)?;
        let slot = seen.get_mut(d).ok_or_else(err)?;
        if *slot {
            return Err(err());
        }
        *slot = true;
        order.push(d);
    }
    Ok(order)
}

fn blosc(cfg: &mut Obj<'_>) -> Result<BloscCodec> {
    let cname = match cfg.optional("cname") {
        Some(v) => Some(match enum_str(v, &cfg.at("cname"), numcodecs::BLOSC_CNAMES)? {
            "blosclz" => BloscCname::Blosclz,
            "lz4" => BloscCname::Lz4,
            "lz4hc" => BloscCname::Lz4hc,
            "snappy" => BloscCname::Snappy,
            "zlib" => BloscCname::Zlib,
            _ => BloscCname::Zstd,
        }),
        None => None,
    };
    let clevel = match cfg.optional("clevel") {
        Some(v) => Some(small(int_in(v, &cfg.at("clevel"), 0, 9)?)),
        None => None,
    };
    let shuffle = match cfg.optional("shuffle") {
        Some(v) => Some(match enum_str(v, &cfg.at("shuffle"), &["noshuffle", "shuffle", "bitshuffle"])? {
            "noshuffle" => BloscShuffle::Noshuffle,
            "shuffle" => BloscShuffle::Shuffle,
            _ => BloscShuffle::Bitshuffle,
        }),
        None => None,
    };
    let typesize = match cfg.optional("typesize") {
        Some(v) => Some(uint_min(v, &cfg.at("typesize"), 1)?),
        None => None,
    };
    let blocksize = match cfg.optional("blocksize") {
        Some(v) => Some(uint_min(v, &cfg.at("blocksize"), 0)?),
        None => None,
    };
    cfg.deny_rest("\"cname\", \"clevel\", \"shuffle\", \"typesize\" and \"blocksize\"")?;
    Ok(BloscCodec { cname, clevel, shuffle, typesize, blocksize })
}

fn sharding(cfg: &mut Obj<'_>, state: &State) -> Result<ShardingCodec> {
    let shape_path = cfg.at("chunk_shape");
    let inner = shape(cfg.required("chunk_shape")?, &shape_path, 1)?;
    let shard = &state.shape;
    if inner.len() != shard.len() {
        return Err(MetadataError::new(
            shape_path,
            format!(
                "expected {} dimensions to match the shard shape {}, got {}",
                shard.len(),
                fmt_shape(shard),
                fmt_shape(&inner)
            ),
        ));
    }
    if let Some(d) = (0..inner.len()).find(|&d| {
        let (s, i) = (shard.get(d).copied().unwrap_or(0), inner.get(d).copied().unwrap_or(1));
        i == 0 || s % i != 0
    }) {
        return Err(MetadataError::new(
            shape_path,
            format!(
                "the shard shape {} is not divisible by the inner chunk shape {} (dimension {d})",
                fmt_shape(shard),
                fmt_shape(&inner)
            ),
        ));
    }
    let codecs_path = cfg.at("codecs");
    let codecs = chain(
        cfg.required("codecs")?,
        &codecs_path,
        State { data_type: state.data_type.clone(), shape: inner.clone() },
        Role::Chunk,
    )?;
    let mut index_shape: Vec<u64> = shard.iter().zip(&inner).map(|(s, i)| s.checked_div(*i).unwrap_or(0)).collect();
    index_shape.push(2);
    let index_path = cfg.at("index_codecs");
    let index_codecs = chain(
        cfg.required("index_codecs")?,
        &index_path,
        State { data_type: Some(DataType::UInt64), shape: index_shape },
        Role::Index,
    )?;
    let index_location = match cfg.optional("index_location") {
        Some(v) => match enum_str(v, &cfg.at("index_location"), &["start", "end"])? {
            "start" => IndexLocation::Start,
            _ => IndexLocation::End,
        },
        None => IndexLocation::End,
    };
    cfg.deny_rest("\"chunk_shape\", \"codecs\", \"index_codecs\" and \"index_location\"")?;
    Ok(ShardingCodec { chunk_shape: inner, codecs, index_codecs, index_location })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value, dt: &DataType, shape: &[u64]) -> Result<Vec<CodecSpec>> {
        parse_codec_chain(&v, "codecs", dt, shape)
    }

    fn err(v: Value, dt: &DataType, shape: &[u64]) -> MetadataError {
        parse(v, dt, shape).unwrap_err()
    }

    #[test]
    fn zarr_python_sharded_chain_round_trips() {
        let v = json!([{"name":"sharding_indexed","configuration":{"chunk_shape":[8,16],
            "codecs":[{"name":"bytes","configuration":{"endian":"little"}},
                      {"name":"zstd","configuration":{"level":3,"checksum":true}}],
            "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],
            "index_location":"end"}}]);
        let chain = parse(v.clone(), &DataType::UInt16, &[32, 32]).unwrap();
        assert_eq!(serde_json::to_value(&chain).unwrap(), v);
    }

    #[test]
    fn shorthand_names_and_tensorstore_forms() {
        let chain = parse(
            json!([{"name":"transpose","configuration":{"order":[1,0]}},"bytes","crc32c"]),
            &DataType::UInt8,
            &[5, 5],
        )
        .unwrap();
        assert_eq!(chain.len(), 3);
        // TensorStore omits index_location.
        let chain = parse(
            json!([{"name":"sharding_indexed","configuration":{"chunk_shape":[64,64],
                "codecs":[{"configuration":{"endian":"little"},"name":"bytes"}],
                "index_codecs":[{"configuration":{"endian":"little"},"name":"bytes"},{"name":"crc32c"}]}}]),
            &DataType::Float32,
            &[256, 256],
        )
        .unwrap();
        let CodecSpec::ShardingIndexed(s) = &chain[0] else { panic!() };
        assert_eq!(s.index_location, IndexLocation::End);
    }

    #[test]
    fn transpose_before_sharding_permutes_the_shard_shape() {
        let v = json!([{"name":"transpose","configuration":{"order":[1,0]}},
            {"name":"sharding_indexed","configuration":{"chunk_shape":[2,4],
              "codecs":["bytes"],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}}]);
        assert!(parse(v.clone(), &DataType::Int8, &[4, 2]).is_ok());
        assert!(parse(v, &DataType::Int8, &[2, 4]).is_err());
    }

    #[test]
    fn errors_name_the_field() {
        let dt = DataType::Float64;
        let e = err(json!(["bytes"]), &dt, &[4]);
        assert_eq!(e.path, "codecs[0].configuration.endian");
        let e = err(
            json!([{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":12}}]),
            &dt,
            &[4],
        );
        assert_eq!(e.to_string(), "codecs[1].configuration.level: expected an integer 0..=9, got 12");
        let e = err(json!([{"name":"gzip"}]), &dt, &[4]);
        assert_eq!(e.path, "codecs[0]");
        assert!(e.message.contains("must come after"), "{e}");
        let e = err(json!([]), &dt, &[4]);
        assert_eq!(e.path, "codecs");
        let e = err(json!([{"name":"bytes","configuration":{"endian":"little"}},"bytes"]), &dt, &[4]);
        assert_eq!(e.path, "codecs[1]");
        let e = err(json!([{"name":"lzw"}]), &dt, &[4]);
        assert_eq!(e.path, "codecs[0].name");
        assert!(e.message.starts_with("unknown codec \"lzw\""), "{e}");
        let e = err(json!([{"name":"numcodecs.pickle"}]), &dt, &[4]);
        assert_eq!(e.path, "codecs[0].name");
        let e = err(json!([{"name":"transpose","configuration":{"order":[0,0]}},"bytes"]), &DataType::UInt8, &[4, 4]);
        assert_eq!(e.path, "codecs[0].configuration.order");
        let e = err(json!([{"name":"transpose","configuration":{"order":"F"}},"bytes"]), &DataType::UInt8, &[4, 4]);
        assert_eq!(e.path, "codecs[0].configuration.order");
        let e = err(json!([{"name":"blosc","configuration":{"cname":"lzw"}}]), &dt, &[4]);
        assert_eq!(e.path, "codecs[0]");
        let e = err(json!(["bytes",{"name":"blosc","configuration":{"shuffle":2}}]), &DataType::UInt8, &[4]);
        assert_eq!(e.path, "codecs[1].configuration.shuffle");
        let e = err(json!(["bytes",{"name":"zstd","configuration":{"level":23}}]), &DataType::UInt8, &[4]);
        assert_eq!(e.path, "codecs[1].configuration.level");
        let e = err(json!(["bytes",{"name":"gzip","configuration":{"lvl":1}}]), &DataType::UInt8, &[4]);
        assert_eq!(e.path, "codecs[1].configuration.lvl");
        let e = err(json!(["bytes"]), &DataType::String, &[4]);
        assert!(e.message.contains("vlen-utf8"), "{e}");
        let e = err(json!(["vlen-utf8"]), &DataType::Int8, &[4]);
        assert_eq!(e.path, "codecs[0]");
    }

    #[test]
    fn sharding_errors() {
        let dt = DataType::UInt16;
        let sharded = |inner: Value, codecs: Value, index: Value| json!([{"name":"sharding_indexed","configuration":{"chunk_shape":inner,"codecs":codecs,"index_codecs":index}}]);
        let le = json!([{"name":"bytes","configuration":{"endian":"little"}}]);
        let e = err(sharded(json!([8]), le.clone(), le.clone()), &dt, &[32, 32]);
        assert_eq!(e.path, "codecs[0].configuration.chunk_shape");
        let e = err(sharded(json!([8, 12]), le.clone(), le.clone()), &dt, &[32, 32]);
        assert!(e.message.contains("not divisible"), "{e}");
        let e = err(sharded(json!([8, 8]), json!(["bytes"]), le.clone()), &dt, &[32, 32]);
        assert_eq!(e.path, "codecs[0].configuration.codecs[0].configuration.endian");
        let e = err(
            sharded(json!([8, 8]), le.clone(), json!([le[0], {"name":"gzip","configuration":{"level":1}}])),
            &dt,
            &[32, 32],
        );
        assert_eq!(e.path, "codecs[0].configuration.index_codecs[1]");
        let e = err(sharded(json!([8, 8]), le.clone(), json!(["bytes"])), &dt, &[32, 32]);
        assert_eq!(e.path, "codecs[0].configuration.index_codecs[0].configuration.endian");
        let e = err(json!([{"name":"sharding_indexed"}]), &dt, &[32, 32]);
        assert_eq!(e.path, "codecs[0].configuration");
    }

    #[test]
    fn extensions_and_numcodecs() {
        let chain = parse(
            json!([{"name":"numcodecs.delta","configuration":{"dtype":"<f8"}},
                   {"name":"bytes","configuration":{"endian":"little"}},
                   {"name":"numcodecs.zlib","configuration":{"level":3}},
                   {"name":"x.checksum","must_understand":false}]),
            &DataType::Float64,
            &[5],
        )
        .unwrap();
        assert_eq!(chain[0].kind(), Some(CodecKind::ArrayToArray));
        assert_eq!(chain[3].kind(), None);
        let e = err(json!(["bytes",{"name":"numcodecs.zlib","configuration":{"level":10}}]), &DataType::UInt8, &[5]);
        assert_eq!(e.path, "codecs[1].configuration.level");
        // After an opaque array -> array codec the data type is unknown: no endian check.
        assert!(parse(
            json!([{"name":"numcodecs.astype","configuration":{"encode_dtype":"|u1","decode_dtype":"<f8"}},"bytes"]),
            &DataType::Float64,
            &[5]
        )
        .is_ok());
    }
}
