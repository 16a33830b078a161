use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::zarr::codec::array_to_bytes::bytes::Endian;
use crate::zarr::codec::array_to_bytes::BytesCodec;
use crate::zarr::codec::BytesToBytesCodec;
use crate::zarr::metadata::codec::parse_codec_chain;

/// Builds the sharding codec of a one-codec v3 chain through the real parser
/// and builder.
fn from_json(codec: Value, dt: &DataType, shard: &[u64], fill: Vec<u8>) -> (ShardingCodec, ChunkRepr) {
    let specs = parse_codec_chain(&json!([codec]), "codecs", dt, shard).unwrap();
    let spec = specs[0].config::<ShardingConfig>().expect("sharding");
    let repr = ChunkRepr { shape: shard.to_vec(), data_type: dt.clone(), fill_value: fill };
    (spec.build(&repr).unwrap(), repr)
}

fn le() -> Value {
    json!({"name": "bytes", "configuration": {"endian": "little"}})
}

fn simple(shard: &[u64], inner: &[u64], location: &str) -> (ShardingCodec, ChunkRepr) {
    let codec = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": inner, "codecs": [le()],
        "index_codecs": [le()], "index_location": location}});
    from_json(codec, &DataType::UInt16, shard, 9u16.to_le_bytes().to_vec())
}

fn u16s(v: &[u16]) -> ChunkData {
    ChunkData::Fixed(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// A test-only crc32c (spec: `codecs/crc32c`), standing in until the real
/// one lands from engine-codecs.
#[derive(Debug)]
struct TestCrc32c;

impl BytesToBytesCodec for TestCrc32c {
    fn name(&self) -> &str {
        "crc32c"
    }
    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        Some(decoded + 4)
    }
    fn encode(&self, mut bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        let c = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&c.to_le_bytes());
        Ok(bytes)
    }
    fn decode(&self, mut bytes: Vec<u8>, _max: usize) -> CodecResult<Vec<u8>> {
        if bytes.len() < 4 {
            return Err(CodecError::new("crc32c", "too short"));
        }
        let tail = bytes.split_off(bytes.len() - 4);
        if crc32c::crc32c(&bytes).to_le_bytes().as_slice() != tail {
            return Err(CodecError::new("crc32c", "checksum mismatch"));
        }
        Ok(bytes)
    }
}

fn with_crc_index(shard: &[u64], inner: &[u64], location: IndexLocation) -> (ShardingCodec, ChunkRepr) {
    let repr = ChunkRepr { shape: shard.to_vec(), data_type: DataType::UInt16, fill_value: vec![9, 0] };
    let chain = || CodecChain::new(Vec::new(), Box::new(BytesCodec::new(Some(Endian::Little))), Vec::new());
    let index =
        CodecChain::new(Vec::new(), Box::new(BytesCodec::new(Some(Endian::Little))), vec![Box::new(TestCrc32c)]);
    (ShardingCodec::new(inner.to_vec(), chain(), index, location, &repr).unwrap(), repr)
}

#[test]
fn spec_example_layout() {
    // Spec: shard [64, 64], inner [32, 32], bytes + crc32c: 16 * 4 + 4 = 68 bytes.
    let (c, _) = with_crc_index(&[64, 64], &[32, 32], IndexLocation::End);
    assert_eq!(c.index_size(), 68);
    assert_eq!(c.index_byte_range(), ByteRangeRequest::Suffix(68));
    let (c, _) = with_crc_index(&[64, 64], &[32, 32], IndexLocation::Start);
    assert_eq!(c.index_byte_range(), ByteRangeRequest::Bounded(0..68));
}

#[test]
fn morton_order_is_zarr_pythons() {
    assert_eq!(morton_order(&[2, 2]), vec![vec![0, 0], vec![1, 0], vec![0, 1], vec![1, 1]]);
    // Non-power-of-two extents skip codes outside the grid.
    assert_eq!(morton_order(&[3, 1]), vec![vec![0, 0], vec![1, 0], vec![2, 0]]);
    assert_eq!(morton_order(&[1, 3]), vec![vec![0, 0], vec![0, 1], vec![0, 2]]);
    assert_eq!(morton_order(&[]), vec![Vec::<u64>::new()]);
    let o = morton_order(&[3, 5, 2]);
    assert_eq!(o.len(), 30);
    let mut sorted = o.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 30);
}

