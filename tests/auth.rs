//! Authentication and authorisation end to end: every route of the access
//! table that this build registers × (no token, wrong token, read, write,
//! admin token); anonymous-read mounts; the no-token defaults (loopback
//! bind: everything from loopback peers only; other binds: reads only);
//! CORS preflights with `Authorization`; wrong tokens indistinguishable.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use common::{client, serve_app, with_headers, Reply};
use tower::ServiceExt;
use zarrd::config::{Config, Scope, TokenHash, TokenSpec};
use zarrd::http::auth::{Need, RULES};
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

const READ_TOKEN: &str = "read-token-0123456789abcdef";
const WRITE_TOKEN: &str = "write-token-0123456789abcdef";
const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef";

fn token(name: &str, secret: &str, scopes: &[(&str, Scope)]) -> TokenSpec {
    TokenSpec {
        name: name.to_string(),
        sha256: TokenHash::of(secret.as_bytes()),
        scopes: scopes.iter().map(|(m, s)| ((*m).to_string(), vec![*s])).collect(),
    }
}

fn tokens_config() -> Config {
    let mut config = common::test_config();
    config.auth.tokens = vec![
        token("reader", READ_TOKEN, &[("*", Scope::Read)]),
        token("writer", WRITE_TOKEN, &[("data", Scope::Write), ("public", Scope::Read)]),
        token("admin", ADMIN_TOKEN, &[("*", Scope::Admin)]),
    ];
    config
}

/// Mounts `data` (closed) and `public` (`anonymous_read`), both in memory.
fn app(config: Config) -> App {
    let data = Mount::build("data", &MountSpec::from_url("memory://")).unwrap();
    let public = Mount::build("public", &MountSpec::from_url("memory://")).unwrap().with_anonymous_read(true);
    App::with_mounts(config, vec![data, public])
}

struct Server {
    base: String,
    client: reqwest::Client,
    _task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(config: Config) -> Self {
        let (addr, task) = serve_app(app(config)).await;
        Self { base: format!("http://{addr}"), client: client(), _task: task }
    }

    async fn send(&self, method: &str, path: &str, token: Option<&str>, headers: &[(&str, &str)]) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut rb = with_headers(self.client.request(method.clone(), format!("{}{path}", self.base)), headers);
        if let Some(t) = token {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        if matches!(method.as_str(), "PUT" | "POST" | "PATCH") {
            rb = rb.body("{}");
        }
        Reply::from_response(rb.send().await.expect("request")).await
    }
}

/// A concrete path for a route template (mount `data`).
fn concrete(template: &str, mount: &str) -> String {
    template
        .replace("{mount}", mount)
        .replace("{*key}", "arr/zarr.json")
        .replace("{*path}", "arr")
        .replace("{*rest}", "x")
}

#[track_caller]
fn assert_unauthorized(r: &Reply, what: &str) {
    assert_eq!(r.status, 401, "{what}: {r}");
    if !r.body.is_empty() {
        r.expect_error(401, "unauthorized");
    }
    assert!(r.must_header("www-authenticate").starts_with("Bearer realm=\"zarrd\""), "{what}: {r}");
}

#[track_caller]
fn assert_allowed(r: &Reply, what: &str) {
    assert!(r.status != 401 && r.status != 403, "{what}: refused: {r}");
}

