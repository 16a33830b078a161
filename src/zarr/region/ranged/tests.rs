//! The region engine decoding parts of compressed chunks: random
//! selections of compressed arrays (zstd, blosc, v2 and v3, big-endian,
//! inner chunks of shards) equal the same selections of an uncompressed
//! copy; damaged chunks fail as a whole read of them does.

use std::sync::Mutex;

use futures::executor::block_on;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::super::tests::MemoryStore as Memory;
use super::super::*;
use super::{needed_span, ranged_span};
use crate::zarr::codec::array_to_bytes::sharding::ShardIndex;
use crate::zarr::codec::RangeDecode;
use crate::zarr::metadata::{ArrayMetadataV2, NodeMetadataV3};
use crate::zarr::selection::{DimIndexer, SelectionMode};

const SHAPE: [u64; 3] = [24, 20, 16];
const CHUNKS: [u64; 3] = [12, 10, 16];

fn v3(data_type: &str, codecs: Value) -> ArrayDescription {
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": SHAPE, "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": CHUNKS}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": if data_type.starts_with("complex") { json!([0, 0]) } else { json!(0) }, "codecs": codecs});
    let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&doc, "").unwrap() else { panic!() };
    ArrayDescription::from_v3(&meta).unwrap()
}

fn v2(dtype: &str, compressor: Value) -> ArrayDescription {
    let doc = json!({"zarr_format": 2, "shape": SHAPE, "chunks": CHUNKS, "dtype": dtype, "order": "C",
        "compressor": compressor, "filters": null, "fill_value": 0});
    let meta = ArrayMetadataV2::from_json(&doc, "").unwrap();
    ArrayDescription::from_v2(&meta, Map::new()).unwrap()
}

fn bytes(endian: &str) -> Value {
    json!({"name": "bytes", "configuration": {"endian": endian}})
}

fn zstd() -> Value {
    json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}})
}

fn blosc(typesize: u64) -> Value {
    json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
        "typesize": typesize, "blocksize": 256}})
}

/// (name, compressed array, its uncompressed twin).
fn arrays() -> Vec<(&'static str, ArrayDescription, ArrayDescription)> {
    let inner = [6u64, 5, 16];
    vec![
        ("v3 u16 zstd", v3("uint16", json!([bytes("little"), zstd()])), v3("uint16", json!([bytes("little")]))),
        ("v3 f64 big zstd", v3("float64", json!([bytes("big"), zstd()])), v3("float64", json!([bytes("big")]))),
        ("v3 u16 blosc", v3("uint16", json!([bytes("little"), blosc(2)])), v3("uint16", json!([bytes("little")]))),
        (
            "v2 <u2 blosc",
            v2("<u2", json!({"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 128})),
            v2("<u2", Value::Null),
        ),
        (
            // Blocks of 200 bytes: decoded in spans whose ends fall inside
            // rows (of 32 bytes).
            "v2 <u2 blosc lz4",
            v2("<u2", json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 200})),
            v2("<u2", Value::Null),
        ),
        ("v2 >i4 zstd", v2(">i4", json!({"id": "zstd", "level": 1})), v2(">i4", Value::Null)),
        (
            "v3 sharded u16 zstd",
            v3(
                "uint16",
                json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": inner,
                    "codecs": [bytes("little"), zstd()], "index_codecs": [bytes("little"), {"name": "crc32c"}]}}]),
            ),
            v3("uint16", json!([bytes("little")])),
        ),
    ]
}

/// Smooth values (they compress), distinct per element.
fn values(desc: &ArrayDescription) -> ChunkData {
    let es = desc.data_type.size().unwrap();
    let n: u64 = SHAPE.iter().product();
    ChunkData::Fixed(
        (0..n as usize).flat_map(|i| (0..es).map(move |b| ((i >> (8 * b.min(3))) as u8) ^ (b as u8))).collect(),
    )
}

