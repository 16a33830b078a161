//! Direct reads against ordinary reads and the truth: an in-memory store
//! that opens values for direct reads (and can claim a size its bytes do
//! not have, as a file truncated after its `fstat`), read beside the same
//! store without direct reads.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::executor::block_on;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::super::*;
use crate::zarr::metadata::NodeMetadataV3;
use crate::zarr::selection::{DimIndexer, SelectionMode};

/// What a store was asked for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    /// Values opened for direct reads (and read).
    direct: usize,
    /// Whole values read.
    whole: usize,
}

/// An in-memory store; `direct` off: the trait's default (no direct reads).
#[derive(Default)]
struct Store {
    map: Mutex<HashMap<String, Bytes>>,
    /// Sizes claimed at the open instead of the value's own.
    claimed: Mutex<HashMap<String, u64>>,
    counts: Mutex<Counts>,
    direct: bool,
}

struct MemUnit {
    bytes: Bytes,
    size: u64,
}

impl DirectUnit for MemUnit {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_into(&self, runs: &mut [(u64, &mut [u8])]) -> Result<(), SourceError> {
        for (at, place) in runs.iter_mut() {
            let at = *at as usize;
            let Some(src) = self.bytes.get(at..at + place.len()) else {
                return Err(SourceError::Unavailable(format!("truncated while read at {at}")));
            };
            place.copy_from_slice(src);
        }
        Ok(())
    }
}

impl Store {
    fn direct() -> Self {
        Self { direct: true, ..Self::default() }
    }
    fn take(&self) -> Counts {
        std::mem::take(&mut *self.counts.lock().unwrap())
    }
    fn set(&self, key: &str, bytes: Vec<u8>) {
        self.map.lock().unwrap().insert(key.to_owned(), Bytes::from(bytes));
    }
    fn value(&self, key: &str) -> Option<Bytes> {
        self.map.lock().unwrap().get(key).cloned()
    }
    fn copy_from(&self, other: &Store) {
        *self.map.lock().unwrap() = other.map.lock().unwrap().clone();
    }
}

#[async_trait]
impl ChunkSource for Store {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        let Some(value) = self.value(key) else { return Ok(None) };
        let len = value.len() as u64;
        let r = match range {
            None => {
                self.counts.lock().unwrap().whole += 1;
                0..len
            }
            Some(ByteRangeRequest::Suffix(n)) => len - n.min(len)..len,
            Some(ByteRangeRequest::Bounded(r)) => r.start.min(len)..r.end.min(len),
        };
        Ok(Some(value.slice(r.start as usize..r.end as usize)))
    }

    async fn open_direct(&self, key: &str) -> Result<Direct, SourceError> {
        if !self.direct {
            return Ok(Direct::Unsupported);
        }
        let Some(bytes) = self.value(key) else { return Ok(Direct::Missing) };
        self.counts.lock().unwrap().direct += 1;
        let size = self.claimed.lock().unwrap().get(key).copied().unwrap_or(bytes.len() as u64);
        Ok(Direct::Open(Box::new(MemUnit { bytes, size })))
    }
}

#[async_trait]
impl ChunkSink for Store {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        self.map.lock().unwrap().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        self.map.lock().unwrap().remove(key);
        Ok(())
    }
}

fn v3(shape: &[u64], chunks: &[u64], data_type: &str, codecs: Value, fill: Value) -> ArrayDescription {
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill, "codecs": codecs});
    let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&doc, "").unwrap() else { panic!() };
    ArrayDescription::from_v3(&meta).unwrap()
}

fn bytes_codec(endian: &str) -> Value {
    json!([{"name": "bytes", "configuration": {"endian": endian}}])
}

/// The layouts read directly: little and big endian (swapped in place).
fn layouts(shape: &[u64], chunks: &[u64]) -> Vec<ArrayDescription> {
    vec![
        v3(shape, chunks, "uint16", bytes_codec("little"), json!(9)),
        v3(shape, chunks, "float32", bytes_codec("big"), json!(1.5)),
    ]
}

/// Every element a distinct pattern of its type's size.
fn pattern(desc: &ArrayDescription) -> Vec<u8> {
    let es = desc.data_type.size().unwrap();
    let n: u64 = desc.shape.iter().product();
    (0..n as usize * es).map(|i| (i * 7 + i / es) as u8).collect()
}

fn write_all(desc: &ArrayDescription, store: &Store) {
    let whole = ArraySubset::from_shape(&desc.shape);
    block_on(write_region(desc, store, store, &whole, &ChunkData::Fixed(pattern(desc)))).unwrap();
    store.take();
}

