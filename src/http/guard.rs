//! The guard: the checks every request passes before its handler runs, in
//! order: the route's rule ([`auth::RULES`]), load shedding past
//! `limits.max_concurrent_requests` (or `limits.max_concurrent_uploads`),
//! authentication and authorisation, the cross-site check of writes,
//! unknown query parameters, refusing document bodies over
//! `limits.max_body_bytes` and form-encoded bodies, and the idle timeout and
//! minimum rate of request bodies (`limits.body_read_timeout_seconds`,
//! `limits.min_body_bytes_per_second`). The request timeout
//! (`limits.request_timeout_seconds`) is applied around the handler by
//! [`super::front`], which calls [`Guard::admit`] on every request.
//!
//! Decisions:
//! - Load shedding answers 503 `overloaded` with `Retry-After: 1` at once; no
//!   queue (a queue only hides overload until clients time out). Routes that
//!   need no authentication (health, metrics, the API description) are not
//!   counted, so probes keep answering under load. A request counts until its
//!   answer starts, not while a large answer streams.
//! - Fair admission: a request whose body is still arriving holds a slot of
//!   `limits.max_concurrent_uploads`, not of `limits.max_concurrent_requests`.
//!   Only once its body is whole does it take a request slot (waiting for
//!   one, within the request timeout, rather than failing after the upload),
//!   and it gives the upload slot back. Clients trickling bodies (or simply
//!   on slow links) can therefore use up the uploads budget, and further
//!   uploads get 503, but never the slots every other request needs.
//! - Unknown query parameters are 400 `unknown_parameter` naming them,
//!   on every route whose rule lists its parameters ([`auth::Params`]):
//!   a typo (`select=` for `sel=`) must not silently answer something else.
//! - Cross-site writes (CSRF, DNS rebinding): without a token, a request
//!   that changes data (a method needing `write` or `admin`) and carries an
//!   `Origin` other than the server's own or one listed by name in
//!   `cors.allowed_origins` is 403 `cross_site_refused`, naming the origin;
//!   so is one without `Origin` that a browser marked
//!   `Sec-Fetch-Site: cross-site` or `same-site`. A request with a token is
//!   not checked: a token is never sent by a browser on its own, so a page
//!   cannot borrow it. Form-encoded and `text/plain` bodies (what a page can
//!   send without a preflight) are 415 on every route that writes.
//! - A request that takes too long is 504 `timeout` (503 is kept for
//!   shedding and unavailable storage, which are worth retrying at once).
//! - A body that stops arriving, or arrives slower on average than
//!   `limits.min_body_bytes_per_second` once `body_read_timeout_seconds`
//!   has passed, is 408 `body_timeout` (RFC 9110 §15.5.9). Bodies (array
//!   data and documents) also count against `limits.upload_budget_bytes`
//!   as they arrive (503 at once past it: `super::extract::read_upload`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use percent_encoding::percent_decode_str;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::auth::{self, Authenticator, Caller, Need, TokenName};
use super::cors::Cors;
use super::error::{ApiError, ErrorCode};
use super::extract::BodyTimeout;
use crate::config::Scope;
use crate::service::App;

/// The guard's settings and the in-flight count, shared by every worker:
/// the limit is global to the process.
#[derive(Debug)]
pub struct Guard {
    app: Arc<App>,
    auth: Arc<Authenticator>,
    cors: Cors,
    /// Slots of `limits.max_concurrent_requests`.
    requests: Arc<tokio::sync::Semaphore>,
    max_in_flight: usize,
    /// Requests whose bodies are arriving (`limits.max_concurrent_uploads`).
    uploads: AtomicUsize,
    max_uploads: usize,
    request_timeout: Duration,
    body_timeout: Duration,
    /// `limits.min_body_bytes_per_second` (0: none).
    min_body_rate: u64,
    max_body: u64,
}