#[tokio::test]
async fn every_route_and_method_against_every_kind_of_caller() {
    let s = Server::start(tokens_config()).await;
    let wrong = "wrong-token-0123456789abcdef";
    let mut checked = Vec::new();
    for rule in RULES {
        // Signed links carry their credential in the path, not in a token:
        // tests/python/test_signed_links.py checks them (403 for a bad link).
        if rule.template.starts_with("/s/") {
            continue;
        }
        let path = concrete(rule.template, "data");
        // Routes of the table that this build does not register answer the JSON 404.
        let probe = s.send("GET", &path, Some(ADMIN_TOKEN), &[]).await;
        // (Browser pages answer errors as HTML: a 404 there is no missing route.)
        if probe.status == 404 && probe.text().contains("\"no_route\"") {
            continue;
        }
        for (method, need) in rule.methods {
            let what = format!("{method} {path}");
            let none = s.send(method, &path, None, &[]).await;
            let bad = s.send(method, &path, Some(wrong), &[]).await;
            let read = s.send(method, &path, Some(READ_TOKEN), &[]).await;
            let write = s.send(method, &path, Some(WRITE_TOKEN), &[]).await;
            let admin = s.send(method, &path, Some(ADMIN_TOKEN), &[]).await;
            match need {
                Need::Public => {
                    for r in [&none, &bad, &read, &write, &admin] {
                        assert_allowed(r, &what);
                    }
                }
                Need::Caller | Need::Observer => {
                    assert_allowed(&none, &what);
                    assert_unauthorized(&bad, &what);
                    for r in [&read, &write, &admin] {
                        assert_allowed(r, &what);
                    }
                }
                Need::Mount(scope) => {
                    assert_unauthorized(&none, &format!("{what} without a token"));
                    assert_unauthorized(&bad, &format!("{what} with a wrong token"));
                    for (r, has, name) in
                        [(&read, Scope::Read, "read"), (&write, Scope::Write, "write"), (&admin, Scope::Admin, "admin")]
                    {
                        if has >= *scope {
                            assert_allowed(r, &format!("{what} with the {name} token"));
                        } else {
                            assert_eq!(r.status, 403, "{what} with the {name} token: {r}");
                            if *method != "HEAD" {
                                r.expect_error(403, "forbidden");
                                let m = r.error_message();
                                assert!(m.contains(scope.as_str()) && m.contains("`data`"), "{what}: {m}");
                            }
                        }
                    }
                }
            }
            checked.push(what);
        }
    }
    for must in [
        "GET /zarr/data/arr/zarr.json",
        "PUT /zarr/data/arr/zarr.json",
        "DELETE /zarr/data",
        "MKCOL /zarr/data/",
        "PROPFIND /zarr/data/",
        "GET /healthz",
        "GET /openapi.json",
    ] {
        assert!(checked.iter().any(|c| c == must), "{must} was not checked: {checked:?}");
    }
}

#[tokio::test]
async fn writes_land_only_with_the_scope() {
    let s = Server::start(tokens_config()).await;
    s.send("PUT", "/zarr/data/k", Some(READ_TOKEN), &[]).await.expect_error(403, "forbidden");
    s.send("GET", "/zarr/data/k", Some(READ_TOKEN), &[]).await.expect_error(404, "not_found");
    s.send("PUT", "/zarr/data/k", Some(WRITE_TOKEN), &[]).await.expect_status(201);
    let r = s.send("GET", "/zarr/data/k", Some(READ_TOKEN), &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "{}"));
    // The writer may only read `public`.
    s.send("PUT", "/zarr/public/k", Some(WRITE_TOKEN), &[]).await.expect_error(403, "forbidden");
    s.send("PUT", "/zarr/public/k", Some(ADMIN_TOKEN), &[]).await.expect_status(201);
    // Unknown mounts: no token is 401 (mount names are not revealed), a token with `*` sees the 404.
    assert_unauthorized(&s.send("GET", "/zarr/secret/k", None, &[]).await, "unknown mount");
    s.send("GET", "/zarr/secret/k", Some(READ_TOKEN), &[]).await.expect_error(404, "unknown_mount");
    s.send("GET", "/zarr/secret/k", Some(WRITE_TOKEN), &[]).await.expect_error(403, "forbidden");
}

