//! [`Front`]: the one service every request enters, in front of the axum
//! router. It answers CORS preflights, finds the request's route in
//! [`auth::RULES`], runs the [`Guard`] (rules, limits, authentication),
//! bounds the request's time, and on the way out records the HTTP metrics,
//! writes the request log line and adds the request id and CORS headers.
//!
//! Why one hand-written service instead of a stack of tower layers: layers
//! added with `Router::layer` wrap every route separately, and each of them
//! clones and boxes a service and boxes a future on every request. For the
//! small answers that make up most store traffic (metadata documents, missing
//! chunks) that overhead was most of the server's own CPU per request
//! (`bench/README.md` has the instruction counts). Here a request costs one
//! route lookup (the same `matchit` templates axum routes with) and no
//! allocation of its own beyond a generated request id.
//!
//! The route is looked up here because the guard must run before the
//! handler and the metrics must be keyed by route template; axum only
//! reveals the template inside the route. [`super::router`] checks at start
//! that every route the router serves has a rule, so the two lookups agree:
//! a route without a rule cannot be served unguarded.
//!
//! Store reads (`GET`/`HEAD` on the `/zarr/...` templates: chunks, shard
//! ranges, metadata documents, listings) go from here straight to
//! [`store::get_key`], which needs nothing the router adds (path
//! parameters, the matched path); `as_routed` does to their answers what
//! the router does to every answer. Everything else goes through the
//! router.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::future::RouteFuture;
use axum::Router;
use bytes::Bytes;
use pin_project_lite::pin_project;
use tokio::time::Timeout;

use super::auth::{self, TokenName};
use super::cors::Cors;
use super::extract::{read_upload, UploadBudget};
use super::guard::{Guard, Permit};
use super::metrics::Counted;
use super::{store, REQUEST_ID};
use crate::metrics::{HttpMetrics, RouteMetrics};
use crate::service::node::DocumentGate;
use crate::service::App;

/// The application as one cheap-to-clone service; see the module
/// documentation.
#[derive(Clone)]
pub struct Front {
    shared: Arc<Shared>,
}

struct Shared {
    app: Arc<App>,
    router: Router,
    guard: Arc<Guard>,
    cors: Cors,
    figures: Arc<HttpMetrics>,
    /// Route template → index in [`auth::RULES`].
    routes: matchit::Router<usize>,
    /// Per rule: reads (GET, HEAD) go straight to [`store::get_key`].
    store_reads: Vec<bool>,
    /// The rule of `/zarr/{mount}/{*key}` (store keys), found without the
    /// route tree.
    store_key_rule: Option<usize>,
    /// The rule of `/metrics`, whose handler reads `figures` from the
    /// request's extensions.
    metrics_rule: Option<usize>,
    /// Per rule: the methods that change nothing, for the preflights of
    /// origins that may not write ([`Cors::preflight`]); the last entry is
    /// for paths without a rule.
    preflight_reads: Vec<HeaderValue>,
}

impl std::fmt::Debug for Front {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front").finish_non_exhaustive()
    }
}

impl Shared {
    /// The index in [`auth::RULES`] of the route `path` takes, and where its
    /// `{mount}` segment is in `path` (the guard reads it from the path
    /// again, rather than copying it here).
    fn route(&self, path: &str) -> (Option<usize>, Option<std::ops::Range<usize>>) {
        // Store keys, most of the traffic, without the route tree: the
        // template `/zarr/{mount}/{*key}` takes exactly the paths with a
        // non-empty mount segment and a non-empty rest (the test below
        // checks this agrees with the tree).
        if let (Some(rule), Some(rest)) = (self.store_key_rule, path.strip_prefix("/zarr/")) {
            if let Some((mount, key)) = rest.split_once('/') {
                if !mount.is_empty() && !key.is_empty() {
                    return (Some(rule), Some(subrange(path, mount)));
                }
            }
        }
        match self.routes.at(path) {
            Ok(m) => (Some(*m.value), m.params.get("mount").map(|v| subrange(path, v))),
            Err(_) => (None, None),
        }
    }
}

static NEXT_REQUEST_ID: AtomicU64 = AtomicU64::new(1);

