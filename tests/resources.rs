//! The resource model (issue 12, findings 4, 6–11): every request's memory
//! is bounded by limits checked before the work starts. Absurd metadata
//! (huge shapes with tiny chunks, huge chunks, huge fill values, huge shard
//! indexes, deep attributes), written through every face or behind zarrd's
//! back, is refused with a 4xx naming the limit; writes are planned lazily
//! and refused past `limits.max_chunks_per_request`; metadata rewrites are
//! checked before anything is written.
//!
//! Before the fixes, most of these requests aborted the test process
//! (allocation failures of gigabytes to exabytes) or ran for minutes.

mod common;

use std::time::{Duration, Instant};

use common::{Backend, TestServer};
use serde_json::{json, Value};

fn v3(shape: &[u64], chunks: &[u64], dtype: &str, fill: Value, codecs: Value) -> Value {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill, "codecs": codecs, "attributes": {}
    })
}

fn bytes_codec() -> Value {
    json!([{"name": "bytes", "configuration": {"endian": "little"}}])
}

fn sharded(inner: &[u64]) -> Value {
    json!([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": inner,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"
    }}])
}

fn json_req(s: &TestServer, method: &str, path: &str, body: &Value) -> reqwest::RequestBuilder {
    s.request(method, path).header("content-type", "application/json").body(body.to_string())
}

async fn file_server(test: &str) -> TestServer {
    TestServer::start(Backend::File, test).await.expect("file backend")
}

/// Writes a document straight into the mount's directory, as another tool
/// would, bypassing every check zarrd makes on its own writes.
fn write_behind(s: &TestServer, key: &str, doc: &Value) {
    let path = s.root.as_ref().expect("file root").join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(doc).unwrap()).unwrap();
}

