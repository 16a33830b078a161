//! Unknown query parameters and JSON body members are 400 (or 422) naming
//! them, on every endpoint (issue 12, finding 15): a typo must not answer
//! something else with 200. The route table ([`zarrd::http::auth::RULES`])
//! is walked, so a new endpoint cannot be forgotten; the parameters each
//! route knows are checked against its handler (no `invalid_query` for
//! them) and against the OpenAPI document.

mod common;

use std::net::SocketAddr;

use common::{client, serve_app, Reply};
use zarrd::http::auth::{Params, RULES};
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

async fn start() -> SocketAddr {
    let app =
        App::with_mounts(common::test_config(), vec![Mount::build("data", &MountSpec::from_url("memory://")).unwrap()]);
    let addr = serve_app(app).await.0;
    // An array `a` (4×4, 2×2 chunks) for the data and chunk routes.
    let meta = serde_json::json!({
        "zarr_format": 3, "node_type": "array", "shape": [4, 4], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}],
    });
    let r = client()
        .put(format!("http://{addr}/api/v1/nodes/data/a"))
        .header("content-type", "application/json")
        .body(meta.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    addr
}

/// A concrete path for a route template.
fn path_of(template: &str) -> String {
    template.replace("{mount}", "data").replace("{*path}", "a").replace("{*key}", "a/zarr.json").replace("{*rest}", "x")
}

async fn send(addr: SocketAddr, method: &str, target: &str, body: Option<&str>) -> Reply {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut rb = client().request(m, format!("http://{addr}{target}"));
    if let Some(body) = body {
        rb = rb.header("content-type", "application/json").body(body.to_string());
    }
    Reply::from_response(rb.send().await.unwrap()).await
}

/// The error code of an answer, when it is an error envelope.
fn code_of(r: &Reply) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    v["error"]["code"].as_str().map(str::to_string)
}

/// A value each known parameter accepts.
fn value_for(name: &str) -> &'static str {
    match name {
        "sel" | "coords" => "0,0",
        "mode" => "basic",
        "format" => "json",
        "field" => "f",
        "inner" => "0,0",
        "depth" => "1",
        "stats" | "fill_missing" | "create" | "open" => "true",
        "downsample" => "2,2",
        "downsample_method" => "mean",
        "level" => "0",
        "delete_existing" | "recursive" | "write_empty_chunks" => "false",
        "rescale" => "0,1",
        "colormap" => "gray",
        "transparent_fill" => "true",
        "size" => "16",
        "page" => "0",
        "per_page" => "10",
        other => panic!("no test value for the parameter `{other}`: add one"),
    }
}

#[tokio::test]
async fn every_route_refuses_parameters_it_does_not_know_and_takes_those_it_does() {
    let addr = start().await;
    let mut checked = 0;
    for rule in RULES {
        let path = path_of(rule.template);
        for (method, _) in rule.methods {
            if *method == "OPTIONS" {
                continue;
            }
            let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let target = format!("{path}?resample=2");
            let r = send(addr, method, &target, None).await;
            match rule.params(&m) {
                Some(_) if *method == "HEAD" => assert_eq!(r.status, 400, "{method} {target}: {r}"),
                Some(_) => {
                    r.expect_error(400, "unknown_parameter");
                    assert!(r.error_message().contains("`resample`"), "{method} {target}: {r}");
                    checked += 1;
                }
                // The store protocol does not read query strings.
                None => {
                    assert_ne!(code_of(&r).as_deref(), Some("unknown_parameter"), "{method} {target}: {r}");
                }
            }
            for name in rule.params(&m).unwrap_or_default() {
                // Body-less, so writes fail later: but never on the parameter.
                let target = format!("{path}?{name}={}", value_for(name));
                let r = send(addr, method, &target, None).await;
                let code = code_of(&r);
                assert!(
                    !matches!(code.as_deref(), Some("unknown_parameter" | "invalid_query")),
                    "{method} {target}: a known parameter refused: {r}"
                );
            }
        }
    }
    assert!(checked >= 30, "only {checked} route methods checked");
}

