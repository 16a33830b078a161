//! Partial reads against whole reads: a counting store records every
//! request and the bytes it moved.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::executor::block_on;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::super::*;
use crate::zarr::codec::ArrayToBytesCodec;
use crate::zarr::metadata::{ArrayMetadataV2, NodeMetadataV3};
use crate::zarr::selection::{DimIndexer, SelectionMode};

/// What a store was asked for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Counts {
    /// Whole values read.
    whole: usize,
    /// Byte ranges read.
    ranges: Vec<(String, Range<u64>)>,
    /// Bytes moved (whole values and ranges).
    bytes: u64,
}

/// An in-memory store that counts; `ranged` off: it keeps the trait's
/// default ranged read (the whole value), the "full read" to compare with.
#[derive(Default)]
struct Counting {
    map: Mutex<HashMap<String, Bytes>>,
    counts: Mutex<Counts>,
    ranged: bool,
    /// Answer ranged reads with a precondition failure (a value that changed).
    changing: bool,
}

impl Counting {
    fn ranged() -> Self {
        Self { ranged: true, ..Self::default() }
    }
    fn take(&self) -> Counts {
        std::mem::take(&mut *self.counts.lock().unwrap())
    }
    fn copy_from(&self, other: &Counting) {
        *self.map.lock().unwrap() = other.map.lock().unwrap().clone();
    }
    fn set(&self, key: &str, bytes: Vec<u8>) {
        self.map.lock().unwrap().insert(key.to_owned(), Bytes::from(bytes));
    }
}

#[async_trait]
impl ChunkSource for Counting {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        let Some(value) = self.map.lock().unwrap().get(key).cloned() else { return Ok(None) };
        let len = value.len() as u64;
        let whole = range.is_none();
        let r = match range {
            None => 0..len,
            Some(ByteRangeRequest::Suffix(n)) => len - n.min(len)..len,
            Some(ByteRangeRequest::Bounded(r)) => r.start.min(len)..r.end.min(len),
        };
        let mut c = self.counts.lock().unwrap();
        if whole {
            c.whole += 1;
        } else {
            c.ranges.push((key.to_owned(), r.clone()));
        }
        c.bytes += r.end - r.start;
        Ok(Some(value.slice(r.start as usize..r.end as usize)))
    }

    async fn get_ranges_sized(&self, key: &str, ranges: &[Range<u64>]) -> Result<Option<SizedParts>, SourceError> {
        if !self.ranged {
            return Ok(self.get(key, None).await?.map(|v| SizedParts {
                size: v.len() as u64,
                parts: ranges
                    .iter()
                    .map(|r| v.slice(r.start.min(v.len() as u64) as usize..r.end.min(v.len() as u64) as usize))
                    .collect(),
            }));
        }
        if self.changing {
            return Err(SourceError::Precondition(format!("{key} changed")));
        }
        let Some(value) = self.map.lock().unwrap().get(key).cloned() else { return Ok(None) };
        let len = value.len() as u64;
        let mut c = self.counts.lock().unwrap();
        let parts = ranges
            .iter()
            .map(|r| {
                c.ranges.push((key.to_owned(), r.clone()));
                let part = value.slice(r.start.min(len) as usize..r.end.min(len) as usize);
                c.bytes += part.len() as u64;
                part
            })
            .collect();
        Ok(Some(SizedParts { parts, size: len }))
    }
}

#[async_trait]
impl ChunkSink for Counting {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        self.map.lock().unwrap().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        self.map.lock().unwrap().remove(key);
        Ok(())
    }
}

fn v3(shape: &[u64], chunks: &[u64], data_type: &str, codecs: Value) -> ArrayDescription {
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": match data_type { "bool" => json!(false), t if t.starts_with("complex") => json!([0, 0]), _ => json!(0) }, "codecs": codecs});
    let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&doc, "").unwrap() else { panic!() };
    ArrayDescription::from_v3(&meta).unwrap()
}

fn v2(shape: &[u64], chunks: &[u64], dtype: &str, order: &str) -> ArrayDescription {
    let doc = json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype, "order": order,
        "compressor": null, "filters": null, "fill_value": 0});
    let meta = ArrayMetadataV2::from_json(&doc, "").unwrap();
    ArrayDescription::from_v2(&meta, Map::new()).unwrap()
}

fn bytes_codec(endian: &str) -> Value {
    json!([{"name": "bytes", "configuration": {"endian": endian}}])
}

