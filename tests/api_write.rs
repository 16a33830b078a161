//! `PUT /api/v1/data/{mount}/{*path}`: slice writes in every body format
//! and selection form, on plain, sharded and v2 arrays, on memory and file
//! mounts; empty-chunk deletion and `write_empty_chunks`; every error
//! status. What was stored is read back with the engine from a second
//! mount over the same storage and compared with a dense model.

mod common;
mod write_common;

use common::Backend;
use serde_json::json;
use write_common::{le16, npy, v3_meta, WriteServer};

/// A dense C-order model of a 2-d array.
struct Model {
    shape: [u64; 2],
    v: Vec<u16>,
}

impl Model {
    fn new(shape: [u64; 2]) -> Self {
        Self { shape, v: vec![0; usize::try_from(shape[0] * shape[1]).unwrap()] }
    }

    fn set(&mut self, r: u64, c: u64, x: u16) {
        self.v[usize::try_from(r * self.shape[1] + c).unwrap()] = x;
    }

    /// Outer product of `rows` × `cols`, values in C order (or `values[0]`
    /// everywhere when there is one).
    fn outer(&mut self, rows: &[u64], cols: &[u64], values: &[u16]) {
        let mut i = 0;
        for &r in rows {
            for &c in cols {
                self.set(r, c, values[if values.len() == 1 { 0 } else { i }]);
                i += 1;
            }
        }
    }
}

fn range(a: u64, b: u64, step: usize) -> Vec<u64> {
    (a..b).step_by(step).collect()
}

fn seq(n: usize, start: u16) -> Vec<u16> {
    (0..n).map(|i| start + u16::try_from(i).unwrap()).collect()
}

fn json_2d(rows: usize, cols: usize, values: &[u16]) -> String {
    let v: Vec<Vec<u16>> = (0..rows).map(|r| values[r * cols..(r + 1) * cols].to_vec()).collect();
    serde_json::to_string(&v).unwrap()
}

/// Every body format and selection form on one array; the stored array
/// must equal the model after every write.
async fn write_sequence(s: &WriteServer, path: &str, shape: [u64; 2]) {
    let url = |q: &str| format!("/api/v1/data/data/{path}?{q}");
    let mut m = Model::new(shape);
    let [rows, cols] = shape;

    // Raw box over partial chunks, format from Content-Type.
    let v = seq(6 * 7, 1);
    s.put(&url("sel=1:7,2:9"), "application/octet-stream", le16(&v)).await.expect_status(204);
    m.outer(&range(1, 7, 1), &range(2, 9, 1), &v);
    assert_eq!(s.read_u16(path).await, m.v, "{path}: raw box");

    // .npy over a strided selection; format= wins over Content-Type.
    let (r, c) = (range(0, rows, 3), range(1, cols, 4));
    let v = seq(r.len() * c.len(), 100);
    let body = npy("<u2", &[r.len() as u64, c.len() as u64], &le16(&v));
    s.put(&url("sel=::3,1::4&format=npy"), "application/octet-stream", body).await.expect_status(204);
    m.outer(&r, &c, &v);
    assert_eq!(s.read_u16(path).await, m.v, "{path}: strided npy");

    // JSON, orthogonal lists with a repeated index (the later value wins).
    let (r, c) = (vec![5, 0, rows - 1], vec![3, cols - 1, 3]);
    let v = seq(9, 200);
    s.put(&url(&format!("sel=[5,0,{}],[3,{},3]", rows - 1, cols - 1)), "application/json", json_2d(3, 3, &v))
        .await
        .expect_status(204);
    m.outer(&r, &c, &v);
    assert_eq!(s.read_u16(path).await, m.v, "{path}: orthogonal json");

    // Coordinate points, JSON.
    let pts = [(0, cols - 1, 300), (rows - 1, 0, 301), (4, 6, 302)];
    let sel = format!("sel=[0,{},4],[{},0,6]&mode=coordinate", rows - 1, cols - 1);
    s.put(&url(&sel), "application/json", "[300, 301, 302]").await.expect_status(204);
    for (r, c, x) in pts {
        m.set(r, c, x);
    }
    assert_eq!(s.read_u16(path).await, m.v, "{path}: coordinate json");

    // One raw element broadcast over a box covering whole chunks and more.
    s.put(&url("sel=0:4,0:5"), "application/octet-stream", le16(&[77])).await.expect_status(204);
    m.outer(&range(0, 4, 1), &range(0, 5, 1), &[77]);
    assert_eq!(s.read_u16(path).await, m.v, "{path}: broadcast");

    // A negative step and an integer index (a dimension dropped), npy.
    let r: Vec<u64> = (0..rows).rev().step_by(2).collect();
    let v = seq(r.len(), 400);
    s.put(&url("sel=::-2,5&format=npy"), "application/octet-stream", npy("<u2", &[r.len() as u64], &le16(&v)))
        .await
        .expect_status(204);
    m.outer(&r, &[5], &v);
    assert_eq!(s.read_u16(path).await, m.v, "{path}: negative step");

    // A JSON scalar over a strided selection; a big-endian .npy box.
    s.put(&url("sel=1::5,::2&format=json"), "application/octet-stream", "9").await.expect_status(204);
    m.outer(&range(1, rows, 5), &range(0, cols, 2), &[9]);
    let be: Vec<u8> = [1000u16, 1001, 1002, 1003].iter().flat_map(|x| x.to_be_bytes()).collect();
    s.put(&url("sel=2:4,3:5"), "application/x-npy", npy(">u2", &[2, 2], &be)).await.expect_status(204);
    m.outer(&[2, 3], &[3, 4], &[1000, 1001, 1002, 1003]);
    assert_eq!(s.read_u16(path).await, m.v, "{path}: json scalar and big-endian npy");

    // The whole array (no sel), raw.
    let v = seq(usize::try_from(rows * cols).unwrap(), 7);
    s.put(&url(""), "application/octet-stream", le16(&v)).await.expect_status(204);
    assert_eq!(s.read_u16(path).await, v, "{path}: whole array");
}

