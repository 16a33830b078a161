//! The codecs zarrd knows, by name, and the rule every chain obeys.
//!
//! Spec: Zarr v3 core, "Codecs" (a chain is zero or more array -> array
//! codecs, exactly one array -> bytes codec, zero or more bytes -> bytes
//! codecs) and "Extension naming" (`numcodecs.<id>`).
//!
//! Each codec's file owns its configuration type (parse and validate, the
//! JSON it writes back, the defaults it is built with, its numcodecs alias):
//! for example [`super::bytes_to_bytes::zstd`] holds [`ZstdConfig`] beside
//! the [`Zstd`](super::bytes_to_bytes::zstd::Zstd) codec. This module only maps
//! names to those parsers (`CODECS` for v3 names, [`super::numcodecs`] for
//! numcodecs ids, used by v2 `compressor`/`filters` and by v3
//! `numcodecs.<id>` alike) and states the order rule once
//! ([`order_problem`]), which both the metadata parser (errors with a
//! document path) and the chain builder (v2 filters) apply.
//!
//! A parsed codec is a [`CodecSpec`]: its name, its kind and its
//! configuration as a [`CodecConfig`] (the codec file's configuration type,
//! which writes itself back to JSON and builds the codec). Nothing outside
//! the codec's file matches on which codec it is; callers that need one
//! codec's configuration (the TensorStore spec, the sharding planner) ask
//! for it by type ([`CodecSpec::config`]).
//!
//! Adding a codec: write its file (configuration type implementing
//! [`CodecConfig`], the codec, its tests) and add one row to `CODECS` (or,
//! for a numcodecs id, to [`super::numcodecs`]'s table).

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::array_to_array::transpose::TransposeConfig;
use super::array_to_bytes::bytes::BytesConfig;
use super::array_to_bytes::sharding::ShardingConfig;
use super::array_to_bytes::vlen::VlenKind;
use super::bytes_to_bytes::blosc::BloscConfig;
use super::bytes_to_bytes::crc32c::Crc32cConfig;
use super::bytes_to_bytes::gzip::GzipConfig;
use super::bytes_to_bytes::zstd::ZstdConfig;
use super::numcodecs::{self, NumcodecsConfig};
use super::{ArrayToArrayCodec, ArrayToBytesCodec, BytesToBytesCodec, CodecResult};
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::codec::CodecSpec;
use crate::zarr::metadata::error::Result;
use crate::zarr::metadata::json::Obj;

/// A codec built for the representation entering it, by kind.
#[derive(Debug)]
pub enum BuiltCodec {
    /// An array -> array codec.
    ArrayToArray(Box<dyn ArrayToArrayCodec>),
    /// An array -> bytes codec.
    ArrayToBytes(Box<dyn ArrayToBytesCodec>),
    /// A bytes -> bytes codec.
    BytesToBytes(Box<dyn BytesToBytesCodec>),
}

/// A codec's parsed and validated configuration, as a v3 `codecs` entry
/// holds it ([`CodecSpec`]). Implemented by each codec's configuration type
/// in the codec's own file.
pub trait CodecConfig: Debug + Send + Sync + Any {
    /// The `configuration` member written back (`None`: the entry has none).
    fn to_json(&self) -> Option<Value>;

    /// Whether the encoded size depends only on the decoded size (required
    /// of sharding `index_codecs`).
    fn is_fixed_size(&self) -> bool {
        false
    }

    /// Builds the codec. `entering` is the representation entering it; for
    /// a bytes -> bytes codec, the one entering the chain's array -> bytes
    /// codec (blosc takes its default `typesize` from its element size).
    ///
    /// # Errors
    /// The codec cannot encode `entering`, or zarrd does not implement it;
    /// the error names the codec.
    fn build(&self, entering: &ChunkRepr) -> CodecResult<BuiltCodec>;
}

/// The configuration `parse` produced, as a registry parser answers it.
fn config<T: CodecConfig>(parsed: Result<T>) -> Result<Arc<dyn CodecConfig>> {
    parsed.map(|c| Arc::new(c) as Arc<dyn CodecConfig>)
}

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
    /// `"array -> array"`, ... for messages.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::ArrayToArray => "array -> array",
            Self::ArrayToBytes => "array -> bytes",
            Self::BytesToBytes => "bytes -> bytes",
        }
    }
}