impl Front {
    /// `router` (with its state and fallback) behind the guard of `app`'s
    /// configuration, with HTTP metrics per route template of the rules.
    ///
    /// # Panics
    /// When two templates in [`auth::RULES`] conflict (a programming error
    /// every test would show).
    #[must_use]
    pub fn new(router: Router, app: &Arc<App>) -> Self {
        let mut routes = matchit::Router::new();
        for (i, rule) in auth::RULES.iter().enumerate() {
            if let Err(e) = routes.insert(rule.template, i) {
                panic!("route template {} in http::auth::RULES: {e}", rule.template);
            }
        }
        let shared = Shared {
            app: Arc::clone(app),
            store_reads: auth::RULES.iter().map(|r| r.template.starts_with("/zarr/")).collect(),
            store_key_rule: auth::RULES.iter().position(|r| r.template == "/zarr/{mount}/{*key}"),
            metrics_rule: auth::RULES.iter().position(|r| r.template == "/metrics"),
            preflight_reads: auth::RULES
                .iter()
                .map(auth::Rule::read_methods)
                .chain(std::iter::once("GET,HEAD,OPTIONS".to_string()))
                .map(|m| HeaderValue::from_str(&m).expect("method names are valid header values"))
                .collect(),
            router,
            guard: Arc::new(Guard::new(Arc::clone(app))),
            cors: Cors::new(&app.config().cors.allowed_origins),
            figures: Arc::new(HttpMetrics::new(auth::RULES.iter().map(|r| r.template))),
            routes,
        };
        Self { shared: Arc::new(shared) }
    }

