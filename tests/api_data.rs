//! Slice reads (`/api/v1/data`) and decoded chunks (`/api/v1/chunks`) on
//! memory and file mounts: every format, header and status; selections of
//! every form; missing chunks; sharded, structured and string arrays;
//! limits; streaming across many slabs; cache invalidation.

mod common;

use std::path::Path;

use common::{Backend, TestServer};
use serde_json::{json, Value};
use zarrd::config::Config;
use zarrd::service::App;
use zarrd::storage::mount::RecheckPolicy;
use zarrd::storage::{Mount, MountSpec};

/// A v3 float32 array `[10, 12]`, chunks `[4, 5]`, dims `y`, `x`, fill NaN,
/// element `(y, x)` = `100 y + x`; chunk `[2, 2]` is not stored.
const V3_F32: &str = r#"{"zarr_format":3,"node_type":"array","shape":[10,12],"data_type":"float32",
 "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4,5]}},
 "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
 "fill_value":"NaN","codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
 "attributes":{},"dimension_names":["y","x"]}"#;

fn value(y: u64, x: u64) -> f32 {
    #[allow(clippy::cast_precision_loss)]
    let v = (100 * y + x) as f32;
    v
}

async fn put_f32_array(s: &TestServer, path: &str) {
    s.put(&format!("/zarr/data/{path}/zarr.json"), V3_F32).await.expect_status(201);
    for cy in 0..3u64 {
        for cx in 0..3u64 {
            if (cy, cx) == (2, 2) {
                continue;
            }
            let mut bytes = Vec::new();
            for y in cy * 4..cy * 4 + 4 {
                for x in cx * 5..cx * 5 + 5 {
                    bytes.extend_from_slice(&value(y, x).to_le_bytes());
                }
            }
            s.put(&format!("/zarr/data/{path}/c/{cy}/{cx}"), bytes).await.expect_status(201);
        }
    }
}

fn f32s(body: &[u8]) -> Vec<f32> {
    body.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn expected(ys: &[u64], xs: &[u64]) -> Vec<f32> {
    let mut out = Vec::new();
    for &y in ys {
        for &x in xs {
            out.push(if y >= 8 && x >= 10 { f32::NAN } else { value(y, x) });
        }
    }
    out
}

#[track_caller]
fn same(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g == w || (g.is_nan() && w.is_nan()), "{got:?} vs {want:?}");
    }
}

/// The data part of a `.npy` body, after checking its header.
fn npy_data<'a>(body: &'a [u8], descr: &str, shape: &str) -> &'a [u8] {
    assert_eq!(&body[..8], b"\x93NUMPY\x01\x00");
    let len = usize::from(u16::from_le_bytes([body[8], body[9]]));
    let header = std::str::from_utf8(&body[10..10 + len]).unwrap();
    assert!(header.contains(&format!("'descr': '{descr}'")), "{header}");
    assert!(header.contains(&format!("'shape': {shape}")), "{header}");
    assert_eq!((10 + len) % 64, 0);
    &body[10 + len..]
}

async fn reads_every_format(s: TestServer) {
    put_f32_array(&s, "a").await;
    let r = s.get("/api/v1/data/data/a?sel=1:3,2:7").await;
    r.expect_status(200);
    assert_eq!(r.must_header("content-type"), "application/octet-stream");
    assert_eq!(r.must_header("x-zarr-shape"), "2,5");
    assert_eq!(r.must_header("x-zarr-dtype"), "<f4");
    assert_eq!(r.must_header("x-zarr-order"), "C");
    assert_eq!(r.must_header("content-length"), "40");
    same(&f32s(&r.body), &expected(&[1, 2], &[2, 3, 4, 5, 6]));

    let r = s.get("/api/v1/data/data/a?sel=1:3,2:7&format=npy").await;
    r.expect_status(200);
    assert_eq!(r.must_header("content-type"), "application/x-npy");
    assert_eq!(r.must_header("content-length"), r.body.len().to_string());
    same(&f32s(npy_data(&r.body, "<f4", "(2, 5)")), &expected(&[1, 2], &[2, 3, 4, 5, 6]));

    let r = s.get_with("/api/v1/data/data/a?sel=7:9,9:11", &[("accept", "application/json")]).await;
    r.expect_status(200);
    assert_eq!(r.must_header("content-type"), "application/json");
    assert_eq!(r.json(), json!([[709.0, 710.0], [809.0, "NaN"]]), "a missing chunk reads as the fill value");
    // `format=` wins over Accept.
    let r = s.get_with("/api/v1/data/data/a?sel=0,0&format=raw", &[("accept", "application/json")]).await;
    assert_eq!(r.must_header("x-zarr-shape"), "");
    same(&f32s(&r.body), &[0.0]);
    // The whole array, by the root-less default selection.
    let r = s.get("/api/v1/data/data/a").await;
    assert_eq!(r.must_header("x-zarr-shape"), "10,12");
    same(&f32s(&r.body), &expected(&(0..10).collect::<Vec<_>>(), &(0..12).collect::<Vec<_>>()));
}

