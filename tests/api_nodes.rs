//! The REST API's node endpoints on memory, file and S3 (moto, when the
//! harness provides it) mounts: mounts,
//! describing arrays and groups (v2 and v3) and plain directories (paged,
//! chunk folders excluded, read access), creating them (Zarr documents
//! and TensorStore specs), attributes, resize, delete, consolidate, the
//! metadata cache, and every error status.

mod common;

use common::{Backend, Reply, TestServer};
use serde_json::{json, Value};

async fn send_json(s: &TestServer, method: &str, path: &str, body: &Value) -> Reply {
    s.send(s.request(method, path).header("content-type", "application/json").body(body.to_string())).await
}

const V3_ARRAY: &str = r#"{"zarr_format":3,"node_type":"array","shape":[10,20],"data_type":"float32",
 "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[5,5]}},
 "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
 "fill_value":"NaN","codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
 "attributes":{"units":"K"},"dimension_names":["y","x"]}"#;

async fn describes_v3_and_v2_nodes(s: TestServer) {
    s.put("/zarr/data/zarr.json", r#"{"zarr_format":3,"node_type":"group","attributes":{"title":"root"}}"#)
        .await
        .expect_status(201);
    s.put("/zarr/data/g/a/zarr.json", V3_ARRAY).await.expect_status(201);
    s.put("/zarr/data/v2/.zgroup", r#"{"zarr_format":2}"#).await.expect_status(201);
    s.put(
        "/zarr/data/v2/b/.zarray",
        r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<i4","compressor":null,"fill_value":0,"order":"C","filters":null}"#,
    )
    .await
    .expect_status(201);
    s.put("/zarr/data/v2/b/.zattrs", r#"{"a":1}"#).await.expect_status(201);

    let root = s.get("/api/v1/nodes/data").await;
    root.expect_status(200);
    let j = root.json();
    assert_eq!(j["node_type"], "group");
    assert_eq!(j["zarr_format"], 3);
    assert_eq!(j["path"], "");
    assert_eq!(j["attributes"]["title"], "root");

    let a = s.get("/api/v1/nodes/data/g/a").await;
    a.expect_status(200);
    let j = a.json();
    assert_eq!(j["node_type"], "array");
    assert_eq!(j["path"], "g/a");
    assert_eq!(j["shape"], serde_json::json!([10, 20]));
    assert_eq!(j["chunk_shape"], serde_json::json!([5, 5]));
    assert_eq!(j["attributes"]["units"], "K");
    assert_eq!(j["metadata"]["fill_value"], "NaN");

    let b = s.get("/api/v1/nodes/data/v2/b/").await;
    b.expect_status(200);
    let j = b.json();
    assert_eq!((j["zarr_format"].as_u64(), j["path"].as_str()), (Some(2), Some("v2/b")));
    assert_eq!(j["attributes"]["a"], 1);
    let g = s.get("/api/v1/nodes/data/v2").await.json();
    assert_eq!(g["node_type"], "group");
    // A data type TensorStore does not have: no schema (null), the rest described.
    let strings = r#"{"zarr_format":3,"node_type":"array","shape":[3],"data_type":"string",
     "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[3]}},
     "chunk_key_encoding":{"name":"default"},"fill_value":"","codecs":[{"name":"vlen-utf8","configuration":{}}]}"#;
    s.put("/zarr/data/s/zarr.json", strings).await.expect_status(201);
    let j = s.get("/api/v1/nodes/data/s").await.json();
    assert_eq!((j["data_type"].as_str(), j["tensorstore_schema"].is_null()), (Some("string"), true));
    assert!(j.as_object().unwrap().contains_key("tensorstore_schema"));
    // Percent-encoded slashes (what a generated client sends) name the same node.
    let enc = s.get("/api/v1/nodes/data/v2%2Fb").await;
    enc.expect_status(200);
    assert_eq!(enc.json()["path"], "v2/b");
}

async fn node_errors(s: TestServer) {
    s.get("/api/v1/nodes/data/nothing/here").await.expect_error(404, "node_not_found");
    assert!(s.get("/api/v1/nodes/data/nothing/here").await.error_message().contains("nothing/here"));
    s.get("/api/v1/nodes/nosuch/x").await.expect_error(404, "unknown_mount");
    s.get("/api/v1/nodes/data/a%2F..%2Fb").await.expect_error(400, "bad_request");
    s.put("/zarr/data/bad/.zarray", r#"{"zarr_format":2}"#).await.expect_status(422);
    // Metadata stored behind zarrd's back that does not parse: 422 naming the key.
    if let Some(root) = &s.root {
        std::fs::create_dir_all(root.join("broken")).unwrap();
        std::fs::write(root.join("broken/zarr.json"), br#"{"zarr_format":3,"node_type":"array"}"#).unwrap();
        let r = s.get("/api/v1/nodes/data/broken").await;
        r.expect_error(422, "invalid_metadata");
        assert!(r.error_message().contains("broken/zarr.json"), "{}", r.error_message());
    }
}

async fn creates_from_documents_and_specs(s: TestServer) {
    // A v3 zarr.json: parents are created as groups, as zarr-python does.
    let doc: Value = serde_json::from_str(V3_ARRAY).unwrap();
    let r = send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr", &doc).await;
    r.expect_status(201);
    assert_eq!(r.must_header("location"), "/api/v1/nodes/data/a/b/arr");
    let j = r.json();
    assert_eq!((j["node_type"].as_str(), j["data_type"].as_str()), (Some("array"), Some("float32")));
    assert_eq!(j["dimension_names"], json!(["y", "x"]));
    assert_eq!(j["tensorstore_schema"]["domain"]["labels"], json!(["y", "x"]));
    assert_eq!(j["tensorstore_schema"]["fill_value"], "NaN");
    for parent in ["/api/v1/nodes/data", "/api/v1/nodes/data/a", "/api/v1/nodes/data/a/b"] {
        let g = s.get(parent).await;
        g.expect_status(200);
        assert_eq!(g.json()["metadata"], json!({"attributes": {}, "zarr_format": 3, "node_type": "group"}));
    }
    // Exists: 409, unless open (200, unchanged) or delete_existing (201, replaced).
    send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr", &doc).await.expect_error(409, "already_exists");
    let r = send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr?open=true", &doc).await;
    r.expect_status(200);
    assert_eq!(r.json()["shape"], json!([10, 20]));
    // Opening checks the shape, data type and format, as TensorStore does.
    let other = json!({"driver": "zarr3", "dtype": "float32", "shape": [10, 21], "open": true});
    let r = send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr", &other).await;
    r.expect_error(409, "conflict");
    assert!(r.error_message().contains("shape"), "{}", r.error_message());
    let same = json!({"driver": "zarr3", "dtype": "float32", "shape": [10, 20], "open": true});
    send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr", &same).await.expect_status(200);
    let v2 = json!({"driver": "zarr", "dtype": "float32", "shape": [10, 20], "open": true});
    let r = send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr", &v2).await;
    assert!(r.error_message().contains("zarr_format"), "{}", r.error_message());
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [7], "delete_existing": true});
    let r = send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr", &spec).await;
    r.expect_status(201);
    assert_eq!(r.json()["shape"], json!([7]));
    // create=false on a missing node: 404; a group where an array is opened: 409.
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [7]});
    send_json(&s, "PUT", "/api/v1/nodes/data/nope?create=false&open=true", &spec)
        .await
        .expect_error(404, "node_not_found");
    let r = send_json(&s, "PUT", "/api/v1/nodes/data/a?open=true", &spec).await;
    r.expect_error(409, "conflict");
    // Below an array: 409 naming it.
    let r = send_json(&s, "PUT", "/api/v1/nodes/data/a/b/arr/inner", &spec).await;
    r.expect_error(409, "conflict");
    assert!(r.error_message().contains("a/b/arr"), "{}", r.error_message());

    // A v2 .zarray with attributes: .zarray + .zattrs, parents as .zgroup + .zattrs.
    let zarray = json!({"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<i2", "compressor": null,
        "fill_value": 0, "order": "F", "filters": null, "attributes": {"a": 1}});
    send_json(&s, "PUT", "/api/v1/nodes/data/v2g/x", &zarray).await.expect_status(201);
    assert_eq!(s.get("/zarr/data/v2g/x/.zattrs").await.json(), json!({"a": 1}));
    assert_eq!(s.get("/zarr/data/v2g/.zgroup").await.json(), json!({"zarr_format": 2}));
    assert_eq!(s.get("/zarr/data/v2g/.zattrs").await.json(), json!({}));
    let j = s.get("/api/v1/nodes/data/v2g/x").await.json();
    assert_eq!((j["order"].as_str(), j["zarr_format"].as_u64()), (Some("F"), Some(2)));
    assert_eq!(j["tensorstore_schema"]["chunk_layout"]["inner_order"], json!([1, 0]));
    // A v2 group.
    let r =
        send_json(&s, "PUT", "/api/v1/nodes/data/v2g/sub", &json!({"zarr_format": 2, "attributes": {"t": "x"}})).await;
    r.expect_status(201);
    assert_eq!(r.json()["attributes"], json!({"t": "x"}));

    // A TensorStore spec with separate read and write chunks: sharded.
    let spec = json!({"driver": "zarr3", "schema": {"dtype": "uint16", "domain": {"shape": [1000, 2000, 3000]},
        "chunk_layout": {"read_chunk": {"shape": [64, 64, 64]}, "write_chunk": {"shape": [512, 512, 512]}}}});
    let j = send_json(&s, "PUT", "/api/v1/nodes/data/ts/sharded", &spec).await.json();
    assert_eq!(j["shard_shape"], json!([512, 512, 512]));
    assert_eq!(j["inner_chunk_shape"], json!([64, 64, 64]));
    assert_eq!(j["codecs"][0]["name"], "sharding_indexed");
    assert_eq!(j["tensorstore_schema"]["chunk_layout"]["read_chunk"]["shape"], json!([64, 64, 64]));
    // Unconstrained: TensorStore's default chunk (about 2^20 elements).
    let j = send_json(
        &s,
        "PUT",
        "/api/v1/nodes/data/ts/plain",
        &json!({"driver": "zarr", "dtype": "uint16", "shape": [1000, 2000, 3000]}),
    )
    .await
    .json();
    assert_eq!(j["chunk_shape"], json!([101, 101, 101]));
    assert_eq!(j["codecs"][0]["id"], "blosc");
}

