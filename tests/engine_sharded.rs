//! End to end for sharding: `sharding_indexed` arrays written by zarr-python
//! and TensorStore (uncompressed inner chunks, index at the start or end,
//! nested sharding, partial edge shards, omitted inner chunks, a missing
//! shard) are read through `read_region` (the engine read the server runs:
//! index by range, then coalesced inner chunk ranges) — whole, and one
//! element at a time — and compared with what zarr-python reads.
//! zarr-python's shards must re-encode byte for byte, and writing the whole
//! array through `write_region` must store exactly zarr-python's keys and
//! bytes.
//!
//! Fixtures: `tests/fixtures/engine/sharded`, made by
//! `tests/fixtures/engine/generate_sharded.py` (pinned versions). With
//! `ZARRD_TEST_PYTHON=/path/to/python` set, the generator also runs into a
//! temporary directory and those fresh arrays are checked too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::executor::block_on;
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::byte_range::ByteRangeRequest;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::codec::bytes_to_bytes::build_bytes_to_bytes;
use zarrd::zarr::metadata::NodeMetadataV3;
use zarrd::zarr::region::{read_region, write_region, ChunkSink, ChunkSource, SourceError};
use zarrd::zarr::subset::ArraySubset;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine/sharded")
}

/// A store over a fixture directory (reads) or memory (writes), logging reads.
#[derive(Default)]
struct Store {
    values: Mutex<BTreeMap<String, Bytes>>,
    reads: Mutex<Vec<Option<ByteRangeRequest>>>,
}

impl Store {
    fn from_dir(dir: &Path) -> Self {
        let store = Self::default();
        let mut stack = vec![(dir.to_path_buf(), String::new())];
        while let Some((path, prefix)) = stack.pop() {
            for entry in std::fs::read_dir(&path).unwrap() {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
                if entry.file_type().unwrap().is_dir() {
                    stack.push((entry.path(), key));
                } else if name != "zarr.json" {
                    store.values.lock().unwrap().insert(key, Bytes::from(std::fs::read(entry.path()).unwrap()));
                }
            }
        }
        store
    }

    fn take_reads(&self) -> Vec<Option<ByteRangeRequest>> {
        std::mem::take(&mut *self.reads.lock().unwrap())
    }
}

#[async_trait]
impl ChunkSource for Store {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        self.reads.lock().unwrap().push(range.clone());
        let Some(v) = self.values.lock().unwrap().get(key).cloned() else { return Ok(None) };
        let len = v.len();
        Ok(Some(match range {
            None => v,
            Some(ByteRangeRequest::Suffix(n)) => v.slice(len.saturating_sub(n as usize)..),
            Some(ByteRangeRequest::Bounded(r)) if r.start as usize <= len => {
                v.slice(r.start as usize..(r.end as usize).min(len))
            }
            Some(r) => return Err(SourceError::RangeNotSatisfiable(format!("{key}: {r}"))),
        }))
    }
}

#[async_trait]
impl ChunkSink for Store {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        self.values.lock().unwrap().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        self.values.lock().unwrap().remove(key);
        Ok(())
    }
}

