//! The HTTP face: routers, middleware (CORS, request log, and the [`guard`]:
//! access rules, authentication, limits), error mapping and the OpenAPI
//! document.
//!
//! [`router`] builds the whole application without a socket, so tests drive
//! it with `tower::ServiceExt::oneshot`; `main.rs` serves it.

pub mod api;
pub mod auth;
pub mod dav;
pub mod docs;
pub mod error;
pub mod guard;
pub mod health;
pub mod metrics;
pub mod openapi;
pub mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use tower_http::cors::{AllowOrigin, CorsLayer};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use utoipa::OpenApi;

use crate::metrics::{HttpMetrics, RouteMetrics};
use crate::service::App;

/// The request-id header, read from the client when present and echoed back.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Every route, registered once for both the server and the OpenAPI
/// document ([`openapi::document`]).
///
/// The store protocol's method router also answers WebDAV methods
/// (PROPFIND, MKCOL) through its fallback, which OpenAPI cannot describe;
/// the mount root (`/zarr/{mount}` and `/zarr/{mount}/`) is the same handler
/// with an empty key.
///
/// Every route template needs an entry in [`auth::RULES`] (a unit test
/// checks the documented ones and [`MOUNT_ROOT_ROUTES`]); a request to a
/// template without one is refused.
pub fn routes() -> OpenApiRouter<Arc<App>> {
    let (_, store_paths, store) = routes!(store::get_key, store::put_key, store::delete_key);
    let store = store.fallback(store::other_method);
    let mut router =
        OpenApiRouter::with_openapi(openapi::ApiDoc::openapi()).routes((Vec::new(), store_paths, store.clone()));
    for path in MOUNT_ROOT_ROUTES {
        router = router.route(path, store.clone());
    }
    router
        .routes(routes!(api::nodes::list_mounts))
        .routes(routes!(api::nodes::get_root_node, api::nodes::put_root_node, api::nodes::delete_root_node))
        .routes(routes!(api::nodes::get_node, api::nodes::put_node, api::nodes::delete_node))
        .routes(routes!(
            api::attributes::get_attributes,
            api::attributes::put_attributes,
            api::attributes::patch_attributes
        ))
        .routes(routes!(api::resize::resize))
        .routes(routes!(api::consolidate::consolidate_root))
        .routes(routes!(api::consolidate::consolidate))
        .routes(routes!(api::data::get_data, api::data::post_data, api::write::put_data))
        .routes(routes!(api::data::get_root_data, api::data::post_root_data, api::write::put_root_data))
        .routes(routes!(api::data::get_chunk))
        .routes(routes!(api::data::get_root_chunk))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(openapi::serve))
        .routes(routes!(docs::docs_redirect))
        .routes(routes!(docs::docs_index))
        .routes(routes!(docs::docs_file))
        .routes(routes!(metrics::metrics))
}

/// Routes registered without an OpenAPI operation of their own: the mount
/// root, served by the store handlers with an empty key.
pub const MOUNT_ROOT_ROUTES: [&str; 2] = ["/zarr/{mount}", "/zarr/{mount}/"];

/// The whole application.
pub fn router(app: Arc<App>) -> Router {
    let (router, _) = routes().split_for_parts();
    serve_routes(router, app)
}

/// `routes` with the fallback and every layer of the application (tests
/// use it to put extra routes behind the same guard).
///
/// Order, outermost first: CORS (a preflight is answered before
/// authentication: browsers send no credentials on one), the request log,
/// then, after routing, [`guard`] (rules, limits, authentication).
pub fn serve_routes(routes: Router<Arc<App>>, app: Arc<App>) -> Router {
    let cors = cors_layer(&app.config().cors.allowed_origins);
    let body_limit = usize::try_from(app.config().limits.max_body_bytes).unwrap_or(usize::MAX);
    let figures = Arc::new(HttpMetrics::new(auth::RULES.iter().map(|r| r.template)));
    routes
        .layer(guard::GuardLayer::new(Arc::clone(&app)))
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .fallback(health::not_found)
        .layer(axum::Extension(Arc::clone(&figures)))
        .layer(middleware::from_fn_with_state(figures, log_request))
        .layer(cors)
        .with_state(app)
}

