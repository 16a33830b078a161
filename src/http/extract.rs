//! Extractors: what a handler takes from a request, each refusal in the
//! JSON envelope of [`super::error`].
//!
//! - [`NodeTarget`]: the `{mount}` and `{*path}` of a node route, declared
//!   once as OpenAPI path parameters ([`utoipa::IntoParams`]).
//! - [`ApiQuery`]: a query string, 400 `invalid_query` naming the parameter.
//! - [`JsonBody`] and [`TypedJsonBody`]: JSON documents, at most
//!   `limits.max_body_bytes`, parsed within the document budget.
//! - [`read_body`]: a data body up to a limit, 413 beyond it, 408 when it
//!   stops arriving ([`BodyTimeout`], raised by the guard's body wrapper).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use utoipa::IntoParams;

use super::error::{ApiError, ApiResult, ErrorCode};
use crate::service::node::NodePath;
use crate::service::{App, ServiceError};

/// The mount and node path of a `/api/v1/<resource>/{mount}[/{*path}]`
/// route (the path is the root when the route has none).
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct NodeTarget {
    /// Mount name
    #[param(example = "data")]
    pub mount: String,
    /// Node path inside the mount
    #[param(value_type = String, example = "climate/temperature")]
    pub path: NodePath,
}

impl<S: Send + Sync> FromRequestParts<S> for NodeTarget {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(mut params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ErrorCode::InvalidPath.error(format!("invalid path: {e}")))?;
        let mount = params.remove("mount").unwrap_or_default();
        let path = NodePath::new(params.get("path").map_or("", String::as_str))?;
        Ok(Self { mount, path })
    }
}

/// A query string parsed into `T`; a bad one is a 400 in the JSON envelope
/// naming the parameter.
#[derive(Debug, Clone, Default)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Self(q))
            .map_err(|e| ErrorCode::InvalidQuery.error(format!("invalid query string: {}", e.body_text())))
    }
}

/// A JSON request body, at most `limits.max_body_bytes` (a document, not
/// array data); a `Content-Type` other than `application/json` (or
/// `application/*+json`), or none, is 415 (a page of another site can send
/// `text/plain` or a form without asking first, never JSON); not JSON is a
/// 400 naming the line and column, too large a 413 naming the limit, a
/// stalled body a 408.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + Send + 'static> FromRequest<Arc<App>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, Self::Rejection> {
        json_document(req, app).await?.map(Self).map_err(|e| ErrorCode::InvalidBody.error(format!("request body: {e}")))
    }
}

/// A JSON request body that must say so: as [`JsonBody`], and besides JSON
/// of the wrong shape (an unknown member, a wrong type) is 422 rather than
/// 400.
#[derive(Debug, Clone)]
pub struct TypedJsonBody<T>(pub T);

impl<T: DeserializeOwned + Send + 'static> FromRequest<Arc<App>> for TypedJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, Self::Rejection> {
        json_document(req, app).await?.map(Self).map_err(|e| {
            let code = match e.error.classify() {
                serde_json::error::Category::Data => ErrorCode::InvalidBodyShape,
                _ => ErrorCode::InvalidBody,
            };
            code.error(format!("invalid request body: {e}"))
        })
    }
}

/// A JSON document body parsed into `T`: 415 unless it says it is JSON,
/// 413 over `limits.max_body_bytes`, a stalled body 408; the parse error
/// is the caller's to answer.
async fn json_document<T: DeserializeOwned + Send + 'static>(
    req: Request,
    app: &App,
) -> ApiResult<Result<T, BodyError>> {
    require_json(&req)?;
    let (parts, body) = req.into_parts();
    let body = read_body(&parts.headers, body, app.config().limits.max_body_bytes, "limits.max_body_bytes").await?;
    parse_body(body, app).await
}

/// Bodies up to this many bytes are parsed on the async worker (less work
/// than the hand-off to the CPU pool); larger ones on the pool.
const INLINE_PARSE_MAX: usize = 64 * 1024;

/// Parses a JSON body within the document parse budget (already held when
/// the front reserved it for the whole request), on the CPU pool when it is
/// large enough to stall an async worker.
async fn parse_body<T: DeserializeOwned + Send + 'static>(
    body: Bytes,
    app: &App,
) -> Result<Result<T, BodyError>, ApiError> {
    let _parse = crate::service::node::DocumentGate::of(app).reserve(body.len()).await;
    crate::service::cpu::run_or_inline(body.len() <= INLINE_PARSE_MAX, move || {
        serde_json::from_slice::<T>(&body).map_err(|error| BodyError::of::<T>(&body, error))
    })
    .await
    .map_err(|e| ApiError::from(ServiceError::from(e)))
}