fn open(dir: &Path) -> ArrayDescription {
    let NodeMetadataV3::Array(meta) =
        NodeMetadataV3::from_slice(&std::fs::read(dir.join("zarr.json")).unwrap()).unwrap()
    else {
        panic!("{} is not an array", dir.display())
    };
    ArrayDescription::from_v3(&meta).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn check(name: &str) {
    check_in(&fixtures(), name);
}

fn check_in(base: &Path, name: &str) {
    let dir = base.join(name);
    // needs crc32c from engine-codecs: skipped, with the reason printed, only
    // while the crc32c codec is not built in.
    if name.contains("crc32c") {
        if let Err(e) = build_bytes_to_bytes("crc32c", &serde_json::json!({})) {
            eprintln!("skipping {name}: needs crc32c from engine-codecs ({e})");
            return;
        }
    }
    let a = open(&dir);
    let sharding = a.sharding.clone().expect("a sharded array");
    let store = Store::from_dir(&dir);
    let expected = std::fs::read(base.join(format!("{name}.expected.bin"))).unwrap();
    let size = a.data_type.size().unwrap();

    // The whole array: per shard its index, then its inner chunks in one
    // coalesced read (the server's read: inner chunks decode one by one).
    let whole = ArraySubset::from_shape(&a.shape);
    let got = block_on(read_region(&a, &store, &whole)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(got == ChunkData::Fixed(expected.clone()), "{name}: whole-array read differs");
    let reads = store.take_reads();
    let shards = usize::try_from(a.grid().grid_shape().iter().product::<u64>()).unwrap();
    let index_reads = reads.iter().filter(|r| **r == Some(sharding.index_byte_range())).count();
    assert_eq!(index_reads, shards, "{name}: one index read per shard: {reads:?}");
    assert!(reads.len() <= 2 * shards, "{name}: at most one data read per shard: {reads:?}");
    assert!(reads.iter().all(Option::is_some), "{name}: no whole-key reads: {reads:?}");

    // Every element alone: the partial path (index range + at most one inner range).
    for (i, idx) in whole.indices().enumerate() {
        let r = ArraySubset::new(idx.clone(), vec![1; idx.len()]).unwrap();
        let got = block_on(read_region(&a, &store, &r)).unwrap_or_else(|e| panic!("{name} {idx:?}: {e}"));
        assert_eq!(got, ChunkData::Fixed(expected[i * size..(i + 1) * size].to_vec()), "{name} {idx:?}");
        let reads = store.take_reads();
        let shard_full = a.grid().chunk_subset(a.grid().chunks_in(&r).unwrap().start()).unwrap();
        if shard_full.num_elements() > 1 {
            assert_eq!(reads[0], Some(sharding.index_byte_range()), "{name} {idx:?}");
            assert!(reads.len() <= 2, "{name} {idx:?}: {reads:?}");
        }
    }

    if name.starts_with("ts_") {
        return;
    }
    // zarr-python's shards re-encode byte for byte, and a whole-array write
    // stores exactly its keys.
    let written = Store::default();
    block_on(write_region(&a, &written, &written, &whole, &ChunkData::Fixed(expected.clone()))).unwrap();
    let (want, got) = (store.values.lock().unwrap().clone(), written.values.lock().unwrap().clone());
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "{name}: stored keys");
    for (key, bytes) in &want {
        assert!(got[key] == *bytes, "{name}/{key}: re-encoded shard differs from zarr-python's");
    }
    // Row by row: every write covers shards partly (inner chunk read-modify-write),
    // and the result is still zarr-python's bytes.
    let rows = Store::default();
    let row_len = usize::try_from(a.shape[1]).unwrap() * size;
    for row in 0..a.shape[0] {
        let r = ArraySubset::new(vec![row, 0], vec![1, a.shape[1]]).unwrap();
        let at = usize::try_from(row).unwrap() * row_len;
        let part = ChunkData::Fixed(expected[at..at + row_len].to_vec());
        block_on(write_region(&a, &rows, &rows, &r, &part)).unwrap_or_else(|e| panic!("{name} row {row}: {e}"));
    }
    let got = rows.values.lock().unwrap().clone();
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "{name}: keys after row writes");
    for (key, bytes) in &want {
        assert!(got[key] == *bytes, "{name}/{key}: shard written row by row differs from zarr-python's");
    }
}

#[test]
fn zarr_python_index_at_end() {
    check("v3_sharded_end_uint16");
}

#[test]
fn zarr_python_index_at_start_big_endian_inner() {
    check("v3_sharded_start_int32_big");
}

#[test]
fn zarr_python_nested_sharding() {
    check("v3_sharded_nested_float32");
}

#[test]
fn zarr_python_default_index_codecs_with_crc32c() {
    // needs crc32c from engine-codecs
    check("v3_sharded_crc32c_uint8");
}

#[test]
fn tensorstore_index_at_end() {
    check("ts_sharded_end_int16");
}

const ALL: [&str; 5] = [
    "v3_sharded_end_uint16",
    "v3_sharded_start_int32_big",
    "v3_sharded_nested_float32",
    "v3_sharded_crc32c_uint8",
    "ts_sharded_end_int16",
];

#[test]
fn freshly_generated_fixtures() {
    let Ok(python) = std::env::var("ZARRD_TEST_PYTHON") else {
        eprintln!("ZARRD_TEST_PYTHON is not set; checked-in sharded fixtures only");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sharded");
    let status = std::process::Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine/generate_sharded.py"))
        .arg(&out)
        .status()
        .expect("run the sharded fixture generator");
    assert!(status.success(), "generate_sharded.py failed");
    for name in ALL {
        check_in(&out, name);
    }
}
