//! The `gzip` codec (spec: `codecs/gzip/index.rst`, "Format and algorithm":
//! DEFLATE, RFC 1951, in the gzip file format, RFC 1952), which is also
//! numcodecs' `gzip` (Zarr v2 and `numcodecs.gzip`).
//!
//! Decoding reads members one after another and skips zero padding between
//! and after them, as Python's `gzip` module (numcodecs, zarr-python) does;
//! any other trailing bytes, a wrong CRC-32 or ISIZE, or a truncated member
//! are a codec error.
//!
//! A stream that is one member decoding to exactly the expected size (what
//! every writer stores) is inflated in one shot by libdeflate into a buffer
//! of that size; everything else, and encoding, runs on flate2's `zlib-rs`
//! backend. Per 2 MiB chunk (bench/README.md, codecs): libdeflate 44 M
//! instructions, zlib-rs 62 M, miniz_oxide (before) 84 M. (libdeflater's
//! safe API does not say where a member ended: a stream built so that
//! bytes after a first member that fills the cap end in that member's own
//! trailer reads as that member, where Python's `gzip` reads on and fails.
//! Only a deliberately crafted stream does that, and it yields the first
//! member's bytes, checked by its CRC-32.)

use std::cell::RefCell;
use std::io::{Read, Write};

use flate2::bufread::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use libdeflater::Decompressor;
use serde::Serialize;
use serde_json::{Map, Value};

use super::Config;
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::codec::numcodecs::check_int;
use crate::zarr::codec::registry::{BuiltCodec, CodecConfig};
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::Result;
use crate::zarr::metadata::json::Obj;

const NAME: &str = "gzip";

/// `gzip` codec configuration (v3): `{"level": 0..=9}`.
///
/// ```
/// # use zarrd::zarr::codec::bytes_to_bytes::gzip::GzipConfig;
/// let c = GzipConfig { level: Some(1) };
/// assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"level":1}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GzipConfig {
    /// Compression level 0..=9 (clients default it when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
}

impl GzipConfig {
    /// Parses a v3 configuration object.
    pub(crate) fn parse(cfg: &mut Obj<'_>) -> Result<Self> {
        let level = cfg.optional("level").map(|v| super::level_0_9(v, &cfg.at("level"))).transpose()?;
        cfg.deny_rest("\"level\"")?;
        Ok(Self { level })
    }

    /// The codec, with zarr-python's default level (5) when absent.
    ///
    /// # Errors
    /// A level out of range (not after parsing).
    pub fn build(&self) -> CodecResult<Gzip> {
        Gzip::new(self.level.map_or(5, u32::from))
    }
}

impl CodecConfig for GzipConfig {
    fn to_json(&self) -> Option<Value> {
        serde_json::to_value(self).ok()
    }

    fn build(&self, _: &ChunkRepr) -> CodecResult<BuiltCodec> {
        Ok(BuiltCodec::BytesToBytes(Box::new(GzipConfig::build(self)?)))
    }
}

/// Checks a numcodecs `gzip` configuration (`level` 0..=9) at `path`.
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    check_int(config, path, "level", 0, 9)
}

/// The `gzip` codec.
#[derive(Debug, Clone)]
pub struct Gzip {
    level: u32,
}

impl Gzip {
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

    /// numcodecs' `gzip` (default level 1).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>) -> CodecResult<Self> {
        Self::new(cfg.int("level", 1))
    }
}

impl BytesToBytesCodec for Gzip {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, _decoded: u64) -> Option<u64> {
        None
    }

    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        let out = Vec::with_capacity(bytes.len() / 2 + 64);
        let mut encoder = GzEncoder::new(out, Compression::new(self.level));
        encoder.write_all(&bytes).and_then(|()| encoder.finish()).map_err(|e| CodecError::new(NAME, e.to_string()))
    }

    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        // The trailer's ISIZE (the last member's size mod 2^32) sizes the
        // first allocation; it is never trusted past the cap.
        let hint = bytes
            .len()
            .checked_sub(4)
            .and_then(|i| bytes.get(i..))
            .and_then(|t| <[u8; 4]>::try_from(t).ok())
            .map_or(0, |t| usize::try_from(u32::from_le_bytes(t)).unwrap_or(0));
        // One member filling the cap exactly (a chunk as every writer stores
        // it): libdeflate's one-shot inflate, straight into a buffer of that
        // size. Anything else (several members, padding, a shorter output,
        // an error) takes the member loop below, which decides.
        if hint == max_decoded && (1..=ONE_SHOT_MAX).contains(&max_decoded) {
            if let Some(out) = one_member(&bytes, max_decoded) {
                return Ok(out);
            }
        }
        let mut out = Vec::with_capacity(hint.min(max_decoded));
        // One byte past the cap tells "exactly max" from "more than max"
        // without decoding the rest.
        let limit = u64::try_from(max_decoded).unwrap_or(u64::MAX).saturating_add(1);
        let mut rest = bytes.as_slice();
        if rest.is_empty() {
            // No member at all: nothing (as `gzip.decompress(b"")`).
            return Ok(out);
        }
        // Members one after another, as Python's `gzip` reads them: zero
        // bytes after a member are padding; anything else must be a member.
        loop {
            let room = limit - out.len() as u64;
            let mut member = GzDecoder::new(rest);
            (&mut member).take(room).read_to_end(&mut out).map_err(|e| corrupt(&e))?;
            if out.len() > max_decoded {
                return Err(super::too_large(NAME, max_decoded));
            }
            rest = member.into_inner();
            match rest.iter().position(|&b| b != 0) {
                Some(next) => rest = &rest[next..],
                None => return Ok(out),
            }
        }
    }
}

