//! numcodecs' `bz2` codec (Zarr v2 `{"id": "bz2"}`, v3 `numcodecs.bz2`): a
//! bzip2 stream as Python's `bz2.compress` writes it. Decoding accepts
//! multi-stream input, as `bz2.decompress` does.

use std::io::Write;

use bzip2::bufread::MultiBzDecoder;
use bzip2::write::BzEncoder;
use bzip2::Compression;

use serde_json::{Map, Value};

use super::Config;
use crate::zarr::codec::numcodecs::check_int;
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::Result;

const NAME: &str = "bz2";

/// The `bz2` codec.
#[derive(Debug, Clone)]
pub struct Bz2 {
    level: u32,
}

impl Bz2 {
    /// A codec with block size `level` × 100 kB.
    ///
    /// # Errors
    /// A level outside 1..=9.
    pub fn new(level: u32) -> CodecResult<Self> {
        if !(1..=9).contains(&level) {
            return Err(CodecError::new(NAME, format!("level must be 1..=9, got {level}")));
        }
        Ok(Self { level })
    }

    /// numcodecs' `bz2` (default level 1).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>) -> CodecResult<Self> {
        Self::new(cfg.int("level", 1))
    }
}

/// Checks a numcodecs `bz2` configuration at `path` (`level` 1..=9).
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    check_int(config, path, "level", 1, 9)
}

impl BytesToBytesCodec for Bz2 {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, _decoded: u64) -> Option<u64> {
        None
    }

    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        let out = Vec::with_capacity(bytes.len() / 2 + 64);
        let mut encoder = BzEncoder::new(out, Compression::new(self.level));
        encoder.write_all(&bytes).and_then(|()| encoder.finish()).map_err(|e| CodecError::new(NAME, e.to_string()))
    }

    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        let hint = bytes.len().saturating_mul(4);
        super::read_capped(NAME, MultiBzDecoder::new(bytes.as_slice()), hint, max_decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, counting_u32, hex};
    use super::*;
    use proptest::prelude::*;

    // scripts/codec-fixtures.py (numcodecs 0.16.6): BZ2(level=1) of counting_u32().
    const BZ2_L1: &str = "425a683131415926535970165f81000001e0007fffc00020007050d34c0009aa90218d469ae2bca18d50d90d286d437a1c50f543dd0f9439a1d50ee86687da1fa87943315433430550fe2ee48a70a120e02cbf02";

    #[test]
    fn decodes_numcodecs_output() {
        let data = counting_u32();
        let c = Bz2::new(1).unwrap();
        assert_eq!(c.decode(hex(BZ2_L1), data.len()).unwrap(), data);
        let mut two = hex(BZ2_L1);
        two.extend(hex(BZ2_L1));
        assert_eq!(c.decode(two, 2 * data.len()).unwrap(), [data.clone(), data].concat());
    }

    #[test]
    fn hostile_inputs() {
        let data = counting_u32();
        let c = Bz2::new(1).unwrap();
        let enc = hex(BZ2_L1);
        assert!(c.decode(enc.clone(), data.len() - 1).unwrap_err().reason.contains("exceeds"));
        assert_eq!(c.decode(enc[..enc.len() - 1].to_vec(), data.len()).unwrap_err().codec, "bz2");
        assert_hostile_inputs_fail_cleanly(&c, &data, &enc);
    }

    #[test]
    fn bomb_fails_fast() {
        // 100 streams of 1 MiB of zeros: 100 MiB decoded (one 100 MiB
        // stream takes the unoptimised test build seconds to encode).
        let c = Bz2::new(9).unwrap();
        let bomb = c.encode(vec![0; 1 << 20]).unwrap().repeat(100);
        assert!(c.decode(bomb, 1 << 20).unwrap_err().reason.contains("exceeds"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096), level in 1u32..=9) {
            let c = Bz2::new(level).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            prop_assert_eq!(c.decode(enc, data.len()).unwrap(), data);
        }
    }
}