fn stored(desc: &ArrayDescription) -> Memory {
    let store = Memory::default();
    let whole = ArraySubset::from_shape(&desc.shape);
    block_on(write_region(desc, &store, &store, &whole, &values(desc))).unwrap();
    store
}

fn boxed(start: &[u64], len: &[u64]) -> Selection {
    let dims = start.iter().zip(len).map(|(&start, &len)| DimIndexer::Slice { start, step: 1, len }).collect();
    Selection { dims, mode: SelectionMode::Basic }
}

fn read(desc: &ArrayDescription, store: &Memory, sel: &Selection) -> Result<ChunkData, RegionError> {
    block_on(read_selection(desc, store, sel, &RegionOptions::default()))
}

#[test]
fn compressed_chains_over_bytes_decode_ranges() {
    for (name, desc, plain) in arrays() {
        let (codecs, repr) = match &desc.sharding {
            Some(s) => (s.inner_codecs(), s.inner_chunk_repr().clone()),
            None => (&desc.codecs, desc.chunk_repr()),
        };
        assert!(codecs.range_layout(&repr).is_some(), "{name}");
        assert!(plain.codecs.range_layout(&plain.chunk_repr()).is_none(), "{name}: uncompressed");
    }
    // A checksum, a transpose or two compressors: decoded whole.
    for codecs in [
        json!([bytes("little"), zstd(), {"name": "crc32c"}]),
        json!([{"name": "transpose", "configuration": {"order": [2, 1, 0]}}, bytes("little"), zstd()]),
        json!([bytes("little"), zstd(), zstd()]),
        json!([bytes("little"), {"name": "gzip", "configuration": {"level": 1}}]),
    ] {
        let d = v3("uint16", codecs.clone());
        assert!(d.codecs.range_layout(&d.chunk_repr()).is_none(), "{codecs}");
    }
}

#[test]
fn the_needed_span_of_a_box_and_when_it_pays() {
    let desc = v3("uint16", json!([bytes("little"), zstd()]));
    let plan = Arc::new(plan_read(&desc, boxed(&[10, 3, 2], &[4, 4, 5]), 1 << 20).unwrap());
    let slab = plan.slabs().next().unwrap();
    let units: Vec<_> = slab.units().collect();
    // Chunk (0, 0): rows 10..12, columns 3..7, elements 2..7 of 16.
    let first = units.iter().find(|u| u.coords == [0, 0, 0]).unwrap();
    let (row, col) = (10 * 16, 16);
    assert_eq!(needed_span(&first.copy, 2), Some(2 * (10 * row + 3 * col + 2)..2 * (11 * row + 6 * col + 7)));
    // It ends in the last sixth of the chunk: a prefix would cost nearly
    // the whole chunk, blocks a sixth of it.
    let unit_bytes = 2 * 12 * 10 * 16;
    let span = needed_span(&first.copy, 2).unwrap();
    let span = span.start as usize..span.end as usize;
    assert_eq!(ranged_span(&first.copy, 2, unit_bytes, RangeDecode::Prefix), None);
    assert_eq!(ranged_span(&first.copy, 2, unit_bytes, RangeDecode::Blocks), Some(span));
    // Chunk (1, 0): rows 0..2 of 12, a sixth: decoded up to there.
    let second = units.iter().find(|u| u.coords == [1, 0, 0]).unwrap();
    let want = 2 * (3 * col + 2) as usize..2 * (row + 6 * col + 7) as usize;
    assert_eq!(ranged_span(&second.copy, 2, unit_bytes, RangeDecode::Prefix), Some(want.clone()));
    assert_eq!(ranged_span(&second.copy, 2, unit_bytes, RangeDecode::Blocks), Some(want));
    // A box of whole rows 0..10 of 12: more than 3/4 either way.
    let plan = Arc::new(plan_read(&desc, boxed(&[0, 0, 0], &[10, 10, 16]), 1 << 20).unwrap());
    let unit = plan.slabs().next().unwrap().units().next().unwrap();
    assert_eq!(ranged_span(&unit.copy, 2, unit_bytes, RangeDecode::Prefix), None);
    assert_eq!(ranged_span(&unit.copy, 2, unit_bytes, RangeDecode::Blocks), None);
}