async fn formats_and_selections(s: WriteServer) {
    s.create("a", &v3_meta("uint16", &[10, 12], &[4, 5], None)).await;
    write_sequence(&s, "a", [10, 12]).await;
    s.create("g/sh", &v3_meta("uint16", &[16, 16], &[8, 8], Some(&[4, 4]))).await;
    write_sequence(&s, "g/sh", [16, 16]).await;
    // Edge shards: the array is not a multiple of the shard or inner chunk.
    s.create("g/sh2", &v3_meta("uint16", &[13, 11], &[8, 8], Some(&[4, 2]))).await;
    write_sequence(&s, "g/sh2", [13, 11]).await;
    let v2 = json!({"zarr_format": 2, "shape": [9, 10], "chunks": [4, 3], "dtype": "<u2", "order": "C",
        "compressor": {"id": "zlib", "level": 1}, "fill_value": 0, "filters": null});
    s.create("v2", &v2).await;
    write_sequence(&s, "v2", [9, 10]).await;
    assert!(s.exists("v2/0.0").await, "v2 chunk keys use `.`");
    // An array at the mount root.
    s.create("", &v3_meta("uint16", &[3, 3], &[2, 2], None)).await;
    s.put("/api/v1/data/data?sel=1,:", "application/json", "[1, 2, 3]").await.expect_status(204);
    assert_eq!(s.read_u16("").await, vec![0, 0, 0, 1, 2, 3, 0, 0, 0]);
}