/// What the caller of a [`Need::Caller`] or [`Need::Observer`] route may see; in the request's
/// extensions for those routes.
#[derive(Debug, Clone)]
pub struct Access {
    pub caller: Caller,
    auth: Arc<Authenticator>,
}

impl Access {
    /// True when the caller has `scope` on `mount`.
    #[must_use]
    pub fn may(&self, app: &App, mount: &str, scope: Scope) -> bool {
        self.auth.scope(app, self.caller, mount).is_some_and(|s| s >= scope)
    }
}

/// A request the guard let through.
#[derive(Debug)]
pub struct Admitted {
    /// The request, its body wrapped in the idle timeout when it has one.
    pub request: Request,
    /// A slot of `limits.max_concurrent_requests` (or, while the body
    /// arrives, of `limits.max_concurrent_uploads`), for counted routes.
    pub permit: Option<Permit>,
}

impl Guard {
    /// Built from the app's configuration.
    #[must_use]
    pub fn new(app: Arc<App>) -> Self {
        let limits = &app.config().limits;
        Self {
            auth: Arc::new(Authenticator::new(app.config())),
            cors: Cors::new(&app.config().cors.allowed_origins),
            requests: Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_requests)),
            max_in_flight: limits.max_concurrent_requests,
            uploads: AtomicUsize::new(0),
            max_uploads: limits.max_concurrent_uploads,
            request_timeout: Duration::from_secs(limits.request_timeout_seconds),
            body_timeout: Duration::from_secs(limits.body_read_timeout_seconds),
            min_body_rate: limits.min_body_bytes_per_second,
            max_body: limits.max_body_bytes,
            app,
        }
    }

    /// The authenticator (for the start-up log).
    #[must_use]
    pub fn authenticator(&self) -> &Authenticator {
        &self.auth
    }

    /// `limits.request_timeout_seconds`.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Checks a request against its route's `rule` (`None`: no route
    /// matched, and the router answers its JSON 404, which reveals nothing)
    /// and the limits. `mount` is where the route's `{mount}` segment is in
    /// the request's path (percent-encoded), when the route has one. `token` gets the name of
    /// the caller's token once known, refused or not.
    ///
    /// # Errors
    /// The refusal, as the response it becomes: 401, 403, 405, 413 or 503.
    pub fn admit(
        self: &Arc<Self>,
        rule: Option<&auth::Rule>,
        mount: Option<std::ops::Range<usize>>,
        req: Request,
        token: &mut Option<TokenName>,
    ) -> Result<Admitted, ApiError> {
        self.admit_from(rule, mount, req, None, token)
    }

    /// [`Self::admit`] with the peer's address given, as the server hands
    /// it over ([`auth::Authenticator::identify_from`]); `None` reads it
    /// from the request's extensions.
    ///
    /// # Errors
    /// As [`Self::admit`].
    pub fn admit_from(
        self: &Arc<Self>,
        rule: Option<&auth::Rule>,
        mount: Option<std::ops::Range<usize>>,
        mut req: Request,
        peer: Option<std::net::SocketAddr>,
        token: &mut Option<TokenName>,
    ) -> Result<Admitted, ApiError> {
        let Some(rule) = rule else {
            return Ok(Admitted { request: req, permit: None });
        };
        let Some(need) = rule.need(req.method()) else {
            return Err(ErrorCode::MethodNotAllowed
                .error(format!("{} is not supported on {}", req.method(), rule.template))
                .with_header(header::ALLOW, &rule.allow()));
        };
        // A request whose body is still to come holds an upload slot until
        // the body is whole (see the module documentation).
        let upload = !req.body().is_end_stream();
        let (permit, caller) = match need {
            Need::Public => (None, None),
            Need::Observer => {
                let caller = self.auth.identify_from(&req, peer)?;
                token.clone_from(&self.auth.name(caller).cloned());
                req.extensions_mut().insert(Access { caller, auth: Arc::clone(&self.auth) });
                (None, Some(caller))
            }
            Need::Caller | Need::Mount(_) => {
                let permit = if upload { self.acquire_upload()? } else { self.acquire()? };
                let caller = self.auth.identify_from(&req, peer)?;
                token.clone_from(&self.auth.name(caller).cloned());
                if let Need::Mount(scope) = need {
                    let raw = mount.and_then(|m| req.uri().path().get(m)).unwrap_or_default();
                    // Decoded only when there is something to decode.
                    let name = if raw.contains('%') { percent_decode_str(raw).decode_utf8_lossy() } else { raw.into() };
                    self.auth.authorise(&self.app, caller, &name, scope)?;
                } else {
                    req.extensions_mut().insert(Access { caller, auth: Arc::clone(&self.auth) });
                }
                (Some(permit), Some(caller))
            }
        };
        let writes = rule.writes(req.method());
        if writes && matches!(caller, Some(Caller::Anonymous { .. })) {
            self.check_cross_site(&req)?;
        }
        check_params(rule, &req)?;
        if upload {
            // The store protocol stores whatever bytes a key is given, and a
            // page cannot send its PUT without a preflight (refused to origins
            // that are not listed): `curl --data-binary` keeps working there.
            let store_put = req.method() != Method::POST && rule.template.starts_with("/zarr/");
            if writes && !store_put {
                refuse_form_body(&req)?;
            }
            if !rule.data_body(req.method()) {
                let length =
                    req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                if let Some(length) = length.filter(|l| *l > self.max_body) {
                    return Err(ErrorCode::PayloadTooLarge.error(format!(
                        "the request body ({length} bytes) is larger than limits.max_body_bytes ({})",
                        self.max_body
                    )));
                }
            }
            let (timeout, min_rate) = (self.body_timeout, self.min_body_rate);
            let slot = match &permit {
                Some(Permit::Upload(slot)) => Some(Arc::clone(slot)),
                _ => None,
            };
            req = req.map(|body| {
                let body = Body::new(TimeoutBody::new(body, timeout, min_rate));
                match slot {
                    Some(slot) => Body::new(AdmissionBody::new(body, slot, Arc::clone(&self.requests))),
                    None => body,
                }
            });
        }
        Ok(Admitted { request: req, permit })
    }

    /// Refuses a write a page of another site may have sent (see the module
    /// documentation).
    fn check_cross_site(&self, req: &Request) -> Result<(), ApiError> {
        let headers = req.headers();
        let refuse = |what: String| {
            ErrorCode::CrossSiteRefused.error(format!(
                "{} {}: refused, the request comes from {what}, which is neither this server's own origin nor \
                     listed by name in cors.allowed_origins (a web page may change data only from a listed \
                     origin, or with a token)",
                req.method(),
                req.uri().path()
            ))
        };
        if let Some(origin) = headers.get(header::ORIGIN) {
            if self.cors.may_write(origin, headers) {
                return Ok(());
            }
            return Err(refuse(format!("the page of origin `{}`", String::from_utf8_lossy(origin.as_bytes()))));
        }
        match headers.get("sec-fetch-site").map(HeaderValue::as_bytes) {
            Some(site @ (b"cross-site" | b"same-site")) => {
                Err(refuse(format!("a page (Sec-Fetch-Site: {})", String::from_utf8_lossy(site))))
            }
            _ => Ok(()),
        }
    }

    fn acquire_upload(self: &Arc<Self>) -> Result<Permit, ApiError> {
        if self.uploads.fetch_add(1, Ordering::AcqRel) >= self.max_uploads {
            self.uploads.fetch_sub(1, Ordering::Release);
            return Err(overloaded(format!(
                "the server is receiving its limit of {} request bodies (limits.max_concurrent_uploads); retry shortly",
                self.max_uploads
            )));
        }
        Ok(Permit::Upload(Arc::new(UploadSlot {
            held: std::sync::Mutex::new(Held::Upload(UploadPermit(Arc::clone(self)))),
        })))
    }

    fn acquire(&self) -> Result<Permit, ApiError> {
        match Arc::clone(&self.requests).try_acquire_owned() {
            Ok(permit) => Ok(Permit::Request(permit)),
            Err(_) => Err(overloaded(format!(
                "the server is serving its limit of {} requests (limits.max_concurrent_requests); retry shortly",
                self.max_in_flight
            ))),
        }
    }

    /// The answer to a request that ran past `limits.request_timeout_seconds`.
    #[must_use]
    pub fn timed_out(&self) -> Response {
        ErrorCode::Timeout
            .error(format!(
                "the request did not complete within {} s (limits.request_timeout_seconds)",
                self.request_timeout.as_secs()
            ))
            .into_response()
    }
}