#[test]
fn encodes_the_binary_format() {
    let (c, repr) = simple(&[4], &[2], "end");
    // Inner chunk 0 is fill (omitted), inner chunk 1 is stored at offset 0.
    let bytes = c.encode(u16s(&[9, 9, 1, 2]), &repr).unwrap();
    let mut want: Vec<u8> = [1u16, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    for v in [u64::MAX, u64::MAX, 0, 4] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(bytes, want);
    assert_eq!(c.decode(bytes, &repr).unwrap(), u16s(&[9, 9, 1, 2]));

    let (c, repr) = simple(&[4], &[2], "start");
    let bytes = c.encode(u16s(&[3, 4, 9, 9]), &repr).unwrap();
    let mut want = Vec::new();
    for v in [32u64, 4, u64::MAX, u64::MAX] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.extend([3u16, 4].iter().flat_map(|v| v.to_le_bytes()));
    assert_eq!(bytes, want);
    assert_eq!(c.decode(bytes, &repr).unwrap(), u16s(&[3, 4, 9, 9]));
}

#[test]
fn all_fill_shard_is_nothing_to_store() {
    let (c, repr) = simple(&[2, 2], &[1, 2], "end");
    let fill = ChunkData::filled(&repr);
    assert_eq!(c.encode_shard(fill.clone(), &repr).unwrap(), None);
    // The trait must answer bytes: an index of empty entries, which decodes to fill.
    let bytes = c.encode(fill.clone(), &repr).unwrap();
    assert_eq!(bytes, vec![0xff; 32]);
    assert_eq!(c.decode(bytes, &repr).unwrap(), fill);
}

#[test]
fn crc32c_index_is_verified() {
    for location in [IndexLocation::Start, IndexLocation::End] {
        let (c, repr) = with_crc_index(&[4], &[2], location);
        let data = u16s(&[1, 2, 3, 4]);
        let mut bytes = c.encode(data.clone(), &repr).unwrap();
        assert_eq!(c.decode(bytes.clone(), &repr).unwrap(), data);
        let at = if location == IndexLocation::Start { 0 } else { bytes.len() - 1 };
        bytes[at] ^= 1;
        let e = c.decode(bytes, &repr).unwrap_err();
        assert!(e.reason.contains("shard index") && e.reason.contains("checksum"), "{e}");
    }
}

#[test]
fn nested_sharding_round_trips() {
    let inner_shard = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 2], "codecs": [le()],
        "index_codecs": [le()], "index_location": "start"}});
    let codec = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 4],
        "codecs": [inner_shard], "index_codecs": [le()]}});
    let (c, repr) = from_json(codec, &DataType::UInt16, &[4, 8], 9u16.to_le_bytes().to_vec());
    let mut values = vec![9u16; 32];
    values[5] = 1; // outer inner chunk (0, 1), nested (0, 0)
    values[30] = 2; // outer (1, 1), nested (1, 1)
    let data = u16s(&values);
    let bytes = c.encode_shard(data.clone(), &repr).unwrap().unwrap();
    assert_eq!(c.decode(bytes.clone(), &repr).unwrap(), data);
    let index = c.decode_index(bytes[bytes.len() - 64..].to_vec()).unwrap();
    assert_eq!(index.stored().count(), 2);
    assert!(index.inner_range(&[0, 0]).is_none());
    let r = index.inner_range(&[1, 1]).unwrap();
    let inner = c.decode_inner_chunk(bytes[r.start as usize..r.end as usize].to_vec(), &[1, 1]).unwrap();
    let mut want = vec![9u16; 8];
    want[6] = 2;
    assert_eq!(inner, u16s(&want));
}

#[test]
fn variable_length_inner_chunks() {
    let codec = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [2],
        "codecs": ["vlen-utf8"], "index_codecs": [le()]}});
    let (c, repr) = from_json(codec, &DataType::String, &[6], Vec::new());
    let items: Vec<Vec<u8>> = ["", "", "a", "", "bc", "déf"].iter().map(|s| s.as_bytes().to_vec()).collect();
    let data = ChunkData::Variable(items);
    let bytes = c.encode(data.clone(), &repr).unwrap();
    let index = c.decode_index(bytes[bytes.len() - 48..].to_vec()).unwrap();
    assert!(index.inner_range(&[0]).is_none(), "an all-fill inner chunk is omitted");
    assert_eq!(c.decode(bytes, &repr).unwrap(), data);
}

