use std::collections::HashMap;
use std::sync::Mutex;

use futures::executor::block_on;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::zarr::metadata::NodeMetadataV3;

/// An in-memory store that logs every read (also used by the ranged
/// decoding tests).
#[derive(Default)]
pub(super) struct MemoryStore {
    map: Mutex<HashMap<String, Bytes>>,
    reads: Mutex<Vec<(String, Option<ByteRangeRequest>)>>,
}

impl MemoryStore {
    fn take_reads(&self) -> Vec<(String, Option<ByteRangeRequest>)> {
        std::mem::take(&mut *self.reads.lock().unwrap())
    }

    pub(super) fn insert(&self, key: &str, bytes: Vec<u8>) {
        self.map.lock().unwrap().insert(key.to_owned(), Bytes::from(bytes));
    }

    pub(super) fn value(&self, key: &str) -> Option<Bytes> {
        self.map.lock().unwrap().get(key).cloned()
    }

    fn keys(&self) -> Vec<String> {
        let mut k: Vec<String> = self.map.lock().unwrap().keys().cloned().collect();
        k.sort();
        k
    }
}

#[async_trait]
impl ChunkSource for MemoryStore {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        self.reads.lock().unwrap().push((key.to_owned(), range.clone()));
        let Some(value) = self.value(key) else { return Ok(None) };
        let len = value.len() as u64;
        Ok(Some(match range {
            None => value,
            Some(ByteRangeRequest::Suffix(n)) => value.slice((len - n.min(len)) as usize..),
            Some(ByteRangeRequest::Bounded(r)) => {
                if r.start > len {
                    return Err(SourceError::RangeNotSatisfiable(format!("{key}: {}..{} of {len}", r.start, r.end)));
                }
                value.slice(r.start as usize..r.end.min(len) as usize)
            }
        }))
    }
}

#[async_trait]
impl ChunkSink for MemoryStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        self.map.lock().unwrap().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        self.map.lock().unwrap().remove(key);
        Ok(())
    }
}

fn le() -> Value {
    json!({"name": "bytes", "configuration": {"endian": "little"}})
}

/// A uint16 array with fill value 9; `inner` set: sharded with those inner chunks.
fn array(shape: &[u64], chunks: &[u64], inner: Option<&[u64]>, location: &str) -> ArrayDescription {
    let codecs = match inner {
        Some(inner) => json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": inner,
            "codecs": [le()], "index_codecs": [le()], "index_location": location}}]),
        None => json!([le()]),
    };
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 9, "codecs": codecs});
    let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&doc, "").unwrap() else { panic!() };
    ArrayDescription::from_v3(&meta).unwrap()
}