async fn create_errors(s: TestServer) {
    let put = |path: &'static str, body: Value| {
        let s = &s;
        async move { send_json(s, "PUT", path, &body).await }
    };
    // Not JSON, not an object, no recognisable form.
    let r =
        s.send(s.request("PUT", "/api/v1/nodes/data/x").header("content-type", "application/json").body("{nope")).await;
    r.expect_error(400, "invalid_body");
    put("/api/v1/nodes/data/x", json!([1])).await.expect_error(400, "bad_request");
    put("/api/v1/nodes/data/x", json!({"shape": [1]})).await.expect_error(400, "bad_request");
    // Spec errors name the member.
    let r = put("/api/v1/nodes/data/x", json!({"driver": "zarr3", "dtype": "uint8"})).await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("schema.domain"), "{}", r.error_message());
    let r = put(
        "/api/v1/nodes/data/x",
        json!({"driver": "zarr3", "dtype": "uint8", "shape": [100],
               "chunk_layout": {"read_chunk": {"shape": [7]}, "write_chunk": {"shape": [64]}}}),
    )
    .await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("write_chunk.shape[0]"), "{}", r.error_message());
    let r = put("/api/v1/nodes/data/x", json!({"driver": "zarr3", "dtype": "int8", "shape": [3], "fill_value": 1000}))
        .await;
    assert!(r.error_message().contains("fill_value"), "{}", r.error_message());
    // Invalid documents: 422 naming the field.
    let r = put("/api/v1/nodes/data/x", json!({"zarr_format": 3, "node_type": "array", "shape": [2]})).await;
    r.expect_error(422, "invalid_metadata");
    assert!(r.error_message().contains("data_type"), "{}", r.error_message());
    // Bad flags, bad query, read-only mount, unknown mount, too large.
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [3]});
    put("/api/v1/nodes/data/x?create=false", spec.clone()).await.expect_error(400, "bad_request");
    put("/api/v1/nodes/data/x?open=maybe", spec.clone()).await.expect_error(400, "invalid_query");
    let r = put("/api/v1/nodes/ro/x", spec.clone()).await;
    r.expect_error(405, "read_only");
    put("/api/v1/nodes/nosuch/x", spec.clone()).await.expect_error(404, "unknown_mount");
    let big = json!({"zarr_format": 3, "node_type": "group", "attributes": {"pad": "x".repeat(100_000)}});
    put("/api/v1/nodes/data/x", big).await.expect_error(413, "payload_too_large");
    // Nothing was written by any of these: the mount's root is an empty directory.
    s.get("/api/v1/nodes/data/x").await.expect_error(404, "node_not_found");
    let root = s.get("/api/v1/nodes/data").await.json();
    assert_eq!(
        (&root["node_type"], &root["children"], &root["children_total"]),
        (&json!("directory"), &json!([]), &json!(0))
    );
    // An array whose last chunk's key could never be stored (a deep path, ten dimensions of
    // 10^9 chunks): 422 naming the length, by the document PUT and the store PUT alike (round
    // 11, a black-box attack: created, then every read and write of those chunks was 400).
    let deep: String = ["a".repeat(230), "b".repeat(230), "c".repeat(230), "d".repeat(230)].join("/");
    let (shape, chunks) = ([1_000_000_000u64; 10], [1u64; 10]);
    let wide = json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]});
    let r = send_json(&s, "PUT", &format!("/api/v1/nodes/data/{deep}"), &wide).await;
    r.expect_error(422, "unsupported_array");
    assert!(r.error_message().contains("chunk keys would be up to 1025 bytes"), "{}", r.error_message());
    let r = s.put(&format!("/zarr/data/{deep}/zarr.json"), wide.to_string().into_bytes()).await;
    r.expect_error(422, "unsupported_array");
    s.get(&format!("/zarr/data/{deep}/zarr.json")).await.expect_status(404);
    // A refused document writes nothing at all: not the missing parent groups (they were written
    // before the document was refused, round 11) ...
    s.get(&format!("/api/v1/nodes/data/{}", "a".repeat(230))).await.expect_error(404, "node_not_found");
    let huge = json!({"zarr_format": 3, "node_type": "array", "shape": [1u64 << 32], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1u64 << 31]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]});
    let r = put("/api/v1/nodes/data/up/to/arr", huge.clone()).await;
    r.expect_error(422, "unsupported_array");
    assert!(r.error_message().contains("max_decoded_chunk_bytes"), "{}", r.error_message());
    s.get("/api/v1/nodes/data/up").await.expect_error(404, "node_not_found");
    // ... nor, with `delete_existing`, the deletion of the node it was to replace (it was
    // deleted, then the new document refused).
    let keep = json!({"driver": "zarr3", "dtype": "uint8", "shape": [3]});
    put("/api/v1/nodes/data/keep", keep).await.expect_status(201);
    s.put_with("/api/v1/data/data/keep?format=json", "[1, 2, 3]", &[("content-type", "application/json")])
        .await
        .expect_status(204);
    put("/api/v1/nodes/data/keep?delete_existing=true", huge).await.expect_error(422, "unsupported_array");
    let r = s.get("/api/v1/data/data/keep?format=json").await;
    r.expect_status(200);
    assert_eq!(r.json(), json!([1, 2, 3]), "{r}");
}

