//! Bounds found by the review of the hardening (issue 12): rank, shape
//! extents, selection bodies, corrupt stored data, write errors naming
//! their key, and describing arrays over the limits.
//!
//! Before the fixes: a 33- (or 1.9-million-) dimensional array was created
//! and opened; a resize to `u64::MAX` was stored; a POST selection kept a
//! JSON tree per index (about 100 bytes each) without any bound; a
//! coordinate selection broadcast its scalars to every point unbounded;
//! corrupt stored chunks answered 500; write errors named `c/0`; describing
//! an array over the limits did not say so.

mod common;

use std::time::{Duration, Instant};

use common::{Backend, TestServer};
use serde_json::{json, Value};

fn v3(shape: &[u64], chunks: &[u64]) -> Value {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {}
    })
}

fn v2(shape: &[u64], chunks: &[u64]) -> Value {
    json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "|u1",
        "compressor": null, "fill_value": 0, "order": "C", "filters": null})
}

fn json_req(s: &TestServer, method: &str, path: &str, body: &Value) -> reqwest::RequestBuilder {
    s.request(method, path).header("content-type", "application/json").body(body.to_string())
}

async fn file_server(test: &str) -> TestServer {
    TestServer::start(Backend::File, test).await.expect("file backend")
}

/// Document bodies up to 16 MiB (the default), for bodies the test
/// configuration's 64 KiB would refuse before the point.
async fn big_body_server(test: &str) -> TestServer {
    let mut config = common::test_config();
    config.limits.max_body_bytes = 16 << 20;
    config.limits.max_put_bytes = 16 << 20;
    TestServer::start_with(Backend::File, test, config).await.expect("file backend")
}

fn write_behind(s: &TestServer, key: &str, doc: &Value) {
    let path = s.root.as_ref().expect("file root").join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(doc).unwrap()).unwrap();
}

fn expect_rank_refused(r: &common::Reply, what: &str) {
    assert!(r.status == 422 || r.status == 400, "{what}: {} {}", r.status, r.text());
    let m = r.error_message();
    assert!(m.contains("33 dimensions") && m.contains("32"), "{what}: {m}");
}

/// Rank is bounded at 32 (TensorStore's `kMaxRank`) on every face, for
/// every per-dimension list; 32 dimensions keep working.
#[tokio::test]
async fn rank_is_bounded_on_every_face() {
    let s = file_server("rank").await;
    let (ones32, ones33) = (vec![1u64; 32], vec![1u64; 33]);
    // Create through the API: v3, v2, TensorStore spec.
    let r = s.send(json_req(&s, "PUT", "/api/v1/nodes/data/a33", &v3(&ones33, &ones33))).await;
    expect_rank_refused(&r, "v3 create");
    r.expect_error(422, "invalid_metadata");
    let mut v2_33 = v2(&ones33, &ones33);
    v2_33["attributes"] = json!({});
    expect_rank_refused(&s.send(json_req(&s, "PUT", "/api/v1/nodes/data/b33", &v2_33)).await, "v2 create");
    let spec = json!({"driver": "zarr3", "schema": {"dtype": "uint8", "domain": {"shape": ones33}}});
    let r = s.send(json_req(&s, "PUT", "/api/v1/nodes/data/c33", &spec)).await;
    expect_rank_refused(&r, "TensorStore spec");
    r.expect_status(400);
    // Raw store PUTs.
    expect_rank_refused(&s.put("/zarr/data/d33/zarr.json", v3(&ones33, &ones33).to_string()).await, "PUT zarr.json");
    expect_rank_refused(&s.put("/zarr/data/e33/.zarray", v2(&ones33, &ones33).to_string()).await, "PUT .zarray");
    // Every other per-dimension list of a 32-dimensional array.
    let r = s.put("/zarr/data/f/zarr.json", v3(&ones32, &ones33).to_string()).await;
    expect_rank_refused(&r, "chunk_shape");
    assert!(r.error_message().contains("chunk_grid.configuration.chunk_shape"), "{}", r.error_message());
    let mut sharded = v3(&ones32, &ones32);
    sharded["codecs"] = json!([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": ones33, "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes",
        "configuration": {"endian": "little"}}]}}]);
    let r = s.put("/zarr/data/g/zarr.json", sharded.to_string()).await;
    expect_rank_refused(&r, "inner chunk_shape");
    let mut named = v3(&ones32, &ones32);
    named["dimension_names"] = json!(vec![Value::Null; 33]);
    s.put("/zarr/data/h/zarr.json", named.to_string()).await.expect_error(422, "invalid_metadata");
    let root = s.root.as_ref().unwrap();
    for p in ["a33", "b33", "c33", "d33", "e33", "f", "g", "h"] {
        assert!(!root.join(p).exists(), "{p} must not be written");
    }
    // Documents written behind zarrd's back: refused when opened.
    write_behind(&s, "i33/zarr.json", &v3(&ones33, &ones33));
    write_behind(&s, "j33/.zarray", &v2(&ones33, &ones33));
    for p in ["i33", "j33"] {
        expect_rank_refused(&s.get(&format!("/api/v1/nodes/data/{p}")).await, "describe");
        expect_rank_refused(&s.get(&format!("/api/v1/data/data/{p}?format=json")).await, "read");
    }
    // 32 dimensions: created, written, read, described.
    let mut shape = vec![1u64; 32];
    shape[0] = 4;
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/r32", &v3(&shape, &ones32))).await.expect_status(201);
    let sel = format!("1{}", ",0".repeat(31));
    let put = s.request("PUT", &format!("/api/v1/data/data/r32?sel={sel}")).header("content-type", "application/json");
    s.send(put.body("7")).await.expect_status(204);
    let r = s.get("/api/v1/data/data/r32?format=json").await;
    r.expect_status(200);
    let flat = r.text().replace(['[', ']', ' '], "");
    assert_eq!(flat, "0,7,0,0", "{}", r.text());
    let d = s.get("/api/v1/nodes/data/r32").await;
    d.expect_status(200);
    assert_eq!(d.json()["tensorstore_schema"]["rank"], 32);
    write_behind(&s, "k32/.zarray", &v2(&ones32, &ones32));
    s.get("/api/v1/nodes/data/k32").await.expect_status(200);
}

