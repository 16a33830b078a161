//! Conformance suite for the Zarr store protocol (`/zarr/{mount}/{*key}`).
//!
//! Every case runs against each backend: `memory://`, a file mount in a
//! temporary directory, and `s3://` when `ZARRD_TEST_S3_ENDPOINT` points at
//! an S3-compatible server with the bucket `zarrd-test` (the harness starts
//! moto and sets it; without it the S3 variants say so and return).
//!
//! Each case gets its own server on an ephemeral loopback port, with a
//! writable mount `data`, a read-only mount `ro` over the same storage, and
//! `limits.max_put_bytes` = [`MAX_PUT`].

mod common;

use std::collections::BTreeSet;
use std::time::SystemTime;

use common::{pattern, with_headers, Backend, Reply, TestServer, MAX_PUT};

/// Runs each named case against every backend.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        conformance!(@backend memory, Memory, $($case),*);
        conformance!(@backend file, File, $($case),*);
        conformance!(@backend s3, S3, $($case),*);
    };
    (@backend $module:ident, $backend:ident, $($case:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::common::run(crate::common::Backend::$backend, stringify!($case), super::$case).await;
                }
            )*
        }
    };
}

conformance!(
    get_and_head_whole_objects,
    single_ranges_are_answered_206,
    other_range_forms,
    unsatisfiable_ranges_are_416,
    conditional_reads,
    missing_keys_are_404_however_asked,
    put_answers_201_then_204,
    conditional_puts,
    etags_change_on_every_write,
    deletes_are_204_and_idempotent,
    unsafe_keys_are_400,
    unknown_mount_is_404,
    read_only_mount_refuses_writes_with_405,
    bodies_over_the_limit_are_413,
    invalid_metadata_is_422,
    valid_metadata_and_chunks_are_stored,
    odd_but_valid_keys_round_trip,
    common_headers_on_every_answer,
    ranges_are_never_content_encoded,
    cors_on_success_error_and_preflight,
    html_and_json_listings,
    listing_links_never_take_a_scheme_from_a_key,
    mount_root_listing_links_resolve,
    propfind_depths,
    mkcol_and_other_methods,
    concurrent_if_match_puts_have_one_winner,
    concurrent_create_only_puts_have_one_winner,
    reads_never_see_torn_writes,
    interrupted_uploads_store_nothing,
    listings_are_cut_at_the_configured_maximum,
);

/// Metadata documents the store protocol must refuse with 422, as
/// `(key, body, what the message must name)`: the message always names the
/// key, and names the offending field when there is one. Extend freely.
const INVALID_METADATA: &[(&str, &str, &str)] = &[
    // Not JSON, or not a JSON object.
    ("zarr.json", "{not json", "invalid JSON"),
    ("grp/zarr.json", "", "invalid JSON"),
    ("arr/zarr.json", "[1, 2, 3]", ""),
    ("arr/zarr.json", "\"zarr_format\"", ""),
    ("arr/.zarray", "{\"zarr_format\": 2,", "invalid JSON"),
    ("arr/.zarray", "null", ""),
    ("arr/.zattrs", "not json at all", "invalid JSON"),
    ("arr/.zattrs", "42", ""),
    ("grp/.zgroup", "{]", "invalid JSON"),
    (".zmetadata", "{\"metadata\": ", "invalid JSON"),
    ("deep/er/arr/zarr.json", "\u{feff}{}x", ""),
    // v3 zarr.json: missing and wrong fields.
    ("g/zarr.json", r#"{"zarr_format": 2, "node_type": "group"}"#, "zarr_format"),
    ("g/zarr.json", r#"{"zarr_format": 3, "node_type": "tree"}"#, "node_type"),
    ("g/zarr.json", r#"{"zarr_format": 3}"#, "node_type"),
    ("g/zarr.json", r#"{"zarr_format": 3, "node_type": "group", "attributes": [1]}"#, "attributes"),
    (
        "a/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}"#,
        "shape",
    ),
    (
        "a/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "float128x",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}"#,
        "data_type",
    ),
    (
        "a/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "no-such-codec"}]}"#,
        "codecs[1]",
    ),
    (
        "a/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}"#,
        "chunk_shape",
    ),
    (
        "a/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "dimension_names": ["only-one"]}"#,
        "dimension_names",
    ),
    (
        "a/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 300,
            "codecs": [{"name": "bytes"}]}"#,
        "fill_value",
    ),
    (
        "a/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "gzip", "configuration": {"level": 12}}]}"#,
        "level",
    ),
    // v2 documents.
    (
        "v2/.zarray",
        r#"{"zarr_format": 2, "shape": [4, 6], "dtype": "<i4", "compressor": null,
            "fill_value": 0, "order": "C", "filters": null}"#,
        "chunks",
    ),
    (
        "v2/.zarray",
        r#"{"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<x9", "compressor": null,
            "fill_value": 0, "order": "C", "filters": null}"#,
        "dtype",
    ),
    (
        "v2/.zarray",
        r#"{"zarr_format": 2, "shape": [4, 6], "chunks": [2], "dtype": "<i4", "compressor": null,
            "fill_value": 0, "order": "C", "filters": null}"#,
        "chunks",
    ),
    (
        "v2/.zarray",
        r#"{"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<i4",
            "compressor": {"id": "no-such-compressor"}, "fill_value": 0, "order": "C", "filters": null}"#,
        "compressor",
    ),
    (
        "v2/.zarray",
        r#"{"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<i4", "compressor": null,
            "fill_value": 0, "order": "Z", "filters": null}"#,
        "order",
    ),
    ("v2/.zgroup", r#"{"zarr_format": 3}"#, "zarr_format"),
    (
        ".zmetadata",
        r#"{"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2},
            "a/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<x9", "compressor": null,
                          "fill_value": 0, "order": "C", "filters": null}}}"#,
        "a/.zarray",
    ),
];