async fn selections_of_every_form(s: TestServer) {
    put_f32_array(&s, "a").await;
    let get = |q: &str| {
        let url = format!("/api/v1/data/data/a?{q}");
        let s = &s;
        async move {
            let r = s.get(&url).await;
            r.expect_status(200);
            (r.must_header("x-zarr-shape").to_string(), f32s(&r.body))
        }
    };
    // Negative steps and negative indices.
    let (shape, v) = get("sel=::-3,-1").await;
    assert_eq!(shape, "4");
    same(&v, &expected(&[9, 6, 3, 0], &[11]));
    let (shape, v) = get("sel=-2:-9:-4,11:0:-5").await;
    assert_eq!(shape, "2,3");
    same(&v, &expected(&[8, 4], &[11, 6, 1]));
    // `...` and trailing dimensions.
    let (shape, v) = get("sel=...,3").await;
    assert_eq!(shape, "10");
    same(&v, &expected(&(0..10).collect::<Vec<_>>(), &[3]));
    let (shape, _) = get("sel=2").await;
    assert_eq!(shape, "12");
    // Dimension names.
    let (shape, v) = get("sel=x%3D2:4,y%3D5").await;
    assert_eq!(shape, "2");
    same(&v, &expected(&[5], &[2, 3]));
    // Orthogonal lists in the URL (repeats, any order).
    let (shape, v) = get("sel=[9,0,9],[11,1]").await;
    assert_eq!(shape, "3,2");
    same(&v, &expected(&[9, 0, 9], &[11, 1]));
    // Empty selections.
    let (shape, v) = get("sel=5:2").await;
    assert_eq!((shape.as_str(), v.len()), ("0,12", 0));
    let r = s.get("/api/v1/data/data/a?sel=:,4:4&format=json").await;
    assert_eq!(r.json(), json!([[], [], [], [], [], [], [], [], [], []]));
    // Coordinate and orthogonal selections by POST.
    let r = post_json(
        &s,
        "/api/v1/data/data/a",
        &json!({"selection": [[0, 9, 3, -1], [1, 11, 4, 0]], "mode": "coordinate", "format": "json"}),
    )
    .await;
    r.expect_status(200);
    assert_eq!(r.must_header("x-zarr-shape"), "4");
    let v: Value = r.json();
    assert_eq!(v, json!([1.0, "NaN", 304.0, 900.0]));
    let r = post_json(
        &s,
        "/api/v1/data/data/a",
        &json!({"selection": {"x": [0, 5], "y": {"start": 1, "stop": 3}}, "mode": "orthogonal"}),
    )
    .await;
    assert_eq!(r.must_header("x-zarr-shape"), "2,2");
    same(&f32s(&r.body), &expected(&[1, 2], &[0, 5]));
}

async fn selection_errors(s: TestServer) {
    put_f32_array(&s, "a").await;
    s.put("/zarr/data/g/zarr.json", r#"{"zarr_format":3,"node_type":"group"}"#).await.expect_status(201);
    let err = |q: &'static str, status: u16, code: &'static str, needle: &'static str| {
        let s = &s;
        async move {
            let r = s.get(&format!("/api/v1/data/data/a?{q}")).await;
            r.expect_error(status, code);
            assert!(r.error_message().contains(needle), "{q}: {}", r.error_message());
        }
    };
    err("sel=10", 400, "invalid_selection", "dimension 0 (`y`)").await;
    err("sel=0,-13", 400, "invalid_selection", "dimension 1 (`x`)").await;
    err("sel=1,2,3", 400, "invalid_selection", "3 dimensions given").await;
    err("sel=::0", 400, "invalid_selection", "step must not be zero").await;
    err("sel=0,a", 400, "invalid_selection", "dimension 1").await;
    err("sel=z%3D1", 400, "invalid_selection", "no dimension named `z`").await;
    err("sel=[1,2", 400, "invalid_selection", "unbalanced").await;
    err("sel=1&mode=sideways", 400, "invalid_selection", "sideways").await;
    err("format=tiff", 400, "invalid_format", "tiff").await;
    err("fill_missing=perhaps", 400, "invalid_query", "fill_missing").await;
    err("field=t", 400, "invalid_selection", "no fields").await;
    err("sel=8:,10:&fill_missing=false", 404, "missing_chunk", "a/c/2/2").await;
    let r =
        post_json(&s, "/api/v1/data/data/a", &json!({"selection": [[0, 1], [1, 2, 3]], "mode": "coordinate"})).await;
    assert_eq!(r.status, 400);
    let v: Value = r.json();
    assert!(v["error"]["message"].as_str().unwrap().contains("dimension 1"), "{v}");
    let r = s
        .send(s.request("POST", "/api/v1/data/data/a").header("content-type", "application/json").body("{not json"))
        .await;
    assert_eq!(r.status, 400);
    let r = post_json(&s, "/api/v1/data/data/a", &json!({"selection": [0], "colour": "red"})).await;
    assert_eq!(r.status, 422, "unknown members are refused");
    s.get("/api/v1/data/data/g").await.expect_error(400, "not_an_array");
    s.get("/api/v1/data/data/nothing").await.expect_error(404, "node_not_found");
    s.get("/api/v1/data/nosuch/a").await.expect_error(404, "unknown_mount");
}

