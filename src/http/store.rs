//! `/zarr/{mount}/{*key}`: the Zarr store protocol over HTTP.
//!
//! GET/HEAD read keys (ranges, conditional requests); PUT and DELETE write;
//! a path ending in `/` is a listing (HTML links for fsspec, JSON on
//! `Accept: application/json`); PROPFIND answers WebDAV listings for
//! `object_store`'s HTTP store and obstore; MKCOL is a no-op (object stores
//! have no directories).
//!
//! Query strings are ignored on every method (the rule's
//! [`super::auth::Params::Ignored`]): a key is its path, and clients append
//! signatures or cache-busters to every key URL (zarrita.js keeps a store
//! URL's query on each key), which must not change what is read or written.
//!
//! Several ranges in one `Range` header are answered 200 with the whole
//! object: no Zarr client sends them, and a whole body is a correct answer
//! to them (RFC 9110 §14.2). A single range is always answered 206.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;

use super::dav;
use super::error::{key_not_found, ApiResult, ErrorBody, ErrorCode};
use super::extract::{read_upload, UploadBudget};
use super::openapi::Binary;
use crate::service::keys as store;
use crate::service::{cpu, App, ServiceError};

/// Listings of at most this many entries are rendered on the async worker
/// (cheaper than the hand-off); longer ones on the CPU pool.
const INLINE_LISTING: usize = 256;
use crate::storage::direct::FileSpan;
use crate::storage::local::STREAM_FRAME_BYTES;
use crate::storage::request::{IfRange, RangeHeader};
use crate::storage::tail::{ObjectStream, Tail};
use crate::storage::{ByteRange, KeyPrefix, Preconditions, ReadOutcome, ReadRequest, StorageError, StoreKey};

/// Where a store-protocol URL points.
#[derive(Debug)]
pub(crate) enum Target {
    Key(StoreKey),
    Prefix(KeyPrefix),
}

/// Splits `/zarr/{mount}/{rest}` into the mount and a key or prefix,
/// percent-decoding and validating.
pub(crate) fn parse_target(uri: &Uri) -> ApiResult<(Cow<'_, str>, Target)> {
    let rest = uri.path().strip_prefix("/zarr/").unwrap_or("");
    let (mount, raw) = rest.split_once('/').unwrap_or((rest, ""));
    // Borrowed (and not scanned twice) unless there is something to decode.
    fn decode(s: &str) -> ApiResult<Cow<'_, str>> {
        if !s.contains('%') {
            return Ok(Cow::Borrowed(s));
        }
        percent_decode_str(s)
            .decode_utf8()
            .map_err(|_| ErrorCode::InvalidKey.error(format!("`{s}` is not valid percent-encoded UTF-8")))
    }
    let mount = decode(mount)?;
    let raw = decode(raw)?;
    let target = if raw.is_empty() || raw.ends_with('/') {
        Target::Prefix(KeyPrefix::new(&raw)?)
    } else {
        Target::Key(StoreKey::new(&raw)?)
    };
    Ok((mount, target))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Reads the conditional and range headers of a read, in one pass over the