/// A body that is not JSON, or JSON of the wrong shape, and where: the path
/// of the member that did not fit (`downsample`, `codecs[2].name`).
#[derive(Debug)]
struct BodyError {
    path: Option<String>,
    error: serde_json::Error,
}

impl BodyError {
    /// For JSON of the wrong shape, the body is parsed again keeping the
    /// path (only then: tracking it slows every parse down).
    fn of<T: DeserializeOwned>(body: &[u8], error: serde_json::Error) -> Self {
        let path = (error.classify() == serde_json::error::Category::Data)
            .then(|| {
                let mut de = serde_json::Deserializer::from_slice(body);
                serde_path_to_error::deserialize::<_, T>(&mut de).err().map(|e| e.path().to_string())
            })
            .flatten()
            .filter(|p| p != ".");
        Self { path, error }
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(f, "`{path}`: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

/// 415 unless the request says its body is JSON.
fn require_json(req: &Request) -> Result<(), ApiError> {
    let content_type = req.headers().get(header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()));
    if content_type.as_deref().is_some_and(is_json_media_type) {
        return Ok(());
    }
    let got = content_type.map_or_else(|| "no Content-Type".to_string(), |c| format!("Content-Type `{c}`"));
    Err(ErrorCode::UnsupportedMediaType.error(format!(
        "invalid request body: {got}; this endpoint takes a JSON body, sent with `Content-Type: application/json`"
    )))
}

/// `application/json`, or a `+json` type, with any parameters.
fn is_json_media_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence.strip_prefix("application/").is_some_and(|subtype| subtype == "json" || subtype.ends_with("+json"))
}

/// A body's buffer grows inline up to this size, larger on the blocking
/// pool ([`prepare_room`]).
const INLINE_BODY_BYTES: usize = 1 << 20;

/// Room a body's buffer starts with (its declared length, up to this).
const FIRST_ROOM_BYTES: usize = 64 << 10;

/// Most room a body's buffer is prepared with ahead of the bytes that have
/// arrived (as much again as arrived, up to this).
const BODY_ROOM_BYTES: usize = 8 << 20;

/// Reads a request body, refusing more than `limit` bytes (the value of
/// the configuration option `option`, named in the 413).
///
/// A large body is received into memory made ready off the async worker:
/// whenever the next bytes would not fit in the part of the buffer that is
/// ready, a blocking-pool job grows the buffer (a declared length is
/// allocated at once, refused with 503 when it cannot be; an unknown one
/// grows by doubling at least) and touches the pages of the room ahead (as
/// much again as arrived, at most [`BODY_ROOM_BYTES`]), so the worker only
/// copies bytes into memory that is already there. Receiving a 256 MiB body
/// on the worker itself meant growing the buffer by doubling (copying up to
/// half the body in one step) and faulting in (the kernel zeroing, and with
/// transparent huge pages compacting) 256 MiB there, which stalled every
/// other connection of that worker, `/healthz` included, for seconds
/// (`bench/write_health.py`).
pub async fn read_body(headers: &HeaderMap, body: Body, limit: u64, option: &'static str) -> ApiResult<Bytes> {
    Ok(receive(headers, body, limit, option, None).await?.0)
}

/// [`read_body`] for array data (store protocol PUTs, slice writes), whose
/// memory counts against `budget` (`limits.upload_budget_bytes`) as it is
/// taken: the buffer's bytes made ready (the room ahead of what arrived,
/// and while an unknown length's buffer is copied to a larger one, the old
/// one too; the whole budget at most for one body). A body that
/// would need more than is left is 503 `overloaded` (`Retry-After: 1`) at
/// once, as every other load shedding: nothing waits for room, so an
/// upload holding a request slot never waits on the uploads holding the
/// budget, an HTTP/2 stream is never left unread while its siblings need
/// the connection's window, and a client holds only as much of the budget
/// as it has sent (an empty body takes none). The caller holds the share
/// (the second value) until it is done with the body. (A memory mount
/// keeps the bytes it stores: they are the mount's, not counted.)
///
/// Waiting for room was tried twice and measured (eight clients looping
/// 16 MiB PUTs and obstore putting 32 MiB, 64 MiB budget): bodies that had
/// started waiting up to 5 s for their later steps did not help the large
/// puts, which lose at admission (their first bytes find no room), and
/// refused the small ones eight times as often; every step waiting in line
/// let every large put through but cut the stored throughput 17-fold, as
/// bodies holding part of the budget waited for more (convoys ended only by
/// the timeout).
///
/// # Errors
/// As [`read_body`], and 503 when the budget has no room.
pub async fn read_upload(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    option: &'static str,
    budget: &UploadBudget,
) -> ApiResult<(Bytes, UploadShare)> {
    receive(headers, body, limit, option, Some(budget)).await
}

async fn receive(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    option: &'static str,
    budget: Option<&UploadBudget>,
) -> ApiResult<(Bytes, UploadShare)> {
    let too_large = || ApiError::from(ServiceError::PayloadTooLarge { limit, option });
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(too_large());
    }
    let declared = declared.and_then(|n| usize::try_from(n).ok());
    let most = declared.unwrap_or_else(|| usize::try_from(limit).unwrap_or(usize::MAX));
    let mut share = UploadShare::default();
    // Room for the first bytes at once only for a small body: a larger one
    // grows as it arrives, so a client that declares much and sends
    // nothing holds at most this of the budget.
    let first = declared.unwrap_or(0).min(FIRST_ROOM_BYTES);
    if let Some(b) = budget {
        b.cover(&mut share, first)?;
    }
    let mut buf: Vec<u8> = Vec::new();
    buf.try_reserve_exact(first).map_err(|_| no_room(first))?;
    // How much of the buffer is ready (allocated and touched, counted).
    let mut ready = first;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| body_error(&e))?;
        if (buf.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        let needed = buf.len() + chunk.len();
        if needed > ready {
            // Room ahead of the bytes that arrived: as much again, up to
            // BODY_ROOM_BYTES (a client holds at most about twice what it
            // sent), within the body's most. A body of unknown length grows
            // at least by doubling (each growth copies it).
            let at_most = most.max(needed);
            let mut grown = needed.saturating_add(needed.min(BODY_ROOM_BYTES)).min(at_most);
            if declared.is_none() {
                grown = grown.max(ready.saturating_mul(2)).min(at_most);
            }
            // A declared length is allocated whole at the first growth (its
            // pages are touched only as they are needed); the old buffer is
            // live while it is copied.
            let allocation = declared.map_or(grown, |d| d.max(grown));
            let copied = if allocation > buf.capacity() { buf.capacity() } else { 0 };
            if let Some(b) = budget {
                b.cover(&mut share, grown.saturating_add(copied))?;
            }
            buf = prepare_room(buf, grown, allocation).await?;
            ready = grown;
            if let Some(b) = budget {
                b.shrink(&mut share, grown);
            }
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((Bytes::from(buf), share))
}

/// The 503 for a body whose buffer could not be allocated.
fn no_room(bytes: usize) -> ApiError {
    ErrorCode::Overloaded
        .error(format!("the server could not allocate {bytes} bytes to receive this body; retry"))
        .with_header(header::RETRY_AFTER, "1")
        .with_header(header::CONNECTION, "close")
}

/// `limits.upload_budget_bytes`: memory the request bodies being
/// received (array data here, documents in [`super::front`]) may hold at
/// once ([`read_upload`]).
#[derive(Debug, Clone)]
pub struct UploadBudget {
    permits: Arc<tokio::sync::Semaphore>,
    kib: u64,
}

/// What one body holds of the [`UploadBudget`] (KiB permits): given back
/// when dropped.
#[derive(Debug, Default)]
pub struct UploadShare {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl UploadShare {
    /// KiB held.
    fn kib(&self) -> u64 {
        self.permit.as_ref().map_or(0, |p| p.num_permits() as u64)
    }
}

impl UploadBudget {
    /// The budget of `app` (its configured limit).
    #[must_use]
    pub fn of(app: &App) -> Self {
        Self::new(app.upload_budget().clone(), app.config().limits.upload_budget_bytes)
    }

    /// A budget of `bytes` held in `permits` (KiB each).
    #[must_use]
    pub fn new(permits: Arc<tokio::sync::Semaphore>, bytes: u64) -> Self {
        Self { permits, kib: bytes.div_ceil(1024).max(1) }
    }

    /// Grows `share` to cover `bytes` (the whole budget at most), at once
    /// or not at all.
    fn cover(&self, share: &mut UploadShare, bytes: usize) -> ApiResult<()> {
        let (want, held) = ((bytes as u64).div_ceil(1024).min(self.kib), share.kib());
        if want <= held {
            return Ok(());
        }
        #[allow(clippy::cast_possible_truncation)] // clamped to u32
        let more = (want - held).min(u64::from(u32::MAX)) as u32;
        let Ok(permit) = self.permits.clone().try_acquire_many_owned(more) else {
            let message = format!(
                "the request bodies being received hold all but {} KiB of limits.upload_budget_bytes ({} bytes), and this one needs {more} KiB more; retry",
                self.permits.available_permits(),
                self.kib.saturating_mul(1024)
            );
            // The body is not read to its end: the connection closes.
            return Err(ErrorCode::Overloaded
                .error(message)
                .with_header(header::RETRY_AFTER, "1")
                .with_header(header::CONNECTION, "close"));
        };
        match &mut share.permit {
            Some(held) => held.merge(permit),
            None => share.permit = Some(permit),
        }
        Ok(())
    }

    /// Gives back what `share` holds beyond `bytes` (a copy's old buffer,
    /// freed).
    fn shrink(&self, share: &mut UploadShare, bytes: usize) {
        let (keep, held) = ((bytes as u64).div_ceil(1024).min(self.kib), share.kib());
        if let (Some(permit), true) = (share.permit.as_mut(), keep < held) {
            #[allow(clippy::cast_possible_truncation)] // less than what is held
            drop(permit.split((held - keep) as usize));
        }
    }
}

/// `buf` with room for `ready` bytes in all, its pages touched: a buffer of
/// `allocation` bytes when it must grow (refused, not aborted, when that
/// much cannot be had). Inline up to [`INLINE_BODY_BYTES`], else on the
/// blocking pool.
async fn prepare_room(buf: Vec<u8>, ready: usize, allocation: usize) -> ApiResult<Vec<u8>> {
    let grow = move |mut buf: Vec<u8>| {
        if buf.capacity() < ready {
            let more = allocation.max(ready) - buf.len();
            buf.try_reserve_exact(more).map_err(|_| no_room(allocation))?;
        }
        let start = buf.len();
        for byte in buf.spare_capacity_mut().iter_mut().take(ready - start).step_by(4096) {
            byte.write(0);
        }
        Ok(buf)
    };
    if ready <= INLINE_BODY_BYTES {
        return grow(buf);
    }
    tokio::task::spawn_blocking(move || grow(buf))
        .await
        .map_err(|e| ApiError::from(ServiceError::Internal(format!("receiving the request body: {e}"))))?
}

/// A request body that stopped arriving, or arrives too slowly (408).
#[derive(Debug, thiserror::Error)]
pub enum BodyTimeout {
    /// Nothing for `limits.body_read_timeout_seconds` (the seconds).
    #[error("the request body sent nothing for {0} s (limits.body_read_timeout_seconds)")]
    Idle(u64),
    /// Less than `limits.min_body_bytes_per_second` on average, after the
    /// grace of `limits.body_read_timeout_seconds`.
    #[error(
        "the request body arrived too slowly: {received} bytes in {seconds} s, less than limits.min_body_bytes_per_second = {min} on average after the first {grace} s (limits.body_read_timeout_seconds)"
    )]
    TooSlow { received: u64, seconds: u64, min: u64, grace: u64 },
}