async fn decoded_chunks(s: TestServer) {
    put_f32_array(&s, "a").await;
    let r = s.get("/api/v1/chunks/data/a?coords=1,2&format=json").await;
    r.expect_status(200);
    assert_eq!(r.must_header("x-zarr-shape"), "4,5");
    let rows: Vec<Value> = (4..8).map(|y| Value::Array((10..15).map(|x| json!(value(y, x))).collect())).collect();
    assert_eq!(r.json(), Value::Array(rows), "an edge chunk comes whole, as stored");
    let r = s.get("/api/v1/chunks/data/a?coords=0,0&format=npy").await;
    let data = npy_data(&r.body, "<f4", "(4, 5)");
    same(&f32s(data), &expected(&[0, 1, 2, 3], &[0, 1, 2, 3, 4]));
    let r = s.get("/api/v1/chunks/data/a?coords=2,2").await;
    r.expect_status(200);
    assert!(f32s(&r.body).iter().all(|v| v.is_nan()) && r.body.len() == 80);
    let r = s.get("/api/v1/chunks/data/a?coords=2,2&fill_missing=false").await;
    r.expect_error(404, "missing_chunk");
    assert!(r.error_message().contains("a/c/2/2"), "{}", r.error_message());
    let r = s.get("/api/v1/chunks/data/a?coords=0,3").await;
    r.expect_error(400, "invalid_selection");
    assert!(r.error_message().contains("dimension 1"), "{}", r.error_message());
    let r = s.get("/api/v1/chunks/data/a?coords=0").await;
    r.expect_error(400, "invalid_selection");
    assert!(r.error_message().contains("1 coordinates given"), "{}", r.error_message());
    s.get("/api/v1/chunks/data/a?coords=0,x").await.expect_error(400, "invalid_selection");
    s.get("/api/v1/chunks/data/a?coords=0,0&inner=0,0").await.expect_error(400, "invalid_selection");
}

async fn post_json(s: &TestServer, path: &str, body: &Value) -> common::Reply {
    let rb = s.request("POST", path).header("content-type", "application/json").body(body.to_string());
    s.send(rb).await
}

fn fixture(dir: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine").join(dir)
}

/// Uploads every file under `src` to `/zarr/data/{dst}/...`.
async fn put_tree(s: &TestServer, src: &Path, dst: &str) {
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(src).unwrap().to_str().unwrap().replace('\\', "/");
                s.put(&format!("/zarr/data/{dst}/{rel}"), std::fs::read(&p).unwrap()).await.expect_status(201);
            }
        }
    }
}

fn i16s(body: &[u8]) -> Vec<i16> {
    body.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect()
}