async fn put_data(s: &TestServer, path: &str, query: &str, body: &str) -> common::Reply {
    let rb = s
        .request("PUT", &format!("/api/v1/data/data/{path}?{query}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    s.send(rb).await
}

/// Finding 4: a write over 2^34 one-element chunks was planned as a Vec of
/// every chunk (412 GB, abort); 2^24 chunks grew past 2.9 GB. Now the plan
/// is counted lazily and refused at once, naming the limit.
#[tokio::test]
async fn write_touching_too_many_chunks_is_refused_before_any_work() {
    let s = file_server("finding4").await;
    let huge = 1u64 << 62;
    s.put("/zarr/data/huge/zarr.json", v3(&[huge, huge], &[1, 1], "uint8", json!(0), bytes_codec()).to_string())
        .await
        .expect_status(201);
    for sel in ["0:131072,0:131072", "0:4096,0:4096", "0:1025,0:1024"] {
        let started = Instant::now();
        let r = put_data(&s, "huge", &format!("sel={sel}"), "0").await;
        r.expect_error(413, "selection_too_large");
        let m = r.error_message();
        assert!(m.contains("limits.max_chunks_per_request"), "{m}");
        assert!(started.elapsed() < Duration::from_secs(5), "{sel}: took {:?}", started.elapsed());
    }
    // Within the limit, a broadcast over many chunks works and stores them.
    put_data(&s, "huge", "sel=0:40,0:50", "7").await.expect_status(204);
    let r = s.send(s.request("GET", "/api/v1/data/data/huge?sel=38:41,48:51&format=json")).await;
    r.expect_status(200);
    assert_eq!(r.json(), json!([[7, 7, 0], [7, 7, 0], [0, 0, 0]]));
    let stored = std::fs::read_dir(s.root.as_ref().unwrap().join("huge/c")).unwrap().count();
    assert_eq!(stored, 40, "one directory per written row of chunks");
}

/// A strided or listed write keeps its indices: their number is bounded too.
#[tokio::test]
async fn indexed_write_listing_too_many_indices_is_refused() {
    let s = file_server("finding4-indices").await;
    let n = 1u64 << 40;
    s.put("/zarr/data/long/zarr.json", v3(&[n], &[1 << 20], "uint8", json!(0), bytes_codec()).to_string())
        .await
        .expect_status(201);
    let started = Instant::now();
    let r = put_data(&s, "long", "sel=0:4294967296:2", "1").await;
    r.expect_status(413);
    assert!(r.error_message().contains("indices"), "{}", r.error_message());
    assert!(started.elapsed() < Duration::from_secs(5));
    put_data(&s, "long", "sel=0:10:3", "5").await.expect_status(204);
    let r = s.send(s.request("GET", "/api/v1/data/data/long?sel=0:8&format=json")).await;
    assert_eq!(r.json(), json!([5, 0, 0, 5, 0, 0, 5, 0]));
}

/// Finding 6: chunks of declared shape [2^31, 2^31] (4 EiB decoded) were
/// allocated whole by a one-element write. Such arrays are now refused
/// when created (every face) and when opened (documents written behind
/// zarrd's back), naming the limit, the chunk shape and the size.
#[tokio::test]
async fn absurd_chunks_are_refused_on_create_and_open() {
    let s = file_server("finding6").await;
    let big = 1u64 << 31;
    let doc = v3(&[big, big], &[big, big], "uint8", json!(0), bytes_codec());
    let check = |r: &common::Reply| {
        r.expect_status(422);
        let m = r.error_message();
        assert!(m.contains("limits.max_decoded_chunk_bytes"), "{m}");
        assert!(m.contains("[2147483648, 2147483648]"), "{m}");
        assert!(m.contains("4611686018427387904"), "{m}");
    };
    // REST create, TensorStore spec, raw store PUT.
    check(&s.send(json_req(&s, "PUT", "/api/v1/nodes/data/a", &doc)).await);
    let spec = json!({"driver": "zarr3", "kvstore": {"driver": "memory"},
        "schema": {"chunk_layout": {"read_chunk": {"shape": [big, big]}}}, "metadata": {
        "shape": [big, big], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [big, big]}},
        "data_type": "uint8", "codecs": [{"name": "bytes"}]}});
    check(&s.send(json_req(&s, "PUT", "/api/v1/nodes/data/b", &spec)).await);
    check(&s.put("/zarr/data/c/zarr.json", doc.to_string()).await);
    let zarray = json!({"zarr_format": 2, "shape": [big, big], "chunks": [big, big], "dtype": "|u1",
        "compressor": null, "fill_value": 0, "order": "C", "filters": null});
    check(&s.put("/zarr/data/d/.zarray", zarray.to_string()).await);
    assert!(!s.root.as_ref().unwrap().join("a").exists() && !s.root.as_ref().unwrap().join("c").exists());
    // Behind zarrd's back: reads and writes refuse it, describing still works.
    write_behind(&s, "e/zarr.json", &doc);
    check(&put_data(&s, "e", "sel=0,0", "1").await);
    check(&s.get("/api/v1/data/data/e?sel=0,0&format=json").await);
    s.get("/api/v1/nodes/data/e").await.expect_status(200);
    // Sharded: a huge inner chunk is refused the same way.
    let inner = v3(&[big, big], &[big, big], "uint8", json!(0), sharded(&[big, big]));
    check(&s.put("/zarr/data/f/zarr.json", inner.to_string()).await);
}

fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = json!({ "x": v });
    }
    v
}