async fn empty_chunks(s: WriteServer) {
    s.create("e", &v3_meta("uint16", &[8, 8], &[4, 4], None)).await;
    let s = &s;
    let put = |q: &str, v: u16| {
        let url = format!("/api/v1/data/data/e?{q}&format=json");
        async move { s.put_bare(&url, v.to_string()).await }
    };
    put("sel=:", 5).await.expect_status(204);
    for key in ["e/c/0/0", "e/c/0/1", "e/c/1/0", "e/c/1/1"] {
        assert!(s.exists(key).await, "{key} written");
    }
    // A whole chunk of fill: deleted.
    put("sel=0:4,0:4", 0).await.expect_status(204);
    assert!(!s.exists("e/c/0/0").await, "a chunk equal to the fill value is deleted");
    // Unless the request asks to store it.
    put("sel=4:8,4:8&write_empty_chunks=true", 0).await.expect_status(204);
    assert!(s.exists("e/c/1/1").await, "write_empty_chunks=true stores it");
    // A partly written chunk that ends up all fill (read-modify-write).
    put("sel=0:4,4:6", 0).await.expect_status(204);
    assert!(s.exists("e/c/0/1").await, "half of it is still 5");
    put("sel=0:4,6:8", 0).await.expect_status(204);
    assert!(!s.exists("e/c/0/1").await, "all fill after the read-modify-write: deleted");
    let mut want = vec![0u16; 64];
    for r in 4..8 {
        for c in 0..4 {
            want[r * 8 + c] = 5;
        }
    }
    assert_eq!(s.read_u16("e").await, want);

    // The array's attribute asks to store empty chunks; a request can override.
    let mut meta = v3_meta("uint16", &[4, 4], &[2, 2], None);
    meta["attributes"] = json!({"write_empty_chunks": true});
    s.create("ek", &meta).await;
    s.put_bare("/api/v1/data/data/ek?sel=0:2,0:2&format=json", "0").await.expect_status(204);
    assert!(s.exists("ek/c/0/0").await, "the attribute keeps empty chunks");
    s.put_bare("/api/v1/data/data/ek?sel=0:2,0:2&format=json&write_empty_chunks=false", "0").await.expect_status(204);
    assert!(!s.exists("ek/c/0/0").await, "the request overrides the attribute");

    // Sharded: a partly written shard whose inner chunks all become fill.
    s.create("es", &v3_meta("uint16", &[8, 8], &[8, 8], Some(&[4, 4]))).await;
    s.put_bare("/api/v1/data/data/es?sel=0:2,0:2&format=json", "3").await.expect_status(204);
    assert!(s.exists("es/c/0/0").await);
    s.put_bare("/api/v1/data/data/es?sel=0:2,0:2&format=json", "0").await.expect_status(204);
    assert!(!s.exists("es/c/0/0").await, "an all-fill shard is deleted");
}

