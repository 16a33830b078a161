//! The `zstd` codec (zarr-python's `zstd` and TensorStore's: `level`,
//! `checksum`; see `tensorstore-zarr3-driver.rst`), which is also numcodecs'
//! `zstd` (Zarr v2 and `numcodecs.zstd`): one or more zstd frames (RFC 8878).
//!
//! Frames written in one shot record their decoded size; frames written by
//! streaming encoders may not. Both decode: a recorded size is checked
//! against the cap and then decoded into an exact allocation; otherwise the
//! frame is streamed into a buffer that stops at the cap.
//!
//! Decoding reuses one zstd decompression context per thread: creating one
//! allocates (and touches) some 160 KB, which cost a fifth of the time of
//! decoding a shard of 64 KiB inner chunks. The codec itself keeps no state.

use std::cell::RefCell;

use zstd::bulk::{Compressor, Decompressor};
use zstd::stream::read::Decoder;
use zstd::zstd_safe::{self, CParameter};

use serde::Serialize;
use serde_json::{Map, Value};

use super::Config;
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::codec::numcodecs::{check_int, member};
use crate::zarr::codec::registry::{BuiltCodec, CodecConfig};
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::{join, Result};
use crate::zarr::metadata::json::{boolean, int_in, Obj};

const NAME: &str = "zstd";

/// zstd's level range as zarr-python and TensorStore accept it.
const LEVELS: (i64, i64) = (-131_072, 22);

/// `zstd` codec configuration (v3): `{"level", "checksum"}`, both optional.
///
/// ```
/// # use zarrd::zarr::codec::bytes_to_bytes::zstd::ZstdConfig;
/// let c = ZstdConfig { level: Some(3), checksum: Some(true) };
/// assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"level":3,"checksum":true}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZstdConfig {
    /// Compression level -131072..=22.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<i32>,
    /// Whether frames carry a content checksum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<bool>,
}

impl ZstdConfig {
    /// Parses a v3 configuration object.
    pub(crate) fn parse(cfg: &mut Obj<'_>) -> Result<Self> {
        let level = cfg.optional("level").map(|v| int_in(v, &cfg.at("level"), LEVELS.0, LEVELS.1)).transpose()?;
        let level = level.map(|n| i32::try_from(n).unwrap_or_default());
        let checksum = cfg.optional("checksum").map(|v| boolean(v, &cfg.at("checksum"))).transpose()?;
        cfg.deny_rest("\"level\" and \"checksum\"")?;
        Ok(Self { level, checksum })
    }

    /// The codec, with zarr-python's defaults for absent members (level 0,
    /// zstd's default; no checksum).
    ///
    /// # Errors
    /// A level outside zstd's range.
    pub fn build(&self) -> CodecResult<Zstd> {
        Zstd::new(self.level.unwrap_or(0), self.checksum.unwrap_or(false))
    }
}

impl CodecConfig for ZstdConfig {
    fn to_json(&self) -> Option<Value> {
        serde_json::to_value(self).ok()
    }

    fn build(&self, _: &ChunkRepr) -> CodecResult<BuiltCodec> {
        Ok(BuiltCodec::BytesToBytes(Box::new(ZstdConfig::build(self)?)))
    }
}

/// Checks a numcodecs `zstd` configuration at `path` (`level`, `checksum`).
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    check_int(config, path, "level", LEVELS.0, LEVELS.1)?;
    if let Some(v) = member(config, "checksum") {
        boolean(v, &join(path, "checksum"))?;
    }
    Ok(())
}

/// The `zstd` codec.
#[derive(Debug, Clone)]
pub struct Zstd {
    level: i32,
    checksum: bool,
}

impl Zstd {
    /// A codec compressing at `level` (0 = zstd's default, 3), writing a
    /// content checksum into each frame when `checksum`.
    ///
    /// # Errors
    /// A level outside zstd's range.
    pub fn new(level: i32, checksum: bool) -> CodecResult<Self> {
        let range = zstd::compression_level_range();
        if level != 0 && !range.contains(&level) {
            return Err(CodecError::new(
                NAME,
                format!("level must be {}..={}, got {level}", range.start(), range.end()),
            ));
        }
        Ok(Self { level, checksum })
    }

    /// numcodecs' `zstd` (defaults: level 0, no checksum).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>) -> CodecResult<Self> {
        Self::new(cfg.int("level", 0), cfg.bool("checksum", false))
    }
}

