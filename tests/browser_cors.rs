//! What browsers need beyond the store protocol itself (issue 15, point 3):
//! preflights allowed the headers they ask for, counted in the metrics; the
//! headers scripts read (`WWW-Authenticate`, `Retry-After`, `Allow`) exposed;
//! and a mount's own `Cache-Control` on object reads.

mod common;

use common::{client, serve_app, Reply};
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

async fn start() -> std::net::SocketAddr {
    let mut archive = MountSpec::from_url("memory://");
    archive.cache_control = Some("max-age=86400, immutable".into());
    let mounts = vec![
        Mount::build("data", &MountSpec::from_url("memory://")).unwrap(),
        Mount::build("archive", &archive).unwrap(),
    ];
    serve_app(App::with_mounts(common::test_config(), mounts)).await.0
}

async fn send(rb: reqwest::RequestBuilder) -> Reply {
    Reply::from_response(rb.send().await.unwrap()).await
}

#[tokio::test]
async fn preflights_allow_what_they_ask_and_are_counted() {
    let addr = start().await;
    let url = |p: &str| format!("http://{addr}{p}");
    for _ in 0..3 {
        let r = send(
            client()
                .request(reqwest::Method::OPTIONS, url("/zarr/data/a/zarr.json"))
                .header("origin", "http://viewer.example")
                .header("access-control-request-method", "GET")
                .header("access-control-request-headers", "cache-control, if-unmodified-since, x-trace-id"),
        )
        .await;
        r.expect_status(200);
        let allowed = r.must_header("access-control-allow-headers").to_string();
        for h in ["cache-control", "if-unmodified-since", "x-trace-id", "range", "authorization"] {
            assert!(allowed.split(',').any(|x| x == h), "{h} in {allowed}");
        }
        // "*" reads, but a preflight from an unlisted origin still gets no write method.
        let methods = r.must_header("access-control-allow-methods");
        assert!(!methods.split(',').any(|m| m == "PUT" || m == "DELETE"), "{methods}");
    }
    let metrics = send(client().get(url("/metrics"))).await.text();
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("zarrd_http_requests_total{")
                && l.contains("method=\"OPTIONS\"")
                && l.contains("/zarr/{mount}/{*key}")
                && l.contains("status=\"200\"")
        })
        .unwrap_or_else(|| panic!("no preflight count in\n{metrics}"));
    assert!(line.ends_with(" 3"), "{line}");
}

#[tokio::test]
async fn scripts_may_read_the_headers_that_explain_errors() {
    let addr = start().await;
    let r =
        send(client().patch(format!("http://{addr}/api/v1/mounts")).header("origin", "http://viewer.example")).await;
    r.expect_status(405);
    assert!(r.header("allow").is_some(), "{r}");
    let exposed = r.must_header("access-control-expose-headers").to_string();
    for h in ["www-authenticate", "retry-after", "allow", "etag", "content-range", "x-zarr-shape"] {
        assert!(exposed.split(',').any(|x| x == h), "{h} in {exposed}");
    }
}

#[tokio::test]
async fn a_mount_sets_the_cache_control_of_its_objects() {
    let addr = start().await;
    for mount in ["data", "archive"] {
        let put = client().put(format!("http://{addr}/zarr/{mount}/k")).body("bytes").send().await.unwrap();
        assert!(put.status().is_success(), "{}", put.status());
    }
    let r = send(client().get(format!("http://{addr}/zarr/archive/k"))).await;
    r.expect_status(200);
    assert_eq!(r.must_header("cache-control"), "max-age=86400, immutable");
    let r = send(client().get(format!("http://{addr}/zarr/data/k"))).await;
    assert_eq!(r.must_header("cache-control"), "no-cache");
    // A value that is not a header value is refused when the mount is built, naming the setting.
    let mut bad = MountSpec::from_url("memory://");
    bad.cache_control = Some("max-age=1\r\nx: y".into());
    let e = Mount::build("bad", &bad).unwrap_err().to_string();
    assert!(e.contains("cache_control") && e.contains("bad"), "{e}");
}