/// The box `start`/`len` of `data` (the whole array, C order), elements in
/// chunks listed in `missing` read as the fill value.
fn expected(desc: &ArrayDescription, data: &[u8], start: &[u64], len: &[u64], missing: &[Vec<u64>]) -> Vec<u8> {
    let es = desc.data_type.size().unwrap();
    let n: u64 = len.iter().product();
    let mut out = Vec::with_capacity(n as usize * es);
    for i in 0..n {
        // The i-th element of the box, C order.
        let mut rem = i;
        let mut coords = vec![0u64; len.len()];
        for d in (0..len.len()).rev() {
            coords[d] = start[d] + rem % len[d];
            rem /= len[d];
        }
        let chunk: Vec<u64> = coords.iter().zip(&desc.chunk_shape).map(|(c, s)| c / s).collect();
        if missing.contains(&chunk) {
            out.extend_from_slice(&desc.fill_value);
            continue;
        }
        let flat = coords.iter().zip(&desc.shape).fold(0u64, |a, (&c, &s)| a * s + c) as usize;
        out.extend_from_slice(&data[flat * es..(flat + 1) * es]);
    }
    out
}

fn boxed(start: &[u64], len: &[u64]) -> Selection {
    let dims = start.iter().zip(len).map(|(&start, &len)| DimIndexer::Slice { start, step: 1, len }).collect();
    Selection { dims, mode: SelectionMode::Basic }
}

fn read(desc: &ArrayDescription, store: &Store, start: &[u64], len: &[u64]) -> Result<ChunkData, RegionError> {
    let options = RegionOptions { slab_bytes: 1 << 20, ..RegionOptions::default() };
    block_on(read_selection(desc, store, &boxed(start, len), &options))
}

#[test]
fn a_whole_read_reads_every_chunk_directly_and_equals_the_data() {
    // 4 KiB rows: chunks of 2 x 3 x 1024 elements.
    for desc in layouts(&[5, 6, 1024], &[2, 3, 1024]) {
        let store = Store::direct();
        write_all(&desc, &store);
        let got = read(&desc, &store, &[0, 0, 0], &[5, 6, 1024]).unwrap();
        assert_eq!(got, ChunkData::Fixed(pattern(&desc)), "{:?}", desc.data_type);
        // 3 x 2 chunks, each opened once, none read whole.
        assert_eq!(store.take(), Counts { direct: 6, whole: 0 });
    }
}

#[test]
fn small_parts_and_short_runs_take_the_ordinary_paths() {
    let desc = &layouts(&[4, 4, 1024], &[2, 2, 1024])[0];
    let store = Store::direct();
    write_all(desc, &store);
    // A plane across the last dimension: runs of one element.
    let got = read(desc, &store, &[0, 0, 7], &[4, 4, 1]).unwrap();
    assert_eq!(got, ChunkData::Fixed(expected(desc, &pattern(desc), &[0, 0, 7], &[4, 4, 1], &[])));
    assert_eq!(store.take().direct, 0);
    // A quarter of each chunk: by byte ranges.
    let got = read(desc, &store, &[0, 0, 0], &[4, 4, 256]).unwrap();
    assert_eq!(got, ChunkData::Fixed(expected(desc, &pattern(desc), &[0, 0, 0], &[4, 4, 256], &[])));
    assert_eq!(store.take().direct, 0);
}

#[test]
fn a_part_of_a_chunk_in_long_runs_is_read_directly() {
    // A quarter of each chunk of 4 x 2 x 1024 elements it touches (one row
    // of the first dimension: 2 KiB or more, back to back in the chunk and
    // in the slab): only those bytes, straight into the slab.
    for desc in layouts(&[8, 4, 1024], &[4, 2, 1024]) {
        let store = Store::direct();
        write_all(&desc, &store);
        for start in [[0, 0, 0], [3, 0, 0], [5, 0, 0]] {
            let got = read(&desc, &store, &start, &[1, 4, 1024]).unwrap();
            assert_eq!(got, ChunkData::Fixed(expected(&desc, &pattern(&desc), &start, &[1, 4, 1024], &[])));
            assert_eq!(store.take(), Counts { direct: 2, whole: 0 }, "{start:?}");
        }
    }
}

