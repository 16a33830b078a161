//! numcodecs codec ids: Zarr v2 `compressor` / `filters` entries and the
//! `numcodecs.<id>` codecs zarr-python 3 writes into v3 `zarr.json`.
//!
//! Spec: Zarr v2, "compressor" and "filters" (objects with an `"id"`); the
//! v3 names follow zarr-python 3.1.6's codec registry (`zarr.codecs.numcodecs`)
//! and the `numcodecs.<id>` registered-name convention (Zarr v3 core,
//! "Extension naming").
//!
//! The id lists are the documented, closed set zarrd accepts; anything else is
//! rejected as an unknown codec. `pickle` is deliberately absent: zarrd never
//! unpickles. `NUMCODECS` is the registry of the ids v3 accepts: each
//! row's kind, whether its size is fixed, the configuration check
//! (parameters whose range is fixed, such as compression levels; other
//! members are kept as written because numcodecs adds parameters between
//! releases) and the constructor, all of which live in the codec's own file
//! (`bytes_to_bytes::zstd`, ...) beside its v3 configuration.

use serde_json::{Map, Value};

use super::array_to_array::{CastCodec, DeltaCodec, FixedScaleOffsetCodec};
use super::bytes_to_bytes::{self, blosc, bz2, crc32c, gzip, lz4, shuffle, zlib, zstd, Config};
use super::registry::{BuiltCodec, CodecConfig, CodecKind};
use super::{ArrayToArrayCodec, BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::metadata::error::{join, Result};
use crate::zarr::metadata::json::{int_in, string};

/// Codec ids accepted in Zarr v2 `compressor` and `filters` (numcodecs 0.16
/// registry without `pickle`, plus `pcodec` and `zfpy`).
pub const V2_CODEC_IDS: &[&str] = &[
    "adler32",
    "astype",
    "base64",
    "bitround",
    "blosc",
    "bz2",
    "categorize",
    "crc32",
    "crc32c",
    "delta",
    "fixedscaleoffset",
    "fletcher32",
    "gzip",
    "jenkins_lookup3",
    "json2",
    "lz4",
    "lzma",
    "msgpack2",
    "packbits",
    "pcodec",
    "quantize",
    "shuffle",
    "vlen-array",
    "vlen-bytes",
    "vlen-utf8",
    "zfpy",
    "zlib",
    "zstd",
];

/// v2 filter ids that can encode object (`|O`) arrays.
pub const V2_OBJECT_CODEC_IDS: &[&str] = &["vlen-utf8", "vlen-bytes", "vlen-array", "json2", "msgpack2"];

/// Checks a numcodecs configuration; `path` is the object holding the
/// parameters (`compressor` in v2, `codecs[i].configuration` in v3). This is
/// the only check of a configuration: it runs when the metadata is parsed,
/// and the constructors read what passed it.
pub(crate) type ValidateFn = fn(&Map<String, Value>, &str) -> Result<()>;

/// Builds an array -> array filter from its configuration.
pub(crate) type ArrayToArrayFn = fn(&Map<String, Value>) -> CodecResult<Box<dyn ArrayToArrayCodec>>;

/// Builds a bytes -> bytes codec from its configuration and the element
/// size entering the chain's array -> bytes codec (blosc's default
/// `typesize`).
pub(crate) type BytesToBytesFn = fn(&Config<'_>, usize) -> CodecResult<Box<dyn BytesToBytesCodec>>;

/// What zarrd builds for a numcodecs id.
#[derive(Clone, Copy)]
pub(crate) enum Build {
    /// Accepted in metadata, not implemented (reads fail naming the codec).
    Unsupported,
    /// An array -> array filter.
    ArrayToArray(ArrayToArrayFn),
    /// A bytes -> bytes codec.
    BytesToBytes(BytesToBytesFn),
}

/// One numcodecs id accepted as a v3 `numcodecs.<id>` codec (and in v2).
pub(crate) struct Numcodec {
    /// The numcodecs id.
    pub(crate) id: &'static str,
    /// Its kind, as zarr-python 3.1.6 registers it.
    pub(crate) kind: CodecKind,
    /// Checksums and byte shuffles: output size a function of input size
    /// (allowed in sharding `index_codecs`).
    pub(crate) fixed_size: bool,
    /// The configuration check, if the codec has fixed-range parameters.
    pub(crate) validate: Option<ValidateFn>,
    /// The constructor.
    pub(crate) build: Build,
}

const fn row(
    id: &'static str,
    kind: CodecKind,
    fixed_size: bool,
    validate: Option<ValidateFn>,
    build: Build,
) -> Numcodec {
    Numcodec { id, kind, fixed_size, validate, build }
}

use CodecKind::{ArrayToArray as A2A, ArrayToBytes as A2B, BytesToBytes as B2B};

/// The numcodecs registry, by id (alphabetical, as messages list them).
pub(crate) const NUMCODECS: &[Numcodec] = &[
    row("adler32", B2B, true, Some(crc32c::validate_numcodecs), Build::BytesToBytes(build_adler32)),
    row("astype", A2A, false, Some(dtype_members), Build::ArrayToArray(build_astype)),
    row("bitround", A2A, false, Some(bitround), Build::ArrayToArray(build_bitround)),
    row("blosc", B2B, false, Some(blosc::validate_numcodecs), Build::BytesToBytes(build_blosc)),
    row("bz2", B2B, false, Some(bz2::validate_numcodecs), Build::BytesToBytes(build_bz2)),
    row("crc32", B2B, true, Some(crc32c::validate_numcodecs), Build::BytesToBytes(build_crc32)),
    row("crc32c", B2B, true, Some(crc32c::validate_numcodecs), Build::BytesToBytes(build_crc32c)),
    row("delta", A2A, false, Some(dtype_members), Build::ArrayToArray(build_delta)),
    row("fixedscaleoffset", A2A, false, Some(dtype_members), Build::ArrayToArray(build_fixedscaleoffset)),
    row("fletcher32", B2B, true, None, Build::Unsupported),
    row("gzip", B2B, false, Some(gzip::validate_numcodecs), Build::BytesToBytes(build_gzip)),
    row("jenkins_lookup3", B2B, true, None, Build::Unsupported),
    row("lz4", B2B, false, Some(lz4::validate_numcodecs), Build::BytesToBytes(build_lz4)),
    row("lzma", B2B, false, None, Build::Unsupported),
    row("packbits", A2A, false, None, Build::Unsupported),
    row("pcodec", A2B, false, None, Build::Unsupported),
    row("quantize", A2A, false, Some(dtype_members), Build::ArrayToArray(build_quantize)),
    row("shuffle", B2B, true, Some(shuffle::validate_numcodecs), Build::BytesToBytes(build_shuffle)),
    row("zfpy", A2B, false, None, Build::Unsupported),
    row("zlib", B2B, false, Some(zlib::validate_numcodecs), Build::BytesToBytes(build_zlib)),
    row("zstd", B2B, false, Some(zstd::validate_numcodecs), Build::BytesToBytes(build_zstd)),
];

fn build_blosc(cfg: &Config<'_>, element_size: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(blosc::Blosc::from_numcodecs(cfg, element_size)?))
}

fn build_bz2(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(bz2::Bz2::from_numcodecs(cfg)?))
}

fn build_crc32c(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(crc32c::Crc32c::from_numcodecs(cfg)))
}