/// 1.9 million dimensions (the review's case: +1 GB, and describing it
/// stalled /healthz for over 5 s): refused at once on create and on open.
#[tokio::test]
async fn millions_of_dimensions_are_refused_at_once() {
    let s = big_body_server("rank-million").await;
    let many = vec![1u64; 1_900_000];
    let doc = v3(&many, &many);
    let started = Instant::now();
    let r = s.send(json_req(&s, "PUT", "/api/v1/nodes/data/m", &doc)).await;
    r.expect_error(422, "invalid_metadata");
    assert!(r.error_message().contains("1900000 dimensions"), "{}", r.error_message());
    write_behind(&s, "n/zarr.json", &doc);
    let r = s.get("/api/v1/nodes/data/n").await;
    r.expect_error(422, "invalid_metadata");
    assert!(r.error_message().contains("1900000 dimensions"), "{}", r.error_message());
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}

/// Shapes stay within 2^62 (the index space TensorStore and numpy address),
/// on create and on resize; `[2^62, 2^62]` stays allowed; a refused resize
/// deletes nothing.
#[tokio::test]
async fn shape_extents_are_bounded() {
    let s = file_server("extents").await;
    let max = 1u64 << 62;
    let r = s.send(json_req(&s, "PUT", "/api/v1/nodes/data/x", &v3(&[4, max + 1], &[1, 1]))).await;
    r.expect_error(422, "invalid_metadata");
    let m = r.error_message();
    assert!(m.contains("shape[1]") && m.contains("2^62"), "{m}");
    s.put("/zarr/data/y/.zarray", v2(&[u64::MAX], &[1]).to_string()).await.expect_error(422, "invalid_metadata");
    let spec = json!({"driver": "zarr3", "schema": {"dtype": "uint8", "domain": {"inclusive_max": [u64::MAX]}}});
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/z", &spec)).await.expect_status(400);
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/huge", &v3(&[max, max], &[1, 1]))).await.expect_status(201);
    // Resize: refused before any chunk is deleted.
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/r", &v3(&[4, 4], &[2, 2]))).await.expect_status(201);
    let put = s.request("PUT", "/api/v1/data/data/r?sel=3,3").header("content-type", "application/json");
    s.send(put.body("9")).await.expect_status(204);
    for shape in [json!([u64::MAX, 4]), json!([2, max + 1])] {
        let r = s.send(json_req(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": shape}))).await;
        r.expect_error(400, "bad_request");
        let m = r.error_message();
        assert!(m.contains("2^62") && m.contains("shape["), "{m}");
    }
    assert!(s.root.as_ref().unwrap().join("r/c/1/1").exists(), "a refused resize deletes nothing");
    let r = s.get("/api/v1/nodes/data/r").await;
    assert_eq!(r.json()["shape"], json!([4, 4]));
    let r = s.send(json_req(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [max, max]}))).await;
    r.expect_status(200);
    assert_eq!(r.json()["shape"], json!([max, max]));
}

