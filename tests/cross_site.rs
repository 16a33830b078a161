//! Cross-site requests in the default configuration (no tokens, loopback:
//! every local caller is admin, CORS `*`): a page of another origin can
//! read, but not change anything, neither with a "simple" request (no
//! preflight: `text/plain`, forms) nor with a preflighted one; a listed
//! origin, the server's own and callers with a token can (issue 12, finding
//! 3).

mod common;

use std::net::SocketAddr;

use common::{client, serve_app, Reply};
use zarrd::config::{Config, Scope, TokenHash, TokenSpec};
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

const EVIL: &str = "http://evil.example";
const APP: &str = "http://app.example";

async fn start(config: Config) -> SocketAddr {
    let app = App::with_mounts(config, vec![Mount::build("data", &MountSpec::from_url("memory://")).unwrap()]);
    serve_app(app).await.0
}

fn default_config() -> Config {
    common::test_config()
}

/// The default configuration, with `APP` listed by name besides `*`.
fn listed_config() -> Config {
    let mut config = common::test_config();
    config.cors.allowed_origins = vec!["*".into(), APP.into()];
    config
}

async fn send(rb: reqwest::RequestBuilder) -> Reply {
    Reply::from_response(rb.send().await.unwrap()).await
}

/// A 4×4 array of 2×2 chunks, every chunk written (same-origin, JSON).
async fn victim(addr: SocketAddr) {
    let base = format!("http://{addr}");
    let c = client();
    let meta = serde_json::json!({
        "zarr_format": 3, "node_type": "array", "shape": [4, 4], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    });
    send(
        c.put(format!("{base}/api/v1/nodes/data/victim"))
            .header("content-type", "application/json")
            .body(meta.to_string()),
    )
    .await
    .expect_status(201);
    let r = send(
        c.put(format!("{base}/api/v1/data/data/victim?sel=0:4,0:4"))
            .header("content-type", "application/json")
            .body("7"),
    )
    .await;
    r.expect_status(204);
}

async fn chunks_and_shape(addr: SocketAddr) -> (usize, serde_json::Value) {
    let c = client();
    let mut stored = 0;
    for (i, j) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let r = c.get(format!("http://{addr}/zarr/data/victim/c/{i}/{j}")).send().await.unwrap();
        if r.status() == 200 {
            stored += 1;
        }
    }
    let r = send(c.get(format!("http://{addr}/api/v1/nodes/data/victim"))).await;
    (stored, r.json()["shape"].clone())
}

