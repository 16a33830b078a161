//! End to end: arrays written by zarr-python (v2 and v3, no compressor) are
//! decoded chunk by chunk with the engine's codec chains and compared, element
//! for element, with what zarr-python reads; every stored chunk also
//! re-encodes to the same bytes zarr-python wrote.
//!
//! Fixtures: `tests/fixtures/engine/arrays`, made by
//! `tests/fixtures/engine/generate.py` (pinned zarr-python and numcodecs).
//! With `ZARRD_TEST_PYTHON=/path/to/python` set, the generator also runs into
//! a temporary directory and those fresh arrays are checked too.

use std::path::{Path, PathBuf};

use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::codec::ArrayToBytesCodec as _;
use zarrd::zarr::metadata::v2::attributes_from_json;
use zarrd::zarr::metadata::{ArrayMetadataV2, NodeMetadataV3};
use zarrd::zarr::subset::{copy_region, ArraySubset};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine")
}

fn open(dir: &Path) -> ArrayDescription {
    let v3 = dir.join("zarr.json");
    if v3.exists() {
        let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_slice(&std::fs::read(v3).unwrap()).unwrap() else {
            panic!("{} is not an array", dir.display())
        };
        return ArrayDescription::from_v3(&meta).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    let meta = ArrayMetadataV2::from_slice(&std::fs::read(dir.join(".zarray")).unwrap()).unwrap();
    let attrs = match std::fs::read(dir.join(".zattrs")) {
        Ok(b) => attributes_from_json(&serde_json::from_slice(&b).unwrap(), "").unwrap(),
        Err(_) => serde_json::Map::new(),
    };
    ArrayDescription::from_v2(&meta, attrs).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// Every file under `dir` except metadata, as keys relative to `dir`.
fn stored_keys(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
        if entry.file_type().unwrap().is_dir() {
            stored_keys(&entry.path(), &key, out);
        } else if !matches!(name.as_str(), "zarr.json" | ".zarray" | ".zattrs" | ".zgroup") {
            out.push(key);
        }
    }
}

/// Decodes the whole array; returns it and how many chunks were stored.
fn read_array(dir: &Path, a: &ArrayDescription) -> (ChunkData, usize) {
    let grid = a.grid();
    let n = usize::try_from(ArraySubset::from_shape(&a.shape).num_elements()).unwrap();
    let mut out = match a.data_type.size() {
        Some(size) => ChunkData::Fixed(vec![0; n * size]),
        None => ChunkData::Variable(vec![Vec::new(); n]),
    };
    let mut stored = 0;
    for coords in ArraySubset::from_shape(&grid.grid_shape()).indices() {
        let key = a.chunk_key(&coords);
        let chunk = match std::fs::read(dir.join(&key)) {
            Ok(bytes) => {
                stored += 1;
                let chunk = a.decode_chunk(bytes.clone()).unwrap_or_else(|e| panic!("{}/{key}: {e}", dir.display()));
                let again = a.codecs.encode(chunk.clone(), &a.chunk_repr()).unwrap();
                assert!(again == bytes, "{}/{key}: re-encoding differs from zarr-python's bytes", dir.display());
                // Hostile bytes: every truncation and an extra byte are errors naming a codec, never panics.
                for cut in (0..bytes.len()).step_by(3) {
                    let e = a.decode_chunk(bytes[..cut].to_vec()).unwrap_err();
                    assert!(!e.codec.is_empty() && !e.reason.is_empty());
                }
                let mut longer = bytes.clone();
                longer.push(0);
                assert!(a.decode_chunk(longer).is_err(), "{}/{key}: a trailing byte was accepted", dir.display());
                chunk
            }
            Err(_) => ChunkData::filled(&a.chunk_repr()),
        };
        let part = grid.chunk_subset(&coords).unwrap();
        let in_chunk = ArraySubset::from_shape(part.shape());
        match (&chunk, &mut out) {
            (ChunkData::Fixed(src), ChunkData::Fixed(dst)) => {
                let size = a.data_type.size().unwrap();
                copy_region(src, &a.chunk_shape, &in_chunk, dst, &a.shape, part.start(), size).unwrap();
            }
            (ChunkData::Variable(src), ChunkData::Variable(dst)) => {
                copy_region(src, &a.chunk_shape, &in_chunk, dst, &a.shape, part.start(), 1).unwrap();
            }
            _ => panic!("chunk kind mismatch"),
        }
    }
    (out, stored)
}

/// Checks every array in `root`; returns how many.
fn check_all(root: &Path) -> usize {
    let mut checked = 0;
    let mut names: Vec<PathBuf> =
        std::fs::read_dir(root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    names.sort();
    for dir in names {
        let a = open(&dir);
        let (data, stored) = read_array(&dir, &a);
        // Every stored file is a chunk key of the array's encoding, inside the grid.
        let mut keys = Vec::new();
        stored_keys(&dir, "", &mut keys);
        assert_eq!(keys.len(), stored, "{}: files that are not chunks read here: {keys:?}", dir.display());
        for key in &keys {
            let coords = a.chunk_key_encoding.decode(key, a.shape.len()).unwrap();
            assert!(a.grid().contains(&coords), "{key}");
        }
        let base = dir.to_str().unwrap();
        match data {
            ChunkData::Fixed(bytes) => {
                let want = std::fs::read(format!("{base}.expected.bin")).unwrap();
                assert!(bytes == want, "{}: decoded values differ from zarr-python's", dir.display());
            }
            ChunkData::Variable(items) => {
                let want: Vec<String> =
                    serde_json::from_slice(&std::fs::read(format!("{base}.expected.json")).unwrap()).unwrap();
                let got: Vec<String> = items.into_iter().map(|b| String::from_utf8(b).unwrap()).collect();
                assert_eq!(got, want, "{}", dir.display());
            }
        }
        checked += 1;
    }
    checked
}

#[test]
fn checked_in_fixtures_decode_like_zarr_python() {
    let n = check_all(&fixtures().join("arrays"));
    assert!(n >= 19, "only {n} fixture arrays");
}

#[test]
fn fresh_fixtures_from_python() {
    let Ok(python) = std::env::var("ZARRD_TEST_PYTHON") else {
        eprintln!("ZARRD_TEST_PYTHON is not set; checked-in fixtures only");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("arrays");
    let status = std::process::Command::new(python)
        .arg(fixtures().join("generate.py"))
        .arg(&out)
        .status()
        .expect("run the fixture generator");
    assert!(status.success(), "generate.py failed");
    assert!(check_all(&out) >= 19);
}
