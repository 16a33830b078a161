use serde_json::json;

use super::*;
use crate::zarr::metadata::NodeMetadataV3;

fn v3(doc: Value) -> Result<ArrayDescription, ArrayError> {
    let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&doc, "").unwrap() else { panic!("not an array") };
    ArrayDescription::from_v3(&meta)
}

fn v2(doc: Value) -> Result<ArrayDescription, ArrayError> {
    ArrayDescription::from_v2(&ArrayMetadataV2::from_json(&doc, "").unwrap(), Map::new())
}

fn v3_doc(data_type: Value, fill: Value, codecs: Value) -> Value {
    json!({"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": data_type,
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
           "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
           "fill_value": fill, "codecs": codecs, "attributes": {"a": 1}, "dimension_names": ["y", null]})
}

fn v2_doc(dtype: Value, fill: Value, order: &str, filters: Value) -> Value {
    json!({"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": dtype, "compressor": null,
           "fill_value": fill, "order": order, "filters": filters, "dimension_separator": "/"})
}

const LE: &str = r#"[{"name": "bytes", "configuration": {"endian": "little"}}]"#;

fn le() -> Value {
    serde_json::from_str(LE).unwrap()
}

#[test]
fn v3_fill_values_in_every_form() {
    let cases: Vec<(Value, Value, Vec<u8>)> = vec![
        (json!("float32"), json!("NaN"), 0x7fc0_0000u32.to_le_bytes().to_vec()),
        (json!("float32"), json!("Infinity"), f32::INFINITY.to_le_bytes().to_vec()),
        (json!("float64"), json!("-Infinity"), f64::NEG_INFINITY.to_le_bytes().to_vec()),
        (json!("float32"), json!("0x7fc00001"), 0x7fc0_0001u32.to_le_bytes().to_vec()),
        (json!("float16"), json!(1.5), f16::from_f32(1.5).to_le_bytes().to_vec()),
        (json!("float16"), json!("NaN"), vec![0x00, 0x7e]),
        (json!("bfloat16"), json!(-2.0), bf16::from_f32(-2.0).to_le_bytes().to_vec()),
        (json!("float64"), json!(0.1), 0.1f64.to_le_bytes().to_vec()),
        (json!("complex64"), json!([1.0, "NaN"]), [1f32.to_le_bytes(), 0x7fc0_0000u32.to_le_bytes()].concat()),
        (
            json!("complex128"),
            json!(["Infinity", -0.5]),
            [f64::INFINITY.to_le_bytes(), (-0.5f64).to_le_bytes()].concat(),
        ),
        (json!("int16"), json!(-2), (-2i16).to_le_bytes().to_vec()),
        (json!("uint64"), json!(18_446_744_073_709_551_615u64), u64::MAX.to_le_bytes().to_vec()),
        (json!("bool"), json!(true), vec![1]),
        (json!("int4"), json!(-3), vec![0xfd]),
        (json!("r16"), json!([1, 2]), vec![1, 2]),
    ];
    for (dt, fill, want) in cases {
        let endian =
            if dt == json!("r16") || dt == json!("bool") || dt == json!("int4") { json!(["bytes"]) } else { le() };
        let a = v3(v3_doc(dt.clone(), fill.clone(), endian)).unwrap_or_else(|e| panic!("{dt} {fill}: {e}"));
        assert_eq!(a.fill_value, want, "{dt} {fill}");
    }
    let s = v3(v3_doc(json!("string"), json!("n/a"), json!(["vlen-utf8"]))).unwrap();
    assert_eq!(s.fill_value, b"n/a");
    assert_eq!(s.data_type, DataType::String);
    let b = v3(v3_doc(json!("variable_length_bytes"), json!("AAE="), json!(["vlen-bytes"]))).unwrap();
    assert_eq!(b.fill_value, vec![0, 1]);
    let u = v3(v3_doc(json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}}), json!("a"), le()))
        .unwrap();
    assert_eq!(u.fill_value, vec![b'a', 0, 0, 0, 0, 0, 0, 0]);
    let nt = v3(v3_doc(
        json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}),
        json!("YQ=="),
        json!(["bytes"]),
    ))
    .unwrap();
    assert_eq!(nt.fill_value, b"a\0\0");
}

#[test]
fn v3_description() {
    let a = v3(v3_doc(json!("uint16"), json!(7), json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}])))
        .unwrap();
    assert_eq!(a.zarr_format, ZarrFormat::V3);
    assert_eq!(a.chunk_shape, vec![2, 3]);
    assert_eq!(a.chunk_key(&[1, 2]), "c/1/2");
    assert_eq!(a.dimension_names, Some(vec![Some("y".into()), None]));
    assert_eq!(a.attributes["a"], json!(1));
    assert_eq!(a.grid().grid_shape(), vec![2, 2]);
    // Decoding: stored transposed (3x2), big-endian.
    let stored: Vec<u8> = [0u16, 3, 1, 4, 2, 5].iter().flat_map(|v| v.to_be_bytes()).collect();
    let decoded = a.decode_chunk(stored.clone()).unwrap();
    let want: Vec<u8> = (0u16..6).flat_map(u16::to_le_bytes).collect();
    assert_eq!(decoded, ChunkData::Fixed(want));
    assert_eq!(a.encode_chunk(decoded).unwrap(), stored);
    let e = a.decode_chunk(vec![0; 11]).unwrap_err();
    assert_eq!(e.codec, "bytes");
}

