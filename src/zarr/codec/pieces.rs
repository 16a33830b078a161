//! Decoding one unit (a chunk, or an inner chunk of a shard) in successive
//! pieces, so a server can send each piece while the next is decoded.
//!
//! Only a chain of the simplest shape streams: no array→array codec, a
//! `bytes` codec storing the elements as they are (little-endian, or
//! one-byte elements; big-endian ones are decoded whole), one compressor
//! that can decode
//! incrementally ([`BytesToBytesCodec::piece_format`]: zstd), and after it
//! any number of codecs of exact size (checksums such as `crc32c`), which
//! are decoded — verified — whole before decoding starts. Any other chain
//! is decoded the ordinary way ([`CodecChain::decode`]).
//!
//! Stored bytes are never trusted. A unit streams only when they *declare*
//! exactly its size: one zstd frame whose header records that content size
//! (several frames, a frame without a recorded size, or another size:
//! [`Start::Whole`], decoded whole here, so the caller reports a wrong size
//! as it always has). Every piece is then decoded into a buffer of exactly
//! its size: a frame that turns out to hold fewer bytes, more bytes, or
//! corrupt data fails at the piece where that shows ([`CodecError`]), and
//! zstd's own window never exceeds the declared (= expected) size, so a
//! hostile frame cannot make the decoder hold more than one unit.
//!
//! Each piece reserves its own size of the decode budget
//! ([`super::budget`]) while it decodes: a reservation held across pieces
//! would block other decodes' threads while this unit waits for the
//! socket. The unit's buffer (its size) is the caller's to account for.

mod direct;

use bytes::Bytes;
use zstd::zstd_safe;

use super::{budget, ArrayToBytesCodec, BytesToBytesCodec, CodecChain, CodecError, CodecResult};
use crate::zarr::chunk::{ChunkData, ChunkRepr};

/// A compressed format that decodes piece by piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PieceFormat {
    /// One zstd frame (RFC 8878) recording its content size.
    Zstd,
}

/// Where a unit of `repr` decoded by `chain` may stream: the compressor
/// (index into the chain's bytes→bytes codecs, all later ones being of
/// exact size); `None`: decode whole.
fn plan(chain: &CodecChain, repr: &ChunkRepr) -> Option<usize> {
    if !chain.array_to_array.is_empty() || repr.data_type.is_variable() {
        return None;
    }
    // Elements stored as they are (big-endian ones would be swapped in a
    // buffer zstd still reads back-references from: decoded whole).
    chain.array_to_bytes.byte_layout(repr).filter(|&u| u == 1)?;
    let (first, outer) = chain.bytes_to_bytes.split_first()?;
    first.piece_format()?;
    let size = chain.array_to_bytes.encoded_size(repr)?;
    // Checksums only: codecs whose output size is known from their input.
    outer.iter().all(|c| c.encoded_size(size).is_some()).then_some(0)
}

/// Whether a unit of `repr` decoded by `chain` may stream (the chain's
/// shape only: whether it does depends on its stored bytes, see
/// [`PieceDecoder::start`]).
#[must_use]
pub fn streams(chain: &CodecChain, repr: &ChunkRepr) -> bool {
    plan(chain, repr).is_some()
}

/// How a unit's decoding starts.
#[derive(Debug)]
pub enum Start {
    /// It streams: decode it piece by piece.
    Pieces(PieceDecoder),
    /// Its stored bytes do not declare its size (or the chain does not
    /// stream): decoded whole, as [`CodecChain::decode`] would.
    Whole(ChunkData),
}

/// A unit being decoded piece by piece, straight into its final buffer
/// (see `direct`): the pieces are ranges of it, no copy.
pub struct PieceDecoder {
    frame: direct::Frame,
    size: u64,
    /// Element size: pieces hold whole elements.
    es: usize,
    codec: String,
}

impl std::fmt::Debug for PieceDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceDecoder").field("size", &self.size).field("remaining", &self.remaining()).finish()
    }
}