    /// Serves one request (its peer address, if any, in its extensions as
    /// [`ConnectInfo<SocketAddr>`]).
    pub fn handle<B>(&self, req: axum::http::Request<B>) -> FrontFuture
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        self.handle_from(req, None)
    }

    /// Serves one request from `peer`. The address is handed over here, not
    /// in the request's extensions: inserting into them allocates a map on
    /// every request, and store reads (most requests) need the address only
    /// in the guard. Requests that go through the router get it as
    /// [`ConnectInfo<SocketAddr>`] as before.
    pub fn handle_from<B>(&self, req: axum::http::Request<B>, peer: Option<SocketAddr>) -> FrontFuture
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let shared = &self.shared;
        let req = req.map(Body::new);
        if Cors::is_preflight(req.method()) {
            let start = Instant::now();
            let (rule, _) = shared.route(req.uri().path());
            let reads = &shared.preflight_reads[rule.unwrap_or(shared.preflight_reads.len() - 1)];
            let resp = shared.cors.preflight(req.headers(), reads);
            // Counted and logged as every request (method OPTIONS), with what was asked.
            shared
                .figures
                .at(shared.figures.slot_at(rule, "OPTIONS"))
                .answered(resp.status().as_u16(), start.elapsed());
            if tracing::enabled!(target: "zarrd::request", tracing::Level::INFO) {
                let h = req.headers();
                let (origin, asked_method, asked_headers) = (
                    text_of(h.get(header::ORIGIN)),
                    text_of(h.get(header::ACCESS_CONTROL_REQUEST_METHOD)),
                    text_of(h.get(header::ACCESS_CONTROL_REQUEST_HEADERS)),
                );
                let allowed_methods = text_of(resp.headers().get(header::ACCESS_CONTROL_ALLOW_METHODS));
                tracing::info!(
                    target: "zarrd::request",
                    method = "OPTIONS",
                    path = &*super::links::redact(req.uri().path()),
                    status = resp.status().as_u16(),
                    origin,
                    asked_method,
                    asked_headers,
                    allowed_methods,
                    "preflight"
                );
            }
            return FrontFuture::answered(resp);
        }
        let start = Instant::now();
        let (rule, mount) = shared.route(req.uri().path());
        let slot = shared.figures.slot_at(rule, req.method().as_str());
        let id = match req.headers().get(&REQUEST_ID) {
            Some(v) if !v.is_empty() && v.len() <= 128 => v.clone(),
            _ => HeaderValue::from(NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed)),
        };
        // Formatted only when logged; the URI is reference-counted.
        let log = log_enabled().then(|| (req.method().clone(), req.uri().clone()));
        let mut done = Done {
            shared: Arc::clone(shared),
            start,
            slot,
            head: req.method() == Method::HEAD,
            id,
            origin: shared.cors.origin_of(req.headers()),
            log,
            token: None,
            permit: None,
        };
        let mut req = req;
        let has_body = !req.body().is_end_stream();
        if has_body {
            req = req.map(|body| counted(body, &shared.figures, slot, |r| &r.bytes_in));
        }
        if rule.is_some() && rule == shared.metrics_rule {
            req.extensions_mut().insert(Arc::clone(&shared.figures));
        }
        let direct = rule.is_some_and(|i| shared.store_reads[i]) && matches!(*req.method(), Method::GET | Method::HEAD);
        if let (Some(peer), false) = (peer, direct) {
            req.extensions_mut().insert(ConnectInfo(peer));
        }
        let rule = rule.and_then(|i| auth::RULES.get(i));
        let document = rule.is_some_and(|r| has_document(r, &req, has_body));
        let admitted = match shared.guard.admit_from(rule, mount, req, peer, &mut done.token) {
            Ok(admitted) => admitted,
            Err(e) => {
                return FrontFuture { stage: Stage::Refused { response: Some(e.into_response()) }, done: Some(done) }
            }
        };
        done.permit = admitted.permit;
        let timeout = shared.guard.request_timeout();
        let stage = if direct {
            // Store reads, most of the traffic, skip the router: the route is
            // known, and the handler needs nothing the router would add.
            let app = Arc::clone(&shared.app);
            let read: DirectFuture =
                Box::pin(async move { store::get_key(State(app), admitted.request).await.into_response() });
            Stage::Direct { inner: tokio::time::timeout(timeout, read), head: done.head }
        } else if document {
            // A document body (JSON, XML) costs many times its size once
            // parsed. It is read whole first, counting against
            // limits.upload_budget_bytes as its bytes arrive (503 at once
            // past it, as array data), so a client that announces a large
            // body and trickles it holds only what it sent. Once whole, the
            // request holds its share of limits.document_parse_budget_bytes
            // (waiting for room) until it is answered, so the extractor and
            // service inside do not reserve again. (The share was once taken
            // from the announced length before the body was read: three
            // slow connections announcing 16 MB held the whole 1 GiB budget
            // and stalled every document request of the server.)
            let gate = DocumentGate::of(&shared.app);
            let uploads = UploadBudget::of(&shared.app);
            let max_body = shared.app.config().limits.max_body_bytes;
            let mut router = shared.router.clone();
            let held: DirectFuture = Box::pin(async move {
                let (parts, body) = admitted.request.into_parts();
                let received = read_upload(&parts.headers, body, max_body, "limits.max_body_bytes", &uploads).await;
                let (bytes, _share) = match received {
                    Ok(received) => received,
                    Err(e) => return e.into_response(),
                };
                let len = bytes.len();
                let routed =
                    tower::Service::call(&mut router, axum::http::Request::from_parts(parts, Body::from(bytes)));
                match gate.scoped(len, routed).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            });
            Stage::Direct { inner: tokio::time::timeout(timeout, held), head: false }
        } else {
            let routed = tower::Service::call(&mut shared.router.clone(), admitted.request);
            Stage::Routed { inner: tokio::time::timeout(timeout, routed) }
        };
        FrontFuture { stage, done: Some(done) }
    }
}

impl<B> tower::Service<axum::http::Request<B>> for Front
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = FrontFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: axum::http::Request<B>) -> FrontFuture {
        self.handle(req)
    }
}

/// Where `part`, a slice of `whole`, lies in it.
fn subrange(whole: &str, part: &str) -> std::ops::Range<usize> {
    let start = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize).min(whole.len());
    start..(start + part.len()).min(whole.len())
}

/// True when request lines are logged (at INFO) or server errors are (at
/// WARN): the method and URI are kept for the log line.
fn log_enabled() -> bool {
    tracing::enabled!(target: "zarrd::request", tracing::Level::WARN)
}

/// What a request's answer needs once its handler is done.
struct Done {
    shared: Arc<Shared>,
    start: Instant,
    slot: usize,
    head: bool,
    id: HeaderValue,
    origin: Option<HeaderValue>,
    log: Option<(Method, Uri)>,
    token: Option<TokenName>,
    permit: Option<Permit>,
}