/// How a codec breaks the chain order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderProblem {
    /// An array -> array codec after the array -> bytes codec.
    ArrayToArrayAfterBytes,
    /// A second array -> bytes codec.
    SecondArrayToBytes,
    /// A bytes -> bytes codec before the array -> bytes codec.
    BytesToBytesBeforeArray,
}

impl OrderProblem {
    /// What is wrong, completing "`<kind>` codec `"<name>"` ...".
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::ArrayToArrayAfterBytes => "must come before the array -> bytes codec",
            Self::SecondArrayToBytes => "is a second array -> bytes codec; a chain has exactly one",
            Self::BytesToBytesBeforeArray => "must come after the array -> bytes codec",
        }
    }
}

/// The chain rule: may a codec of `kind` come next, when an array -> bytes
/// codec has (`seen_array_to_bytes`) or has not been seen?
#[must_use]
pub fn order_problem(kind: CodecKind, seen_array_to_bytes: bool) -> Option<OrderProblem> {
    match (kind, seen_array_to_bytes) {
        (CodecKind::ArrayToArray, true) => Some(OrderProblem::ArrayToArrayAfterBytes),
        (CodecKind::ArrayToBytes, true) => Some(OrderProblem::SecondArrayToBytes),
        (CodecKind::BytesToBytes, false) => Some(OrderProblem::BytesToBytesBeforeArray),
        _ => None,
    }
}

/// The representation a codec receives while a chain is parsed.
pub(crate) struct ChainState {
    /// `None` once an opaque array -> array codec (e.g. `numcodecs.astype`)
    /// may have changed the data type; type-dependent checks stop there.
    pub(crate) data_type: Option<DataType>,
    /// The chunk shape entering the codec.
    pub(crate) shape: Vec<u64>,
}

/// One codec entry being parsed: its configuration and where it sits.
pub(crate) struct ParseContext<'a, 's> {
    /// The codec's name as written.
    pub(crate) name: &'a str,
    /// The entry's path (`codecs[1]`).
    pub(crate) path: &'s str,
    /// The configuration (empty when absent).
    pub(crate) cfg: Obj<'a>,
    /// The configuration as written, if any.
    pub(crate) configuration: Option<&'a Map<String, Value>>,
    /// The configuration's path (`codecs[1].configuration`).
    pub(crate) configuration_path: &'s str,
    /// The representation entering the codec; a codec that changes it
    /// (`transpose`) updates it for the next.
    pub(crate) state: &'s mut ChainState,
}

/// Parses one configuration into its [`CodecConfig`].
type ParseFn = fn(&mut ParseContext<'_, '_>) -> Result<Arc<dyn CodecConfig>>;

/// A codec known by a v3 name.
pub(crate) struct Registered {
    /// The v3 `name`.
    pub(crate) name: &'static str,
    /// Its kind.
    pub(crate) kind: CodecKind,
    /// Its configuration parser.
    pub(crate) parse: ParseFn,
}

/// The v3 codecs, in the order messages list them: one row per codec.
pub(crate) const CODECS: &[Registered] = &[
    Registered { name: "bytes", kind: CodecKind::ArrayToBytes, parse: |cx| config(BytesConfig::parse(cx)) },
    Registered { name: "transpose", kind: CodecKind::ArrayToArray, parse: |cx| config(TransposeConfig::parse(cx)) },
    Registered { name: "gzip", kind: CodecKind::BytesToBytes, parse: |cx| config(GzipConfig::parse(&mut cx.cfg)) },
    Registered { name: "zstd", kind: CodecKind::BytesToBytes, parse: |cx| config(ZstdConfig::parse(&mut cx.cfg)) },
    Registered { name: "blosc", kind: CodecKind::BytesToBytes, parse: |cx| config(BloscConfig::parse(&mut cx.cfg)) },
    Registered { name: "crc32c", kind: CodecKind::BytesToBytes, parse: |cx| config(Crc32cConfig::parse(&mut cx.cfg)) },
    Registered {
        name: "sharding_indexed",
        kind: CodecKind::ArrayToBytes,
        parse: |cx| config(ShardingConfig::parse(cx)),
    },
    Registered { name: "vlen-utf8", kind: CodecKind::ArrayToBytes, parse: |cx| config(VlenKind::parse(cx)) },
    Registered { name: "vlen-bytes", kind: CodecKind::ArrayToBytes, parse: |cx| config(VlenKind::parse(cx)) },
];