/// Finding 8: metadata documents were bounded by `max_put_bytes` on the
/// store protocol (an 86 MiB `zarr.json` peaked at 2.7 GB) and documents
/// in storage were parsed whatever their size. Now a raw PUT of a metadata
/// key is a body like any other document (413 past `max_body_bytes`), and a
/// stored document larger than zarrd would write is refused, not parsed.
#[tokio::test]
async fn metadata_documents_are_bounded_on_every_face() {
    let max = 16 * 1024;
    let mut config = common::test_config();
    config.limits.max_body_bytes = max;
    let s = TestServer::start_with(Backend::File, "finding8", config).await.expect("file backend");
    let big_group = |n: u64| {
        let pad = "x".repeat(usize::try_from(n).unwrap());
        json!({"zarr_format": 3, "node_type": "group", "attributes": {"pad": pad}})
    };
    // Store protocol: a document over max_body_bytes, under max_put_bytes... refused.
    for key in ["g/zarr.json", "g/.zattrs", "g/.zgroup", "g/.zarray", "g/.zmetadata"] {
        let r = s.put(&format!("/zarr/data/{key}"), big_group(max).to_string()).await;
        r.expect_error(413, "payload_too_large");
        assert!(r.error_message().contains("limits.max_body_bytes"), "{key}: {r}");
    }
    // REST create: the same limit.
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/g", &big_group(max))).await.expect_status(413);
    // Behind zarrd's back: a document far larger than zarrd writes is not parsed.
    write_behind(&s, "h/zarr.json", &big_group(3 * max));
    for path in ["/api/v1/nodes/data/h", "/api/v1/attributes/data/h"] {
        let r = s.get(path).await;
        r.expect_error(422, "invalid_metadata");
        assert!(r.error_message().contains("limits.max_body_bytes"), "{path}: {r}");
    }
    // Within the limits everything still works.
    s.put("/zarr/data/ok/zarr.json", big_group(max / 2).to_string()).await.expect_status(201);
    s.get("/api/v1/nodes/data/ok").await.expect_status(200);
}

/// Finding 11: consolidate wrote a group document nested deeper than the
/// JSON parser reads (attributes 124 deep), leaving the group unusable.
/// Nesting is now bounded explicitly (64) on every document, and every
/// metadata rewrite checks its exact bytes first, writing nothing when
/// they would not read back.
#[tokio::test]
async fn metadata_rewrites_are_checked_before_writing() {
    let s = file_server("finding11").await;
    let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {"keep": 1}});
    s.put("/zarr/data/g/zarr.json", group.to_string()).await.expect_status(201);
    // Too deep on its own: refused by every face, naming the rule.
    let deep = json!({"zarr_format": 3, "node_type": "group", "attributes": {"a": nested(70)}});
    for r in [
        s.put("/zarr/data/g/zarr.json", deep.to_string()).await,
        s.send(json_req(&s, "PUT", "/api/v1/nodes/data/g/d", &deep)).await,
        s.send(json_req(&s, "PATCH", "/api/v1/attributes/data/g", &json!({"a": nested(70)}))).await,
    ] {
        assert!(r.status == 422 || r.status == 400, "{r}");
        assert!(r.error_message().contains("nested more than 64 levels"), "{r}");
    }
    // A child at the limit is fine alone; consolidating it into the group's
    // document would nest it deeper than readable: refused, nothing written.
    let child = json!({"zarr_format": 3, "node_type": "group", "attributes": {"a": nested(60)}});
    s.put("/zarr/data/g/c/zarr.json", child.to_string()).await.expect_status(201);
    let before = std::fs::read(s.root.as_ref().unwrap().join("g/zarr.json")).unwrap();
    let r = s.send(s.request("POST", "/api/v1/consolidate/data/g")).await;
    assert_eq!(r.status / 100, 4, "{r}");
    assert!(r.error_message().contains("nested more than 64 levels"), "{r}");
    assert_eq!(std::fs::read(s.root.as_ref().unwrap().join("g/zarr.json")).unwrap(), before, "nothing written");
    let r = s.get("/api/v1/attributes/data/g").await;
    r.expect_status(200);
    assert_eq!(r.json()["keep"], 1);
    // A stored document nested too deep (written behind zarrd's back) is a
    // clear 422, not a parser failure.
    write_behind(&s, "z/zarr.json", &deep);
    let r = s.get("/api/v1/nodes/data/z").await;
    r.expect_error(422, "invalid_metadata");
    assert!(r.error_message().contains("nested more than 64 levels"), "{r}");
}

