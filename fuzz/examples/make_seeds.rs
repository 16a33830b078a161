//! Writes the seed inputs under `fuzz/seeds/<target>/`: the fixed arrays'
//! documents and a few hand-made ones (metadata), one valid chunk per codec
//! array (codec_decode) and one valid shard per sharded array
//! (shard_index), all encoded by the engine itself.
//!
//! Run from `fuzz/`: `cargo run --example make_seeds`.

// Linked for the sanitizer-coverage callbacks, so the example builds with the
// fuzz targets' flags and reuses their artifacts.
use libfuzzer_sys as _;
use std::fs;
use std::path::Path;

use serde_json::{json, Value};
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::chunk::{ChunkData, ChunkRepr};
use zarrd::zarr::data_type::DataType;
use zarrd_fuzz::{codec_cases, shard_cases};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let dir = |t: &str| {
        let d = root.join(t);
        fs::create_dir_all(&d).unwrap();
        d
    };
    let (meta, codec, shard) = (dir("metadata"), dir("codec_decode"), dir("shard_index"));
    let pretty = |v: &Value| serde_json::to_vec_pretty(v).unwrap();

    for (i, case) in codec_cases().iter().enumerate() {
        fs::write(meta.join(format!("{}.json", case.name)), pretty(&case.doc)).unwrap();
        let encoded = encode(&case.desc, 1.0);
        let mut input = vec![u8::try_from(i).unwrap()];
        input.extend_from_slice(&encoded);
        fs::write(codec.join(case.name), input).unwrap();
    }
    for (i, case) in shard_cases().iter().enumerate() {
        fs::write(meta.join(format!("sharded_{}.json", case.name)), pretty(&case.doc)).unwrap();
        // Half the elements stored, half fill: some inner chunks are empty.
        let encoded = encode(&case.desc, 0.5);
        let mut input = vec![u8::try_from(i).unwrap(), 1];
        input.extend_from_slice(&encoded);
        fs::write(shard.join(case.name), input).unwrap();
    }
    let hand_made = [
        ("group_v3.json", json!({"zarr_format": 3, "node_type": "group", "attributes": {"a": [1, 2.5, null]}})),
        ("zgroup.json", json!({"zarr_format": 2})),
        ("zattrs.json", json!({"units": "m", "scale": [0.5, 1e300], "nested": {"x": true}})),
        (
            "zmetadata.json",
            json!({"zarr_consolidated_format": 1, "metadata": {
                ".zgroup": {"zarr_format": 2},
                "a/.zarray": {"zarr_format": 2, "shape": [4, 5], "chunks": [2, 5], "dtype": "<f4",
                    "fill_value": "NaN", "order": "C", "filters": null, "compressor": {"id": "zstd", "level": 1}},
                "a/.zattrs": {"_ARRAY_DIMENSIONS": ["y", "x"]},
                "b/.zgroup": {"zarr_format": 2}
            }}),
        ),
        (
            "v3_extensions.json",
            json!({"zarr_format": 3, "node_type": "array", "shape": [0, 3], "data_type": "int8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 3]}},
                "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
                "fill_value": -128, "codecs": [{"name": "bytes"}], "dimension_names": ["t", null],
                "storage_transformers": [], "attributes": {}}),
        ),
    ];
    for (name, doc) in hand_made {
        fs::write(meta.join(name), pretty(&doc)).unwrap();
    }
    println!("seeds written under {}", root.display());
}

/// A sample chunk encoded; a chunk of fill values where the sample does not
/// encode (values out of a lossy filter's range).
fn encode(desc: &ArrayDescription, stored: f64) -> Vec<u8> {
    desc.encode_chunk(sample(desc, stored))
        .or_else(|_| desc.encode_chunk(ChunkData::filled(&desc.chunk_repr())))
        .expect("a chunk of fill values encodes")
}

/// A chunk of `desc` whose first `stored` fraction of elements are not the
/// fill value (the rest are).
fn sample(desc: &ArrayDescription, stored: f64) -> ChunkData {
    let repr: ChunkRepr = desc.chunk_repr();
    let n = usize::try_from(repr.num_elements()).unwrap();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let cut = (n as f64 * stored) as usize;
    match repr.data_type.size() {
        None => ChunkData::Variable(
            (0..n).map(|i| if i < cut { format!("s{i}").into_bytes() } else { repr.fill_value.clone() }).collect(),
        ),
        Some(size) => {
            let mut out = Vec::with_capacity(n * size);
            for i in 0..n {
                if i >= cut {
                    out.extend_from_slice(&repr.fill_value);
                } else if repr.data_type == DataType::Bool {
                    out.push(u8::from(i % 3 == 0));
                } else {
                    #[allow(clippy::cast_possible_truncation)]
                    out.extend((0..size).map(|b| (i * 7 + b * 13 % 5) as u8));
                }
            }
            ChunkData::Fixed(out)
        }
    }
}