const CORRUPT_META: &str = r#"{"zarr_format":3,"node_type":"array","shape":[80,50],"data_type":"uint16",
 "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10,50]}},
 "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
 "fill_value":0,"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1,"checksum":false}}]}"#;

/// Stored bytes that do not decode are the store's bad answer: 502
/// `corrupt_chunk` naming the full key, on every face (slice reads, decoded
/// chunk reads, and writes that read-modify-write the chunk).
async fn corrupt_data_is_a_bad_gateway(backend: Backend) {
    let Some(s) = TestServer::start(backend, "corrupt-502").await else { return };
    s.put("/zarr/data/grp/z/zarr.json", CORRUPT_META).await.expect_status(201);
    s.put("/zarr/data/grp/z/c/6/0", b"not zstd at all".to_vec()).await.expect_status(201);
    let check = |r: &common::Reply, what: &str| {
        r.expect_error(502, "corrupt_chunk");
        let m = r.error_message();
        assert!(m.contains("grp/z/c/6/0"), "{what}: the message names the array's path and the chunk: {m}");
    };
    check(&s.get("/api/v1/data/data/grp/z?sel=60:70").await, "slice read");
    check(&s.get("/api/v1/chunks/data/grp/z?coords=6,0").await, "chunk read");
    // A partial write reads the chunk to update it.
    let put = s.request("PUT", "/api/v1/data/data/grp/z?sel=61,0:5").header("content-type", "application/json");
    check(&s.send(put.body("3")).await, "write");
    // A write covering the whole chunk does not read it: it replaces it.
    let put = s.request("PUT", "/api/v1/data/data/grp/z?sel=60:70").header("content-type", "application/json");
    s.send(put.body("3")).await.expect_status(204);
    let r = s.get("/api/v1/data/data/grp/z?sel=61,0:2&format=json").await;
    assert_eq!(r.json(), json!([3, 3]));
}

#[tokio::test]
async fn corrupt_data_is_a_bad_gateway_memory() {
    corrupt_data_is_a_bad_gateway(Backend::Memory).await;
}

#[tokio::test]
async fn corrupt_data_is_a_bad_gateway_file() {
    corrupt_data_is_a_bad_gateway(Backend::File).await;
}

fn indices_body(n: usize, mode: &str) -> String {
    let mut body = String::with_capacity(n * 2 + 64);
    body.push_str("{\"selection\": [[");
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push(char::from(b'0' + (i % 10) as u8));
    }
    body.push_str(&format!("]], \"mode\": \"{mode}\", \"format\": \"raw\"}}"));
    body
}