fn codec(name: &str) -> Value {
    match name {
        "zstd" => json!({"name": "zstd", "configuration": {"level": 3, "checksum": false}}),
        "gzip" => json!({"name": "gzip", "configuration": {"level": 1}}),
        "zlib" => json!({"name": "numcodecs.zlib", "configuration": {"level": 1}}),
        "bz2" => json!({"name": "numcodecs.bz2", "configuration": {"level": 1}}),
        "lz4" => json!({"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}),
        "blosc" => json!({"name": "blosc", "configuration":
            {"cname": "zstd", "clevel": 1, "shuffle": "noshuffle", "typesize": 1, "blocksize": 0}}),
        other => panic!("{other}"),
    }
}

fn chain(names: &[&str]) -> Value {
    let mut v = vec![json!({"name": "bytes", "configuration": {"endian": "little"}})];
    v.extend(names.iter().map(|n| codec(n)));
    Value::Array(v)
}

/// A chunk of `big` elements (all 1) encoded by zarrd with `names`: stored
/// under a small array's chunk key it is a decompression bomb.
async fn bomb(s: &TestServer, tag: &str, names: &[&str], big: u64) -> Vec<u8> {
    let path = format!("src-{tag}");
    let doc = v3(&[big], &[big], "uint8", json!(0), chain(names));
    s.put(&format!("/zarr/data/{path}/zarr.json"), doc.to_string()).await.expect_status(201);
    put_data(s, &path, &format!("sel=0:{big}"), "1").await.expect_status(204);
    let r = s.get(&format!("/zarr/data/{path}/c/0")).await;
    r.expect_status(200);
    r.body.to_vec()
}

/// Finding 9: every decode stage is capped by the size it is expected to
/// produce. Bombs in every codec (a 16 MiB chunk stored where 64 KiB is
/// expected) fail at the cap, naming the codec; a chain's inner stage is
/// capped near the chunk's size, not at 256 MiB (a gzip→gzip chain used to
/// decode its outer layer up to 256 MiB per decode).
#[tokio::test]
async fn decompression_bombs_stop_at_the_expected_size_in_every_codec() {
    let mut config = common::test_config();
    config.limits.max_put_bytes = 8 << 20;
    let s = TestServer::start_with(Backend::File, "finding9", config).await.expect("file backend");
    let (big, small) = (16u64 << 20, 64u64 << 10);
    for name in ["zstd", "gzip", "zlib", "bz2", "lz4", "blosc"] {
        let bytes = bomb(&s, name, &[name], big).await;
        assert!(bytes.len() < (4 << 20), "{name}: {} bytes", bytes.len());
        let path = format!("dst-{name}");
        let doc = v3(&[small], &[small], "uint8", json!(0), chain(&[name]));
        s.put(&format!("/zarr/data/{path}/zarr.json"), doc.to_string()).await.expect_status(201);
        s.put(&format!("/zarr/data/{path}/c/0"), bytes).await.expect_status(201);
        let started = Instant::now();
        let r = s.get(&format!("/api/v1/data/data/{path}?sel=0:4&format=json")).await;
        r.expect_error(502, "corrupt_chunk");
        let m = r.error_message();
        // Stopped at the expected size, or (a bomb stored in more bytes than
        // any encoding of 64 KiB takes: gzip's) refused from its size unread.
        let most = small + small / 8 + 64 * 1024;
        assert!(
            m.contains(&small.to_string())
                || m.contains(&format!("more than any encoding of its chunk can take ({most})")),
            "{name}: {m}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{name}: {:?}", started.elapsed());
    }
    // Chains: the stored bytes are one gzip (zstd) layer around 16 MiB; the
    // array declares two layers around 64 KiB chunks. The outer layer must
    // stop near 64 KiB (its worst-case encoding), not decode 16 MiB.
    for name in ["gzip", "zstd"] {
        let bytes = bomb(&s, &format!("{name}-once"), &[name], big).await;
        let path = format!("chain-{name}");
        let doc = v3(&[small], &[small], "uint8", json!(0), chain(&[name, name]));
        s.put(&format!("/zarr/data/{path}/zarr.json"), doc.to_string()).await.expect_status(201);
        s.put(&format!("/zarr/data/{path}/c/0"), bytes).await.expect_status(201);
        let r = s.get(&format!("/api/v1/data/data/{path}?sel=0:4&format=json")).await;
        r.expect_error(502, "corrupt_chunk");
        let m = r.error_message();
        assert!(
            m.contains("exceeds the expected size") || m.contains("more than the expected"),
            "{name}: the outer layer must stop at its cap: {m}"
        );
        let cap: u64 = m
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .filter(|&n: &u64| n > small)
            .min()
            .unwrap_or(0);
        assert!(cap > small && cap < 2 * small + (64 << 10), "{name}: cap {cap}: {m}");
    }
    // Sharded: a bomb as an inner chunk stops at the inner chunk's size.
    let inner_bomb = bomb(&s, "inner", &["zstd"], big).await;
    let codecs = json!([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [small], "codecs": chain(&["zstd"]),
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_location": "end"}}]);
    let doc = v3(&[2 * small], &[2 * small], "uint8", json!(0), codecs);
    s.put("/zarr/data/sharded/zarr.json", doc.to_string()).await.expect_status(201);
    let mut shard = inner_bomb.clone();
    let n = inner_bomb.len() as u64;
    for (offset, len) in [(0u64, n), (u64::MAX, u64::MAX)] {
        shard.extend_from_slice(&offset.to_le_bytes());
        shard.extend_from_slice(&len.to_le_bytes());
    }
    s.put("/zarr/data/sharded/c/0", shard).await.expect_status(201);
    let r = s.get("/api/v1/data/data/sharded?sel=0:4&format=json").await;
    r.expect_error(502, "corrupt_chunk");
    assert!(r.error_message().contains(&small.to_string()), "{}", r.error_message());
}

/// Finding 7: a 1 MiB string fill value was copied into every element of
/// an answer (5,000 elements aborted at 5.5 GB). Fill values are bounded
/// (`limits.max_fill_value_bytes`, 422 naming it, on create and on open),
/// and a variable-length chunk's decoded size counts its fill value per
/// element, so a missing chunk filled for an answer stays within
/// `limits.max_decoded_chunk_bytes`.
#[tokio::test]
async fn fill_values_are_bounded() {
    let mut config = common::test_config();
    config.limits.max_body_bytes = zarrd::config::Limits::default().max_body_bytes;
    let s = TestServer::start_with(Backend::File, "finding7", config).await.expect("file backend");
    let huge_fill = "f".repeat(1 << 20);
    let doc = v3(&[5000], &[5000], "string", json!(huge_fill), json!([{"name": "vlen-utf8"}]));
    // Behind zarrd's back (raw PUT and REST create go through the same check).
    write_behind(&s, "f/zarr.json", &doc);
    let r = s.get("/api/v1/data/data/f?sel=0:5000&format=json").await;
    r.expect_error(422, "unsupported_array");
    assert!(r.error_message().contains("limits.max_fill_value_bytes"), "{r}");
    // Through zarrd: a fill value over the limit is refused when created.
    let fill = "g".repeat(40 << 10);
    let doc = v3(&[10], &[10], "string", json!(fill), json!([{"name": "vlen-utf8"}]));
    let mut config = common::test_config();
    config.limits.max_fill_value_bytes = 32 << 10;
    let t = TestServer::start_with(Backend::File, "finding7b", config).await.expect("file backend");
    let r = t.put("/zarr/data/g/zarr.json", doc.to_string()).await;
    r.expect_error(422, "unsupported_array");
    assert!(r.error_message().contains("limits.max_fill_value_bytes"), "{r}");
    // A fill within the limit, but chunks whose filled form (fill × elements)
    // exceeds max_decoded_chunk_bytes: refused, naming that limit.
    let doc = v3(&[1 << 20], &[1 << 20], "string", json!("h".repeat(2000)), json!([{"name": "vlen-utf8"}]));
    let r = s.put("/zarr/data/h/zarr.json", doc.to_string()).await;
    r.expect_error(422, "unsupported_array");
    assert!(r.error_message().contains("limits.max_decoded_chunk_bytes"), "{r}");
    // Within every limit, the fill reads back.
    let doc = v3(&[3], &[3], "string", json!("fill"), json!([{"name": "vlen-utf8"}]));
    s.put("/zarr/data/k/zarr.json", doc.to_string()).await.expect_status(201);
    let r = s.get("/api/v1/data/data/k?sel=0:3&format=json").await;
    assert_eq!(r.json(), json!(["fill", "fill", "fill"]));
}

/// Finding 10: a shard of 2^24 inner chunks (a 256 MiB index) cost 1.3 GB
/// for a one-element write and 540 MiB for a one-element read. Inner chunks
/// per shard are bounded (`limits.max_inner_chunks_per_shard`, default
/// 2^16: a 1 MiB index), checked on create and open; at the limit a
/// one-element write and read work.
#[tokio::test]
async fn shard_indexes_are_bounded() {
    let s = file_server("finding10").await;
    let over = v3(&[1 << 24], &[1 << 24], "uint8", json!(0), sharded(&[1]));
    let check = |r: &common::Reply| {
        r.expect_error(422, "unsupported_array");
        let m = r.error_message();
        assert!(m.contains("limits.max_inner_chunks_per_shard") && m.contains("16777216 inner chunks"), "{m}");
    };
    check(&s.put("/zarr/data/a/zarr.json", over.to_string()).await);
    check(&s.send(json_req(&s, "PUT", "/api/v1/nodes/data/a", &over)).await);
    write_behind(&s, "b/zarr.json", &over);
    check(&put_data(&s, "b", "sel=5", "1").await);
    check(&s.get("/api/v1/data/data/b?sel=5&format=json").await);
    // At the limit: 2^16 inner chunks.
    let at = v3(&[1 << 16], &[1 << 16], "uint8", json!(0), sharded(&[1]));
    s.put("/zarr/data/c/zarr.json", at.to_string()).await.expect_status(201);
    put_data(&s, "c", "sel=5", "9").await.expect_status(204);
    put_data(&s, "c", "sel=7", "8").await.expect_status(204);
    let r = s.get("/api/v1/data/data/c?sel=4:8&format=json").await;
    assert_eq!(r.json(), json!([0, 9, 0, 8]));
}

/// A shard nested in every inner chunk of a shard counts its own inner
/// chunks: toward `limits.max_inner_chunks_per_shard` (a shard of 256 inner
/// chunks, each a shard of 65,536 one-element chunks, was accepted and one
/// 256-element read decoded 2^24 chunks, 36 s of both cores) and toward
/// `limits.max_chunks_per_request`. Within both, nested shards read back.
#[tokio::test]
async fn nested_shards_count_their_inner_chunks() {
    let s = file_server("nested-shards").await;
    let nested = |outer_inner: u64, leaf: u64| {
        json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [outer_inner, outer_inner],
            "codecs": sharded(&[leaf, leaf]),
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]
        }}])
    };
    // 256 inner chunks of 256 x 256, each a shard of 65,536 chunks: 2^24.
    let over = v3(&[4096, 4096], &[4096, 4096], "uint8", json!(0), nested(256, 1));
    let check = |r: &common::Reply| {
        r.expect_error(422, "unsupported_array");
        let m = r.error_message();
        assert!(m.contains("nested sharding") && m.contains("16777216 in all"), "{m}");
    };
    check(&s.send(json_req(&s, "PUT", "/api/v1/nodes/data/a", &over)).await);
    write_behind(&s, "b/zarr.json", &over);
    check(&s.get("/api/v1/data/data/b?sel=0:2,0:2&format=json").await);
    // One inner chunk per shard, a shard of 2^16 in it: at the per-shard
    // limit, but a read of 32 shards is 2^21 decodes, past the per-request one.
    let at = v3(&[8192, 256], &[256, 256], "uint8", json!(0), nested(256, 1));
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/c", &at)).await.expect_status(201);
    let r = s.get("/api/v1/data/data/c?sel=::256,0&format=json").await;
    r.expect_error(413, "selection_too_large");
    assert!(r.error_message().contains("2097152 inner chunks of nested shards"), "{r}");
    // Small nested shards read and write.
    let small = v3(&[8, 8], &[8, 8], "uint8", json!(0), nested(4, 2));
    s.send(json_req(&s, "PUT", "/api/v1/nodes/data/d", &small)).await.expect_status(201);
    put_data(&s, "d", "sel=1:3,5:7", "[[1,2],[3,4]]").await.expect_status(204);
    let r = s.get("/api/v1/data/data/d?sel=1:3,4:8&format=json").await;
    assert_eq!(r.json(), json!([[0, 1, 2, 0], [0, 3, 4, 0]]));
}