async fn describes_stats_and_children(s: TestServer) {
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [4, 4],
        "metadata": {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}}}});
    send_json(&s, "PUT", "/api/v1/nodes/data/g/a", &spec).await.expect_status(201);
    send_json(&s, "PUT", "/api/v1/nodes/data/g/sub/b", &spec).await.expect_status(201);
    // Two chunks of 4 bytes each, written as a client would.
    s.put("/zarr/data/g/a/c/0/0", vec![1u8; 4]).await.expect_status(201);
    s.put("/zarr/data/g/a/c/1/1", vec![2u8; 4]).await.expect_status(201);
    let j = s.get("/api/v1/nodes/data/g/a?stats=true").await.json();
    assert_eq!(j["stats"]["stored_chunks"], 2);
    assert_eq!(j["stats"]["stored_objects"], 3);
    let meta_len = s.get("/zarr/data/g/a/zarr.json").await.body.len() as u64;
    assert_eq!(j["stats"]["stored_bytes"], 8 + meta_len);
    assert!(s.get("/api/v1/nodes/data/g/a").await.json().get("stats").is_none());

    let j = s.get("/api/v1/nodes/data/g").await.json();
    let paths: Vec<&str> = j["children"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["g/a", "g/sub"]);
    assert_eq!(j["children"][0]["shape"], json!([4, 4]));
    assert_eq!(j["consolidated"], false);
    let j = s.get("/api/v1/nodes/data?depth=3").await.json();
    let got: Vec<(String, u64)> = j["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_string(), c["depth"].as_u64().unwrap()))
        .collect();
    let want = [("g", 1), ("g/a", 2), ("g/sub", 2), ("g/sub/b", 3)].map(|(p, d)| (p.to_string(), d));
    assert_eq!(got, want);
    assert_eq!(s.get("/api/v1/nodes/data?depth=0").await.json()["children"], json!([]));

    // A child whose documents do not open is listed as unreadable, with
    // the reason a describe of it gives, and its siblings still are.
    let odd = json!({"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0,
        "codecs": [{"name": "numcodecs.zfpy", "configuration": {"mode": 4, "tolerance": -1}}]});
    s.put("/zarr/data/g/odd/zarr.json", odd.to_string()).await.expect_status(201);
    let why = s.get("/api/v1/nodes/data/g/odd").await.expect_error(422, "unsupported_array").error_message();
    let j = s.get("/api/v1/nodes/data?depth=3").await.json();
    let listed: Vec<(&str, &str)> = j["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap(), c["node_type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [("g", "group"), ("g/a", "array"), ("g/odd", "unreadable"), ("g/sub", "group"), ("g/sub/b", "array")]
    );
    let odd = &j["children"][2];
    assert_eq!((odd["error"].as_str(), odd.get("zarr_format")), (Some(why.as_str()), None), "{odd}");
    assert!(why.contains("zfpy"), "{why}");
    s.get("/api/v1/nodes/data?depth=65").await.expect_error(400, "invalid_query");
    s.get("/api/v1/nodes/data?stats=perhaps").await.expect_error(400, "invalid_query");
}

async fn attributes_replace_and_merge(s: TestServer) {
    send_json(&s, "PUT", "/api/v1/nodes/data/arr", &serde_json::from_str(V3_ARRAY).unwrap()).await.expect_status(201);
    assert_eq!(s.get("/api/v1/attributes/data/arr").await.json(), json!({"units": "K"}));
    let r = send_json(&s, "PATCH", "/api/v1/attributes/data/arr", &json!({"a": [1, 2], "units": null})).await;
    r.expect_status(200);
    assert_eq!(r.json(), json!({"a": [1, 2]}));
    // Stored: only `attributes` changed; the rest of zarr.json as it was.
    let stored = s.get("/zarr/data/arr/zarr.json").await.json();
    assert_eq!(stored["attributes"], json!({"a": [1, 2]}));
    assert_eq!(stored["dimension_names"], json!(["y", "x"]));
    let r = send_json(&s, "PUT", "/api/v1/attributes/data/arr", &json!({"b": true})).await;
    assert_eq!(r.json(), json!({"b": true}));
    assert_eq!(s.get("/api/v1/nodes/data/arr").await.json()["attributes"], json!({"b": true}));
    // v2: .zattrs.
    send_json(&s, "PUT", "/api/v1/nodes/data/v2", &json!({"zarr_format": 2})).await.expect_status(201);
    send_json(&s, "PATCH", "/api/v1/attributes/data/v2", &json!({"c": 3})).await.expect_status(200);
    assert_eq!(s.get("/zarr/data/v2/.zattrs").await.json(), json!({"c": 3}));
    // Errors.
    send_json(&s, "PUT", "/api/v1/attributes/data/arr", &json!([1])).await.expect_error(400, "invalid_body");
    send_json(&s, "PATCH", "/api/v1/attributes/data/none", &json!({})).await.expect_error(404, "node_not_found");
    s.get("/api/v1/attributes/data/none").await.expect_error(404, "node_not_found");
    send_json(&s, "PUT", "/api/v1/attributes/ro/arr", &json!({})).await.expect_error(405, "read_only");
    // The mount's root group (made as the parent of `arr`): the root route, no path. OME-Zarr
    // keeps its multiscales there.
    assert_eq!(s.get("/api/v1/attributes/data").await.json(), json!({}));
    let ome = json!({"ome": {"version": "0.5", "multiscales": [{"datasets": [{"path": "arr"}]}]}});
    send_json(&s, "PATCH", "/api/v1/attributes/data", &ome).await.expect_status(200);
    assert_eq!(s.get("/zarr/data/zarr.json").await.json()["attributes"], ome);
    let r = send_json(&s, "PUT", "/api/v1/attributes/data", &json!({"x": 1})).await;
    assert_eq!(r.json(), json!({"x": 1}));
    send_json(&s, "PUT", "/api/v1/attributes/ro", &json!({})).await.expect_error(405, "read_only");
}