/// Writes `(offset, nbytes)` pairs as an index.
fn index_bytes(pairs: &[(u64, u64)]) -> Vec<u8> {
    pairs.iter().flat_map(|(o, n)| [o.to_le_bytes(), n.to_le_bytes()]).flatten().collect()
}

#[test]
fn hostile_shards_are_errors_naming_the_inner_chunk() {
    let (c, repr) = simple(&[4], &[2], "end");
    let body = [1u8, 0, 2, 0, 3, 0, 4, 0];
    let shard = |pairs: &[(u64, u64)]| [body.as_slice(), &index_bytes(pairs)].concat();
    let good = shard(&[(0, 4), (4, 4)]);
    assert_eq!(c.decode(good.clone(), &repr).unwrap(), u16s(&[1, 2, 3, 4]));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..10].to_vec(), "shorter than its 32-byte index"),
        (shard(&[(0, 4), (6, 4)]), "inner chunk [1]: bytes 6..10 overlap the shard index"),
        (shard(&[(0, 4), (100, 4)]), "inner chunk [1]: bytes 100..104 are past the end"),
        (shard(&[(0, 4), (u64::MAX - 1, 4)]), "inner chunk [1]: offset 18446744073709551614 + nbytes 4 overflows"),
        (shard(&[(u64::MAX, 4), (4, 4)]), "inner chunk [0]: offset 18446744073709551615 and nbytes 4"),
        (shard(&[(0, 3), (4, 4)]), "inner chunk [0]: bytes: expected 4 bytes"),
        (shard(&[(0, 4), (4, 5)]), "inner chunk [1]: nbytes 5 is more than any encoding of it can take (4)"),
    ];
    for (bytes, want) in cases {
        let e = c.decode(bytes, &repr).unwrap_err();
        assert_eq!(e.codec, "sharding_indexed");
        assert!(e.reason.contains(want), "{e} does not contain {want:?}");
    }
    // Truncating the good shard anywhere is an error, never a panic.
    for cut in 0..good.len() {
        assert!(c.decode(good[..cut].to_vec(), &repr).is_err(), "cut {cut}");
    }

    let (c, repr) = simple(&[4], &[2], "start");
    let shard = |pairs: &[(u64, u64)]| [index_bytes(pairs).as_slice(), body.as_slice()].concat();
    assert_eq!(c.decode(shard(&[(32, 4), (36, 4)]), &repr).unwrap(), u16s(&[1, 2, 3, 4]));
    let e = c.decode(shard(&[(32, 4), (30, 4)]), &repr).unwrap_err();
    assert!(e.reason.contains("inner chunk [1]: offset 30 overlaps the shard index"), "{e}");
    // An index alone (a suffix read) claiming a terabyte for a 4-byte inner
    // chunk: refused before any range of it is read.
    let e = c.decode_index(index_bytes(&[(32, 4), (36, 1 << 40)])).unwrap_err();
    assert!(e.reason.contains("inner chunk [1]: nbytes 1099511627776 is more than"), "{e}");
    let e = c.decode_index(index_bytes(&[(0, 4), (36, 4)])).unwrap_err();
    assert!(e.reason.contains("inner chunk [0]"), "{e}");
    assert!(c.decode_index(vec![0; 31]).is_err());
}

#[test]
fn coalescing() {
    let reads = coalesce_ranges(&[10..20, 0..10, 40..50, 22..30, 25..26], 0);
    assert_eq!(
        reads,
        vec![
            CoalescedRange { range: 0..20, members: vec![1, 0] },
            CoalescedRange { range: 22..30, members: vec![3, 4] },
            CoalescedRange { range: 40..50, members: vec![2] },
        ]
    );
    let reads = coalesce_ranges(&[10..20, 0..10, 40..50, 22..30], 2);
    assert_eq!(reads.iter().map(|r| r.range.clone()).collect::<Vec<_>>(), vec![0..30, 40..50]);
    assert!(coalesce_ranges(&[], 5).is_empty());
}

/// A shard case: shard shape, inner shape, which inner chunks are fill, values.
fn shard_case() -> impl Strategy<Value = (Vec<u64>, Vec<u64>, Vec<bool>, Vec<u16>, bool)> {
    (0usize..4)
        .prop_flat_map(|rank| (proptest::collection::vec(1u64..4, rank), proptest::collection::vec(1u64..4, rank)))
        .prop_flat_map(|(inner, per)| {
            let shard: Vec<u64> = inner.iter().zip(&per).map(|(i, p)| i * p).collect();
            let n_inner = per.iter().product::<u64>() as usize;
            let n = shard.iter().product::<u64>() as usize;
            (
                Just(shard),
                Just(inner),
                proptest::collection::vec(any::<bool>(), n_inner),
                proptest::collection::vec(0u16..4, n),
                any::<bool>(),
            )
        })
}