/// The layouts under test: v3 little and big endian (2, 4, 8 bytes), one
/// byte, v2 C order little and big endian, and chains that read whole
/// (v2 F order, v3 transpose, a checksum).
fn layouts(shape: &[u64], chunks: &[u64]) -> Vec<(&'static str, ArrayDescription, bool)> {
    let rank = shape.len();
    let reversed: Vec<usize> = (0..rank).rev().collect();
    vec![
        ("v3 u16 little", v3(shape, chunks, "uint16", bytes_codec("little")), true),
        ("v3 f32 big", v3(shape, chunks, "float32", bytes_codec("big")), true),
        ("v3 c128 big", v3(shape, chunks, "complex128", bytes_codec("big")), true),
        ("v3 u8", v3(shape, chunks, "uint8", json!([{"name": "bytes"}])), true),
        ("v2 <u2 C", v2(shape, chunks, "<u2", "C"), true),
        ("v2 >i8 C", v2(shape, chunks, ">i8", "C"), true),
        ("v2 <u2 F", v2(shape, chunks, "<u2", "F"), rank < 2),
        (
            "v3 transpose",
            v3(
                shape,
                chunks,
                "uint16",
                json!([{"name": "transpose", "configuration": {"order": reversed}},
                       {"name": "bytes", "configuration": {"endian": "little"}}]),
            ),
            rank < 2,
        ),
        (
            "v3 sharded u16 big",
            v3(
                shape,
                chunks,
                "uint16",
                json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": chunks.iter().map(|c| c.div_ceil(2)).collect::<Vec<_>>(),
                    "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]),
            ),
            false,
        ),
        (
            "v3 crc32c",
            v3(
                shape,
                chunks,
                "uint16",
                json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]),
            ),
            false,
        ),
    ]
}

/// Every element a distinct pattern of its type's size.
fn pattern(desc: &ArrayDescription) -> ChunkData {
    let es = desc.data_type.size().unwrap();
    let n: u64 = desc.shape.iter().product();
    ChunkData::Fixed((0..n as usize * es).map(|i| (i * 7 + i / es) as u8).collect())
}

fn write_all(desc: &ArrayDescription, store: &Counting) {
    let whole = ArraySubset::from_shape(&desc.shape);
    block_on(write_region(desc, store, store, &whole, &pattern(desc))).unwrap();
    store.take();
}

fn boxed(start: &[u64], len: &[u64]) -> Selection {
    let dims = start.iter().zip(len).map(|(&start, &len)| DimIndexer::Slice { start, step: 1, len }).collect();
    Selection { dims, mode: SelectionMode::Basic }
}

/// Options that read chunks of any size by ranges (the tests' chunks are small).
fn opts(coalesce_gap: u64) -> RegionOptions {
    RegionOptions { coalesce_gap, partial_min_chunk: 0, ..RegionOptions::default() }
}

fn read(desc: &ArrayDescription, store: &Counting, sel: &Selection) -> Result<ChunkData, RegionError> {
    block_on(read_selection(desc, store, sel, &opts(4096)))
}

#[test]
fn byte_layouts_are_the_chains_without_compression() {
    for (name, desc, partial) in layouts(&[16, 16, 16], &[8, 8, 8]) {
        assert_eq!(desc.codecs.byte_layout(&desc.chunk_repr()).is_some(), partial, "{name}");
    }
    let big = v3(&[4], &[4], "complex128", bytes_codec("big"));
    assert_eq!(big.codecs.byte_layout(&big.chunk_repr()), Some(8), "complex swaps each component");
    let zstd =
        v3(&[4], &[4], "uint16", json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}]));
    assert_eq!(zstd.codecs.byte_layout(&zstd.chunk_repr()), None);
    let b = v3(&[4], &[4], "bool", json!([{"name": "bytes"}]));
    assert_eq!(b.codecs.byte_layout(&b.chunk_repr()), None, "bool bytes are checked on decode");
}

#[test]
fn a_plane_across_the_slowest_dimension_reads_one_range_per_chunk() {
    // 16×16×16 uint16 in 8×8×8 chunks (1024 bytes each): the plane [3, :, :]
    // needs 8×8 elements of the 4 chunks at i = 0: bytes 384..512 of each.
    let desc = v3(&[16, 16, 16], &[8, 8, 8], "uint16", bytes_codec("little"));
    let store = Counting::ranged();
    write_all(&desc, &store);
    let mut sel = boxed(&[0, 0, 0], &[16, 16, 16]);
    sel.dims[0] = DimIndexer::Index(3);
    let got = read(&desc, &store, &sel).unwrap();
    let counts = store.take();
    assert_eq!(counts.whole, 0);
    let mut ranges = counts.ranges.clone();
    ranges.sort_by(|a, b| a.0.cmp(&b.0));
    let want: Vec<(String, Range<u64>)> =
        ["c/0/0/0", "c/0/0/1", "c/0/1/0", "c/0/1/1"].iter().map(|k| ((*k).to_owned(), 384..512)).collect();
    assert_eq!(ranges, want);
    assert_eq!(counts.bytes, 4 * 128, "an eighth of each chunk moved");
    let full = Counting::default();
    full.copy_from(&store);
    assert_eq!(got, read(&desc, &full, &sel).unwrap());
    assert_eq!(full.take().bytes, 4 * 1024);
}

