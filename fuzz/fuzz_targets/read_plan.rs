//! Selection text and an array document → the service's read planner
//! (`zarr::region::plan_read`, the planner the server runs), slabs produced lazily.
//!
//! Input: byte 0 picks the document form (v3 regular, v3 sharded, v2) and
//! the mode; byte 1 the rank (1..=32); per dimension one byte for its length
//! and one for its chunk (and, when sharded, inner chunk) extent, from
//! tables running up to 2^62; byte 2+2r the slab budget; the rest is the
//! `sel=` text. The document goes through the real parser and normaliser.
//! What must hold (`plan::verify`): the slabs tile the selection in output
//! order, their lengths add up to its element count, none is empty, and for
//! small slabs every output element is written exactly once from the unit
//! position holding the index the selection names — checked on the first
//! 8 slabs and 4,096 units (slabs of up to 4,096 elements element by
//! element), so huge plans stop early (and must get there
//! fast: nothing is built per touched chunk). The units count
//! (`touched_units`) runs on every plan.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use zarrd::zarr::region::plan::verify;
use zarrd::zarr::region::plan_read;
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::metadata::{parse_document, Document, DocumentKind, NodeMetadataV3};
use zarrd::zarr::selection::{SelectionMode, SelectionSpec};

const LENGTHS: [u64; 10] = [0, 1, 2, 3, 5, 10, 64, 1000, 1 << 31, 1 << 62];
const CHUNKS: [u64; 8] = [1, 1, 2, 3, 4, 7, 64, 1 << 40];

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let form = data[0] % 3;
    let mode = [SelectionMode::Basic, SelectionMode::Orthogonal, SelectionMode::Coordinate][usize::from(data[0] / 3 % 3)];
    let rank = (usize::from(data[1] % 32) + 1).min((data.len() - 3) / 2);
    if rank == 0 {
        return;
    }
    let dims = &data[2..2 + 2 * rank];
    let shape: Vec<u64> = dims.iter().step_by(2).map(|b| LENGTHS[usize::from(*b) % LENGTHS.len()]).collect();
    let inner: Vec<u64> = dims.iter().skip(1).step_by(2).map(|b| CHUNKS[usize::from(*b % 8)]).collect();
    let per_shard: Vec<u64> = dims.iter().skip(1).step_by(2).map(|b| u64::from(*b >> 3 & 3) + 1).collect();
    let budget = 64 + u64::from(data[2 + 2 * rank]) * 97;
    let Ok(text) = std::str::from_utf8(&data[3 + 2 * rank..]) else { return };
    let Some(desc) = describe(form, &shape, &inner, &per_shard) else { return };
    let Ok(spec) = SelectionSpec::parse(text, mode) else { return };
    let Ok(sel) = spec.resolve(&desc.shape, None) else { return };
    let plan = Arc::new(plan_read(&desc, sel, budget).expect("a resolved selection plans"));
    let _ = plan.touched_units();
    if let Err(e) = verify(&plan, 8, 4096, 4096) {
        panic!("{e}\nshape {shape:?}, units {:?}, budget {budget}, sel `{text}`", plan.unit_shape());
    }
});

fn describe(form: u8, shape: &[u64], chunk: &[u64], per_shard: &[u64]) -> Option<ArrayDescription> {
    let bytes = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let doc = match form {
        0 => json!({
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [bytes]
        }),
        1 => {
            let outer: Vec<u64> = chunk.iter().zip(per_shard).map(|(c, n)| c.saturating_mul(*n)).collect();
            json!({
                "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": outer}},
                "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
                "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": chunk,
                    "codecs": [bytes], "index_codecs": [bytes, {"name": "crc32c"}]}}]
            })
        }
        _ => json!({
            "zarr_format": 2, "shape": shape, "chunks": chunk, "dtype": "<f8", "fill_value": null,
            "order": "C", "filters": null, "compressor": null
        }),
    };
    let bytes = serde_json::to_vec(&doc).ok()?;
    if form == 2 {
        match parse_document(DocumentKind::ZArray, &bytes).ok()? {
            Document::ZArray(m) => ArrayDescription::from_v2(&m, Map::<String, Value>::new()).ok(),
            _ => None,
        }
    } else {
        match parse_document(DocumentKind::ZarrJson, &bytes).ok()? {
            Document::ZarrJson(NodeMetadataV3::Array(m)) => ArrayDescription::from_v3(&m).ok(),
            _ => None,
        }
    }
}
