//! The `crc32c` checksum codec (spec: `codecs/crc32c/index.rst`, "Format and
//! algorithm"): the input followed by its CRC32C (RFC 3720) as 4
//! little-endian bytes, verified on decode.
//!
//! numcodecs' `crc32c` (a `Checksum32`) is the same with a `location`
//! member: `"end"` (its default, and the v3 layout) or `"start"`. Its
//! other `Checksum32`s, `crc32` (zlib's CRC-32) and `adler32` (zlib's),
//! are the same codec with another sum and `"start"` as the default
//! location (numcodecs 0.16, `checksum32.py`).

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

/// Which 32-bit checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sum {
    /// CRC-32C (Castagnoli): the v3 codec, numcodecs `crc32c`.
    #[default]
    Crc32c,
    /// zlib's CRC-32: numcodecs `crc32`.
    Crc32,
    /// zlib's Adler-32: numcodecs `adler32`.
    Adler32,
}

impl Sum {
    /// The codec's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Crc32c => NAME,
            Self::Crc32 => "crc32",
            Self::Adler32 => "adler32",
        }
    }

    fn of(self, data: &[u8]) -> u32 {
        match self {
            Self::Crc32c => ::crc32c::crc32c(data),
            Self::Crc32 => libdeflater::crc32(data),
            Self::Adler32 => libdeflater::adler32(data),
        }
    }
}

/// The `crc32c` codec, and numcodecs' `crc32` and `adler32`.
#[derive(Debug, Clone, Default)]
pub struct Crc32c {
    sum: Sum,
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
        Self { sum: Sum::Crc32c, location }
    }

    /// numcodecs' `crc32c` (`location`: `"end"`, its default, or `"start"`).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>) -> Self {
        Self::from_numcodecs_sum(Sum::Crc32c, cfg)
    }

    /// numcodecs' checksum `sum` (`location`: `"start"` or `"end"`; the
    /// default `"end"` for `crc32c`, `"start"` for the others).
    pub(crate) fn from_numcodecs_sum(sum: Sum, cfg: &Config<'_>) -> Self {
        let location = match (cfg.str("location"), sum) {
            (Some("start"), _) => Location::Start,
            (Some("end"), _) | (None, Sum::Crc32c) => Location::End,
            _ => Location::Start,
        };
        Self { sum, location }
    }
}

impl BytesToBytesCodec for Crc32c {
    fn name(&self) -> &str {
        self.sum.name()
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        decoded.checked_add(4)
    }

    fn encode(&self, mut bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        let crc = self.sum.of(&bytes).to_le_bytes();
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
                self.sum.name(),
                format!("input of {} bytes is too short to hold the 4-byte checksum", bytes.len()),
            ));
        };
        if payload_len > max_decoded {
            return Err(super::too_large(self.sum.name(), max_decoded));
        }
        let (payload, stored) = match self.location {
            Location::End => bytes.split_at(payload_len),
            Location::Start => {
                let (stored, payload) = bytes.split_at(4);
                (payload, stored)
            }
        };
        let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
        let computed = self.sum.of(payload);
        if stored != computed {
            return Err(CodecError::new(
                self.sum.name(),
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

    /// numcodecs 0.16.6: `CRC32()`, `CRC32(location="end")`, `Adler32()`,
    /// `Adler32(location="end")`, each `.encode(b"hello zarr")` and `.encode(b"")`.
    #[test]
    fn numcodecs_crc32_and_adler32() {
        let cases = [
            (Sum::Crc32, None, "7c03ea2a68656c6c6f207a617272", "00000000"),
            (Sum::Crc32, Some("end"), "68656c6c6f207a6172727c03ea2a", "00000000"),
            (Sum::Adler32, None, "f403961568656c6c6f207a617272", "01000000"),
            (Sum::Adler32, Some("end"), "68656c6c6f207a617272f4039615", "01000000"),
        ];
        for (sum, location, hello, empty) in cases {
            let map = location.map_or_else(|| serde_json::json!({}), |l| serde_json::json!({ "location": l }));
            let c = Crc32c::from_numcodecs_sum(sum, &Config { map: map.as_object().unwrap() });
            assert_eq!(c.encode(b"hello zarr".to_vec()).unwrap(), hex(hello), "{sum:?} {location:?}");
            assert_eq!(c.decode(hex(hello), 10).unwrap(), b"hello zarr");
            assert_eq!(c.encode(Vec::new()).unwrap(), hex(empty));
            assert_eq!(c.decode(hex(empty), 0).unwrap(), b"");
            let mut bad = hex(hello);
            bad[5] ^= 1;
            let e = c.decode(bad, 10).unwrap_err();
            assert!(e.to_string().starts_with(&format!("{}: checksum mismatch", sum.name())), "{e}");
            assert_hostile_inputs_fail_cleanly(&c, b"hello zarr", &hex(hello));
        }
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