impl Done {
    /// Metrics, the log line, the request id and CORS headers: one log line
    /// per request (method, path, status, bytes, latency, request id, and
    /// the name of the caller's token, `-` without one); counts by status,
    /// latency until the response head, body bytes in and out.
    fn finish(self, mut resp: Response) -> Response {
        let Self { shared, start, slot, head, id, origin, log, token, permit } = self;
        // The request stops counting against the concurrency limit when its
        // answer starts, not while a large body streams.
        drop(permit);
        let status = resp.status().as_u16();
        let figures = shared.figures.at(slot);
        figures.answered(status, start.elapsed());
        if !head && !matches!(status, 204 | 304) {
            if let Some(n) = known_length(&resp) {
                figures.bytes_out.fetch_add(n, Ordering::Relaxed);
            } else {
                resp = resp.map(|body| counted(body, &shared.figures, slot, |r| &r.bytes_out));
            }
        }
        if let Some((method, uri)) = log {
            let info = tracing::enabled!(target: "zarrd::request", tracing::Level::INFO);
            if info || status >= 500 {
                // A signed link's credential is never logged.
                let path = &*super::links::redact(uri.path());
                let bytes = known_length(&resp).unwrap_or(0);
                let latency_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
                let request_id = id.to_str().unwrap_or("-");
                // The token's name (never its value), when the request came with a valid one.
                let token = token.as_ref().map_or("-", |t| &*t.0);
                if status >= 500 {
                    tracing::warn!(target: "zarrd::request", %method, path, status, bytes, latency_us, request_id, token, "request");
                } else {
                    tracing::info!(target: "zarrd::request", %method, path, status, bytes, latency_us, request_id, token, "request");
                }
            }
        }
        resp.headers_mut().insert(REQUEST_ID, id);
        shared.cors.decorate(origin.as_ref(), &mut resp);
        resp
    }
}

/// A header's value as text (lossy), for a log line.
fn text_of(v: Option<&HeaderValue>) -> Option<String> {
    v.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// The length of a response's body, when its head or its body says it: a
/// body of exactly known length first (no header to parse), else the
/// header (a HEAD answer's body is empty, its `Content-Length` is not).
fn known_length(resp: &Response) -> Option<u64> {
    HttpBody::size_hint(resp.body())
        .exact()
        .filter(|&n| n > 0)
        .or_else(|| resp.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok()))
        .or_else(|| HttpBody::size_hint(resp.body()).exact())
}

/// `body`, adding the length of each frame to the counter `pick` selects
/// in `slot` of `figures`.
fn counted(body: Body, figures: &Arc<HttpMetrics>, slot: usize, pick: fn(&RouteMetrics) -> &AtomicU64) -> Body {
    let figures = Arc::clone(figures);
    Counted::body(
        body,
        Arc::new(move |n| {
            pick(figures.at(slot)).fetch_add(n, Ordering::Relaxed);
        }),
    )
}

/// A store read's handler future.
type DirectFuture = Pin<Box<dyn Future<Output = Response> + Send>>;

/// Whether a request carries a document body (JSON, XML), as opposed to
/// none or array data (store PUTs, slice writes).
fn has_document(rule: &auth::Rule, req: &axum::http::Request<Body>, has_body: bool) -> bool {
    has_body && !rule.data_body(req.method())
}