thread_local! {
    static DECOMPRESSOR: RefCell<Option<Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's decompression context (created on first use).
/// zstd starts every one-shot decompression afresh, so a context that saw
/// corrupt input decodes the next frame as a new one would.
fn with_decompressor<T>(f: impl FnOnce(&mut Decompressor<'static>) -> std::io::Result<T>) -> std::io::Result<T> {
    DECOMPRESSOR.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            if slot.is_none() {
                *slot = Some(Decompressor::new()?);
            }
            f(slot.as_mut().expect("set above"))
        }
        // Only if `f` itself decoded zstd on this thread: use a fresh context.
        Err(_) => f(&mut Decompressor::new()?),
    })
}

fn error(e: &std::io::Error) -> CodecError {
    CodecError::new(NAME, format!("corrupt input: {e}"))
}

/// The total decoded size of `data` when it is a clean sequence of frames
/// that all record their size (skippable frames count zero).
fn recorded_size(mut data: &[u8]) -> Option<u64> {
    let mut total = 0u64;
    while !data.is_empty() {
        let frame_len = zstd_safe::find_frame_compressed_size(data).ok()?;
        let content = zstd_safe::get_frame_content_size(data).ok()??;
        total = total.checked_add(content)?;
        data = data.get(frame_len..)?;
    }
    Some(total)
}

impl BytesToBytesCodec for Zstd {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, _decoded: u64) -> Option<u64> {
        None
    }

    fn piece_format(&self) -> Option<crate::zarr::codec::pieces::PieceFormat> {
        Some(crate::zarr::codec::pieces::PieceFormat::Zstd)
    }

    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        let fail = |e: std::io::Error| CodecError::new(NAME, e.to_string());
        let mut compressor = Compressor::new(self.level).map_err(fail)?;
        compressor.set_parameter(CParameter::ChecksumFlag(self.checksum)).map_err(fail)?;
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(bytes.len()));
        compressor.compress_to_buffer(&bytes, &mut out).map_err(fail)?;
        Ok(out)
    }

    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        if bytes.is_empty() {
            return Err(CodecError::new(NAME, "empty input is not a zstd frame"));
        }
        match recorded_size(&bytes) {
            Some(size) => {
                // The recorded size is untrusted: checked before allocating.
                let size = usize::try_from(size).ok().filter(|&s| s <= max_decoded).ok_or_else(|| {
                    CodecError::new(
                        NAME,
                        format!("frame claims {size} decoded bytes, more than the expected {max_decoded}"),
                    )
                })?;
                let mut out = Vec::with_capacity(size);
                // zstd writes at most the Vec's capacity and fails on a
                // frame whose content does not match its recorded size.
                let n = with_decompressor(|d| d.decompress_to_buffer(&bytes, &mut out)).map_err(|e| error(&e))?;
                if n != size {
                    return Err(CodecError::new(
                        NAME,
                        format!("frames decode to {n} bytes, their headers claim {size}"),
                    ));
                }
                Ok(out)
            }
            None => {
                let decoder = Decoder::with_buffer(bytes.as_slice()).map_err(|e| error(&e))?;
                super::read_capped(NAME, decoder, bytes.len().saturating_mul(4), max_decoded)
            }
        }
    }

    fn range_decode(&self) -> Option<crate::zarr::codec::RangeDecode> {
        Some(crate::zarr::codec::RangeDecode::Prefix)
    }

    /// zstd decodes in order: the prefix up to `want`'s end.
    fn decode_range(&self, bytes: &[u8], size: usize, want: std::ops::Range<usize>) -> Option<(usize, Vec<u8>)> {
        decode_prefix(bytes, size, want.end).map(|prefix| (0, prefix))
    }
}

/// The zstd frame magic number, little-endian.
const FRAME_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Frames whose decoding context is kept per thread for prefix decodes:
/// a streaming context holds a window of up to the frame's size.
const KEPT_STREAM_WINDOW: usize = 8 << 20;

