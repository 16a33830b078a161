//! numcodecs' `shuffle` codec (Zarr v2 `{"id": "shuffle", "elementsize": N}`,
//! v3 `numcodecs.shuffle`): the bytes of `elementsize`-byte elements
//! regrouped by byte position (every element's first byte, then every
//! second byte, ...), the layout blosc's byte shuffle makes inside a block.
//!
//! numcodecs 0.16 (`shuffle.py`, `_shuffle.pyx`): an `elementsize` of 0
//! or 1 leaves the bytes as they are; otherwise the input must be a whole
//! number of elements. The default `elementsize` is 4.

use serde_json::{Map, Value};

use super::Config;
use crate::zarr::codec::numcodecs::check_int;
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::Result;

const NAME: &str = "shuffle";

/// The largest `elementsize` accepted (numcodecs takes any; larger
/// elements than this are not a real layout).
const MAX_ELEMENT_SIZE: i64 = 1 << 20;

/// The numcodecs `shuffle` codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shuffle {
    element_size: usize,
}

impl Shuffle {
    /// A shuffle of `element_size`-byte elements.
    #[must_use]
    pub fn new(element_size: usize) -> Self {
        Self { element_size }
    }

    /// numcodecs' `shuffle` (`elementsize`, default 4).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>) -> Self {
        Self::new(cfg.int::<usize>("elementsize", 4))
    }

    /// Regroups `input`: byte `j` of element `i` goes to `out[j * count + i]`
    /// when `forward`, back from there otherwise.
    fn regroup(&self, input: &[u8], forward: bool) -> CodecResult<Vec<u8>> {
        let size = self.element_size;
        if size <= 1 {
            return Ok(input.to_vec());
        }
        if input.len() % size != 0 {
            return Err(CodecError::new(
                NAME,
                format!("{} bytes are not a whole number of {size}-byte elements", input.len()),
            ));
        }
        let count = input.len() / size;
        let mut out = vec![0u8; input.len()];
        if forward {
            for (i, element) in input.chunks_exact(size).enumerate() {
                for (j, &b) in element.iter().enumerate() {
                    out[j * count + i] = b;
                }
            }
        } else {
            for (i, element) in out.chunks_exact_mut(size).enumerate() {
                for (j, b) in element.iter_mut().enumerate() {
                    *b = input[j * count + i];
                }
            }
        }
        Ok(out)
    }
}

/// Checks a numcodecs `shuffle` configuration at `path` (`elementsize` an
/// integer from 0 to 2^20).
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    check_int(config, path, "elementsize", 0, MAX_ELEMENT_SIZE)
}

impl BytesToBytesCodec for Shuffle {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        Some(decoded)
    }

    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        self.regroup(&bytes, true)
    }

    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        if bytes.len() > max_decoded {
            return Err(super::too_large(NAME, max_decoded));
        }
        self.regroup(&bytes, false)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, hex};
    use super::*;
    use proptest::prelude::*;

    /// numcodecs 0.16.6: `Shuffle(4).encode(bytes(range(8)))`,
    /// `Shuffle(3).encode(bytes(range(9)))`, `Shuffle(0).encode(b"abc")`,
    /// `Shuffle(8).encode(bytes(range(16)))`.
    #[test]
    fn matches_numcodecs() {
        let cases: [(usize, Vec<u8>, &str); 4] = [
            (4, (0..8).collect(), "0004010502060307"),
            (3, (0..9).collect(), "000306010407020508"),
            (0, b"abc".to_vec(), "616263"),
            (8, (0..16).collect(), "00080109020a030b040c050d060e070f"),
        ];
        for (size, input, encoded) in cases {
            let c = Shuffle::new(size);
            assert_eq!(c.encode(input.clone()).unwrap(), hex(encoded), "{size}");
            assert_eq!(c.decode(hex(encoded), input.len()).unwrap(), input, "{size}");
        }
        let e = Shuffle::new(4).decode(b"abcde".to_vec(), 5).unwrap_err();
        assert!(e.to_string().contains("whole number of 4-byte elements"), "{e}");
        assert!(Shuffle::new(4).decode(vec![0; 8], 4).unwrap_err().to_string().contains("exceeds"));
        assert_hostile_inputs_fail_cleanly(&Shuffle::new(4), &[1, 2, 3, 4, 5, 6, 7, 8], &hex("0105020603070408"));
    }

    #[test]
    fn configuration() {
        let map = serde_json::json!({});
        assert_eq!(Shuffle::from_numcodecs(&Config { map: map.as_object().unwrap() }), Shuffle::new(4));
        let map = serde_json::json!({"elementsize": 2});
        assert_eq!(Shuffle::from_numcodecs(&Config { map: map.as_object().unwrap() }), Shuffle::new(2));
        for bad in [serde_json::json!({"elementsize": -1}), serde_json::json!({"elementsize": 1u64 << 40})] {
            let e = validate_numcodecs(bad.as_object().unwrap(), "compressor").unwrap_err();
            assert_eq!(e.path, "compressor.elementsize");
        }
    }

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..256), size in 0usize..9) {
            let size_ok = size <= 1 || data.len() % size == 0;
            let c = Shuffle::new(size);
            if size_ok {
                let enc = c.encode(data.clone()).unwrap();
                prop_assert_eq!(c.decode(enc, data.len()).unwrap(), data);
            } else {
                prop_assert!(c.encode(data).is_err());
            }
        }
    }
}
