//! The `codecs` list of a v3 `zarr.json`: named codec configurations, parsed
//! and checked as a chain.
//!
//! Spec: Zarr v3 core, "Chunk encoding" / "Codecs" (a chain is zero or more
//! array -> array codecs, exactly one array -> bytes codec, zero or more
//! bytes -> bytes codecs) and "Extensions" (unknown codecs are rejected
//! unless marked `"must_understand": false`).
//!
//! This module is the document side only: the entry envelope (`"name"` or
//! `{"name", "configuration", "must_understand"}`), the walk along the chain
//! and the [`CodecSpec`] list that serialises back to JSON. A [`CodecSpec`]
//! is a name, a kind and a configuration: the codec file's configuration
//! type (parse, validate, defaults, building the codec, numcodecs alias)
//! under [`crate::zarr::codec`], behind the
//! [`CodecConfig`](crate::zarr::codec::registry::CodecConfig) trait, so
//! nothing here lists the codecs; names map to their parsers in
//! [`crate::zarr::codec::registry`], which also states the order rule.
//!
//! Parsing checks each codec against the representation it receives (data
//! type and chunk shape, updated by `transpose` and by sharding), so errors
//! such as a missing `endian` or an inner chunk shape that does not divide the
//! shard come out at the codec that is wrong.

use std::any::Any;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::data_type::DataType;
use super::error::{describe, index, MetadataError, Result};
use super::json::{array, boolean, object, string, Obj};
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::codec::registry::{self, order_problem, BuiltCodec, ChainState, CodecConfig, ParseContext};
use crate::zarr::codec::{CodecError, CodecResult};

pub use crate::zarr::codec::array_to_array::transpose::TransposeConfig;
pub use crate::zarr::codec::array_to_bytes::bytes::{BytesConfig, Endian};
pub use crate::zarr::codec::array_to_bytes::sharding::{IndexLocation, ShardingConfig};
pub use crate::zarr::codec::array_to_bytes::vlen::VlenKind;
pub use crate::zarr::codec::bytes_to_bytes::blosc::{BloscCname, BloscConfig, BloscShuffle};
pub use crate::zarr::codec::bytes_to_bytes::crc32c::Crc32cConfig;
pub use crate::zarr::codec::bytes_to_bytes::gzip::GzipConfig;
pub use crate::zarr::codec::bytes_to_bytes::zstd::ZstdConfig;
pub use crate::zarr::codec::numcodecs::{self, NumcodecsConfig};
pub use crate::zarr::codec::registry::CodecKind;

/// The configuration of an unknown codec marked `"must_understand": false`,
/// kept as written.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtensionConfig {
    /// Configuration, as written.
    pub configuration: Option<Map<String, Value>>,
}

impl CodecConfig for ExtensionConfig {
    fn to_json(&self) -> Option<Value> {
        self.configuration.clone().map(Value::Object)
    }

    fn build(&self, _: &ChunkRepr) -> CodecResult<BuiltCodec> {
        Err(CodecError::new(
            "extension",
            "is an ignorable extension codec (\"must_understand\": false) with no implementation; \
             leave it out of the chain",
        ))
    }
}

/// One entry of a v3 `codecs` list: a codec's name, its kind and its parsed
/// configuration (the codec file's configuration type, through
/// [`registry`]). Two entries are equal when their names and the JSON they
/// write back are.
#[derive(Debug, Clone)]
pub struct CodecSpec {
    name: String,
    /// `None` for an ignorable extension.
    kind: Option<CodecKind>,
    config: Arc<dyn CodecConfig>,
}

impl CodecSpec {
    /// An entry named `name` of `kind` (`None`: an ignorable extension).
    pub(crate) fn new(name: &str, kind: Option<CodecKind>, config: Arc<dyn CodecConfig>) -> Self {
        Self { name: name.to_owned(), kind, config }
    }

    /// The codec's `name` in metadata (`numcodecs.zlib` for numcodecs ids).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The codec's kind; `None` for ignorable extensions.
    #[must_use]
    pub fn kind(&self) -> Option<CodecKind> {
        self.kind
    }

    /// Whether this is an ignorable extension (`"must_understand": false`)
    /// zarrd does not know: readers skip it.
    #[must_use]
    pub fn is_extension(&self) -> bool {
        self.kind.is_none()
    }

    /// Whether the encoded size depends only on the decoded size (required
    /// of sharding index codecs).
    #[must_use]
    pub fn is_fixed_size(&self) -> bool {
        self.config.is_fixed_size()
    }

    /// The configuration, when it is of type `T` (`ShardingConfig`,
    /// `ZstdConfig`, ...).
    #[must_use]
    pub fn config<T: CodecConfig>(&self) -> Option<&T> {
        let any: &dyn Any = self.config.as_ref();
        any.downcast_ref::<T>()
    }

    /// The `configuration` member as written back.
    #[must_use]
    pub fn configuration(&self) -> Option<Value> {
        self.config.to_json()
    }

    /// Builds the codec for the representation entering it (see
    /// [`CodecConfig::build`]).
    ///
    /// # Errors
    /// As [`CodecConfig::build`]; an ignorable extension has no codec.
    pub fn build(&self, entering: &ChunkRepr) -> CodecResult<BuiltCodec> {
        self.config
            .build(entering)
            .map_err(|e| if self.is_extension() { CodecError::new(&self.name, e.reason) } else { e })
    }
}

impl PartialEq for CodecSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.kind == other.kind && self.configuration() == other.configuration()
    }
}

impl Serialize for CodecSpec {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name)?;
        if let Some(cfg) = self.configuration() {
            m.serialize_entry("configuration", &cfg)?;
        }
        if self.is_extension() {
            m.serialize_entry("must_understand", &false)?;
        }
        m.end()
    }
}