thread_local! {
    static STREAM: RefCell<Option<zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

/// The first `want` (or a few more) decoded bytes of `bytes`, when it is
/// one whole zstd frame that records exactly `size` decoded bytes and
/// carries no checksum (a prefix could not verify it): decoded by
/// streaming, stopping once `want` bytes are out. `None` for anything else
/// (several or skippable frames, another recorded size, no recorded size,
/// a checksum, corrupt or truncated input): the caller decodes it whole.
fn decode_prefix(bytes: &[u8], size: usize, want: usize) -> Option<Vec<u8>> {
    if want == 0 || want > size || bytes.get(..4) != Some(&FRAME_MAGIC[..]) {
        return None;
    }
    // Frame header descriptor: bit 2 is the content checksum flag.
    if bytes.get(4)? & 0x04 != 0 {
        return None;
    }
    if zstd_safe::find_frame_compressed_size(bytes).ok()? != bytes.len() {
        return None;
    }
    if zstd_safe::get_frame_content_size(bytes).ok()?? != size as u64 {
        return None;
    }
    let run = |dctx: &mut zstd_safe::DCtx<'static>| -> Option<Vec<u8>> {
        dctx.reset(zstd_safe::ResetDirective::SessionOnly).ok()?;
        let mut out: Vec<u8> = Vec::with_capacity(want);
        let mut input = zstd_safe::InBuffer::around(bytes);
        // Every round either fills the output or consumes input (or ends
        // the frame): bounded by the input's and the output's sizes.
        loop {
            if out.len() >= want {
                return Some(out);
            }
            let (consumed, produced) = (input.pos(), out.len());
            // The Vec's length follows what zstd wrote (`WriteBuf`).
            let left =
                dctx.decompress_stream(&mut zstd_safe::OutBuffer::around_pos(&mut out, produced), &mut input).ok()?;
            if out.len() >= want {
                return Some(out);
            }
            if left == 0 || (input.pos() == consumed && out.len() == produced) {
                // The frame ended (or stalled) short of `want`.
                return None;
            }
        }
    };
    if size > KEPT_STREAM_WINDOW {
        return run(&mut zstd_safe::DCtx::try_create()?);
    }
    STREAM.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            if slot.is_none() {
                *slot = Some(zstd_safe::DCtx::try_create()?);
            }
            run(slot.as_mut()?)
        }
        Err(_) => run(&mut zstd_safe::DCtx::try_create()?),
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, counting_u32, hex};
    use super::*;
    use proptest::prelude::*;

    // scripts/codec-fixtures.py (numcodecs 0.16.6): Zstd(level=1),
    // Zstd(level=3, checksum=True) of counting_u32(); Zstd() of b"".
    const ZSTD_L1: &str = "28b52ffd60000f1d010022c4050510f8721e53dfdddbd9d7d5d3d1cfcdcbc9c7c5c3c1070200b53f8207010366";
    const ZSTD_CHECKSUM: &str =
        "28b52ffd64000f1d010022c4050510f8721e53dfdddbd9d7d5d3d1cfcdcbc9c7c5c3c1070200b53f82070103665fd33bdb";
    const ZSTD_EMPTY: &str = "28b52ffd2000010000";

    /// A frame without a recorded size, as streaming encoders write.
    fn streamed(data: &[u8]) -> Vec<u8> {
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        e.write_all(data).unwrap();
        let out = e.finish().unwrap();
        assert!(matches!(zstd_safe::get_frame_content_size(&out), Ok(None)));
        out
    }

    #[test]
    fn decodes_numcodecs_output() {
        let data = counting_u32();
        let c = Zstd::new(0, false).unwrap();
        assert_eq!(c.decode(hex(ZSTD_L1), data.len()).unwrap(), data);
        assert_eq!(c.decode(hex(ZSTD_CHECKSUM), data.len()).unwrap(), data);
        assert_eq!(c.decode(hex(ZSTD_EMPTY), 0).unwrap(), b"");
        assert_eq!(c.decode(streamed(&data), data.len()).unwrap(), data);
        // Concatenated frames, recorded sizes or not.
        let two = [hex(ZSTD_L1), hex(ZSTD_CHECKSUM)].concat();
        assert_eq!(c.decode(two, 2 * data.len()).unwrap(), [data.clone(), data.clone()].concat());
        let mixed = [hex(ZSTD_L1), streamed(&data)].concat();
        assert_eq!(c.decode(mixed, 2 * data.len()).unwrap(), [data.clone(), data].concat());
    }

    #[test]
    fn writes_checksums_when_asked() {
        let data = counting_u32();
        let with = Zstd::new(3, true).unwrap().encode(data.clone()).unwrap();
        let without = Zstd::new(3, false).unwrap().encode(data).unwrap();
        assert_eq!(with, hex(ZSTD_CHECKSUM));
        assert_eq!(with.len(), without.len() + 4);
        assert!(Zstd::new(23, false).is_err());
    }

    #[test]
    fn hostile_inputs() {
        let data = counting_u32();
        let c = Zstd::new(0, false).unwrap();
        for enc in [hex(ZSTD_L1), hex(ZSTD_CHECKSUM), streamed(&data)] {
            assert!(c.decode(enc.clone(), data.len() - 1).unwrap_err().reason.contains("expected"));
            assert!(c.decode(enc[..enc.len() - 1].to_vec(), data.len()).is_err());
            assert_hostile_inputs_fail_cleanly(&c, &data, &enc);
        }
        // A corrupted checksum is caught.
        let mut enc = hex(ZSTD_CHECKSUM);
        let n = enc.len();
        enc[n - 1] ^= 1;
        assert!(c.decode(enc, data.len()).is_err());
        assert!(c.decode(vec![], 10).is_err());
    }

    #[test]
    fn reused_context_recovers_from_errors() {
        // One context per thread serves every decode: a failure (corrupt
        // data, bad checksum, output too small) must not affect the next one.
        let data = counting_u32();
        let c = Zstd::new(0, false).unwrap();
        let mut bad_checksum = hex(ZSTD_CHECKSUM);
        let n = bad_checksum.len();
        bad_checksum[n - 1] ^= 1;
        let mut corrupt = hex(ZSTD_L1);
        corrupt[12] ^= 0xff;
        for bad in [bad_checksum, corrupt, hex(ZSTD_L1)[..20].to_vec()] {
            let _ = c.decode(bad, data.len());
            assert_eq!(c.decode(hex(ZSTD_CHECKSUM), data.len()).unwrap(), data);
            assert_eq!(c.decode(hex(ZSTD_L1), data.len()).unwrap(), data);
        }
        // Many threads at once, each with its own context.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        assert_eq!(c.decode(hex(ZSTD_L1), data.len()).unwrap(), data);
                    }
                });
            }
        });
    }

    #[test]
    fn bomb_fails_fast() {
        let c = Zstd::new(1, false).unwrap();
        let recorded = c.encode(vec![0; 100 << 20]).unwrap();
        assert!(c.decode(recorded, 1 << 20).unwrap_err().reason.contains("claims 104857600"));
        let unrecorded = streamed(&vec![0; 100 << 20]);
        assert!(c.decode(unrecorded, 1 << 20).unwrap_err().reason.contains("exceeds"));
    }

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096), level in -5i32..=19, checksum in any::<bool>()) {
            let c = Zstd::new(level, checksum).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            prop_assert_eq!(c.decode(enc, data.len()).unwrap(), data);
        }
    }

    use crate::zarr::codec::registry::parse_for_test as chain;

    #[test]
    fn configuration() {
        use crate::zarr::data_type::DataType as D;
        let entry = serde_json::json!({"name": "zstd", "configuration": {"level": 3, "checksum": true}});
        let specs = chain(serde_json::json!(["bytes", entry]), &D::UInt8, &[4]).unwrap();
        assert_eq!(specs[1].config::<ZstdConfig>(), Some(&ZstdConfig { level: Some(3), checksum: Some(true) }));
        assert_eq!(serde_json::to_value(&specs[1]).unwrap(), entry);
        let built = ZstdConfig { level: None, checksum: None }.build().unwrap();
        assert_eq!((built.level, built.checksum), (0, false));
        for (bad, path) in [
            (serde_json::json!({"level": 23}), "codecs[1].configuration.level"),
            (serde_json::json!({"checksum": 1}), "codecs[1].configuration.checksum"),
            (serde_json::json!({"window": 1}), "codecs[1].configuration.window"),
        ] {
            let e = chain(serde_json::json!(["bytes", {"name": "zstd", "configuration": bad}]), &D::UInt8, &[4])
                .unwrap_err();
            assert_eq!(e.path, path);
        }
        let map = serde_json::json!({"level": 1, "checksum": null});
        let alias = Zstd::from_numcodecs(&Config { map: map.as_object().unwrap() }).unwrap();
        assert_eq!((alias.level, alias.checksum), (1, false));
        assert!(validate_numcodecs(serde_json::json!({"checksum": "yes"}).as_object().unwrap(), "c").is_err());
    }
}