async fn sharded_arrays(s: TestServer) {
    // [10, 9] int16, shards [4, 6], inner chunks [2, 3], index at the end; shard [1, 0] absent.
    put_tree(&s, &fixture("sharded/ts_sharded_end_int16"), "sh").await;
    let want = i16s(&std::fs::read(fixture("sharded/ts_sharded_end_int16.expected.bin")).unwrap());
    let at = |y: usize, x: usize| want[y * 9 + x];
    let r = s.get("/api/v1/data/data/sh").await;
    r.expect_status(200);
    assert_eq!(r.must_header("x-zarr-dtype"), "<i2");
    assert_eq!(i16s(&r.body), want);
    // Parts of shards, strided, and points.
    let r = s.get("/api/v1/data/data/sh?sel=1:9:3,::-4").await;
    let exp: Vec<i16> = [1, 4, 7].iter().flat_map(|&y| [8, 4, 0].map(|x| at(y, x))).collect();
    assert_eq!(i16s(&r.body), exp);
    let r = post_json(&s, "/api/v1/data/data/sh", &json!({"selection": [[9, 0, 5], [8, 0, 2]], "mode": "coordinate"}))
        .await;
    assert_eq!(i16s(&r.body), vec![at(9, 8), at(0, 0), at(5, 2)]);
    // Inner chunk [1, 0] of shard [0, 1]: rows 2..4, columns 6..9.
    let r = s.get("/api/v1/chunks/data/sh?coords=0,1&inner=1,0&format=json").await;
    r.expect_status(200);
    assert_eq!(r.must_header("x-zarr-shape"), "2,3");
    let j = r.json();
    assert_eq!((j[0][0].clone(), j[1][2].clone()), (json!(at(2, 6)), json!(at(3, 8))), "{j}");
    let r = s.get("/api/v1/chunks/data/sh?coords=0,0&inner=1,1").await;
    assert_eq!(i16s(&r.body), vec![at(2, 3), at(2, 4), at(2, 5), at(3, 3), at(3, 4), at(3, 5)]);
    // The whole shard.
    let r = s.get("/api/v1/chunks/data/sh?coords=0,0").await;
    assert_eq!(r.must_header("x-zarr-shape"), "4,6");
    assert_eq!(i16s(&r.body)[7], at(1, 1));
    s.get("/api/v1/chunks/data/sh?coords=0,0&inner=2,0").await.expect_error(400, "invalid_selection");
    let r = s.get("/api/v1/data/data/sh?sel=4:6,0:2&fill_missing=false").await;
    r.expect_error(404, "missing_chunk");
    assert!(r.error_message().contains("sh/c/1/0"), "{}", r.error_message());
}

async fn strings_only_as_json(s: TestServer) {
    put_tree(&s, &fixture("arrays/v3_string"), "str").await;
    let want: Value =
        serde_json::from_slice(&std::fs::read(fixture("arrays/v3_string.expected.json")).unwrap()).unwrap();
    let r = s.get("/api/v1/data/data/str?sel=1,2:5&format=json").await;
    r.expect_status(200);
    assert_eq!(r.must_header("x-zarr-dtype"), "string");
    assert_eq!(r.json(), json!([want[9], want[10], want[11]]));
    let r = s.get("/api/v1/data/data/str?format=raw").await;
    r.expect_error(400, "unsupported_format");
    assert!(r.error_message().contains("format=json"), "{}", r.error_message());
    s.get("/api/v1/data/data/str?format=npy").await.expect_error(400, "unsupported_format");
}

async fn structured_fields(s: TestServer) {
    let zarray = r#"{"zarr_format":2,"shape":[3],"chunks":[2],"dtype":[["a","<i4"],["b",">f8",[2]]],
        "compressor":null,"fill_value":null,"order":"C","filters":null}"#;
    s.put("/zarr/data/rec/.zarray", zarray).await.expect_status(201);
    let record = |a: i32, b0: f64, b1: f64| {
        let mut v = a.to_le_bytes().to_vec();
        v.extend_from_slice(&b0.to_be_bytes());
        v.extend_from_slice(&b1.to_be_bytes());
        v
    };
    s.put("/zarr/data/rec/0", [record(1, 0.5, 1.5), record(2, 2.5, 3.5)].concat()).await.expect_status(201);
    let r = s.get("/api/v1/data/data/rec?field=b&format=json").await;
    r.expect_status(200);
    assert_eq!(r.must_header("x-zarr-shape"), "3,2");
    assert_eq!(r.json(), json!([[0.5, 1.5], [2.5, 3.5], [0.0, 0.0]]));
    let r = s.get("/api/v1/data/data/rec?field=a&sel=::-1").await;
    assert_eq!(r.must_header("x-zarr-dtype"), "<i4");
    assert_eq!(r.body, [0i32, 2, 1].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
    let r = s.get("/api/v1/data/data/rec?sel=1").await;
    assert_eq!(r.must_header("x-zarr-dtype"), "[('a', '<i4'), ('b', '<f8', (2,))]");
    assert_eq!(r.body.len(), 20);
    let r = s.get("/api/v1/data/data/rec?sel=0:1&format=json").await;
    assert_eq!(r.json(), json!([{"a": 1, "b": [0.5, 1.5]}]));
    let r = s.get("/api/v1/data/data/rec?field=c").await;
    r.expect_error(400, "invalid_selection");
    assert!(r.error_message().contains("a, b"), "{}", r.error_message());
}