async fn resize_grows_and_shrinks(s: TestServer) {
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [4, 4],
        "metadata": {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}}}});
    send_json(&s, "PUT", "/api/v1/nodes/data/r", &spec).await.expect_status(201);
    for key in ["c/0/0", "c/0/1", "c/1/0", "c/1/1"] {
        s.put(&format!("/zarr/data/r/{key}"), vec![7u8; 4]).await.expect_status(201);
    }
    // Shrink to 3 x 2: chunk column 1 is wholly outside; row 1 straddles and stays.
    let r = send_json(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [3, 2]})).await;
    r.expect_status(200);
    assert_eq!(r.json(), json!({"shape": [3, 2], "deleted_chunks": 2}));
    s.get("/zarr/data/r/c/0/1").await.expect_status(404);
    s.get("/zarr/data/r/c/1/1").await.expect_status(404);
    s.get("/zarr/data/r/c/1/0").await.expect_status(200);
    assert_eq!(s.get("/api/v1/nodes/data/r").await.json()["shape"], json!([3, 2]));
    // Grow.
    let r = send_json(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [10, 10], "expand_only": true})).await;
    assert_eq!(r.json(), json!({"shape": [10, 10], "deleted_chunks": 0}));
    assert_eq!(s.get("/zarr/data/r/zarr.json").await.json()["shape"], json!([10, 10]));
    // Guards, rank, unknown members, groups, missing, read-only.
    let r = send_json(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [9, 10], "expand_only": true})).await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("shape[0]"), "{}", r.error_message());
    let r = send_json(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [10, 11], "shrink_only": true})).await;
    assert!(r.error_message().contains("shape[1]"), "{}", r.error_message());
    let r = send_json(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [10]})).await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("2 dimensions"), "{}", r.error_message());
    send_json(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [1, 1], "force": true}))
        .await
        .expect_error(400, "invalid_body");
    send_json(&s, "POST", "/api/v1/resize/data/r", &json!({"shape": [-1, 1]})).await.expect_error(400, "invalid_body");
    send_json(&s, "PUT", "/api/v1/nodes/data/grp", &json!({"zarr_format": 3, "node_type": "group"}))
        .await
        .expect_status(201);
    send_json(&s, "POST", "/api/v1/resize/data/grp", &json!({"shape": [1]})).await.expect_error(400, "not_an_array");
    send_json(&s, "POST", "/api/v1/resize/data/none", &json!({"shape": [1]})).await.expect_error(404, "node_not_found");
    send_json(&s, "POST", "/api/v1/resize/ro/r", &json!({"shape": [1, 1]})).await.expect_error(405, "read_only");
    // An array at the mount's root (the root route: no path).
    send_json(&s, "POST", "/api/v1/resize/data", &json!({"shape": [1]})).await.expect_error(400, "not_an_array");
    s.delete("/api/v1/nodes/data?recursive=true").await.expect_status(204);
    send_json(&s, "PUT", "/api/v1/nodes/data", &spec).await.expect_status(201);
    let r = send_json(&s, "POST", "/api/v1/resize/data", &json!({"shape": [6, 4]})).await;
    assert_eq!(r.json(), json!({"shape": [6, 4], "deleted_chunks": 0}));
    assert_eq!(s.get("/zarr/data/zarr.json").await.json()["shape"], json!([6, 4]));
}