fn build_crc32(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(crc32c::Crc32c::from_numcodecs_sum(crc32c::Sum::Crc32, cfg)))
}

fn build_adler32(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(crc32c::Crc32c::from_numcodecs_sum(crc32c::Sum::Adler32, cfg)))
}

fn build_gzip(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(gzip::Gzip::from_numcodecs(cfg)?))
}

fn build_lz4(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(lz4::Lz4::from_numcodecs(cfg)))
}

fn build_shuffle(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(shuffle::Shuffle::from_numcodecs(cfg)))
}

fn build_zlib(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(zlib::Zlib::from_numcodecs(cfg)?))
}

fn build_zstd(cfg: &Config<'_>, _: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    Ok(Box::new(zstd::Zstd::from_numcodecs(cfg)?))
}

fn build_delta(cfg: &Map<String, Value>) -> CodecResult<Box<dyn ArrayToArrayCodec>> {
    Ok(Box::new(DeltaCodec::from_config(cfg)?))
}

fn build_astype(cfg: &Map<String, Value>) -> CodecResult<Box<dyn ArrayToArrayCodec>> {
    Ok(Box::new(CastCodec::astype(cfg)?))
}

fn build_quantize(cfg: &Map<String, Value>) -> CodecResult<Box<dyn ArrayToArrayCodec>> {
    Ok(Box::new(CastCodec::quantize(cfg)?))
}

fn build_bitround(cfg: &Map<String, Value>) -> CodecResult<Box<dyn ArrayToArrayCodec>> {
    Ok(Box::new(CastCodec::bitround(cfg)?))
}

fn build_fixedscaleoffset(cfg: &Map<String, Value>) -> CodecResult<Box<dyn ArrayToArrayCodec>> {
    Ok(Box::new(FixedScaleOffsetCodec::from_config(cfg)?))
}

/// A `numcodecs.<id>` codec of a v3 chain: the id and its configuration,
/// checked once when parsed ([`validate_config`]) and kept as written
/// (numcodecs adds parameters between releases).
#[derive(Debug, Clone, PartialEq)]
pub struct NumcodecsConfig {
    /// The numcodecs id (`"zlib"` for `numcodecs.zlib`).
    pub id: String,
    /// Its configuration, as written.
    pub configuration: Map<String, Value>,
}

impl NumcodecsConfig {
    /// Checks the configuration of `id` at `path`.
    pub(crate) fn parse(id: &str, configuration: Map<String, Value>, path: &str) -> Result<Self> {
        validate_config(id, &configuration, path)?;
        Ok(Self { id: id.to_owned(), configuration })
    }
}

impl CodecConfig for NumcodecsConfig {
    fn to_json(&self) -> Option<Value> {
        Some(Value::Object(self.configuration.clone()))
    }