#[test]
fn far_apart_runs_are_separate_ranges_and_near_ones_coalesce() {
    // Rows 1 and 6 of one 16×64 uint8 chunk: 64-byte runs 320 bytes apart.
    let desc = v3(&[16, 64], &[16, 64], "uint8", json!([{"name": "bytes"}]));
    let store = Counting::ranged();
    write_all(&desc, &store);
    let sel = Selection {
        dims: vec![DimIndexer::List(vec![1, 6]), DimIndexer::Slice { start: 0, step: 1, len: 64 }],
        mode: SelectionMode::Orthogonal,
    };
    let gap = opts;
    let got = block_on(read_selection(&desc, &store, &sel, &gap(0))).unwrap();
    assert_eq!(store.take().ranges, vec![("c/0/0".to_owned(), 64..128), ("c/0/0".to_owned(), 384..448)]);
    assert_eq!(got, block_on(read_selection(&desc, &store, &sel, &gap(320))).unwrap());
    assert_eq!(store.take().ranges, vec![("c/0/0".to_owned(), 64..448)], "a gap of 320 coalesces");
    // Rows 0..9: more than half the chunk, read whole.
    let most = boxed(&[0, 0], &[9, 64]);
    read(&desc, &store, &most).unwrap();
    let counts = store.take();
    assert_eq!((counts.whole, counts.ranges.len()), (1, 0));
}

#[test]
fn more_ranges_than_the_limit_read_the_chunk_whole() {
    // Every other row of a 64×64 uint8 chunk, gap 0: 32 ranges > MAX_PARTIAL_RANGES.
    let desc = v3(&[64, 64], &[64, 64], "uint8", json!([{"name": "bytes"}]));
    let store = Counting::ranged();
    write_all(&desc, &store);
    let sel = Selection {
        dims: vec![DimIndexer::Slice { start: 0, step: 4, len: 16 }, DimIndexer::Slice { start: 0, step: 1, len: 8 }],
        mode: SelectionMode::Orthogonal,
    };
    let options = opts(0);
    block_on(read_selection(&desc, &store, &sel, &options)).unwrap();
    let counts = store.take();
    assert_eq!(counts.ranges.len(), MAX_PARTIAL_RANGES, "16 rows of 8 bytes: exactly the limit");
    let sel = Selection {
        dims: vec![DimIndexer::Slice { start: 0, step: 2, len: 32 }, DimIndexer::Slice { start: 0, step: 1, len: 8 }],
        mode: SelectionMode::Orthogonal,
    };
    block_on(read_selection(&desc, &store, &sel, &options)).unwrap();
    let counts = store.take();
    assert_eq!((counts.whole, counts.ranges.len()), (1, 0));
}

#[test]
fn inner_chunks_of_shards_read_only_their_needed_bytes() {
    // One 16×16×16 uint16 shard of 8×8×8 inner chunks (1024 bytes each,
    // contiguous, in the shard's order), index at the end: the plane
    // [3, :, :] needs bytes 384..512 of the 4 inner chunks at i = 0.
    let codecs = json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8, 8],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]);
    let desc = v3(&[16, 16, 16], &[16, 16, 16], "uint16", codecs);
    let store = Counting::ranged();
    write_all(&desc, &store);
    let mut sel = boxed(&[0, 0, 0], &[16, 16, 16]);
    sel.dims[0] = DimIndexer::Index(3);
    let got = block_on(read_selection(&desc, &store, &sel, &opts(0))).unwrap();
    let counts = store.take();
    let index = 8 * 16;
    assert_eq!(counts.whole, 0);
    assert_eq!(counts.ranges.len(), 1 + 4, "the index, then one range per inner chunk: {:?}", counts.ranges);
    assert!(counts.ranges[1..].iter().all(|(_, r)| r.end - r.start == 128 && r.start % 1024 == 384), "{counts:?}");
    assert_eq!(counts.bytes, index + 4 * 128);
    let whole = Counting::default();
    whole.copy_from(&store);
    let full = RegionOptions { coalesce_gap: 0, ..RegionOptions::default() };
    assert_eq!(got, block_on(read_selection(&desc, &whole, &sel, &full)).unwrap());
    assert_eq!(whole.take().bytes, index + 4 * 1024, "at the default minimum: whole inner chunks");
    // An index that declares another size for an inner chunk: read whole,
    // where decoding reports it.
    let mut shard = store.map.lock().unwrap()["c/0/0/0"].to_vec();
    let at = shard.len() - index as usize + 8;
    shard[at..at + 8].copy_from_slice(&1000u64.to_le_bytes());
    store.set("c/0/0/0", shard);
    let e = block_on(read_selection(&desc, &store, &sel, &opts(0))).unwrap_err();
    assert!(matches!(&e, RegionError::Codec { source, .. } if source.reason.contains("got 1000")), "{e:?}");
}

