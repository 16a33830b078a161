//! bytes → bytes codecs: compressors and checksums (Zarr v3 core, "Codecs";
//! the codec specs in `codecs/{gzip,blosc,crc32c}/index.rst`; `zstd` as
//! zarr-python and TensorStore write it; the numcodecs compressors of Zarr v2
//! `compressor` entries and v3 `numcodecs.<id>` codecs).
//!
//! Each codec's file holds its v3 configuration type (where the codec has a
//! v3 name), the codec, its numcodecs alias (constructor and configuration
//! check) and its tests. A codec is built once per array from its metadata
//! ([`from_v3`], [`from_v2`], [`from_numcodecs`]) and is then immutable and
//! thread-safe.
//!
//! Every decoder caps its output at the `max_decoded` it is given while it
//! decodes, and checks a size the input claims against that cap before
//! allocating it, so hostile or corrupt bytes cost at most one chunk of
//! memory and come back as a [`CodecError`] naming the codec.

pub mod blosc;
pub mod bz2;
pub mod crc32c;
pub mod gzip;
pub mod lz4;
pub mod shuffle;
pub mod zlib;
pub mod zstd;

#[cfg(test)]
mod range_tests;

use std::io::Read;

use serde_json::{Map, Value};

use super::numcodecs::{self, Build, NumcodecsConfig};
use super::registry::{BuiltCodec, CodecKind};
use super::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::codec::CodecSpec;
use crate::zarr::metadata::v2::CodecV2;

/// Builds a bytes→bytes codec from its name and configuration, for chunks
/// of 1-byte elements; see [`build_bytes_to_bytes_sized`].
///
/// # Errors
/// As [`build_bytes_to_bytes_sized`].
pub fn build_bytes_to_bytes(name: &str, configuration: &Value) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    build_bytes_to_bytes_sized(name, configuration, 1)
}

/// Builds a bytes→bytes codec as the chain builder meets it: v3 core codecs
/// by their v3 name (`gzip`, `zstd`, `blosc`, `crc32c`) with the v3
/// configuration; numcodecs codecs as `numcodecs.<id>` with the numcodecs
/// configuration (v3 `numcodecs.*` entries, and every v2 compressor and
/// bytes→bytes filter). `element_size` is the size of the elements entering
/// the chain's array→bytes codec (blosc's default `typesize`).
///
/// # Errors
/// An unsupported codec or an invalid configuration; the error names the codec.
pub fn build_bytes_to_bytes_sized(
    name: &str,
    configuration: &Value,
    element_size: usize,
) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    if let Some(id) = name.strip_prefix("numcodecs.") {
        let empty = Map::new();
        let map = match configuration {
            Value::Object(m) => m,
            Value::Null => &empty,
            other => return Err(CodecError::new(name, format!("configuration must be an object, got {other}"))),
        };
        return from_numcodecs(id, map, element_size);
    }
    // A v3 core codec: validate its configuration with the metadata parser
    // (behind a `bytes` codec, as a chain must have one), then build it.
    let chain = serde_json::json!([{"name": "bytes"}, {"name": name, "configuration": configuration}]);
    let specs = crate::zarr::metadata::codec::parse_codec_chain(
        &chain,
        "codecs",
        &crate::zarr::data_type::DataType::UInt8,
        &[1],
    )
    .map_err(|e| CodecError::new(name, e.to_string()))?;
    match specs.get(1) {
        Some(spec) => from_v3(spec, element_size),
        None => Err(CodecError::new(name, "not a bytes -> bytes codec")),
    }
}

