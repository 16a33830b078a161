//! The one place where errors become HTTP statuses.
//!
//! Policy: every error answers the JSON envelope
//! `{"error": {"code": "...", "message": "..."}}`. Client errors say what is
//! wrong (the key, the field, the mount). Server faults (storage unavailable,
//! task failures) are logged in full and answered with a short message that
//! names the mount or key but no backend internals.
//!
//! Every answer's code is an [`ErrorCode`], and [`ErrorCode::parts`] is the
//! one exhaustive table from code to status and code string (as s3s keeps
//! S3's): handlers pick a code, never a status or a string. Service and
//! storage errors map onto codes by exhaustive matches, so a new error
//! variant cannot go unmapped. Two codes may share a string where one word
//! names two outcomes a client tells apart by status (`already_exists`: 412
//! for a conditional store write, 409 for a node; `invalid_body`: 400 for a
//! body that is not JSON, 422 for JSON of the wrong shape).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::service::ServiceError;
use crate::storage::StorageError;

/// The JSON error envelope.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code (`not_found`, `invalid_key`, ...).
    #[schema(example = "not_found")]
    pub code: &'static str,
    /// A sentence for people, naming the key, field or mount.
    #[schema(example = "key arr/c/0/0 not found")]
    pub message: String,
}

/// Every error an answer can carry; [`Self::parts`] gives its status and
/// the code string clients see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    // Requests the router or the guard refuses.
    /// No route for the path.
    NoRoute,
    /// The route does not take the method.
    MethodNotAllowed,
    /// No valid token where one is needed.
    Unauthorized,
    /// The token lacks the scope.
    Forbidden,
    /// A write a page of another site may have sent.
    CrossSiteRefused,
    /// A query parameter the route does not take.
    UnknownParameter,
    /// Load shedding.
    Overloaded,
    /// The request ran past `limits.request_timeout_seconds`.
    Timeout,
    // Request parameters and bodies.
    /// A path parameter that does not parse.
    InvalidPath,
    /// A query string that does not parse.
    InvalidQuery,
    /// A body that is not JSON (or not the JSON expected).
    InvalidBody,
    /// A JSON body of the wrong shape (an unknown member, a wrong type).
    InvalidBodyShape,
    /// A `Content-Type` the route does not take.
    UnsupportedMediaType,
    /// A wire format (`format=`) that does not exist.
    InvalidFormat,
    /// An `Accept` header naming only image types zarrd cannot produce.
    NotAcceptable,
    /// A data body whose encoding is not said.
    MissingFormat,
    /// A WebDAV `Depth` header that is not 0, 1 or infinity.
    InvalidDepth,
    /// A body larger than the limit that applies to it.
    PayloadTooLarge,
    /// The body stopped arriving.
    BodyTimeout,
    /// Reading the body failed.
    BodyReadFailed,
    /// A request the service refuses as malformed.
    BadRequest,
    // Keys and storage.
    /// A key that is not valid.
    InvalidKey,
    /// No object under the key.
    NotFound,
    /// The key names a prefix, not an object.
    IsPrefix,
    /// A conditional store write found the key present.
    KeyExists,
    /// A precondition (`If-Match`, ...) failed.
    PreconditionFailed,
    /// A conditional read whose object has not changed.
    NotModified,
    /// A range outside the object.
    RangeNotSatisfiable,
    /// A write that collides with stored data.
    Conflict,
    /// The storage backend refused access.
    StoragePermissionDenied,
    /// The storage backend cannot do this.
    NotSupported,
    /// The storage backend is unavailable.
    StorageUnavailable,
    /// The storage backend did not answer in time.
    StorageTimeout,
    // Mounts, nodes and arrays.
    /// No such mount.
    UnknownMount,
    /// A write to a read-only mount.
    ReadOnly,
    /// Stored or given metadata that is not valid.
    InvalidMetadata,
    /// No node at the path.
    NodeNotFound,
    /// The node is a group where an array is needed.
    NotAnArray,
    /// An array over the limits, or with features zarrd lacks.
    UnsupportedArray,
    /// A node exists where one is to be created.
    NodeExists,
    /// A group with children, deleted without `recursive`.
    NotEmpty,
    /// Other writers kept changing a chunk.
    WriteConflict,
    // Selections and data.
    /// A selection (or its mode) that does not parse or does not fit the array.
    InvalidSelection,
    /// A wire format the array's data type cannot be answered in.
    UnsupportedFormat,
    /// A missing chunk with `fill_missing=false`.
    MissingChunk,
    /// Stored bytes that do not decode.
    CorruptChunk,
    /// A selection over the answer limits.
    SelectionTooLarge,
    /// A hierarchy too large to consolidate within the limits.
    HierarchyTooLarge,
    /// A fault of zarrd.
    Internal,
}

