//! A slice that is exactly one whole chunk (a tile on the chunk grid) is
//! answered from the decoded chunk: the same bytes as any read, from the
//! cache once hot, in raw and npy; a rewritten chunk is seen at once, a
//! missing one is the fill value (or the missing-chunk error), a corrupt
//! one a 502, and tiles off the grid or past the array's edge read the
//! ordinary way.

mod common;

use common::{Backend, TestServer};

/// A 40×48 float32 array in 16×16 chunks (edge chunks past row 32 and
/// column 32 stick out), zstd; element (y, x) is `y * 100 + x`; chunk
/// c/1/2 is not stored (fill value -1).
async fn put_array(s: &TestServer) {
    let doc = r#"{"zarr_format":3,"node_type":"array","shape":[40,48],"data_type":"float32",
     "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[16,16]}},
     "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
     "fill_value":-1,"codecs":[{"name":"bytes","configuration":{"endian":"little"}},
       {"name":"zstd","configuration":{"level":1,"checksum":false}}]}"#;
    s.put("/zarr/data/t/zarr.json", doc).await.expect_status(201);
    for cy in 0..3u32 {
        for cx in 0..3u32 {
            if (cy, cx) != (1, 2) {
                put_chunk(s, cy, cx, 0.0).await;
            }
        }
    }
}

async fn put_chunk(s: &TestServer, cy: u32, cx: u32, add: f32) {
    let mut raw = Vec::new();
    for y in cy * 16..cy * 16 + 16 {
        for x in cx * 16..cx * 16 + 16 {
            #[allow(clippy::cast_precision_loss)]
            raw.extend_from_slice(&((y * 100 + x) as f32 + add).to_le_bytes());
        }
    }
    let z = zstd::encode_all(&raw[..], 1).unwrap();
    let r = s.put(&format!("/zarr/data/t/c/{cy}/{cx}"), z).await;
    assert!(r.status == 201 || r.status == 204, "{r}");
}

fn expect(ys: std::ops::Range<u32>, xs: std::ops::Range<u32>, add: f32) -> Vec<f32> {
    let mut out = Vec::new();
    for y in ys {
        for x in xs.clone() {
            #[allow(clippy::cast_precision_loss)]
            out.push(if (16..32).contains(&y) && x >= 32 { -1.0 } else { (y * 100 + x) as f32 + add });
        }
    }
    out
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

async fn tiles(backend: Backend) {
    let Some(s) = TestServer::start(backend, "tiles").await else { return };
    put_array(&s).await;
    let tile = "/api/v1/data/data/t?sel=16:32,16:32&format=raw";
    for _ in 0..3 {
        let r = s.get(tile).await;
        r.expect_status(200);
        assert_eq!(r.must_header("content-length"), "1024");
        assert_eq!(f32s(&r.body), expect(16..32, 16..32, 0.0));
    }
    let r = s.get("/api/v1/data/data/t?sel=16:32,16:32&format=npy").await;
    r.expect_status(200);
    let len: usize = r.must_header("content-length").parse().unwrap();
    assert_eq!(r.body.len(), len);
    assert!(String::from_utf8_lossy(&r.body[..128]).contains("'shape': (16, 16)"));
    assert_eq!(f32s(&r.body[len - 1024..]), expect(16..32, 16..32, 0.0));
    // Rewritten: the next read sees it (the cache revalidates).
    put_chunk(&s, 1, 1, 0.5).await;
    assert_eq!(f32s(&s.get(tile).await.body), expect(16..32, 16..32, 0.5));
    // Missing: the fill value, or the missing-chunk error.
    assert_eq!(f32s(&s.get("/api/v1/data/data/t?sel=16:32,32:48&format=raw").await.body), expect(16..32, 32..48, 0.0));
    s.get("/api/v1/data/data/t?sel=16:32,32:48&format=raw&fill_missing=false").await.expect_error(404, "missing_chunk");
    // Off the grid, and the edge chunk (rows 32..40 only): the ordinary read.
    assert_eq!(f32s(&s.get("/api/v1/data/data/t?sel=8:24,0:16&format=raw").await.body), expect(8..24, 0..16, 0.0));
    assert_eq!(f32s(&s.get("/api/v1/data/data/t?sel=32:40,0:16&format=raw").await.body), expect(32..40, 0..16, 0.0));
    // Corrupt: a 502 naming the key.
    let r = s.put("/zarr/data/t/c/0/0", b"not zstd".to_vec()).await;
    assert_eq!(r.status, 204, "{r}");
    let r = s.get("/api/v1/data/data/t?sel=0:16,0:16&format=raw").await;
    r.expect_error(502, "corrupt_chunk");
    assert!(r.error_message().contains("t/c/0/0"), "{}", r.error_message());
}

#[tokio::test]
async fn tiles_memory() {
    tiles(Backend::Memory).await;
}

#[tokio::test]
async fn tiles_file() {
    tiles(Backend::File).await;
}