pin_project! {
    #[project = StageProj]
    enum Stage {
        Refused { response: Option<Response> },
        Routed { #[pin] inner: Timeout<RouteFuture<Infallible>> },
        Direct { #[pin] inner: Timeout<DirectFuture>, head: bool },
    }
}

pin_project! {
    /// The answer to one request (a named future: nothing boxed).
    pub struct FrontFuture {
        #[pin]
        stage: Stage,
        // `None` for preflights, which are answered as they are.
        done: Option<Done>,
    }
}

impl FrontFuture {
    fn answered(response: Response) -> Self {
        Self { stage: Stage::Refused { response: Some(response) }, done: None }
    }
}

fn timed_out(done: Option<&Done>) -> Response {
    done.map_or_else(Response::default, |d| d.shared.guard.timed_out())
}

/// What axum's router does to every answer, for those that bypass it: a
/// `Content-Length` from an exactly sized body, and no body for HEAD.
fn as_routed(mut response: Response, head: bool) -> Response {
    if !response.headers().contains_key(header::CONTENT_LENGTH) {
        if let Some(n) = HttpBody::size_hint(response.body()).exact() {
            response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
    if head {
        *response.body_mut() = Body::empty();
    }
    response
}

impl Future for FrontFuture {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.stage.project() {
            StageProj::Refused { response } => response.take().unwrap_or_default(),
            StageProj::Routed { inner } => match std::task::ready!(inner.poll(cx)) {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_elapsed) => timed_out(this.done.as_ref()),
            },
            StageProj::Direct { inner, head } => match std::task::ready!(inner.poll(cx)) {
                Ok(response) => as_routed(response, *head),
                Err(_elapsed) => timed_out(this.done.as_ref()),
            },
        };
        Poll::Ready(Ok(match this.done.take() {
            Some(done) => done.finish(response),
            None => response,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn front() -> Front {
        let app = Arc::new(App::with_mounts(Config::default(), Vec::new()));
        super::super::router(app)
    }

    /// The peer address handed to [`Front::handle_from`] decides the
    /// loopback rule as the extension did, on store reads (which skip the
    /// router) and on routed requests alike.
    #[tokio::test]
    async fn the_peer_handed_over_is_the_one_the_guard_judges() {
        let config = Config { bind: "127.0.0.1:8080".parse().unwrap(), ..Config::default() };
        let mount = crate::storage::Mount::build("data", &crate::storage::MountSpec::from_url("memory://")).unwrap();
        let f = super::super::router(Arc::new(App::with_mounts(config, vec![mount])));
        let remote: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let status = |method: &str, path: &str, peer: Option<SocketAddr>| {
            let req = axum::http::Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
            let f = f.clone();
            async move { f.handle_from(req, peer).await.unwrap().status().as_u16() }
        };
        for (method, path) in [("GET", "/zarr/data/k"), ("HEAD", "/zarr/data/k"), ("PUT", "/zarr/data/k")] {
            assert_eq!(status(method, path, Some(remote)).await, 401, "{method} {path}");
            assert_eq!(status(method, path, None).await, 401, "{method} {path} without a peer");
        }
        assert_eq!(status("GET", "/zarr/data/k", Some(local)).await, 404);
        assert_eq!(status("PUT", "/zarr/data/k", Some(local)).await, 201);
        assert_eq!(status("GET", "/zarr/data/k", Some(local)).await, 200);
    }

    #[test]
    fn routes_and_mount_segments_are_found_as_axum_finds_them() {
        let f = front();
        let template = |path: &'static str| {
            let (rule, mount) = f.shared.route(path);
            (rule.map(|i| auth::RULES[i].template), mount.map(|m| &path[m]))
        };
        assert_eq!(template("/zarr/d%61ta/a/b/c"), (Some("/zarr/{mount}/{*key}"), Some("d%61ta")));
        assert_eq!(template("/zarr/data"), (Some("/zarr/{mount}"), Some("data")));
        assert_eq!(template("/zarr/data/"), (Some("/zarr/{mount}/"), Some("data")));
        assert_eq!(template("/api/v1/data/m/x/y"), (Some("/api/v1/data/{mount}/{*path}"), Some("m")));
        assert_eq!(template("/api/v1/mounts"), (Some("/api/v1/mounts"), None));
        assert_eq!(template("/healthz"), (Some("/healthz"), None));
        assert_eq!(template("/nothing/here"), (None, None));
        assert_eq!(template("/zarr"), (None, None));
        // The store keys' shortcut agrees with the route tree everywhere.
        assert!(f.shared.store_key_rule.is_some());
        let paths = [
            "/zarr/data/a",
            "/zarr/data/a/b/c",
            "/zarr/data/",
            "/zarr/data",
            "/zarr/",
            "/zarr//a",
            "/zarr//",
            "/zarr/data//",
            "/zarr/data//a",
            "/zarr/d%2Fa/k",
            "/zarr/data/a/",
            "/zarr/data/%2e%2e/x",
            "/zarrx/a/b",
            "/zarr/a/b?c",
            "/zarr/é/日本",
            "/api/v1/data/m/x",
            "/zarr/data/.zarrd-staging/x",
        ];
        for path in paths {
            let tree = match f.shared.routes.at(path) {
                Ok(m) => (Some(*m.value), m.params.get("mount").map(|v| subrange(path, v))),
                Err(_) => (None, None),
            };
            assert_eq!(f.shared.route(path), tree, "{path}");
        }
    }
}