/// 503 `overloaded`, `Retry-After: 1`.
fn overloaded(message: String) -> ApiError {
    ErrorCode::Overloaded.error(message).with_header(header::RETRY_AFTER, "1")
}

/// 400 `unknown_parameter` for the first query parameter `rule` does not
/// know for the request's method.
fn check_params(rule: &auth::Rule, req: &Request) -> Result<(), ApiError> {
    let (Some(known), Some(query)) = (rule.params(req.method()), req.uri().query()) else {
        return Ok(());
    };
    for (name, _) in url::form_urlencoded::parse(query.as_bytes()) {
        if !known.contains(&&*name) {
            let accepted = if known.is_empty() {
                "none".to_string()
            } else {
                known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            };
            return Err(ErrorCode::UnknownParameter.error(format!(
                "unknown query parameter `{name}`: {} {} takes {accepted}",
                req.method(),
                rule.template
            )));
        }
    }
    Ok(())
}

/// 415 for a body of a type a page can send without a preflight
/// (`application/x-www-form-urlencoded`, `multipart/form-data`,
/// `text/plain`) on a route that writes, but for store-protocol PUTs: no
/// other endpoint takes them.
fn refuse_form_body(req: &Request) -> Result<(), ApiError> {
    let Some(value) = req.headers().get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = String::from_utf8_lossy(value.as_bytes());
    let essence = essence.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if matches!(essence.as_str(), "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain") {
        return Err(ErrorCode::UnsupportedMediaType.error(format!(
            "Content-Type `{essence}`: {} {} takes no form or text bodies; send the bytes as \
                 application/octet-stream (JSON documents as application/json)",
            req.method(),
            req.uri().path()
        )));
    }
    Ok(())
}