fn u16s(v: &[u16]) -> ChunkData {
    ChunkData::Fixed(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

fn region(start: &[u64], shape: &[u64]) -> ArraySubset {
    ArraySubset::new(start.to_vec(), shape.to_vec()).unwrap()
}

/// One shard `c/0` of 8 inner chunks of 2 uint16 (4 bytes each), index at the end.
fn one_shard(location: &str) -> (ArrayDescription, MemoryStore) {
    let a = array(&[16], &[16], Some(&[2]), location);
    let store = MemoryStore::default();
    let values: Vec<u16> = (0..16).collect();
    block_on(write_region(&a, &store, &store, &region(&[0], &[16]), &u16s(&values))).unwrap();
    store.take_reads();
    (a, store)
}

#[test]
fn one_inner_chunk_is_one_index_read_and_one_range_read() {
    let (a, store) = one_shard("end");
    let got = block_on(read_region(&a, &store, &region(&[5], &[1]))).unwrap();
    assert_eq!(got, u16s(&[5]));
    // Morton order in one dimension is C order: inner chunk 2 is at bytes 8..12.
    assert_eq!(
        store.take_reads(),
        vec![
            ("c/0".to_owned(), Some(ByteRangeRequest::Suffix(128))),
            ("c/0".to_owned(), Some(ByteRangeRequest::Bounded(8..12))),
        ]
    );
    let (a, store) = one_shard("start");
    block_on(read_region(&a, &store, &region(&[5], &[1]))).unwrap();
    assert_eq!(
        store.take_reads(),
        vec![
            ("c/0".to_owned(), Some(ByteRangeRequest::Bounded(0..128))),
            ("c/0".to_owned(), Some(ByteRangeRequest::Bounded(136..140))),
        ]
    );
}

#[test]
fn adjacent_inner_chunks_coalesce_into_one_read() {
    let (a, store) = one_shard("end");
    let got = block_on(read_region(&a, &store, &region(&[3], &[6]))).unwrap();
    assert_eq!(got, u16s(&[3, 4, 5, 6, 7, 8]));
    let reads = store.take_reads();
    assert_eq!(reads.len(), 2);
    assert_eq!(reads[1].1, Some(ByteRangeRequest::Bounded(4..20)));
    let options = RegionOptions { coalesce_gap: 0, concurrency: 1, ..RegionOptions::default() };
    let got = block_on(read_region_with(&a, &store, &region(&[1], &[14]), &options)).unwrap();
    assert_eq!(got, u16s(&(1..15).collect::<Vec<_>>()));
    let reads = store.take_reads();
    assert_eq!(reads.len(), 2, "adjacent inner chunks are one read even with gap 0");
    assert_eq!(reads[1].1, Some(ByteRangeRequest::Bounded(0..32)));
}

#[test]
fn gaps_within_the_threshold_share_a_read() {
    // Inner chunks [2, 2] of 8 bytes in Morton order: (0,0) 0..8, (1,0) 8..16, (0,1) 16..24, (1,1) 24..32.
    let a = array(&[4, 4], &[4, 4], Some(&[2, 2]), "end");
    let store = MemoryStore::default();
    let values: Vec<u16> = (0..16).collect();
    block_on(write_region(&a, &store, &store, &region(&[0, 0], &[4, 4]), &u16s(&values))).unwrap();
    store.take_reads();
    let row = region(&[0, 0], &[1, 4]);
    let no_gap = RegionOptions { coalesce_gap: 0, concurrency: 4, ..RegionOptions::default() };
    assert_eq!(block_on(read_region_with(&a, &store, &row, &no_gap)).unwrap(), u16s(&[0, 1, 2, 3]));
    let reads: Vec<_> = store.take_reads().into_iter().map(|(_, r)| r).collect();
    assert_eq!(reads[1..], [Some(ByteRangeRequest::Bounded(0..8)), Some(ByteRangeRequest::Bounded(16..24))]);
    let gap = RegionOptions { coalesce_gap: 8, concurrency: 4, ..RegionOptions::default() };
    assert_eq!(block_on(read_region_with(&a, &store, &row, &gap)).unwrap(), u16s(&[0, 1, 2, 3]));
    let reads: Vec<_> = store.take_reads().into_iter().map(|(_, r)| r).collect();
    assert_eq!(reads[1..], [Some(ByteRangeRequest::Bounded(0..24))]);
    // A column is two adjacent inner chunks: one read even without a gap.
    let col = region(&[0, 1], &[4, 1]);
    assert_eq!(block_on(read_region_with(&a, &store, &col, &no_gap)).unwrap(), u16s(&[1, 5, 9, 13]));
    let reads: Vec<_> = store.take_reads().into_iter().map(|(_, r)| r).collect();
    assert_eq!(reads, [Some(ByteRangeRequest::Suffix(64)), Some(ByteRangeRequest::Bounded(0..16))]);
}

/// A shard read whole is its index and one read of all its inner chunks
/// (adjacent, so coalesced): the server's read, which decodes and caches
/// inner chunks one by one rather than the whole shard in one job.
#[test]
fn whole_shard_is_its_index_and_one_data_read() {
    let (a, store) = one_shard("end");
    let got = block_on(read_region(&a, &store, &region(&[0], &[16]))).unwrap();
    assert_eq!(got, u16s(&(0..16).collect::<Vec<_>>()));
    assert_eq!(
        store.take_reads(),
        vec![
            ("c/0".to_owned(), Some(ByteRangeRequest::Suffix(128))),
            ("c/0".to_owned(), Some(ByteRangeRequest::Bounded(0..32)))
        ]
    );
    // An edge shard covered in its in-array part: its one stored inner chunk
    // (in a store of its own: `c/0` above is a shard of another layout).
    let a = array(&[10], &[8], Some(&[2]), "end");
    let store = MemoryStore::default();
    block_on(write_region(&a, &store, &store, &region(&[0], &[10]), &u16s(&[1; 10]))).unwrap();
    store.take_reads();
    let got = block_on(read_region(&a, &store, &region(&[8], &[2]))).unwrap();
    assert_eq!(got, u16s(&[1, 1]));
    assert_eq!(
        store.take_reads(),
        vec![
            ("c/1".to_owned(), Some(ByteRangeRequest::Suffix(64))),
            ("c/1".to_owned(), Some(ByteRangeRequest::Bounded(0..4)))
        ]
    );
}

#[test]
fn missing_shards_and_empty_inner_chunks_read_as_fill() {
    let a = array(&[16], &[8], Some(&[2]), "end");
    let store = MemoryStore::default();
    assert_eq!(block_on(read_region(&a, &store, &region(&[3], &[4]))).unwrap(), u16s(&[9; 4]));
    assert_eq!(store.take_reads().len(), 1, "a missing shard costs only the index request");
    // Write one non-fill element: only its inner chunk is stored.
    block_on(write_region(&a, &store, &store, &region(&[5], &[1]), &u16s(&[1]))).unwrap();
    assert_eq!(store.keys(), vec!["c/0"]);
    assert_eq!(store.value("c/0").unwrap().len(), 4 + 64);
    store.take_reads();
    assert_eq!(block_on(read_region(&a, &store, &region(&[0], &[4]))).unwrap(), u16s(&[9; 4]));
    assert_eq!(store.take_reads().len(), 1, "empty inner chunks are not read");
    // Writing fill back deletes the shard.
    block_on(write_region(&a, &store, &store, &region(&[4], &[2]), &u16s(&[9, 9]))).unwrap();
    assert!(store.keys().is_empty());
}

#[test]
fn partial_shard_writes_copy_untouched_inner_chunks_without_decoding() {
    let (a, store) = one_shard("end");
    // Break inner chunk 0 so that decoding it would fail (3 bytes, not 4).
    let mut shard = store.value("c/0").unwrap().to_vec();
    let at = shard.len() - 128 + 8;
    shard[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
    store.insert("c/0", shard);
    block_on(write_region(&a, &store, &store, &region(&[11], &[1]), &u16s(&[100]))).unwrap();
    assert_eq!(block_on(read_region(&a, &store, &region(&[10], &[4]))).unwrap(), u16s(&[10, 100, 12, 13]));
    let e = block_on(read_region(&a, &store, &region(&[0], &[1]))).unwrap_err();
    assert!(e.to_string().contains("inner chunk [0]"), "{e}");
    // A whole-shard decode of the broken shard fails, so the write did not decode it.
    assert!(a.decode_chunk(store.value("c/0").unwrap().to_vec()).is_err());
}

#[test]
fn full_chunk_writes_do_not_read() {
    let a = array(&[6, 4], &[3, 2], None, "end");
    let store = MemoryStore::default();
    block_on(write_region(&a, &store, &store, &region(&[0, 0], &[3, 4]), &u16s(&[1; 12]))).unwrap();
    assert!(store.take_reads().is_empty());
    assert_eq!(store.keys(), vec!["c/0/0", "c/0/1"]);
    block_on(write_region(&a, &store, &store, &region(&[1, 1], &[1, 1]), &u16s(&[2]))).unwrap();
    assert_eq!(store.take_reads(), vec![("c/0/0".to_owned(), None)]);
}

#[test]
fn hostile_shards_are_errors_naming_the_key() {
    let (a, store) = one_shard("end");
    let good = store.value("c/0").unwrap().to_vec();
    let mut index_past_end = good.clone();
    let at = good.len() - 128 + 16 * 3; // inner chunk 3's offset
    index_past_end[at..at + 8].copy_from_slice(&1000u64.to_le_bytes());
    let mut overflowing = good.clone();
    overflowing[at..at + 8].copy_from_slice(&(u64::MAX - 2).to_le_bytes());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..100].to_vec(), "shorter than its 128-byte index"),
        (index_past_end.clone(), "inner chunk [3]"),
        (overflowing, "inner chunk [3]: offset 18446744073709551613 + nbytes 4 overflows"),
    ];
    for (bytes, want) in cases {
        store.insert("c/0", bytes.clone());
        let e = block_on(read_region(&a, &store, &region(&[6], &[2]))).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("c/0: ") && msg.contains(want), "{msg} does not contain {want:?}");
        // Whole-shard reads check too.
        let e = block_on(read_region(&a, &store, &region(&[0], &[16]))).unwrap_err();
        assert!(e.to_string().starts_with("c/0: "), "{e}");
    }
    // Truncated anywhere: errors, never panics, never garbage.
    for cut in 0..good.len() {
        store.insert("c/0", good[..cut].to_vec());
        assert!(block_on(read_region(&a, &store, &region(&[0], &[16]))).is_err());
        // A partial read of a cut shard reads other bytes as the index: an error
        // or (if they happen to be a valid index) data, but never a panic.
        let _ = block_on(read_region(&a, &store, &region(&[0], &[3])));
    }
}