async fn writes_invalidate_the_cache(s: TestServer) {
    put_f32_array(&s, "a").await;
    let read = || async { f32s(&s.get("/api/v1/data/data/a?sel=0,0:2").await.body) };
    same(&read().await, &[0.0, 1.0]);
    let mut chunk = vec![0u8; 80];
    chunk[..4].copy_from_slice(&7.5f32.to_le_bytes());
    s.put("/zarr/data/a/c/0/0", chunk).await.expect_status(204);
    same(&read().await, &[7.5, 0.0]);
    s.delete("/zarr/data/a/c/0/0").await.expect_status(204);
    let v = read().await;
    assert!(v.iter().all(|x| x.is_nan()), "{v:?}");
    // Behind zarrd's back: a file mount rechecks (the default) and sees it.
    if let Some(root) = &s.root {
        std::fs::write(root.join("a/c/0/0"), vec![0u8; 80]).unwrap();
        same(&read().await, &[0.0, 0.0]);
    }
}

/// A decoded chunk cached under one array document is not served under
/// another: the same stored bytes, read again after the document changed
/// their byte order (through zarrd, or behind its back on a file mount),
/// data type or codecs, decode as the new document says. The decoded-chunk
/// and chunk APIs both see it.
async fn metadata_changes_are_not_answered_from_the_cache(s: TestServer) {
    let doc = |dtype: &str, endian: &str, extra: &str| {
        format!(
            r#"{{"zarr_format":3,"node_type":"array","shape":[2,2],"data_type":"{dtype}",
            "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":[2,2]}}}},
            "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
            "fill_value":0,"codecs":[{extra}{{"name":"bytes","configuration":{{"endian":"{endian}"}}}}],"attributes":{{}}}}"#
        )
    };
    s.put("/zarr/data/m/zarr.json", doc("int16", "little", "")).await.expect_status(201);
    s.put("/zarr/data/m/c/0/0", vec![1u8, 0, 2, 0, 3, 0, 0xff, 0xff]).await.expect_status(201);
    let read = || async {
        let r = s.get("/api/v1/data/data/m?format=json").await;
        r.expect_status(200);
        r.json()
    };
    let chunk = || async {
        let r = s.get("/api/v1/chunks/data/m?coords=0,0&format=json").await;
        r.expect_status(200);
        r.json()
    };
    assert_eq!(read().await, json!([[1, 2], [3, -1]]));
    assert_eq!(chunk().await, json!([[1, 2], [3, -1]]));
    s.put("/zarr/data/m/zarr.json", doc("int16", "big", "")).await.expect_status(204);
    assert_eq!(read().await, json!([[256, 512], [768, -1]]));
    assert_eq!(chunk().await, json!([[256, 512], [768, -1]]));
    s.put("/zarr/data/m/zarr.json", doc("uint16", "big", "")).await.expect_status(204);
    assert_eq!(read().await, json!([[256, 512], [768, 65535]]));
    let transposed = doc("uint16", "big", r#"{"name":"transpose","configuration":{"order":[1,0]}},"#);
    s.put("/zarr/data/m/zarr.json", transposed).await.expect_status(204);
    assert_eq!(read().await, json!([[256, 768], [512, 65535]]));
    // Behind zarrd's back on a file mount: the document is revalidated, and
    // the chunks cached under the old one are not used.
    if let Some(root) = &s.root {
        std::fs::write(root.join("m/zarr.json"), doc("uint16", "little", "")).unwrap();
        assert_eq!(read().await, json!([[1, 2], [3, 65535]]));
    }
}