/// Which codec list is being parsed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The array's `codecs`, or a shard's inner `codecs`.
    Chunk,
    /// A shard's `index_codecs`.
    Index,
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
    parse_chain(
        value,
        path,
        ChainState { data_type: Some(data_type.clone()), shape: chunk_shape.to_vec() },
        Role::Chunk,
    )
}

/// The most codecs one chain may have (v3 `codecs`, a shard's inner and
/// index chains; v2 `filters` and the `compressor`). Real arrays use up to
/// four or five; each more stage of a chain adds a full pass over the chunk
/// and a compressor's worst-case expansion to what its decoders may be
/// asked to produce, so a chain of a hundred compressors would be a
/// decompression bomb past every other cap.
pub const MAX_CHAIN_CODECS: usize = 16;

/// The error of a chain longer than [`MAX_CHAIN_CODECS`].
pub(crate) fn check_chain_length(n: usize, path: &str) -> Result<()> {
    if n > MAX_CHAIN_CODECS {
        return Err(MetadataError::new(path, format!("{n} codecs in one chain; at most {MAX_CHAIN_CODECS}")));
    }
    Ok(())
}

/// Parses a chain entering with `state` (a shard's inner and index chains
/// come through here too).
pub(crate) fn parse_chain(value: &Value, path: &str, mut state: ChainState, role: Role) -> Result<Vec<CodecSpec>> {
    let items = array(value, path, "an array of codecs")?;
    check_chain_length(items.len(), path)?;
    let mut out = Vec::with_capacity(items.len());
    let mut seen_array_to_bytes = false;
    for (i, item) in items.iter().enumerate() {
        let p = index(path, i);
        let envelope = Envelope::parse(item, &p)?;
        let kind = match registry::kind_of(envelope.name) {
            Some(kind) => Some(kind),
            None if !envelope.must_understand => None,
            None => return Err(unknown_codec(&envelope, item)),
        };
        if let Some(kind) = kind {
            if let Some(problem) = order_problem(kind, seen_array_to_bytes) {
                return Err(MetadataError::new(
                    p,
                    format!("{} codec \"{}\" {}", kind.describe(), envelope.name, problem.describe()),
                ));
            }
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

fn unknown_codec(env: &Envelope<'_>, item: &Value) -> MetadataError {
    let names: Vec<&str> = registry::names().collect();
    MetadataError::new(
        env.name_path.clone(),
        format!(
            "unknown codec {}; expected one of {} or numcodecs.<id> with id one of {} \
             (or mark an ignorable extension \"must_understand\": false)",
            describe(item.get("name").unwrap_or(item)),
            names.join(", "),
            numcodecs::v3_ids().collect::<Vec<_>>().join(", "),
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

/// One entry: a known codec through its registered parser, else an
/// ignorable extension (unknown names that must be understood were refused
/// before).
fn codec(env: &Envelope<'_>, path: &str, state: &mut ChainState) -> Result<CodecSpec> {
    let empty = Value::Object(Map::new());
    let mut cx = ParseContext {
        name: env.name,
        path,
        cfg: env.config(&empty)?,
        configuration: env.configuration,
        configuration_path: &env.configuration_path,
        state,
    };
    match registry::parse(&mut cx) {
        Some(spec) => spec,
        None => {
            Ok(CodecSpec::new(env.name, None, Arc::new(ExtensionConfig { configuration: env.configuration.cloned() })))
        }
    }
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
        let s = chain[0].config::<ShardingConfig>().expect("sharding");
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
        // A chain of more than 16 codecs (a decompression bomb of stacked
        // compressors) is refused; 16 are accepted.
        let chain = |n: usize| {
            let mut codecs = vec![json!("bytes")];
            codecs.extend(std::iter::repeat_n(json!({"name":"gzip","configuration":{"level":1}}), n - 1));
            Value::Array(codecs)
        };
        let e = err(chain(17), &DataType::UInt8, &[4]);
        assert_eq!((e.path.as_str(), e.message.as_str()), ("codecs", "17 codecs in one chain; at most 16"));
        assert!(parse_codec_chain(&chain(16), "codecs", &DataType::UInt8, &[4]).is_ok());
    }

    /// However the 16 stages of a chain are made, what its outermost
    /// decoder may be asked to produce (and a chunk be stored as) stays
    /// within twice the chunk plus 1 MiB, while a chain of one or two
    /// compressors keeps each one's worst case.
    #[test]
    fn a_full_chain_caps_its_decoders_near_the_chunk() {
        let gzips = |n: usize| {
            let mut codecs = vec![json!("bytes")];
            codecs.extend(std::iter::repeat_n(json!({"name":"gzip","configuration":{"level":1}}), n));
            Value::Array(codecs)
        };
        let bound = |shape: u64, n: usize| {
            let specs = parse_codec_chain(&gzips(n), "codecs", &DataType::UInt8, &[shape]).unwrap();
            let repr = ChunkRepr { shape: vec![shape], data_type: DataType::UInt8, fill_value: vec![0] };
            crate::zarr::codec::build::chain_from_v3(&specs, &repr).unwrap().max_stored_size(&repr)
        };
        for shape in [4u64, 64 << 20] {
            assert_eq!(bound(shape, 15), 2 * shape + (1 << 20), "{shape} bytes behind 15 gzips");
            let one = shape + shape / 8 + 64 * 1024;
            assert_eq!(bound(shape, 1), one, "{shape} bytes behind one gzip");
            assert_eq!(bound(shape, 2), one + one / 8 + 64 * 1024, "{shape} bytes behind two gzips");
        }
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