#[test]
fn write_data_must_match_the_region() {
    let a = array(&[4], &[2], None, "end");
    let store = MemoryStore::default();
    let e = block_on(write_region(&a, &store, &store, &region(&[0], &[3]), &u16s(&[1, 2]))).unwrap_err();
    assert!(matches!(e, RegionError::Data(_)), "{e}");
    let e = block_on(read_region(&a, &store, &region(&[3], &[2]))).unwrap_err();
    assert!(matches!(e, RegionError::Region(_)), "{e}");
}

/// A random array layout: shape, chunk shape, optional inner chunk shape.
fn layout() -> impl Strategy<Value = (Vec<u64>, Vec<u64>, Option<Vec<u64>>, bool)> {
    (1usize..4)
        .prop_flat_map(|rank| {
            (
                proptest::collection::vec(1u64..8, rank),
                proptest::collection::vec(1u64..4, rank),
                proptest::collection::vec(1u64..3, rank),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|(shape, inner, per, sharded, at_start)| {
            let chunks: Vec<u64> = inner.iter().zip(&per).map(|(i, p)| i * p).collect();
            (shape, chunks, sharded.then_some(inner), at_start)
        })
}

/// A region inside `shape` from random numbers.
fn pick_region(shape: &[u64], seed: &[u64]) -> ArraySubset {
    let start: Vec<u64> = shape.iter().zip(seed).map(|(s, r)| r % s).collect();
    let extent: Vec<u64> = shape.iter().zip(&start).zip(seed).map(|((s, st), r)| 1 + (r >> 8) % (s - st)).collect();
    ArraySubset::new(start, extent).unwrap()
}

fn lin(idx: &[u64], shape: &[u64]) -> usize {
    idx.iter().zip(shape).fold(0u64, |a, (i, n)| a * n + i) as usize
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random writes then reads agree with a dense reference array.
    #[test]
    fn matches_a_dense_model(
        (shape, chunks, inner, at_start) in layout(),
        writes in proptest::collection::vec((proptest::collection::vec(any::<u64>(), 3), any::<bool>(), 0u16..3), 1..5),
        reads in proptest::collection::vec(proptest::collection::vec(any::<u64>(), 3), 1..4),
    ) {
        let a = array(&shape, &chunks, inner.as_deref(), if at_start { "start" } else { "end" });
        let store = MemoryStore::default();
        let total = shape.iter().product::<u64>() as usize;
        let mut model = vec![9u16; total];
        for (seed, fill, base) in &writes {
            let r = pick_region(&shape, seed);
            // Values: the fill value (9) or a pattern that is sometimes fill.
            let values: Vec<u16> = (0..r.num_elements() as usize)
                .map(|i| if *fill { 9 } else { ((i as u16) + base) % 11 })
                .collect();
            for (i, idx) in r.indices().enumerate() {
                model[lin(&idx, &shape)] = values[i];
            }
            block_on(write_region(&a, &store, &store, &r, &u16s(&values))).unwrap();
        }
        // No stored chunk is all fill.
        let grid = a.grid();
        for coords in ArraySubset::from_shape(&grid.grid_shape()).indices() {
            let c = grid.chunk_subset(&coords).unwrap();
            let all_fill = c.indices().all(|idx| model[lin(&idx, &shape)] == 9);
            prop_assert_eq!(store.value(&a.chunk_key(&coords)).is_none(), all_fill, "chunk {:?}", coords);
        }
        for seed in reads.iter().chain(std::iter::once(&vec![0, u64::MAX, u64::MAX])) {
            let r = if seed[0] == 0 && seed[1] == u64::MAX { ArraySubset::from_shape(&shape) } else { pick_region(&shape, seed) };
            let got = block_on(read_region_with(&a, &store, &r, &RegionOptions { coalesce_gap: 0, concurrency: 3, ..RegionOptions::default() })).unwrap();
            let want: Vec<u16> = r.indices().map(|idx| model[lin(&idx, &shape)]).collect();
            prop_assert_eq!(got, u16s(&want), "region {}", r);
        }
    }
}

/// A random selection of `shape`: per dimension an index, a slice (any
/// step, either direction) or a list (repeats allowed); or coordinate points.
pub(super) fn pick_selection(shape: &[u64], seeds: &[u64], coordinate: bool) -> Selection {
    use crate::zarr::selection::{DimIndexer, SelectionMode};
    if coordinate {
        let n = 1 + (seeds[0] % 6) as usize;
        let dims = shape
            .iter()
            .enumerate()
            .map(|(d, &s)| DimIndexer::List((0..n).map(|i| (seeds[(d + i) % seeds.len()] >> (i * 3)) % s).collect()))
            .collect();
        return Selection { dims, mode: SelectionMode::Coordinate };
    }
    let dims = shape
        .iter()
        .zip(seeds)
        .map(|(&s, &r)| match r % 4 {
            0 => DimIndexer::Index((r >> 4) % s),
            1 => {
                let k = 1 + (r >> 4) % 4;
                DimIndexer::List((0..k).map(|i| (r >> (8 + i * 4)) % s).collect())
            }
            _ => {
                let step = 1 + ((r >> 4) % 3) as i64;
                let step = if r % 4 == 3 { -step } else { step };
                let start = (r >> 8) % s;
                let room = if step > 0 { (s - start).div_ceil(step as u64) } else { start / step.unsigned_abs() + 1 };
                DimIndexer::Slice { start, step, len: 1 + (r >> 16) % room }
            }
        })
        .collect();
    Selection { dims, mode: SelectionMode::Orthogonal }
}

/// The array positions of a selection's elements, in the data's C order.
fn selected(sel: &Selection) -> Vec<Vec<u64>> {
    use crate::zarr::selection::SelectionMode;
    if sel.mode == SelectionMode::Coordinate {
        return (0..sel.dims[0].len()).map(|i| sel.dims.iter().map(|d| d.get(i)).collect()).collect();
    }
    let lens: Vec<u64> = sel.dims.iter().map(|d| d.len()).collect();
    ArraySubset::from_shape(&lens)
        .indices()
        .map(|pos| pos.iter().zip(&sel.dims).map(|(&i, d)| d.get(i)).collect())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Strided, orthogonal and coordinate writes (and broadcast scalars)
    /// agree with a dense reference array, on plain and sharded layouts.
    #[test]
    fn selection_writes_match_a_dense_model(
        (shape, chunks, inner, at_start) in layout(),
        writes in proptest::collection::vec((proptest::collection::vec(any::<u64>(), 3), any::<bool>(), any::<bool>(), 0u16..4), 1..6),
    ) {
        let a = array(&shape, &chunks, inner.as_deref(), if at_start { "start" } else { "end" });
        let store = MemoryStore::default();
        let mut model = vec![9u16; shape.iter().product::<u64>() as usize];
        for (seeds, coordinate, scalar, base) in &writes {
            let sel = pick_selection(&shape, seeds, *coordinate);
            let positions = selected(&sel);
            let values: Vec<u16> = if *scalar { vec![*base + 9] } else {
                (0..positions.len()).map(|i| ((i as u16) + base) % 11).collect()
            };
            for (i, p) in positions.iter().enumerate() {
                model[lin(p, &shape)] = values[if *scalar { 0 } else { i }];
            }
            block_on(write_selection(&a, &store, &store, &sel, &u16s(&values), *scalar, &RegionOptions::default())).unwrap();
        }
        let grid = a.grid();
        for coords in ArraySubset::from_shape(&grid.grid_shape()).indices() {
            let c = grid.chunk_subset(&coords).unwrap();
            let all_fill = c.indices().all(|idx| model[lin(&idx, &shape)] == 9);
            prop_assert_eq!(store.value(&a.chunk_key(&coords)).is_none(), all_fill, "chunk {:?}", coords);
        }
        let got = block_on(read_region(&a, &store, &ArraySubset::from_shape(&shape))).unwrap();
        prop_assert_eq!(got, u16s(&model));
    }
}

/// A store whose conditional writes are refused `refusals` times; before
/// each refusal another writer changes element 3 of chunk `c/0`.
struct Contended {
    store: MemoryStore,
    refusals: Mutex<u32>,
    versioned_reads: Mutex<u32>,
    other: ArrayDescription,
}

#[async_trait]
impl ChunkSource for Contended {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        self.store.get(key, range).await
    }
    async fn get_versioned(&self, key: &str) -> Result<Option<Versioned>, SourceError> {
        *self.versioned_reads.lock().unwrap() += 1;
        let bytes = self.store.get(key, None).await?;
        Ok(bytes.map(|bytes| Versioned { bytes, version: Some(format!("v{}", self.versioned_reads.lock().unwrap())) }))
    }
}

#[async_trait]
impl ChunkSink for Contended {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        self.store.put(key, bytes).await
    }
    async fn put_if(&self, key: &str, bytes: Bytes, expected: Option<&Expected>) -> Result<(), SourceError> {
        assert!(expected.is_some(), "a read-modify-write writes conditionally");
        let refuse = {
            let mut n = self.refusals.lock().unwrap();
            let refuse = *n > 0;
            *n = n.saturating_sub(1);
            refuse
        };
        if refuse {
            // The other writer's update lands first.
            let n = *self.versioned_reads.lock().unwrap();
            write_region(&self.other, &self.store, &self.store, &region(&[3], &[1]), &u16s(&[100 + n as u16]))
                .await
                .unwrap();
            return Err(SourceError::Precondition(format!("{key} changed")));
        }
        self.store.put(key, bytes).await
    }
    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        self.store.delete(key).await
    }
}