/// Metadata documents that are valid under any validator, as `(key, body)`.
const VALID_METADATA: &[(&str, &str)] = &[
    ("grp/zarr.json", r#"{"zarr_format": 3, "node_type": "group", "attributes": {"title": "t"}}"#),
    (
        "grp/arr/zarr.json",
        r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": {}, "dimension_names": ["y", "x"]}"#,
    ),
    ("v2/.zgroup", r#"{"zarr_format": 2}"#),
    ("v2/.zattrs", r#"{"answer": 42}"#),
    (
        "v2/arr/.zarray",
        r#"{"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<i4", "compressor": null,
            "fill_value": 0, "order": "C", "filters": null, "dimension_separator": "."}"#,
    ),
    ("v2/arr/.zattrs", "{}"),
];

const KEY: &str = "/zarr/data/arr/c/0/0";

#[track_caller]
fn assert_quoted_etag(etag: &str) {
    assert!(
        etag.len() >= 2 && etag.starts_with('"') && etag.ends_with('"') && !etag[1..etag.len() - 1].contains('"'),
        "not a strong quoted ETag: {etag:?}"
    );
}

#[track_caller]
fn http_date(value: &str) -> SystemTime {
    httpdate::parse_http_date(value).unwrap_or_else(|e| panic!("not an HTTP date: {value:?}: {e}"))
}

/// The headers of an answer carrying an object: ETag, Date, Last-Modified, Accept-Ranges.
#[track_caller]
fn assert_object_headers(r: &Reply) {
    assert_quoted_etag(r.must_header("etag"));
    let date = http_date(r.must_header("date"));
    let modified = http_date(r.must_header("last-modified"));
    assert!(modified <= date, "Last-Modified after Date: {r}");
    assert_eq!(r.must_header("accept-ranges"), "bytes", "{r}");
}

async fn put_ok(s: &TestServer, path: &str, body: impl Into<Vec<u8>>) -> String {
    let r = s.put(path, body).await;
    assert!(r.status == 201 || r.status == 204, "PUT {path}: {r}");
    r.must_header("etag").to_string()
}

async fn get_and_head_whole_objects(s: TestServer) {
    let body = pattern(1000);
    let put = s.put(KEY, body.clone()).await;
    put.expect_status(201);
    let etag = put.must_header("etag").to_string();
    assert_quoted_etag(&etag);

    let r = s.get(KEY).await;
    r.expect_status(200);
    assert_eq!(r.body, body);
    assert_eq!(r.must_header("content-length"), "1000");
    assert_eq!(r.must_header("content-type"), "application/octet-stream");
    assert_eq!(r.must_header("etag"), etag, "GET ETag differs from the one PUT answered");
    assert!(r.header("content-range").is_none(), "{r}");
    assert_object_headers(&r);

    let h = s.head_with(KEY, &[]).await;
    h.expect_status(200);
    assert!(h.body.is_empty(), "HEAD with a body: {h}");
    assert_eq!(h.must_header("content-length"), "1000", "HEAD must carry the real length");
    assert_eq!(h.must_header("etag"), etag);
    assert_eq!(h.must_header("last-modified"), r.must_header("last-modified"));
    assert_object_headers(&h);

    // An empty object.
    s.put("/zarr/data/empty", Vec::new()).await.expect_status(201);
    let r = s.get("/zarr/data/empty").await;
    r.expect_status(200);
    assert!(r.body.is_empty());
    assert_eq!(r.must_header("content-length"), "0");

    // Metadata documents are served as JSON.
    let (key, doc) = VALID_METADATA[0];
    put_ok(&s, &format!("/zarr/data/{key}"), doc).await;
    let r = s.get(&format!("/zarr/data/{key}")).await;
    r.expect_status(200);
    assert_eq!(r.text(), doc);
    assert!(r.must_header("content-type").starts_with("application/json"), "{r}");
}

async fn single_ranges_are_answered_206(s: TestServer) {
    let body = pattern(100);
    let etag = put_ok(&s, KEY, body.clone()).await;
    let cases: &[(&str, std::ops::Range<usize>)] = &[
        ("bytes=10-19", 10..20),
        ("bytes=0-0", 0..1),
        ("bytes=99-99", 99..100),
        ("bytes=0-99", 0..100),
        ("bytes=95-200", 95..100),
        ("bytes=90-", 90..100),
        ("bytes=0-", 0..100),
        ("bytes=-16", 84..100),
        ("bytes=-1", 99..100),
        ("bytes=-100", 0..100),
        ("bytes=-1000", 0..100),
    ];
    for (range, want) in cases {
        let expected_range = format!("bytes {}-{}/100", want.start, want.end - 1);
        let r = s.get_with(KEY, &[("Range", range)]).await;
        assert_eq!(r.status, 206, "{range}: {r}");
        assert_eq!(r.body, &body[want.clone()], "{range}");
        assert_eq!(r.must_header("content-range"), expected_range, "{range}");
        assert_eq!(r.must_header("content-length"), want.len().to_string(), "{range}");
        assert_eq!(r.must_header("etag"), etag, "{range}");
        assert_object_headers(&r);

        let h = s.head_with(KEY, &[("Range", range)]).await;
        assert_eq!(h.status, 206, "HEAD {range}: {h}");
        assert!(h.body.is_empty());
        assert_eq!(h.must_header("content-range"), expected_range, "HEAD {range}");
        assert_eq!(h.must_header("content-length"), want.len().to_string(), "HEAD {range}");
    }
}

async fn other_range_forms(s: TestServer) {
    let body = pattern(100);
    let etag = put_ok(&s, KEY, body.clone()).await;
    // Several ranges: documented to answer 200 with the whole object.
    // Ranges zarrd does not understand are ignored (RFC 9110 §14.2).
    for range in ["bytes=0-1,4-5", "items=0-9", "bytes=9-3", "bytes=x-y"] {
        let r = s.get_with(KEY, &[("Range", range)]).await;
        assert_eq!(r.status, 200, "{range}: {r}");
        assert_eq!(r.body, body, "{range}");
        assert!(r.header("content-range").is_none(), "{range}: {r}");
    }
    // If-Range: a current validator applies the range, a stale one serves everything.
    let r = s.get_with(KEY, &[("Range", "bytes=0-9"), ("If-Range", &etag)]).await;
    r.expect_status(206);
    assert_eq!(r.body, &body[..10]);
    let r = s.get_with(KEY, &[("Range", "bytes=0-9"), ("If-Range", "\"stale\"")]).await;
    r.expect_status(200);
    assert_eq!(r.body, body);
}

async fn unsatisfiable_ranges_are_416(s: TestServer) {
    put_ok(&s, KEY, pattern(100)).await;
    for range in ["bytes=100-", "bytes=100-200", "bytes=1000-2000", "bytes=-0"] {
        let r = s.get_with(KEY, &[("Range", range)]).await;
        r.expect_error(416, "range_not_satisfiable");
        assert_eq!(r.must_header("content-range"), "bytes */100", "{range}");
        let h = s.head_with(KEY, &[("Range", range)]).await;
        assert_eq!(h.status, 416, "HEAD {range}: {h}");
        assert_eq!(h.must_header("content-range"), "bytes */100", "HEAD {range}");
    }
    s.put("/zarr/data/empty", Vec::new()).await.expect_status(201);
    let r = s.get_with("/zarr/data/empty", &[("Range", "bytes=0-")]).await;
    r.expect_error(416, "range_not_satisfiable");
    assert_eq!(r.must_header("content-range"), "bytes */0");
}

async fn conditional_reads(s: TestServer) {
    let body = pattern(64);
    let etag = put_ok(&s, KEY, body.clone()).await;
    let last_modified = s.get(KEY).await.must_header("last-modified").to_string();
    let weak = format!("W/{etag}");

    let list = format!("\"a\", {etag}");
    let cases: [(&str, Vec<(&str, &str)>); 6] = [
        ("If-None-Match: current", vec![("If-None-Match", &etag)]),
        ("If-None-Match: weak current", vec![("If-None-Match", &weak)]),
        ("If-None-Match: a list holding the current", vec![("If-None-Match", &list)]),
        ("If-None-Match: *", vec![("If-None-Match", "*")]),
        ("If-Modified-Since: Last-Modified", vec![("If-Modified-Since", &last_modified)]),
        ("If-None-Match with Range", vec![("If-None-Match", &etag), ("Range", "bytes=0-9")]),
    ];
    for (what, headers) in &cases {
        let r = s.get_with(KEY, headers).await;
        assert_eq!(r.status, 304, "GET {what}: {r}");
        assert!(r.body.is_empty(), "{what}: 304 with a body");
        assert_eq!(r.must_header("etag"), etag, "{what}: 304 must carry the ETag");
        http_date(r.must_header("date"));
        let h = s.head_with(KEY, headers).await;
        assert_eq!(h.status, 304, "HEAD {what}: {h}");
    }

    // Conditions that do not hold: the object is served.
    let r = s.get_with(KEY, &[("If-None-Match", "\"something-else\"")]).await;
    r.expect_status(200);
    assert_eq!(r.body, body);
    let r = s.get_with(KEY, &[("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")]).await;
    r.expect_status(200);
    // If-None-Match wins over If-Modified-Since (RFC 9110 §13.1.3).
    let r = s.get_with(KEY, &[("If-None-Match", "\"other\""), ("If-Modified-Since", last_modified.as_str())]).await;
    r.expect_status(200);

    // If-Match: a match serves (TensorStore reads shard ranges this way), a mismatch is 412.
    let r = s.get_with(KEY, &[("If-Match", &etag), ("Range", "bytes=-16")]).await;
    r.expect_status(206);
    assert_eq!(r.body, &body[48..]);
    let r = s.get_with(KEY, &[("If-Match", "\"x\", *")]).await;
    r.expect_status(200);
    for headers in [
        vec![("If-Match", "\"not-the-etag\"")],
        vec![("If-Match", "\"not-the-etag\""), ("Range", "bytes=-16")],
        vec![("If-Match", weak.as_str())],
    ] {
        let r = s.get_with(KEY, &headers).await;
        r.expect_error(412, "precondition_failed");
        assert!(r.error_message().contains("arr/c/0/0"), "message should name the key: {r}");
        let h = s.head_with(KEY, &headers).await;
        assert_eq!(h.status, 412, "HEAD {headers:?}: {h}");
    }
}

async fn missing_keys_are_404_however_asked(s: TestServer) {
    put_ok(&s, "/zarr/data/obj", "x").await;
    put_ok(&s, "/zarr/data/dir/inner", "x").await;
    let missing = "/zarr/data/arr/c/9/9";
    for headers in [
        vec![],
        vec![("Range", "bytes=-16")],
        vec![("Range", "bytes=0-99")],
        vec![("Range", "bytes=100-")],
        vec![("If-Match", "\"abc\"")],
        vec![("If-Match", "\"abc\""), ("Range", "bytes=-16")],
        vec![("If-None-Match", "*")],
        vec![("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")],
    ] {
        let r = s.get_with(missing, &headers).await;
        r.expect_error(404, "not_found");
        assert!(r.error_message().contains("arr/c/9/9"), "message should name the key: {r}");
        assert!(r.header("etag").is_none(), "{r}");
        let h = s.head_with(missing, &headers).await;
        assert_eq!(h.status, 404, "HEAD {headers:?}: {h}");
        assert!(h.body.is_empty());
    }
    // Below an object, and a "directory" read as a key.
    s.get_with("/zarr/data/obj/x", &[("Range", "bytes=-16")]).await.expect_error(404, "not_found");
    // A prefix read as a key redirects to its listing.
    for headers in [vec![], vec![("Range", "bytes=-16")]] {
        let r = s.get_with("/zarr/data/dir", &headers).await;
        r.expect_status(301);
        assert_eq!(r.must_header("location"), "/zarr/data/dir/", "{r}");
    }
    // A prefix with nothing under it.
    s.get("/zarr/data/nothing/here/").await.expect_error(404, "not_found");
}

async fn put_answers_201_then_204(s: TestServer) {
    let r = s.put(KEY, "first").await;
    r.expect_status(201);
    let e1 = r.must_header("etag").to_string();
    assert_quoted_etag(&e1);
    assert!(r.body.is_empty(), "{r}");
    let r = s.put(KEY, "second, longer").await;
    r.expect_status(204);
    let e2 = r.must_header("etag").to_string();
    assert_quoted_etag(&e2);
    assert_ne!(e1, e2, "a new value needs a new ETag");
    let g = s.get(KEY).await;
    g.expect_status(200);
    assert_eq!(g.text(), "second, longer");
    assert_eq!(g.must_header("etag"), e2);
    // Replacing with the same bytes is still a replacement.
    s.put(KEY, "second, longer").await.expect_status(204);
    // After a delete, a PUT creates again.
    s.delete(KEY).await.expect_status(204);
    s.put(KEY, "third").await.expect_status(201);
}

async fn conditional_puts(s: TestServer) {
    // If-None-Match: * creates only.
    let r = s.put_with(KEY, "v1", &[("If-None-Match", "*")]).await;
    r.expect_status(201);
    let e1 = r.must_header("etag").to_string();
    let r = s.put_with(KEY, "v1b", &[("If-None-Match", "*")]).await;
    r.expect_status(412);
    assert!(r.json().get("error").is_some(), "{r}");
    assert_eq!(s.get(KEY).await.text(), "v1");

    // If-Match: the current ETag replaces, a stale one is 412 and changes nothing.
    let r = s.put_with(KEY, "v2", &[("If-Match", &e1)]).await;
    r.expect_status(204);
    let e2 = r.must_header("etag").to_string();
    let r = s.put_with(KEY, "v3", &[("If-Match", &e1)]).await;
    r.expect_error(412, "precondition_failed");
    assert_eq!(s.get(KEY).await.text(), "v2");
    let r = s.put_with(KEY, "v3", &[("If-Match", &format!("\"zzz\", {e2}"))]).await;
    r.expect_status(204);
    let r = s.put_with(KEY, "v4", &[("If-Match", "*")]).await;
    r.expect_status(204);
    assert_eq!(s.get(KEY).await.text(), "v4");

    // If-Match on a missing key fails: there is nothing to match.
    let other = "/zarr/data/arr/c/1/1";
    s.put_with(other, "x", &[("If-Match", "*")]).await.expect_error(412, "precondition_failed");
    s.put_with(other, "x", &[("If-Match", &e2)]).await.expect_error(412, "precondition_failed");
    s.get(other).await.expect_status(404);

    // If-None-Match with ETags, If-Unmodified-Since, and DELETE's preconditions are evaluated,
    // not ignored (round 12, a black-box attack: each of these replaced or deleted the key).
    let e4 = s.get(KEY).await.must_header("etag").to_string();
    let weak = format!("W/{e4}");
    for (name, value) in [
        ("If-None-Match", e4.as_str()),
        ("If-None-Match", weak.as_str()),
        ("If-None-Match", "\"zzz\", *"),
        ("If-Unmodified-Since", "Thu, 01 Jan 1970 00:00:00 GMT"),
    ] {
        let r = s.put_with(KEY, "lost", &[(name, value)]).await;
        r.expect_error(412, "precondition_failed");
        let r = s.send(s.request("DELETE", KEY).header(name, value)).await;
        r.expect_error(412, "precondition_failed");
        assert!(r.error_message().contains(name), "{name}: {}", r.error_message());
    }
    let r = s.send(s.request("DELETE", KEY).header("If-Match", "\"nope\"")).await;
    r.expect_error(412, "precondition_failed");
    assert_eq!(s.get(KEY).await.text(), "v4");
    // ... and write or delete when they hold.
    let r = s
        .put_with(KEY, "v5", &[("If-None-Match", "\"zzz\""), ("If-Unmodified-Since", "Fri, 01 Jan 2100 00:00:00 GMT")])
        .await;
    r.expect_status(204);
    let e5 = r.must_header("etag").to_string();
    s.put_with(other, "y", &[("If-None-Match", "\"zzz\"")]).await.expect_status(201);
    s.send(s.request("DELETE", other).header("If-None-Match", "*")).await.expect_error(412, "precondition_failed");
    s.send(s.request("DELETE", KEY).header("If-Match", &e5)).await.expect_status(204);
    s.get(KEY).await.expect_status(404);
    s.send(s.request("DELETE", KEY).header("If-Match", "*")).await.expect_error(412, "precondition_failed");
    s.send(s.request("DELETE", other).header("If-Unmodified-Since", "Fri, 01 Jan 2100 00:00:00 GMT"))
        .await
        .expect_status(204);
}

async fn etags_change_on_every_write(s: TestServer) {
    // Same length every time, written back to back: an ETag made of size and
    // a coarse time would repeat, and a client's If-Match / If-None-Match
    // would then accept a version it never saw.
    let mut seen = BTreeSet::new();
    let mut previous: Option<String> = None;
    for i in 0..40 {
        let etag = put_ok(&s, KEY, format!("version {i:04}")).await;
        assert!(seen.insert(etag.clone()), "write {i} repeated an earlier ETag {etag}");
        if let Some(old) = &previous {
            let r = s.get_with(KEY, &[("If-None-Match", old)]).await;
            assert_eq!(r.status, 200, "write {i}: If-None-Match with the previous ETag: {r}");
            assert_eq!(r.text(), format!("version {i:04}"));
        }
        previous = Some(etag);
    }
    // A stale If-Match from several writes ago must not succeed.
    let first = put_ok(&s, KEY, "stale-check-0").await;
    put_ok(&s, KEY, "stale-check-1").await;
    put_ok(&s, KEY, "stale-check-2").await;
    s.put_with(KEY, "stale-check-3", &[("If-Match", &first)]).await.expect_error(412, "precondition_failed");
}

async fn deletes_are_204_and_idempotent(s: TestServer) {
    put_ok(&s, KEY, "x").await;
    let r = s.delete(KEY).await;
    r.expect_status(204);
    assert!(r.body.is_empty());
    s.get(KEY).await.expect_error(404, "not_found");
    s.delete(KEY).await.expect_status(204);
    s.delete("/zarr/data/never/existed").await.expect_status(204);
    // Deleting one key leaves its neighbours alone.
    put_ok(&s, "/zarr/data/arr/c/0/1", "keep").await;
    put_ok(&s, KEY, "x").await;
    s.delete(KEY).await.expect_status(204);
    assert_eq!(s.get("/zarr/data/arr/c/0/1").await.text(), "keep");
}

/// Store keys that must be refused (appended to `/zarr/data/`, sent raw).
const UNSAFE_KEYS: &[&str] = &[
    "..",
    "../x",
    "a/../b",
    "a/..",
    ".",
    "./x",
    "a/./b",
    "a/.",
    "a//b",
    "/x",
    "%2e%2e/x",
    "%2E%2E/x",
    ".%2e/x",
    "%2e./x",
    "a/%2e%2e/b",
    "a/%2e",
    "..%2fx",
    "a%2f..%2fb",
    "%2f..",
    "%2fx",
    "a%2f%2fb",
    "a\\b",
    "..\\x",
    "a%5cb",
    "..%5cx",
    "%5C",
    "a%00b",
    "%00",
    "a%0ab",
    "a%0d%0ab",
    "%ff",
    "%c0%ae%c0%ae",
];

async fn unsafe_keys_are_400(s: TestServer) {
    for key in UNSAFE_KEYS {
        let target = format!("/zarr/data/{key}");
        for method in ["GET", "PUT", "DELETE"] {
            s.raw(method, &target, &[], b"payload").await.expect_error(400, "invalid_key");
        }
        let h = s.raw("HEAD", &target, &[], b"").await;
        assert_eq!(h.status, 400, "HEAD {target}: {h}");
        let p = s.raw("PROPFIND", &target, &[("Depth", "1")], b"").await;
        assert_eq!(p.status, 400, "PROPFIND {target}: {p}");
    }
    // Too long a key (S3's limit is 1024 bytes).
    let long = format!("/zarr/data/{}", "k".repeat(1025));
    s.raw("PUT", &long, &[], b"x").await.expect_error(400, "invalid_key");
    s.raw("GET", &long, &[], b"").await.expect_error(400, "invalid_key");
    // A prefix is not a key.
    s.raw("PUT", "/zarr/data/arr/", &[], b"x").await.expect_error(400, "invalid_key");
    s.raw("DELETE", "/zarr/data/arr/", &[], b"").await.expect_error(400, "invalid_key");
    // Listings of unsafe prefixes.
    for prefix in ["../", "%2e%2e/", "a//", "a/./", "..%5c/"] {
        let r = s.raw("GET", &format!("/zarr/data/{prefix}"), &[], b"").await;
        assert_eq!(r.status, 400, "GET /zarr/data/{prefix}: {r}");
    }
    // Nothing was written anywhere.
    let listing = s.get_with("/zarr/data/", &[("Accept", "application/json")]).await;
    listing.expect_status(200);
    assert_eq!(listing.json()["entries"], serde_json::json!([]), "unsafe PUTs stored something: {listing}");
}

async fn unknown_mount_is_404(s: TestServer) {
    for (method, path) in [
        ("GET", "/zarr/nope/x"),
        ("GET", "/zarr/nope/"),
        ("GET", "/zarr/nope"),
        ("PUT", "/zarr/nope/x"),
        ("DELETE", "/zarr/nope/x"),
        ("PROPFIND", "/zarr/nope/"),
        ("MKCOL", "/zarr/nope/d"),
    ] {
        let r = s.send(s.request(method, path).body("x")).await;
        r.expect_error(404, "unknown_mount");
        assert!(r.error_message().contains("nope"), "{method} {path}: message should name the mount: {r}");
    }
    let h = s.head_with("/zarr/nope/x", &[]).await;
    assert_eq!(h.status, 404);
    // Mount names that would escape are just unknown mounts.
    for target in ["/zarr/../data/x", "/zarr/%2e%2e/x", "/zarr/data%2f..%2fdata/x"] {
        let r = s.raw("GET", target, &[], b"").await;
        assert!(r.status == 404 || r.status == 400, "GET {target}: {r}");
    }
}

async fn read_only_mount_refuses_writes_with_405(s: TestServer) {
    put_ok(&s, KEY, "through data").await;
    for (method, path) in [
        ("PUT", "/zarr/ro/arr/c/0/0"),
        ("PUT", "/zarr/ro/new"),
        ("DELETE", "/zarr/ro/arr/c/0/0"),
        ("MKCOL", "/zarr/ro/d"),
        // A key a write could not take anyway: the mount says no first.
        ("DELETE", "/zarr/ro/arr/c/0/"),
        ("PUT", "/zarr/ro/arr/c/0/"),
    ] {
        let r = s.send(s.request(method, path).body("x")).await;
        r.expect_error(405, "read_only");
        let allow = r.must_header("allow").to_ascii_uppercase();
        let allowed: BTreeSet<&str> = allow.split(',').map(str::trim).collect();
        assert!(allowed.contains("GET") && allowed.contains("HEAD"), "{method} {path}: Allow {allow}");
        assert!(!allowed.contains("PUT") && !allowed.contains("DELETE"), "{method} {path}: Allow {allow}");
        assert!(r.error_message().contains("ro"), "message should name the mount: {r}");
    }
    // Conditional and oversized writes are refused the same way.
    let r = s.put_with("/zarr/ro/new", vec![0u8; 10], &[("If-None-Match", "*")]).await;
    r.expect_error(405, "read_only");
    s.get("/zarr/ro/new").await.expect_status(404);
    // Reads work.
    s.send(s.request("PROPFIND", "/zarr/ro/").header("Depth", "1")).await.expect_status(207);
    s.get("/zarr/ro/").await.expect_status(200);
    if s.backend != Backend::Memory {
        // `ro` shares storage with `data` here: the object is still there and readable.
        let r = s.get("/zarr/ro/arr/c/0/0").await;
        r.expect_status(200);
        assert_eq!(r.text(), "through data");
    }
    assert_eq!(s.get(KEY).await.text(), "through data");
}

async fn bodies_over_the_limit_are_413(s: TestServer) {
    let limit = usize::try_from(MAX_PUT).unwrap();
    // Exactly the limit is fine.
    let body = pattern(limit);
    s.put(KEY, body.clone()).await.expect_status(201);
    assert_eq!(s.get(KEY).await.body, body);

    // One byte over, with Content-Length: refused, nothing changes.
    let r = s.put(KEY, pattern(limit + 1)).await;
    r.expect_error(413, "payload_too_large");
    assert_eq!(s.get(KEY).await.body, body, "the old value must survive a refused PUT");
    let new_key = "/zarr/data/arr/c/0/9";
    s.put(new_key, pattern(limit + 1)).await.expect_error(413, "payload_too_large");
    s.get(new_key).await.expect_status(404);

    // Chunked (no Content-Length): refused once the limit is passed.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..9).map(|_| Ok(vec![7u8; 8 * 1024])).collect();
    let stream = futures::stream::iter(chunks);
    let rb = s.request("PUT", new_key).body(reqwest::Body::wrap_stream(stream));
    let r = s.send(rb).await;
    r.expect_error(413, "payload_too_large");
    s.get(new_key).await.expect_status(404);

    // A small chunked body is stored whole.
    let parts: Vec<Result<&'static [u8], std::io::Error>> = vec![Ok(b"chunk"), Ok(b"ed "), Ok(b"body")];
    let rb = s.request("PUT", new_key).body(reqwest::Body::wrap_stream(futures::stream::iter(parts)));
    s.send(rb).await.expect_status(201);
    assert_eq!(s.get(new_key).await.text(), "chunked body");
}

async fn invalid_metadata_is_422(s: TestServer) {
    for (key, body, field) in INVALID_METADATA {
        let path = format!("/zarr/data/{key}");
        let r = s.put(&path, *body).await;
        assert_eq!(r.status, 422, "PUT {key} {body}: {r}");
        r.expect_error(422, "invalid_metadata");
        let message = r.error_message();
        assert!(message.contains(key), "the message should name the key {key}: {message}");
        assert!(message.contains(field), "the message should name `{field}` for {body}: {message}");
        s.get(&path).await.expect_status(404);
    }
    // An invalid document does not replace a valid one.
    let (key, doc) = VALID_METADATA[0];
    let path = format!("/zarr/data/{key}");
    put_ok(&s, &path, doc).await;
    s.put(&path, "{broken").await.expect_error(422, "invalid_metadata");
    s.put_with(&path, "{broken", &[("If-None-Match", "*")]).await.expect_status(422);
    assert_eq!(s.get(&path).await.text(), doc);
}

async fn valid_metadata_and_chunks_are_stored(s: TestServer) {
    for (key, doc) in VALID_METADATA {
        let path = format!("/zarr/data/{key}");
        s.put(&path, *doc).await.expect_status(201);
        assert_eq!(s.get(&path).await.text(), *doc, "{key}");
    }
    // Chunk bytes are stored as given, even when they look like broken JSON.
    for key in ["grp/arr/c/0/0", "v2/arr/0.0", "zarr.json.bak", "v2/arr/.zarray.tmp"] {
        let path = format!("/zarr/data/{key}");
        s.put(&path, "{not json").await.expect_status(201);
        assert_eq!(s.get(&path).await.text(), "{not json", "{key}");
    }
}

async fn odd_but_valid_keys_round_trip(s: TestServer) {
    // (path as sent, key as stored)
    let cases = [
        ("sp%20ace/x%2Bplus", "sp ace/x+plus"),
        ("x..y/..z", "x..y/..z"),
        ("a/.zattrs", "a/.zattrs"),
        ("v2/0.1.2", "v2/0.1.2"),
        ("pct%2525", "pct%25"),
        ("%C3%A9/%C3%BC", "é/ü"),
        ("semi;colon=eq", "semi;colon=eq"),
        ("q%3Fmark", "q?mark"),
    ];
    for (sent, key) in cases {
        let path = format!("/zarr/data/{sent}");
        let body = format!("{{\"value of\": \"{key}\"}}");
        let r = s.raw("PUT", &path, &[], body.as_bytes()).await;
        assert_eq!(r.status, 201, "PUT {sent}: {r}");
        let r = s.raw("GET", &path, &[], b"").await;
        assert_eq!(r.status, 200, "GET {sent}: {r}");
        assert_eq!(r.text(), body, "GET {sent}");
        let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
        let listing_path = if dir.is_empty() {
            "/zarr/data/".to_string()
        } else {
            format!("/zarr/data/{}/", sent.rsplit_once('/').map_or("", |(d, _)| d))
        };
        let l = s.raw("GET", &listing_path, &[("Accept", "application/json")], b"").await;
        assert_eq!(l.status, 200, "listing for {key}: {l}");
        let names: Vec<String> =
            l.json()["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect();
        assert!(names.iter().any(|n| n == name), "{key}: {name} not in listing {names:?}");
        s.raw("DELETE", &path, &[], b"").await.expect_status(204);
        s.raw("GET", &path, &[], b"").await.expect_status(404);
    }
}

async fn common_headers_on_every_answer(s: TestServer) {
    let put = s.put(KEY, pattern(100)).await;
    let etag = put.must_header("etag").to_string();
    let answers = vec![
        ("PUT 201", put),
        ("PUT 204", s.put(KEY, pattern(101)).await),
        ("GET 200", s.get(KEY).await),
        ("HEAD 200", s.head_with(KEY, &[]).await),
        ("GET 206", s.get_with(KEY, &[("Range", "bytes=1-2")]).await),
        ("GET 304", s.get_with(KEY, &[("If-None-Match", "*")]).await),
        ("GET 404", s.get("/zarr/data/missing").await),
        ("GET 412", s.get_with(KEY, &[("If-Match", "\"no\"")]).await),
        ("GET 416", s.get_with(KEY, &[("Range", "bytes=500-")]).await),
        ("GET 400", s.raw("GET", "/zarr/data/a/../b", &[], b"").await),
        ("PUT 405", s.put("/zarr/ro/x", "x").await),
        ("PUT 422", s.put("/zarr/data/zarr.json", "nope").await),
        ("DELETE 204", s.delete("/zarr/data/missing").await),
        ("listing 200", s.get("/zarr/data/").await),
        ("no route 404", s.get("/nowhere").await),
    ];
    for (what, r) in &answers {
        http_date(r.header("date").unwrap_or_else(|| panic!("{what}: no Date: {r}")));
        assert!(r.header("x-request-id").is_some_and(|v| !v.is_empty()), "{what}: no request id: {r}");
        match r.status {
            200 | 206 if !what.starts_with("listing") => assert_object_headers(r),
            201 | 204 if what.starts_with("PUT") => assert_quoted_etag(r.must_header("etag")),
            304 => assert_quoted_etag(r.must_header("etag")),
            400..=599 => assert!(r.json().get("error").is_some(), "{what}: no error envelope: {r}"),
            _ => {}
        }
    }
    assert_ne!(answers[1].1.must_header("etag"), etag);
    // A request id from the client is echoed.
    let r = s.get_with(KEY, &[("X-Request-Id", "test-id-123")]).await;
    assert_eq!(r.must_header("x-request-id"), "test-id-123");
}

async fn ranges_are_never_content_encoded(s: TestServer) {
    // Highly compressible bodies: a compression layer would be tempted.
    let zeros = vec![0u8; 32 * 1024];
    put_ok(&s, KEY, zeros.clone()).await;
    let attrs = "a".repeat(16 * 1024);
    let doc = format!("{{\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": {{\"pad\": \"{attrs}\"}}}}");
    put_ok(&s, "/zarr/data/grp/zarr.json", doc.clone()).await;
    let accept = ("Accept-Encoding", "gzip, deflate, br, zstd");
    for (path, full) in [(KEY, zeros.as_slice()), ("/zarr/data/grp/zarr.json", doc.as_bytes())] {
        let n = full.len();
        for (range, want) in [("bytes=0-8191", 0..8192), ("bytes=100-", 100..n), ("bytes=-4096", n - 4096..n)] {
            let r = s.raw("GET", path, &[accept, ("Range", range)], b"").await;
            assert_eq!(r.status, 206, "{path} {range}: {r}");
            assert!(r.header("content-encoding").is_none(), "{path} {range}: encoded range: {:?}", r.headers);
            assert_eq!(r.must_header("content-length"), want.len().to_string(), "{path} {range}");
            assert_eq!(r.body, &full[want], "{path} {range}");
        }
    }
    // Whole chunks are not encoded either.
    let r = s.raw("GET", KEY, &[accept], b"").await;
    r.expect_status(200);
    assert!(r.header("content-encoding").is_none(), "encoded chunk: {:?}", r.headers);
    assert_eq!(r.body, zeros);
}

async fn cors_on_success_error_and_preflight(s: TestServer) {
    put_ok(&s, KEY, pattern(10)).await;
    let origin = ("Origin", "http://viewer.example");
    let own_origin = s.url("");
    let own = ("Origin", own_origin.trim_end_matches('/'));
    let answers = [
        ("GET 200", s.get_with(KEY, &[origin]).await),
        ("GET 206", s.get_with(KEY, &[origin, ("Range", "bytes=0-1")]).await),
        ("GET 404", s.get_with("/zarr/data/missing", &[origin]).await),
        ("GET 416", s.get_with(KEY, &[origin, ("Range", "bytes=50-")]).await),
        ("GET 412", s.get_with(KEY, &[origin, ("If-Match", "\"x\"")]).await),
        ("GET 400", s.raw("GET", "/zarr/data/%2e%2e/x", &[origin], b"").await),
        ("GET unknown mount", s.get_with("/zarr/nope/x", &[origin]).await),
        // Writes: only from the server's own origin (or a listed one).
        ("PUT 403", s.put_with("/zarr/data/new", "x", &[origin]).await),
        ("PUT 405", s.put_with("/zarr/ro/x", "x", &[own]).await),
        ("PUT 201", s.put_with("/zarr/data/new", "x", &[own]).await),
    ];
    for (what, r) in &answers {
        assert_eq!(r.header("access-control-allow-origin"), Some("*"), "{what}: {r}");
        let exposed = r.header("access-control-expose-headers").unwrap_or_default().to_ascii_lowercase();
        for h in ["content-range", "content-length", "etag", "accept-ranges", "last-modified"] {
            assert!(exposed.contains(h), "{what}: {h} not exposed: {exposed:?}");
        }
    }

    for method in ["GET", "PUT", "DELETE", "HEAD", "PROPFIND"] {
        let r = s
            .send(with_headers(
                s.request("OPTIONS", KEY),
                &[
                    origin,
                    ("Access-Control-Request-Method", method),
                    ("Access-Control-Request-Headers", "range, if-none-match, if-match, authorization, content-type"),
                ],
            ))
            .await;
        assert!(r.status == 200 || r.status == 204, "preflight {method}: {r}");
        assert_eq!(r.header("access-control-allow-origin"), Some("*"), "preflight {method}: {r}");
        let methods = r.must_header("access-control-allow-methods").to_ascii_uppercase();
        // Reads are open to every origin; writes to listed ones only.
        let allowed = methods.split(',').any(|m| m.trim() == method);
        assert_eq!(allowed, !matches!(method, "PUT" | "DELETE"), "preflight {method}: allow-methods {methods}");
        let allowed = r.must_header("access-control-allow-headers").to_ascii_lowercase();
        for h in ["range", "if-none-match", "if-match", "authorization", "content-type"] {
            assert!(allowed.split(',').any(|a| a.trim() == h), "preflight {method}: {h} not allowed: {allowed}");
        }
    }
}

/// The `href` values of an HTML document.
fn html_links(html: &str) -> Vec<String> {
    html.split("href=\"").skip(1).filter_map(|s| s.split('"').next()).map(|s| s.replace("&amp;", "&")).collect()
}

/// `(href, is_collection, getcontentlength, getetag)` of a multistatus document.
fn dav_entries(xml: &str) -> Vec<(String, bool, Option<u64>, Option<String>)> {
    let unescape = |s: &str| s.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    let between = |s: &str, open: &str, close: &str| {
        s.split_once(open).and_then(|(_, rest)| rest.split_once(close)).map(|(v, _)| unescape(v))
    };
    xml.split("<response>")
        .skip(1)
        .map(|resp| {
            (
                between(resp, "<href>", "</href>").expect("href"),
                resp.contains("<collection/>"),
                between(resp, "<getcontentlength>", "</getcontentlength>").map(|v| v.parse().unwrap()),
                between(resp, "<getetag>", "</getetag>"),
            )
        })
        .collect()
}

async fn make_tree(s: &TestServer) -> String {
    let (_, group) = VALID_METADATA[0];
    let (_, array) = VALID_METADATA[1];
    let etag = put_ok(s, "/zarr/data/grp/zarr.json", group).await;
    put_ok(s, "/zarr/data/grp/arr/zarr.json", array).await;
    put_ok(s, "/zarr/data/grp/arr/c/0/0", pattern(24)).await;
    put_ok(s, "/zarr/data/grp/a%20b.bin", "spaced").await;
    etag
}

async fn html_and_json_listings(s: TestServer) {
    let etag = make_tree(&s).await;
    let url = s.url("/zarr/data/grp/");
    let r = s.get("/zarr/data/grp/").await;
    r.expect_status(200);
    assert!(r.must_header("content-type").starts_with("text/html"), "{r}");
    let links = html_links(&r.text());
    let expected: BTreeSet<&str> = ["../", "a%20b.bin", "arr/", "zarr.json"].into_iter().collect();
    assert_eq!(links.iter().map(String::as_str).collect::<BTreeSet<_>>(), expected, "{}", r.text());
    let base = url::Url::parse(&url).unwrap();
    for link in &links {
        assert!(!link.starts_with('/') && !link.contains("://"), "link {link} is not relative");
        let target = base.join(link).unwrap();
        let got = s.send(s.client.get(target.as_str())).await;
        assert_eq!(got.status, 200, "link {link} -> {target}: {got}");
    }

    let j = s.get_with("/zarr/data/grp/", &[("Accept", "application/json")]).await;
    j.expect_status(200);
    assert!(j.must_header("content-type").starts_with("application/json"));
    let v = j.json();
    assert_eq!(v["mount"], "data");
    assert_eq!(v["prefix"], "grp");
    assert_eq!(v["truncated"], false);
    let entries = v["entries"].as_array().unwrap();
    let names: Vec<&str> = entries.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a b.bin", "arr/", "zarr.json"], "{v}");
    assert_eq!(entries[1]["kind"], "prefix");
    let doc = &entries[2];
    assert_eq!(doc["kind"], "object");
    assert_eq!(doc["size"], VALID_METADATA[0].1.len());
    assert_eq!(doc["etag"], etag.as_str(), "listing ETag differs from GET's");
    assert!(doc["last_modified"].is_string());

    let root = s.get_with("/zarr/data/", &[("Accept", "application/json")]).await;
    root.expect_status(200);
    assert_eq!(root.json()["entries"][0]["name"], "grp/");
    let root_html = s.get("/zarr/data/").await;
    assert!(html_links(&root_html.text()).contains(&"grp/".to_string()), "{root_html}");

    s.get("/zarr/data/grp/arr/c/").await.expect_status(200);
    s.get("/zarr/data/nope/").await.expect_error(404, "not_found");
}

async fn listing_links_never_take_a_scheme_from_a_key(s: TestServer) {
    // A writer (or a bucket's owner) picks key names: a key named like a
    // `javascript:` URL must stay a relative link to itself, and the page
    // allows no script anyway.
    let names = ["javascript:fetch('x',{method:'DELETE'})", "JaVaScRiPt:alert(4)", "data:text,hi", "a:b"];
    for name in names {
        let encoded: String =
            url::form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>().replace('+', "%20");
        put_ok(&s, &format!("/zarr/data/hostile/{encoded}"), "x").await;
    }
    let url = url::Url::parse(&s.url("/zarr/data/hostile/")).unwrap();
    let r = s.get("/zarr/data/hostile/").await;
    r.expect_status(200);
    let csp = r.must_header("content-security-policy");
    assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"), "{csp}");
    assert_eq!(r.must_header("x-content-type-options"), "nosniff");
    let links = html_links(&r.text());
    assert_eq!(links.len(), names.len() + 1, "{}", r.text());
    for link in links.iter().filter(|l| *l != "../") {
        assert!(!link.contains(':'), "link {link} has a scheme separator");
        let target = url.join(link).unwrap();
        assert_eq!(target.scheme(), "http", "{link} -> {target}");
        let got = s.send(s.client.get(target.as_str())).await;
        assert_eq!((got.status, got.text()), (200, "x".to_string()), "link {link} -> {target}");
    }
}

async fn mount_root_listing_links_resolve(s: TestServer) {
    // `/zarr/data` without the slash: wherever it leads, its links must lead
    // where they say (relative links resolve against the URL the browser shows).
    make_tree(&s).await;
    let mut url = url::Url::parse(&s.url("/zarr/data")).unwrap();
    let mut r = s.send(s.client.get(url.as_str())).await;
    for _ in 0..3 {
        if !(300..400).contains(&r.status) {
            break;
        }
        url = url.join(r.must_header("location")).unwrap();
        r = s.send(s.client.get(url.as_str())).await;
    }
    assert_eq!(r.status, 200, "GET /zarr/data (after redirects to {url}): {r}");
    assert_eq!(url.path(), "/zarr/data/");
    let links = html_links(&r.text());
    assert!(links.contains(&"grp/".to_string()), "{r}");
    for link in links {
        let target = url.join(&link).unwrap();
        let got = s.send(s.client.get(target.as_str())).await;
        assert_eq!(got.status, 200, "link {link} on {url} -> {target}: {got}");
    }
    // A prefix without its slash redirects the same way, keeping the query.
    let r = s.get("/zarr/data/grp/arr?x=1").await;
    r.expect_status(301);
    assert_eq!(r.must_header("location"), "/zarr/data/grp/arr/?x=1");
}

async fn propfind(s: &TestServer, path: &str, depth: Option<&str>) -> Reply {
    let mut rb = s.request("PROPFIND", path);
    if let Some(d) = depth {
        rb = rb.header("Depth", d);
    }
    s.send(rb).await
}

async fn propfind_depths(s: TestServer) {
    let etag = make_tree(&s).await;
    let hrefs = |r: &Reply| dav_entries(&r.text()).into_iter().map(|e| e.0).collect::<BTreeSet<_>>();
    let set = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<BTreeSet<_>>();

    let r = propfind(&s, "/zarr/data/grp/", Some("0")).await;
    r.expect_status(207);
    assert!(r.must_header("content-type").contains("xml"), "{r}");
    assert_eq!(hrefs(&r), set(&["/zarr/data/grp/"]));
    assert!(dav_entries(&r.text())[0].1, "the prefix is a collection");

    let depth1 =
        set(&["/zarr/data/grp/", "/zarr/data/grp/a%20b.bin", "/zarr/data/grp/arr/", "/zarr/data/grp/zarr.json"]);
    for path in ["/zarr/data/grp/", "/zarr/data/grp"] {
        let r = propfind(&s, path, Some("1")).await;
        r.expect_status(207);
        assert_eq!(hrefs(&r), depth1, "Depth 1 on {path}");
        for (href, collection, length, getetag) in dav_entries(&r.text()) {
            assert_eq!(collection, href.ends_with('/'), "{href}");
            if href.ends_with("zarr.json") {
                assert_eq!(length, Some(VALID_METADATA[0].1.len() as u64));
                assert_eq!(getetag.as_deref(), Some(etag.as_str()), "PROPFIND ETag differs from GET's");
            }
        }
    }

    let all = set(&[
        "/zarr/data/grp/",
        "/zarr/data/grp/a%20b.bin",
        "/zarr/data/grp/arr/c/0/0",
        "/zarr/data/grp/arr/zarr.json",
        "/zarr/data/grp/zarr.json",
    ]);
    for depth in [Some("infinity"), Some("Infinity"), None] {
        let r = propfind(&s, "/zarr/data/grp/", depth).await;
        r.expect_status(207);
        assert_eq!(hrefs(&r), all, "Depth {depth:?}");
    }

    let r = propfind(&s, "/zarr/data/", Some("1")).await;
    r.expect_status(207);
    assert_eq!(hrefs(&r), set(&["/zarr/data/", "/zarr/data/grp/"]));

    // An object.
    let r = propfind(&s, "/zarr/data/grp/arr/c/0/0", Some("0")).await;
    r.expect_status(207);
    let entries = dav_entries(&r.text());
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0, "/zarr/data/grp/arr/c/0/0");
    assert!(!entries[0].1);
    assert_eq!(entries[0].2, Some(24));

    // object_store's HTTP client (and obstore) read hrefs relative to the
    // server root: for it they are rooted at the mount.
    let r = s
        .send(s.request("PROPFIND", "/zarr/data/grp/").header("Depth", "1").header("User-Agent", "object_store/0.14.2"))
        .await;
    r.expect_status(207);
    assert_eq!(hrefs(&r), set(&["/grp/", "/grp/a%20b.bin", "/grp/arr/", "/grp/zarr.json"]));

    propfind(&s, "/zarr/data/missing/", Some("1")).await.expect_error(404, "not_found");
    propfind(&s, "/zarr/data/missing", Some("0")).await.expect_error(404, "not_found");
    propfind(&s, "/zarr/data/grp/", Some("2")).await.expect_error(400, "invalid_depth");
}

async fn mkcol_and_other_methods(s: TestServer) {
    for path in ["/zarr/data/newdir/", "/zarr/data/newdir", "/zarr/data/a/b/c"] {
        let r = s.send(s.request("MKCOL", path)).await;
        assert_eq!(r.status, 201, "MKCOL {path}: {r}");
    }
    // A PUT below a MKCOL'd path works.
    s.put("/zarr/data/newdir/x", "x").await.expect_status(201);
    // On an object: 405, as RFC 4918 says (MKCOL only where nothing is mapped); the object stays.
    for path in ["/zarr/data/newdir/x", "/zarr/data/newdir/x/"] {
        let r = s.send(s.request("MKCOL", path)).await;
        r.expect_error(405, "method_not_allowed");
        assert!(r.error_message().contains("`newdir/x` is an object"), "{}", r.error_message());
    }
    assert_eq!(s.get("/zarr/data/newdir/x").await.body, b"x".as_slice());
    for method in ["POST", "PATCH"] {
        let r = s.send(s.request(method, KEY).body("x")).await;
        r.expect_error(405, "method_not_allowed");
        let allow = r.must_header("allow");
        assert!(allow.contains("GET") && allow.contains("PUT"), "{method}: Allow {allow}");
    }
}

async fn concurrent_if_match_puts_have_one_winner(s: TestServer) {
    let start = put_ok(&s, KEY, "writer 00").await;
    let writers = (0..16).map(|i| {
        let rb = s.request("PUT", KEY).header("If-Match", start.as_str()).body(format!("writer {:02}", i + 1));
        tokio::spawn(async move { (i + 1, rb.send().await.expect("PUT")) })
    });
    let mut winners = Vec::new();
    for handle in futures::future::join_all(writers).await {
        let (i, resp) = handle.expect("writer task");
        let status = resp.status().as_u16();
        let etag = resp.headers().get("etag").map(|v| v.to_str().unwrap().to_string());
        match status {
            201 | 204 => winners.push((i, etag.expect("winner's ETag"))),
            412 => {}
            other => panic!("writer {i}: unexpected status {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one If-Match writer may win: {winners:?}");
    let (i, etag) = &winners[0];
    let r = s.get(KEY).await;
    assert_eq!(r.text(), format!("writer {i:02}"));
    assert_eq!(r.must_header("etag"), etag);
}

async fn concurrent_create_only_puts_have_one_winner(s: TestServer) {
    let key = "/zarr/data/grp/arr/c/5/5";
    let writers = (0..16).map(|i| {
        let rb = s.request("PUT", key).header("If-None-Match", "*").body(format!("creator {i:02}"));
        tokio::spawn(async move { (i, rb.send().await.expect("PUT").status().as_u16()) })
    });
    let mut winners = Vec::new();
    for handle in futures::future::join_all(writers).await {
        let (i, status) = handle.expect("writer task");
        match status {
            201 => winners.push(i),
            412 => {}
            other => panic!("creator {i}: unexpected status {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one create-only writer may win: {winners:?}");
    assert_eq!(s.get(key).await.text(), format!("creator {:02}", winners[0]));
}

async fn reads_never_see_torn_writes(s: TestServer) {
    // Writers alternate two uniform bodies; every read sees one or the other whole.
    let size = 48 * 1024;
    put_ok(&s, KEY, vec![b'a'; size]).await;
    let writer = {
        let client = s.client.clone();
        let url = s.url(KEY);
        tokio::spawn(async move {
            for i in 0..40 {
                let fill = if i % 2 == 0 { b'b' } else { b'a' };
                let r = client.put(&url).body(vec![fill; size]).send().await.expect("PUT");
                assert_eq!(r.status().as_u16(), 204);
            }
        })
    };
    let readers = (0..4).map(|_| {
        let client = s.client.clone();
        let url = s.url(KEY);
        tokio::spawn(async move {
            for _ in 0..40 {
                let r = client.get(&url).send().await.expect("GET");
                let status = r.status().as_u16();
                let body = r.bytes().await.expect("body");
                assert_eq!(status, 200, "read during writes: {}", String::from_utf8_lossy(&body));
                assert_eq!(body.len(), size, "torn read: wrong length");
                assert!(body.iter().all(|b| *b == body[0]), "torn read: mixed bytes");
                let r = client.get(&url).header("Range", "bytes=-1000").send().await.expect("GET");
                let status = r.status().as_u16();
                let body = r.bytes().await.expect("body");
                assert_eq!(status, 206, "ranged read during writes: {}", String::from_utf8_lossy(&body));
                assert!(body.len() == 1000 && body.iter().all(|b| *b == body[0]), "torn range read");
            }
        })
    });
    for reader in futures::future::join_all(readers).await {
        reader.expect("reader");
    }
    writer.await.expect("writer");
}

async fn interrupted_uploads_store_nothing(s: TestServer) {
    put_ok(&s, KEY, "old value").await;
    // The client promises 100 bytes, sends 10, and hangs up.
    let head = format!("PUT {KEY} HTTP/1.1\r\nHost: {}\r\nContent-Length: 100\r\n\r\n0123456789", s.addr);
    let answer = common::raw_bytes(s.addr, head.as_bytes()).await;
    if !answer.is_empty() {
        let r = common::parse_response(&answer, false);
        assert!(r.status >= 400, "a truncated upload was accepted: {r}");
    }
    assert_eq!(s.get(KEY).await.text(), "old value", "a truncated upload replaced the value");
    let new_key = "/zarr/data/arr/c/7/7";
    let head = format!("PUT {new_key} HTTP/1.1\r\nHost: {}\r\nContent-Length: 100\r\n\r\n0123456789", s.addr);
    common::raw_bytes(s.addr, head.as_bytes()).await;
    s.get(new_key).await.expect_status(404);
    // Same with a chunked body that never ends.
    let head =
        format!("PUT {new_key} HTTP/1.1\r\nHost: {}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", s.addr);
    common::raw_bytes(s.addr, head.as_bytes()).await;
    s.get(new_key).await.expect_status(404);
}

async fn listings_are_cut_at_the_configured_maximum(s: TestServer) {
    let mut config = common::test_config();
    config.limits.max_list_entries = 2;
    let Some(small) = TestServer::start_with(s.backend, "listings_cut", config).await else { return };
    for name in ["a", "b", "c", "d/e"] {
        put_ok(&small, &format!("/zarr/data/grp/{name}"), name).await;
    }
    let j = small.get_with("/zarr/data/grp/", &[("Accept", "application/json")]).await;
    j.expect_status(200);
    let v = j.json();
    assert_eq!(v["entries"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["truncated"], true);
    // The first in name order (a directory listing looks up only those).
    let names: Vec<&str> = v["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"], "{v}");
    // As many entries as the limit: not cut.
    for name in ["a", "b"] {
        small.delete(&format!("/zarr/data/grp/{name}")).await.expect_status(204);
    }
    let v = small.get_with("/zarr/data/grp/", &[("Accept", "application/json")]).await.json();
    assert_eq!((v["entries"].as_array().unwrap().len(), &v["truncated"]), (2, &serde_json::json!(false)), "{v}");
    for name in ["a", "b"] {
        put_ok(&small, &format!("/zarr/data/grp/{name}"), name).await;
    }
    let html = small.get("/zarr/data/grp/").await;
    assert_eq!(html_links(&html.text()).len(), 3, "two entries and ../: {html}");
    let r = propfind(&small, "/zarr/data/grp/", Some("1")).await;
    r.expect_status(207);
    assert_eq!(dav_entries(&r.text()).len(), 3, "the collection and two members: {r}");
    let r = propfind(&small, "/zarr/data/grp/", Some("infinity")).await;
    r.expect_status(207);
    assert_eq!(dav_entries(&r.text()).len(), 3, "the collection and two members: {r}");
    // The API's and the browser's pages of a plain directory list as much, and say so.
    let v = small.get("/api/v1/nodes/data/grp").await.json();
    let names: Vec<&str> = v["children"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(
        (names, &v["children_total"], &v["children_truncated"]),
        (vec!["a", "b"], &serde_json::json!(2), &serde_json::json!(true))
    );
    let page = small.get("/browse/data/grp").await.text();
    assert!(page.contains("id=\"truncated\"") && page.contains(">b<") && !page.contains(">c<"), "{page}");
    for name in ["c", "d/e"] {
        small.delete(&format!("/zarr/data/grp/{name}")).await.expect_status(204);
    }
    let v = small.get("/api/v1/nodes/data/grp").await.json();
    assert_eq!(
        (&v["children_total"], &v["children_truncated"]),
        (&serde_json::json!(2), &serde_json::json!(false)),
        "{v}"
    );
    assert!(!small.get("/browse/data/grp").await.text().contains("id=\"truncated\""));
}

#[tokio::test]
async fn cors_origins_come_from_the_configuration() {
    let mut config = common::test_config();
    config.cors.allowed_origins = vec!["http://allowed.example".to_string()];
    let s = TestServer::start_with(Backend::Memory, "cors_config", config).await.expect("memory server");
    put_ok(&s, KEY, "x").await;
    let r = s.get_with(KEY, &[("Origin", "http://allowed.example")]).await;
    assert_eq!(r.header("access-control-allow-origin"), Some("http://allowed.example"), "{r}");
    assert!(r.header("vary").is_some_and(|v| v.to_ascii_lowercase().contains("origin")), "{r}");
    let r = s.get_with("/zarr/data/missing", &[("Origin", "http://allowed.example")]).await;
    assert_eq!(r.header("access-control-allow-origin"), Some("http://allowed.example"), "{r}");
    let r = s.get_with(KEY, &[("Origin", "http://other.example")]).await;
    r.expect_status(200);
    assert!(r.header("access-control-allow-origin").is_none(), "{r}");
}

/// Objects and ranges over 4 MiB are streamed on every backend (local files
/// in frames, object stores as their bytes arrive): the answers are the
/// bytes, whole and by range, with the lengths and ranges the small ones
/// have.
async fn large_objects_stream(backend: Backend) {
    let mut config = common::test_config();
    config.limits.max_put_bytes = 16 << 20;
    let Some(s) = TestServer::start_with(backend, "large_objects_stream", config).await else { return };
    let body = pattern(6_000_000);
    let etag = put_ok(&s, KEY, body.clone()).await;
    let r = s.get(KEY).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.must_header("content-length"), "6000000");
    assert_eq!(r.must_header("etag"), etag);
    assert!(r.body == body, "the whole object differs");
    let cases: &[(&str, std::ops::Range<usize>)] = &[
        ("bytes=5-4500004", 5..4_500_005),
        ("bytes=1000000-", 1_000_000..6_000_000),
        ("bytes=-4200000", 1_800_000..6_000_000),
    ];
    for (range, want) in cases {
        let r = s.get_with(KEY, &[("Range", range)]).await;
        assert_eq!(r.status, 206, "{range}: {r}");
        assert_eq!(r.must_header("content-range"), format!("bytes {}-{}/6000000", want.start, want.end - 1));
        assert_eq!(r.must_header("content-length"), want.len().to_string(), "{range}");
        assert!(r.body == body[want.clone()], "{range}: the bytes differ");
    }
}

#[tokio::test]
async fn large_objects_stream_memory() {
    large_objects_stream(Backend::Memory).await;
}

#[tokio::test]
async fn large_objects_stream_file() {
    large_objects_stream(Backend::File).await;
}

#[tokio::test]
async fn large_objects_stream_s3() {
    large_objects_stream(Backend::S3).await;
}
