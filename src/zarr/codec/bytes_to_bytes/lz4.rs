//! numcodecs' `lz4` codec (Zarr v2 `{"id": "lz4"}`, v3 `numcodecs.lz4`): the
//! decoded size as a 4-byte little-endian integer, then one LZ4 block
//! (numcodecs `lz4.pyx`: `store_le32` + `LZ4_compress_fast`).
//!
//! The `acceleration` member only trades speed for ratio when encoding;
//! lz4_flex has a single setting and its blocks are valid LZ4 either way.

use serde_json::{Map, Value};

use super::Config;
use crate::zarr::codec::numcodecs::check_int;
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::Result;

const NAME: &str = "lz4";

/// LZ4's `LZ4_MAX_INPUT_SIZE`; numcodecs refuses larger inputs.
const MAX_INPUT: usize = 0x7E00_0000;

/// The numcodecs `lz4` codec.
#[derive(Debug, Clone, Default)]
pub struct Lz4;

impl Lz4 {
    /// The codec.
    #[must_use]
    pub fn new() -> Self {
        Self
    }

    /// numcodecs' `lz4`: lz4_flex has no acceleration knob; any value
    /// still writes valid LZ4.
    pub(crate) fn from_numcodecs(_cfg: &Config<'_>) -> Self {
        Self
    }
}

/// Checks a numcodecs `lz4` configuration at `path` (`acceleration` an
/// `int`).
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    check_int(config, path, "acceleration", i64::from(i32::MIN), i64::from(i32::MAX))
}

impl BytesToBytesCodec for Lz4 {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, _decoded: u64) -> Option<u64> {
        None
    }

    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        if bytes.len() > MAX_INPUT {
            return Err(CodecError::new(
                NAME,
                format!("input of {} bytes exceeds LZ4's limit of {MAX_INPUT}", bytes.len()),
            ));
        }
        // Exactly numcodecs' framing: u32 LE size, then the block.
        Ok(lz4_flex::block::compress_prepend_size(&bytes))
    }

    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        let Some((header, block)) = bytes.split_first_chunk::<4>() else {
            return Err(CodecError::new(
                NAME,
                format!("input of {} bytes is too short to hold the 4-byte size header", bytes.len()),
            ));
        };
        let claimed = u32::from_le_bytes(*header);
        // Checked before allocating: the header is untrusted.
        let size = usize::try_from(claimed).ok().filter(|&s| s <= max_decoded).ok_or_else(|| {
            CodecError::new(
                NAME,
                format!("header claims {claimed} decoded bytes, more than the expected {max_decoded}"),
            )
        })?;
        let mut out = vec![0; size];
        let n = lz4_flex::block::decompress_into(block, &mut out)
            .map_err(|e| CodecError::new(NAME, format!("corrupt input: {e}")))?;
        if n != size {
            return Err(CodecError::new(NAME, format!("block decodes to {n} bytes, header claims {size}")));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, counting_u32, hex};
    use super::*;
    use proptest::prelude::*;

    // scripts/codec-fixtures.py (numcodecs 0.16.6): LZ4() of counting_u32() and of b"".
    const LZ4: &str = "00100000f032000000000100000002000000030000000400000005000000060000000700000008000000090000000a0000000b0000000c0000000d0000000e0000000f0000001041000f4400ffffffffffffffffffffffffffffffb2500003000000";
    const LZ4_EMPTY: &str = "0000000000";

    #[test]
    fn decodes_numcodecs_output() {
        let data = counting_u32();
        assert_eq!(Lz4.decode(hex(LZ4), data.len()).unwrap(), data);
        assert_eq!(Lz4.decode(hex(LZ4_EMPTY), 0).unwrap(), b"");
        assert_eq!(Lz4.decode(Lz4.encode(vec![]).unwrap(), 0).unwrap(), b"");
    }

    #[test]
    fn hostile_inputs() {
        let data = counting_u32();
        let enc = hex(LZ4);
        assert_hostile_inputs_fail_cleanly(&Lz4, &data, &enc);
        // The header lies: bigger than the cap (rejected before allocating) ...
        let e = Lz4.decode(enc.clone(), data.len() - 1).unwrap_err();
        assert!(e.reason.contains("more than the expected"), "{e}");
        let mut lie = enc.clone();
        lie[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Lz4.decode(lie, 1 << 20).unwrap_err().reason.contains("claims 4294967295"));
        // ... or smaller / larger than what the block holds.
        let mut lie = enc.clone();
        lie[..4].copy_from_slice(&100u32.to_le_bytes());
        assert!(Lz4.decode(lie, data.len()).is_err());
        let mut lie = enc;
        lie[..4].copy_from_slice(&5000u32.to_le_bytes());
        assert!(Lz4.decode(lie, 8192).unwrap_err().reason.contains("decodes to 4096 bytes"));
    }

    #[test]
    fn bomb_fails_fast() {
        let bomb = Lz4.encode(vec![0; 100 << 20]).unwrap();
        assert!(Lz4.decode(bomb, 1 << 20).unwrap_err().reason.contains("claims 104857600"));
    }

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let enc = Lz4.encode(data.clone()).unwrap();
            prop_assert_eq!(Lz4.decode(enc, data.len()).unwrap(), data);
        }
    }
}