/// The largest output decoded in one shot (allocated whole before
/// decoding); larger caps grow their output as it decodes.
pub(super) const ONE_SHOT_MAX: usize = 64 << 20;

thread_local! {
    /// libdeflate's decompressor (~11 KB of tables), one per thread.
    static LIBDEFLATE: RefCell<Decompressor> = RefCell::new(Decompressor::new());
}

/// Runs `f` with this thread's libdeflate decompressor.
pub(super) fn with_libdeflate<T>(f: impl FnOnce(&mut Decompressor) -> T) -> T {
    LIBDEFLATE.with_borrow_mut(f)
}

/// `bytes` as exactly one gzip member of `n` decoded bytes, or `None`.
/// libdeflate inflates one member and checks the CRC-32 and ISIZE that
/// follow it; that trailer is the input's last eight bytes (no member,
/// padding or garbage after it) when those hold the same CRC-32 and size
/// (the caller checked the size).
fn one_member(bytes: &[u8], n: usize) -> Option<Vec<u8>> {
    let mut out = vec![0; n];
    let got = with_libdeflate(|d| d.gzip_decompress(bytes, &mut out)).ok()?;
    let crc = bytes.len().checked_sub(8).and_then(|i| bytes.get(i..i + 4))?;
    (got == n && crc == libdeflater::crc32(&out).to_le_bytes()).then_some(out)
}

