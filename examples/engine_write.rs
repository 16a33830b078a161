//! Writes every array of the engine fixture matrix with the engine alone:
//! the write-back half of the interoperability matrix.
//!
//! ```text
//! cargo run --example engine_write -- tests/fixtures/engine/matrix OUT_DIR
//! ```
//!
//! For each array listed in `MATRIX_DIR/matrix.json`, the fixture's metadata
//! is parsed and serialised again by the engine (its canonical JSON: fill
//! values, data types, codecs), checked to parse back to the same document,
//! and written to `OUT_DIR/<name>/`. The array's expected values (the
//! fixture's `<name>.expected.*`, what the writing client reads) are then
//! encoded by the engine's codecs and written through `write_region` in two
//! halves split inside a chunk row, so the second half is a read-modify-write
//! of chunks the first half wrote. Chunks equal to the fill value are not
//! stored; shards omit inner chunks equal to it.
//!
//! `tests/python/test_engine_matrix.py` runs this and reads every array back
//! with zarr-python and TensorStore. Exit status 1 (with the array named) on
//! the first failure.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use futures::executor::block_on;
use serde_json::Value;
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::byte_range::ByteRangeRequest;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::metadata::v2::attributes_from_json;
use zarrd::zarr::metadata::{ArrayMetadataV2, NodeMetadataV3};
use zarrd::zarr::region::{write_region, ChunkSink, ChunkSource, SourceError};
use zarrd::zarr::subset::ArraySubset;

/// A directory as a key-value store: keys are relative paths; a put writes a
/// temporary file and renames it, so a key is replaced whole.
struct DirStore(PathBuf);

impl DirStore {
    fn path(&self, key: &str) -> Result<PathBuf, SourceError> {
        if key.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            return Err(SourceError::InvalidKey(format!("{key}: not a relative key")));
        }
        Ok(self.0.join(key))
    }
}

fn io(key: &str, e: &std::io::Error) -> SourceError {
    let reason = format!("{key}: {e}");
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => SourceError::PermissionDenied(reason),
        _ => SourceError::Unavailable(reason),
    }
}

#[async_trait]
impl ChunkSource for DirStore {
    async fn get(&self, key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        let bytes = match std::fs::read(self.path(key)?) {
            Ok(b) => Bytes::from(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(key, &e)),
        };
        let len = bytes.len() as u64;
        let at = |n: u64| usize::try_from(n.min(len)).unwrap_or(usize::MAX);
        Ok(Some(match range {
            None => bytes,
            Some(ByteRangeRequest::Suffix(n)) => bytes.slice(at(len.saturating_sub(n))..),
            Some(ByteRangeRequest::Bounded(r)) if r.start <= len => bytes.slice(at(r.start)..at(r.end)),
            Some(r) => return Err(SourceError::RangeNotSatisfiable(format!("{key}: {r}"))),
        }))
    }
}

#[async_trait]
impl ChunkSink for DirStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), SourceError> {
        let path = self.path(key)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(key, &e))?;
        }
        let tmp = path.with_extension("zarrd-tmp");
        std::fs::write(&tmp, &bytes).map_err(|e| io(key, &e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(key, &e))
    }

    async fn delete(&self, key: &str) -> Result<(), SourceError> {
        match std::fs::remove_file(self.path(key)?) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(key, &e)),
            _ => Ok(()),
        }
    }
}

type Error = Box<dyn std::error::Error>;

/// Parses the fixture's metadata, writes the engine's serialisation of it to
/// `out`, and describes the array from what was written.
fn copy_metadata(fixture: &Path, out: &Path) -> Result<ArrayDescription, Error> {
    std::fs::create_dir_all(out)?;
    let v3 = fixture.join("zarr.json");
    if v3.exists() {
        let parsed = NodeMetadataV3::from_slice(&std::fs::read(v3)?)?;
        let written = serde_json::to_vec_pretty(&parsed)?;
        let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_slice(&written)? else {
            return Err("not an array".into());
        };
        if NodeMetadataV3::Array(meta.clone()) != parsed {
            return Err("zarr.json does not parse back to the same metadata".into());
        }
        std::fs::write(out.join("zarr.json"), &written)?;
        return Ok(ArrayDescription::from_v3(&meta)?);
    }
    let parsed = ArrayMetadataV2::from_slice(&std::fs::read(fixture.join(".zarray"))?)?;
    let written = serde_json::to_vec_pretty(&parsed)?;
    let meta = ArrayMetadataV2::from_slice(&written)?;
    if meta != parsed {
        return Err(".zarray does not parse back to the same metadata".into());
    }
    std::fs::write(out.join(".zarray"), &written)?;
    let attrs = match std::fs::read(fixture.join(".zattrs")) {
        Ok(b) => {
            let attrs = attributes_from_json(&serde_json::from_slice(&b)?, "")?;
            std::fs::write(out.join(".zattrs"), serde_json::to_vec_pretty(&attrs)?)?;
            attrs
        }
        Err(_) => serde_json::Map::new(),
    };
    Ok(ArrayDescription::from_v2(&meta, attrs)?)
}