impl PieceDecoder {
    /// Starts decoding `stored`, the stored bytes of a unit of `repr`
    /// encoded by `chain`: checksums are verified now; the unit streams
    /// when its compressed frame declares exactly the unit's size, else it
    /// is decoded whole here.
    ///
    /// # Errors
    /// A checksum mismatch; for a unit decoded whole, as
    /// [`CodecChain::decode`].
    pub fn start(chain: &CodecChain, repr: &ChunkRepr, stored: Vec<u8>) -> CodecResult<Start> {
        let Some(at) = plan(chain, repr) else {
            return chain.decode(stored, repr).map(Start::Whole);
        };
        let size = chain.array_to_bytes.encoded_size(repr).unwrap_or(0);
        let compressor = &chain.bytes_to_bytes[at];
        // The checksums (codecs after the compressor), outermost first, each
        // capped as the whole decode caps it: at the largest encoding of
        // what enters it, a compressed frame (which may be larger than the
        // unit: zstd stores data it cannot shrink in raw blocks, with
        // headers).
        let caps = chain.decode_caps(repr);
        let mut frame = stored;
        for (i, c) in chain.bytes_to_bytes.iter().enumerate().skip(at + 1).rev() {
            frame = c.decode(frame, caps[i])?;
        }
        if size > 0 && declares(compressor.as_ref(), &frame) == Some(size) {
            if let Ok(n) = usize::try_from(size) {
                let codec = compressor.name().to_owned();
                let frame = direct::Frame::new(frame, n).map_err(|e| CodecError::new(codec.clone(), e))?;
                let es = repr.data_type.size().unwrap_or(1).max(1);
                return Ok(Start::Pieces(Self { frame, size, es, codec }));
            }
        }
        let cap = usize::try_from(size).unwrap_or(usize::MAX);
        let _budget = budget::reserve(size);
        let bytes = compressor.decode(frame, cap)?;
        chain.array_to_bytes.decode(bytes, repr).map(Start::Whole)
    }

    /// The unit's size: the bytes all pieces come to.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes still to hand out.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.frame.remaining() as u64
    }

    /// Decodes the next piece: about `max` bytes (whole elements; a zstd
    /// block more at most), all that is left at the end; the last piece
    /// also checks that the frame ends there (its checksum verified, if it
    /// has one) with nothing after it. Each reserves its size of the
    /// decode budget while it decodes.
    ///
    /// # Errors
    /// Corrupt or truncated data, a frame that ends before its declared
    /// size or holds more; nothing left to decode.
    pub fn next_piece(&mut self, max: usize) -> CodecResult<Bytes> {
        if self.remaining() == 0 {
            return Err(self.error("no bytes left to decode".into()));
        }
        let want = (max - max % self.es).max(self.es);
        let _budget = budget::reserve(want as u64);
        self.frame.next(want, self.es).map_err(|e| self.error(e))
    }

    fn error(&self, reason: String) -> CodecError {
        CodecError::new(self.codec.clone(), format!("corrupt input: {reason}"))
    }
}