fn corrupt(e: &std::io::Error) -> CodecError {
    CodecError::new(NAME, format!("corrupt input: {e}"))
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, counting_u32, hex, smooth_f32};
    use super::*;
    use proptest::prelude::*;

    // scripts/codec-fixtures.py (numcodecs 0.16.6): GZip(level=1), GZip(level=9)
    // and GZip() on b"", encoding counting_u32().
    const GZIP_L1: &str = "1f8b0800cc6a026b04ffedd7491280201004c111657143ffff5a0b5fc1a188c82b070298ee888805092b3664145434ec3870e2c28d8e072fc6720fcfc3fbe17bf1fff02f7436382bcd0e662973a139d9de608fb257fe1579ca8efc017ca607a500100000";
    const GZIP_L9: &str = "1f8b0800cc6a026b02ffedccc90d803000c4c0850412ced07fb558a2091eb6e4ef24c9c43317aebcf0ca8d3b6fbcf3c1275f7cf3e0275f1a1a1a1a1a1a1a1a1a1a1a1a1a1a1aff355e7ca607a500100000";
    const GZIP_EMPTY: &str = "1f8b0800cc6a026b04ff03000000000000000000";

    #[test]
    fn decodes_numcodecs_output() {
        let data = counting_u32();
        let c = Gzip::new(5).unwrap();
        assert_eq!(c.decode(hex(GZIP_L1), data.len()).unwrap(), data);
        assert_eq!(c.decode(hex(GZIP_L9), data.len()).unwrap(), data);
        assert_eq!(c.decode(hex(GZIP_EMPTY), 0).unwrap(), b"");
        // Two members concatenated read as their concatenation.
        let mut two = hex(GZIP_L1);
        two.extend(hex(GZIP_L9));
        assert_eq!(c.decode(two, 2 * data.len()).unwrap(), [data.clone(), data].concat());
    }

    #[test]
    fn hostile_inputs() {
        let data = counting_u32();
        let c = Gzip::new(1).unwrap();
        let enc = hex(GZIP_L1);
        assert!(c.decode(enc.clone(), data.len() - 1).unwrap_err().reason.contains("exceeds"));
        let e = c.decode(enc[..enc.len() - 3].to_vec(), data.len()).unwrap_err();
        assert_eq!(e.codec, "gzip");
        // A wrong CRC in the trailer.
        let mut bad_crc = enc.clone();
        let n = bad_crc.len();
        bad_crc[n - 8] ^= 0xff;
        assert!(c.decode(bad_crc, data.len()).is_err());
        assert_hostile_inputs_fail_cleanly(&c, &data, &enc);
    }

    /// Python's `gzip` module (numcodecs' `GZip`) on each: members one after
    /// another, zero padding between and after them read; anything else
    /// after a member, or zeros before the first, an error.
    #[test]
    fn members_padding_and_trailing_bytes_as_python_reads_them() {
        let data = counting_u32();
        let c = Gzip::new(5).unwrap();
        let (l1, l9, empty) = (hex(GZIP_L1), hex(GZIP_L9), hex(GZIP_EMPTY));
        let both = [data.clone(), data.clone()].concat();
        let read = |parts: &[&[u8]], max: usize| c.decode(parts.concat(), max);
        assert_eq!(read(&[&l1, &[0; 7], &l9, &[0; 3]], 2 * data.len()).unwrap(), both);
        assert_eq!(read(&[&empty, &l1, &empty], data.len()).unwrap(), data);
        assert_eq!(read(&[&l1, &[0]], data.len()).unwrap(), data);
        // Nothing at all is nothing (gzip.decompress(b"") == b"").
        assert_eq!(c.decode(Vec::new(), 0).unwrap(), b"");
        for (what, parts) in [
            ("garbage", vec![&l1[..], b"garbage"]),
            ("half a header", vec![&l1[..], b"\x1f\x8b"]),
            ("a truncated second member", vec![&l1[..], &l9[..l9.len() - 1]]),
            ("leading zeros", vec![&[0u8, 0][..], &l1[..]]),
            ("only zeros", vec![&[0u8; 4][..]]),
        ] {
            let e = read(&parts, 2 * data.len()).unwrap_err();
            assert_eq!(e.codec, "gzip", "{what}");
            assert!(e.reason.starts_with("corrupt input"), "{what}: {e}");
        }
        // The cap counts every member: two that fit alone but not together.
        let e = read(&[&l1, &l9], 2 * data.len() - 1).unwrap_err();
        assert!(e.reason.contains("exceeds the expected size"), "{e}");
        // A wrong ISIZE (the size mod 2^32) is an error, even though the
        // stream itself is whole and its CRC right.
        let mut isize = l1.clone();
        let n = isize.len();
        isize[n - 4] ^= 1;
        assert!(c.decode(isize.clone(), 2 * data.len()).is_err());
        // And an ISIZE claiming 4 GiB allocates nothing near it.
        isize[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(c.decode(isize, data.len()).is_err());
    }

    #[test]
    fn large_multi_member_streams_round_trip() {
        // Members of a few MiB each, the last one small (its ISIZE is the
        // only size hint): the output grows past the hint and stays exact.
        let big = smooth_f32(1 << 20);
        let c = Gzip::new(1).unwrap();
        let stream = [c.encode(big.clone()).unwrap(), c.encode(big[..100].to_vec()).unwrap()].concat();
        assert_eq!(c.decode(stream.clone(), big.len() + 100).unwrap(), [&big[..], &big[..100]].concat());
        assert!(c.decode(stream, big.len() + 99).unwrap_err().reason.contains("exceeds"));
    }

    #[test]
    fn bomb_fails_fast() {
        let c = Gzip::new(9).unwrap();
        let bomb = c.encode(vec![0; 100 << 20]).unwrap();
        let start = std::time::Instant::now();
        let e = c.decode(bomb, 1 << 20).unwrap_err();
        assert!(e.reason.contains("exceeds the expected size of 1048576 bytes"), "{e}");
        // Decoding stops at the cap: far less work than 100 MB.
        assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
    }

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096), level in 0u32..=9) {
            let c = Gzip::new(level).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            prop_assert_eq!(c.decode(enc, data.len()).unwrap(), data);
        }
    }

    use crate::zarr::codec::registry::parse_for_test as chain;

    #[test]
    fn configuration() {
        use crate::zarr::data_type::DataType as D;
        let entry = serde_json::json!({"name": "gzip", "configuration": {"level": 1}});
        let specs = chain(serde_json::json!(["bytes", entry]), &D::UInt8, &[4]).unwrap();
        assert_eq!(specs[1].config::<GzipConfig>(), Some(&GzipConfig { level: Some(1) }));
        assert_eq!(serde_json::to_value(&specs[1]).unwrap(), entry);
        // zarr-python's default for v3, numcodecs' for the alias.
        assert_eq!(GzipConfig { level: None }.build().unwrap().level, 5);
        let empty = serde_json::Map::new();
        assert_eq!(Gzip::from_numcodecs(&Config { map: &empty }).unwrap().level, 1);
        let e = chain(serde_json::json!(["bytes", {"name": "gzip", "configuration": {"level": 10}}]), &D::UInt8, &[4])
            .unwrap_err();
        assert_eq!(e.to_string(), "codecs[1].configuration.level: expected an integer 0..=9, got 10");
        let e = chain(serde_json::json!(["bytes", {"name": "gzip", "configuration": {"lvl": 1}}]), &D::UInt8, &[4])
            .unwrap_err();
        assert_eq!(e.path, "codecs[1].configuration.lvl");
        let alias = serde_json::json!({"level": 12});
        assert_eq!(validate_numcodecs(alias.as_object().unwrap(), "compressor").unwrap_err().path, "compressor.level");
    }
}
