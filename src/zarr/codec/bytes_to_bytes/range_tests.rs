//! Tests of [`BytesToBytesCodec::decode_range`] for the codecs that decode
//! parts (zstd: a prefix; blosc: the blocks a range lies in): every part
//! equals the same bytes of the whole decode, and anything a whole decode
//! would check (size, checksum, truncation, garbage) answers `None`.

use super::blosc::{Blosc, BloscCname, BloscShuffle};
use super::test_util::smooth_f32;
use super::zstd::Zstd;
use crate::zarr::codec::{BytesToBytesCodec, RangeDecode};

/// Checks one part: covers `want`, within the value, equal to the whole
/// decode there.
fn check_part(codec: &dyn BytesToBytesCodec, encoded: &[u8], whole: &[u8], want: std::ops::Range<usize>) {
    let (at, part) = codec
        .decode_range(encoded, whole.len(), want.clone())
        .unwrap_or_else(|| panic!("{}: no part for {want:?} of {}", codec.name(), whole.len()));
    assert!(
        at <= want.start && at + part.len() >= want.end,
        "{}: {at}+{} does not cover {want:?}",
        codec.name(),
        part.len()
    );
    assert_eq!(&whole[at..at + part.len()], &part[..], "{}: part at {at} of {want:?} differs", codec.name());
}

#[test]
fn zstd_every_prefix_of_a_small_value() {
    let codec = Zstd::new(1, false).unwrap();
    let whole = smooth_f32(700);
    let encoded = codec.encode(whole.clone()).unwrap();
    assert_eq!(codec.range_decode(), Some(RangeDecode::Prefix));
    for k in 1..=whole.len() {
        let (at, part) = codec.decode_range(&encoded, whole.len(), 0..k).unwrap();
        assert_eq!(at, 0);
        assert!(part.len() >= k && part.len() <= whole.len());
        assert_eq!(&whole[..part.len()], &part[..], "prefix {k}");
    }
}