/// A request's slot: of `limits.max_concurrent_requests`, or of an upload
/// that turns into one once its body is whole. Given back on drop.
#[derive(Debug)]
pub enum Permit {
    Request(tokio::sync::OwnedSemaphorePermit),
    Upload(Arc<UploadSlot>),
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Self::Upload(slot) = self {
            // The body may outlive the answer's start; its slot does not.
            *slot.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Held::Nothing;
        }
    }
}

/// What an upload holds: its upload slot while the body arrives, then a
/// request slot.
#[derive(Debug)]
pub struct UploadSlot {
    held: std::sync::Mutex<Held>,
}

#[derive(Debug)]
#[allow(dead_code)] // The slots are held for their `Drop`.
enum Held {
    Upload(UploadPermit),
    Request(tokio::sync::OwnedSemaphorePermit),
    Nothing,
}

/// A slot of `limits.max_concurrent_uploads`, given back on drop.
#[derive(Debug)]
struct UploadPermit(Arc<Guard>);

impl Drop for UploadPermit {
    fn drop(&mut self) {
        self.0.uploads.fetch_sub(1, Ordering::Release);
    }
}

/// The future of a request slot.
type Acquiring = Pin<Box<dyn Future<Output = Option<tokio::sync::OwnedSemaphorePermit>> + Send>>;