/// POST selection bodies: lists are parsed straight into integers and
/// counted as they arrive; more than 2^22 indices in all is a 413 naming
/// the limit (text lists inside the body and coordinate broadcasts count
/// too); within it, the answer is right.
#[tokio::test]
async fn selection_bodies_are_bounded() {
    let s = big_body_server("selection-bodies").await;
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/a", &v3(&[1 << 20], &[1 << 16]))).await.expect_status(201);
    let put = s.request("PUT", "/api/v1/data/data/a?sel=0:10").header("content-type", "application/octet-stream");
    s.send(put.body((0u8..10).collect::<Vec<u8>>())).await.expect_status(204);
    let post =
        |body: String| s.request("POST", "/api/v1/data/data/a").header("content-type", "application/json").body(body);
    // 2^22 + 1 indices: refused.
    let started = Instant::now();
    let r = s.send(post(indices_body((1 << 22) + 1, "orthogonal"))).await;
    r.expect_error(413, "selection_too_large");
    assert!(r.error_message().contains("4194304"), "{}", r.error_message());
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    // The text form inside a body counts the same.
    let text = format!("[{}]", vec!["1"; (1 << 22) + 1].join(","));
    let r = s.send(post(json!({"selection": text}).to_string())).await;
    r.expect_error(413, "selection_too_large");
    let r = s.send(post(json!({"selection": [text]}).to_string())).await;
    r.expect_error(413, "selection_too_large");
    // Exactly 2^22: served, every index read.
    let r = s.send(post(indices_body(1 << 22, "orthogonal"))).await;
    r.expect_status(200);
    assert_eq!(r.body.len(), 1 << 22);
    assert!(r.body.iter().enumerate().all(|(i, &b)| usize::from(b) == i % 10), "the indices' elements, in order");
    // Malformed entries are still 400s naming the dimension.
    let r = s.send(post(json!({"selection": [[1, "a"]]}).to_string())).await;
    r.expect_error(400, "invalid_selection");
    assert!(r.error_message().contains("dimension 0: list items must be integers, got \"a\""), "{}", r.error_message());
    let r = s.send(post(json!({"selection": vec![Value::Null; 34]}).to_string())).await;
    r.expect_error(400, "invalid_selection");
    assert!(r.error_message().contains("32 dimensions"), "{}", r.error_message());
    let r = s.send(post(json!({"selection": [{"start": 2, "stop": 5}], "format": "json"}).to_string())).await;
    assert_eq!(r.json(), json!([2, 3, 4]));
    let r = s.send(post(json!({"selection": [[9, -1, 3]], "mode": "coordinate", "format": "json"}).to_string())).await;
    assert_eq!(r.json(), json!([9, 0, 3]));
}

/// A coordinate selection's scalars are broadcast against its points: they
/// count as listed indices before they are built (200,000 points in 32
/// dimensions would be 6.4 million).
#[tokio::test]
async fn coordinate_broadcasts_are_counted() {
    let s = big_body_server("broadcast").await;
    let mut shape = vec![2u64; 32];
    shape[0] = 1 << 18;
    let mut chunks = vec![1u64; 32];
    chunks[0] = 1 << 16;
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/b", &v3(&shape, &chunks))).await.expect_status(201);
    let mut selection = vec![json!(0); 32];
    selection[0] = json!((0..200_000).collect::<Vec<u64>>());
    let body = json!({"selection": selection, "mode": "coordinate", "format": "raw"});
    let r = s.send(json_req(&s, "POST", "/api/v1/data/data/b", &body)).await;
    r.expect_error(413, "selection_too_large");
    let m = r.error_message();
    assert!(m.contains("200000 points in 32 dimensions") && m.contains("4194304"), "{m}");
    selection[0] = json!((0..100_000).collect::<Vec<u64>>());
    let body = json!({"selection": selection, "mode": "coordinate", "format": "raw"});
    let r = s.send(json_req(&s, "POST", "/api/v1/data/data/b", &body)).await;
    r.expect_status(200);
    assert_eq!(r.body.len(), 100_000);
}

/// Describing an array over the limits works (people need to see why it is
/// refused) and says which limit it exceeds; arrays within the limits have
/// no such member.
#[tokio::test]
async fn describing_an_array_over_the_limits_says_so() {
    let s = file_server("describe-limits").await;
    let big = 1u64 << 31;
    write_behind(&s, "over/zarr.json", &v3(&[big, big], &[big, big]));
    let r = s.get("/api/v1/nodes/data/over").await;
    r.expect_status(200);
    let info = r.json();
    assert_eq!(info["shape"], json!([big, big]));
    let why = info["limits_exceeded"].as_str().unwrap_or_default();
    assert!(why.contains("limits.max_decoded_chunk_bytes") && why.contains("[2147483648, 2147483648]"), "{info}");
    // Reads refuse it with the same reason.
    let r = s.get("/api/v1/data/data/over?sel=0,0").await;
    r.expect_error(422, "unsupported_array");
    assert!(r.error_message().contains(why), "{} / {why}", r.error_message());
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/ok", &v3(&[4], &[2]))).await.expect_status(201);
    let info = s.get("/api/v1/nodes/data/ok").await.json();
    assert!(info.get("limits_exceeded").is_none(), "{info}");
    assert_eq!(info["shape"], json!([4]));
}