#[test]
fn chunks_under_the_minimum_are_read_whole() {
    let desc = v3(&[16, 16, 16], &[8, 8, 8], "uint16", bytes_codec("little"));
    let store = Counting::ranged();
    write_all(&desc, &store);
    let mut sel = boxed(&[0, 0, 0], &[16, 16, 16]);
    sel.dims[0] = DimIndexer::Index(3);
    let at = |min| RegionOptions { partial_min_chunk: min, ..RegionOptions::default() };
    block_on(read_selection(&desc, &store, &sel, &at(1024))).unwrap();
    assert_eq!(store.take().ranges.len(), 4, "1024-byte chunks, minimum 1024: by ranges");
    block_on(read_selection(&desc, &store, &sel, &at(1025))).unwrap();
    let counts = store.take();
    assert_eq!((counts.whole, counts.ranges.len()), (4, 0), "minimum 1025: whole");
    assert_eq!(RegionOptions::default().partial_min_chunk, MIN_PARTIAL_CHUNK);
}

#[test]
fn a_stored_chunk_of_the_wrong_size_is_an_error() {
    let desc = v3(&[16, 16], &[8, 8], "uint16", bytes_codec("little"));
    let store = Counting::ranged();
    write_all(&desc, &store);
    let sel = boxed(&[0, 0], &[1, 8]);
    for len in [126, 130, 0] {
        store.set("c/0/0", vec![1; len]);
        let e = read(&desc, &store, &sel).unwrap_err();
        // Short: the codec says so; long: more than any encoding of the
        // chunk can take, refused before decoding.
        let too_large = format!("{len} bytes, more than any encoding of its chunk can take (128)");
        assert!(
            matches!(&e, RegionError::Codec { key, source } if key == "c/0/0" && source.reason.contains(&format!("got {len}")))
                || matches!(&e, RegionError::Source { key, source: SourceError::TooLarge(m) } if key == "c/0/0" && *m == too_large && len > 128),
            "{len} bytes: {e:?}"
        );
        let counts = store.take();
        assert_eq!(counts.whole, 1, "read again whole to report the size");
    }
}

#[test]
fn missing_chunks_are_fill_and_a_changing_chunk_is_read_whole() {
    let desc = v3(&[16, 16], &[8, 8], "uint16", bytes_codec("little"));
    let store = Counting::ranged();
    let sel = boxed(&[1, 1], &[1, 14]);
    assert_eq!(read(&desc, &store, &sel).unwrap(), ChunkData::Fixed(vec![0; 28]));
    let counts = store.take();
    assert_eq!((counts.whole, counts.bytes), (0, 0));
    write_all(&desc, &store);
    let want = read(&desc, &store, &sel).unwrap();
    assert_eq!(store.take().ranges.len(), 2);
    let changing = Counting { ranged: true, changing: true, ..Counting::default() };
    changing.copy_from(&store);
    assert_eq!(read(&desc, &changing, &sel).unwrap(), want);
    assert_eq!(changing.take().whole, 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random selections read the same through byte ranges as whole, on
    /// every layout, and never move more bytes.
    #[test]
    fn partial_reads_equal_whole_reads(
        seeds in proptest::collection::vec(any::<u64>(), 3),
        gap in prop_oneof![Just(0u64), Just(16), Just(4096)],
    ) {
        let (shape, chunks) = ([12u64, 10, 20], [6u64, 4, 8]);
        let sel = crate::zarr::region::tests::pick_selection(&shape, &seeds, false);
        let options = opts(gap);
        for (name, desc, _) in layouts(&shape, &chunks) {
            let ranged = Counting::ranged();
            write_all(&desc, &ranged);
            let whole = Counting::default();
            whole.copy_from(&ranged);
            let got = block_on(read_selection(&desc, &ranged, &sel, &options)).unwrap();
            let want = block_on(read_selection(&desc, &whole, &sel, &options)).unwrap();
            prop_assert_eq!(&got, &want, "{}: {:?}", name, sel);
            let (r, w) = (ranged.take(), whole.take());
            prop_assert!(r.bytes <= w.bytes, "{}: {} bytes moved, whole reads {}", name, r.bytes, w.bytes);
            prop_assert_eq!(r.whole + r.ranges.len() > 0, w.whole + w.ranges.len() > 0);
        }
    }
}
