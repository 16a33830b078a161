//! numcodecs' `zlib` codec (Zarr v2 `compressor` `{"id": "zlib"}` and v3
//! `numcodecs.zlib`): DEFLATE (RFC 1951) in the zlib format (RFC 1950), as
//! Python's `zlib.compress` writes it. Bytes after the end of the stream are
//! ignored, as `zlib.decompress` ignores them; a wrong Adler-32 or a
//! truncated stream is a codec error. Decoding is libdeflate's one-shot
//! inflate into a buffer of the expected size (flate2's `zlib-rs` backend
//! for caps over 64 MiB and to word errors); encoding is flate2's.

use std::io::Write;

use flate2::bufread::ZlibDecoder;
use flate2::write::ZlibEncoder;
use flate2::Compression;
use libdeflater::DecompressionError;

use serde_json::{Map, Value};

use super::gzip::{with_libdeflate, ONE_SHOT_MAX};
use super::Config;
use crate::zarr::codec::numcodecs::check_int;
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::Result;

const NAME: &str = "zlib";

/// The `zlib` codec.
#[derive(Debug, Clone)]
pub struct Zlib {
    level: u32,
}

impl Zlib {
    /// A codec compressing at `level` (0 = stored, 9 = smallest).
    ///
    /// # Errors
    /// A level above 9.
    pub fn new(level: u32) -> CodecResult<Self> {
        if level > 9 {
            return Err(CodecError::new(NAME, format!("level must be 0..=9, got {level}")));
        }
        Ok(Self { level })
    }

    /// numcodecs' `zlib` (default level 1; -1 is zlib's
    /// `Z_DEFAULT_COMPRESSION`, level 6).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>) -> CodecResult<Self> {
        let level: i64 = cfg.int("level", 1);
        Self::new(u32::try_from(level).unwrap_or(6))
    }
}

/// Checks a numcodecs `zlib` configuration at `path` (`level` -1..=9).
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    check_int(config, path, "level", -1, 9)
}

impl BytesToBytesCodec for Zlib {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, _decoded: u64) -> Option<u64> {
        None
    }

    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        let out = Vec::with_capacity(bytes.len() / 2 + 64);
        let mut encoder = ZlibEncoder::new(out, Compression::new(self.level));
        encoder.write_all(&bytes).and_then(|()| encoder.finish()).map_err(|e| CodecError::new(NAME, e.to_string()))
    }

    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        // libdeflate's one-shot inflate into a buffer of the cap (the
        // chunk's size), when that is not too large to allocate up front.
        // It ignores bytes after the stream, as `zlib.decompress` does; an
        // error is left to flate2 below, which words it.
        if max_decoded <= ONE_SHOT_MAX {
            let mut out = vec![0; max_decoded];
            match with_libdeflate(|d| d.zlib_decompress(&bytes, &mut out)) {
                Ok(n) => {
                    out.truncate(n);
                    if n < max_decoded / 2 {
                        out.shrink_to_fit();
                    }
                    return Ok(out);
                }
                Err(DecompressionError::InsufficientSpace) => return Err(super::too_large(NAME, max_decoded)),
                Err(DecompressionError::BadData) => {}
            }
        }
        // zlib records no size; start from a guess and let the cap bound it.
        let hint = bytes.len().saturating_mul(4);
        super::read_capped(NAME, ZlibDecoder::new(bytes.as_slice()), hint, max_decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, counting_u32, hex, smooth_f32};
    use super::*;
    use proptest::prelude::*;

    // scripts/codec-fixtures.py (numcodecs 0.16.6): Zlib(level=1) of counting_u32().
    const ZLIB_L1: &str = "7801edd7491280201004c111657143ffff5a0b5fc1a188c82b070298ee888805092b3664145434ec3870e2c28d8e072fc6720fcfc3fbe17bf1fff02f7436382bcd0e662973a139d9de608fb257fe1579ca8efc01df4a1fe7";

    #[test]
    fn decodes_numcodecs_output() {
        let data = counting_u32();
        assert_eq!(Zlib::new(1).unwrap().decode(hex(ZLIB_L1), data.len()).unwrap(), data);
    }

    #[test]
    fn hostile_inputs() {
        let data = counting_u32();
        let c = Zlib::new(1).unwrap();
        let enc = hex(ZLIB_L1);
        assert!(c.decode(enc.clone(), data.len() - 1).unwrap_err().reason.contains("exceeds"));
        // Truncated: the Adler-32 trailer is missing.
        let e = c.decode(enc[..enc.len() - 2].to_vec(), data.len()).unwrap_err();
        assert_eq!(e.codec, "zlib");
        assert!(c.decode(enc[..enc.len() / 2].to_vec(), data.len()).is_err());
        assert_hostile_inputs_fail_cleanly(&c, &data, &enc);
    }

    /// Python's `zlib.decompress` (numcodecs' `Zlib`) on each: bytes after
    /// the end of the stream ignored; a wrong Adler-32, truncation, an empty
    /// input or a gzip stream an error.
    #[test]
    fn trailing_bytes_and_broken_streams_as_python_reads_them() {
        let data = counting_u32();
        let c = Zlib::new(1).unwrap();
        let enc = hex(ZLIB_L1);
        for tail in [&b"garbage"[..], &[0; 9], &enc] {
            assert_eq!(c.decode([&enc[..], tail].concat(), data.len()).unwrap(), data);
        }
        let mut adler = enc.clone();
        let n = adler.len();
        adler[n - 1] ^= 1;
        let e = c.decode(adler, data.len()).unwrap_err();
        assert!(e.reason.starts_with("corrupt input"), "{e}");
        for broken in [
            Vec::new(),
            enc[..n - 1].to_vec(),
            crate::zarr::codec::bytes_to_bytes::gzip::Gzip::new(1).unwrap().encode(data.clone()).unwrap(),
        ] {
            let e = c.decode(broken, data.len()).unwrap_err();
            assert_eq!(e.codec, "zlib");
        }
        // A large stream decodes exactly at its size and fails one byte below.
        let big = smooth_f32(1 << 20);
        let stream = c.encode(big.clone()).unwrap();
        assert_eq!(c.decode(stream.clone(), big.len()).unwrap(), big);
        assert!(c.decode(stream, big.len() - 1).unwrap_err().reason.contains("exceeds"));
    }

    #[test]
    fn bomb_fails_fast() {
        let c = Zlib::new(1).unwrap();
        let bomb = c.encode(vec![0; 100 << 20]).unwrap();
        let e = c.decode(bomb, 1 << 20).unwrap_err();
        assert!(e.reason.contains("exceeds"), "{e}");
    }

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096), level in 0u32..=9) {
            let c = Zlib::new(level).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            prop_assert_eq!(c.decode(enc, data.len()).unwrap(), data);
        }
    }
}