/// A recursive delete and a shrinking resize delete their chunks together
/// (`Storage::delete_many`: one request per batch of up to 1,000 keys on S3, where one
/// per key cost 24,000 objects 23,810 requests), and what they delete
/// leaves the caches: a chunk read before the delete is not read again
/// from the cache after it.
async fn deletes_objects_together(s: TestServer) {
    let ops = |text: &str, op: &str| -> u64 {
        let series = format!(r#"zarrd_storage_operation_duration_seconds_count{{mount="data",op="{op}"}} "#);
        text.lines().find_map(|l| l.strip_prefix(&series)?.parse().ok()).unwrap_or(0)
    };
    let spec = json!({"driver": "zarr", "dtype": "uint8", "shape": [60],
                      "metadata": {"chunks": [1], "compressor": null, "fill_value": 7}});
    send_json(&s, "PUT", "/api/v1/nodes/data/g/a", &spec).await.expect_status(201);
    let body: Vec<u8> = (0..60u8).collect();
    let put = s.request("PUT", "/api/v1/data/data/g/a?sel=:").header("content-type", "application/octet-stream");
    s.send(put.body(body.clone())).await.expect_status(204);
    assert_eq!(s.get("/api/v1/data/data/g/a?sel=:&format=raw").await.body, body, "read, and cached");
    // Shrinking to 20 deletes 40 chunks together: batches of at most 16 of the mount's
    // 256 lock stripes, so at most 3 for 40 keys.
    let before = s.get("/metrics").await.text();
    let r = send_json(&s, "POST", "/api/v1/resize/data/g/a", &json!({"shape": [20]})).await;
    assert_eq!(r.json()["deleted_chunks"], 40);
    let after = s.get("/metrics").await.text();
    let batches = ops(&after, "delete_many") - ops(&before, "delete_many");
    assert!((1..=3).contains(&batches), "{batches} batches: {after}");
    assert_eq!(ops(&after, "delete"), ops(&before, "delete"), "no delete one key at a time");
    s.get("/zarr/data/g/a/39").await.expect_status(404);
    // Grown back, the deleted chunks read as the fill value, not the cached data.
    send_json(&s, "POST", "/api/v1/resize/data/g/a", &json!({"shape": [60]})).await.expect_status(200);
    let r = s.get("/api/v1/data/data/g/a?sel=:&format=raw").await;
    assert_eq!(&r.body[..20], &body[..20]);
    assert!(r.body[20..].iter().all(|&b| b == 7), "{:?}", &r.body[20..]);
    // A recursive delete: the 20 chunks together, then the documents.
    let before = s.get("/metrics").await.text();
    s.delete("/api/v1/nodes/data/g?recursive=true").await.expect_status(204);
    let after = s.get("/metrics").await.text();
    assert!(ops(&after, "delete_many") > ops(&before, "delete_many"));
    assert!(ops(&after, "delete") - ops(&before, "delete") <= 8, "the documents one at a time: {after}");
    s.get("/zarr/data/g/a/0").await.expect_status(404);
    s.get("/api/v1/nodes/data/g").await.expect_error(404, "node_not_found");
    send_json(&s, "PUT", "/api/v1/nodes/data/g/a", &spec).await.expect_status(201);
    let r = s.get("/api/v1/data/data/g/a?sel=:&format=raw").await;
    assert!(r.body.iter().all(|&b| b == 7), "created anew, fill value only: {:?}", r.body);
}

async fn deletes_nodes(s: TestServer) {
    let spec =
        json!({"driver": "zarr", "dtype": "uint8", "shape": [4], "metadata": {"chunks": [2], "compressor": null}});
    send_json(&s, "PUT", "/api/v1/nodes/data/g/a", &spec).await.expect_status(201);
    s.put("/zarr/data/g/a/0", vec![1u8; 2]).await.expect_status(201);
    send_json(&s, "PUT", "/api/v1/nodes/data/g/empty", &json!({"zarr_format": 2})).await.expect_status(201);
    // A non-empty group needs recursive=true.
    s.delete("/api/v1/nodes/data/g").await.expect_error(409, "not_empty");
    // An empty group and an array (with its chunks) go directly.
    s.delete("/api/v1/nodes/data/g/empty").await.expect_status(204);
    s.get("/zarr/data/g/empty/.zgroup").await.expect_status(404);
    s.delete("/api/v1/nodes/data/g/a").await.expect_status(204);
    s.get("/zarr/data/g/a/0").await.expect_status(404);
    s.get("/api/v1/nodes/data/g/a").await.expect_error(404, "node_not_found");
    send_json(&s, "PUT", "/api/v1/nodes/data/g/b", &spec).await.expect_status(201);
    s.delete("/api/v1/nodes/data/g?recursive=true").await.expect_status(204);
    s.get("/api/v1/nodes/data/g").await.expect_error(404, "node_not_found");
    s.get("/zarr/data/g/b/.zarray").await.expect_status(404);
    s.delete("/api/v1/nodes/data/g").await.expect_error(404, "node_not_found");
    s.delete("/api/v1/nodes/ro/g").await.expect_error(405, "read_only");
    // The root routes: the root group exists (made as a parent), and goes with everything.
    let group = json!({"zarr_format": 2});
    send_json(&s, "PUT", "/api/v1/nodes/data", &group).await.expect_error(409, "already_exists");
    let r = send_json(&s, "PUT", "/api/v1/nodes/data?open=true", &group).await;
    r.expect_status(200);
    assert_eq!(r.json()["path"], "");
    send_json(&s, "PUT", "/api/v1/nodes/data/h/c", &spec).await.expect_status(201);
    s.delete("/api/v1/nodes/data").await.expect_error(409, "not_empty");
    s.delete("/api/v1/nodes/data?recursive=true").await.expect_status(204);
    let root = s.get("/api/v1/nodes/data").await.json();
    assert_eq!((&root["node_type"], &root["children_total"]), (&json!("directory"), &json!(0)), "{root}");
    s.get("/zarr/data/h/c/.zarray").await.expect_status(404);
    let r = send_json(&s, "PUT", "/api/v1/nodes/data", &group).await;
    r.expect_status(201);
    assert_eq!(r.must_header("location"), "/api/v1/nodes/data");
    s.delete("/api/v1/nodes/data/g?recursive=2").await.expect_error(400, "invalid_query");
}

async fn consolidates_v3_and_v2(s: TestServer) {
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [4]});
    send_json(&s, "PUT", "/api/v1/nodes/data/v3/a", &spec).await.expect_status(201);
    send_json(&s, "PUT", "/api/v1/nodes/data/v3/g/b", &spec).await.expect_status(201);
    let r = s.send(s.request("POST", "/api/v1/consolidate/data/v3")).await;
    r.expect_status(200);
    assert_eq!(r.json(), json!({"key": "v3/zarr.json", "nodes": 3}));
    let doc = s.get("/zarr/data/v3/zarr.json").await.json();
    let cm = &doc["consolidated_metadata"];
    assert_eq!((cm["kind"].as_str(), cm["must_understand"].as_bool()), (Some("inline"), Some(false)));
    let keys: Vec<&String> = cm["metadata"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["a", "g", "g/b"]);
    assert_eq!(cm["metadata"]["g"]["consolidated_metadata"]["metadata"], json!({}));
    // Children now come from it.
    let j = s.get("/api/v1/nodes/data/v3?depth=2").await.json();
    assert_eq!(j["consolidated"], true);
    assert_eq!(j["children"].as_array().unwrap().len(), 3);
    // Deleting a node drops it from the consolidated metadata.
    s.delete("/api/v1/nodes/data/v3/g?recursive=true").await.expect_status(204);
    let doc = s.get("/zarr/data/v3/zarr.json").await.json();
    assert_eq!(doc["consolidated_metadata"]["metadata"].as_object().unwrap().keys().collect::<Vec<_>>(), ["a"]);

    let spec2 = json!({"driver": "zarr", "dtype": "uint8", "shape": [4], "metadata": {"attributes": {"q": 1}}});
    send_json(&s, "PUT", "/api/v1/nodes/data/v2/x", &spec2).await.expect_status(201);
    let r = s.send(s.request("POST", "/api/v1/consolidate/data/v2")).await;
    assert_eq!(r.json(), json!({"key": "v2/.zmetadata", "nodes": 1}));
    let z = s.get("/zarr/data/v2/.zmetadata").await.json();
    assert_eq!(z["zarr_consolidated_format"], 1);
    assert_eq!(z["metadata"]["x/.zattrs"], json!({"q": 1}));
    assert_eq!(z["metadata"][".zgroup"], json!({"zarr_format": 2}));
    assert_eq!(z["metadata"]["x/.zarray"]["shape"], json!([4]));
    // The root (root variant of the route), and errors.
    let r = s.send(s.request("POST", "/api/v1/consolidate/data")).await;
    r.expect_status(200);
    // The root is a v3 group: its v3 descendants (v3, v3/a) are recorded; v2 nodes are not
    // (a v3 reader would not open them either).
    assert_eq!(r.json()["nodes"], 2);
    let keys: Vec<String> = s.get("/zarr/data/zarr.json").await.json()["consolidated_metadata"]["metadata"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, ["v3", "v3/a"]);
    s.send(s.request("POST", "/api/v1/consolidate/data/v2/x")).await.expect_error(400, "bad_request");
    s.send(s.request("POST", "/api/v1/consolidate/data/none")).await.expect_error(404, "node_not_found");
    s.send(s.request("POST", "/api/v1/consolidate/ro")).await.expect_error(405, "read_only");
}