#[test]
fn v3_unsupported_is_named() {
    assert!(
        v3(v3_doc(json!("uint8"), json!(0), json!(["bytes", {"name": "gzip", "configuration": {"level": 1}}]))).is_ok()
    );
    let e = v3(v3_doc(json!("uint8"), json!(0), json!(["bytes", {"name": "numcodecs.lzma", "configuration": {}}])))
        .unwrap_err();
    assert!(e.to_string().contains("lzma"), "{e}");
    // Sharding with an unsupported inner codec names the inner codec.
    let e = v3(v3_doc(json!("uint8"), json!(0), json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 1], "codecs": ["bytes", {"name": "numcodecs.lzma", "configuration": {}}], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}])))
        .unwrap_err();
    assert!(e.to_string().contains("lzma"), "{e}");
    // Ignorable extensions are skipped.
    assert!(v3(v3_doc(json!("uint8"), json!(0), json!(["bytes", {"name": "x.y", "must_understand": false}]))).is_ok());
}

#[test]
fn v3_sharded_description() {
    let a = v3(v3_doc(json!("uint8"), json!(7), json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 3], "codecs": ["bytes"], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}])))
        .unwrap();
    let s = a.sharding.as_ref().expect("a sharded array exposes its sharding codec");
    assert_eq!(s.chunks_per_shard(), &[2, 1]);
    assert_eq!(s.index_size(), 32);
    let data = ChunkData::Fixed(vec![7, 7, 7, 1, 2, 3]);
    let bytes = a.encode_chunk(data.clone()).unwrap();
    assert_eq!(bytes.len(), 3 + 32);
    assert_eq!(a.decode_chunk(bytes).unwrap(), data);
    // A transpose before the shard hides the inner byte ranges: no partial reads.
    let a = v3(v3_doc(json!("uint8"), json!(0), json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 1], "codecs": ["bytes"], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}])))
        .unwrap();
    assert!(a.sharding.is_none());
}

#[test]
fn v2_description() {
    let a = v2(v2_doc(json!(">i4"), json!(null), "F", json!(null))).unwrap();
    assert_eq!(a.zarr_format, ZarrFormat::V2);
    assert_eq!(a.fill_value, vec![0; 4]);
    assert_eq!(a.chunk_key(&[1, 0]), "1/0");
    // np.arange(6, dtype='>i4').reshape(2, 3).tobytes(order='F')
    let stored: Vec<u8> = [0i32, 3, 1, 4, 2, 5].iter().flat_map(|v| v.to_be_bytes()).collect();
    let want: Vec<u8> = (0i32..6).flat_map(i32::to_le_bytes).collect();
    assert_eq!(a.decode_chunk(stored.clone()).unwrap(), ChunkData::Fixed(want.clone()));
    assert_eq!(a.encode_chunk(ChunkData::Fixed(want)).unwrap(), stored);

    let a = v2(v2_doc(json!("<f8"), json!("NaN"), "C", json!(null))).unwrap();
    assert_eq!(a.fill_value, 0x7ff8_0000_0000_0000u64.to_le_bytes());
    let a = v2(v2_doc(json!("|S3"), json!("YWI="), "C", json!(null))).unwrap();
    assert_eq!(a.fill_value, b"ab\0");
    let a = v2(v2_doc(json!("|O"), json!(""), "C", json!([{"id": "vlen-utf8"}]))).unwrap();
    assert_eq!(a.data_type, DataType::String);
    let a = v2(v2_doc(json!("<M8[ns]"), json!("NaT"), "C", json!(null))).unwrap();
    assert_eq!(a.fill_value, i64::MIN.to_le_bytes());
    assert_eq!(a.data_type, DataType::DateTime64(crate::zarr::data_type::TimeUnit::new("ns", 1).unwrap()));
}