#[tokio::test]
async fn anonymous_read_mounts_are_readable_and_nothing_more() {
    let s = Server::start(tokens_config()).await;
    s.send("PUT", "/zarr/public/arr/c/0", Some(ADMIN_TOKEN), &[]).await.expect_status(201);
    let r = s.send("GET", "/zarr/public/arr/c/0", None, &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "{}"));
    s.send("HEAD", "/zarr/public/arr/c/0", None, &[]).await.expect_status(200);
    s.send("GET", "/zarr/public/arr/", None, &[("accept", "application/json")]).await.expect_status(200);
    s.send("PROPFIND", "/zarr/public/", None, &[("depth", "1")]).await.expect_status(207);
    for method in ["PUT", "DELETE", "MKCOL"] {
        assert_unauthorized(&s.send(method, "/zarr/public/arr/c/0", None, &[]).await, method);
    }
    // A wrong token is refused even where no token is needed.
    assert_unauthorized(&s.send("GET", "/zarr/public/arr/c/0", Some("nope-nope-nope-nope"), &[]).await, "wrong");
    // The closed mount next to it is not readable.
    assert_unauthorized(&s.send("GET", "/zarr/data/", None, &[]).await, "closed mount");
}

#[tokio::test]
async fn wrong_tokens_are_indistinguishable() {
    let s = Server::start(tokens_config()).await;
    let near = &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1];
    let variants = [near.to_string(), format!("{ADMIN_TOKEN}x"), "x".repeat(ADMIN_TOKEN.len()), "short".to_string()];
    let mut answers = Vec::new();
    for v in &variants {
        let r = s.send("GET", "/zarr/data/k", Some(v), &[]).await;
        assert_unauthorized(&r, v);
        assert!(!r.text().contains(v.as_str()), "the token is echoed: {r}");
        let request_id = r.must_header("x-request-id").to_string();
        let headers: Vec<_> = r.headers.iter().filter(|(k, _)| k != "date" && k != "x-request-id").cloned().collect();
        assert!(!request_id.is_empty());
        answers.push((r.status, headers, r.body));
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "answers differ: {answers:?}");
    let r = s.send("GET", "/zarr/data/k", None, &[("authorization", "Basic dXNlcjpwYXNz")]).await;
    assert_unauthorized(&r, "Basic");
}

#[tokio::test]
async fn cors_preflights_allow_authorization_without_credentials() {
    let s = Server::start(tokens_config()).await;
    let r = s
        .send(
            "OPTIONS",
            "/zarr/data/arr/zarr.json",
            None,
            &[
                ("origin", "https://viewer.example"),
                ("access-control-request-method", "PUT"),
                ("access-control-request-headers", "authorization, content-type"),
            ],
        )
        .await;
    r.expect_status(200);
    assert!(r.must_header("access-control-allow-headers").contains("authorization"), "{r}");
    // The real request then carries the token.
    let r = s.send("PUT", "/zarr/data/arr/zarr.json", Some(WRITE_TOKEN), &[("origin", "https://viewer.example")]).await;
    assert!(r.status == 422 || r.status == 201, "{r}");
    assert!(r.header("access-control-allow-origin").is_some(), "{r}");
}

#[tokio::test]
async fn no_tokens_and_a_loopback_bind_allow_everything_from_loopback_only() {
    let mut config = common::test_config();
    config.bind = "127.0.0.1:8080".parse().unwrap();
    let s = Server::start(config.clone()).await;
    s.send("PUT", "/zarr/data/k", None, &[]).await.expect_status(201);
    s.send("GET", "/zarr/data/k", None, &[]).await.expect_status(200);
    s.send("DELETE", "/zarr/data/k", None, &[]).await.expect_status(204);
    // The same router, asked by a peer that is not loopback.
    let router = zarrd::http::router(Arc::new(app(config)));
    for (method, path) in [("GET", "/zarr/data/k"), ("PUT", "/zarr/data/k"), ("GET", "/zarr/data/")] {
        let mut req = axum::http::Request::builder().method(method).uri(path).body(axum::body::Body::empty()).unwrap();
        req.extensions_mut().insert(ConnectInfo("192.0.2.7:40000".parse::<SocketAddr>().unwrap()));
        let resp = router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 401, "{method} {path} from a remote peer");
        assert!(resp.headers().contains_key("www-authenticate"));
    }
    // ... except on an anonymous-read mount.
    let mut req = axum::http::Request::builder().uri("/zarr/public/").body(axum::body::Body::empty()).unwrap();
    req.extensions_mut().insert(ConnectInfo("192.0.2.7:40000".parse::<SocketAddr>().unwrap()));
    assert_eq!(router.oneshot(req).await.unwrap().status(), 200);
}

