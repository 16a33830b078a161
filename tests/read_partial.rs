//! Slice reads of uncompressed chunks read only the byte ranges they need
//! (issue 14 point 4), end to end through the server on every backend:
//! planes and boxes equal what the chunks hold (v3 little and big endian,
//! v2 C order), a stored chunk of the wrong length is still a 502 naming
//! its key, and a missing chunk is the fill value.

mod common;

use common::{Backend, TestServer};

/// One stored chunk: 32×32×32 uint32.
const CHUNK_BYTES: usize = 32 * 32 * 32 * 4;

/// A 64×64×64 uint32 array in 32×32×32 chunks (128 KiB: large enough to be
/// read by ranges), written through the store protocol; element (z, y, x)
/// is `z * 4096 + y * 64 + x` (little or big endian as the metadata says).
/// Chunk 1/1/1 is not stored (fill value 7).
async fn put_array(s: &TestServer, path: &str, v2: bool, big: bool) {
    let (doc_key, doc) = if v2 {
        let dtype = if big { ">u4" } else { "<u4" };
        (
            ".zarray",
            format!(
                r#"{{"zarr_format":2,"shape":[64,64,64],"chunks":[32,32,32],"dtype":"{dtype}","order":"C",
                 "compressor":null,"filters":null,"fill_value":7,"dimension_separator":"/"}}"#
            ),
        )
    } else {
        let endian = if big { "big" } else { "little" };
        (
            "zarr.json",
            format!(
                r#"{{"zarr_format":3,"node_type":"array","shape":[64,64,64],"data_type":"uint32",
                 "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":[32,32,32]}}}},
                 "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
                 "fill_value":7,"codecs":[{{"name":"bytes","configuration":{{"endian":"{endian}"}}}}]}}"#
            ),
        )
    };
    s.put(&format!("/zarr/data/{path}/{doc_key}"), doc).await.expect_status(201);
    for c in 0..8u32 {
        let (cz, cy, cx) = (c >> 2, (c >> 1) & 1, c & 1);
        if c == 7 {
            continue;
        }
        let mut bytes = Vec::with_capacity(CHUNK_BYTES);
        for z in cz * 32..cz * 32 + 32 {
            for y in cy * 32..cy * 32 + 32 {
                for x in cx * 32..cx * 32 + 32 {
                    let v = z * 4096 + y * 64 + x;
                    bytes.extend_from_slice(&if big { v.to_be_bytes() } else { v.to_le_bytes() });
                }
            }
        }
        let key = if v2 { format!("{cz}/{cy}/{cx}") } else { format!("c/{cz}/{cy}/{cx}") };
        s.put(&format!("/zarr/data/{path}/{key}"), bytes).await.expect_status(201);
    }
}

fn expect(zs: std::ops::Range<u32>, ys: std::ops::Range<u32>, xs: std::ops::Range<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    for z in zs {
        for y in ys.clone() {
            for x in xs.clone() {
                out.push(if z >= 32 && y >= 32 && x >= 32 { 7 } else { z * 4096 + y * 64 + x });
            }
        }
    }
    out
}

async fn get_u32s(s: &TestServer, url: &str) -> Vec<u32> {
    let r = s.get(url).await;
    r.expect_status(200);
    r.body.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

async fn partial_reads(backend: Backend) {
    let mut config = common::test_config();
    config.limits.max_put_bytes = 1 << 20;
    let Some(s) = TestServer::start_with(backend, "partial_reads", config).await else { return };
    for (path, v2, big) in [("v3le", false, false), ("v3be", false, true), ("v2le", true, false), ("v2be", true, true)]
    {
        put_array(&s, path, v2, big).await;
        let url = |sel: &str| format!("/api/v1/data/data/{path}?sel={sel}&format=raw");
        // A plane across the slowest dimension: 4 KiB of each chunk (by
        // ranges); boxes by ranges in some chunks and whole in others; the
        // planes across the faster dimensions need every page (whole).
        assert_eq!(get_u32s(&s, &url("40,:,:")).await, expect(40..41, 0..64, 0..64), "{path} plane");
        assert_eq!(get_u32s(&s, &url("3:9,1:4,30:34")).await, expect(3..9, 1..4, 30..34), "{path} box");
        assert_eq!(get_u32s(&s, &url("20:60,40,:")).await, expect(20..60, 40..41, 0..64), "{path} box y");
        assert_eq!(get_u32s(&s, &url(":,5,:")).await, expect(0..64, 5..6, 0..64), "{path} plane y");
        assert_eq!(get_u32s(&s, &url(":,:,9")).await, expect(0..64, 0..64, 9..10), "{path} plane x");
        // Chunk 0/0/0 one element short, then one element long: corrupt.
        let key = if v2 { "0/0/0" } else { "c/0/0/0" };
        for len in [CHUNK_BYTES - 4, CHUNK_BYTES + 4] {
            let put = s.put(&format!("/zarr/data/{path}/{key}"), vec![0u8; len]).await;
            assert_eq!(put.status, 204, "an overwrite: {put}");
            let r = s.get(&url("2,3,17:20")).await;
            r.expect_error(502, "corrupt_chunk");
            assert!(r.error_message().contains(&format!("{path}/{key}")), "{}", r.error_message());
        }
    }
}

#[tokio::test]
async fn partial_reads_memory() {
    partial_reads(Backend::Memory).await;
}

#[tokio::test]
async fn partial_reads_file() {
    partial_reads(Backend::File).await;
}

#[tokio::test]
async fn partial_reads_s3() {
    partial_reads(Backend::S3).await;
}