async fn metadata_cache_follows_raw_writes(s: TestServer) {
    send_json(&s, "PUT", "/api/v1/nodes/data/m", &json!({"driver": "zarr3", "dtype": "uint8", "shape": [4]}))
        .await
        .expect_status(201);
    assert_eq!(s.get("/api/v1/nodes/data/m").await.json()["shape"], json!([4]));
    // Overwritten through the store protocol: the next description sees it.
    let mut doc = s.get("/zarr/data/m/zarr.json").await.json();
    doc["shape"] = json!([9]);
    s.put("/zarr/data/m/zarr.json", doc.to_string()).await.expect_status(204);
    assert_eq!(s.get("/api/v1/nodes/data/m").await.json()["shape"], json!([9]));
    s.delete("/zarr/data/m/zarr.json").await.expect_status(204);
    s.get("/api/v1/nodes/data/m").await.expect_error(404, "node_not_found");
    // Changed behind zarrd's back (file mounts): revalidated by ETag on the next request.
    if let Some(root) = &s.root {
        send_json(&s, "PUT", "/api/v1/nodes/data/m", &json!({"driver": "zarr3", "dtype": "uint8", "shape": [4]}))
            .await
            .expect_status(201);
        assert_eq!(s.get("/api/v1/nodes/data/m").await.json()["shape"], json!([4]));
        let path = root.join("m/zarr.json");
        let mut doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        doc["shape"] = json!([5]);
        std::fs::write(&path, doc.to_string()).unwrap();
        assert_eq!(s.get("/api/v1/nodes/data/m").await.json()["shape"], json!([5]));
    }
}

async fn lists_mounts(s: TestServer) {
    let j = s.get("/api/v1/mounts").await.json();
    let names: Vec<_> = j["mounts"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["data", "ro"]);
    assert_eq!(j["mounts"][1]["read_only"], true);
}

/// A v3 `uint8` array's `zarr.json` with this shape, chunk shape and codecs.
fn v3_with_codecs(shape: &[u64], chunks: &[u64], codecs: &Value) -> String {
    json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs})
    .to_string()
}

/// The layout a description reports (element order, shard and inner chunk
/// shapes) comes from the array's description and codec list: a transpose
/// gives `C`, `F` or no order; a `sharding_indexed` codec anywhere in the
/// chain gives the shard shape, and its inner chunks their shape.
async fn describes_order_and_sharding(s: TestServer) {
    let bytes = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let transpose = |order: Value| json!({"name": "transpose", "configuration": {"order": order}});
    let sharding = |inner: Value| {
        json!({"name": "sharding_indexed", "configuration": {"chunk_shape": inner, "codecs": [bytes],
            "index_codecs": [bytes, {"name": "crc32c"}], "index_location": "end"}})
    };
    let cases = [
        ("c", vec![4, 6], vec![2, 3], json!([transpose(json!([0, 1])), bytes]), Some("C"), None, None),
        ("f", vec![4, 6], vec![2, 3], json!([transpose(json!([1, 0])), bytes]), Some("F"), None, None),
        ("p", vec![4, 6, 8], vec![2, 3, 4], json!([transpose(json!([1, 0, 2])), bytes]), None, None, None),
        ("plain", vec![4, 6], vec![2, 3], json!([bytes]), Some("C"), None, None),
        (
            "sharded",
            vec![8, 12],
            vec![4, 6],
            json!([sharding(json!([2, 3]))]),
            Some("C"),
            Some(json!([4, 6])),
            Some(json!([2, 3])),
        ),
    ];
    for (name, shape, chunks, codecs, order, shard, inner) in cases {
        s.put(&format!("/zarr/data/layout/{name}/zarr.json"), v3_with_codecs(&shape, &chunks, &codecs))
            .await
            .expect_status(201);
        let j = s.get(&format!("/api/v1/nodes/data/layout/{name}")).await.json();
        assert_eq!(j["order"].as_str(), order, "{name}: {j}");
        assert_eq!(j.get("shard_shape").cloned(), shard, "{name}");
        assert_eq!(j.get("inner_chunk_shape").cloned(), inner, "{name}");
        assert_eq!((&j["shape"], &j["chunk_shape"]), (&json!(shape), &json!(chunks)), "{name}");
        assert_eq!(j["codecs"], codecs, "{name}: the codecs as stored");
    }
    // Sharding after a transpose: still sharded (the engine reads such
    // shards whole, but the description names their layout).
    let codecs = json!([transpose(json!([1, 0])), sharding(json!([3, 2]))]);
    s.put("/zarr/data/layout/ts/zarr.json", v3_with_codecs(&[8, 12], &[4, 6], &codecs)).await.expect_status(201);
    let j = s.get("/api/v1/nodes/data/layout/ts").await.json();
    assert_eq!((&j["shard_shape"], j["order"].as_str()), (&json!([4, 6]), Some("F")), "{j}");
    assert_eq!(j["inner_chunk_shape"], j["tensorstore_schema"]["chunk_layout"]["read_chunk"]["shape"], "{j}");
    assert_eq!(j["inner_chunk_shape"], json!([3, 2]), "{j}");
}