#[tokio::test]
async fn no_tokens_and_another_bind_allow_reads_only() {
    let mut config = common::test_config();
    // Served on loopback by the harness; the policy follows the configured bind.
    config.bind = "0.0.0.0:8080".parse().unwrap();
    let s = Server::start(config).await;
    s.send("GET", "/zarr/data/k", None, &[]).await.expect_error(404, "not_found");
    s.send("GET", "/zarr/data/", None, &[]).await.expect_status(200);
    for method in ["PUT", "DELETE", "MKCOL"] {
        let r = s.send(method, "/zarr/data/k", None, &[]).await;
        assert_unauthorized(&r, method);
    }
}

#[tokio::test]
async fn unknown_methods_on_known_routes_are_405_with_allow() {
    let s = Server::start(tokens_config()).await;
    for token in [None, Some(ADMIN_TOKEN)] {
        let r = s.send("PATCH", "/zarr/data/k", token, &[]).await;
        r.expect_error(405, "method_not_allowed");
        assert!(r.must_header("allow").contains("PROPFIND"), "{r}");
    }
}

#[tokio::test]
async fn the_mount_list_shows_what_the_caller_may_read() {
    let mut config = tokens_config();
    config.auth.tokens.push(token("narrow", "narrow-token-0123456789abcdef", &[("data", Scope::Read)]));
    let s = Server::start(config).await;
    let names = |r: &Reply| -> Vec<String> {
        r.json()["mounts"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap().to_string()).collect()
    };
    let r = s.send("GET", "/api/v1/mounts", None, &[]).await;
    assert_eq!(names(r.expect_status(200)), ["public"]);
    let r = s.send("GET", "/api/v1/mounts", Some("narrow-token-0123456789abcdef"), &[]).await;
    assert_eq!(names(r.expect_status(200)), ["data"]);
    let r = s.send("GET", "/api/v1/mounts", Some(READ_TOKEN), &[]).await;
    assert_eq!(names(r.expect_status(200)), ["data", "public"]);
    assert_unauthorized(&s.send("GET", "/api/v1/mounts", Some("wrong-token-0123456789"), &[]).await, "wrong");
}

/// `/metrics` names only the mounts the caller may read: an anonymous
/// scrape of a server with tokens sees the anonymous-read mount's series
/// and nothing of the closed one; a token with read on every mount sees both;
/// a wrong token is 401.
#[tokio::test]
async fn metrics_name_only_the_mounts_the_caller_may_read() {
    let s = Server::start(tokens_config()).await;
    // Some storage traffic on both mounts, so both have series to show.
    for mount in ["data", "public"] {
        let r = s.send("GET", &format!("/zarr/{mount}/missing/zarr.json"), Some(ADMIN_TOKEN), &[]).await;
        assert_eq!(r.status, 404, "{r}");
    }
    let names = |text: String| {
        let mut seen: Vec<String> =
            text.match_indices("mount=\"").map(|(i, _)| text[i + 7..].split('"').next().unwrap().to_string()).collect();
        seen.sort_unstable();
        seen.dedup();
        seen
    };
    let anonymous = s.send("GET", "/metrics", None, &[]).await;
    assert_eq!(anonymous.status, 200, "{anonymous}");
    assert!(anonymous.text().contains("zarrd_http_requests_total"), "{anonymous}");
    assert_eq!(names(anonymous.text()), ["public"], "an anonymous scrape names only the anonymous-read mount");
    let reader = s.send("GET", "/metrics", Some(READ_TOKEN), &[]).await;
    assert_eq!(names(reader.text()), ["data", "public"]);
    let writer = s.send("GET", "/metrics", Some(WRITE_TOKEN), &[]).await;
    assert_eq!(names(writer.text()), ["data", "public"], "write on data implies read");
    let bad = s.send("GET", "/metrics", Some("not-a-token-0123456789abcdef"), &[]).await;
    assert_eq!(bad.status, 401, "{bad}");
}
