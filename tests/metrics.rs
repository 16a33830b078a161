//! `/metrics` after known traffic, and the `/docs` page.

mod common;

use common::{Backend, TestServer};

/// The value of the sample `series` (name with labels, as rendered), or 0.
fn sample(text: &str, series: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0)
}

async fn scrape(s: &TestServer) -> String {
    let r = s.get("/metrics").await;
    r.expect_status(200);
    assert_eq!(r.must_header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    r.text()
}

#[tokio::test]
async fn metrics_count_known_traffic() {
    for backend in [Backend::Memory, Backend::File] {
        let s = TestServer::start(backend, "metrics_count_known_traffic").await.expect("server");
        let before = scrape(&s).await;
        let key = r#"route="/zarr/{mount}/{*key}""#;
        assert_eq!(sample(&before, &format!(r#"zarrd_http_requests_total{{{key},method="GET",status="200"}}"#)), 0);

        // Store protocol: one PUT of 1000 bytes, three GETs of it, two missing keys.
        s.put("/zarr/data/k/blob", vec![7u8; 1000]).await.expect_status(201);
        for _ in 0..3 {
            s.get("/zarr/data/k/blob").await.expect_status(200);
        }
        s.get("/zarr/data/k/missing").await.expect_status(404);
        s.get_with("/zarr/data/k/missing2", &[("range", "bytes=-4")]).await.expect_status(404);
        // The REST API: an array, a slice write, two reads of it (a miss, then a hit).
        let spec = r#"{"driver": "zarr3", "dtype": "uint16", "shape": [4, 4]}"#;
        let r = s
            .send(s.request("PUT", "/api/v1/nodes/data/a").header("content-type", "application/json").body(spec))
            .await;
        r.expect_status(201);
        let body = "[[1,2,3,4],[5,6,7,8],[9,10,11,12],[13,14,15,16]]";
        let r = s
            .send(s.request("PUT", "/api/v1/data/data/a?sel=:,:").header("content-type", "application/json").body(body))
            .await;
        r.expect_status(204);
        for _ in 0..2 {
            let r = s.get("/api/v1/data/data/a?sel=:,:&format=raw").await;
            r.expect_status(200);
            assert_eq!(r.body.len(), 32);
        }
        s.get("/no/such/route").await.expect_status(404);

        let text = scrape(&s).await;
        let requests = |method: &str, status: u16| {
            sample(&text, &format!(r#"zarrd_http_requests_total{{{key},method="{method}",status="{status}"}}"#))
        };
        assert_eq!(requests("PUT", 201), 1, "{text}");
        assert_eq!(requests("GET", 200), 3, "{text}");
        assert_eq!(requests("GET", 404), 2, "{text}");
        let data = r#"route="/api/v1/data/{mount}/{*path}""#;
        assert_eq!(sample(&text, &format!(r#"zarrd_http_requests_total{{{data},method="GET",status="200"}}"#)), 2);
        assert_eq!(sample(&text, &format!(r#"zarrd_http_requests_total{{{data},method="PUT",status="204"}}"#)), 1);
        assert_eq!(
            sample(&text, r#"zarrd_http_requests_total{route="unmatched",method="GET",status="404"}"#),
            1,
            "raw paths never become labels: {text}"
        );
        assert!(!text.contains("/no/such/route") && !text.contains("k/blob"), "{text}");
        // Latency: one observation per request.
        assert_eq!(sample(&text, &format!(r#"zarrd_http_request_duration_seconds_count{{{key},method="GET"}}"#)), 5);
        assert_eq!(
            sample(&text, &format!(r#"zarrd_http_request_duration_seconds_bucket{{{key},method="GET",le="+Inf"}}"#)),
            5
        );
        // Bytes: the PUT body in; three bodies plus two JSON 404 bodies out.
        assert_eq!(sample(&text, &format!(r#"zarrd_http_request_body_bytes_total{{{key},method="PUT"}}"#)), 1000);
        let out = sample(&text, &format!(r#"zarrd_http_response_body_bytes_total{{{key},method="GET"}}"#));
        assert!(out > 3000 && out < 3000 + 2 * 512, "GET bytes out {out}: {text}");
        assert_eq!(sample(&text, &format!(r#"zarrd_http_response_body_bytes_total{{{data},method="GET"}}"#)), 64);
        // Storage: both missing keys were reads that found nothing; puts succeeded.
        assert!(sample(&text, r#"zarrd_storage_errors_total{mount="data",op="read",kind="not_found"}"#) >= 2, "{text}");
        assert!(sample(&text, r#"zarrd_storage_operation_duration_seconds_count{mount="data",op="put"}"#) >= 3);
        assert_eq!(sample(&text, r#"zarrd_storage_errors_total{mount="data",op="put",kind="unavailable"}"#), 0);
        // The chunk cache: the second slice read hit what the first decoded.
        assert!(sample(&text, "zarrd_chunk_cache_hits_total") >= 1, "{text}");
        assert!(sample(&text, "zarrd_chunk_cache_misses_total") >= 1, "{text}");
        assert!(sample(&text, "zarrd_chunk_cache_bytes") >= 32, "{text}");
        assert_eq!(sample(&text, "zarrd_chunk_cache_capacity_bytes"), 256 * 1024 * 1024);
        if backend == Backend::File {
            assert!(sample(&text, r#"zarrd_object_cache_bytes{mount="data"}"#) > 0, "{text}");
        }
        // Every sample line belongs to a declared family.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
            assert!(text.contains(&format!("# TYPE {family} ")), "{line} has no TYPE line");
        }
    }
}

#[tokio::test]
async fn the_docs_page_is_served_from_the_binary() {
    let s = TestServer::start(Backend::Memory, "the_docs_page_is_served_from_the_binary").await.expect("server");
    let r = s.get("/docs").await;
    r.expect_status(308);
    assert_eq!(r.must_header("location"), "/docs/");
    let r = s.get("/docs/").await;
    r.expect_status(200);
    assert!(r.must_header("content-type").starts_with("text/html"));
    assert!(r.text().contains("swagger-ui"), "{}", r.text());
    let r = s.get("/docs/swagger-initializer.js").await;
    r.expect_status(200);
    assert!(r.text().contains("/openapi.json"), "the page loads our document: {}", r.text());
    let r = s.get("/docs/swagger-ui-bundle.js").await;
    r.expect_status(200);
    assert!(r.body.len() > 100_000, "the whole bundle is in the binary");
    s.get("/docs/no-such-file.js").await.expect_error(404, "no_route");
}

/// A read that takes a sliver of many large chunks leaves the chunk cache
/// alone (each entry would hold a whole decoded chunk: 16 one-element reads
/// of 1 MiB chunks would put 16 MiB into an 8 MiB cache, faster than it
/// evicts); a read of one whole chunk still fills it.
#[tokio::test]
async fn slivers_of_large_chunks_are_not_cached() {
    let mut config = common::test_config();
    config.cache.chunk_bytes = 8 << 20;
    config.limits.max_body_bytes = 32 << 20;
    config.limits.max_put_bytes = 32 << 20;
    let s = TestServer::start_with(Backend::Memory, "slivers_not_cached", config).await.expect("server");
    let spec = r#"{"driver": "zarr3", "dtype": "uint8", "shape": [4096, 4096],
                   "schema": {"chunk_layout": {"chunk": {"shape": [1024, 1024]}},
                              "codec": {"driver": "zarr3", "codecs": [{"name": "zstd"}]}}}"#;
    let r =
        s.send(s.request("PUT", "/api/v1/nodes/data/a").header("content-type", "application/json").body(spec)).await;
    r.expect_status(201);
    let body: Vec<u8> = (0..4096u32 * 4096).map(|i| (i % 251) as u8).collect();
    let r = s
        .send(
            s.request("PUT", "/api/v1/data/data/a?sel=:,:")
                .header("content-type", "application/octet-stream")
                .body(body.clone()),
        )
        .await;
    r.expect_status(204);
    let r = s.get("/api/v1/data/data/a?sel=1023::1024,1023::1024&format=raw").await;
    r.expect_status(200);
    let want: Vec<u8> = (0..4)
        .flat_map(|i| (0..4).map(move |j| (1023 + i * 1024, 1023 + j * 1024)))
        .map(|(i, j)| body[i * 4096 + j])
        .collect();
    assert_eq!(r.body, want);
    let text = scrape(&s).await;
    assert_eq!(sample(&text, "zarrd_chunk_cache_bytes"), 0, "{text}");
    let r = s.get("/api/v1/data/data/a?sel=0:1024,0:1024&format=raw").await;
    r.expect_status(200);
    assert_eq!(r.body.len(), 1 << 20);
    let text = scrape(&s).await;
    assert!(sample(&text, "zarrd_chunk_cache_bytes") >= 1 << 20, "{text}");
}

/// A read lets at most half the chunk cache in, counted at each entry's
/// real size: variable-length chunks are planned at an estimate per
/// element, so a scan of string chunks that each decode to megabytes
/// passed the planned check and took the whole cache (a black-box attack's
/// finding: one 256 MiB entry kept from a scan).
#[tokio::test]
async fn a_scan_of_large_string_chunks_fills_at_most_half_the_cache() {
    let mut config = common::test_config();
    config.cache.chunk_bytes = 8 << 20;
    config.limits.max_body_bytes = 32 << 20;
    config.limits.max_put_bytes = 32 << 20;
    let s = TestServer::start_with(Backend::Memory, "string_scan_cache", config).await.expect("server");
    let doc = r#"{"zarr_format":3,"node_type":"array","shape":[8],"data_type":"string",
 "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2]}},
 "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
 "fill_value":"","codecs":[{"name":"vlen-utf8"}],"attributes":{}}"#;
    s.put("/zarr/data/s/zarr.json", doc).await.expect_status(201);
    // Four chunks of two 1 MiB strings: 8 MiB decoded, the whole cache.
    for c in 0..4u8 {
        let mut chunk = 2u32.to_le_bytes().to_vec();
        for e in 0..2u8 {
            chunk.extend_from_slice(&(1u32 << 20).to_le_bytes());
            chunk.extend(std::iter::repeat_n(b'a' + c * 2 + e, 1 << 20));
        }
        s.put(&format!("/zarr/data/s/c/{c}"), chunk).await.expect_status(201);
    }
    let r = s.get("/api/v1/data/data/s?sel=0:8&format=json").await;
    r.expect_status(200);
    let v: Vec<String> = serde_json::from_slice(&r.body).expect("JSON");
    assert!(v.iter().enumerate().all(|(i, x)| x.len() == 1 << 20 && x.as_bytes()[0] == b'a' + i as u8));
    let text = scrape(&s).await;
    let cached = sample(&text, "zarrd_chunk_cache_bytes");
    assert!(cached > 0 && cached <= 4 << 20, "half the 8 MiB cache at most, and the first chunk: {cached}");
}
