//! Levels where they help: previews and `format=png&size=` of an OME-Zarr
//! multiscale group (built by `POST /api/v1/pyramids`) read the coarsest
//! level that still gives the size asked for (`X-Zarr-Level`), and equal
//! the same image read from that level directly; `size=` on an array
//! strides; every bad use is a 400 naming its parameter.

mod common;

use std::time::Duration;

use common::{Backend, TestServer};
use serde_json::{json, Value};

/// A 64 × 48 float32 array (chunks 16 × 16) of distinct values, and its
/// pyramid `img_pyramid` (levels 64 × 48, 32 × 24, 16 × 12), built by the server.
async fn pyramid(s: &TestServer) {
    let spec = json!({"driver": "zarr3", "dtype": "float32", "shape": [64, 48],
        "metadata": {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 16]}},
                     "dimension_names": ["y", "x"]}});
    let r = s
        .send(
            s.request("PUT", "/api/v1/nodes/data/img")
                .header("content-type", "application/json")
                .body(spec.to_string()),
        )
        .await;
    r.expect_status(201);
    let values: Vec<f32> = (0..64 * 48).map(|i| ((i * 37) % 1000) as f32).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    s.put("/api/v1/data/data/img?format=raw", bytes).await.expect_status(204);
    let r = s
        .send(
            s.request("POST", "/api/v1/pyramids/data/img")
                .header("content-type", "application/json")
                .body(json!({"method": "mean"}).to_string()),
        )
        .await;
    r.expect_status(202);
    let job = r.must_header("location").to_string();
    for _ in 0..600 {
        let st = s.get(&job).await.json();
        if st["state"] != "running" {
            assert_eq!(st["state"], "completed", "{st}");
            let g = s.get("/api/v1/nodes/data/img_pyramid").await.json();
            let paths: Vec<&str> =
                g["children"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
            assert_eq!(paths, ["img_pyramid/0", "img_pyramid/1", "img_pyramid/2"], "{g}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the pyramid job did not end in 30 s");
}

#[tokio::test]
async fn previews_of_a_multiscale_group_read_the_coarsest_level_that_gives_the_size() {
    let s = TestServer::start(Backend::Memory, "preview_levels").await.expect("memory backend");
    pyramid(&s).await;
    // (size, level chosen, that level's preview selection)
    for (size, level, sel) in [
        (12, "2", "::2,::2"),
        (16, "2", "::1,::1"),
        (17, "1", "::2,::2"),
        (32, "1", "::1,::1"),
        (33, "0", "::2,::2"),
        (500, "0", "::1,::1"),
    ] {
        let r = s.get(&format!("/api/v1/preview/data/img_pyramid?size={size}&colormap=viridis")).await;
        r.expect_status(200);
        assert_eq!((r.must_header("x-zarr-level"), r.must_header("x-zarr-selection")), (level, sel), "size {size}");
        let direct = s.get(&format!("/api/v1/preview/data/img_pyramid/{level}?size={size}&colormap=viridis")).await;
        assert_eq!(r.body, direct.body, "size {size}: the group's preview is its level's");
        assert!(direct.header("x-zarr-level").is_none());
        // And it is the slice read it names, of that level.
        let read =
            s.get(&format!("/api/v1/data/data/img_pyramid?level={level}&sel={sel}&format=png&colormap=viridis")).await;
        assert_eq!(r.body, read.body, "size {size}");
    }
    // The ETag still answers 304.
    let r = s.get("/api/v1/preview/data/img_pyramid?size=16").await;
    let tag = r.must_header("etag").to_string();
    s.get_with("/api/v1/preview/data/img_pyramid?size=16", &[("if-none-match", &tag)]).await.expect_status(304);
    // A group without multiscales: 400 naming level (as level= on it).
    let r = s
        .send(
            s.request("PUT", "/api/v1/nodes/data/plain_group")
                .header("content-type", "application/json")
                .body(r#"{"zarr_format": 3, "node_type": "group"}"#),
        )
        .await;
    r.expect_status(201);
    let r = s.get("/api/v1/preview/data/plain_group").await;
    r.expect_status(400);
    assert!(r.error_message().contains("level"), "{}", r.error_message());
    // The browser's page of the group shows its preview.
    let page = String::from_utf8(s.get("/browse/data/img_pyramid/").await.body.to_vec()).unwrap();
    assert!(page.contains("src=\"/api/v1/preview/data/img_pyramid\""), "{page}");
}

#[tokio::test]
async fn png_with_size_reads_the_coarsest_level_of_a_group() {
    let s = TestServer::start(Backend::Memory, "png_levels").await.expect("memory backend");
    pyramid(&s).await;
    // (level-0 selection, size, level, the level's selection read)
    let cases = [
        ("", 16, "2", "0:16,0:12"),
        ("0:64,0:48", 12, "2", "0:16:2,0:12:2"),
        ("0:64,0:48", 24, "1", "0:32:2,0:24:2"),
        ("0:64,0:48", 40, "0", "0:64:2,0:48:2"),
        ("8:40,4:20", 8, "2", "2:10,1:5"),
        ("8:40,4:20", 16, "1", "4:20,2:10"),
        ("9:41,5:21", 16, "1", "4:21:2,2:11:2"),
        ("10:11,0:48", 12, "2", "2:3,0:12"),
    ];
    for (sel, size, level, read) in cases {
        let r = s.get(&format!("/api/v1/data/data/img_pyramid?sel={sel}&format=png&size={size}&colormap=magma")).await;
        r.expect_status(200);
        assert_eq!(r.must_header("content-type"), "image/png");
        assert_eq!((r.must_header("x-zarr-level"), r.must_header("x-zarr-selection")), (level, read), "{sel} {size}");
        let direct =
            s.get(&format!("/api/v1/data/data/img_pyramid?level={level}&sel={read}&format=png&colormap=magma")).await;
        assert_eq!(r.body, direct.body, "{sel} {size}");
    }
    // With level=, the selection addresses that level and size= only strides.
    let r = s.get("/api/v1/data/data/img_pyramid?level=1&format=png&size=8").await;
    assert_eq!((r.must_header("x-zarr-level"), r.must_header("x-zarr-selection")), ("1", "0:32:4,0:24:4"));
    // On an array: striding only, no level.
    let r = s.get("/api/v1/data/data/img?format=png&size=16").await;
    assert_eq!((r.header("x-zarr-level"), r.must_header("x-zarr-selection")), (None, "0:64:4,0:48:4"));
    let direct = s.get("/api/v1/data/data/img?sel=::4,::4&format=png").await;
    assert_eq!(r.body, direct.body);
    // Errors name the parameter.
    for (q, code, field) in [
        ("format=png&size=0", "invalid_query", "size"),
        ("format=png&size=65537", "invalid_query", "size"),
        ("format=png&size=x", "invalid_query", "size"),
        ("format=json&size=16", "unsupported_format", "size"),
        ("format=png&size=16&downsample=2,2&downsample_method=mean", "invalid_query", "size"),
        ("format=png&size=16&sel=::2,:", "bad_request", "sel"),
        ("format=png&size=16&sel=[1,2],:", "bad_request", "sel"),
        ("format=png&size=16&sel=99,:", "invalid_selection", "99"),
    ] {
        let r = s.get(&format!("/api/v1/data/data/img_pyramid?{q}")).await;
        assert_eq!(r.status, 400, "{q}: {r}");
        let j: Value = r.json();
        assert_eq!(j["error"]["code"], code, "{q}: {j}");
        assert!(r.error_message().contains(field), "{q}: {}", r.error_message());
    }
}