/// The expected values of a matrix entry, in the engine's in-memory layout.
fn expected(matrix: &Path, entry: &Value, name: &str) -> Result<ChunkData, Error> {
    if entry["expected"] == "bin" {
        return Ok(ChunkData::Fixed(std::fs::read(matrix.join(format!("{name}.expected.bin")))?));
    }
    let items: Vec<String> = serde_json::from_slice(&std::fs::read(matrix.join(format!("{name}.expected.json")))?)?;
    if entry["expected"] == "bytes" {
        let hex = |s: &str| -> Result<Vec<u8>, Error> {
            (0..s.len()).step_by(2).map(|i| Ok(u8::from_str_radix(s.get(i..i + 2).ok_or("odd hex")?, 16)?)).collect()
        };
        return Ok(ChunkData::Variable(items.iter().map(|s| hex(s)).collect::<Result<_, _>>()?));
    }
    Ok(ChunkData::Variable(items.into_iter().map(String::into_bytes).collect()))
}

/// Elements `[from, to)` of the outermost dimension of `data` (C order);
/// `shape` has rank >= 1.
fn rows(data: &ChunkData, shape: &[u64], from: u64, to: u64) -> Result<ChunkData, Error> {
    let per_row = usize::try_from(shape[1..].iter().product::<u64>())?;
    let (a, b) = (usize::try_from(from)? * per_row, usize::try_from(to)? * per_row);
    Ok(match data {
        ChunkData::Fixed(bytes) => {
            let elements = usize::try_from(shape.iter().product::<u64>())?;
            let size = bytes.len().checked_div(elements).unwrap_or(0);
            ChunkData::Fixed(bytes.get(a * size..b * size).ok_or("expected values too short")?.to_vec())
        }
        ChunkData::Variable(items) => ChunkData::Variable(items.get(a..b).ok_or("expected values too short")?.to_vec()),
    })
}

fn write_one(matrix: &Path, out_root: &Path, entry: &Value) -> Result<(), Error> {
    let name = entry["name"].as_str().ok_or("entry without a name")?;
    let out = out_root.join(name);
    let a = copy_metadata(&matrix.join(name), &out)?;
    let data = expected(matrix, entry, name)?;
    let store = DirStore(out);
    let Some(&outer) = a.shape.first() else {
        // A scalar: one write of its one element.
        let whole = ArraySubset::from_shape(&a.shape);
        return Ok(block_on(write_region(&a, &store, &store, &whole, &data))?);
    };
    // Two halves, split inside the first chunk row past the middle: the
    // second write updates chunks the first wrote (read-modify-write).
    let split = (outer / 2 + 1).min(outer);
    for (from, to) in [(0, split), (split, outer)] {
        if from == to {
            continue;
        }
        let mut start = vec![0; a.shape.len()];
        start[0] = from;
        let mut shape = a.shape.clone();
        shape[0] = to - from;
        let region = ArraySubset::new(start, shape)?;
        block_on(write_region(&a, &store, &store, &region, &rows(&data, &a.shape, from, to)?))?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [matrix, out] = args.as_slice() else {
        eprintln!("usage: engine_write MATRIX_DIR OUT_DIR");
        std::process::exit(2);
    };
    let (matrix, out) = (Path::new(matrix), Path::new(out));
    let manifest: Value = match std::fs::read(matrix.join("matrix.json")).map(|b| serde_json::from_slice(&b)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return fail("matrix.json", &e.into()),
        Err(e) => return fail("matrix.json", &e.into()),
    };
    let entries = manifest["arrays"].as_array().cloned().unwrap_or_default();
    for entry in &entries {
        if let Err(e) = write_one(matrix, out, entry) {
            return fail(entry["name"].as_str().unwrap_or("?"), &e);
        }
    }
    println!("wrote {} arrays to {}", entries.len(), out.display());
}

fn fail(what: &str, e: &Error) {
    eprintln!("engine_write: {what}: {e}");
    std::process::exit(1);
}