#[test]
fn a_damaged_chunk_fails_as_a_whole_read_of_it() {
    for (name, desc, _) in arrays().into_iter().filter(|(_, d, _)| d.sharding.is_none()) {
        let store = stored(&desc);
        let key = desc.chunk_key(&[1, 0, 0]);
        let good = store.value(&key).unwrap().to_vec();
        let first_rows = boxed(&[12, 0, 0], &[1, 10, 16]);
        let whole_chunk = boxed(&[12, 0, 0], &[12, 10, 16]);
        // A valid encoding of another size than the chunk's.
        let other_size = if name.contains("blosc") {
            use crate::zarr::codec::bytes_to_bytes::blosc::{Blosc, BloscCname, BloscShuffle};
            use crate::zarr::codec::BytesToBytesCodec;
            Blosc::new(BloscCname::Lz4, 5, BloscShuffle::Shuffle, 2, 0).unwrap().encode(vec![7u8; 100]).unwrap()
        } else {
            ::zstd::bulk::compress(&[7u8; 100], 1).unwrap()
        };
        let damaged = [good[..good.len() / 2].to_vec(), good[..good.len() - 1].to_vec(), vec![0x28, 0xb5], other_size];
        for bad in damaged {
            store.insert(&key, bad.clone());
            let part = read(&desc, &store, &first_rows).unwrap_err().to_string();
            let whole = read(&desc, &store, &whole_chunk).unwrap_err().to_string();
            assert_eq!(part, whole, "{name}: {} bytes", bad.len());
            assert!(part.contains(&key), "{name}: {part}");
        }
        store.insert(&key, good);
        read(&desc, &store, &first_rows).unwrap();
    }
}

#[test]
fn blocks_a_selection_does_not_need_are_not_decoded() {
    // v2 blosc in blocks of 128 bytes: the last block of chunk (1, 0, 0)
    // damaged. A whole read of the chunk fails; its first row is in the
    // first block and reads (like a byte-range read of an uncompressed
    // chunk, what is not read is not checked).
    let (_, desc, _) = arrays().into_iter().find(|(n, _, _)| *n == "v2 <u2 blosc").unwrap();
    let store = stored(&desc);
    let key = desc.chunk_key(&[1, 0, 0]);
    let mut bad = store.value(&key).unwrap().to_vec();
    let n = bad.len();
    for b in &mut bad[n - 8..] {
        *b ^= 0xff;
    }
    store.insert(&key, bad);
    assert!(read(&desc, &store, &boxed(&[12, 0, 0], &[12, 10, 16])).is_err());
    let got = read(&desc, &store, &boxed(&[12, 0, 0], &[1, 2, 16])).unwrap();
    let plain = v2("<u2", Value::Null);
    let want = read(&plain, &stored(&plain), &boxed(&[12, 0, 0], &[1, 2, 16])).unwrap();
    assert_eq!(got, want);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Random selections (slices either way, lists, indexes) read the same
    /// from the compressed arrays as from their uncompressed twins.
    #[test]
    fn random_selections_equal_the_uncompressed_twin(seeds in proptest::collection::vec(any::<u64>(), 3)) {
        let sel = crate::zarr::region::tests::pick_selection(&SHAPE, &seeds, false);
        for (name, desc, plain) in arrays() {
            let got = read(&desc, &stored(&desc), &sel).unwrap();
            let want = read(&plain, &stored(&plain), &sel).unwrap();
            prop_assert_eq!(&got, &want, "{}: {:?}", name, sel);
        }
    }

    /// Random boxes, the common case.
    #[test]
    fn random_boxes_equal_the_uncompressed_twin(start in proptest::collection::vec(0u64..24, 3), len in proptest::collection::vec(1u64..24, 3)) {
        let start: Vec<u64> = start.iter().zip(SHAPE).map(|(s, n)| s % n).collect();
        let len: Vec<u64> = len.iter().zip(&start).zip(SHAPE).map(|((l, s), n)| 1 + (l - 1) % (n - s)).collect();
        let sel = boxed(&start, &len);
        for (name, desc, plain) in arrays() {
            let got = read(&desc, &stored(&desc), &sel).unwrap();
            let want = read(&plain, &stored(&plain), &sel).unwrap();
            prop_assert_eq!(&got, &want, "{}: {:?}", name, sel);
        }
    }
}

