//! The `crc32c` checksum codec (spec: `codecs/crc32c/index.rst`, "Format and
//! algorithm"): the input followed by its CRC32C (RFC 3720) as 4
//! little-endian bytes, verified on decode.
//!
//! numcodecs' `crc32c` (a `Checksum32`) is the same with a `location`
//! member: `"end"` (its default, and the v3 layout) or `"start"`.

use serde_json::{Map, Value};

use super::Config;
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::codec::numcodecs::member;
use crate::zarr::codec::registry::{BuiltCodec, CodecConfig};
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::{join, Result};
use crate::zarr::metadata::json::{enum_str, Obj};

const NAME: &str = "crc32c";

/// `crc32c` codec configuration (v3): no members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crc32cConfig;

impl Crc32cConfig {
    /// Parses a v3 configuration object (which must be empty).
    pub(crate) fn parse(cfg: &mut Obj<'_>) -> Result<Self> {
        cfg.deny_rest("no members")?;
        Ok(Self)
    }
}

impl CodecConfig for Crc32cConfig {
    fn to_json(&self) -> Option<Value> {
        None
    }

    fn is_fixed_size(&self) -> bool {
        true
    }

    fn build(&self, _: &ChunkRepr) -> CodecResult<BuiltCodec> {
        Ok(BuiltCodec::BytesToBytes(Box::new(Crc32c::new())))
    }
}

/// Checks a numcodecs `crc32c` configuration at `path` (`location`:
/// `"start"` or `"end"`): the only check; [`Crc32c::from_numcodecs`] reads
/// what passed it.
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    if let Some(v) = member(config, "location") {
        enum_str(v, &join(path, "location"), &["start", "end"])?;
    }
    Ok(())
}

/// Where the checksum is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Location {
    /// Before the data (numcodecs `location: "start"`).
    Start,
    /// After the data (the v3 codec).
    #[default]
    End,
}

/// The `crc32c` codec.
#[derive(Debug, Clone, Default)]
pub struct Crc32c {
    location: Location,
}

impl Crc32c {
    /// The v3 codec (checksum at the end).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A codec with the checksum at `location`.
    #[must_use]
    pub fn with_location(location: Location) -> Self {
        Self { location }
    }

    /// numcodecs' `crc32c` (`location`: `"end"`, its default, or `"start"`).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>) -> Self {
        Self::with_location(if cfg.str("location") == Some("start") { Location::Start } else { Location::End })
    }
}

impl BytesToBytesCodec for Crc32c {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        decoded.checked_add(4)
    }

    fn encode(&self, mut bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        let crc = ::crc32c::crc32c(&bytes).to_le_bytes();
        match self.location {
            Location::End => {
                bytes.extend_from_slice(&crc);
                Ok(bytes)
            }
            Location::Start => {
                let mut out = Vec::with_capacity(bytes.len() + 4);
                out.extend_from_slice(&crc);
                out.extend_from_slice(&bytes);
                Ok(out)
            }
        }
    }

    fn decode(&self, mut bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        let Some(payload_len) = bytes.len().checked_sub(4) else {
            return Err(CodecError::new(
                NAME,
                format!("input of {} bytes is too short to hold the 4-byte checksum", bytes.len()),
            ));
        };
        if payload_len > max_decoded {
            return Err(super::too_large(NAME, max_decoded));
        }
        let (payload, stored) = match self.location {
            Location::End => bytes.split_at(payload_len),
            Location::Start => {
                let (stored, payload) = bytes.split_at(4);
                (payload, stored)
            }
        };
        let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
        let computed = ::crc32c::crc32c(payload);
        if stored != computed {
            return Err(CodecError::new(
                NAME,
                format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
            ));
        }
        match self.location {
            Location::End => bytes.truncate(payload_len),
            Location::Start => {
                bytes.drain(..4);
            }
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, hex};
    use super::*;
    use proptest::prelude::*;

    // Generated with numcodecs 0.16.6:
    //   (scripts/codec-fixtures.py)
    //   from numcodecs import CRC32C
    //   CRC32C().encode(b"hello zarr").hex()
    //   CRC32C(location="start").encode(b"hello zarr").hex()
    //   CRC32C().encode(b"").hex()
    const HELLO_END: &str = "68656c6c6f207a617272ba65a06e";
    const HELLO_START: &str = "ba65a06e68656c6c6f207a617272";
    const EMPTY: &str = "00000000";

    #[test]
    fn decodes_numcodecs_output() {
        let c = Crc32c::new();
        assert_eq!(c.decode(hex(HELLO_END), 10).unwrap(), b"hello zarr");
        assert_eq!(c.encode(b"hello zarr".to_vec()).unwrap(), hex(HELLO_END));
        assert_eq!(c.decode(hex(EMPTY), 0).unwrap(), b"");
        let s = Crc32c::with_location(Location::Start);
        assert_eq!(s.decode(hex(HELLO_START), 10).unwrap(), b"hello zarr");
        assert_eq!(s.encode(b"hello zarr".to_vec()).unwrap(), hex(HELLO_START));
        assert_eq!(c.encoded_size(10), Some(14));
    }

    #[test]
    fn rejects_mismatch_short_and_oversized() {
        let c = Crc32c::new();
        let mut bad = hex(HELLO_END);
        bad[0] ^= 1;
        let e = c.decode(bad, 10).unwrap_err();
        assert!(e.to_string().starts_with("crc32c: checksum mismatch"), "{e}");
        assert!(c.decode(vec![1, 2, 3], 10).unwrap_err().reason.contains("too short"));
        assert!(c.decode(hex(HELLO_END), 9).unwrap_err().reason.contains("exceeds"));
        assert_hostile_inputs_fail_cleanly(&c, b"hello zarr", &hex(HELLO_END));
    }

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096), start in any::<bool>()) {
            let c = Crc32c::with_location(if start { Location::Start } else { Location::End });
            let enc = c.encode(data.clone()).unwrap();
            prop_assert_eq!(enc.len(), data.len() + 4);
            prop_assert_eq!(c.decode(enc, data.len()).unwrap(), data);
        }
    }

    use crate::zarr::codec::registry::parse_for_test as chain;

    #[test]
    fn configuration() {
        use crate::zarr::data_type::DataType as D;
        let specs =
            chain(serde_json::json!(["bytes", {"name": "crc32c", "configuration": {}}]), &D::UInt8, &[4]).unwrap();
        assert_eq!(specs[1].config::<Crc32cConfig>(), Some(&Crc32cConfig));
        assert_eq!(serde_json::to_value(&specs[1]).unwrap(), serde_json::json!({"name": "crc32c"}));
        let e = chain(
            serde_json::json!(["bytes", {"name": "crc32c", "configuration": {"location": "start"}}]),
            &D::UInt8,
            &[4],
        )
        .unwrap_err();
        assert_eq!(e.path, "codecs[1].configuration.location");
        // The numcodecs alias has a location.
        let map = serde_json::json!({"location": "start"});
        let c = Crc32c::from_numcodecs(&Config { map: map.as_object().unwrap() });
        assert_eq!(c.location, Location::Start);
        let map = serde_json::json!({"location": "middle"});
        let e = validate_numcodecs(map.as_object().unwrap(), "compressor").unwrap_err();
        assert_eq!(e.path, "compressor.location");
    }
}