#[test]
fn read_modify_write_retries_on_conflicts_and_keeps_the_other_update() {
    for sharded in [false, true] {
        let inner: Option<&[u64]> = if sharded { Some(&[2]) } else { None };
        let a = array(&[4], &[4], inner, "end");
        let store = Contended {
            store: MemoryStore::default(),
            refusals: Mutex::new(2),
            versioned_reads: Mutex::new(0),
            other: array(&[4], &[4], inner, "end"),
        };
        block_on(write_region(&a, &store, &store, &region(&[1], &[1]), &u16s(&[5]))).unwrap();
        assert_eq!(*store.versioned_reads.lock().unwrap(), 3, "read again after each refusal");
        let got = block_on(read_region(&a, &store.store, &region(&[0], &[4]))).unwrap();
        assert_eq!(got, u16s(&[9, 5, 9, 102]), "both updates survive (sharded: {sharded})");

        // Refused every time: an error naming the key, after max_attempts tries.
        *store.refusals.lock().unwrap() = u32::MAX;
        *store.versioned_reads.lock().unwrap() = 0;
        let options = RegionOptions { max_attempts: 4, ..RegionOptions::default() };
        let sel = Selection::all(&[4]);
        let mut partial = Selection::all(&[4]);
        partial.dims[0] = crate::zarr::selection::DimIndexer::List(vec![0]);
        assert_eq!(sel.dims.len(), 1);
        let e = block_on(write_selection(&a, &store, &store, &partial, &u16s(&[1]), false, &options)).unwrap_err();
        assert!(
            matches!(&e, RegionError::Source { key, source: SourceError::Precondition(m) } if key == "c/0" && m.contains("4 read-modify-writes")),
            "{e}"
        );
        assert_eq!(*store.versioned_reads.lock().unwrap(), 4);
    }
}
