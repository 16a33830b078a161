//! Symbolic links inside a local mount, on every face (issue 12, findings 1
//! and 2; README "Security / Confinement"): links whose target stays inside
//! the mount are followed; links leaving it (relative `..`, absolute
//! targets) and loops are missing — never read, written or deleted through,
//! left out of listings, never a 503. Outside files are checked byte for
//! byte after every case, and their contents never appear in an answer.
//!
//! Also the keys a directory tree cannot store (finding 14): a segment
//! longer than a file name may be, the reserved staging namespace, `#<n>`
//! names (once object_store's staging names), DELETE of a prefix.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::{Backend, Reply, TestServer};
use serde_json::{json, Value};

const OUTSIDE_MARK: &str = "OUTSIDE-SECRET";

const ARRAY: &str = r#"{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"uint8",
"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4]}},
"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
"fill_value":0,"codecs":[{"name":"bytes"}],"attributes":{}}"#;

/// A file server whose mount holds `grp/` (a group with an array `arr`) and
/// links of every kind; `outside/` (a group, a secret, an array) and
/// `outside_file.txt` sit next to the mount root.
async fn server(test: &str) -> (TestServer, PathBuf) {
    let s = TestServer::start(Backend::File, test).await.expect("file backend");
    let root = s.root.clone().unwrap().canonicalize().unwrap();
    let parent = root.parent().unwrap().to_path_buf();
    let outside = parent.join("outside");
    std::fs::create_dir_all(outside.join("inner/c")).unwrap();
    std::fs::write(
        outside.join("zarr.json"),
        format!(r#"{{"zarr_format":3,"node_type":"group","attributes":{{"mark":"{OUTSIDE_MARK}"}}}}"#),
    )
    .unwrap();
    std::fs::write(outside.join("secret.txt"), format!("{OUTSIDE_MARK}-file")).unwrap();
    std::fs::write(outside.join("inner/zarr.json"), ARRAY.replace("{}", &format!(r#"{{"m":"{OUTSIDE_MARK}"}}"#)))
        .unwrap();
    std::fs::write(outside.join("inner/c/0"), &OUTSIDE_MARK.as_bytes()[..4]).unwrap();
    std::fs::write(parent.join("outside_file.txt"), format!("{OUTSIDE_MARK}-alone")).unwrap();

    std::fs::write(root.join("zarr.json"), r#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    let grp = root.join("grp");
    std::fs::create_dir_all(grp.join("arr/c")).unwrap();
    std::fs::write(grp.join("zarr.json"), r#"{"zarr_format":3,"node_type":"group","attributes":{"in":1}}"#).unwrap();
    std::fs::write(grp.join("arr/zarr.json"), ARRAY).unwrap();
    std::fs::write(grp.join("arr/c/0"), [1u8, 2, 3, 4]).unwrap();
    // Leaving the mount: relative and absolute, to a directory and a file.
    symlink("../../outside", grp.join("link_dir")).unwrap();
    symlink("../../outside_file.txt", grp.join("link_file")).unwrap();
    symlink(&outside, grp.join("abs_dir")).unwrap();
    symlink(parent.join("outside_file.txt"), grp.join("abs_file")).unwrap();
    symlink("../outside", root.join("link_dir")).unwrap();
    // Loops.
    symlink(".", grp.join("self")).unwrap();
    symlink("loop2", grp.join("loop1")).unwrap();
    symlink("loop1", grp.join("loop2")).unwrap();
    // An array whose chunk directory leaves the mount.
    std::fs::create_dir(grp.join("linked")).unwrap();
    std::fs::write(grp.join("linked/zarr.json"), ARRAY).unwrap();
    symlink("../../../outside/inner/c", grp.join("linked/c")).unwrap();
    // Inside the mount: followed.
    symlink("arr/zarr.json", grp.join("inside_file")).unwrap();
    (s, parent)
}

/// Every file outside the mount root, with its bytes (links not followed).
fn outside(parent: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![parent.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path == parent.join("root") {
                continue;
            }
            let ft = entry.file_type().unwrap();
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_file() {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

#[track_caller]
fn clean(r: &Reply) {
    assert!(!r.text().contains(OUTSIDE_MARK), "outside content in an answer: {r}");
    assert_ne!(r.status, 503, "a link made the server answer 503: {r}");
    assert_ne!(r.status, 500, "{r}");
}

#[tokio::test]
async fn store_reads_never_leave_the_mount() {
    let (s, parent) = server("confine_reads").await;
    let before = outside(&parent);
    for key in [
        "grp/link_dir/secret.txt",
        "grp/link_dir/zarr.json",
        "grp/link_file",
        "grp/abs_dir/secret.txt",
        "grp/abs_file",
        "link_dir/secret.txt",
        "grp/loop1",
        "grp/loop1/x",
        "grp/self/link_file",
    ] {
        for method in ["GET", "HEAD"] {
            let r = s.send(s.request(method, &format!("/zarr/data/{key}"))).await;
            clean(&r);
            r.expect_status(404);
        }
        let r = s.get_with(&format!("/zarr/data/{key}"), &[("Range", "bytes=0-3")]).await;
        clean(&r);
        r.expect_status(404);
    }
    // Links that stay inside are followed.
    let r = s.get("/zarr/data/grp/inside_file").await;
    r.expect_status(200);
    assert_eq!(r.text(), ARRAY);
    s.get("/zarr/data/grp/self/arr/c/0").await.expect_status(200);
    // Read twice (the second from the object cache): still confined.
    s.get("/zarr/data/grp/link_file").await.expect_status(404);
    assert_eq!(outside(&parent), before);
}

#[tokio::test]
async fn store_writes_and_deletes_never_go_through_a_link_out() {
    let (s, parent) = server("confine_writes").await;
    let before = outside(&parent);
    for key in ["grp/link_dir/x", "grp/link_dir/inner/c/0", "grp/abs_dir/x", "link_dir/zarr.json", "grp/loop1/x"] {
        let r = s.put(&format!("/zarr/data/{key}"), r#"{"zarr_format":3,"node_type":"group"}"#).await;
        clean(&r);
        r.expect_error(409, "conflict");
        assert!(r.error_message().contains("symbolic link"), "{r}");
        let r = s.delete(&format!("/zarr/data/{key}")).await;
        clean(&r);
        r.expect_status(204);
    }
    for key in ["grp/link_dir/secret.txt", "grp/abs_dir/secret.txt", "link_dir/zarr.json"] {
        s.delete(&format!("/zarr/data/{key}")).await.expect_status(204);
    }
    // Conditional writes to a name that is a link out: it does not exist as
    // far as the mount is concerned, and is never written through.
    let r = s.put_with("/zarr/data/grp/link_file", "X", &[("If-Match", "*")]).await;
    clean(&r);
    r.expect_status(412);
    let r = s.put_with("/zarr/data/grp/abs_file", "X", &[("If-None-Match", "*")]).await;
    clean(&r);
    r.expect_status(412);
    assert_eq!(outside(&parent), before, "a write or delete reached outside the mount");

    // Overwriting or deleting the link itself changes the link, never its target.
    let root = parent.join("root");
    // (201: a link out is not an object of the mount.)
    s.put("/zarr/data/grp/link_file", "replaced").await.expect_status(201);
    assert!(!std::fs::symlink_metadata(root.join("grp/link_file")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(root.join("grp/link_file")).unwrap(), b"replaced");
    s.delete("/zarr/data/grp/abs_file").await.expect_status(204);
    assert!(std::fs::symlink_metadata(root.join("grp/abs_file")).is_err());
    s.delete("/zarr/data/grp/link_dir").await.expect_status(204);
    assert!(std::fs::symlink_metadata(root.join("grp/link_dir")).is_err());
    assert_eq!(outside(&parent), before);
    // Writing through a link that stays inside the mount is allowed.
    std::os::unix::fs::symlink("arr", root.join("grp/alias")).unwrap();
    s.put("/zarr/data/grp/alias/c/1", "in").await.expect_status(201);
    assert_eq!(std::fs::read(root.join("grp/arr/c/1")).unwrap(), b"in");
}

#[tokio::test]
async fn listings_and_webdav_leave_links_out_and_loops_are_no_503() {
    let (s, parent) = server("confine_listings").await;
    let before = outside(&parent);
    let r = s.get_with("/zarr/data/grp/", &[("Accept", "application/json")]).await;
    clean(&r);
    r.expect_status(200);
    let text = r.text();
    for hidden in ["link_dir", "link_file", "abs_dir", "abs_file", "loop1", "loop2", "\"self"] {
        assert!(!text.contains(hidden), "{hidden} listed: {text}");
    }
    for shown in ["arr", "zarr.json", "inside_file"] {
        assert!(text.contains(shown), "{shown} not listed: {text}");
    }
    let r = s.get_with("/zarr/data/", &[("Accept", "application/json")]).await;
    clean(&r);
    r.expect_status(200);
    assert!(!r.text().contains("link_dir"), "{r}");
    for depth in ["1", "infinity"] {
        for path in ["/zarr/data/", "/zarr/data/grp/", "/zarr/data/grp/self/", "/zarr/data/link_dir/"] {
            let r = s.send(common::with_headers(s.request("PROPFIND", path), &[("Depth", depth)])).await;
            clean(&r);
            assert!(r.status == 207 || r.status == 404 || r.status == 403, "PROPFIND {path} depth {depth}: {r}");
            assert!(!r.text().contains("loop1") && !r.text().contains("link_file"), "{r}");
        }
    }
    assert_eq!(outside(&parent), before);
}

/// A directory page lists names and their types and looks up only what it
/// shows; links are resolved as in every listing: a link to a file inside
/// the mount is that file, links out and links to directories are left out.
#[tokio::test]
async fn directory_pages_resolve_links_inside_and_leave_links_out() {
    let (s, parent) = server("confine_pages").await;
    let plain = parent.join("root/plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("f"), b"12345").unwrap();
    symlink("../grp/arr/zarr.json", plain.join("in_file")).unwrap();
    symlink("../grp", plain.join("in_dir")).unwrap();
    symlink("../../outside", plain.join("out_dir")).unwrap();
    symlink("../../outside_file.txt", plain.join("out_file")).unwrap();
    symlink("missing", plain.join("dangling")).unwrap();
    let r = s.get("/api/v1/nodes/data/plain").await;
    clean(&r);
    r.expect_status(200);
    let j = r.json();
    let children: Vec<(&str, &str, Option<u64>)> = j["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["node_type"].as_str().unwrap(), c["size"].as_u64()))
        .collect();
    let array_size = u64::try_from(ARRAY.len()).unwrap();
    assert_eq!(children, [("f", "file", Some(5)), ("in_file", "file", Some(array_size))]);
    assert_eq!((&j["children_total"], &j["children_truncated"]), (&serde_json::json!(2), &serde_json::json!(false)));
    // The second page of one entry a page is the link.
    let j = s.get("/api/v1/nodes/data/plain?page=1&per_page=1").await.json();
    assert_eq!(
        (&j["children"][0]["name"], &j["children"][0]["size"]),
        (&serde_json::json!("in_file"), &serde_json::json!(array_size))
    );
    assert_eq!(j["children"].as_array().unwrap().len(), 1);
    let page = s.get("/browse/data/plain").await;
    clean(&page);
    page.expect_status(200);
    let text = page.text();
    for shown in [">f<", ">in_file<"] {
        assert!(text.contains(shown), "{shown} not shown: {text}");
    }
    for hidden in ["in_dir", "out_dir", "out_file", "dangling"] {
        assert!(!text.contains(hidden), "{hidden} shown: {text}");
    }
}

#[tokio::test]
async fn nodes_stats_and_consolidate_see_only_the_mount() {
    let (s, parent) = server("confine_nodes").await;
    let before = outside(&parent);
    let r = s.get("/api/v1/nodes/data/grp?stats=true").await;
    clean(&r);
    r.expect_status(200);
    let j = r.json();
    let children: Vec<&str> = j["children"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(children, ["grp/arr", "grp/linked"], "{j}");
    // zarr.json, arr/zarr.json, arr/c/0, linked/zarr.json and the inside
    // link to arr/zarr.json (not the chunk behind linked/c).
    assert_eq!(j["stats"]["stored_objects"], 5, "{j}");
    let r = s.get("/api/v1/nodes/data?depth=5").await;
    clean(&r);
    r.expect_status(200);
    for path in ["/api/v1/nodes/data/link_dir", "/api/v1/nodes/data/grp/link_dir", "/api/v1/nodes/data/grp/loop1"] {
        let r = s.get(path).await;
        clean(&r);
        r.expect_status(404);
    }
    let r = s.get("/api/v1/data/data/grp/link_dir/inner?format=json").await;
    clean(&r);
    r.expect_status(404);
    let r = s.send(s.request("POST", "/api/v1/consolidate/data/grp")).await;
    clean(&r);
    r.expect_status(200);
    let doc: Value = serde_json::from_slice(&std::fs::read(parent.join("root/grp/zarr.json")).unwrap()).unwrap();
    let names: Vec<&String> = doc["consolidated_metadata"]["metadata"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["arr", "linked"], "{doc}");
    assert_eq!(outside(&parent), before);
}

#[tokio::test]
async fn attribute_updates_and_recursive_deletes_never_reach_outside() {
    let (s, parent) = server("confine_mutations").await;
    let before = outside(&parent);
    let root = parent.join("root");
    for path in ["link_dir", "grp/link_dir", "grp/abs_dir", "grp/self/link_dir"] {
        let r = s
            .send(
                s.request("PATCH", &format!("/api/v1/attributes/data/{path}"))
                    .header("content-type", "application/json")
                    .body(json!({"owned": true}).to_string()),
            )
            .await;
        clean(&r);
        r.expect_status(404);
    }
    let r = s.delete("/api/v1/nodes/data/grp?recursive=true").await;
    clean(&r);
    r.expect_status(204);
    assert_eq!(outside(&parent), before, "a recursive delete reached outside the mount");
    assert!(!root.join("grp/zarr.json").exists() && !root.join("grp/arr/c/0").exists());
    // The link inside the mount was deleted as a link (its target too, as
    // the node's own key); links out are not part of the node: left alone.
    assert!(std::fs::symlink_metadata(root.join("grp/inside_file")).is_err());
    for link in ["link_file", "abs_file", "link_dir", "abs_dir"] {
        assert!(std::fs::symlink_metadata(root.join("grp").join(link)).unwrap().file_type().is_symlink(), "{link}");
    }
    // What is left is a plain directory, no longer a group; its listing
    // does not show the links out of the mount.
    let r = s.get("/api/v1/nodes/data/grp").await;
    r.expect_status(200);
    let v = r.json();
    assert_eq!(v["node_type"], "directory", "{v}");
    let names: Vec<&str> = v["children"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    for link in ["link_file", "abs_file", "link_dir", "abs_dir"] {
        assert!(!names.contains(&link), "{link} listed: {v}");
    }
}

#[tokio::test]
async fn keys_a_directory_cannot_hold_are_4xx_naming_the_rule() {
    let (s, parent) = server("confine_keys").await;
    let long = "x".repeat(256);
    let r = s.put(&format!("/zarr/data/grp/{long}"), "v").await;
    r.expect_error(400, "invalid_key");
    assert!(r.error_message().contains("255"), "{r}");
    s.get(&format!("/zarr/data/grp/{long}")).await.expect_error(400, "invalid_key");
    s.put(&format!("/zarr/data/grp/{}", "y".repeat(255)), "v").await.expect_status(201);
    for key in ["grp/.zarrd-staging", ".zarrd-staging/1-2-3", "grp/.zarrd-staging-9"] {
        let r = s.put(&format!("/zarr/data/{key}"), "v").await;
        r.expect_error(400, "invalid_key");
        assert!(r.error_message().contains("reserved"), "{r}");
        s.get(&format!("/zarr/data/{key}")).await.expect_error(400, "invalid_key");
    }
    // `#<digits>` is an ordinary name now (object_store staged as `key#N`).
    for key in ["grp/arr/c/0#1", "grp/n#12"] {
        s.put(&format!("/zarr/data/{}", key.replace('#', "%23")), "hash").await.expect_status(201);
        let r = s.get(&format!("/zarr/data/{}", key.replace('#', "%23"))).await;
        r.expect_status(200);
        assert_eq!(r.text(), "hash");
    }
    let j = s.get_with("/zarr/data/grp/", &[("Accept", "application/json")]).await;
    assert!(j.text().contains("n#12"), "{j}");
    // DELETE of a prefix: 409 naming it; nothing deleted.
    let r = s.delete("/zarr/data/grp/arr").await;
    r.expect_error(409, "conflict");
    assert!(r.error_message().contains("grp/arr") && r.error_message().contains("prefix"), "{r}");
    assert!(parent.join("root/grp/arr/c/0").exists());
}

#[tokio::test]
async fn slice_reads_and_writes_never_use_chunks_outside_the_mount() {
    let (s, parent) = server("confine_slices").await;
    let before = outside(&parent);
    // The chunk behind the link reads as missing: the fill value.
    let r = s.get("/api/v1/data/data/grp/linked?format=json").await;
    clean(&r);
    r.expect_status(200);
    assert_eq!(r.json(), json!([0, 0, 0, 0]));
    let r = s
        .send(
            s.request("PUT", "/api/v1/data/data/grp/linked?sel=0:4&format=json")
                .header("content-type", "application/json")
                .body("7"),
        )
        .await;
    clean(&r);
    r.expect_error(409, "conflict");
    assert!(r.error_message().contains("symbolic link"), "{r}");
    assert_eq!(outside(&parent), before);
    // The array inside reads its own chunk.
    assert_eq!(s.get("/api/v1/data/data/grp/arr?format=json").await.json(), json!([1, 2, 3, 4]));
}
