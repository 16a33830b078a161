//! `vlen-utf8` and `vlen-bytes`: variable-length elements in numcodecs'
//! framing.
//!
//! Spec: zarr-python's `vlen-utf8` / `vlen-bytes` codecs (v3) and the
//! numcodecs `VLenUTF8` / `VLenBytes` filters (v2, with dtype `|O`). The
//! encoding is a little-endian `u32` item count, then per item a
//! little-endian `u32` length and that many bytes.
//!
//! Decoding checks the count against the chunk's element count and every
//! length against the bytes that remain, so a lying header costs an error,
//! not an allocation; `vlen-utf8` also checks that every item is UTF-8.

use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::codec::registry::{BuiltCodec, CodecConfig, ParseContext};
use crate::zarr::codec::{ArrayToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::{MetadataError, Result};

/// Which flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VlenKind {
    /// `vlen-utf8`: items must be UTF-8.
    Utf8,
    /// `vlen-bytes`: any bytes.
    Bytes,
}

impl VlenKind {
    /// Parses a v3 `vlen-utf8` / `vlen-bytes` entry (no configuration
    /// members; zarr-python writes an empty one) for the data type entering
    /// the codec, which must be variable-length.
    pub(crate) fn parse(cx: &mut ParseContext<'_, '_>) -> Result<Self> {
        cx.cfg.deny_rest("no members")?;
        if let Some(dt) = cx.state.data_type.as_ref().filter(|dt| !dt.is_variable()) {
            return Err(MetadataError::new(
                cx.path,
                format!(
                    "the {} codec needs a variable-length data type (string or \
                     variable_length_bytes), got \"{}\"",
                    cx.name,
                    dt.name()
                ),
            ));
        }
        Ok(if cx.name == "vlen-utf8" { Self::Utf8 } else { Self::Bytes })
    }
}

impl CodecConfig for VlenKind {
    fn to_json(&self) -> Option<serde_json::Value> {
        // zarr-python writes an empty configuration.
        Some(serde_json::Value::Object(serde_json::Map::new()))
    }

    fn build(&self, entering: &ChunkRepr) -> CodecResult<BuiltCodec> {
        let codec = VlenCodec::new(*self);
        codec.validate(entering)?;
        Ok(BuiltCodec::ArrayToBytes(Box::new(codec)))
    }
}

/// A `vlen-utf8` or `vlen-bytes` codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlenCodec {
    kind: VlenKind,
}

impl VlenCodec {
    /// The codec of `kind`.
    #[must_use]
    pub fn new(kind: VlenKind) -> Self {
        Self { kind }
    }

    /// Checks that `repr` is a variable-length type.
    ///
    /// # Errors
    /// Fixed-size data types.
    pub fn validate(&self, repr: &ChunkRepr) -> CodecResult<()> {
        if repr.data_type.is_variable() {
            Ok(())
        } else {
            Err(self.err(format!("needs a variable-length data type, got {:?}", repr.data_type)))
        }
    }

    fn err(&self, reason: impl Into<String>) -> CodecError {
        CodecError::new(self.name(), reason)
    }