/// headers (most reads have none of them).
pub(crate) fn read_request(headers: &HeaderMap, head_only: bool) -> ReadRequest {
    let mut req = ReadRequest { head_only, stream: !head_only, ..ReadRequest::default() };
    fn text(v: &HeaderValue) -> Option<&str> {
        v.to_str().ok()
    }
    // List headers may come as several lines (RFC 9110 §5.3): their ETags
    // add up. For the others the first line counts.
    fn add_etags(list: &mut Option<Vec<String>>, value: &HeaderValue) {
        if let Some(v) = text(value) {
            list.get_or_insert_with(Vec::new).extend(Preconditions::parse_etag_list(v));
        }
    }
    fn date(v: &HeaderValue) -> Option<SystemTime> {
        text(v).and_then(|v| httpdate::parse_http_date(v).ok())
    }
    let p = &mut req.preconditions;
    for (name, value) in headers {
        if *name == header::IF_MATCH {
            add_etags(&mut p.if_match, value);
        } else if *name == header::IF_NONE_MATCH {
            add_etags(&mut p.if_none_match, value);
        } else if *name == header::IF_MODIFIED_SINCE {
            p.if_modified_since = p.if_modified_since.or_else(|| date(value));
        } else if *name == header::IF_UNMODIFIED_SINCE {
            p.if_unmodified_since = p.if_unmodified_since.or_else(|| date(value));
        } else if *name == header::IF_RANGE && p.if_range.is_none() {
            p.if_range = text(value).map(|v| {
                httpdate::parse_http_date(v).map_or_else(|_| IfRange::ETag(v.trim().to_string()), IfRange::Date)
            });
        } else if *name == header::RANGE && req.range.is_none() {
            req.range = match text(value).map(ByteRange::parse_header) {
                Some(RangeHeader::Single(r)) => Some(r),
                Some(RangeHeader::Multiple | RangeHeader::Ignored) | None => None,
            };
        }
    }
    req
}

fn content_type(key: &StoreKey) -> &'static str {
    let name = key.name();
    if name.ends_with(".json") || matches!(name, ".zarray" | ".zgroup" | ".zattrs" | ".zmetadata") {
        "application/json"
    } else {
        "application/octet-stream"
    }
}

pub(crate) fn read_response(key: &StoreKey, out: ReadOutcome, cache_control: Option<&str>) -> Response {
    let ReadOutcome { meta, range, body, tail } = out;
    let (status, length) = match &range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.end - r.start),
        None => (StatusCode::OK, meta.size),
    };
    let body = match tail {
        Some(Tail::File(tail)) => {
            let left = body.len() as u64 + tail.remaining();
            Body::new(FileBody { head: body, tail: Some(tail), reading: None, left })
        }
        Some(Tail::Stream(stream)) => Body::new(StreamBody { head: body, stream }),
        None => Body::from(body),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    // Room for these headers and those added on the way out (request id,
    // CORS), so the map is allocated once.
    *resp.headers_mut() = HeaderMap::with_capacity(16);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(key)));
    h.insert(header::CONTENT_LENGTH, super::lengths::content_length(length));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // The mount's setting (validated when the mount was built), else no-cache.
    let cc = cache_control.and_then(|c| HeaderValue::from_str(c).ok());
    h.insert(header::CACHE_CONTROL, cc.unwrap_or(HeaderValue::from_static("no-cache")));
    // The ETag's text becomes the header value as it is (moved, not copied).
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(meta.etag)) {
        h.insert(header::ETAG, v);
    }
    if let Some(modified) = meta.last_modified {
        if let Some(v) = http_date(modified) {
            h.insert(header::LAST_MODIFIED, v);
        }
    }
    if let Some(r) = range {
        if let Ok(v) = HeaderValue::from_str(&format!("bytes {}-{}/{}", r.start, r.end - 1, meta.size)) {
            h.insert(header::CONTENT_RANGE, v);
        }
    }
    resp
}

/// An answer whose bytes after `head` arrive from an object store as hyper
/// asks for them ([`ObjectStream`]): the answer holds the piece the store's
/// client received last, not the whole object. A store answer failing or
/// ending early ends the answer short (hyper closes the connection).
struct StreamBody {
    head: bytes::Bytes,
    stream: ObjectStream,
}

impl http_body::Body for StreamBody {
    type Data = bytes::Bytes;
    type Error = StorageError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, StorageError>>> {
        let this = &mut *self;
        if !this.head.is_empty() {
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(std::mem::take(&mut this.head)))));
        }
        this.stream.poll_piece(cx).map(|piece| piece.map(|r| r.map(http_body::Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_empty() && self.stream.remaining() == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.head.len() as u64 + self.stream.remaining())
    }
}