/// A plain directory (the mount's root, a folder that is no Zarr node) is
/// described with one page of its children, each classified; a chunk
/// folder inside an array, and a path with nothing under it, are not nodes.
async fn describes_plain_directories(s: TestServer) {
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [4, 6],
        "metadata": {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}}}});
    send_json(&s, "PUT", "/api/v1/nodes/data/plain/arr", &spec).await.expect_status(201);
    // The array's parent became a group: make a plain folder beside it instead.
    s.delete("/zarr/data/plain/zarr.json").await.expect_status(204);
    s.delete("/zarr/data/zarr.json").await.expect_status(204);
    s.put("/zarr/data/plain/arr/c/0/1", vec![7u8; 4]).await.expect_status(201);
    s.put("/zarr/data/plain/grp/.zgroup", r#"{"zarr_format":2}"#).await.expect_status(201);
    s.put("/zarr/data/plain/sub/deeper/x.bin", vec![1u8; 3]).await.expect_status(201);
    s.put("/zarr/data/plain/notes.txt", b"hello world!".to_vec()).await.expect_status(201);

    let j = s.get("/api/v1/nodes/data/plain").await.json();
    assert_eq!(j["node_type"], "directory", "{j}");
    assert_eq!((j["mount"].as_str(), j["path"].as_str()), (Some("data"), Some("plain")));
    assert_eq!(
        (j["children_total"].as_u64(), j["page"].as_u64(), j["per_page"].as_u64()),
        (Some(4), Some(0), Some(100))
    );
    assert_eq!(
        j["children"],
        json!([
            {"name": "arr", "path": "plain/arr", "node_type": "array", "zarr_format": 3, "shape": [4, 6], "data_type": "uint8"},
            {"name": "grp", "path": "plain/grp", "node_type": "group", "zarr_format": 2},
            {"name": "sub", "path": "plain/sub", "node_type": "directory"},
            {"name": "notes.txt", "path": "plain/notes.txt", "node_type": "file", "size": 12},
        ])
    );
    // A folder below a folder; the mount's root.
    let j = s.get("/api/v1/nodes/data/plain/sub").await.json();
    assert_eq!(j["children"], json!([{"name": "deeper", "path": "plain/sub/deeper", "node_type": "directory"}]));
    let j = s.get("/api/v1/nodes/data").await.json();
    let names: Vec<&str> = j["children"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!((j["node_type"].as_str(), j["path"].as_str(), names), (Some("directory"), Some(""), vec!["plain"]));
    // Paged: two a page, a page past the last is empty.
    let page = |n: usize| {
        let s = &s;
        async move { s.get(&format!("/api/v1/nodes/data/plain?per_page=2&page={n}")).await.json() }
    };
    let names = |j: &Value| -> Vec<String> {
        j["children"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names(&page(0).await), ["arr", "grp"]);
    let p1 = page(1).await;
    assert_eq!(
        (names(&p1), p1["children_total"].as_u64(), p1["per_page"].as_u64()),
        (vec!["sub".into(), "notes.txt".into()], Some(4), Some(2))
    );
    assert_eq!(names(&page(2).await), Vec::<String>::new());
    let huge = s.get("/api/v1/nodes/data/plain?page=4611686018427387904").await.json();
    assert_eq!((huge["children"].clone(), huge["children_total"].as_u64()), (json!([]), Some(4)));
    // Bad paging names the parameter, on a directory, an array or a group;
    // a directory has no stats.
    for q in ["per_page=0", "per_page=1001", "page=-1", "page=99999999999999999999", "per_page=x"] {
        for at in ["plain", "plain/arr", "plain/grp"] {
            let r = s.get(&format!("/api/v1/nodes/data/{at}?{q}")).await;
            r.expect_error(400, "invalid_query");
            let field = q.split('=').next().unwrap();
            assert!(r.error_message().contains(field), "{at}?{q}: {}", r.error_message());
        }
    }
    let r = s.get("/api/v1/nodes/data/plain?stats=true").await;
    r.expect_error(400, "invalid_query");
    assert!(r.error_message().contains("stats"), "{}", r.error_message());
    // Arrays and groups are described as before (paging ignored).
    assert_eq!(s.get("/api/v1/nodes/data/plain/arr?per_page=1").await.json()["node_type"], "array");
    assert_eq!(s.get("/api/v1/nodes/data/plain/grp").await.json()["node_type"], "group");
    // Chunk folders are part of their array, not nodes; nothing there is nothing.
    s.get("/api/v1/nodes/data/plain/arr/c").await.expect_error(404, "node_not_found");
    s.get("/api/v1/nodes/data/plain/arr/c/0").await.expect_error(404, "node_not_found");
    s.get("/api/v1/nodes/data/plain/nothing").await.expect_error(404, "node_not_found");
    // A file is not a directory.
    s.get("/api/v1/nodes/data/plain/notes.txt").await.expect_error(404, "node_not_found");
}

macro_rules! on_backends {
    ($($name:ident),*) => {
        mod memory { $( #[tokio::test] async fn $name() { super::common::run(super::Backend::Memory, stringify!($name), super::$name).await; } )* }
        mod file { $( #[tokio::test] async fn $name() { super::common::run(super::Backend::File, stringify!($name), super::$name).await; } )* }
        mod s3 { $( #[tokio::test] async fn $name() { super::common::run(super::Backend::S3, stringify!($name), super::$name).await; } )* }
    };
}

on_backends!(
    describes_v3_and_v2_nodes,
    node_errors,
    lists_mounts,
    creates_from_documents_and_specs,
    create_errors,
    describes_stats_and_children,
    attributes_replace_and_merge,
    resize_grows_and_shrinks,
    deletes_nodes,
    deletes_objects_together,
    consolidates_v3_and_v2,
    metadata_cache_follows_raw_writes,
    describes_order_and_sharding,
    describes_plain_directories
);

/// A directory of 1,001 entries: pages of at most 1,000, every entry on
/// exactly one page, in order.
#[tokio::test]
async fn a_large_directory_is_paged() {
    let s = TestServer::start(Backend::Memory, "large_directory").await.expect("memory backend");
    for i in 0..1001 {
        s.put(&format!("/zarr/data/big/f{i:04}"), vec![0u8; 1]).await.expect_status(201);
    }
    let first = s.get("/api/v1/nodes/data/big?per_page=1000").await.json();
    let second = s.get("/api/v1/nodes/data/big?per_page=1000&page=1").await.json();
    assert_eq!(
        (first["children_total"].as_u64(), second["children_total"].as_u64()),
        (Some(1001), Some(1001)),
        "{first}"
    );
    let names: Vec<String> = [&first, &second]
        .iter()
        .flat_map(|j| j["children"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()))
        .collect();
    let want: Vec<String> = (0..1001).map(|i| format!("f{i:04}")).collect();
    assert_eq!(names, want);
    assert_eq!(s.get("/api/v1/nodes/data/big").await.json()["children"].as_array().unwrap().len(), 100);
}

/// Plain directories need `read` on their mount, as every node does.
#[tokio::test]
async fn plain_directories_need_read_access() {
    use zarrd::config::{Scope, TokenHash, TokenSpec};
    use zarrd::storage::{Mount, MountSpec};
    let mut config = common::test_config();
    config.auth.tokens = vec![TokenSpec {
        name: "reader".into(),
        sha256: TokenHash::of(b"reader-token-0123456789abcdef"),
        scopes: [("data".to_string(), vec![Scope::Read])].into_iter().collect(),
    }];
    let mounts = ["data", "other"].map(|m| Mount::build(m, &MountSpec::from_url("memory://")).unwrap());
    let (addr, _task) = common::serve_app(zarrd::service::App::with_mounts(config, mounts.into())).await;
    let client = common::client();
    let get = |path: &str, token: Option<&str>| {
        let mut rb = client.get(format!("http://{addr}{path}"));
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        async move { rb.send().await.unwrap() }
    };
    let token = Some("reader-token-0123456789abcdef");
    let r = get("/api/v1/nodes/data", token).await;
    assert_eq!(r.status(), 200);
    let j: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(j["node_type"], "directory");
    assert_eq!(get("/api/v1/nodes/data", None).await.status(), 401);
    assert_eq!(get("/api/v1/nodes/other", token).await.status(), 403);
}

/// `recheck_cached_metadata = false`: a change behind zarrd's back is not
/// seen (the cached node is served) until zarrd itself writes the node.
#[tokio::test]
async fn recheck_never_serves_the_cached_node() {
    use zarrd::storage::mount::RecheckPolicy;
    use zarrd::storage::{Mount, MountSpec};
    let dir = tempfile::tempdir().unwrap();
    let mut spec = MountSpec::from_url(&format!("file://{}", dir.path().display()));
    spec.recheck_cached_metadata = RecheckPolicy::Never;
    let app = zarrd::service::App::with_mounts(common::test_config(), vec![Mount::build("data", &spec).unwrap()]);
    let (addr, _task) = common::serve_app(app).await;
    let client = common::client();
    let url = |p: &str| format!("http://{addr}{p}");
    let put = client
        .put(url("/api/v1/nodes/data/m"))
        .header("content-type", "application/json")
        .body(json!({"driver": "zarr3", "dtype": "uint8", "shape": [4]}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let shape = |v: Value| v["shape"].clone();
    let get = || async {
        let body = client.get(url("/api/v1/nodes/data/m")).send().await.unwrap().bytes().await.unwrap();
        serde_json::from_slice::<Value>(&body).unwrap()
    };
    assert_eq!(shape(get().await), json!([4]));
    let path = dir.path().join("m/zarr.json");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    doc["shape"] = json!([5]);
    std::fs::write(&path, doc.to_string()).unwrap();
    assert_eq!(shape(get().await), json!([4]), "never rechecked: the cached node");
    // A write through zarrd refreshes it.
    let patch = client
        .patch(url("/api/v1/attributes/data/m"))
        .header("content-type", "application/json")
        .body("{\"k\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(patch.status(), 200);
    let j = get().await;
    assert_eq!((shape(j.clone()), j["attributes"].clone()), (json!([5]), json!({"k": 1})));
}

/// A group's `children` stop at `limits.max_list_entries`, and say so.
#[tokio::test]
async fn children_are_bounded_by_the_listing_limit() {
    let mut config = common::test_config();
    config.limits.max_list_entries = 2;
    let s = TestServer::start_with(Backend::Memory, "children_limit", config).await.expect("memory backend");
    let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [2]});
    for name in ["a", "b", "c"] {
        send_json(&s, "PUT", &format!("/api/v1/nodes/data/g/{name}"), &spec).await.expect_status(201);
    }
    let j = s.get("/api/v1/nodes/data/g").await.json();
    assert_eq!(j["children"].as_array().unwrap().len(), 2);
    assert_eq!(j["children_truncated"], true);
    let j = s.get("/api/v1/nodes/data").await.json();
    assert_eq!((j["children"].as_array().unwrap().len(), j["children_truncated"].as_bool()), (1, Some(false)));
    // Consolidating lists at most the limit's names in all: g holds four (its document
    // and three arrays), so it is refused, naming the limit, and nothing is written.
    let r = s.send(s.request("POST", "/api/v1/consolidate/data/g")).await;
    r.expect_error(413, "hierarchy_too_large");
    assert!(r.error_message().contains("limits.max_list_entries (2)"), "{r}");
    let mut doc = s.get("/zarr/data/g/zarr.json").await.json();
    assert!(doc.get("consolidated_metadata").is_none(), "{doc}");
    // From consolidated metadata too (written by another tool).
    let mut inline = serde_json::Map::new();
    for name in ["a", "b", "c"] {
        inline.insert(name.into(), s.get(&format!("/zarr/data/g/{name}/zarr.json")).await.json());
    }
    doc["consolidated_metadata"] = json!({"kind": "inline", "must_understand": false, "metadata": inline});
    s.put("/zarr/data/g/zarr.json", doc.to_string()).await.expect_status(204);
    let j = s.get("/api/v1/nodes/data/g").await.json();
    assert_eq!((j["consolidated"].as_bool(), j["children_truncated"].as_bool()), (Some(true), Some(true)));
    assert_eq!(j["children"].as_array().unwrap().len(), 2);
}

/// A group's `children` open at most `limits.max_list_entries` candidate
/// folders in all, nodes or not: plain folders (each up to four document
/// reads) count, so a group beside thousands of them costs a bounded
/// number of reads, and the answer says it was cut.
#[tokio::test]
async fn children_open_at_most_the_listing_limit_of_folders() {
    // A group `g` of one array `z` behind 20 plain folders, under listing limit `limit`.
    async fn group_behind_folders(limit: usize, test: &str) -> TestServer {
        let mut config = common::test_config();
        config.limits.max_list_entries = limit;
        let s = TestServer::start_with(Backend::Memory, test, config).await.expect("memory backend");
        let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [2]});
        send_json(&s, "PUT", "/api/v1/nodes/data/g/z", &spec).await.expect_status(201);
        for i in 0..20 {
            s.put(&format!("/zarr/data/g/p{i:02}/x"), vec![1u8]).await.expect_status(201);
        }
        s
    }
    let s = group_behind_folders(3, "children_folders").await;
    let reads = |text: &str| -> u64 {
        let series = r#"zarrd_storage_operation_duration_seconds_count{mount="data",op="read"} "#;
        text.lines().find_map(|l| l.strip_prefix(series)?.parse().ok()).unwrap_or(0)
    };
    let before = reads(&s.get("/metrics").await.text());
    let j = s.get("/api/v1/nodes/data/g").await.json();
    let after = reads(&s.get("/metrics").await.text());
    // The folders sort first; three are opened and found plain, and the listing says it stopped.
    assert_eq!((j["children"].as_array().unwrap().len(), j["children_truncated"].as_bool()), (0, Some(true)), "{j}");
    assert!(after - before <= 20, "{} reads to describe g", after - before);
    // With room for every folder, the array is found.
    let s = group_behind_folders(30, "children_folders_2").await;
    let j = s.get("/api/v1/nodes/data/g").await.json();
    assert_eq!((j["children"].as_array().unwrap().len(), j["children_truncated"].as_bool()), (1, Some(false)), "{j}");
}

/// Deletes and resizes list a node's objects at most `limits.max_list_entries`
/// at a time (a node of millions of chunks is deleted in rounds), and still
/// delete every one: chunks, nested nodes and their documents.
#[tokio::test]
async fn deletes_go_in_rounds_of_the_listing_limit() {
    for backend in [Backend::Memory, Backend::File] {
        let mut config = common::test_config();
        config.limits.max_list_entries = 2;
        let s = TestServer::start_with(backend, "delete_rounds", config).await.expect("server");
        let spec = json!({"driver": "zarr3", "dtype": "uint8", "shape": [6],
            "metadata": {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}}}});
        for array in ["g/a", "g/sub/b", "g/sub/deeper/c"] {
            send_json(&s, "PUT", &format!("/api/v1/nodes/data/{array}"), &spec).await.expect_status(201);
            s.put_with(
                &format!("/api/v1/data/data/{array}?format=json"),
                "[1, 2, 3, 4, 5, 6]",
                &[("content-type", "application/json")],
            )
            .await
            .expect_status(204);
        }
        // A group with children is not deleted without recursive=true (one entry past its
        // documents decides it).
        s.delete("/api/v1/nodes/data/g/sub").await.expect_error(409, "not_empty");
        // Resizing: the four chunks outside go.
        let r = send_json(&s, "POST", "/api/v1/resize/data/g/a", &json!({"shape": [2]})).await;
        assert_eq!(r.json(), json!({"shape": [2], "deleted_chunks": 4}), "{r}");
        s.get("/zarr/data/g/a/c/2").await.expect_status(404);
        assert_eq!(s.get("/zarr/data/g/a/c/1").await.body, [2u8]);
        // 2 + 6 + 6 chunks and six documents, two objects a listing: every one goes.
        s.delete("/api/v1/nodes/data/g?recursive=true").await.expect_status(204);
        for key in ["g/zarr.json", "g/a/c/0", "g/sub/zarr.json", "g/sub/b/c/5", "g/sub/deeper/c/zarr.json"] {
            s.get(&format!("/zarr/data/{key}")).await.expect_status(404);
        }
        // Only the mount's root group (made as a parent) is left.
        let listing = s.get_with("/zarr/data/", &[("Accept", "application/json")]).await.json();
        let names: Vec<&str> =
            listing["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["zarr.json"], "{backend:?}: {listing}");
    }
}