/// A failed request-body read: 408 `body_timeout` when the body stopped
/// arriving ([`BodyTimeout`] anywhere in the chain), else 400
/// `body_read_failed`.
#[must_use]
pub fn body_error(e: &(dyn std::error::Error + 'static)) -> ApiError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(t) = c.downcast_ref::<BodyTimeout>() {
            return ErrorCode::BodyTimeout.error(t.to_string());
        }
        cause = c.source();
    }
    ErrorCode::BodyReadFailed.error(format!("reading the body failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, StatusCode};

    #[tokio::test]
    async fn uploads_count_what_they_hold_and_are_refused_when_the_budget_is_full() {
        // A 4 MiB budget.
        let budget = UploadBudget::new(Arc::new(tokio::sync::Semaphore::new(4096)), 4 << 20);
        let declared = |n: usize| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            h
        };
        let free = || budget.permits.available_permits();
        // A 3 MiB body holds what its buffer holds: all of it (the room
        // ahead ends at its declared length).
        let (first, share) =
            read_upload(&declared(3 << 20), pieces(3 << 20, 65_536).1, 8 << 20, "x", &budget).await.unwrap();
        assert_eq!((first.len(), free()), (3 << 20, 1024));
        // A second of 2 MiB does not fit: 503 at once, with Retry-After, and
        // what it took while arriving is given back.
        let e = read_upload(&declared(2 << 20), pieces(2 << 20, 65_536).1, 8 << 20, "x", &budget).await.unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "overloaded"));
        assert!(e.message.contains("limits.upload_budget_bytes"), "{}", e.message);
        assert_eq!(free(), 1024);
        drop(share);
        assert_eq!(free(), 4096);
        // Empty bodies take nothing; a body larger than the whole budget
        // takes all of it, and goes through alone.
        let (empty, share) = read_upload(&declared(0), Body::empty(), 8 << 20, "x", &budget).await.unwrap();
        assert_eq!((empty.len(), free()), (0, 4096));
        drop(share);
        let (big, share) =
            read_upload(&HeaderMap::new(), pieces(6 << 20, 65_536).1, 8 << 20, "x", &budget).await.unwrap();
        assert_eq!((big.len(), free()), (6 << 20, 0));
        drop(share);
        // A declared length that cannot be allocated is 503, not an abort.
        let e = read_upload(&declared(1 << 62), pieces(100_000, 65_536).1, u64::MAX, "x", &budget).await.unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "overloaded"));
        assert!(e.message.contains("could not allocate 4611686018427387904 bytes"), "{}", e.message);
        assert_eq!(free(), 4096);
        // Over the limit: 413, and nothing held.
        let e = read_upload(&declared(9 << 20), Body::empty(), 8 << 20, "x", &budget).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        assert_eq!(free(), 4096);
    }

    fn pieces(total: usize, piece: usize) -> (Vec<u8>, Body) {
        #[allow(clippy::cast_possible_truncation)] // a pattern
        let data: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            data.chunks(piece).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        (data, Body::from_stream(futures::stream::iter(chunks)))
    }

    #[tokio::test]
    async fn large_bodies_arrive_whole_with_or_without_a_declared_length() {
        // Past the inline size, in pieces that cross every prepared room.
        let total = INLINE_BODY_BYTES + 2 * BODY_ROOM_BYTES + 12_345;
        for declared in [true, false] {
            let (data, body) = pieces(total, 65_537);
            let mut h = HeaderMap::new();
            if declared {
                h.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
            }
            let got = read_body(&h, body, 64 << 20, "limits.max_put_bytes").await.unwrap();
            assert!(got[..] == data[..], "declared: {declared}");
        }
        let (data, body) = pieces(1000, 100);
        assert!(read_body(&HeaderMap::new(), body, 1000, "x").await.unwrap()[..] == data[..]);
    }

    #[tokio::test]
    async fn bodies_past_the_limit_are_refused_whether_declared_or_not() {
        let limit = (INLINE_BODY_BYTES + BODY_ROOM_BYTES) as u64;
        let (_, body) = pieces(INLINE_BODY_BYTES + BODY_ROOM_BYTES + 1, 65_536);
        let e = read_body(&HeaderMap::new(), body, limit, "limits.max_put_bytes").await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        assert!(e.message.contains("limits.max_put_bytes"), "{}", e.message);
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(limit + 1));
        let e = read_body(&h, Body::empty(), limit, "limits.max_put_bytes").await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    }

    #[test]
    fn json_media_types() {
        for yes in ["application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"] {
            assert!(is_json_media_type(yes), "{yes}");
        }
        for no in ["text/json", "application/jsonx", "application/octet-stream", ""] {
            assert!(!is_json_media_type(no), "{no}");
        }
    }

    #[test]
    fn body_errors() {
        let timeout = axum::Error::new(BodyTimeout::Idle(3));
        let e = body_error(&timeout);
        assert_eq!((e.status(), e.code.as_str()), (StatusCode::REQUEST_TIMEOUT, "body_timeout"));
        assert!(e.message.contains("limits.body_read_timeout_seconds"), "{}", e.message);
        let other = axum::Error::new(std::io::Error::other("reset"));
        assert_eq!(body_error(&other).code, ErrorCode::BodyReadFailed);
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_refused_before_and_while_reading() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, "11".parse().unwrap());
        let e = read_body(&headers, Body::from("12345678901"), 10, "limits.max_put_bytes").await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        assert!(e.message.contains("limits.max_put_bytes"), "{}", e.message);
        // No Content-Length: counted as it arrives.
        let e = read_body(&HeaderMap::new(), Body::from("12345678901"), 10, "limits.max_body_bytes").await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        let ok = read_body(&HeaderMap::new(), Body::from("1234567890"), 10, "limits.max_body_bytes").await.unwrap();
        assert_eq!(&ok[..], b"1234567890");
    }
}
