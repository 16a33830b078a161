//! Arbitrary bytes as every kind of metadata document (`zarr.json`,
//! `.zarray`, `.zgroup`, `.zattrs`, `.zmetadata`).
//!
//! What must hold, beyond "no panic":
//! - a document that parses serialises back to JSON that parses to the same
//!   document (the store writes the canonical form);
//! - an array that parses either normalises into an `ArrayDescription` or
//!   fails with an error; when it does, its chunk keys decode back to their
//!   coordinates, its TensorStore schema builds, and (for chunks up to 64 Ki
//!   elements) a chunk of fill values encodes and the result decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Map;
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::data_type::DataType;
use zarrd::zarr::metadata::v2::ConsolidatedEntryV2;
use zarrd::zarr::metadata::{parse_document, Document, DocumentKind, NodeMetadataV3};
use zarrd::zarr::tensorstore;

const KINDS: [DocumentKind; 5] =
    [DocumentKind::ZarrJson, DocumentKind::ZArray, DocumentKind::ZGroup, DocumentKind::ZAttrs, DocumentKind::ZMetadata];

/// Chunks up to this many elements (and 1 MiB) are encoded and decoded.
const MAX_ELEMENTS: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    for kind in KINDS {
        let Ok(doc) = parse_document(kind, data) else { continue };
        let canonical = serde_json::to_vec(&doc).expect("a parsed document serialises");
        match parse_document(kind, &canonical) {
            Ok(again) => assert_eq!(again, doc, "{kind:?} changed through its canonical form"),
            Err(e) => panic!("{kind:?}: the canonical form does not parse: {e}"),
        }
        match doc {
            Document::ZarrJson(NodeMetadataV3::Array(meta)) => {
                let _ = tensorstore::schema_v3(&meta);
                if let Ok(desc) = ArrayDescription::from_v3(&meta) {
                    exercise(&desc);
                }
            }
            Document::ZArray(meta) => {
                let _ = tensorstore::schema_v2(&meta);
                if let Ok(desc) = ArrayDescription::from_v2(&meta, Map::new()) {
                    exercise(&desc);
                }
            }
            Document::ZMetadata(consolidated) => {
                for (key, entry) in &consolidated.metadata {
                    let ConsolidatedEntryV2::Array(meta) = entry else { continue };
                    let attrs_key = format!("{}.zattrs", key.strip_suffix(".zarray").unwrap_or_default());
                    let attrs = match consolidated.metadata.get(&attrs_key) {
                        Some(ConsolidatedEntryV2::Attributes(a)) => a.clone(),
                        _ => Map::new(),
                    };
                    if let Ok(desc) = ArrayDescription::from_v2(meta, attrs) {
                        exercise(&desc);
                    }
                }
            }
            _ => {}
        }
    }
});

/// What the server does with a normalised array before it touches data.
fn exercise(desc: &ArrayDescription) {
    let grid = desc.grid();
    let rank = desc.shape.len();
    let last: Vec<u64> = grid.grid_shape().iter().map(|n| n.saturating_sub(1)).collect();
    for coords in [vec![0; rank], last] {
        let key = desc.chunk_key(&coords);
        assert_eq!(desc.chunk_key_encoding.decode(&key, rank).ok(), Some(coords), "chunk key {key}");
    }
    if let DataType::Structured { fields, .. } = &desc.data_type {
        for f in fields {
            let _ = desc.field(&f.name);
        }
    }
    let repr = desc.chunk_repr();
    if repr.num_elements() > MAX_ELEMENTS || repr.num_bytes().is_some_and(|n| n > 1 << 20) {
        return;
    }
    let filled = ChunkData::filled(&repr);
    if let Ok(encoded) = desc.encode_chunk(filled) {
        if let Err(e) = desc.decode_chunk(encoded) {
            panic!("a chunk of fill values encodes but does not decode: {e}");
        }
    }
}