async fn errors(s: WriteServer) {
    s.create("a", &v3_meta("uint16", &[10, 12], &[4, 5], None)).await;
    let at = "/api/v1/data/data/a?sel=0:6,0:7";
    let r = s.put(at, "application/octet-stream", vec![0u8; 10]).await;
    r.expect_error(400, "bad_request");
    let msg = r.error_message();
    assert!(msg.contains("expected 84 bytes") && msg.contains("got 10 bytes") && msg.contains("[6, 7]"), "{msg}");
    let r = s.put(at, "application/x-npy", npy("<f4", &[6, 7], &[0; 168])).await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("'<f4'") && r.error_message().contains("'<u2'"), "{}", r.error_message());
    let r = s.put(at, "application/x-npy", npy("<u2", &[7, 6], &[0; 84])).await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("[7, 6]") && r.error_message().contains("[6, 7]"), "{}", r.error_message());
    let r = s.put(at, "application/json", "[[1, 2], [3, 4]]").await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("shape [6, 7]"), "{}", r.error_message());
    let r = s.put("/api/v1/data/data/a?sel=0,0:2", "application/json", r#"[1, "x"]"#).await;
    r.expect_error(400, "bad_request");
    assert!(r.error_message().contains("\"x\"") && r.error_message().contains("uint16"), "{}", r.error_message());
    let r = s.put("/api/v1/data/data/a?sel=0,0:2", "application/json", "[1, 70000]").await;
    assert!(r.expect_error(400, "bad_request").error_message().contains("70000"));
    let r = s.put("/api/v1/data/data/a?sel=0:6,99", "application/json", "1").await;
    assert!(r.expect_error(400, "invalid_selection").error_message().contains("out of bounds"), "{r}");
    s.put("/api/v1/data/data/a?sel=1:2:3:4", "application/json", "1").await.expect_error(400, "invalid_selection");
    s.put("/api/v1/data/data/a?sel=0&mode=diagonal", "application/json", "1")
        .await
        .expect_error(400, "invalid_selection");
    s.put("/api/v1/data/data/a?sel=0&format=xml", "application/json", "1").await.expect_error(400, "invalid_format");
    s.put("/api/v1/data/data/a?sel=0&write_empty_chunks=maybe", "application/json", "1")
        .await
        .expect_error(400, "invalid_query");
    s.put("/api/v1/data/data/a?sel=0", "text/plain", "1").await.expect_error(415, "unsupported_media_type");
    s.put_bare("/api/v1/data/data/a?sel=0", "1").await.expect_error(400, "missing_format");
    s.put("/api/v1/data/data/nothing?sel=0", "application/json", "1").await.expect_error(404, "node_not_found");
    s.put("/api/v1/data/nosuch/a?sel=0", "application/json", "1").await.expect_error(404, "unknown_mount");
    s.put("/zarr/data/grp/zarr.json", "application/json", r#"{"zarr_format":3,"node_type":"group"}"#)
        .await
        .expect_status(201);
    s.put("/api/v1/data/data/grp", "application/json", "1").await.expect_error(400, "not_an_array");
    let r = s.put("/api/v1/data/ro/a?sel=0", "application/json", "1").await;
    r.expect_error(405, "read_only");
    assert!(r.header("allow").is_some(), "405 says what is allowed: {r}");
    let big = vec![0u8; usize::try_from(common::MAX_PUT).unwrap() + 2];
    s.put("/api/v1/data/data/a", "application/octet-stream", big).await.expect_error(413, "payload_too_large");
    // A broadcast over more than limits.max_selection_bytes: 413 before any work.
    s.create("huge", &v3_meta("uint16", &[1_000_000, 1_000_000], &[1, 1], None)).await;
    let r = s.put("/api/v1/data/data/huge", "application/json", "1").await;
    r.expect_error(413, "selection_too_large");
    assert!(r.error_message().contains("max_selection_bytes"), "{r}");
    // Far-apart points and lists in a grid of 10^12 chunks touch only their own chunks.
    let at = "/api/v1/data/data/huge?sel=[0,999999],[999999,0]";
    s.put(&format!("{at}&mode=coordinate"), "application/json", "[3, 4]").await.expect_status(204);
    s.put(at, "application/json", "[[5, 6], [7, 8]]").await.expect_status(204);
    for (key, present) in
        [("huge/c/0/999999", true), ("huge/c/999999/0", true), ("huge/c/0/0", true), ("huge/c/1/1", false)]
    {
        assert_eq!(s.exists(key).await, present, "{key}");
    }
    // Nothing was written by any of these.
    assert_eq!(s.read_u16("a").await, vec![0u16; 120]);
    assert!(!s.exists("a/c/0/0").await);
    // Raw bytes that are no value of the type: 400 naming the element, before any chunk is
    // written (the last chunk's encoder found it after the others were stored, as a 500).
    for (dt, bad, why) in [("bool", 7u8, "element 63 is 7: a bool must be 0 or 1"), ("int4", 100, "element 63 is 100")]
    {
        let name = format!("v{dt}");
        let mut meta = v3_meta(dt, &[8, 8], &[4, 4], None);
        if dt == "bool" {
            meta["fill_value"] = serde_json::json!(false);
        }
        s.create(&name, &meta).await;
        let mut body = vec![1u8; 64];
        body[63] = bad;
        let r = s.put(&format!("/api/v1/data/data/{name}"), "application/octet-stream", body).await;
        r.expect_error(400, "bad_request");
        assert!(r.error_message().contains(why), "{dt}: {r}");
        for key in ["c/0/0", "c/0/1", "c/1/0", "c/1/1"] {
            assert!(!s.exists(&format!("{name}/{key}")).await, "{dt}: {key} was written");
        }
    }
}

/// Reads through zarrd after writes through zarrd see the new data: the
/// decoded chunk cache (kept without revalidation on memory mounts) is
/// invalidated by every chunk and shard a slice write stores or deletes.
async fn reads_after_writes(s: WriteServer) {
    s.create("a", &v3_meta("uint16", &[6, 6], &[3, 3], None)).await;
    s.create("sh", &v3_meta("uint16", &[8, 8], &[8, 8], Some(&[2, 2]))).await;
    for path in ["a", "sh"] {
        let read = |sel: &str| {
            let url = format!("/api/v1/data/data/{path}?sel={sel}&format=json");
            let s = &s;
            async move {
                let r = s.get(&url).await;
                r.expect_status(200);
                r.json()
            }
        };
        assert_eq!(read("0:2,0:2").await, json!([[0, 0], [0, 0]]), "{path}: fill before any write");
        s.put(&format!("/api/v1/data/data/{path}?sel=1,1"), "application/json", "5").await.expect_status(204);
        assert_eq!(read("0:2,0:2").await, json!([[0, 0], [0, 5]]), "{path}: a partial write is seen");
        s.put(&format!("/api/v1/data/data/{path}?sel=0:2,0:2"), "application/json", "[[1, 2], [3, 4]]")
            .await
            .expect_status(204);
        assert_eq!(read("0:2,0:2").await, json!([[1, 2], [3, 4]]), "{path}: an overwrite is seen");
        s.put(&format!("/api/v1/data/data/{path}?sel=:,:"), "application/json", "0").await.expect_status(204);
        assert_eq!(read("0:2,0:2").await, json!([[0, 0], [0, 0]]), "{path}: deleted chunks read as fill");
    }
}

/// `mode=` has one rule on reads and writes: the same names (zarr-python's
/// `oindex` and `vindex` too, any case) and the same refusal, 400
/// `invalid_selection` naming the mode.
async fn selection_modes(s: WriteServer) {
    s.create("a", &v3_meta("uint16", &[6, 6], &[3, 3], None)).await;
    let read = |q: &str| {
        let url = format!("/api/v1/data/data/a?format=json&{q}");
        let s = &s;
        async move {
            let r = s.get(&url).await;
            r.expect_status(200);
            r.json()
        }
    };
    for mode in ["orthogonal", "oindex", "OIndex"] {
        let url = format!("/api/v1/data/data/a?sel=[1,3],[0,2]&mode={mode}");
        s.put(&url, "application/json", "[[1, 2], [3, 4]]").await.expect_status(204);
        assert_eq!(read(&format!("sel=[1,3],[0,2]&mode={mode}")).await, json!([[1, 2], [3, 4]]), "{mode}");
    }
    for mode in ["coordinate", "vindex"] {
        let url = format!("/api/v1/data/data/a?sel=[0,5],[5,0]&mode={mode}");
        s.put(&url, "application/json", "[7, 8]").await.expect_status(204);
        assert_eq!(read(&format!("sel=[0,5],[5,0]&mode={mode}")).await, json!([7, 8]), "{mode}");
    }
    let put = s.put("/api/v1/data/data/a?sel=0&mode=diagonal", "application/json", "1").await;
    let get = s.get("/api/v1/data/data/a?sel=0&mode=diagonal").await;
    for r in [put, get] {
        r.expect_error(400, "invalid_selection");
        assert!(r.error_message().contains("`diagonal`"), "{}", r.error_message());
    }
}

macro_rules! backends {
    ($($name:ident),*) => {
        mod memory {
            $(#[tokio::test] async fn $name() { super::run(super::Backend::Memory, stringify!($name), super::$name).await; })*
        }
        mod file {
            $(#[tokio::test] async fn $name() { super::run(super::Backend::File, stringify!($name), super::$name).await; })*
        }
    };
}

async fn run<F, Fut>(backend: Backend, test: &str, case: F)
where
    F: FnOnce(WriteServer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let s = WriteServer::start(backend, test).await.expect("memory and file are always available");
    tokio::time::timeout(std::time::Duration::from_secs(120), case(s))
        .await
        .unwrap_or_else(|_| panic!("{test} on {backend:?} did not finish in 120 s"));
}

backends!(formats_and_selections, empty_chunks, errors, reads_after_writes, selection_modes);