/// Builds the bytes → bytes codec of a v3 `codecs` entry, from the
/// configuration type in the codec's file.
///
/// `element_size` is the size in bytes of the data type entering the chain
/// (1 for variable-length types); blosc uses it for `typesize` and the
/// shuffle mode when the metadata leaves them out, as zarr-python does.
///
/// # Errors
///
/// The entry is not a bytes → bytes codec, names a numcodecs codec zarrd does
/// not implement, or has an out-of-range parameter.
pub fn from_v3(spec: &CodecSpec, element_size: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    if let Some(c) = spec.config::<NumcodecsConfig>() {
        return from_numcodecs(&c.id, &c.configuration, element_size);
    }
    if !spec.is_extension() && spec.kind() != Some(CodecKind::BytesToBytes) {
        return Err(CodecError::new(spec.name(), "is not a bytes -> bytes codec"));
    }
    // Bytes of `element_size`-byte elements enter the chain's bytes -> bytes codecs.
    let size = element_size.max(1);
    let entering = ChunkRepr { shape: vec![1], data_type: DataType::RawBits(size), fill_value: vec![0; size] };
    match spec.build(&entering)? {
        BuiltCodec::BytesToBytes(codec) => Ok(codec),
        _ => Err(CodecError::new(spec.name(), "is not a bytes -> bytes codec")),
    }
}

/// Builds the codec of a Zarr v2 `compressor` (or a bytes → bytes `filters`
/// entry). `element_size` as in [`from_v3`]: numcodecs' blosc takes its
/// `typesize` from the array's item size.
///
/// # Errors
///
/// As [`from_numcodecs`].
pub fn from_v2(codec: &CodecV2, element_size: usize) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    from_numcodecs(&codec.id, &codec.configuration, element_size)
}

/// Builds a numcodecs codec from its id and configuration (the members other
/// than `id`), with numcodecs 0.16's defaults for absent members: checks the
/// configuration ([`numcodecs::validate_config`]), then builds it through the
/// constructor `numcodecs::NUMCODECS` lists for the id.
///
/// # Errors
///
/// An id zarrd does not implement as a bytes → bytes codec (named in the
/// error), or a parameter of the wrong type or range.
pub fn from_numcodecs(
    id: &str,
    config: &Map<String, Value>,
    element_size: usize,
) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    numcodecs::validate_config(id, config, "")
        .map_err(|e| CodecError::new(id, format!("configuration member \"{}\": {}", e.path, e.message)))?;
    from_checked_numcodecs(id, config, element_size)
}

/// As [`from_numcodecs`], for a configuration that passed
/// [`numcodecs::validate_config`] when its metadata was parsed (v3
/// `numcodecs.<id>` entries, v2 `compressor` and `filters`): not checked
/// again.
///
/// # Errors
///
/// An id zarrd does not implement as a bytes → bytes codec; a parameter the
/// codec itself refuses.
pub(crate) fn from_checked_numcodecs(
    id: &str,
    config: &Map<String, Value>,
    element_size: usize,
) -> CodecResult<Box<dyn BytesToBytesCodec>> {
    let cfg = Config { map: config };
    match numcodecs::lookup(id).map(|c| c.build) {
        Some(Build::BytesToBytes(build)) => build(&cfg, element_size),
        _ => {
            let implemented: Vec<&str> = numcodecs::NUMCODECS
                .iter()
                .filter(|c| matches!(c.build, Build::BytesToBytes(_)))
                .map(|c| c.id)
                .collect();
            Err(CodecError::new(
                id,
                format!("is not a bytes -> bytes codec zarrd implements (expected one of {})", implemented.join(", ")),
            ))
        }
    }
}

/// A v3 compression level 0..=9 (`gzip` `level`, `blosc` `clevel`).
fn level_0_9(v: &Value, path: &str) -> crate::zarr::metadata::error::Result<u8> {
    Ok(u8::try_from(crate::zarr::metadata::json::int_in(v, path, 0, 9)?).unwrap_or_default())
}

/// A numcodecs configuration that passed [`numcodecs::validate_config`],
/// being read by a constructor: members have the type and range the check
/// allowed, so reading them cannot fail (an absent member, or JSON `null`,
/// which numcodecs writes for "default", reads as the default).
pub(crate) struct Config<'a> {
    map: &'a Map<String, Value>,
}