/// A `numcodecs.<id>` codec: its numcodecs configuration, checked (once,
/// here) and kept as written.
fn parse_numcodecs(cx: &mut ParseContext<'_, '_>, id: &str, kind: CodecKind) -> Result<CodecSpec> {
    let configuration = cx.configuration.cloned().unwrap_or_default();
    let parsed = NumcodecsConfig::parse(id, configuration, cx.configuration_path)?;
    if kind == CodecKind::ArrayToArray {
        cx.state.data_type = None;
    }
    Ok(CodecSpec::new(cx.name, Some(kind), Arc::new(parsed)))
}

/// The v3 codec registered under `name`.
pub(crate) fn lookup(name: &str) -> Option<&'static Registered> {
    CODECS.iter().find(|c| c.name == name)
}

/// The kind of a v3 codec name (`numcodecs.<id>` included); `None` when
/// zarrd does not know it.
#[must_use]
pub fn kind_of(name: &str) -> Option<CodecKind> {
    match lookup(name) {
        Some(c) => Some(c.kind),
        None => numcodecs::v3_kind(name.strip_prefix("numcodecs.")?),
    }
}

/// Parses a known codec's configuration; `None` for names zarrd does not know.
pub(crate) fn parse(cx: &mut ParseContext<'_, '_>) -> Option<Result<CodecSpec>> {
    if let Some(c) = lookup(cx.name) {
        return Some((c.parse)(cx).map(|config| CodecSpec::new(c.name, Some(c.kind), config)));
    }
    let id = cx.name.strip_prefix("numcodecs.")?;
    let kind = numcodecs::v3_kind(id)?;
    let id = id.to_owned();
    Some(parse_numcodecs(cx, &id, kind))
}

/// The v3 codec names, for messages.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    CODECS.iter().map(|c| c.name)
}

/// Parses `codecs` for chunks of `data_type` and `shape` through the real
/// chain parser, at path `codecs` (for the codec files' tests).
#[cfg(test)]
pub(crate) fn parse_for_test(codecs: Value, data_type: &DataType, shape: &[u64]) -> Result<Vec<CodecSpec>> {
    crate::zarr::metadata::codec::parse_codec_chain(&codecs, "codecs", data_type, shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_rule() {
        use CodecKind::{ArrayToArray as A2A, ArrayToBytes as A2B, BytesToBytes as B2B};
        assert_eq!(order_problem(A2A, false), None);
        assert_eq!(order_problem(A2B, false), None);
        assert_eq!(order_problem(B2B, true), None);
        assert_eq!(order_problem(A2A, true), Some(OrderProblem::ArrayToArrayAfterBytes));
        assert_eq!(order_problem(A2B, true), Some(OrderProblem::SecondArrayToBytes));
        assert_eq!(order_problem(B2B, false), Some(OrderProblem::BytesToBytesBeforeArray));
    }

    #[test]
    fn names_and_kinds() {
        assert_eq!(kind_of("sharding_indexed"), Some(CodecKind::ArrayToBytes));
        assert_eq!(kind_of("numcodecs.delta"), Some(CodecKind::ArrayToArray));
        assert_eq!(kind_of("numcodecs.zlib"), Some(CodecKind::BytesToBytes));
        assert_eq!(kind_of("numcodecs.pickle"), None);
        assert_eq!(kind_of("lzw"), None);
        let names: Vec<_> = names().collect();
        assert_eq!(
            names,
            ["bytes", "transpose", "gzip", "zstd", "blosc", "crc32c", "sharding_indexed", "vlen-utf8", "vlen-bytes"]
        );
    }
}