/// An answer whose bytes after `head` are read from their file a frame at a
/// time as hyper asks for them ([`crate::storage::direct::FileSpan`]), each
/// frame on the blocking pool (a cold file on a slow disk never holds an
/// async worker): the answer holds a frame or two, not the whole object. A
/// read failing midway (the file truncated or changed since it was opened)
/// ends the answer short, and hyper closes the connection: the client sees
/// a body shorter than its `Content-Length`, never other bytes.
struct FileBody {
    head: bytes::Bytes,
    /// The rest of the file (`None` while a frame of it is being read).
    tail: Option<FileSpan>,
    /// The frame being read, and the span it gives back.
    reading: Option<tokio::task::JoinHandle<FrameRead>>,
    /// Bytes not yet handed to hyper.
    left: u64,
}

/// A frame read on the blocking pool, and the span it was read from.
type FrameRead = (FileSpan, Result<Option<bytes::Bytes>, StorageError>);

impl http_body::Body for FileBody {
    type Data = bytes::Bytes;
    type Error = StorageError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, StorageError>>> {
        use std::future::Future as _;
        use std::task::Poll;
        let this = &mut *self;
        if !this.head.is_empty() {
            let head = std::mem::take(&mut this.head);
            this.left -= head.len() as u64;
            return Poll::Ready(Some(Ok(http_body::Frame::data(head))));
        }
        if this.reading.is_none() {
            let Some(mut span) = this.tail.take().filter(|t| t.remaining() > 0) else { return Poll::Ready(None) };
            this.reading = Some(tokio::task::spawn_blocking(move || {
                let frame = span.next_frame(STREAM_FRAME_BYTES);
                (span, frame)
            }));
        }
        let Some(reading) = this.reading.as_mut() else { return Poll::Ready(None) };
        let (span, frame) = match std::pin::Pin::new(reading).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(done)) => done,
            Poll::Ready(Err(e)) => {
                this.reading = None;
                return Poll::Ready(Some(Err(StorageError::Unavailable {
                    reason: format!("a file read stopped: {e}"),
                })));
            }
        };
        this.reading = None;
        this.tail = Some(span);
        match frame {
            Ok(Some(data)) => {
                this.left = this.left.saturating_sub(data.len() as u64);
                Poll::Ready(Some(Ok(http_body::Frame::data(data))))
            }
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// `t` as an HTTP date header value. The last one made on this thread is
/// kept: objects written together share their second (a data set's chunks,
/// a directory of metadata documents), and formatting a date costs more
/// than the rest of a small answer's headers together.
fn http_date(t: SystemTime) -> Option<HeaderValue> {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<Option<(u64, HeaderValue)>> = const { RefCell::new(None) };
    }
    // HTTP dates have whole seconds; earlier than 1970 is not memoised.
    let second = t.duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs());
    LAST.with_borrow_mut(|last| {
        if let (Some(s), Some((at, value))) = (second, last.as_ref()) {
            if *at == s {
                return Some(value.clone());
            }
        }
        let value = HeaderValue::from_str(&httpdate::fmt_http_date(t)).ok()?;
        if let Some(s) = second {
            *last = Some((s, value.clone()));
        }
        Some(value)
    })
}

