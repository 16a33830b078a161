//! The committed `openapi/openapi.json` is exactly what the code generates.
//! Regenerate with `cargo run -- openapi > openapi/openapi.json`.

#[test]
fn committed_openapi_document_matches_the_code() {
    let generated = zarrd::http::openapi::document_json();
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json"))
        .expect("openapi/openapi.json exists");
    assert!(
        generated == committed,
        "openapi/openapi.json is out of date: run `cargo run -- openapi > openapi/openapi.json`"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    for path in ["/zarr/{mount}/{key}", "/healthz", "/readyz", "/openapi.json"] {
        assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
    }
}