#[test]
fn v2_structured() {
    // np.dtype([('a', '>u2'), ('b', [('x', '<f4'), ('y', '|u1')]), ('c', '<i2', (2,))])
    let dtype = json!([["a", ">u2"], ["b", [["x", "<f4"], ["y", "|u1"]]], ["c", "<i2", [2]]]);
    // np.zeros((), dtype=dt); v['a'] = 258; v['b']['x'] = 1.0; v['b']['y'] = 9; v['c'] = [1, -1]
    // base64.b64encode(v.tobytes())
    let a = v2(v2_doc(dtype, json!("AQIAAIA/CQEA//8="), "C", json!(null))).unwrap();
    let DataType::Structured { size, fields } = &a.data_type else { panic!() };
    assert_eq!(*size, 11);
    let names: Vec<(&str, usize)> = fields.iter().map(|f| (f.name.as_str(), f.offset)).collect();
    assert_eq!(names, vec![("a", 0), ("b.x", 2), ("b.y", 6), ("c", 7)]);
    assert!(fields[0].big_endian);
    assert_eq!(fields[3].subarray, vec![2]);
    // In memory: 'a' little-endian.
    assert_eq!(a.fill_value, vec![2, 1, 0, 0, 0x80, 0x3f, 9, 1, 0, 0xff, 0xff]);
}

#[test]
fn v2_filters_and_errors() {
    let a = v2(v2_doc(json!("<i4"), json!(0), "C", json!([{"id": "delta", "dtype": "<i4", "astype": ">i2"}]))).unwrap();
    // delta of [5, 6, 8, 8, 9, 20] = [5, 1, 2, 0, 1, 11], stored as >i2
    let stored: Vec<u8> = [5i16, 1, 2, 0, 1, 11].iter().flat_map(|v| v.to_be_bytes()).collect();
    let want: Vec<u8> = [5i32, 6, 8, 8, 9, 20].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(a.decode_chunk(stored).unwrap(), ChunkData::Fixed(want));

    let e =
        v2(v2_doc(json!("<i4"), json!(0), "C", json!([{"id": "quantize", "digits": 2, "dtype": "<f8"}]))).unwrap_err();
    assert!(e.to_string().contains("quantize"), "{e}");
    let e = v2(v2_doc(json!("<f8"), json!(0), "C", json!([{"id": "delta", "dtype": "<i4"}]))).unwrap_err();
    assert!(e.to_string().contains("delta"), "{e}");
    let mut doc = v2_doc(json!("<f8"), json!(0), "C", json!(null));
    doc["compressor"] = json!({"id": "zlib", "level": 1});
    assert!(v2(doc.clone()).is_ok());
    doc["compressor"] = json!({"id": "lzma"});
    let e = v2(doc).unwrap_err();
    assert!(e.to_string().contains("lzma"), "{e}");
    let e = v2(v2_doc(json!("|O"), json!(null), "C", json!([{"id": "json2"}]))).unwrap_err();
    assert!(matches!(e, ArrayError::Unsupported(_)), "{e}");
}

/// A stored chunk larger than any encoding of its chunk is refused before it
/// is read: the bound is the exact size where the codecs fix it, a
/// compressor's worst case on top, the index and every inner chunk at its
/// most (twice) for a shard, and the variable decode cap for strings.
#[test]
fn max_stored_chunk_bytes_follow_the_codecs() {
    // 2×3 uint16 chunks: 12 bytes decoded.
    let plain = v3(v3_doc(json!("uint16"), json!(0), le())).unwrap();
    assert_eq!(plain.max_stored_chunk_bytes(), 12);
    let crc = v3(v3_doc(json!("uint16"), json!(0), json!([le()[0], {"name": "crc32c"}]))).unwrap();
    assert_eq!(crc.max_stored_chunk_bytes(), 16);
    let zstd = v3(v3_doc(json!("uint16"), json!(0), json!([le()[0], {"name": "zstd", "configuration": {"level": 1}}])))
        .unwrap();
    assert_eq!(zstd.max_stored_chunk_bytes(), 12 + 1 + 64 * 1024);
    // Two compressors: the second's worst case of the first's.
    let two = v3(v3_doc(json!("uint16"), json!(0), json!([le()[0], {"name": "gzip", "configuration": {"level": 1}}, {"name": "zstd", "configuration": {"level": 1}}])))
        .unwrap();
    let first: u64 = 12 + 1 + 64 * 1024;
    assert_eq!(two.max_stored_chunk_bytes(), (first + first / 8 + 64 * 1024).min(2 * 12 + (1 << 20)));
    // A shard of two 1×3 inner chunks of 6 bytes with a 32-byte index.
    let sharded = v3(v3_doc(json!("uint16"), json!(0), json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 3], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}])))
        .unwrap();
    assert_eq!(sharded.sharding.as_ref().unwrap().max_inner_stored_size(), 6);
    assert_eq!(sharded.max_stored_chunk_bytes(), 2 * 2 * 6 + 32);
    // Strings: what the decoder reads at most.
    let strings = v2(v2_doc(json!("|O"), json!(""), "C", json!([{"id": "vlen-utf8"}]))).unwrap();
    assert_eq!(strings.max_stored_chunk_bytes(), crate::zarr::codec::DEFAULT_VARIABLE_DECODE_CAP as u64);
}
