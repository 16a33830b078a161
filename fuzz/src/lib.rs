//! Shared pieces of the fuzz targets: the fixed array documents the codec
//! and shard targets decode with, and an in-memory [`ChunkSource`] for region
//! reads.
//!
//! Every document goes through the engine's real parsers
//! ([`parse_document`]) and normaliser ([`ArrayDescription`]), so the fuzz
//! targets decode with exactly the codec chains the server would build.

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::byte_range::ByteRangeRequest;
use zarrd::zarr::metadata::{parse_document, Document, DocumentKind, NodeMetadataV3};
use zarrd::zarr::region::{ChunkSource, SourceError};

/// One fixed array for the codec target.
pub struct Case {
    /// What it is, for the seed file names.
    pub name: &'static str,
    /// Its metadata document (`zarr.json` or `.zarray`).
    pub doc: Value,
    /// The array.
    pub desc: ArrayDescription,
    /// Whether `decode(encode(x)) == x` must hold for every decodable `x`
    /// (false for lossy filters).
    pub lossless: bool,
}

/// Normalises a `zarr.json` or `.zarray` (by its `zarr_format`) through the
/// real parser.
///
/// # Panics
/// When the document is not a valid array: the fixed documents are.
#[must_use]
pub fn array(doc: &Value) -> ArrayDescription {
    if doc["zarr_format"] == 3 {
        v3(doc)
    } else {
        v2(doc)
    }
}

fn v3(doc: &Value) -> ArrayDescription {
    let bytes = serde_json::to_vec(doc).expect("json");
    match parse_document(DocumentKind::ZarrJson, &bytes).expect("valid zarr.json") {
        Document::ZarrJson(NodeMetadataV3::Array(meta)) => ArrayDescription::from_v3(&meta).expect("supported array"),
        other => panic!("not an array: {other:?}"),
    }
}

fn v2(doc: &Value) -> ArrayDescription {
    let bytes = serde_json::to_vec(doc).expect("json");
    match parse_document(DocumentKind::ZArray, &bytes).expect("valid .zarray") {
        Document::ZArray(meta) => ArrayDescription::from_v2(&meta, Map::new()).expect("supported array"),
        other => panic!("not an array: {other:?}"),
    }
}

fn v3_doc(data_type: &str, fill_value: &Value, chunk: &[u64], codecs: &Value) -> Value {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": [20, 30], "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_value, "codecs": codecs, "attributes": {}
    })
}

fn v2_doc(dtype: &Value, order: &str, filters: &Value, compressor: &Value) -> Value {
    json!({
        "zarr_format": 2, "shape": [20, 30], "chunks": [8, 16], "dtype": dtype, "fill_value": null,
        "order": order, "filters": filters, "compressor": compressor, "dimension_separator": "."
    })
}

fn le() -> Value {
    json!({"name": "bytes", "configuration": {"endian": "little"}})
}

fn be() -> Value {
    json!({"name": "bytes", "configuration": {"endian": "big"}})
}