pin_project! {
    /// An upload's body: at its end it trades the upload slot for a request
    /// slot (waiting for one) before telling the handler the body is whole.
    struct AdmissionBody {
        #[pin]
        inner: Body,
        slot: Arc<UploadSlot>,
        requests: Arc<tokio::sync::Semaphore>,
        acquiring: Option<Acquiring>,
        done: bool,
    }
}

impl AdmissionBody {
    fn new(inner: Body, slot: Arc<UploadSlot>, requests: Arc<tokio::sync::Semaphore>) -> Self {
        Self { inner, slot, requests, acquiring: None, done: false }
    }
}

impl HttpBody for AdmissionBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        if this.acquiring.is_none() {
            match std::task::ready!(this.inner.poll_frame(cx)) {
                None => {
                    let requests = Arc::clone(this.requests);
                    *this.acquiring = Some(Box::pin(async move { requests.acquire_owned().await.ok() }));
                }
                Some(frame) => return Poll::Ready(Some(frame.map_err(Into::into))),
            }
        }
        if let Some(acquiring) = this.acquiring.as_mut() {
            let permit = std::task::ready!(acquiring.as_mut().poll(cx));
            let mut held = this.slot.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if matches!(*held, Held::Upload(_)) {
                // Replacing drops the upload slot.
                *held = permit.map_or(Held::Nothing, Held::Request);
            }
            *this.acquiring = None;
            *this.done = true;
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl auth::Rule {
    /// True when `method` here carries array data (bounded by
    /// `limits.max_put_bytes` in the handler) rather than a document.
    #[must_use]
    pub fn data_body(&self, method: &Method) -> bool {
        method == Method::PUT && (self.template.starts_with("/zarr/") || self.template.starts_with("/api/v1/data/"))
    }
}

pin_project! {
    /// A request body that fails with [`BodyTimeout`] when no data arrives
    /// for `timeout`, or (with a `min_rate`) when it has not arrived whole
    /// by its start + `timeout` + one second per `min_rate` bytes received.
    struct TimeoutBody {
        #[pin]
        inner: Body,
        #[pin]
        sleep: Sleep,
        timeout: Duration,
        min_rate: u64,
        // The clock starts when the handler first asks for data (a client
        // waiting for `100 Continue` sends nothing before that).
        started: Option<Instant>,
        received: u64,
        timed_out: bool,
    }
}

impl TimeoutBody {
    fn new(inner: Body, timeout: Duration, min_rate: u64) -> Self {
        Self {
            inner,
            sleep: tokio::time::sleep(timeout),
            timeout,
            min_rate,
            started: None,
            received: 0,
            timed_out: false,
        }
    }
}

/// `at + d`, or (past the clock's range: a timeout configured in the
/// billions of seconds) about 30 years from `at`, as tokio's own timers.
fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d).unwrap_or_else(|| at + Duration::from_secs(86_400 * 365 * 30))
}

/// When a body started at `start` that has sent `received` bytes must be
/// whole at `min_rate` bytes a second after a grace of `timeout`; `None`
/// without a minimum (or past the clock's range).
fn rate_deadline(start: Instant, timeout: Duration, received: u64, min_rate: u64) -> Option<Instant> {
    if min_rate == 0 {
        return None;
    }
    let earned = Duration::from_millis(received.saturating_mul(1000) / min_rate);
    start.checked_add(timeout)?.checked_add(earned)
}

