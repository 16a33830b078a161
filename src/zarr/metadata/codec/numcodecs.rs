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
//! unpickles. Configuration checks cover the parameters whose range is fixed
//! (compression levels, blosc settings); other members are kept as written
//! because numcodecs adds parameters between releases.

use serde_json::{Map, Value};

use super::super::error::{join, Result};
use super::super::json::{boolean, enum_str, int_in, string, uint_min};
use super::CodecKind;

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

/// `numcodecs.<id>` codecs accepted in v3 `codecs`, with their kind (as
/// registered by zarr-python 3.1.6).
pub const V3_NUMCODECS: &[(&str, CodecKind)] = &[
    ("adler32", CodecKind::BytesToBytes),
    ("astype", CodecKind::ArrayToArray),
    ("bitround", CodecKind::ArrayToArray),
    ("blosc", CodecKind::BytesToBytes),
    ("bz2", CodecKind::BytesToBytes),
    ("crc32", CodecKind::BytesToBytes),
    ("crc32c", CodecKind::BytesToBytes),
    ("delta", CodecKind::ArrayToArray),
    ("fixedscaleoffset", CodecKind::ArrayToArray),
    ("fletcher32", CodecKind::BytesToBytes),
    ("gzip", CodecKind::BytesToBytes),
    ("jenkins_lookup3", CodecKind::BytesToBytes),
    ("lz4", CodecKind::BytesToBytes),
    ("lzma", CodecKind::BytesToBytes),
    ("packbits", CodecKind::ArrayToArray),
    ("pcodec", CodecKind::ArrayToBytes),
    ("quantize", CodecKind::ArrayToArray),
    ("shuffle", CodecKind::BytesToBytes),
    ("zfpy", CodecKind::ArrayToBytes),
    ("zlib", CodecKind::BytesToBytes),
    ("zstd", CodecKind::BytesToBytes),
];

/// Checksums and byte shuffles: the numcodecs codecs whose output size is a
/// function of the input size (allowed in sharding `index_codecs`).
pub(crate) const FIXED_SIZE_IDS: &[&str] = &["adler32", "crc32", "crc32c", "fletcher32", "jenkins_lookup3", "shuffle"];

/// Blosc compressors known to numcodecs / c-blosc.
pub const BLOSC_CNAMES: &[&str] = &["blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"];

/// Kind of `numcodecs.<id>` in v3, if the id is known.
#[must_use]
pub fn v3_kind(id: &str) -> Option<CodecKind> {
    V3_NUMCODECS.iter().find(|(known, _)| *known == id).map(|(_, kind)| *kind)
}

/// Checks the fixed-range parameters of a numcodecs configuration. `path` is
/// the object holding the parameters (`compressor` in v2,
/// `codecs[i].configuration` in v3).
pub(crate) fn validate_config(id: &str, config: &Map<String, Value>, path: &str) -> Result<()> {
    let at = |field: &str| join(path, field);
    let get = |field: &str| config.get(field).filter(|v| !v.is_null());
    match id {
        // zlib accepts -1 (Z_DEFAULT_COMPRESSION).
        "zlib" => {
            if let Some(v) = get("level") {
                int_in(v, &at("level"), -1, 9)?;
            }
        }
        "gzip" => {
            if let Some(v) = get("level") {
                int_in(v, &at("level"), 0, 9)?;
            }
        }
        "bz2" => {
            if let Some(v) = get("level") {
                int_in(v, &at("level"), 1, 9)?;
            }
        }
        "zstd" => {
            if let Some(v) = get("level") {
                int_in(v, &at("level"), -131_072, 22)?;
            }
            if let Some(v) = get("checksum") {
                boolean(v, &at("checksum"))?;
            }
        }
        "blosc" => {
            if let Some(v) = get("cname") {
                enum_str(v, &at("cname"), BLOSC_CNAMES)?;
            }
            if let Some(v) = get("clevel") {
                int_in(v, &at("clevel"), 0, 9)?;
            }
            // -1 is numcodecs' AUTOSHUFFLE (TensorStore writes it too).
            if let Some(v) = get("shuffle") {
                int_in(v, &at("shuffle"), -1, 2)?;
            }
            if let Some(v) = get("blocksize") {
                uint_min(v, &at("blocksize"), 0)?;
            }
        }
        "lz4" => {
            if let Some(v) = get("acceleration") {
                int_in(v, &at("acceleration"), i64::from(i32::MIN), i64::from(i32::MAX))?;
            }
        }
        "delta" | "astype" | "fixedscaleoffset" | "quantize" => {
            for field in ["dtype", "astype", "decode_dtype", "encode_dtype"] {
                if let Some(v) = get(field) {
                    string(v, &at(field))?;
                }
            }
        }
        "bitround" => {
            if let Some(v) = get("keepbits") {
                int_in(v, &at("keepbits"), 0, 64)?;
            }
        }
        _ => {}
    }
    Ok(())
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
        for (id, _) in V3_NUMCODECS {
            assert!(V2_CODEC_IDS.contains(id), "{id}");
        }
        assert_eq!(v3_kind("delta"), Some(CodecKind::ArrayToArray));
        assert_eq!(v3_kind("pickle"), None);
    }
}