#[tokio::test]
async fn typos_are_400_naming_the_parameter_not_a_different_answer() {
    let addr = start().await;
    let r = send(addr, "GET", "/api/v1/data/data/a?select=0:3", None).await;
    r.expect_error(400, "unknown_parameter");
    assert!(r.error_message().contains("`select`"), "{r}");
    assert!(r.error_message().contains("`sel`"), "the known ones are listed: {r}");
    let r = send(addr, "GET", "/api/v1/data/data/a?sel=0&fromat=json", None).await;
    r.expect_error(400, "unknown_parameter");
    assert!(r.error_message().contains("`fromat`"), "{r}");
    let r = send(addr, "DELETE", "/api/v1/nodes/data/a?recursve=true", None).await;
    r.expect_error(400, "unknown_parameter");
    // Nothing was deleted.
    send(addr, "GET", "/api/v1/nodes/data/a", None).await.expect_status(200);
    // Percent-encoded names are decoded first.
    let r = send(addr, "GET", "/api/v1/data/data/a?s%65l=0&x%20y=1", None).await;
    r.expect_error(400, "unknown_parameter");
    assert!(r.error_message().contains("`x y`"), "{r}");
    // The store protocol ignores query strings (clients add signatures and
    // cache-busters to every key URL).
    send(addr, "GET", "/zarr/data/a/zarr.json?v=123", None).await.expect_status(200);
}

#[tokio::test]
async fn unknown_body_members_are_refused_naming_them() {
    let addr = start().await;
    let r = send(addr, "POST", "/api/v1/resize/data/a", Some(r#"{"shape": [2, 2], "shrinkonly": true}"#)).await;
    assert!(matches!(r.status, 400 | 422), "{r}");
    assert!(r.error_message().contains("shrinkonly"), "{r}");
    let r = send(addr, "GET", "/api/v1/nodes/data/a", None).await;
    assert_eq!(r.json()["shape"], serde_json::json!([4, 4]), "nothing resized");
    let r = send(addr, "POST", "/api/v1/data/data/a", Some(r#"{"selection": [0, 0], "formt": "json"}"#)).await;
    assert!(matches!(r.status, 400 | 422), "{r}");
    assert!(r.error_message().contains("formt"), "{r}");
    // Node creation: a zarr.json (the v3 rule: unknown members only as
    // objects with "must_understand": false), a v2 document, a TensorStore
    // spec.
    for body in [
        r#"{"zarr_format": 3, "node_type": "group", "atributes": {"a": 1}}"#,
        r#"{"zarr_format": 2, "atributes": {"a": 1}}"#,
        r#"{"driver": "zarr3", "dtype": "uint8", "shape": [4], "chunk_shap": [2]}"#,
    ] {
        let r = send(addr, "PUT", "/api/v1/nodes/data/typo", Some(body)).await;
        assert!(matches!(r.status, 400 | 422), "{body}: {r}");
        assert!(r.error_message().contains("atributes") || r.error_message().contains("chunk_shap"), "{body}: {r}");
    }
    send(addr, "GET", "/api/v1/nodes/data/typo", None).await.expect_status(404);
}

#[test]
fn the_openapi_document_lists_exactly_the_parameters_the_routes_know() {
    let doc: serde_json::Value = serde_json::from_str(&zarrd::http::openapi::document_json()).unwrap();
    let mut compared = 0;
    for rule in RULES {
        let Params::Only(_) = rule.params else { continue };
        let documented_path = rule.template.replace("{*", "{");
        let Some(item) = doc["paths"].get(&documented_path) else { continue };
        for (method, _) in rule.methods {
            let Some(op) = item.get(method.to_ascii_lowercase()) else { continue };
            let mut documented: Vec<&str> = op["parameters"]
                .as_array()
                .map(|ps| ps.iter().filter(|p| p["in"] == "query").filter_map(|p| p["name"].as_str()).collect())
                .unwrap_or_default();
            let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut known: Vec<&str> = rule.params(&m).unwrap_or_default().to_vec();
            documented.sort_unstable();
            known.sort_unstable();
            assert_eq!(documented, known, "{method} {documented_path}");
            compared += 1;
        }
    }
    assert!(compared >= 20, "only {compared} operations compared");
}