/// Read a key, or list a prefix (path ending in `/`).
#[utoipa::path(
    get,
    path = "/zarr/{mount}/{*key}",
    tag = "store",
    params(
        ("mount" = String, Path, description = "Mount name", example = "data"),
        ("key" = String, Path, description = "Storage key; a path ending in `/` lists that prefix", example = "arr/zarr.json"),
        ("Range" = Option<String>, Header, description = "One byte range: `bytes=a-b`, `bytes=a-`, `bytes=-n`"),
        ("If-None-Match" = Option<String>, Header, description = "ETags: 304 when one matches"),
        ("If-Match" = Option<String>, Header, description = "ETags: 412 unless one matches"),
        ("If-Modified-Since" = Option<String>, Header, description = "HTTP date: 304 when not modified since"),
    ),
    responses(
        (status = 200, description = "The object's bytes (`application/json` for metadata documents: `zarr.json`, `.zarray`, `.zgroup`, `.zattrs`, `.zmetadata`), or a prefix's listing (HTML, or JSON on `Accept: application/json`)",
            content(
                (inline(Binary) = "application/octet-stream"),
                (serde_json::Value = "application/json"),
                (String = "text/html"),
            )),
        (status = 206, description = "The requested byte range (with the object's content type)",
            content(
                (inline(Binary) = "application/octet-stream"),
                (inline(Binary) = "application/json"),
            )),
        (status = 301, description = "The path names a prefix: its listing is at the same path with a trailing `/`"),
        (status = 304, description = "Not modified"),
        (status = 400, description = "Invalid key", body = ErrorBody),
        (status = 404, description = "No such key, prefix or mount (clients read a missing chunk as the fill value)", body = ErrorBody),
        (status = 412, description = "If-Match failed", body = ErrorBody),
        (status = 416, description = "Range not satisfiable", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_key(State(app): State<Arc<App>>, request: axum::extract::Request) -> ApiResult<Response> {
    // The request by value: its parts are read in place, not cloned (this is
    // the hot path of every chunk read).
    let (method, uri, headers) = (request.method(), request.uri(), request.headers());
    let (mount, target) = parse_target(uri)?;
    match target {
        Target::Key(key) => {
            let req = read_request(headers, method == Method::HEAD);
            let mount_ref = app.mount_ref(&mount)?;
            match store::read(&mount_ref, &key, &req).await {
                Ok(out) => Ok(read_response(&key, out, mount_ref.mount().cache_control())),
                Err(ServiceError::IsPrefix(_)) => Ok(redirect_to_listing(uri)),
                // The most common error answer, written directly.
                Err(ServiceError::Storage(StorageError::NotFound { key })) => Ok(key_not_found(&key)),
                Err(e) => Err(e.into()),
            }
        }
        Target::Prefix(_) if !uri.path().ends_with('/') => {
            // Only a mount that exists has a listing to redirect to.
            app.mount(&mount)?;
            Ok(redirect_to_listing(uri))
        }
        Target::Prefix(prefix) => {
            let listing = store::list(&app.mount_ref(&mount)?, &prefix).await?;
            let wants_json = header_str(headers, &header::ACCEPT).is_some_and(|a| a.contains("application/json"));
            // Up to `max_list_entries` entries of text: rendered on the CPU
            // pool unless short, never holding up the async worker.
            let short = listing.entries.len() <= INLINE_LISTING;
            let mount = mount.to_string();
            let render = move || {
                if wants_json {
                    dav::json_listing(&mount, &prefix, &listing).into_response()
                } else {
                    dav::html_listing(&mount, &prefix, &listing).into_response()
                }
            };
            Ok(cpu::run_or_inline(short, render).await.map_err(ServiceError::from)?)
        }
    }
}

/// 301 to the same path with a trailing slash: the listing of a prefix, as
/// nginx and every static file server answer a directory without one.
fn redirect_to_listing(uri: &Uri) -> Response {
    let location = match uri.query() {
        Some(q) => format!("{}/?{q}", uri.path()),
        None => format!("{}/", uri.path()),
    };
    let mut resp = StatusCode::MOVED_PERMANENTLY.into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// Store a key.
#[utoipa::path(
    put,
    path = "/zarr/{mount}/{*key}",
    tag = "store",
    params(
        ("mount" = String, Path, description = "Mount name", example = "data"),
        ("key" = String, Path, description = "Storage key", example = "arr/c/0/0"),
        ("If-Match" = Option<String>, Header, description = "Write only if the current ETag is one of these (`*`: any object)"),
        ("If-None-Match" = Option<String>, Header, description = "`*`: write only if the key does not exist; ETags: only if the current ETag is none of these"),
        ("If-Unmodified-Since" = Option<String>, Header, description = "Write only if the object was not modified after this date"),
    ),
    request_body(content = inline(Binary), content_type = "application/octet-stream", description = "The object's bytes; metadata documents are validated"),
    responses(
        (status = 201, description = "Created"),
        (status = 204, description = "Replaced"),
        (status = 400, description = "Invalid key", body = ErrorBody),
        (status = 404, description = "No such mount", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 409, description = "The key collides with existing data (a key below an object, or a key that is a prefix, on a local directory)", body = ErrorBody),
        (status = 412, description = "Precondition failed", body = ErrorBody),
        (status = 413, description = "Body larger than `limits.max_put_bytes`", body = ErrorBody),
        (status = 422, description = "Invalid metadata document", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn put_key(State(app): State<Arc<App>>, uri: Uri, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    let (mount, target) = parse_target(&uri)?;
    // A read-only mount refuses every write (405), whatever the key.
    app.mount_ref(&mount)?.writable()?;
    let Target::Key(key) = target else {
        return Err(ErrorCode::InvalidKey.error("cannot PUT a prefix: the key must not end with `/`"));
    };
    let preconditions = read_request(&headers, false).preconditions;
    let (bytes, _share) =
        read_upload(&headers, body, app.config().limits.max_put_bytes, "limits.max_put_bytes", &UploadBudget::of(&app))
            .await?;
    let outcome = store::write(&app.mount_ref(&mount)?, &key, bytes, &preconditions).await?;
    let status = if outcome.created { StatusCode::CREATED } else { StatusCode::NO_CONTENT };
    let mut resp = status.into_response();
    if let Some(v) = outcome.etag.as_deref().and_then(|e| HeaderValue::from_str(e).ok()) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    Ok(resp)
}

/// Delete a key (idempotent).
#[utoipa::path(
    delete,
    path = "/zarr/{mount}/{*key}",
    tag = "store",
    params(
        ("mount" = String, Path, description = "Mount name", example = "data"),
        ("key" = String, Path, description = "Storage key", example = "arr/c/0/0"),
        ("If-Match" = Option<String>, Header, description = "Delete only if the current ETag is one of these (`*`: any object)"),
        ("If-None-Match" = Option<String>, Header, description = "Delete only if the current ETag is none of these (`*`: only if absent)"),
        ("If-Unmodified-Since" = Option<String>, Header, description = "Delete only if the object was not modified after this date"),
    ),
    responses(
        (status = 204, description = "Deleted (or was not there)"),
        (status = 400, description = "Invalid key", body = ErrorBody),
        (status = 404, description = "No such mount", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 409, description = "The key is a prefix (a directory of a local mount), not an object", body = ErrorBody),
        (status = 412, description = "Precondition failed", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn delete_key(State(app): State<Arc<App>>, uri: Uri, headers: HeaderMap) -> ApiResult<StatusCode> {
    let (mount, target) = parse_target(&uri)?;
    // A read-only mount refuses every delete (405), whatever the key.
    let at = app.mount_ref(&mount)?;
    at.writable()?;
    let Target::Key(key) = target else {
        return Err(ErrorCode::InvalidKey.error("cannot DELETE a prefix: the key must not end with `/`"));
    };
    store::delete(&at, &key, &read_request(&headers, false).preconditions).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// WebDAV: PROPFIND (listing) and MKCOL (no-op, 405 on an object); anything else is 405.
pub async fn other_method(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (mount, target) = parse_target(&uri)?;
    match method.as_str() {
        "PROPFIND" => {
            let depth = super::params::dav_depth(&headers)?;
            let path = match &target {
                Target::Key(k) => k.as_prefix(),
                Target::Prefix(p) => p.clone(),
            };
            let found = store::propfind(&app.mount_ref(&mount)?, &path, depth).await?;
            let root = dav::HrefRoot::for_user_agent(header_str(&headers, &header::USER_AGENT));
            let short = match &found {
                store::DavTarget::Collection { members, .. } => members.len() <= INLINE_LISTING,
                store::DavTarget::Object { .. } => true,
            };
            let mount = mount.to_string();
            let render = move || dav::multistatus(&mount, &found, root);
            Ok(cpu::run_or_inline(short, render).await.map_err(ServiceError::from)?)
        }
        "MKCOL" => {
            let at = app.mount_ref(&mount)?;
            at.writable()?;
            let path = match &target {
                Target::Key(k) => k.as_prefix(),
                Target::Prefix(p) => p.clone(),
            };
            // RFC 4918 9.3.1: MKCOL can only be executed on an unmapped URL.
            if store::is_object(&at, &path).await? {
                return Err(ErrorCode::MethodNotAllowed
                    .error(format!(
                        "`{}` is an object: MKCOL makes a collection only where nothing is stored",
                        path.as_str()
                    ))
                    .with_header(header::ALLOW, "GET, HEAD, PUT, DELETE, OPTIONS, PROPFIND"));
            }
            Ok(StatusCode::CREATED.into_response())
        }
        _ => Err(ErrorCode::MethodNotAllowed
            .error(format!("{method} is not supported on store keys"))
            .with_header(header::ALLOW, "GET, HEAD, PUT, DELETE, OPTIONS, PROPFIND, MKCOL")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_requests_take_every_conditional_and_range_header() {
        let mut h = HeaderMap::new();
        assert!(read_request(&h, false).range.is_none());
        h.append(header::IF_NONE_MATCH, HeaderValue::from_static("\"a\", \"b\""));
        h.append(header::IF_NONE_MATCH, HeaderValue::from_static("\"c\""));
        h.insert(header::IF_MATCH, HeaderValue::from_static("*"));
        h.insert(header::IF_MODIFIED_SINCE, HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"));
        h.insert(header::IF_RANGE, HeaderValue::from_static("\"a\""));
        h.insert(header::RANGE, HeaderValue::from_static("bytes=-16"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        let r = read_request(&h, true);
        assert!(r.head_only);
        assert_eq!(r.preconditions.if_none_match.as_deref(), Some(&["\"a\"", "\"b\"", "\"c\""].map(String::from)[..]));
        assert_eq!(r.preconditions.if_match.as_deref(), Some(&["*".to_string()][..]));
        assert_eq!(
            r.preconditions.if_modified_since,
            Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(784_111_777))
        );
        assert!(matches!(r.preconditions.if_range, Some(IfRange::ETag(ref e)) if e == "\"a\""));
        assert!(r.range.is_some_and(|r| r.max_len() == 16));
        // Several ranges: answered whole.
        h.insert(header::RANGE, HeaderValue::from_static("bytes=0-1,4-5"));
        assert!(read_request(&h, false).range.is_none());
    }

    #[test]
    fn http_dates_are_the_formatted_ones_whatever_was_kept() {
        let base = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let times = [
            base,
            base + std::time::Duration::from_millis(999),
            base + std::time::Duration::from_secs(1),
            base,
            SystemTime::UNIX_EPOCH,
        ];
        for t in times {
            assert_eq!(http_date(t).unwrap(), httpdate::fmt_http_date(t).as_str(), "{t:?}");
        }
    }

    #[test]
    fn targets_decode_only_what_is_encoded() {
        let uri: Uri = "/zarr/data/a/c/0/0".parse().unwrap();
        let (mount, target) = parse_target(&uri).unwrap();
        assert!(matches!(mount, Cow::Borrowed("data")));
        assert!(matches!(target, Target::Key(ref k) if k.as_str() == "a/c/0/0"));
        let uri: Uri = "/zarr/d%61ta/a%2Fb/".parse().unwrap();
        let (mount, target) = parse_target(&uri).unwrap();
        assert_eq!(mount, "data");
        assert!(matches!(target, Target::Prefix(ref p) if p.as_str() == "a/b"));
        for bad in ["/zarr/data/a/%2e%2e/b", "/zarr/data/%ff", "/zarr/data/a//b"] {
            assert!(parse_target(&bad.parse().unwrap()).is_err(), "{bad}");
        }
    }
}