impl ErrorCode {
    /// The status and the code string: the one table.
    #[must_use]
    pub const fn parts(self) -> (StatusCode, &'static str) {
        use StatusCode as S;
        match self {
            Self::NoRoute => (S::NOT_FOUND, "no_route"),
            Self::MethodNotAllowed => (S::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::Unauthorized => (S::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden => (S::FORBIDDEN, "forbidden"),
            Self::CrossSiteRefused => (S::FORBIDDEN, "cross_site_refused"),
            Self::UnknownParameter => (S::BAD_REQUEST, "unknown_parameter"),
            Self::Overloaded => (S::SERVICE_UNAVAILABLE, "overloaded"),
            Self::Timeout => (S::GATEWAY_TIMEOUT, "timeout"),
            Self::InvalidPath => (S::BAD_REQUEST, "invalid_path"),
            Self::InvalidQuery => (S::BAD_REQUEST, "invalid_query"),
            Self::InvalidBody => (S::BAD_REQUEST, "invalid_body"),
            Self::InvalidBodyShape => (S::UNPROCESSABLE_ENTITY, "invalid_body"),
            Self::UnsupportedMediaType => (S::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            Self::InvalidFormat => (S::BAD_REQUEST, "invalid_format"),
            Self::NotAcceptable => (S::NOT_ACCEPTABLE, "not_acceptable"),
            Self::MissingFormat => (S::BAD_REQUEST, "missing_format"),
            Self::InvalidDepth => (S::BAD_REQUEST, "invalid_depth"),
            Self::PayloadTooLarge => (S::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::BodyTimeout => (S::REQUEST_TIMEOUT, "body_timeout"),
            Self::BodyReadFailed => (S::BAD_REQUEST, "body_read_failed"),
            Self::BadRequest => (S::BAD_REQUEST, "bad_request"),
            Self::InvalidKey => (S::BAD_REQUEST, "invalid_key"),
            Self::NotFound => (S::NOT_FOUND, "not_found"),
            Self::IsPrefix => (S::NOT_FOUND, "is_prefix"),
            Self::KeyExists => (S::PRECONDITION_FAILED, "already_exists"),
            Self::PreconditionFailed => (S::PRECONDITION_FAILED, "precondition_failed"),
            Self::NotModified => (S::NOT_MODIFIED, "not_modified"),
            Self::RangeNotSatisfiable => (S::RANGE_NOT_SATISFIABLE, "range_not_satisfiable"),
            Self::Conflict => (S::CONFLICT, "conflict"),
            Self::StoragePermissionDenied => (S::BAD_GATEWAY, "storage_permission_denied"),
            Self::NotSupported => (S::NOT_IMPLEMENTED, "not_supported"),
            Self::StorageUnavailable => (S::SERVICE_UNAVAILABLE, "storage_unavailable"),
            Self::StorageTimeout => (S::GATEWAY_TIMEOUT, "storage_timeout"),
            Self::UnknownMount => (S::NOT_FOUND, "unknown_mount"),
            Self::ReadOnly => (S::METHOD_NOT_ALLOWED, "read_only"),
            Self::InvalidMetadata => (S::UNPROCESSABLE_ENTITY, "invalid_metadata"),
            Self::NodeNotFound => (S::NOT_FOUND, "node_not_found"),
            Self::NotAnArray => (S::BAD_REQUEST, "not_an_array"),
            Self::UnsupportedArray => (S::UNPROCESSABLE_ENTITY, "unsupported_array"),
            Self::NodeExists => (S::CONFLICT, "already_exists"),
            Self::NotEmpty => (S::CONFLICT, "not_empty"),
            Self::WriteConflict => (S::SERVICE_UNAVAILABLE, "write_conflict"),
            Self::InvalidSelection => (S::BAD_REQUEST, "invalid_selection"),
            Self::UnsupportedFormat => (S::BAD_REQUEST, "unsupported_format"),
            Self::MissingChunk => (S::NOT_FOUND, "missing_chunk"),
            Self::CorruptChunk => (S::BAD_GATEWAY, "corrupt_chunk"),
            Self::SelectionTooLarge => (S::PAYLOAD_TOO_LARGE, "selection_too_large"),
            Self::HierarchyTooLarge => (S::PAYLOAD_TOO_LARGE, "hierarchy_too_large"),
            Self::Internal => (S::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// The status.
    #[must_use]
    pub const fn status(self) -> StatusCode {
        self.parts().0
    }

    /// The code string clients see.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        self.parts().1
    }

    /// An error with this code and `message`.
    #[must_use]
    pub fn error(self, message: impl Into<String>) -> ApiError {
        ApiError { code: self, message: message.into(), headers: Vec::new() }
    }
}

/// An error answer: code (hence status), message and any extra headers.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub headers: Vec<(header::HeaderName, HeaderValue)>,
}

/// A handler result.
pub type ApiResult<T> = Result<T, ApiError>;

/// The methods a read-only mount allows on keys.
pub const READ_ONLY_ALLOW: &str = "GET, HEAD, OPTIONS, PROPFIND";

impl ApiError {
    /// The answer's status.
    #[must_use]
    pub const fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// Adds a header to the answer (dropped when `value` is not a valid
    /// header value).
    #[must_use]
    pub fn with_header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((name, v));
        }
        self
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        use ErrorCode as C;
        if let StorageError::NotFound { key } = &e {
            // The most common error answer (a missing chunk), its message
            // (the same as `Display`'s) built without the formatting machinery.
            return C::NotFound.error(["key ", key, " not found"].concat());
        }
        let message = e.to_string();
        match e {
            StorageError::NotFound { .. } => C::NotFound.error(message),
            StorageError::IsPrefix { .. } => C::IsPrefix.error(message),
            StorageError::AlreadyExists { .. } => C::KeyExists.error(message),
            StorageError::PreconditionFailed { .. } => C::PreconditionFailed.error(message),
            StorageError::NotModified { meta, .. } => {
                C::NotModified.error(message).with_header(header::ETAG, &meta.etag)
            }
            StorageError::RangeNotSatisfiable { size, .. } => {
                C::RangeNotSatisfiable.error(message).with_header(header::CONTENT_RANGE, &format!("bytes */{size}"))
            }
            StorageError::Conflict { .. } => C::Conflict.error(message),
            StorageError::InvalidKey { .. } => C::InvalidKey.error(message),
            StorageError::PermissionDenied { .. } => {
                tracing::error!(error = %message, "storage refused access");
                C::StoragePermissionDenied.error("the storage backend refused access")
            }
            StorageError::NotSupported { .. } => C::NotSupported.error(message),
            StorageError::Unavailable { .. } => {
                tracing::error!(error = %message, "storage unavailable");
                C::StorageUnavailable.error("the storage backend is unavailable").with_header(header::RETRY_AFTER, "1")
            }
            // Only reads that bound what they take ask for it (a stored
            // chunk larger than any encoding of it): damaged stored data.
            StorageError::TooLarge { .. } => {
                tracing::error!(error = %message, "corrupt stored data");
                C::CorruptChunk.error(message)
            }
            StorageError::Timeout { .. } => {
                tracing::error!(error = %message, "storage timed out");
                C::StorageTimeout
                    .error("the storage backend did not answer in time")
                    .with_header(header::RETRY_AFTER, "1")
            }
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        use ErrorCode as C;
        let e = match e {
            ServiceError::Storage(s) => return s.into(),
            other => other,
        };
        let message = e.to_string();
        match e {
            ServiceError::Storage(s) => s.into(),
            ServiceError::UnknownMount(_) => C::UnknownMount.error(message),
            ServiceError::ReadOnly(_) => C::ReadOnly.error(message).with_header(header::ALLOW, READ_ONLY_ALLOW),
            ServiceError::InvalidMetadata { .. } => C::InvalidMetadata.error(message),
            ServiceError::BadRequest(_)
            | ServiceError::InvalidNodePath { .. }
            | ServiceError::InvalidKey { .. }
            | ServiceError::InvalidRequest { .. }
            | ServiceError::InvalidSpec(_)
            | ServiceError::InvalidOpenMode
            | ServiceError::NotAGroup { .. } => C::BadRequest.error(message),
            ServiceError::PayloadTooLarge { .. } => C::PayloadTooLarge.error(message),
            ServiceError::IsPrefix(_) => C::IsPrefix.error(message),
            ServiceError::PrefixNotFound(_) => C::NotFound.error(message),
            ServiceError::NodeNotFound { .. } => C::NodeNotFound.error(message),
            ServiceError::NotAnArray { .. } => C::NotAnArray.error(message),
            ServiceError::UnsupportedArray { .. } => C::UnsupportedArray.error(message),
            ServiceError::AlreadyExists { .. } => C::NodeExists.error(message),
            ServiceError::NotEmpty { .. } => C::NotEmpty.error(message),
            ServiceError::Conflict(_) => C::Conflict.error(message),
            ServiceError::WriteConflict { .. } => C::WriteConflict.error(message).with_header(header::RETRY_AFTER, "1"),
            ServiceError::InvalidSelection(_) => C::InvalidSelection.error(message),
            ServiceError::UnsupportedFormat(_) => C::UnsupportedFormat.error(message),
            ServiceError::MissingChunk(_) => C::MissingChunk.error(message),
            ServiceError::CorruptChunk { .. } => {
                // Not a fault of zarrd: the store answered bytes that do not
                // decode, as a gateway's upstream gives a bad answer.
                tracing::error!(error = %message, "corrupt stored data");
                C::CorruptChunk.error(message)
            }
            ServiceError::SelectionTooLarge(_) => C::SelectionTooLarge.error(message),
            ServiceError::HierarchyTooLarge(_) => C::HierarchyTooLarge.error(message),
            ServiceError::Busy(_) => C::Overloaded.error(message).with_header(header::RETRY_AFTER, "10"),
            ServiceError::Internal(_) | ServiceError::Cpu(_) => {
                tracing::error!(error = %message, "internal error");
                C::Internal.error("internal error")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.code.parts();
        let mut resp = if status == StatusCode::NOT_MODIFIED {
            status.into_response()
        } else {
            let mut resp = Response::new(axum::body::Body::from(envelope(code, &self.message)));
            *resp.status_mut() = status;
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp
        };
        resp.headers_mut().extend(self.headers.into_iter().map(|(k, v)| (Some(k), v)));
        if matches!(self.code, ErrorCode::PayloadTooLarge | ErrorCode::BodyTimeout) {
            // The request's body was not read to its end, so the connection
            // cannot carry another request: say so, or a client that reuses
            // it races the close (HTTP/2 drops this header; it has no need).
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// [`ErrorBody`] as JSON, written directly: every error answer (a missing
/// chunk is one) goes through here.
fn envelope(code: &str, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(36 + code.len() + message.len());
    out.extend_from_slice(b"{\"error\":{\"code\":");
    json_string(&mut out, code);
    out.extend_from_slice(b",\"message\":");
    json_string(&mut out, message);
    out.extend_from_slice(b"}}");
    out
}

/// The answer to a read of a missing key: the 404 [`ErrorCode::NotFound`]
/// gives [`StorageError::NotFound`] (the same body, byte for byte), written
/// in one buffer with its length, without the general path (a message
/// string, then the envelope). Missing chunks are the most common error
/// answer: clients read them as the fill value.
#[must_use]
pub fn key_not_found(key: &str) -> Response {
    const HEAD: &[u8] = b"{\"error\":{\"code\":\"not_found\",\"message\":\"key ";
    const TAIL: &[u8] = b" not found\"}}";
    let mut body = Vec::with_capacity(HEAD.len() + key.len() + TAIL.len());
    body.extend_from_slice(HEAD);
    json_escaped(&mut body, key);
    body.extend_from_slice(TAIL);
    let length = super::lengths::content_length(body.len() as u64);
    let mut resp = Response::new(axum::body::Body::from(body));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    // Room for these and the headers added on the way out (request id,
    // CORS), so the map is allocated once.
    let mut headers = axum::http::HeaderMap::with_capacity(8);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONTENT_LENGTH, length);
    *resp.headers_mut() = headers;
    resp
}

/// `s` as a JSON string (RFC 8259 §7): quotes, backslashes and control
/// characters escaped, everything else as is (UTF-8).
fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    json_escaped(out, s);
    out.push(b'"');
}

/// The inside of [`json_string`]: `s` escaped, without the quotes.
fn json_escaped(out: &mut Vec<u8>, s: &str) {
    // Most messages and keys have nothing to escape: one scan, one copy.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.extend_from_slice(s.as_bytes());
        return;
    }
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escaped: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => {
                out.extend_from_slice(&s.as_bytes()[plain..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
                plain = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&s.as_bytes()[plain..i]);
        out.extend_from_slice(escaped);
        plain = i + 1;
    }
    out.extend_from_slice(&s.as_bytes()[plain..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_keep_their_codes() {
        let e = ApiError::from(ServiceError::SelectionTooLarge("2 bytes".into()));
        assert_eq!((e.status(), e.code.as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "selection_too_large"));
        let e = ApiError::from(ServiceError::InvalidSelection("dimension 1: out of bounds".into()));
        assert_eq!((e.status(), e.code.as_str()), (StatusCode::BAD_REQUEST, "invalid_selection"));
        assert!(e.message.contains("dimension 1"), "{}", e.message);
        let e = ApiError::from(ServiceError::Internal("a secret path".into()));
        assert_eq!(
            (e.status(), e.code.as_str(), e.message.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
        );
    }

    #[test]
    fn one_string_two_statuses_where_the_outcomes_differ() {
        // A conditional store write that finds the key is a failed
        // precondition; a node that exists is a conflict.
        assert_eq!(ErrorCode::KeyExists.parts(), (StatusCode::PRECONDITION_FAILED, "already_exists"));
        assert_eq!(ErrorCode::NodeExists.parts(), (StatusCode::CONFLICT, "already_exists"));
        assert_eq!(ErrorCode::InvalidBody.parts(), (StatusCode::BAD_REQUEST, "invalid_body"));
        assert_eq!(ErrorCode::InvalidBodyShape.parts(), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"));
    }

    #[test]
    fn answers_that_leave_a_body_unread_close_the_connection() {
        for code in [ErrorCode::PayloadTooLarge, ErrorCode::BodyTimeout] {
            let resp = code.error("x").into_response();
            assert_eq!(resp.status(), code.status());
            assert_eq!(resp.headers()[header::CONNECTION], "close", "{code:?}");
        }
        let resp = ErrorCode::InvalidQuery.error("x").into_response();
        assert!(resp.headers().get(header::CONNECTION).is_none());
    }

    #[test]
    fn a_missing_key_says_what_its_storage_error_says() {
        let e = StorageError::NotFound { key: "arr/c/0/é".into() };
        let display = e.to_string();
        let api = ApiError::from(e);
        assert_eq!((api.status(), api.code.as_str()), (StatusCode::NOT_FOUND, "not_found"));
        assert_eq!(api.message, display);
    }

    #[test]
    fn a_missing_key_answers_what_the_general_path_answers() {
        use http_body_util::BodyExt;
        let keys = ["arr/c/0/0", "a/zarr.json", "quote\"back\\slash", "ctl\u{1}\n\t", "é/日本/🦀", &"k".repeat(10_000)];
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for key in keys {
            let general = ApiError::from(StorageError::NotFound { key: key.to_string() }).into_response();
            let direct = key_not_found(key);
            assert_eq!(direct.status(), general.status());
            assert_eq!(direct.headers()[header::CONTENT_TYPE], general.headers()[header::CONTENT_TYPE]);
            let (general, direct) = rt.block_on(async {
                (
                    general.into_body().collect().await.unwrap().to_bytes(),
                    direct.into_body().collect().await.unwrap().to_bytes(),
                )
            });
            assert_eq!(direct, general, "{key}");
            let parsed: serde_json::Value = serde_json::from_slice(&direct).unwrap();
            assert_eq!(parsed["error"]["message"], format!("key {key} not found"));
        }
        let resp = key_not_found("a/b");
        let len: usize = resp.headers()[header::CONTENT_LENGTH].to_str().unwrap().parse().unwrap();
        assert_eq!(len, r#"{"error":{"code":"not_found","message":"key a/b not found"}}"#.len());
    }

    #[test]
    fn corrupt_stored_data_is_a_bad_gateway() {
        let e = ApiError::from(ServiceError::CorruptChunk { key: "a/c/0".into(), reason: "zstd: bad frame".into() });
        assert_eq!((e.status(), e.code.as_str()), (StatusCode::BAD_GATEWAY, "corrupt_chunk"));
        assert!(e.message.contains("a/c/0"), "{}", e.message);
    }

    #[test]
    fn the_envelope_is_the_json_serde_writes() {
        let messages = [
            "key arr/c/0/0 not found",
            "",
            "quote \" backslash \\ slash / newline \n tab \t cr \r bell \u{7} nul \0 us \u{1f} del \u{7f}",
            "unicode: é ü 日本 \u{2028} 🦀 \u{8}\u{c}",
        ];
        for message in messages {
            let ours = envelope("not_found", message);
            let theirs = serde_json::to_vec(&ErrorBody {
                error: ErrorDetail { code: "not_found", message: message.to_string() },
            })
            .unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), String::from_utf8(theirs).unwrap());
        }
        let resp = ErrorCode::NotFound.error("gone").into_response();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    }
}
