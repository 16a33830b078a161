//! End to end over the fixture matrix: every array of
//! `tests/fixtures/engine/matrix` (every data type, codec, compressor,
//! filter, layout and fill-value encoding, written by zarr-python,
//! TensorStore, or numpy + numcodecs where neither writes the layout) is
//! decoded chunk by chunk and read whole through `read_region`, and compared
//! element for element with what the writing client reads back. Structured
//! arrays are also read one field at a time, as TensorStore does.
//!
//! Fixtures: made by `tests/fixtures/engine/generate_matrix.py` (pinned
//! zarr-python, numcodecs, TensorStore and numpy); `matrix.json` lists them.
//! With `ZARRD_TEST_PYTHON=/path/to/python` set, the generator also runs
//! into a temporary directory and those fresh arrays are checked too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::executor::block_on;
use serde_json::Value;
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::byte_range::ByteRangeRequest;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::metadata::v2::attributes_from_json;
use zarrd::zarr::metadata::{ArrayMetadataV2, NodeMetadataV3};
use zarrd::zarr::region::{read_region, write_region, ChunkSink, ChunkSource, SourceError};
use zarrd::zarr::subset::{copy_region, ArraySubset};

fn matrix_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine/matrix")
}

/// The stored files of one array (metadata excluded), by key.
struct DirStore(BTreeMap<String, Bytes>);

impl DirStore {
    fn load(dir: &Path) -> Self {
        let mut values = BTreeMap::new();
        let mut stack = vec![(dir.to_path_buf(), String::new())];
        while let Some((path, prefix)) = stack.pop() {
            for entry in std::fs::read_dir(&path).unwrap() {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
                if entry.file_type().unwrap().is_dir() {
                    stack.push((entry.path(), key));
                } else if !matches!(name.as_str(), "zarr.json" | ".zarray" | ".zattrs") {
                    values.insert(key, Bytes::from(std::fs::read(entry.path()).unwrap()));
                }
            }
        }
        Self(values)
    }
}

#[async_trait]
impl ChunkSource for DirStore {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        let Some(v) = self.0.get(key).cloned() else { return Ok(None) };
        let len = v.len() as u64;
        Ok(Some(match range {
            None => v,
            Some(ByteRangeRequest::Suffix(n)) => v.slice(usize::try_from(len.saturating_sub(n)).unwrap()..),
            Some(ByteRangeRequest::Bounded(r)) if r.start <= len => {
                v.slice(usize::try_from(r.start).unwrap()..usize::try_from(r.end.min(len)).unwrap())
            }
            Some(r) => return Err(SourceError::RangeNotSatisfiable(format!("{key}: {r}"))),
        }))
    }
}

/// An in-memory store for writes.
#[derive(Default)]
struct MemStore(Mutex<BTreeMap<String, Bytes>>);

#[async_trait]
impl ChunkSource for MemStore {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        let snapshot = DirStore(self.0.lock().unwrap().clone());
        snapshot.get(key, range).await
    }
}

#[async_trait]
impl ChunkSink for MemStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        self.0.lock().unwrap().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        self.0.lock().unwrap().remove(key);
        Ok(())
    }
}