#[tokio::test]
async fn a_simple_cross_origin_resize_is_refused_and_changes_nothing() {
    let addr = start(default_config()).await;
    victim(addr).await;
    assert_eq!(chunks_and_shape(addr).await, (4, serde_json::json!([4, 4])));
    let c = client();
    let url = format!("http://{addr}/api/v1/resize/data/victim");
    // What a page can send with no preflight: a text/plain POST.
    let r =
        send(c.post(&url).header("origin", EVIL).header("content-type", "text/plain").body(r#"{"shape":[0,0]}"#)).await;
    r.expect_error(403, "cross_site_refused");
    assert!(r.error_message().contains(EVIL), "{r}");
    // The same body as text/plain, from a client that is not a browser: the
    // body is not declared JSON.
    let r = send(c.post(&url).header("content-type", "text/plain").body(r#"{"shape":[0,0]}"#)).await;
    r.expect_error(415, "unsupported_media_type");
    // A form, and a body with no type at all.
    let r = send(c.post(&url).header("content-type", "application/x-www-form-urlencoded").body("shape=0")).await;
    r.expect_error(415, "unsupported_media_type");
    let r = send(c.post(&url).body(r#"{"shape":[0,0]}"#)).await;
    r.expect_error(415, "unsupported_media_type");
    assert!(r.error_message().contains("application/json"), "{r}");
    // A browser's request with no Origin but marked cross-site.
    let r = send(
        c.post(&url)
            .header("sec-fetch-site", "cross-site")
            .header("content-type", "application/json")
            .body(r#"{"shape":[0,0]}"#),
    )
    .await;
    r.expect_error(403, "cross_site_refused");
    assert_eq!(chunks_and_shape(addr).await, (4, serde_json::json!([4, 4])), "nothing changed");

    // The server's own page (same origin, loopback host) may.
    let own = format!("http://{addr}");
    let r = send(
        c.post(&url).header("origin", &own).header("content-type", "application/json").body(r#"{"shape": [2, 2]}"#),
    )
    .await;
    r.expect_status(200);
    assert_eq!(chunks_and_shape(addr).await, (1, serde_json::json!([2, 2])));
}

#[tokio::test]
async fn every_json_endpoint_and_raw_write_refuses_bodies_a_page_sends_unasked() {
    let addr = start(default_config()).await;
    victim(addr).await;
    let base = format!("http://{addr}");
    let c = client();
    for (method, path, body) in [
        ("PUT", "/api/v1/attributes/data/victim", r#"{"a": 1}"#),
        ("PATCH", "/api/v1/attributes/data/victim", r#"{"a": 1}"#),
        ("PUT", "/api/v1/nodes/data/g", r#"{"zarr_format": 3, "node_type": "group"}"#),
        ("POST", "/api/v1/resize/data/victim", r#"{"shape": [0, 0]}"#),
        ("POST", "/api/v1/data/data/victim", r#"{"selection": [0, 0]}"#),
        ("PUT", "/api/v1/data/data/victim?sel=0,0&format=json", "1"),
    ] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            let r = send(c.request(m.clone(), format!("{base}{path}")).header("content-type", content_type).body(body))
                .await;
            assert_eq!(r.status, 415, "{method} {path} as {content_type}: {r}");
        }
    }
    assert_eq!(chunks_and_shape(addr).await, (4, serde_json::json!([4, 4])), "nothing changed");
    // A store-protocol PUT stores any bytes (a page cannot send one without
    // a preflight): `curl --data-binary` sends a form type.
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let r = send(
            c.put(format!("{base}/zarr/data/plain/{}", content_type.len()))
                .header("content-type", content_type)
                .body("x"),
        )
        .await;
        assert_eq!(r.status, 201, "store PUT as {content_type}: {r}");
    }
    // ... but not from a page on another origin.
    let r = send(
        c.put(format!("{base}/zarr/data/victim/c/0/0"))
            .header("origin", EVIL)
            .header("content-type", "text/plain")
            .body("x"),
    )
    .await;
    assert_eq!(r.status, 403, "cross-site store PUT: {r}");
    let r = send(c.get(format!("{base}/api/v1/attributes/data/victim"))).await;
    assert_eq!(r.json(), serde_json::json!({}));
    assert_eq!(c.get(format!("{base}/api/v1/nodes/data/g")).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn preflights_allow_writes_only_to_listed_or_own_origins() {
    let addr = start(listed_config()).await;
    let c = client();
    let url = format!("http://{addr}/api/v1/nodes/data/victim");
    let preflight = |origin: String, method: &'static str| {
        let c = c.clone();
        let url = url.clone();
        async move {
            let r = send(
                c.request(reqwest::Method::OPTIONS, &url)
                    .header("origin", origin)
                    .header("access-control-request-method", method),
            )
            .await;
            r.expect_status(200);
            let methods = r.must_header("access-control-allow-methods").to_string();
            methods.split(',').any(|m| m.trim() == method)
        }
    };
    // "*" reads everywhere, but writes nowhere.
    assert!(!preflight(EVIL.into(), "DELETE").await);
    assert!(!preflight(EVIL.into(), "PUT").await);
    assert!(preflight(EVIL.into(), "GET").await);
    assert!(preflight(APP.into(), "DELETE").await);
    assert!(preflight(format!("http://{addr}"), "DELETE").await);
    // Store keys: reads (PROPFIND included), no PUT or DELETE.
    let r = send(
        c.request(reqwest::Method::OPTIONS, format!("http://{addr}/zarr/data/a/zarr.json"))
            .header("origin", EVIL)
            .header("access-control-request-method", "PUT"),
    )
    .await;
    let methods = r.must_header("access-control-allow-methods");
    for m in ["GET", "HEAD", "PROPFIND"] {
        assert!(methods.split(',').any(|x| x == m), "{m} in {methods}");
    }
    for m in ["PUT", "DELETE", "MKCOL", "PATCH"] {
        assert!(!methods.split(',').any(|x| x == m), "{m} in {methods}");
    }
}

#[tokio::test]
async fn writes_work_from_listed_and_own_origins_and_with_tokens_but_not_from_others() {
    let addr = start(listed_config()).await;
    let c = client();
    let key = |k: &str| format!("http://{addr}/zarr/data/{k}");
    let put = |origin: Option<String>, k: &str| {
        let mut rb = c.put(key(k)).header("content-type", "application/octet-stream").body("abc");
        if let Some(o) = origin {
            rb = rb.header("origin", o);
        }
        send(rb)
    };
    put(None, "plain").await.expect_status(201);
    put(Some(APP.into()), "listed").await.expect_status(201);
    put(Some(format!("http://{addr}")), "own").await.expect_status(201);
    put(Some(format!("http://localhost:{}", addr.port())), "elsewhere").await.expect_error(403, "cross_site_refused");
    let r = put(Some(EVIL.into()), "evil").await;
    r.expect_error(403, "cross_site_refused");
    assert!(r.error_message().contains("evil.example"), "{r}");
    put(Some("null".into()), "null").await.expect_error(403, "cross_site_refused");
    assert_eq!(c.get(key("evil")).send().await.unwrap().status(), 404);

    // DNS rebinding: the attacker's name pointed at loopback, so the page
    // and the Host agree.
    let rebound = format!("evil.example:{}", addr.port());
    let r = send(c.delete(key("plain")).header("host", &rebound).header("origin", format!("http://{rebound}"))).await;
    r.expect_error(403, "cross_site_refused");
    assert_eq!(c.get(key("plain")).send().await.unwrap().status(), 200);

    let r = send(c.delete(key("plain")).header("origin", EVIL)).await;
    r.expect_error(403, "cross_site_refused");
    assert_eq!(c.get(key("plain")).send().await.unwrap().status(), 200);
    send(c.delete(key("plain")).header("origin", APP)).await.expect_status(204);
    assert_eq!(c.get(key("plain")).send().await.unwrap().status(), 404);

    // Reads stay open to every origin, with CORS headers.
    let r = send(c.get(key("listed")).header("origin", EVIL)).await;
    r.expect_status(200);
    assert_eq!(r.must_header("access-control-allow-origin"), "*");
    let propfind = reqwest::Method::from_bytes(b"PROPFIND").unwrap();
    let r = send(c.request(propfind, format!("http://{addr}/zarr/data/")).header("origin", EVIL).header("depth", "1"))
        .await;
    r.expect_status(207);
    let r = send(c.get(format!("http://{addr}/api/v1/mounts")).header("origin", EVIL)).await;
    r.expect_status(200);
}

#[tokio::test]
async fn a_token_is_not_a_page_s_to_borrow() {
    let mut config = common::test_config();
    config.auth.tokens = vec![TokenSpec {
        name: "app".into(),
        sha256: TokenHash::of(b"s3cret"),
        scopes: [("*".to_string(), vec![Scope::Admin])].into(),
    }];
    let addr = start(config).await;
    let c = client();
    // A web application of another origin, given the token by its user.
    let r = send(
        c.put(format!("http://{addr}/zarr/data/k"))
            .header("origin", EVIL)
            .header("authorization", "Bearer s3cret")
            .body("abc"),
    )
    .await;
    r.expect_status(201);
    // Without it: the usual 401.
    let r = send(c.put(format!("http://{addr}/zarr/data/k")).header("origin", EVIL).body("abc")).await;
    assert_eq!(r.status, 401, "{r}");
}