#[test]
fn planes_across_the_fastest_dimension_gather_every_element() {
    // Single elements at a stride (the copy's gather), for every element
    // size, against indexing the values directly.
    for data_type in ["uint8", "uint16", "float32", "float64", "complex128"] {
        let desc = v3(data_type, json!([bytes("little"), zstd()]));
        let es = desc.data_type.size().unwrap();
        let store = stored(&desc);
        let ChunkData::Fixed(all) = values(&desc) else { panic!() };
        for (z, lo, hi) in [(7u64, 0u64, 24u64), (15, 5, 19), (0, 11, 13)] {
            let sel = Selection {
                dims: vec![
                    DimIndexer::Slice { start: lo, step: 1, len: hi - lo },
                    DimIndexer::Slice { start: 0, step: 1, len: SHAPE[1] },
                    DimIndexer::Index(z),
                ],
                mode: SelectionMode::Basic,
            };
            let ChunkData::Fixed(got) = read(&desc, &store, &sel).unwrap() else { panic!() };
            let mut want = Vec::new();
            for y in lo..hi {
                for x in 0..SHAPE[1] {
                    let i = ((y * SHAPE[1] + x) * SHAPE[2] + z) as usize * es;
                    want.extend_from_slice(&all[i..i + es]);
                }
            }
            assert_eq!(got, want, "{data_type} [{lo}:{hi}, :, {z}]");
        }
    }
}

/// A cache that records what a read inserts (and keeps nothing for later).
struct Recording {
    keeps: bool,
    chunks: Mutex<Vec<(String, usize)>>,
    inner: Mutex<Vec<(Vec<u64>, usize)>>,
}

#[async_trait]
impl UnitCache for Recording {
    async fn chunk(&self, _: &str) -> Result<Option<Option<Arc<ChunkData>>>, SourceError> {
        Ok(None)
    }
    fn ticket(&self) -> u64 {
        0
    }
    fn insert_chunk(&self, key: &str, _: Option<String>, data: Option<Arc<ChunkData>>, _: u64) {
        let len = match data.as_deref() {
            Some(ChunkData::Fixed(b)) => b.len(),
            _ => 0,
        };
        self.chunks.lock().unwrap().push((key.to_owned(), len));
    }
    async fn index(&self, _: &str) -> Result<Option<IndexEntry>, SourceError> {
        Ok(None)
    }
    fn insert_index(&self, _: &str, _: Option<String>, _: Option<Arc<ShardIndex>>, _: u64) -> u64 {
        0
    }
    fn inner(&self, _: &str, _: &[u64], _: u64) -> Option<Arc<ChunkData>> {
        None
    }
    fn insert_inner(&self, _: &str, inner: Vec<u64>, _: u64, data: Arc<ChunkData>, _: u64) {
        let len = match &*data {
            ChunkData::Fixed(b) => b.len(),
            ChunkData::Variable(_) => 0,
        };
        self.inner.lock().unwrap().push((inner, len));
    }
    fn keeps_units(&self) -> bool {
        self.keeps
    }
}