fn open(dir: &Path) -> ArrayDescription {
    let v3 = dir.join("zarr.json");
    if v3.exists() {
        let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_slice(&std::fs::read(v3).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        else {
            panic!("{} is not an array", dir.display())
        };
        return ArrayDescription::from_v3(&meta).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    let meta = ArrayMetadataV2::from_slice(&std::fs::read(dir.join(".zarray")).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let attrs = match std::fs::read(dir.join(".zattrs")) {
        Ok(b) => attributes_from_json(&serde_json::from_slice(&b).unwrap(), "").unwrap(),
        Err(_) => serde_json::Map::new(),
    };
    ArrayDescription::from_v2(&meta, attrs).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// The expected values of array `name`, as the engine holds them in memory.
fn expected(root: &Path, entry: &Value) -> ChunkData {
    let name = entry["name"].as_str().unwrap();
    match entry["expected"].as_str().unwrap() {
        "bin" => ChunkData::Fixed(std::fs::read(root.join(format!("{name}.expected.bin"))).unwrap()),
        kind => {
            let items: Vec<String> =
                serde_json::from_slice(&std::fs::read(root.join(format!("{name}.expected.json"))).unwrap()).unwrap();
            ChunkData::Variable(
                items.into_iter().map(|s| if kind == "bytes" { hex(&s) } else { s.into_bytes() }).collect(),
            )
        }
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Checks one array; returns how many chunks it stores and how many its grid has.
fn check(root: &Path, entry: &Value) -> (usize, u64) {
    let name = entry["name"].as_str().unwrap();
    let dir = root.join(name);
    let a = open(&dir);
    let shape: Vec<u64> = entry["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
    assert_eq!(a.shape, shape, "{name}: shape");
    let store = DirStore::load(&dir);
    let want = expected(root, entry);

    // Every stored file is a chunk inside the grid; it decodes, and the
    // engine's re-encoding decodes to the same values.
    let grid = a.grid();
    for (key, bytes) in &store.0 {
        let coords = a
            .chunk_key_encoding
            .decode(key, a.shape.len())
            .unwrap_or_else(|e| panic!("{name}: stored file {key} is not a chunk key: {e}"));
        assert!(grid.contains(&coords), "{name}/{key}: outside the chunk grid");
        let chunk = a.decode_chunk(bytes.to_vec()).unwrap_or_else(|e| panic!("{name}/{key}: {e}"));
        let again = a.encode_chunk(chunk.clone()).unwrap_or_else(|e| panic!("{name}/{key}: re-encode: {e}"));
        assert!(a.decode_chunk(again).unwrap() == chunk, "{name}/{key}: re-encoded chunk decodes differently");
        let mut truncated = bytes.to_vec();
        truncated.truncate(bytes.len() / 2);
        if let Err(e) = a.decode_chunk(truncated) {
            assert!(!e.codec.is_empty() && !e.reason.is_empty(), "{name}/{key}: {e}");
        }
    }

    // The whole array, as the server reads it.
    let whole = ArraySubset::from_shape(&a.shape);
    let got = block_on(read_region(&a, &store, &whole)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_values_eq(name, &got, &want);

    // Windows that cut through chunks (and, in sharded arrays, through
    // shards and inner chunks: the partial path reads the index and only the
    // inner chunks needed), compared with the same window of the expected values.
    for window in windows(&a.shape) {
        let got = block_on(read_region(&a, &store, &window)).unwrap_or_else(|e| panic!("{name} {window}: {e}"));
        assert_values_eq(&format!("{name} {window}"), &got, &slice(&want, &a.shape, &window));
    }

    // Written one outermost index at a time (every write but those of whole
    // chunk rows is a read-modify-write, of inner chunks too in shards), the
    // array reads back the same and stores the chunks the client stored.
    if let Some(&outer) = a.shape.first() {
        let written = MemStore::default();
        for i in 0..outer {
            let mut start = vec![0; a.shape.len()];
            start[0] = i;
            let mut shape = a.shape.clone();
            shape[0] = 1;
            let row = ArraySubset::new(start, shape).unwrap();
            block_on(write_region(&a, &written, &written, &row, &slice(&want, &a.shape, &row)))
                .unwrap_or_else(|e| panic!("{name} write {row}: {e}"));
        }
        let got = block_on(read_region(&a, &written, &whole)).unwrap();
        assert_values_eq(&format!("{name} written row by row"), &got, &want);
        // Never a chunk the client did not store (the client may store
        // fill-valued chunks the engine omits; the Python suite lists those).
        for key in written.0.lock().unwrap().keys() {
            assert!(store.0.contains_key(key), "{name}: the engine stored {key}, the client did not");
        }
    }

    // Structured arrays: each field alone, subarray dimensions appended.
    for field in entry.get("fields").and_then(Value::as_array).into_iter().flatten() {
        let fname = field["name"].as_str().unwrap();
        let view = a.field(fname).unwrap_or_else(|e| panic!("{name}.{fname}: {e}"));
        let fshape: Vec<u64> = field["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        assert_eq!(view.shape(&a.shape), fshape, "{name}.{fname}: shape");
        let ChunkData::Fixed(records) = &got else { panic!("{name}: structured data is fixed-size") };
        let values = view.extract(records).unwrap_or_else(|e| panic!("{name}.{fname}: {e}"));
        let want = std::fs::read(root.join(format!("{name}.field.{fname}.bin"))).unwrap();
        assert!(values == want, "{name}.{fname}: field values differ");
    }
    (store.0.len(), ArraySubset::from_shape(&grid.grid_shape()).num_elements())
}

/// A few regions of an array of `shape` that start and end inside chunks.
fn windows(shape: &[u64]) -> Vec<ArraySubset> {
    if shape.is_empty() || shape.contains(&0) {
        return Vec::new();
    }
    let make = |f: &dyn Fn(u64) -> (u64, u64)| {
        let (start, len): (Vec<u64>, Vec<u64>) = shape.iter().map(|&s| f(s)).unzip();
        ArraySubset::new(start, len).unwrap()
    };
    vec![make(&|s| (s / 4, (s / 2).max(1))), make(&|s| (s - 1, 1)), make(&|s| (1.min(s - 1), s - 1.min(s - 1)))]
}

/// The values of `region` cut out of a whole array's values.
fn slice(whole: &ChunkData, shape: &[u64], region: &ArraySubset) -> ChunkData {
    let origin = vec![0; shape.len()];
    let n = usize::try_from(region.num_elements()).unwrap();
    match whole {
        ChunkData::Fixed(bytes) => {
            let total = usize::try_from(ArraySubset::from_shape(shape).num_elements()).unwrap();
            let size = bytes.len().checked_div(total).unwrap_or(0);
            let mut out = vec![0; n * size];
            copy_region(bytes, shape, region, &mut out, region.shape(), &origin, size).unwrap();
            ChunkData::Fixed(out)
        }
        ChunkData::Variable(items) => {
            let mut out = vec![Vec::new(); n];
            copy_region(items, shape, region, &mut out, region.shape(), &origin, 1).unwrap();
            ChunkData::Variable(out)
        }
    }
}

fn assert_values_eq(name: &str, got: &ChunkData, want: &ChunkData) {
    match (got, want) {
        (ChunkData::Fixed(g), ChunkData::Fixed(w)) => {
            assert_eq!(g.len(), w.len(), "{name}: decoded size");
            if let Some(i) = g.iter().zip(w).position(|(a, b)| a != b) {
                panic!("{name}: decoded bytes differ from the client's first at byte {i}");
            }
        }
        (ChunkData::Variable(g), ChunkData::Variable(w)) => assert_eq!(g, w, "{name}"),
        _ => panic!("{name}: decoded {got:?}, expected {want:?}"),
    }
}

fn manifest(root: &Path) -> Vec<Value> {
    let m: Value = serde_json::from_slice(&std::fs::read(root.join("matrix.json")).unwrap()).unwrap();
    m["arrays"].as_array().unwrap().clone()
}

/// Checks every array of a matrix directory; returns (arrays, stored
/// chunks, arrays with chunks missing).
fn check_all(root: &Path) -> (usize, usize, usize) {
    let entries = manifest(root);
    let (mut chunks, mut sparse) = (0, 0);
    for entry in &entries {
        let (stored, grid) = check(root, entry);
        chunks += stored;
        sparse += usize::from((stored as u64) < grid);
    }
    (entries.len(), chunks, sparse)
}

#[test]
fn committed_matrix_decodes_like_the_writing_clients() {
    let (arrays, chunks, sparse) = check_all(&matrix_dir());
    assert!(arrays >= 200, "only {arrays} arrays");
    assert!(chunks >= 1400, "only {chunks} chunks");
    // Missing chunks (fill-valued, never stored) read as the fill value in many arrays.
    assert!(sparse >= 40, "only {sparse} arrays with missing chunks");
}

/// The matrix covers what the issue asks for, so a generator edit cannot
/// silently drop a feature.
#[test]
fn matrix_covers_every_feature() {
    let entries = manifest(&matrix_dir());
    let covers: Vec<String> = entries
        .iter()
        .flat_map(|e| e["covers"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()))
        .collect();
    let has = |c: &str| covers.iter().any(|x| x == c);
    for t in [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "bfloat16",
        "int4",
        "string",
        "bytes",
        "fixed_length_utf32",
        "null_terminated_bytes",
        "raw_bytes",
        "numpy.datetime64",
        "numpy.timedelta64",
        "structured",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e4m3b11fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "structured-subarray",
        "structured-nested",
        "v3-float8_e4m3fn",
        "v3-float8_e4m3fnuz",
        "v3-float8_e4m3b11fnuz",
        "v3-float8_e5m2",
        "v3-float8_e5m2fnuz",
    ] {
        assert!(has(&format!("dtype:{t}")), "no array of data type {t}");
    }
    // Blosc: every compressor with every shuffle mode, in v3 names and v2 numbers.
    for cname in ["blosclz", "lz4", "lz4hc", "zlib", "zstd"] {
        for shuffle in ["noshuffle", "shuffle", "bitshuffle", "-1", "0", "1", "2"] {
            assert!(has(&format!("blosc:{cname}:{shuffle}")), "no blosc {cname} with shuffle {shuffle}");
        }
    }
    for order in ["<", ">"] {
        for code in ["i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"] {
            assert!(has(&format!("dtype:{order}{code}")), "no v2 array of {order}{code}");
        }
    }
    for code in ["|b1", "|i1", "|u1", "|S4", "<U3", ">U3", "|V3", "<M8[ms]", ">M8[D]", "<m8[10s]", ">m8[ns]", "|O"] {
        assert!(has(&format!("dtype:{code}")), "no v2 array of {code}");
    }
    for c in [
        "codec:bytes",
        "codec:transpose",
        "codec:gzip1",
        "codec:zstd",
        "codec:zstd_checksum",
        "codec:crc32c",
        "codec:vlen-utf8",
        "codec:vlen-bytes",
        "codec:sharding_indexed",
        "codec:blosc_lz4_shuffle",
        "codec:blosc_zstd_bitshuffle",
        "codec:blosc_blosclz_noshuffle",
        "codec:blosc_lz4hc_shuffle",
        "codec:blosc_zlib_bitshuffle",
        "codec:nc_zlib",
        "codec:nc_bz2",
        "codec:nc_lz4",
        "codec:nc_zstd",
        "codec:nc_gzip",
        "codec:nc_blosc",
        "codec:nc_crc32c",
        "codec:numcodecs.delta",
        "codec:numcodecs.fixedscaleoffset",
        "sharding:start",
        "sharding:end",
        "sharding:nested",
        "sharding:inner-transpose",
        "sharding:after-transpose",
        "sharding:then-crc32c",
        "sharding:vlen",
        "rank:0",
        "rank:1",
        "rank:3",
        "shape:empty",
        "chunk>shape",
        "compressor:zlib",
        "compressor:gzip",
        "compressor:bz2",
        "compressor:zstd",
        "compressor:zstd_checksum",
        "compressor:lz4",
        "compressor:blosc_lz4_shuffle",
        "compressor:blosc_zstd_bitshuffle",
        "compressor:blosc_zlib_noshuffle",
        "compressor:blosc_blosclz_autoshuffle",
        "compressor:blosc_lz4hc_bitshuffle",
        "filter:delta",
        "filter:fixedscaleoffset",
        "filter:vlen-utf8",
        "filter:vlen-bytes",
        "filter:zlib",
        "filter:gzip",
        "compressor:crc32c",
        "chunk_key:default.",
        "chunk_key:v2.",
        "chunk_key:v2/",
        "order:F",
        "fill:hex",
        "fill:complex-hex",
        "fill:number",
        "fill:-Infinity",
        "fill:base64",
        "fill:NaT",
        "fill:string",
    ] {
        assert!(has(c), "nothing covers {c}");
    }
    let v2_fills: Vec<&str> = covers.iter().filter_map(|c| c.strip_prefix("fill:")).collect();
    for f in ["None", "nan", "inf", "-inf", "True", "(1.5+nanj)"] {
        assert!(v2_fills.contains(&f), "no v2 fill value {f}");
    }
}

#[test]
fn freshly_generated_matrix() {
    let Ok(python) = std::env::var("ZARRD_TEST_PYTHON") else {
        eprintln!("ZARRD_TEST_PYTHON is not set; committed matrix only");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("matrix");
    let status = std::process::Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine/generate_matrix.py"))
        .arg(&out)
        .status()
        .expect("run the matrix generator");
    assert!(status.success(), "generate_matrix.py failed");
    let (arrays, _, _) = check_all(&out);
    assert_eq!(arrays, manifest(&matrix_dir()).len(), "fresh and committed matrices differ in size");
}