fn cors_layer(origins: &[String]) -> CorsLayer {
    let allow_origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    let method = |m: &str| Method::from_bytes(m.as_bytes()).expect("static method name");
    CorsLayer::new()
        .allow_origin(allow_origin)
        .allow_methods([
            Method::GET,
            Method::HEAD,
            Method::PUT,
            Method::POST,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
            method("PROPFIND"),
        ])
        .allow_headers([
            header::RANGE,
            header::IF_NONE_MATCH,
            header::IF_MATCH,
            header::IF_MODIFIED_SINCE,
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            HeaderName::from_static("depth"),
        ])
        .expose_headers([
            header::CONTENT_RANGE,
            header::CONTENT_LENGTH,
            header::ETAG,
            header::ACCEPT_RANGES,
            header::LAST_MODIFIED,
            REQUEST_ID,
            api::data::X_ZARR_SHAPE,
            api::data::X_ZARR_DTYPE,
            api::data::X_ZARR_ORDER,
        ])
        .max_age(Duration::from_secs(3600))
}

/// `body`, adding the length of each frame to the counter `pick` selects
/// in `slot` of `figures`.
fn counted(
    body: axum::body::Body,
    figures: &Arc<HttpMetrics>,
    slot: usize,
    pick: fn(&RouteMetrics) -> &AtomicU64,
) -> axum::body::Body {
    let figures = Arc::clone(figures);
    metrics::Counted::body(
        body,
        Arc::new(move |n| {
            pick(figures.at(slot)).fetch_add(n, Ordering::Relaxed);
        }),
    )
}

static NEXT_REQUEST_ID: AtomicU64 = AtomicU64::new(1);

/// One log line per request (method, path, status, bytes, latency, request
/// id, and the name of the caller's token, `-` without one), and the
/// request's [`HttpMetrics`]: count by status, latency until the response
/// head, body bytes in and out.
///
/// Cheap when the request log is off (`RUST_LOG=warn`): then only server
/// errors are logged and nothing is formatted for the rest.
async fn log_request(State(figures): State<Arc<HttpMetrics>>, mut req: Request, next: Next) -> Response {
    let start = Instant::now();
    let slot = figures.slot(req.extensions().get::<MatchedPath>().map(MatchedPath::as_str), req.method().as_str());
    let head = req.method() == Method::HEAD;
    if !axum::body::HttpBody::is_end_stream(req.body()) {
        req = req.map(|body| counted(body, &figures, slot, |r| &r.bytes_in));
    }
    let id = match req.headers().get(&REQUEST_ID) {
        Some(v) if !v.is_empty() && v.len() <= 128 => v.clone(),
        _ => {
            let v = HeaderValue::from(NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed));
            req.headers_mut().insert(REQUEST_ID, v.clone());
            v
        }
    };
    let info = tracing::enabled!(target: "zarrd::request", tracing::Level::INFO);
    // Cheap clones (the URI is reference-counted); formatted only when logged.
    let (method, uri) = if info || tracing::enabled!(target: "zarrd::request", tracing::Level::WARN) {
        (Some(req.method().clone()), Some(req.uri().clone()))
    } else {
        (None, None)
    };
    let mut resp = next.run(req).await;
    let status = resp.status().as_u16();
    figures.at(slot).answered(status, start.elapsed());
    if !head && !matches!(status, 204 | 304) {
        let known = resp
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .or_else(|| axum::body::HttpBody::size_hint(resp.body()).exact());
        if let Some(n) = known {
            figures.at(slot).bytes_out.fetch_add(n, Ordering::Relaxed);
        } else {
            resp = resp.map(|body| counted(body, &figures, slot, |r| &r.bytes_out));
        }
    }
    if let (Some(method), Some(uri)) = (method, uri) {
        if info || status >= 500 {
            let path = uri.path();
            let bytes = resp
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .or_else(|| axum::body::HttpBody::size_hint(resp.body()).exact())
                .unwrap_or(0);
            let latency_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
            let request_id = id.to_str().unwrap_or("-");
            // The token's name (never its value), when the request came with a valid one.
            let token = resp.extensions().get::<auth::TokenName>().map_or("-", |t| &*t.0);
            if status >= 500 {
                tracing::warn!(target: "zarrd::request", %method, path, status, bytes, latency_us, request_id, token, "request");
            } else {
                tracing::info!(target: "zarrd::request", %method, path, status, bytes, latency_us, request_id, token, "request");
            }
        }
    }
    resp.headers_mut().insert(REQUEST_ID, id);
    resp
}