/// Finding 8, the budget: with a parse budget smaller than one document,
/// concurrent creates and attribute updates (each holding the budget while
/// it parses, checks and writes its document, and parsing again inside)
/// run one at a time and all finish: no request waits on itself.
#[tokio::test]
async fn a_tiny_parse_budget_serialises_document_work_without_deadlock() {
    let mut config = common::test_config();
    config.limits.document_parse_budget_bytes = 1024;
    let s = TestServer::start_with(Backend::Memory, "finding8-budget", config).await.expect("memory backend");
    let pad = "p".repeat(20_000);
    let work = (0..12).map(|i| {
        let s = &s;
        let pad = &pad;
        async move {
            let doc = json!({"zarr_format": 3, "node_type": "group", "attributes": {"pad": pad, "i": i}});
            s.send(json_req(s, "PUT", &format!("/api/v1/nodes/data/g{i}"), &doc)).await.expect_status(201);
            let patch = json!({"more": pad});
            s.send(json_req(s, "PATCH", &format!("/api/v1/attributes/data/g{i}"), &patch)).await.expect_status(200);
            s.get(&format!("/api/v1/nodes/data/g{i}")).await.expect_status(200);
        }
    });
    tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(work)).await.expect("no deadlock");
}

/// Consolidation holds at most what one stored document may be: a
/// hierarchy whose documents pass twice `limits.max_body_bytes` is refused
/// while it is walked (413 naming the limit), with nothing written, and a
/// smaller one still consolidates.
#[tokio::test]
async fn consolidation_holds_at_most_one_document() {
    let mut config = common::test_config();
    config.limits.max_body_bytes = 4096;
    let s = TestServer::start_with(Backend::File, "consolidate_bound", config).await.expect("file backend");
    let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
    s.put("/zarr/data/g/zarr.json", group.to_string()).await.expect_status(201);
    // Each array's document is ~400 bytes: 30 of them pass 8192.
    let doc = v3(&[4], &[4], "uint8", json!(0), bytes_codec());
    for i in 0..30 {
        s.put(&format!("/zarr/data/g/a{i:02}/zarr.json"), doc.to_string()).await.expect_status(201);
    }
    let before = std::fs::read(s.root.as_ref().unwrap().join("g/zarr.json")).unwrap();
    let r = s.send(s.request("POST", "/api/v1/consolidate/data/g")).await;
    r.expect_error(413, "hierarchy_too_large");
    assert!(r.error_message().contains("twice limits.max_body_bytes"), "{r}");
    assert_eq!(std::fs::read(s.root.as_ref().unwrap().join("g/zarr.json")).unwrap(), before, "nothing written");
    // Ten fit.
    for i in 10..30 {
        s.delete(&format!("/api/v1/nodes/data/g/a{i:02}")).await.expect_status(204);
    }
    let r = s.send(s.request("POST", "/api/v1/consolidate/data/g")).await;
    r.expect_status(200);
    assert_eq!(r.json()["nodes"], 10, "{r}");
}