impl HttpBody for TimeoutBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        if *this.timed_out {
            return Poll::Ready(None);
        }
        let first = this.started.is_none();
        let start = *this.started.get_or_insert_with(Instant::now);
        let rate = |received: u64| rate_deadline(start, *this.timeout, received, *this.min_rate);
        // The sooner of: `timeout` after the last data (`from`), and when
        // the minimum rate wants the body whole.
        let deadline = |from: Instant, received: u64| {
            let idle = later(from, *this.timeout);
            rate(received).map_or(idle, |r| r.min(idle))
        };
        if first {
            this.sleep.as_mut().reset(deadline(start, 0));
        }
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            if let Some(Ok(f)) = &frame {
                if let Some(data) = f.data_ref() {
                    *this.received = this.received.saturating_add(data.len() as u64);
                }
            }
            this.sleep.as_mut().reset(deadline(Instant::now(), *this.received));
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        if this.sleep.poll(cx).is_ready() {
            *this.timed_out = true;
            let now = Instant::now();
            let error = match rate(*this.received) {
                Some(deadline) if deadline <= now && *this.received > 0 => BodyTimeout::TooSlow {
                    received: *this.received,
                    seconds: now.duration_since(start).as_secs(),
                    min: *this.min_rate,
                    grace: this.timeout.as_secs(),
                },
                _ => BodyTimeout::Idle(this.timeout.as_secs()),
            };
            return Poll::Ready(Some(Err(Box::new(error))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.timed_out || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use http_body_util::BodyExt;

    /// A body fed by hand, and the sender that feeds it.
    fn channel_body() -> (tokio::sync::mpsc::Sender<&'static [u8]>, Body) {
        let (tx, rx) = tokio::sync::mpsc::channel::<&'static [u8]>(4);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok::<_, std::io::Error>(Bytes::from_static(b)), rx))
        });
        (tx, Body::from_stream(stream))
    }

    #[tokio::test]
    async fn the_idle_clock_starts_at_the_first_read_and_restarts_on_data() {
        let (tx, body) = channel_body();
        let mut body = std::pin::pin!(TimeoutBody::new(body, Duration::from_millis(400), 0));
        // The handler reads late: that is not the client's fault.
        tokio::time::sleep(Duration::from_millis(800)).await;
        // Each piece comes 200 ms after the body starts waiting for it: with
        // the clock restarted on data, five of them (1 s) never reach 400 ms.
        let mut tx = tx;
        for piece in [b"a".as_slice(), b"b", b"c", b"d", b"e"] {
            let sender = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                tx.send(piece).await.unwrap();
                tx
            });
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), piece);
            tx = sender.await.unwrap();
        }
        // Then silence: the error, once, then the end.
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.downcast_ref::<BodyTimeout>().is_some(), "{err}");
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn timeouts_past_the_clocks_range_do_not_panic() {
        // `body_read_timeout_seconds = 9223372036854775000` panicked adding it to the clock.
        let (tx, body) = channel_body();
        let huge = Duration::from_secs(9_223_372_036_854_775_000);
        let mut body = std::pin::pin!(TimeoutBody::new(body, huge, 16_384));
        tx.send(b"abc").await.unwrap();
        drop(tx);
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), &b"abc"[..]);
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_body_below_the_minimum_rate_fails_after_the_grace() {
        // 400 ms of grace, then 1000 bytes a second on average: 10 bytes
        // every 50 ms (200 bytes a second, never idle) fail once their
        // 400 ms + 1 ms a byte is past: at about 500 ms.
        let (tx, body) = channel_body();
        let mut body = std::pin::pin!(TimeoutBody::new(body, Duration::from_millis(400), 1000));
        let feeder = tokio::spawn(async move {
            for _ in 0..40 {
                if tx.send(b"0123456789").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let started = std::time::Instant::now();
        let mut received = 0;
        let err = loop {
            match body.frame().await.unwrap() {
                Ok(frame) => received += frame.into_data().unwrap().len(),
                Err(e) => break e,
            }
        };
        let waited = started.elapsed();
        let Some(BodyTimeout::TooSlow { received: counted, min: 1000, .. }) = err.downcast_ref::<BodyTimeout>() else {
            panic!("{err}")
        };
        assert_eq!(*counted as usize, received);
        assert!(waited >= Duration::from_millis(400) && waited < Duration::from_millis(1500), "{waited:?}");
        assert!(err.to_string().contains("limits.min_body_bytes_per_second = 1000"), "{err}");
        feeder.abort();

        // 50 bytes every 5 ms (10,000 a second) for 1 s: ten times the
        // minimum, fine (a loaded machine's late timers have 45 ms a step).
        let (tx, body) = channel_body();
        let mut body = std::pin::pin!(TimeoutBody::new(body, Duration::from_millis(400), 1000));
        let feeder = tokio::spawn(async move {
            for _ in 0..200 {
                tx.send(b"01234567890123456789012345678901234567890123456789").await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let mut received = 0;
        while let Some(frame) = body.frame().await {
            received += frame.unwrap().into_data().unwrap().len();
        }
        feeder.await.unwrap();
        assert_eq!(received, 10_000);
    }

    fn guard(requests: usize, uploads: usize) -> Arc<Guard> {
        let mut config = crate::config::Config::default();
        config.limits.max_concurrent_requests = requests;
        config.limits.max_concurrent_uploads = uploads;
        let mount = crate::storage::Mount::build("data", &crate::storage::MountSpec::from_url("memory://")).unwrap();
        Arc::new(Guard::new(Arc::new(App::with_mounts(config, vec![mount]))))
    }

    fn request(method: &str, path: &str, body: Body) -> Request {
        let mut req = axum::http::Request::builder().method(method).uri(path).body(body).unwrap();
        req.extensions_mut().insert(axum::extract::ConnectInfo(std::net::SocketAddr::from(([127, 0, 0, 1], 9))));
        req
    }

    fn admit(guard: &Arc<Guard>, method: &str, path: &str, body: Body) -> Result<Admitted, ApiError> {
        let rule = auth::rule(if path.starts_with("/zarr/") { "/zarr/{mount}/{*key}" } else { "/healthz" });
        guard.admit(rule, Some(6..10), request(method, path, body), &mut None)
    }

    #[test]
    fn requests_past_the_limit_are_shed_with_retry_after_and_probes_are_not_counted() {
        let g = guard(2, 2);
        let one = admit(&g, "GET", "/zarr/data/a", Body::empty()).unwrap();
        let two = admit(&g, "GET", "/zarr/data/a", Body::empty()).unwrap();
        let e = admit(&g, "GET", "/zarr/data/a", Body::empty()).unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "overloaded"));
        assert!(e.message.contains("limits.max_concurrent_requests"), "{}", e.message);
        assert!(e.headers.iter().any(|(h, v)| h == header::RETRY_AFTER && v == "1"));
        assert!(admit(&g, "GET", "/healthz", Body::empty()).is_ok());
        drop(one);
        assert!(admit(&g, "GET", "/zarr/data/a", Body::empty()).is_ok());
        drop(two);
    }

    #[tokio::test]
    async fn an_upload_takes_a_request_slot_only_once_its_body_is_whole() {
        let g = guard(1, 2);
        let (tx, body) = channel_body();
        let upload = admit(&g, "PUT", "/zarr/data/a", body).unwrap();
        assert!(matches!(upload.permit, Some(Permit::Upload(_))));
        assert_eq!(g.uploads.load(Ordering::Acquire), 1);
        // The body is arriving: the one request slot is free.
        let read = admit(&g, "GET", "/zarr/data/a", Body::empty()).unwrap();
        let mut body = upload.request.into_body();
        tx.send(b"abc").await.unwrap();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), b"abc".as_slice());
        drop(tx);
        // The body is whole, but the slot is taken: the end waits for it.
        let end = tokio::time::timeout(Duration::from_millis(200), body.frame()).await;
        assert!(end.is_err(), "the body ended without a request slot");
        drop(read);
        let end = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.expect("the slot freed");
        assert!(end.is_none());
        // Traded: the upload slot is back, the request slot is taken.
        assert_eq!(g.uploads.load(Ordering::Acquire), 0);
        assert!(admit(&g, "GET", "/zarr/data/a", Body::empty()).is_err());
        drop(upload.permit);
        assert!(admit(&g, "GET", "/zarr/data/a", Body::empty()).is_ok());
    }
}