#[test]
fn zstd_prefixes_of_a_many_block_value() {
    // 1.2 MB of several 128 KiB blocks, partly incompressible.
    let mut whole = smooth_f32(200_000);
    whole.extend((0u32..100_000).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    for level in [-3, 1, 9] {
        let codec = Zstd::new(level, false).unwrap();
        let encoded = codec.encode(whole.clone()).unwrap();
        for k in (1..=whole.len()).step_by(65_537).chain([whole.len() - 1, whole.len()]) {
            check_part(&codec, &encoded, &whole, 0..k);
            check_part(&codec, &encoded, &whole, k / 2..k);
        }
    }
}

#[test]
fn zstd_declines_what_a_prefix_cannot_check() {
    let whole = smooth_f32(20_000);
    let plain = Zstd::new(1, false).unwrap();
    let encoded = plain.encode(whole.clone()).unwrap();
    let n = whole.len();
    // Another declared size than the chunk's, both ways.
    assert!(plain.decode_range(&encoded, n + 4, 0..8).is_none());
    assert!(plain.decode_range(&encoded, n - 4, 0..8).is_none());
    // A range past the value, or empty.
    assert!(plain.decode_range(&encoded, n, 0..n + 1).is_none());
    assert!(plain.decode_range(&encoded, n, 0..0).is_none());
    // Truncated, extended, garbage, empty.
    for cut in [1, 5, 13, encoded.len() / 2, encoded.len() - 1] {
        assert!(plain.decode_range(&encoded[..cut], n, 0..8).is_none(), "cut at {cut}");
    }
    let mut longer = encoded.clone();
    longer.extend_from_slice(&encoded);
    assert!(plain.decode_range(&longer, n, 0..8).is_none(), "two frames");
    assert!(plain.decode_range(&[0u8; 64], n, 0..8).is_none());
    assert!(plain.decode_range(&[], n, 0..8).is_none());
    // A checksum a prefix would not verify: decoded whole instead.
    let checked = Zstd::new(1, true).unwrap().encode(whole.clone()).unwrap();
    assert!(plain.decode_range(&checked, n, 0..8).is_none());
    // A frame without a recorded size (streamed).
    let mut streamed = Vec::new();
    {
        use std::io::Write;
        let mut enc = zstd::stream::write::Encoder::new(&mut streamed, 1).unwrap();
        enc.write_all(&whole).unwrap();
        enc.finish().unwrap();
    }
    assert_eq!(plain.decode(streamed.clone(), n).unwrap(), whole);
    assert!(plain.decode_range(&streamed, n, 0..8).is_none());
}

#[test]
fn zstd_corrupt_frames_decode_through_the_end_as_a_whole_decode_does() {
    // Every single-byte corruption of a frame: a prefix through the end
    // is declined exactly when the whole decode fails, and otherwise
    // equals it; a shorter prefix, when given, equals the whole decode's.
    let codec = Zstd::new(1, false).unwrap();
    let whole = smooth_f32(3_000);
    let encoded = codec.encode(whole.clone()).unwrap();
    let n = whole.len();
    let mut failures = 0;
    for i in 0..encoded.len() {
        let mut bad = encoded.clone();
        bad[i] ^= 0xa5;
        let full = codec.decode(bad.clone(), n);
        let part = codec.decode_range(&bad, n, 0..n);
        match (&full, &part) {
            (Ok(w), Some((0, p))) if w.len() == n => assert_eq!(p, w, "corruption at {i}"),
            (Ok(w), None) => assert_ne!(w.len(), n, "corruption at {i}: declined a valid frame"),
            (Err(_), None) => failures += 1,
            _ => panic!(
                "corruption at {i}: whole {:?}, part {:?}",
                full.as_ref().map(Vec::len),
                part.as_ref().map(|p| p.1.len())
            ),
        }
        if let (Ok(w), Some((_, p))) = (&full, codec.decode_range(&bad, n, 0..n / 3)) {
            assert_eq!(&w[..p.len()], &p[..], "corruption at {i}: a prefix differs");
        }
    }
    assert!(failures > 0, "some corruption makes the whole decode fail");
}

fn blosc(cname: BloscCname, shuffle: BloscShuffle, typesize: usize, blocksize: usize) -> Blosc {
    Blosc::new(cname, 5, shuffle, typesize, blocksize).unwrap()
}

/// Whether blosc offers a part for `want` of `encoded` (as its header
/// says): a stored-as-is buffer always; else when the blocks the part's
/// whole elements touch are at most 3/4 of the value.
fn blosc_offers(encoded: &[u8], size: usize, want: &std::ops::Range<usize>) -> bool {
    let (flags, typesize) = (encoded[2], usize::from(encoded[3]).max(1));
    if flags & 0x02 != 0 {
        return true;
    }
    let bs = u32::from_le_bytes(encoded[8..12].try_into().unwrap()) as usize;
    let (start, end) = (want.start / typesize * typesize, want.end.div_ceil(typesize) * typesize);
    ((end - 1) / bs - start / bs + 1) * bs * 4 <= size * 3
}

/// [`check_part`] where blosc offers a part, else checks it offers none.
fn check_blosc_part(codec: &Blosc, encoded: &[u8], whole: &[u8], want: std::ops::Range<usize>) {
    if blosc_offers(encoded, whole.len(), &want) {
        check_part(codec, encoded, whole, want);
    } else {
        assert!(codec.decode_range(encoded, whole.len(), want.clone()).is_none(), "{want:?}");
    }
}

#[test]
fn blosc_every_range_of_a_small_value() {
    // 2.8 KB in blocks of 256 bytes: every start and end.
    let whole = smooth_f32(700);
    for shuffle in [BloscShuffle::Noshuffle, BloscShuffle::Shuffle, BloscShuffle::Bitshuffle] {
        let codec = blosc(BloscCname::Lz4, shuffle, 4, 256);
        let encoded = codec.encode(whole.clone()).unwrap();
        assert_eq!(codec.range_decode(), Some(RangeDecode::Blocks));
        for start in (0..whole.len()).step_by(7) {
            for end in (start + 1..=whole.len()).step_by(13).chain([whole.len()]) {
                check_blosc_part(&codec, &encoded, &whole, start..end);
            }
        }
    }
}

#[test]
fn blosc_parts_whose_blocks_are_most_of_the_value_decode_whole() {
    // One block holds the whole value: c-blosc would decode all of it (into
    // scratch of twice its size) for any part, so no part is offered.
    let whole = smooth_f32(20_000);
    let one = blosc(BloscCname::Lz4, BloscShuffle::Shuffle, 4, 1 << 20);
    let encoded = one.encode(whole.clone()).unwrap();
    assert!(one.decode_range(&encoded, whole.len(), 0..4).is_none());
    assert_eq!(encoded[2] & 0x02, 0, "compressed, in blocks");
    assert_eq!(u32::from_le_bytes(encoded[8..12].try_into().unwrap()) as usize, whole.len(), "one block");
    assert!(one.decode_range(&encoded, whole.len(), 0..4).is_none());
    // Many blocks: one block gives a part, all of them do not.
    let big = smooth_f32(1_000_000);
    let many = blosc(BloscCname::Lz4, BloscShuffle::Shuffle, 4, 0);
    let encoded = many.encode(big.clone()).unwrap();
    let bs = u32::from_le_bytes(encoded[8..12].try_into().unwrap()) as usize;
    assert!(encoded[2] & 0x02 == 0 && bs * 4 <= big.len(), "several blocks of {bs}");
    check_part(&many, &encoded, &big, bs..bs + 4);
    assert!(many.decode_range(&encoded, big.len(), 4..big.len() - 4).is_none());
    // The flag c-blosc refuses ("from the future") is refused for parts too.
    let mut future = encoded.clone();
    future[2] |= 0x08;
    assert!(many.decode(future.clone(), big.len()).is_err());
    assert!(many.decode_range(&future, big.len(), bs..bs + 4).is_none());
}

#[test]
fn blosc_ranges_of_every_compressor_and_a_memcpyed_buffer() {
    let whole = smooth_f32(100_000);
    let noise: Vec<u8> = (0u32..100_003).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    for cname in [BloscCname::Blosclz, BloscCname::Lz4, BloscCname::Lz4hc, BloscCname::Zlib, BloscCname::Zstd] {
        let codec = blosc(cname, BloscShuffle::Shuffle, 2, 0);
        let encoded = codec.encode(whole.clone()).unwrap();
        for (start, end) in [(0, 1), (0, 20_000), (33_333, 33_334), (150_001, 250_000), (399_990, 400_000)] {
            check_blosc_part(&codec, &encoded, &whole, start..end);
        }
    }
    // Incompressible at clevel 0: stored as is (the memcpyed flag); an odd length, typesize 1.
    let codec = Blosc::new(BloscCname::Lz4, 0, BloscShuffle::Noshuffle, 1, 0).unwrap();
    let encoded = codec.encode(noise.clone()).unwrap();
    assert_eq!(encoded[2] & 0x02, 0x02, "memcpyed");
    for (start, end) in [(0, 1), (5, 50_000), (100_000, 100_003)] {
        check_part(&codec, &encoded, &noise, start..end);
    }
}

#[test]
fn blosc_declines_what_a_whole_decode_would_refuse() {
    let whole = smooth_f32(20_000);
    let codec = blosc(BloscCname::Lz4, BloscShuffle::Shuffle, 4, 4096);
    let encoded = codec.encode(whole.clone()).unwrap();
    let n = whole.len();
    assert!(codec.decode_range(&encoded, n + 4, 0..8).is_none(), "another size");
    assert!(codec.decode_range(&encoded, n - 4, 0..8).is_none(), "another size");
    assert!(codec.decode_range(&encoded, n, 0..n + 1).is_none(), "past the end");
    for cut in [0, 3, 15, 16, encoded.len() / 2, encoded.len() - 1] {
        assert!(codec.decode_range(&encoded[..cut], n, 0..8).is_none(), "cut at {cut}");
    }
    // An unknown format version.
    let mut v = encoded.clone();
    v[0] = 9;
    assert!(codec.decode_range(&v, n, 0..8).is_none());
    // Corrupt block data: c-blosc fails on that block (the whole decode does too).
    let mut bad = encoded.clone();
    let tail = bad.len() - 64;
    for b in &mut bad[tail..] {
        *b = 0xff;
    }
    if codec.decode(bad.clone(), n).is_err() {
        assert!(codec.decode_range(&bad, n, n - 8..n).is_none());
    }
}

#[test]
fn other_codecs_decode_whole() {
    let gzip = super::build_bytes_to_bytes("gzip", &serde_json::json!({"level": 1})).unwrap();
    assert_eq!(gzip.range_decode(), None);
    let encoded = gzip.encode(smooth_f32(100)).unwrap();
    assert!(gzip.decode_range(&encoded, 400, 0..8).is_none());
}
