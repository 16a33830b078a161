//! The guard: the checks every request passes before its handler runs, in
//! order: the route's rule ([`auth::RULES`]), load shedding past
//! `limits.max_concurrent_requests`, authentication and authorisation,
//! refusing document bodies over `limits.max_body_bytes`, and the idle
//! timeout of request bodies (`limits.body_read_timeout_seconds`). The
//! request timeout (`limits.request_timeout_seconds`) is applied around the
//! handler by [`super::front`], which calls [`Guard::admit`] on every
//! request.
//!
//! Decisions:
//! - Load shedding answers 503 `overloaded` with `Retry-After: 1` at once; no
//!   queue (a queue only hides overload until clients time out). Routes that
//!   need no authentication (health, metrics, the API description) are not
//!   counted, so probes keep answering under load. A request counts until its
//!   answer starts, not while a large answer streams.
//! - A request that takes too long is 504 `timeout` (503 is kept for
//!   shedding and unavailable storage, which are worth retrying at once).
//! - A body that stops arriving is 408 `body_timeout` (RFC 9110 §15.5.9).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use percent_encoding::percent_decode_str;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::auth::{self, Authenticator, Caller, Need, TokenName};
use super::error::ApiError;
use crate::config::Scope;
use crate::service::App;

/// The guard's settings and the in-flight count, shared by every worker:
/// the limit is global to the process.
#[derive(Debug)]
pub struct Guard {
    app: Arc<App>,
    auth: Arc<Authenticator>,
    in_flight: AtomicUsize,
    max_in_flight: usize,
    request_timeout: Duration,
    body_timeout: Duration,
    max_body: u64,
}

/// What the caller of a [`Need::Caller`] route may see; in the request's
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
    /// A slot of `limits.max_concurrent_requests`, for counted routes.
    pub permit: Option<Permit>,
}

impl Guard {
    /// Built from the app's configuration.
    #[must_use]
    pub fn new(app: Arc<App>) -> Self {
        let limits = &app.config().limits;
        Self {
            auth: Arc::new(Authenticator::new(app.config())),
            in_flight: AtomicUsize::new(0),
            max_in_flight: limits.max_concurrent_requests,
            request_timeout: Duration::from_secs(limits.request_timeout_seconds),
            body_timeout: Duration::from_secs(limits.body_read_timeout_seconds),
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
        mut req: Request,
        token: &mut Option<TokenName>,
    ) -> Result<Admitted, ApiError> {
        let Some(rule) = rule else {
            return Ok(Admitted { request: req, permit: None });
        };
        let Some(need) = rule.need(req.method()) else {
            let mut e = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{} is not supported on {}", req.method(), rule.template),
            );
            if let Ok(v) = HeaderValue::from_str(&rule.allow()) {
                e.headers.push((header::ALLOW, v));
            }
            return Err(e);
        };
        let permit = match need {
            Need::Public => None,
            Need::Caller => {
                let permit = self.acquire()?;
                let caller = self.auth.identify(&req)?;
                token.clone_from(&self.auth.name(caller).cloned());
                req.extensions_mut().insert(Access { caller, auth: Arc::clone(&self.auth) });
                Some(permit)
            }
            Need::Mount(scope) => {
                let permit = self.acquire()?;
                let caller = self.auth.identify(&req)?;
                token.clone_from(&self.auth.name(caller).cloned());
                let raw = mount.and_then(|m| req.uri().path().get(m)).unwrap_or_default();
                self.auth.authorise(&self.app, caller, &percent_decode_str(raw).decode_utf8_lossy(), scope)?;
                Some(permit)
            }
        };
        if !req.body().is_end_stream() {
            if !rule.data_body(req.method()) {
                let length =
                    req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                if let Some(length) = length.filter(|l| *l > self.max_body) {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        format!(
                            "the request body ({length} bytes) is larger than limits.max_body_bytes ({})",
                            self.max_body
                        ),
                    ));
                }
            }
            let timeout = self.body_timeout;
            req = req.map(|body| Body::new(TimeoutBody::new(body, timeout)));
        }
        Ok(Admitted { request: req, permit })
    }

    fn acquire(self: &Arc<Self>) -> Result<Permit, ApiError> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::Release);
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!(
                    "the server is serving its limit of {} requests (limits.max_concurrent_requests); retry shortly",
                    self.max_in_flight
                ),
            );
            e.headers.push((header::RETRY_AFTER, HeaderValue::from_static("1")));
            return Err(e);
        }
        Ok(Permit(Arc::clone(self)))
    }

    /// The answer to a request that ran past `limits.request_timeout_seconds`.
    #[must_use]
    pub fn timed_out(&self) -> Response {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
            format!(
                "the request did not complete within {} s (limits.request_timeout_seconds)",
                self.request_timeout.as_secs()
            ),
        )
        .into_response()
    }
}

/// A slot of `limits.max_concurrent_requests`, given back on drop.
#[derive(Debug)]
pub struct Permit(Arc<Guard>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Release);
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

/// A request body sent nothing for `limits.body_read_timeout_seconds`.
#[derive(Debug, thiserror::Error)]
#[error("the request body sent nothing for {0} s (limits.body_read_timeout_seconds)")]
pub struct BodyTimeout(pub u64);

pin_project! {
    /// A request body that fails with [`BodyTimeout`] when no data arrives
    /// for `timeout`.
    struct TimeoutBody {
        #[pin]
        inner: Body,
        #[pin]
        sleep: Sleep,
        timeout: Duration,
        // The clock starts when the handler first asks for data (a client
        // waiting for `100 Continue` sends nothing before that).
        started: bool,
        timed_out: bool,
    }
}

impl TimeoutBody {
    fn new(inner: Body, timeout: Duration) -> Self {
        Self { inner, sleep: tokio::time::sleep(timeout), timeout, started: false, timed_out: false }
    }
}

impl HttpBody for TimeoutBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        if *this.timed_out {
            return Poll::Ready(None);
        }
        if !*this.started {
            *this.started = true;
            this.sleep.as_mut().reset(Instant::now() + *this.timeout);
        }
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            this.sleep.as_mut().reset(Instant::now() + *this.timeout);
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        if this.sleep.poll(cx).is_ready() {
            *this.timed_out = true;
            return Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout.as_secs())))));
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
        let mut body = std::pin::pin!(TimeoutBody::new(body, Duration::from_millis(400)));
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
}