impl Config<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        numcodecs::member(self.map, key)
    }

    /// An integer member, `default` when absent.
    fn int<T: TryFrom<i64>>(&self, key: &str, default: T) -> T {
        self.get(key).and_then(Value::as_i64).and_then(|n| T::try_from(n).ok()).unwrap_or(default)
    }

    /// A boolean member, `default` when absent.
    fn bool(&self, key: &str, default: bool) -> bool {
        self.get(key).and_then(Value::as_bool).unwrap_or(default)
    }

    /// A string member.
    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

/// The error for output that would exceed the cap.
fn too_large(codec: &str, max_decoded: usize) -> CodecError {
    CodecError::new(codec, format!("decoded data exceeds the expected size of {max_decoded} bytes"))
}

/// Drains a streaming decoder into a buffer of at most `max_decoded` bytes.
///
/// `size_hint` (clamped to the cap) only sets the first allocation; it may
/// come from the input, so it is never trusted beyond `max_decoded`.
fn read_capped(codec: &str, reader: impl Read, size_hint: usize, max_decoded: usize) -> CodecResult<Vec<u8>> {
    let mut out = Vec::with_capacity(size_hint.min(max_decoded));
    // One byte past the cap tells "exactly max" from "more than max" without
    // decoding the rest.
    let limit = u64::try_from(max_decoded).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(limit).read_to_end(&mut out).map_err(|e| CodecError::new(codec, format!("corrupt input: {e}")))?;
    if out.len() > max_decoded {
        return Err(too_large(codec, max_decoded));
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Shared helpers for the codec tests.

    use super::BytesToBytesCodec;

    /// Decodes a hex fixture.
    pub fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex fixture")).collect()
    }

    /// The input of the numcodecs fixtures (`scripts/codec-fixtures.py`):
    /// `(np.arange(1024) % 17).astype("<u4")`.
    pub fn counting_u32() -> Vec<u8> {
        (0u32..1024).flat_map(|i| (i % 17).to_le_bytes()).collect()
    }

    /// `n` bytes of a smooth float32 signal (what chunks of real arrays look
    /// like, unlike random bytes).
    pub fn smooth_f32(n_floats: usize) -> Vec<u8> {
        #[allow(clippy::cast_precision_loss)]
        (0..n_floats).flat_map(|i| ((i as f32) * 0.001).sin().to_le_bytes()).collect()
    }

    /// Checks the hostile-input contract on `encoded` (a valid encoding of
    /// `decoded`): every truncation and a sample of bit flips either fail
    /// with an error or (for flips a format cannot detect) decode to at
    /// most `decoded.len()` bytes; none panics.
    pub fn assert_hostile_inputs_fail_cleanly(codec: &dyn BytesToBytesCodec, decoded: &[u8], encoded: &[u8]) {
        let max = decoded.len();
        for cut in 0..encoded.len() {
            if let Ok(out) = codec.decode(encoded[..cut].to_vec(), max) {
                // Some formats (stored blocks, concatenated frames) can decode
                // a prefix; it must never be the whole input by accident.
                assert_ne!(out, decoded, "{}: truncation at {cut} decoded to the original", codec.name());
            }
        }
        let step = (encoded.len() / 64).max(1);
        for i in (0..encoded.len()).step_by(step) {
            for bit in [0, 3, 7] {
                let mut flipped = encoded.to_vec();
                flipped[i] ^= 1 << bit;
                if let Ok(out) = codec.decode(flipped, max) {
                    assert!(out.len() <= max);
                }
            }
        }
        // Random garbage of various lengths.
        for len in [0, 1, 4, 15, 16, 17, 100, 1000] {
            let junk: Vec<u8> = (0..len).map(|i| u8::try_from((i * 131 + 7) % 251).unwrap_or(0)).collect();
            if let Ok(out) = codec.decode(junk, max) {
                assert!(out.len() <= max);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::data_type::DataType;
    use crate::zarr::metadata::codec::parse_codec_chain;
    use serde_json::json;

    fn v3(codecs: Value, dt: &DataType) -> Vec<Box<dyn BytesToBytesCodec>> {
        let chain = parse_codec_chain(&codecs, "codecs", dt, &[16]).unwrap();
        chain.iter().skip(1).map(|c| from_v3(c, dt.size().unwrap_or(1)).unwrap()).collect()
    }

    #[test]
    fn builds_every_v3_codec_and_round_trips() {
        let data = test_util::smooth_f32(64);
        let codecs = v3(
            json!([{"name":"bytes","configuration":{"endian":"little"}},
                   {"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}},
                   {"name":"zstd","configuration":{"level":3,"checksum":true}},
                   {"name":"gzip","configuration":{"level":1}},
                   {"name":"numcodecs.zlib","configuration":{"level":-1}},
                   {"name":"numcodecs.bz2","configuration":{"level":9}},
                   {"name":"numcodecs.lz4","configuration":{"acceleration":1}},
                   {"name":"numcodecs.crc32c","configuration":{"location":"start"}},
                   "crc32c"]),
            &DataType::Float32,
        );
        assert_eq!(codecs.len(), 8);
        let mut bytes = data.clone();
        let mut sizes = vec![];
        for c in &codecs {
            sizes.push(bytes.len());
            bytes = c.encode(bytes).unwrap();
        }
        for (c, size) in codecs.iter().zip(sizes).rev() {
            bytes = c.decode(bytes, size).unwrap();
        }
        assert_eq!(bytes, data);
    }

    #[test]
    fn builds_v2_compressors_with_numcodecs_defaults() {
        for v in [
            json!({"id":"blosc","cname":"lz4","clevel":5,"shuffle":-1,"blocksize":0}),
            json!({"id":"blosc","cname":"zstd","clevel":5,"shuffle":2,"blocksize":0,"typesize":4}),
            json!({"id":"zstd","level":1}),
            json!({"id":"zstd","level":1,"checksum":null}),
            json!({"id":"gzip","level":1}),
            json!({"id":"zlib","level":1}),
            json!({"id":"bz2","level":1}),
            json!({"id":"lz4","acceleration":1}),
            json!({"id":"crc32c"}),
        ] {
            let codec = CodecV2::from_json(&v, "compressor").unwrap();
            let c = from_v2(&codec, 8).unwrap();
            let data = test_util::smooth_f32(100);
            assert_eq!(c.decode(c.encode(data.clone()).unwrap(), data.len()).unwrap(), data, "{v}");
        }
    }

    #[test]
    fn unknown_and_unsupported_ids_are_named() {
        let e = from_numcodecs("lzma", &Map::new(), 1).unwrap_err();
        assert_eq!(e.codec, "lzma");
        assert!(e.to_string().starts_with("lzma: is not a bytes -> bytes codec"), "{e}");
        let e = from_numcodecs("nope", &Map::new(), 1).unwrap_err();
        assert_eq!(e.codec, "nope");
        let chain = parse_codec_chain(&json!(["bytes"]), "codecs", &DataType::UInt8, &[4]).unwrap();
        assert_eq!(from_v3(&chain[0], 1).unwrap_err().to_string(), "bytes: is not a bytes -> bytes codec");
    }

    #[test]
    fn bad_numcodecs_members_are_errors_not_panics() {
        let cfg = |v: Value| v.as_object().unwrap().clone();
        let e = from_numcodecs("gzip", &cfg(json!({"level": "9"})), 1).unwrap_err();
        assert_eq!(e.to_string(), "gzip: configuration member \"level\": expected an integer 0..=9, got \"9\"");
        assert!(from_numcodecs("zstd", &cfg(json!({"checksum": 1})), 1).is_err());
        assert!(from_numcodecs("blosc", &cfg(json!({"cname": "lzw"})), 1).is_err());
        assert!(from_numcodecs("blosc", &cfg(json!({"shuffle": 7})), 1).is_err());
        assert!(from_numcodecs("crc32c", &cfg(json!({"location": "middle"})), 1).is_err());
    }
}