/// The decoded size `frame` declares for `codec`'s format: exactly one
/// frame recording its content size.
fn declares(codec: &dyn BytesToBytesCodec, frame: &[u8]) -> Option<u64> {
    match codec.piece_format()? {
        PieceFormat::Zstd => {
            let len = zstd_safe::find_frame_compressed_size(frame).ok()?;
            if len != frame.len() {
                return None;
            }
            zstd_safe::get_frame_content_size(frame).ok()?
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::codec::bytes_to_bytes::test_util::smooth_f32;
    use crate::zarr::data_type::DataType;
    use crate::zarr::metadata::codec::parse_codec_chain;

    /// A float32 chain of `codecs` for chunks of `n` elements, and their repr.
    fn chain(codecs: serde_json::Value, n: u64) -> (CodecChain, ChunkRepr) {
        let specs = parse_codec_chain(&codecs, "codecs", &DataType::Float32, &[n]).unwrap();
        let repr = ChunkRepr { shape: vec![n], data_type: DataType::Float32, fill_value: vec![0; 4] };
        (crate::zarr::codec::build::chain_from_v3(&specs, &repr).unwrap(), repr)
    }

    fn zstd_le() -> serde_json::Value {
        serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}])
    }

    /// All pieces of `stored`, `piece` bytes at a time.
    fn pieces(c: &CodecChain, repr: &ChunkRepr, stored: Vec<u8>, piece: usize) -> CodecResult<Vec<Vec<u8>>> {
        let Start::Pieces(mut d) = PieceDecoder::start(c, repr, stored)? else { panic!("does not stream") };
        let mut out = vec![];
        while d.remaining() > 0 && out.len() < 1_000_000 {
            out.push(d.next_piece(piece)?.to_vec());
        }
        Ok(out)
    }

    #[test]
    fn a_declared_frame_streams_in_pieces_equal_to_the_whole_decode() {
        let n = 300_000u64;
        let data = smooth_f32(n as usize);
        for codecs in [
            zstd_le(),
            serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "zstd", "configuration": {"level": 3, "checksum": true}}, "crc32c"]),
        ] {
            let (c, repr) = chain(codecs.clone(), n);
            assert!(streams(&c, &repr), "{codecs}");
            let stored = c.encode(ChunkData::Fixed(data.clone()), &repr).unwrap();
            for piece in [4, 1000, 65_536, 1 << 20] {
                let got = pieces(&c, &repr, stored.clone(), piece).unwrap();
                // About `piece` bytes each (a zstd block more at
                // most), whole elements, all of them in order.
                assert!(got.len() >= data.len().div_ceil(piece + (160 << 10)), "{codecs} {piece}");
                assert!(got.iter().all(|p| p.len() % 4 == 0 && !p.is_empty()), "{codecs} {piece}");
                assert_eq!(got.concat(), data, "{codecs} {piece}");
            }
        }
        let be = serde_json::json!([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd"}]);
        let (c, repr) = chain(be, n);
        assert!(!streams(&c, &repr), "big-endian elements are decoded whole");
        let stored = c.encode(ChunkData::Fixed(data.clone()), &repr).unwrap();
        assert!(
            matches!(PieceDecoder::start(&c, &repr, stored).unwrap(), Start::Whole(ChunkData::Fixed(b)) if b == data)
        );
    }

    #[test]
    fn incompressible_units_behind_checksums_stream_too() {
        // Random bytes: zstd stores them in raw blocks, so the frame the
        // checksums carry is larger than the unit.
        let n = 600_000u64;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..n * 4)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for codecs in [
            serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}, "crc32c"]),
            serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}, "crc32c",
                "crc32c"]),
        ] {
            let (c, repr) = chain(codecs.clone(), n);
            assert!(streams(&c, &repr), "{codecs}");
            let stored = c.encode(ChunkData::Fixed(data.clone()), &repr).unwrap();
            assert!(stored.len() > data.len(), "{codecs}: the frame is larger than the unit");
            assert_eq!(pieces(&c, &repr, stored, 1 << 20).unwrap().concat(), data, "{codecs}");
        }
    }

    #[test]
    fn other_chains_and_undeclared_sizes_decode_whole() {
        let n = 5000u64;
        let data = smooth_f32(n as usize);
        let (gz, repr) =
            chain(serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip"}]), n);
        assert!(!streams(&gz, &repr));
        let stored = gz.encode(ChunkData::Fixed(data.clone()), &repr).unwrap();
        assert!(
            matches!(PieceDecoder::start(&gz, &repr, stored).unwrap(), Start::Whole(ChunkData::Fixed(b)) if b == data)
        );
        let (t, repr_t) = chain(
            serde_json::json!([{"name": "transpose", "configuration": {"order": [0]}},
                {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}]),
            n,
        );
        assert!(!streams(&t, &repr_t), "an array -> array codec");
        // A frame without a recorded size; two frames.
        let (c, repr) = chain(zstd_le(), n);
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        std::io::Write::write_all(&mut e, &data).unwrap();
        let unrecorded = e.finish().unwrap();
        let half = |d: &[u8]| zstd::bulk::compress(d, 1).unwrap();
        let two = [half(&data[..8000]), half(&data[8000..])].concat();
        for stored in [unrecorded, two] {
            assert!(
                matches!(PieceDecoder::start(&c, &repr, stored).unwrap(), Start::Whole(ChunkData::Fixed(b)) if b == data)
            );
        }
        // A frame declaring another size is decoded whole, and fails as the
        // ordinary decode does.
        let short = half(&data[..4000]);
        assert!(PieceDecoder::start(&c, &repr, short).is_err());
    }

    #[test]
    fn hostile_frames_fail_at_a_piece_never_yield_wrong_bytes() {
        let n = 200_000u64;
        let data = smooth_f32(n as usize);
        let (c, repr) = chain(zstd_le(), n);
        let stored = c.encode(ChunkData::Fixed(data.clone()), &repr).unwrap();
        // Bytes flipped in the middle of a frame with a checksum (without
        // one, zstd cannot tell every corruption: such a frame decodes to
        // what the whole decode gives, see below).
        let checked = serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 1, "checksum": true}}]);
        let (cc, _) = chain(checked, n);
        let mut flipped = cc.encode(ChunkData::Fixed(data.clone()), &repr).unwrap();
        let mid = flipped.len() / 2;
        for b in &mut flipped[mid..mid + 16] {
            *b ^= 0x5a;
        }
        // Truncated (the header still declares the size).
        let truncated = stored[..stored.len() - 100].to_vec();
        // A frame declaring the right size whose blocks hold fewer bytes:
        // the header of the whole unit, the blocks of its first half.
        let fewer = {
            let first = zstd::bulk::compress(&data[..data.len() / 2], 1).unwrap();
            let (h_full, h_half) = (header_len(&stored), header_len(&first));
            [&stored[..h_full], &first[h_half..]].concat()
        };
        for (what, bad) in [("flipped", flipped), ("truncated", truncated), ("fewer", fewer)] {
            match PieceDecoder::start(&c, &repr, bad) {
                Err(_) => {}
                Ok(Start::Whole(_)) => panic!("{what}: decoded whole"),
                Ok(Start::Pieces(mut d)) => {
                    let mut got = vec![];
                    let mut failed = false;
                    for _ in 0..10_000 {
                        if d.remaining() == 0 {
                            break;
                        }
                        match d.next_piece(65_536) {
                            Ok(p) => got.extend_from_slice(&p),
                            Err(e) => {
                                assert!(e.reason.contains("corrupt"), "{what}: {e}");
                                failed = true;
                                break;
                            }
                        }
                    }
                    assert!(failed, "{what}: every piece decoded");
                    assert!(got.len() < data.len(), "{what}");
                }
            }
        }
        // Without a checksum, a flip either fails or streams what the
        // ordinary decode makes of the same bytes.
        let mut unchecked = stored.clone();
        let mid = unchecked.len() / 2;
        unchecked[mid] ^= 0x10;
        let whole = c.decode(unchecked.clone(), &repr);
        match pieces(&c, &repr, unchecked, 65_536) {
            Ok(p) => assert_eq!(ChunkData::Fixed(p.concat()), whole.unwrap()),
            Err(_) => assert!(whole.is_err()),
        }
        // A frame declaring a huge size goes the whole way, which refuses it
        // before allocating.
        let huge = zstd::bulk::compress(&vec![0u8; 64 << 20], 1).unwrap();
        let e = PieceDecoder::start(&c, &repr, huge).unwrap_err();
        assert!(e.reason.contains("claims"), "{e}");
        // A context that saw corrupt data is not reused: the next unit decodes.
        assert_eq!(pieces(&c, &repr, stored, 1 << 16).unwrap().concat(), data);
    }

    /// The length of a zstd frame header (magic, descriptor, window,
    /// content size) for frames written by `bulk::compress`.
    fn header_len(frame: &[u8]) -> usize {
        let fhd = frame[4];
        let single = fhd & 0x20 != 0;
        let fcs = match fhd >> 6 {
            0 => usize::from(single),
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let did = [0, 1, 2, 4][usize::from(fhd & 3)];
        4 + 1 + usize::from(!single) + did + fcs
    }
}