async fn large_reads_stream(s: TestServer) {
    // [300, 200] uint16 in [7, 33] chunks, read through 4 KiB slabs.
    let meta = r#"{"zarr_format":3,"node_type":"array","shape":[300,200],"data_type":"uint16",
     "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[7,33]}},
     "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
     "fill_value":7,"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1,"checksum":false}}]}"#;
    s.put("/zarr/data/big/zarr.json", meta).await.expect_status(201);
    let v = |y: u64, x: u64| u16::try_from((y * 200 + x) % 65521).unwrap();
    for cy in 0..43u64 {
        for cx in 0..7u64 {
            if (cy + cx) % 5 == 0 {
                continue; // missing: the fill value 7
            }
            let mut raw = Vec::new();
            for y in cy * 7..cy * 7 + 7 {
                for x in cx * 33..cx * 33 + 33 {
                    raw.extend_from_slice(&v(y, x).to_le_bytes());
                }
            }
            let z = zstd::encode_all(&raw[..], 1).unwrap();
            s.put(&format!("/zarr/data/big/c/{cy}/{cx}"), z).await.expect_status(201);
        }
    }
    let at = |y: u64, x: u64| if (y / 7 + x / 33) % 5 == 0 { 7 } else { v(y, x) };
    let u16s = |b: &[u8]| b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<_>>();
    let r = s.get("/api/v1/data/data/big").await;
    r.expect_status(200);
    assert_eq!(r.must_header("content-length"), "120000");
    let want: Vec<u16> = (0..300).flat_map(|y| (0..200).map(move |x| at(y, x))).collect();
    assert_eq!(u16s(&r.body), want);
    let r = s.get("/api/v1/data/data/big?sel=299:0:-2,[199,0,50]&format=npy").await;
    let got = u16s(npy_data(&r.body, "<u2", "(150, 3)"));
    let want: Vec<u16> = (1..300).rev().step_by(2).flat_map(|y| [199, 0, 50].map(|x| at(y, x))).collect();
    assert_eq!(got, want);
    let r = s.get("/api/v1/data/data/big?sel=:,5&format=json").await;
    let want: Vec<u16> = (0..300).map(|y| at(y, 5)).collect();
    assert_eq!(r.json(), json!(want));
    // 3000 points, more than one slab of them.
    let ys: Vec<u64> = (0..3000).map(|i| (i * 37) % 300).collect();
    let xs: Vec<u64> = (0..3000).map(|i| (i * 53) % 200).collect();
    let r = post_json(&s, "/api/v1/data/data/big", &json!({"selection": [ys, xs], "mode": "coordinate"})).await;
    let got = u16s(&r.body);
    let want: Vec<u16> = ys.iter().zip(&xs).map(|(&y, &x)| at(y, x)).collect();
    assert_eq!(got, want);
}

fn limited_config() -> Config {
    let mut c = common::test_config();
    c.limits.max_selection_bytes = 200;
    c.limits.max_json_elements = 10;
    c.limits.read_slab_bytes = 4096;
    c
}

async fn limits(backend: Backend) {
    let Some(s) = TestServer::start_with(backend, "limits", limited_config()).await else { return };
    put_f32_array(&s, "a").await;
    let r = s.get("/api/v1/data/data/a").await;
    r.expect_error(413, "selection_too_large");
    let m = r.error_message();
    assert!(m.contains("480 bytes") && m.contains("limits.max_selection_bytes = 200"), "{m}");
    s.get("/api/v1/data/data/a?sel=0:2,0:12").await.expect_status(200);
    let r = s.get("/api/v1/data/data/a?sel=0:2,0:12&format=json").await;
    r.expect_error(413, "selection_too_large");
    assert!(r.error_message().contains("max_json_elements"), "{}", r.error_message());
    s.get("/api/v1/data/data/a?sel=0:2,0:5&format=json").await.expect_status(200);
    // A size past 2^64 is stated as it is, not as a saturated u64.
    let huge = V3_F32.replacen("[10,12]", "[1099511627776,1099511627776]", 1);
    assert_ne!(huge, V3_F32);
    s.put("/zarr/data/huge/zarr.json", huge).await.expect_status(201);
    let r = s.get("/api/v1/data/data/huge").await;
    r.expect_error(413, "selection_too_large");
    let m = r.error_message();
    assert!(m.contains("4835703278458516698824704 bytes (1208925819614629174706176 elements"), "{m}");
    assert!(!m.contains(&u64::MAX.to_string()), "{m}");
}

/// A corrupt chunk: a 502 naming its key when met in the first slab; after
/// the headers went out, a body cut short of its Content-Length.
async fn corrupt_chunks(backend: Backend) {
    let mut config = common::test_config();
    config.limits.read_slab_bytes = 4096;
    let Some(s) = TestServer::start_with(backend, "corrupt", config).await else { return };
    let meta = r#"{"zarr_format":3,"node_type":"array","shape":[80,50],"data_type":"uint16",
     "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10,50]}},
     "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
     "fill_value":0,"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1,"checksum":false}}]}"#;
    s.put("/zarr/data/z/zarr.json", meta).await.expect_status(201);
    for cy in [0, 1, 2, 3, 4, 5, 7] {
        let z = zstd::encode_all(&vec![1u8; 1000][..], 1).unwrap();
        s.put(&format!("/zarr/data/z/c/{cy}/0"), z).await.expect_status(201);
    }
    s.put("/zarr/data/z/c/6/0", b"not zstd at all".to_vec()).await.expect_status(201);
    let r = s.get("/api/v1/data/data/z?sel=60:70").await;
    r.expect_error(502, "corrupt_chunk");
    assert!(r.error_message().contains("z/c/6/0"), "{}", r.error_message());
    // 4 KiB slabs hold four chunk rows: the corrupt chunk is in the second slab.
    let resp = s.request("GET", "/api/v1/data/data/z").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-length"], "8000");
    let body = resp.bytes().await;
    assert!(body.is_err(), "the body must not arrive whole: {:?}", body.map(|b| b.len()));
}