/// The arrays the `codec_decode` target picks from (by the first input
/// byte), covering every codec family the engine implements.
#[must_use]
pub fn codec_cases() -> Vec<Case> {
    let c = [8, 16];
    let f0 = json!(0.0);
    let case = |name, doc: Value, lossless| Case { name, desc: array(&doc), doc, lossless };
    vec![
        case(
            "v3_gzip",
            v3_doc("float32", &f0, &c, &json!([le(), {"name": "gzip", "configuration": {"level": 5}}])),
            true,
        ),
        case(
            "v3_zstd",
            v3_doc(
                "float32",
                &f0,
                &c,
                &json!([le(), {"name": "zstd", "configuration": {"level": 3, "checksum": true}}]),
            ),
            true,
        ),
        case(
            "v3_blosc_lz4",
            v3_doc(
                "float32",
                &f0,
                &c,
                &json!([le(), {"name": "blosc", "configuration":
                {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}]),
            ),
            true,
        ),
        case(
            "v3_blosc_zstd_bitshuffle",
            v3_doc(
                "int16",
                &json!(-1),
                &c,
                &json!([be(), {"name": "blosc", "configuration":
                {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "typesize": 2, "blocksize": 0}}]),
            ),
            true,
        ),
        case("v3_crc32c", v3_doc("uint16", &json!(7), &c, &json!([le(), {"name": "crc32c"}])), true),
        case(
            "v3_transpose_zstd",
            v3_doc(
                "float64",
                &json!("NaN"),
                &c,
                &json!([
                {"name": "transpose", "configuration": {"order": [1, 0]}}, be(),
                {"name": "zstd", "configuration": {"level": 1}}]),
            ),
            true,
        ),
        case(
            "v3_transpose_3d",
            json!({
                "zarr_format": 3, "node_type": "array", "shape": [9, 10, 11], "data_type": "uint8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3, 4, 5]}},
                "chunk_key_encoding": {"name": "default"}, "fill_value": 3,
                "codecs": [{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, {"name": "bytes"}]
            }),
            true,
        ),
        case("v3_vlen_utf8", v3_doc("string", &json!(""), &c, &json!([{"name": "vlen-utf8"}])), true),
        case(
            "v3_vlen_bytes_zstd",
            v3_doc("variable_length_bytes", &json!(""), &c, &json!([{"name": "vlen-bytes"}, {"name": "zstd"}])),
            true,
        ),
        case(
            "v3_bool_crc32c_gzip",
            v3_doc("bool", &json!(false), &c, &json!([{"name": "bytes"}, {"name": "crc32c"}, {"name": "gzip"}])),
            true,
        ),
        case("v3_complex64", v3_doc("complex64", &json!([0.0, 1.0]), &c, &json!([be()])), true),
        case(
            "v2_blosc_lz4",
            v2_doc(
                &json!("<f4"),
                "C",
                &Value::Null,
                &json!({"id": "blosc", "cname": "lz4", "clevel": 5,
                "shuffle": 1, "blocksize": 0}),
            ),
            true,
        ),
        case(
            "v2_blosc_zstd_F",
            v2_doc(
                &json!(">f8"),
                "F",
                &Value::Null,
                &json!({"id": "blosc", "cname": "zstd", "clevel": 1,
                "shuffle": 2, "blocksize": 0}),
            ),
            true,
        ),
        case("v2_zlib", v2_doc(&json!("<i4"), "C", &Value::Null, &json!({"id": "zlib", "level": 1})), true),
        case("v2_gzip", v2_doc(&json!("<u8"), "C", &Value::Null, &json!({"id": "gzip", "level": 1})), true),
        case("v2_lz4", v2_doc(&json!("<f8"), "C", &Value::Null, &json!({"id": "lz4", "acceleration": 1})), true),
        case("v2_bz2", v2_doc(&json!(">i2"), "C", &Value::Null, &json!({"id": "bz2", "level": 1})), true),
        case(
            "v2_zstd",
            v2_doc(&json!("<u4"), "C", &Value::Null, &json!({"id": "zstd", "level": 1, "checksum": false})),
            true,
        ),
        case(
            "v2_delta_zlib",
            v2_doc(
                &json!(">i4"),
                "C",
                &json!([{"id": "delta", "dtype": ">i4", "astype": ">i2"}]),
                &json!({"id": "zlib", "level": 1}),
            ),
            true,
        ),
        case(
            "v2_delta_widen",
            v2_doc(&json!("<i2"), "C", &json!([{"id": "delta", "dtype": "<i2", "astype": "<i4"}]), &Value::Null),
            true,
        ),
        case(
            "v2_fixedscaleoffset",
            v2_doc(
                &json!("<f8"),
                "C",
                &json!([{"id": "fixedscaleoffset", "offset": 1000, "scale": 10,
                "dtype": "<f8", "astype": "<i2"}]),
                &json!({"id": "zlib", "level": 1}),
            ),
            false,
        ),
        case(
            "v2_vlen_utf8",
            v2_doc(&json!("|O"), "C", &json!([{"id": "vlen-utf8"}]), &json!({"id": "zlib", "level": 1})),
            true,
        ),
        case(
            "v2_vlen_bytes",
            v2_doc(
                &json!("|O"),
                "C",
                &json!([{"id": "vlen-bytes"}]),
                &json!({"id": "blosc", "cname": "lz4",
                "clevel": 5, "shuffle": 1, "blocksize": 0}),
            ),
            true,
        ),
        case(
            "v2_structured",
            v2_doc(
                &json!([["a", "<i4"], ["b", ">f8", [2]], ["c", "|u1"]]),
                "C",
                &Value::Null,
                &json!({"id": "bz2", "level": 1}),
            ),
            true,
        ),
        case("v2_U3_F", v2_doc(&json!(">U3"), "F", &Value::Null, &Value::Null), true),
    ]
}

/// One fixed sharded array for the shard target.
pub struct ShardCase {
    /// What it is, for the seed file names.
    pub name: &'static str,
    /// Its `zarr.json`.
    pub doc: Value,
    /// The array.
    pub desc: ArrayDescription,
    /// Whether the (outer) index ends with a crc32c.
    pub crc_index: bool,
}

/// The sharded arrays the `shard_index` target picks from. All have shape
/// `[10, 9]` and shards of `[4, 6]` (so the last row and column of shards
/// stick out of the array), inner chunks `[2, 3]` (`[2, 6]` when nested).
#[must_use]
pub fn shard_cases() -> Vec<ShardCase> {
    let doc = |data_type: &str, fill: Value, sharding: Value| {
        json!({
            "zarr_format": 3, "node_type": "array", "shape": [10, 9], "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 6]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": fill,
            "codecs": [{"name": "sharding_indexed", "configuration": sharding}]
        })
    };
    let crc = || json!([le(), {"name": "crc32c"}]);
    let case = |name, doc: Value, crc_index| ShardCase { name, desc: array(&doc), doc, crc_index };
    vec![
        case(
            "end_crc32c",
            doc(
                "uint16",
                json!(7),
                json!({"chunk_shape": [2, 3], "codecs": [le()],
                "index_codecs": crc(), "index_location": "end"}),
            ),
            true,
        ),
        case(
            "start_crc32c_zstd",
            doc(
                "int32",
                json!(-1),
                json!({"chunk_shape": [2, 3], "codecs": [be(), {"name": "zstd"}],
                "index_codecs": crc(), "index_location": "start"}),
            ),
            true,
        ),
        case(
            "start_plain_index",
            doc(
                "uint8",
                json!(0),
                json!({"chunk_shape": [2, 3], "codecs": [{"name": "bytes"}, {"name": "crc32c"}],
                "index_codecs": [le()], "index_location": "start"}),
            ),
            false,
        ),
        case(
            "nested_end",
            doc(
                "float32",
                json!(1.5),
                json!({"chunk_shape": [2, 6], "codecs": [{"name": "sharding_indexed",
                "configuration": {"chunk_shape": [2, 3], "codecs": [le(), {"name": "gzip"}],
                "index_codecs": crc(), "index_location": "start"}}],
                "index_codecs": crc(), "index_location": "end"}),
            ),
            true,
        ),
        case(
            "end_vlen",
            doc(
                "string",
                json!(""),
                json!({"chunk_shape": [2, 3], "codecs": [{"name": "vlen-utf8"}],
                "index_codecs": crc(), "index_location": "end"}),
            ),
            true,
        ),
    ]
}

/// A store holding the same bytes under every key, read the way the
/// service's chunk store reads: a bounded range past the end answers the
/// bytes that exist, a suffix longer than the value answers all of it.
pub struct SameEverywhere(pub Bytes);

#[async_trait]
impl ChunkSource for SameEverywhere {
    async fn get(&self, _key: &str, range: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        let len = self.0.len() as u64;
        let r = match range {
            None => 0..len,
            Some(ByteRangeRequest::Bounded(r)) => r.start.min(len)..r.end.clamp(r.start.min(len), len),
            Some(ByteRangeRequest::Suffix(n)) => len.saturating_sub(n)..len,
        };
        #[allow(clippy::cast_possible_truncation)] // both ends <= len
        Ok(Some(self.0.slice(r.start as usize..r.end as usize)))
    }
}