    fn is_fixed_size(&self) -> bool {
        is_fixed_size(&self.id)
    }

    fn build(&self, entering: &ChunkRepr) -> CodecResult<BuiltCodec> {
        let id = self.id.as_str();
        match lookup(id).map(|c| (c.kind, c.build)) {
            Some((_, Build::ArrayToArray(build))) => build(&self.configuration).map(BuiltCodec::ArrayToArray),
            Some((A2A, Build::Unsupported)) => Err(CodecError::new(
                id,
                "unsupported filter (zarrd implements the array filters delta and fixedscaleoffset)",
            )),
            Some((B2B, _)) => {
                let size = entering.data_type.size().unwrap_or(1);
                bytes_to_bytes::from_checked_numcodecs(id, &self.configuration, size).map(BuiltCodec::BytesToBytes)
            }
            _ => Err(CodecError::new(format!("numcodecs.{id}"), "unsupported codec")),
        }
    }
}

/// A member, treating JSON `null` as absent (numcodecs writes `null` for
/// "default").
pub(crate) fn member<'a>(config: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    config.get(field).filter(|v| !v.is_null())
}

/// An optional integer member in `lo..=hi`.
pub(crate) fn check_int(config: &Map<String, Value>, path: &str, field: &str, lo: i64, hi: i64) -> Result<()> {
    if let Some(v) = member(config, field) {
        int_in(v, &join(path, field), lo, hi)?;
    }
    Ok(())
}

/// The numeric filters' dtype members are numpy type strings.
fn dtype_members(config: &Map<String, Value>, path: &str) -> Result<()> {
    for field in ["dtype", "astype", "decode_dtype", "encode_dtype"] {
        if let Some(v) = member(config, field) {
            string(v, &join(path, field))?;
        }
    }
    Ok(())
}

fn bitround(config: &Map<String, Value>, path: &str) -> Result<()> {
    check_int(config, path, "keepbits", 0, 64)
}

/// The registry row of `id`.
pub(crate) fn lookup(id: &str) -> Option<&'static Numcodec> {
    NUMCODECS.iter().find(|c| c.id == id)
}

/// Kind of `numcodecs.<id>` in v3, if the id is known.
#[must_use]
pub fn v3_kind(id: &str) -> Option<CodecKind> {
    lookup(id).map(|c| c.kind)
}

/// The ids v3 accepts as `numcodecs.<id>`.
pub fn v3_ids() -> impl Iterator<Item = &'static str> {
    NUMCODECS.iter().map(|c| c.id)
}

/// Whether `numcodecs.<id>` has a fixed encoded size.
#[must_use]
pub fn is_fixed_size(id: &str) -> bool {
    lookup(id).is_some_and(|c| c.fixed_size)
}

/// Checks the fixed-range parameters of a numcodecs configuration. `path` is
/// the object holding the parameters (`compressor` in v2,
/// `codecs[i].configuration` in v3).
///
/// # Errors
/// A parameter of the wrong type or out of range, at its path.
pub(crate) fn validate_config(id: &str, config: &Map<String, Value>, path: &str) -> Result<()> {
    match lookup(id).and_then(|c| c.validate) {
        Some(validate) => validate(config, path),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(id: &str, v: Value) -> Result<()> {
        validate_config(id, v.as_object().unwrap(), "compressor")
    }

    #[test]
    fn levels() {
        assert!(check("zlib", json!({"level": 1})).is_ok());
        assert!(check("zlib", json!({"level": -1})).is_ok());
        assert_eq!(check("gzip", json!({"level": 12})).unwrap_err().path, "compressor.level");
        assert!(check("bz2", json!({"level": 0})).is_err());
        assert!(check("zstd", json!({"level": 23})).is_err());
        assert!(check("zstd", json!({"level": -5, "checksum": false})).is_ok());
        assert!(check("lz4", json!({"acceleration": 1})).is_ok());
        assert!(check("bitround", json!({"keepbits": 65})).is_err());
        assert_eq!(check("delta", json!({"dtype": 4})).unwrap_err().path, "compressor.dtype");
    }

    #[test]
    fn blosc() {
        assert!(check("blosc", json!({"cname":"lz4","clevel":5,"shuffle":1,"blocksize":0})).is_ok());
        assert!(check("blosc", json!({"cname":"lz4","clevel":5,"shuffle":-1,"blocksize":0})).is_ok());
        assert_eq!(check("blosc", json!({"cname":"lzw"})).unwrap_err().path, "compressor.cname");
        assert_eq!(check("blosc", json!({"shuffle":3})).unwrap_err().path, "compressor.shuffle");
    }

    #[test]
    fn lists_are_consistent() {
        let ids: Vec<_> = v3_ids().collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted, "alphabetical, as messages list them");
        for id in ids {
            assert!(V2_CODEC_IDS.contains(&id), "{id}");
        }
        assert_eq!(v3_kind("delta"), Some(CodecKind::ArrayToArray));
        assert_eq!(v3_kind("pickle"), None);
        assert!(is_fixed_size("crc32") && !is_fixed_size("zstd"));
    }
}