/// A stored chunk larger than any encoding of its chunk (a 1 MiB file behind
/// a 100-byte zstd chunk, whose most is 100 + 100/8 + 64 KiB) is damage: a
/// 502 naming the key and both sizes, for reads, decoded chunk reads and
/// writes into the chunk, decided from the object's size before it is read.
/// A shard index claiming more bytes for an inner chunk than any encoding of
/// it can take is refused the same way. The store protocol still serves the
/// object as it is.
async fn oversized_chunks(backend: Backend) {
    let mut config = common::test_config();
    config.limits.max_put_bytes = 4 << 20;
    let Some(s) = TestServer::start_with(backend, "oversized", config).await else { return };
    let meta = r#"{"zarr_format":3,"node_type":"array","shape":[10,10],"data_type":"uint8",
     "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10,10]}},
     "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
     "fill_value":0,"codecs":[{"name":"bytes"},{"name":"zstd","configuration":{"level":1,"checksum":false}}]}"#;
    s.put("/zarr/data/z/zarr.json", meta).await.expect_status(201);
    let big = vec![7u8; 1 << 20];
    s.put("/zarr/data/z/c/0/0", big.clone()).await.expect_status(201);
    let most = 100 + 100 / 8 + 64 * 1024;
    let r = s.get("/api/v1/data/data/z?sel=0:2,0:2&format=json").await;
    r.expect_error(502, "corrupt_chunk");
    let m = r.error_message();
    assert!(
        m.contains(&format!(
            "z/c/0/0: stored data is corrupt: 1048576 bytes, more than any encoding of its chunk can take ({most})"
        )),
        "{m}"
    );
    s.get("/api/v1/chunks/data/z?coords=0,0").await.expect_error(502, "corrupt_chunk");
    let w =
        s.request("PUT", "/api/v1/data/data/z?sel=0:1,0:1").header("content-type", "application/json").body("[[1]]");
    s.send(w).await.expect_error(502, "corrupt_chunk");
    let r = s.get("/zarr/data/z/c/0/0").await;
    r.expect_status(200);
    assert_eq!(r.body, big);
    // At the bound, the chunk is decoded (and found not to be zstd).
    s.put("/zarr/data/z/c/0/0", vec![7u8; most as usize]).await.expect_status(204);
    let r = s.get("/api/v1/data/data/z?sel=0:2,0:2&format=json").await;
    r.expect_error(502, "corrupt_chunk");
    assert!(!r.error_message().contains("more than"), "{}", r.error_message());

    // Shards of two 1×4 uint8 inner chunks (4 bytes each, no compression),
    // index (no checksum) at the end.
    let meta = r#"{"zarr_format":3,"node_type":"array","shape":[2,4],"data_type":"uint8",
     "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,4]}},
     "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
     "fill_value":0,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[1,4],
       "codecs":[{"name":"bytes"}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
       "index_location":"end"}}]}"#;
    s.put("/zarr/data/s/zarr.json", meta).await.expect_status(201);
    let shard = |second: u64| -> Vec<u8> {
        let mut b = vec![1u8, 2, 3, 4, 5, 6, 7, 8];
        for v in [0u64, 4, 4, second] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    };
    s.put("/zarr/data/s/c/0/0", shard(4)).await.expect_status(201);
    let r = s.get("/api/v1/data/data/s?format=json").await;
    r.expect_status(200);
    assert_eq!(r.body, b"[[1,2,3,4],[5,6,7,8]]");
    s.put("/zarr/data/s/c/0/0", shard(1 << 40)).await.expect_status(204);
    let r = s.get("/api/v1/data/data/s?sel=0,0:4&format=json").await;
    r.expect_error(502, "corrupt_chunk");
    let m = r.error_message();
    assert!(m.contains("s/c/0/0") && m.contains("inner chunk [1, 0]: nbytes 1099511627776 is more than"), "{m}");
}

#[tokio::test]
async fn oversized_chunks_memory() {
    oversized_chunks(Backend::Memory).await;
}

#[tokio::test]
async fn oversized_chunks_file() {
    oversized_chunks(Backend::File).await;
}

#[tokio::test]
async fn oversized_chunks_s3() {
    oversized_chunks(Backend::S3).await;
}

#[tokio::test]
async fn corrupt_chunks_memory() {
    corrupt_chunks(Backend::Memory).await;
}

#[tokio::test]
async fn corrupt_chunks_file() {
    corrupt_chunks(Backend::File).await;
}

#[tokio::test]
async fn limits_memory() {
    limits(Backend::Memory).await;
}

#[tokio::test]
async fn limits_file() {
    limits(Backend::File).await;
}

