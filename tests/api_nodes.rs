//! The REST API's node endpoints on memory and file mounts: mounts,
//! describing arrays and groups (v2 and v3), and their errors.

mod common;

use common::{Backend, TestServer};

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

async fn lists_mounts(s: TestServer) {
    let j = s.get("/api/v1/mounts").await.json();
    let names: Vec<_> = j["mounts"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["data", "ro"]);
    assert_eq!(j["mounts"][1]["read_only"], true);
}

macro_rules! on_backends {
    ($($name:ident),*) => {
        mod memory { $( #[tokio::test] async fn $name() { super::common::run(super::Backend::Memory, stringify!($name), super::$name).await; } )* }
        mod file { $( #[tokio::test] async fn $name() { super::common::run(super::Backend::File, stringify!($name), super::$name).await; } )* }
    };
}

on_backends!(describes_v3_and_v2_nodes, node_errors, lists_mounts);