proptest! {
    #[test]
    fn round_trip((shard, inner, fill_mask, mut values, at_start) in shard_case()) {
        let (c, repr) = simple(&shard, &inner, if at_start { "start" } else { "end" });
        // Force the masked inner chunks to the fill value 9.
        let grid = crate::zarr::subset::RegularChunkGrid::new(shard.clone(), inner.clone()).unwrap();
        for (i, coords) in ArraySubset::from_shape(&grid.grid_shape()).indices().enumerate() {
            if fill_mask[i] {
                for idx in grid.chunk_subset(&coords).unwrap().indices() {
                    let lin = idx.iter().zip(&shard).fold(0u64, |a, (x, n)| a * n + x) as usize;
                    values[lin] = 9;
                }
            }
        }
        let data = u16s(&values);
        let encoded = c.encode_shard(data.clone(), &repr).unwrap();
        let Some(bytes) = encoded else {
            prop_assert!(values.iter().all(|&v| v == 9));
            return Ok(());
        };
        prop_assert_eq!(c.decode(bytes.clone(), &repr).unwrap(), data.clone());
        // The partial path agrees with the whole-shard path, inner chunk by inner chunk.
        let n = c.index_size() as usize;
        let index_bytes = if at_start { bytes[..n].to_vec() } else { bytes[bytes.len() - n..].to_vec() };
        let index = c.decode_index(index_bytes).unwrap();
        for coords in ArraySubset::from_shape(&grid.grid_shape()).indices() {
            let region = grid.chunk_subset(&coords).unwrap();
            let want = extract(&data, &shard, &region, 2).unwrap();
            match index.inner_range(&coords) {
                None => prop_assert!(want.is_fill(c.inner_chunk_repr())),
                Some(r) => {
                    let got = c.decode_inner_chunk(bytes[r.start as usize..r.end as usize].to_vec(), &coords).unwrap();
                    prop_assert_eq!(got, want);
                }
            }
        }
    }

    /// Arbitrary bytes and arbitrary indexes never panic the decoder.
    #[test]
    fn arbitrary_shards_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..24),
        pairs in proptest::collection::vec((prop_oneof![Just(u64::MAX), 0u64..40, any::<u64>()], prop_oneof![Just(u64::MAX), 0u64..40, any::<u64>()]), 2),
        at_start in any::<bool>(),
    ) {
        let (c, repr) = simple(&[4], &[2], if at_start { "start" } else { "end" });
        let index = index_bytes(&pairs);
        let shard = if at_start { [index.as_slice(), &body].concat() } else { [body.as_slice(), &index].concat() };
        if let Err(e) = c.decode(shard.clone(), &repr) {
            prop_assert_eq!(e.codec, "sharding_indexed");
        }
        let _ = c.decode_index(index);
        let _ = c.decode(body, &repr);
    }
}

/// zarr-python's default index codecs (bytes + crc32c), checked with the
/// test stand-in for crc32c until the real codec lands from engine-codecs.
#[test]
fn zarr_python_crc32c_index() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine/sharded");
    let shard = std::fs::read(dir.join("v3_sharded_crc32c_uint8/c/0/0")).unwrap();
    let expected = std::fs::read(dir.join("v3_sharded_crc32c_uint8.expected.bin")).unwrap();
    let repr = ChunkRepr { shape: vec![4, 6], data_type: DataType::UInt8, fill_value: vec![7] };
    let inner = CodecChain::new(Vec::new(), Box::new(BytesCodec::new(None)), Vec::new());
    let index =
        CodecChain::new(Vec::new(), Box::new(BytesCodec::new(Some(Endian::Little))), vec![Box::new(TestCrc32c)]);
    let c = ShardingCodec::new(vec![2, 3], inner, index, IndexLocation::End, &repr).unwrap();
    let want: Vec<u8> = (0..4).flat_map(|r| expected[r * 9..r * 9 + 6].to_vec()).collect();
    let decoded = c.decode(shard.clone(), &repr).unwrap();
    assert_eq!(decoded, ChunkData::Fixed(want));
    assert_eq!(c.encode_shard(decoded, &repr).unwrap().unwrap(), shard);
}