/// With `recheck_cached_data = "never"`, a change behind zarrd's back is not
/// seen until a write through zarrd invalidates; with a duration, after it.
#[tokio::test]
async fn recheck_policies_on_a_file_mount() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::test_config();
    let mut never = MountSpec::from_url(dir.path().to_str().unwrap());
    never.recheck_cached_data = Some(RecheckPolicy::Never);
    let mut later = never.clone();
    later.recheck_cached_data = Some(RecheckPolicy::After(std::time::Duration::from_millis(200)));
    config.mounts.insert("data".into(), never.clone());
    let mounts = vec![Mount::build("data", &never).unwrap(), Mount::build("later", &later).unwrap()];
    let (addr, _task) = common::serve_app(App::with_mounts(config, mounts)).await;
    let client = common::client();
    let base = format!("http://{addr}");
    let meta = r#"{"zarr_format":3,"node_type":"array","shape":[2],"data_type":"uint8",
      "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2]}},
      "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
      "fill_value":0,"codecs":[{"name":"bytes"}]}"#;
    std::fs::create_dir_all(dir.path().join("a/c")).unwrap();
    std::fs::write(dir.path().join("a/zarr.json"), meta).unwrap();
    std::fs::write(dir.path().join("a/c/0"), [1u8, 2]).unwrap();
    let get = |mount: &'static str| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            client.get(format!("{base}/api/v1/data/{mount}/a")).send().await.unwrap().bytes().await.unwrap().to_vec()
        }
    };
    assert_eq!(get("data").await, [1, 2]);
    assert_eq!(get("later").await, [1, 2]);
    std::fs::write(dir.path().join("a/c/0"), [3u8, 4]).unwrap();
    assert_eq!(get("data").await, [1, 2], "never: the cached chunk is used");
    let r = client.put(format!("{base}/zarr/data/a/c/0")).body(vec![5u8, 6]).send().await.unwrap();
    assert!(r.status().is_success());
    assert_eq!(get("data").await, [5, 6], "a write through zarrd invalidates");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(get("later").await, [5, 6], "after the duration, the change is seen");
}

/// An array whose chunk keys are longer than storage keys may be (its own
/// `zarr.json` key fits): reading or writing its chunks is the request's
/// fault, a 400 naming the key — a slice write answered 503 (storage
/// unavailable) before the engine's errors kept their meaning.
async fn chunk_keys_the_store_cannot_hold(s: TestServer) {
    // 1013 bytes: `<path>/zarr.json` is 1023 bytes, `<path>/c/0/0/0/0/0/0` 1027.
    let path = format!("{}/{}", vec!["p".repeat(200); 5].join("/"), "abcdefgh");
    assert_eq!(path.len(), 1013);
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [1, 1, 1, 1, 1, 1], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1, 1, 1, 1, 1]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}],
        "attributes": {}});
    // zarrd refuses to store such a document (422, `tests/api_nodes.rs` `create_errors`); one
    // written behind its back, on the file mount, is read and written with a 400 naming the key.
    s.put(&format!("/zarr/data/{path}/zarr.json"), doc.to_string()).await.expect_error(422, "unsupported_array");
    let Some(root) = &s.root else { return };
    std::fs::create_dir_all(root.join(&path)).expect("mkdir");
    std::fs::write(root.join(&path).join("zarr.json"), doc.to_string()).expect("write document");
    let r = s.get(&format!("/api/v1/data/data/{path}?sel=0,0,0,0,0,0&format=raw")).await;
    assert_eq!(r.status, 400, "{r}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("c/0/0/0/0/0/0") && message.contains("longer than 1024"), "{message}");
    let r = s
        .put_with(
            &format!("/api/v1/data/data/{path}?sel=0,0,0,0,0,0&format=json"),
            "7",
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(r.status, 400, "{r}");
    assert_eq!(r.json()["error"]["code"], "bad_request", "{r}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("c/0/0/0/0/0/0") && message.contains("longer than 1024"), "{message}");
}

macro_rules! on_backends {
    ($($name:ident),*) => {
        mod memory { $( #[tokio::test] async fn $name() { super::common::run(super::Backend::Memory, stringify!($name), super::$name).await; } )* }
        mod file { $( #[tokio::test] async fn $name() { super::common::run(super::Backend::File, stringify!($name), super::$name).await; } )* }
    };
}

on_backends!(
    reads_every_format,
    selections_of_every_form,
    selection_errors,
    decoded_chunks,
    sharded_arrays,
    strings_only_as_json,
    structured_fields,
    writes_invalidate_the_cache,
    metadata_changes_are_not_answered_from_the_cache,
    large_reads_stream,
    chunk_keys_the_store_cannot_hold
);