#[test]
fn a_stored_value_of_the_wrong_size_fails_as_an_ordinary_read_does() {
    let desc = &layouts(&[4, 4, 1024], &[2, 2, 1024])[0];
    let direct = Store::direct();
    write_all(desc, &direct);
    for change in [-1i64, 1, -4096] {
        let mut bytes = direct.value("c/1/0/0").unwrap().to_vec();
        let len = (bytes.len() as i64 + change) as usize;
        bytes.resize(len, 0);
        let (d, p) = (Store::direct(), Store::default());
        d.copy_from(&direct);
        d.set("c/1/0/0", bytes);
        p.copy_from(&d);
        let got = read(desc, &d, &[0, 0, 0], &[4, 4, 1024]).unwrap_err();
        let want = read(desc, &p, &[0, 0, 0], &[4, 4, 1024]).unwrap_err();
        assert_eq!(got.to_string(), want.to_string(), "{change}");
        assert!(got.to_string().contains("c/1/0/0"), "{got}");
        // The wrong-sized chunk was read whole (the others directly).
        assert!(d.take().whole >= 1);
    }
}

#[test]
fn a_value_that_ends_while_read_is_an_error_never_fill() {
    let desc = &layouts(&[4, 4, 1024], &[2, 2, 1024])[0];
    let store = Store::direct();
    write_all(desc, &store);
    let full = store.value("c/0/1/0").unwrap();
    // Opened at the chunk's size, then shorter when read.
    store.claimed.lock().unwrap().insert("c/0/1/0".into(), full.len() as u64);
    store.set("c/0/1/0", full[..full.len() - 10].to_vec());
    let err = read(desc, &store, &[0, 0, 0], &[4, 4, 1024]).unwrap_err();
    assert!(
        matches!(&err, RegionError::Source { key, source: SourceError::Unavailable(_) } if key == "c/0/1/0"),
        "{err:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any box over arrays with missing chunks: direct reads equal the
    /// ordinary reads and the data (fill value where chunks are missing).
    #[test]
    fn boxes_equal_the_ordinary_read_and_the_data(
        shape in proptest::collection::vec(1u64..7, 2),
        chunks in proptest::collection::vec(1u64..4, 2),
        last in prop_oneof![Just((1024u64, 1024u64)), Just((2048, 1024)), Just((1024, 512))],
        corner in proptest::collection::vec(any::<u64>(), 3),
        size in proptest::collection::vec(any::<u64>(), 3),
        drop_mask in any::<u64>(),
        big in any::<bool>(),
        full_last in any::<bool>(),
    ) {
        let shape = vec![shape[0], shape[1], last.0];
        let chunks = vec![chunks[0], chunks[1], last.1];
        let desc = layouts(&shape, &chunks).swap_remove(usize::from(big));
        let (direct, plain) = (Store::direct(), Store::default());
        write_all(&desc, &direct);
        // Some chunks missing.
        let grid: Vec<u64> = shape.iter().zip(&chunks).map(|(s, c)| s.div_ceil(*c)).collect();
        let mut missing = Vec::new();
        let mut k = 0;
        for a in 0..grid[0] {
            for b in 0..grid[1] {
                for c in 0..grid[2] {
                    if drop_mask >> (k % 64) & 1 == 1 {
                        direct.map.lock().unwrap().remove(&format!("c/{a}/{b}/{c}"));
                        missing.push(vec![a, b, c]);
                    }
                    k += 1;
                }
            }
        }
        plain.copy_from(&direct);
        let mut start: Vec<u64> = corner.iter().zip(&shape).map(|(c, s)| c % s).collect();
        let mut len: Vec<u64> = size.iter().zip(&shape).zip(&start).map(|((l, s), st)| 1 + l % (s - st)).collect();
        if full_last {
            // Whole rows of the chunks: runs long enough to read directly.
            (start[2], len[2]) = (0, shape[2]);
        }
        let got = read(&desc, &direct, &start, &len).unwrap();
        let want = read(&desc, &plain, &start, &len).unwrap();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(got, ChunkData::Fixed(expected(&desc, &pattern(&desc), &start, &len, &missing)));
        // The plain store never reads directly; the direct one did where it could.
        prop_assert_eq!(plain.take().direct, 0);
        let present = grid[0] * grid[1] * grid[2] > missing.len() as u64;
        if full_last && present && len[0] >= 2 * chunks[0] && len[1] >= 2 * chunks[1] && last.0 == last.1 {
            // The box holds at least one whole chunk; it is read directly unless missing.
            let d = direct.take();
            prop_assert!(d.direct > 0 || missing.len() as u64 * 4 >= grid[0] * grid[1], "{:?}", d);
        }
    }
}