#[test]
fn a_cache_that_keeps_units_gets_whole_chunks_and_one_that_does_not_gets_none() {
    // The first row of chunk (1, 0, 0) and of inner chunk (2, 0, 0): a part
    // would do, but a cache that keeps units is given the whole unit.
    for (name, desc, _) in arrays().into_iter().filter(|(n, _, _)| ["v3 u16 zstd", "v3 sharded u16 zstd"].contains(n)) {
        let store = stored(&desc);
        let sel = boxed(&[12, 0, 0], &[1, 10, 16]);
        let unit_bytes = 2 * match &desc.sharding {
            Some(s) => s.inner_chunk_shape().iter().product::<u64>(),
            None => CHUNKS.iter().product::<u64>(),
        } as usize;
        for keeps in [true, false] {
            let cache = Arc::new(Recording { keeps, chunks: Mutex::default(), inner: Mutex::default() });
            let ctx = ReadCtx::inline(&desc, cache.clone(), true, &RegionOptions::default());
            let plan = Arc::new(plan_read(&desc, sel.clone(), 1 << 20).unwrap());
            let mut got = Vec::new();
            for slab in plan.slabs() {
                let Some(SlabData::Fixed(b)) = block_on(read_slab(&ctx, &store, slab, u64::MAX)).unwrap() else {
                    panic!()
                };
                got.extend(b);
            }
            assert_eq!(ChunkData::Fixed(got), read(&desc, &store, &sel).unwrap(), "{name}");
            let inserted: Vec<usize> = if desc.sharding.is_some() {
                cache.inner.lock().unwrap().iter().map(|e| e.1).collect()
            } else {
                cache.chunks.lock().unwrap().iter().map(|e| e.1).collect()
            };
            if keeps {
                assert!(!inserted.is_empty(), "{name}: nothing cached");
                assert!(inserted.iter().all(|&n| n == unit_bytes), "{name}: {inserted:?}, whole is {unit_bytes}");
            } else {
                assert!(inserted.is_empty(), "{name}: a part was cached: {inserted:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A unit copied span by span (spans of any length, starting anywhere,
    /// inside an element too; every kind of selection) fills the slab
    /// exactly as the unit copied whole does.
    #[test]
    fn a_unit_copied_in_spans_equals_it_copied_whole(
        seeds in proptest::collection::vec(any::<u64>(), 3),
        coordinate in any::<bool>(),
        cuts in proptest::collection::vec(1usize..700, 1..8),
        pick in 0usize..5,
    ) {
        let data_type = ["uint8", "uint16", "float32", "float64", "complex128"][pick];
        let desc = v3(data_type, json!([bytes("little")]));
        let es = desc.data_type.size().unwrap();
        let unit_elems: u64 = CHUNKS.iter().product();
        let unit_bytes = unit_elems as usize * es;
        let src: Vec<u8> = (0..unit_bytes).map(|i| (i * 7 + i / 251) as u8).collect();
        let sel = crate::zarr::region::tests::pick_selection(&SHAPE, &seeds, coordinate);
        let plan = Arc::new(plan_read(&desc, sel, 1 << 20).unwrap());
        for slab in plan.slabs() {
            let n = slab.len as usize * es;
            for unit in slab.units() {
                let whole = Mutex::new(SlabData::Fixed(vec![0xEE; n]));
                copy::copy_unit(&ChunkData::Fixed(src.clone()), unit_elems, &unit.copy, &whole, es, "k").unwrap();
                let spans = Mutex::new(SlabData::Fixed(vec![0xEE; n]));
                let (mut at, mut i) = (0, 0);
                while at < unit_bytes {
                    let end = (at + cuts[i % cuts.len()]).min(unit_bytes);
                    copy::copy_unit_span(&src[at..end], at, &unit.copy, &spans, es).unwrap();
                    (at, i) = (end, i + 1);
                }
                let (SlabData::Fixed(a), SlabData::Fixed(b)) = (whole.into_inner().unwrap(), spans.into_inner().unwrap()) else {
                    panic!()
                };
                prop_assert!(a == b, "{} {:?}: unit {:?}", data_type, cuts, unit.coords);
            }
        }
    }
}