    fn check_utf8(&self, i: usize, item: &[u8]) -> CodecResult<()> {
        if self.kind == VlenKind::Utf8 {
            if let Err(e) = std::str::from_utf8(item) {
                return Err(self.err(format!("item {i} is not valid UTF-8 ({e})")));
            }
        }
        Ok(())
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl ArrayToBytesCodec for VlenCodec {
    fn name(&self) -> &str {
        match self.kind {
            VlenKind::Utf8 => "vlen-utf8",
            VlenKind::Bytes => "vlen-bytes",
        }
    }

    fn encoded_size(&self, _decoded: &ChunkRepr) -> Option<u64> {
        None
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<Vec<u8>> {
        self.validate(decoded)?;
        let ChunkData::Variable(items) = data else {
            return Err(self.err("expected variable-length elements, got fixed-size data"));
        };
        if items.len() as u64 != decoded.num_elements() {
            return Err(self.err(format!("expected {} items, got {}", decoded.num_elements(), items.len())));
        }
        let count = u32::try_from(items.len()).map_err(|_| self.err("more than 2^32-1 items"))?;
        let total = items.iter().map(|i| i.len() + 4).sum::<usize>() + 4;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&count.to_le_bytes());
        for (i, item) in items.iter().enumerate() {
            self.check_utf8(i, item)?;
            let len =
                u32::try_from(item.len()).map_err(|_| self.err(format!("item {i} is longer than 2^32-1 bytes")))?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(item);
        }
        Ok(out)
    }

    fn decode(&self, bytes: Vec<u8>, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        self.validate(decoded)?;
        let count = read_u32(&bytes, 0)
            .ok_or_else(|| self.err(format!("{} bytes is too short for the item count", bytes.len())))?;
        if u64::from(count) != decoded.num_elements() {
            return Err(self.err(format!(
                "header says {count} items but a chunk of shape {:?} has {}",
                decoded.shape,
                decoded.num_elements()
            )));
        }
        // Each item takes at least 4 bytes, so the count is bounded by the input.
        if (count as usize).saturating_mul(4) > bytes.len() - 4 {
            return Err(self.err(format!("{count} items cannot fit in {} bytes", bytes.len())));
        }
        let mut items = Vec::with_capacity(count as usize);
        let mut at = 4usize;
        for i in 0..count as usize {
            let len =
                read_u32(&bytes, at).ok_or_else(|| self.err(format!("truncated before the length of item {i}")))?;
            at += 4;
            let end = at
                .checked_add(len as usize)
                .filter(|&e| e <= bytes.len())
                .ok_or_else(|| self.err(format!("item {i} claims {len} bytes but only {} remain", bytes.len() - at)))?;
            let item = &bytes[at..end];
            self.check_utf8(i, item)?;
            items.push(item.to_vec());
            at = end;
        }
        if at != bytes.len() {
            return Err(self.err(format!("{} unexpected bytes after the last item", bytes.len() - at)));
        }
        Ok(ChunkData::Variable(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::data_type::DataType;
    use proptest::prelude::*;

    fn repr(n: u64, dt: DataType) -> ChunkRepr {
        ChunkRepr { shape: vec![n], data_type: dt, fill_value: vec![] }
    }

    /// numcodecs 0.16.6: `numcodecs.VLenUTF8().encode(np.array(["a", "", "héllo"], dtype=object)).hex()`
    const NUMCODECS_UTF8: &str = "030000000100000061000000000600000068c3a96c6c6f";

    #[test]
    fn decodes_numcodecs_bytes() {
        let bytes: Vec<u8> = (0..NUMCODECS_UTF8.len() / 2)
            .map(|i| u8::from_str_radix(&NUMCODECS_UTF8[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let codec = VlenCodec::new(VlenKind::Utf8);
        let out = codec.decode(bytes.clone(), &repr(3, DataType::String)).unwrap();
        let want = ChunkData::Variable(vec![b"a".to_vec(), vec![], "héllo".as_bytes().to_vec()]);
        assert_eq!(out, want);
        assert_eq!(codec.encode(want, &repr(3, DataType::String)).unwrap(), bytes);
    }

    /// numcodecs 0.16.6: `numcodecs.VLenBytes().encode(np.array([b"a", b"", b"\\xff\\x00"], dtype=object)).hex()`
    #[test]
    fn decodes_numcodecs_vlen_bytes() {
        let bytes = vec![3, 0, 0, 0, 1, 0, 0, 0, b'a', 0, 0, 0, 0, 2, 0, 0, 0, 0xff, 0];
        let out = VlenCodec::new(VlenKind::Bytes).decode(bytes, &repr(3, DataType::Bytes)).unwrap();
        assert_eq!(out, ChunkData::Variable(vec![b"a".to_vec(), vec![], vec![0xff, 0]]));
    }

    #[test]
    fn hostile_inputs() {
        let utf8 = VlenCodec::new(VlenKind::Utf8);
        let r = repr(1, DataType::String);
        for (bytes, what) in [
            (vec![], "too short"),
            (vec![1, 0, 0], "too short"),
            (vec![2, 0, 0, 0, 0, 0, 0, 0], "header says 2"),
            (vec![1, 0, 0, 0], "cannot fit"),
            (vec![1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, b'a'], "claims 4294967295 bytes"),
            (vec![1, 0, 0, 0, 1, 0, 0, 0], "claims 1 bytes"),
            (vec![1, 0, 0, 0, 1, 0, 0, 0, 0xff], "not valid UTF-8"),
            (vec![1, 0, 0, 0, 0, 0, 0, 0, 9], "unexpected bytes"),
            (vec![0xff, 0xff, 0xff, 0xff], "header says"),
        ] {
            let e = utf8.decode(bytes.clone(), &r).unwrap_err();
            assert_eq!(e.codec, "vlen-utf8");
            assert!(e.reason.contains(what), "{bytes:?}: {e}");
        }
        // vlen-bytes accepts any bytes.
        let out = VlenCodec::new(VlenKind::Bytes).decode(vec![1, 0, 0, 0, 1, 0, 0, 0, 0xff], &repr(1, DataType::Bytes));
        assert_eq!(out.unwrap(), ChunkData::Variable(vec![vec![0xff]]));
        assert!(utf8.decode(vec![0; 4], &repr(0, DataType::UInt8)).is_err());
        assert!(utf8.encode(ChunkData::Variable(vec![vec![0xc3]]), &r).is_err());
        assert!(utf8.encode(ChunkData::Variable(vec![]), &r).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(items in proptest::collection::vec(".{0,12}", 0..20), bytes in any::<bool>()) {
            let (kind, dt) = if bytes { (VlenKind::Bytes, DataType::Bytes) } else { (VlenKind::Utf8, DataType::String) };
            let codec = VlenCodec::new(kind);
            let data = ChunkData::Variable(items.iter().map(|s| s.as_bytes().to_vec()).collect());
            let r = repr(items.len() as u64, dt);
            let enc = codec.encode(data.clone(), &r).unwrap();
            prop_assert_eq!(codec.decode(enc.clone(), &r).unwrap(), data);
            // Any truncation is an error, never a panic.
            for cut in 0..enc.len() {
                prop_assert!(codec.decode(enc[..cut].to_vec(), &r).is_err());
            }
        }
    }

    use crate::zarr::codec::registry::parse_for_test as chain;

    #[test]
    fn configuration() {
        use crate::zarr::data_type::DataType as D;
        let specs = chain(serde_json::json!([{"name": "vlen-utf8", "configuration": {}}]), &D::String, &[4]).unwrap();
        assert_eq!(specs[0].config::<VlenKind>(), Some(&VlenKind::Utf8));
        assert_eq!(
            serde_json::to_value(&specs[0]).unwrap(),
            serde_json::json!({"name": "vlen-utf8", "configuration": {}})
        );
        let specs = chain(serde_json::json!(["vlen-bytes"]), &D::Bytes, &[4]).unwrap();
        assert_eq!(specs[0].config::<VlenKind>(), Some(&VlenKind::Bytes));
        let e = chain(serde_json::json!(["vlen-utf8"]), &D::Int8, &[4]).unwrap_err();
        assert_eq!(e.path, "codecs[0]");
        assert!(e.message.contains("needs a variable-length data type"), "{e}");
        let e =
            chain(serde_json::json!([{"name": "vlen-bytes", "configuration": {"x": 1}}]), &D::Bytes, &[4]).unwrap_err();
        assert_eq!(e.path, "codecs[0].configuration.x");
    }
}
