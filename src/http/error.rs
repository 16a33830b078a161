//! The one place where errors become HTTP statuses.
//!
//! Policy: every error answers the JSON envelope
//! `{"error": {"code": "...", "message": "..."}}`. Client errors say what is
//! wrong (the key, the field, the mount). Server faults (storage unreachable,
//! task failures) are logged in full and answered with a short message that
//! names the mount or key but no backend internals. The status is chosen by
//! an exhaustive match, so a new error variant cannot go unmapped.

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

/// An error answer: status, code, message and any extra headers.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub headers: Vec<(header::HeaderName, HeaderValue)>,
}

/// A handler result.
pub type ApiResult<T> = Result<T, ApiError>;

/// The methods a read-only mount allows on keys.
pub const READ_ONLY_ALLOW: &str = "GET, HEAD, OPTIONS, PROPFIND";

impl ApiError {
    /// A plain error.
    #[must_use]
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), headers: Vec::new() }
    }

    /// 400 with `code`.
    #[must_use]
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    #[must_use]
    fn with_header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((name, v));
        }
        self
    }
}

impl ApiError {
    /// A failed request-body read: 408 `body_timeout` when the body stopped
    /// arriving ([`super::guard::BodyTimeout`]), else 400 `body_read_failed`.
    #[must_use]
    pub fn body_error(e: &(dyn std::error::Error + 'static)) -> Self {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if let Some(t) = c.downcast_ref::<super::guard::BodyTimeout>() {
                return Self::new(StatusCode::REQUEST_TIMEOUT, "body_timeout", t.to_string());
            }
            cause = c.source();
        }
        Self::bad_request("body_read_failed", format!("reading the body failed: {e}"))
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        let message = e.to_string();
        match e {
            StorageError::NotFound { .. } => Self::new(StatusCode::NOT_FOUND, "not_found", message),
            StorageError::IsPrefix { .. } => Self::new(StatusCode::NOT_FOUND, "is_prefix", message),
            StorageError::AlreadyExists { .. } => Self::new(StatusCode::PRECONDITION_FAILED, "already_exists", message),
            StorageError::PreconditionFailed { .. } => {
                Self::new(StatusCode::PRECONDITION_FAILED, "precondition_failed", message)
            }
            StorageError::NotModified { meta, .. } => {
                Self::new(StatusCode::NOT_MODIFIED, "not_modified", message).with_header(header::ETAG, &meta.etag)
            }
            StorageError::RangeNotSatisfiable { size, .. } => {
                Self::new(StatusCode::RANGE_NOT_SATISFIABLE, "range_not_satisfiable", message)
                    .with_header(header::CONTENT_RANGE, &format!("bytes */{size}"))
            }
            StorageError::Conflict { .. } => Self::new(StatusCode::CONFLICT, "conflict", message),
            StorageError::InvalidKey { .. } => Self::bad_request("invalid_key", message),
            StorageError::PermissionDenied { .. } => {
                tracing::error!(error = %message, "storage refused access");
                Self::new(StatusCode::BAD_GATEWAY, "storage_permission_denied", "the storage backend refused access")
            }
            StorageError::NotSupported { .. } => Self::new(StatusCode::NOT_IMPLEMENTED, "not_supported", message),
            StorageError::Unavailable { .. } => {
                tracing::error!(error = %message, "storage unavailable");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable", "the storage backend is unavailable")
                    .with_header(header::RETRY_AFTER, "1")
            }
            StorageError::Timeout { .. } => {
                tracing::error!(error = %message, "storage timed out");
                Self::new(StatusCode::GATEWAY_TIMEOUT, "storage_timeout", "the storage backend did not answer in time")
                    .with_header(header::RETRY_AFTER, "1")
            }
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let e = match e {
            ServiceError::Storage(s) => return s.into(),
            other => other,
        };
        let message = e.to_string();
        match e {
            ServiceError::Storage(s) => s.into(),
            ServiceError::UnknownMount(_) => Self::new(StatusCode::NOT_FOUND, "unknown_mount", message),
            ServiceError::ReadOnly(_) => Self::new(StatusCode::METHOD_NOT_ALLOWED, "read_only", message)
                .with_header(header::ALLOW, READ_ONLY_ALLOW),
            ServiceError::InvalidMetadata { .. } => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_metadata", message)
            }
            ServiceError::BadRequest(_)
            | ServiceError::InvalidNodePath { .. }
            | ServiceError::InvalidKey { .. }
            | ServiceError::InvalidRequest { .. }
            | ServiceError::InvalidSpec(_)
            | ServiceError::InvalidOpenMode
            | ServiceError::NotAGroup { .. } => Self::bad_request("bad_request", message),
            ServiceError::PayloadTooLarge { .. } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
            }
            ServiceError::IsPrefix(_) => Self::new(StatusCode::NOT_FOUND, "is_prefix", message),
            ServiceError::PrefixNotFound(_) => Self::new(StatusCode::NOT_FOUND, "not_found", message),
            ServiceError::NodeNotFound { .. } => Self::new(StatusCode::NOT_FOUND, "node_not_found", message),
            ServiceError::NotAnArray { .. } => Self::bad_request("not_an_array", message),
            ServiceError::UnsupportedArray { .. } => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "unsupported_array", message)
            }
            ServiceError::AlreadyExists { .. } => Self::new(StatusCode::CONFLICT, "already_exists", message),
            ServiceError::NotEmpty { .. } => Self::new(StatusCode::CONFLICT, "not_empty", message),
            ServiceError::Conflict(_) => Self::new(StatusCode::CONFLICT, "conflict", message),
            ServiceError::WriteConflict { .. } => Self::new(StatusCode::SERVICE_UNAVAILABLE, "write_conflict", message)
                .with_header(header::RETRY_AFTER, "1"),
            ServiceError::InvalidSelection(_) => Self::bad_request("invalid_selection", message),
            ServiceError::UnsupportedFormat(_) => Self::bad_request("unsupported_format", message),
            ServiceError::MissingChunk(_) => Self::new(StatusCode::NOT_FOUND, "missing_chunk", message),
            ServiceError::CorruptChunk { .. } => {
                // Not a fault of zarrd: the store answered bytes that do not
                // decode, as a gateway's upstream gives a bad answer.
                tracing::error!(error = %message, "corrupt stored data");
                Self::new(StatusCode::BAD_GATEWAY, "corrupt_chunk", message)
            }
            ServiceError::SelectionTooLarge(_) => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "selection_too_large", message)
            }
            ServiceError::Internal(_) | ServiceError::Cpu(_) => {
                tracing::error!(error = %message, "internal error");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = if self.status == StatusCode::NOT_MODIFIED {
            self.status.into_response()
        } else {
            let mut resp = Response::new(axum::body::Body::from(envelope(self.code, &self.message)));
            *resp.status_mut() = self.status;
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp
        };
        resp.headers_mut().extend(self.headers.into_iter().map(|(k, v)| (Some(k), v)));
        if matches!(self.code, "payload_too_large" | "body_timeout") {
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

/// `s` as a JSON string (RFC 8259 §7): quotes, backslashes and control
/// characters escaped, everything else as is (UTF-8).
fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
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
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_and_body_errors() {
        let e = ApiError::from(ServiceError::SelectionTooLarge("2 bytes".into()));
        assert_eq!((e.status, e.code), (StatusCode::PAYLOAD_TOO_LARGE, "selection_too_large"));
        let timeout = axum::Error::new(super::super::guard::BodyTimeout(3));
        let e = ApiError::body_error(&timeout);
        assert_eq!((e.status, e.code), (StatusCode::REQUEST_TIMEOUT, "body_timeout"));
        assert!(e.message.contains("limits.body_read_timeout_seconds"), "{}", e.message);
        let other = axum::Error::new(std::io::Error::other("reset"));
        assert_eq!(ApiError::body_error(&other).code, "body_read_failed");
    }

    #[test]
    fn corrupt_stored_data_is_a_bad_gateway() {
        let e = ApiError::from(ServiceError::CorruptChunk { key: "a/c/0".into(), reason: "zstd: bad frame".into() });
        assert_eq!((e.status, e.code), (StatusCode::BAD_GATEWAY, "corrupt_chunk"));
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
        let resp = ApiError::new(StatusCode::NOT_FOUND, "not_found", "gone").into_response();
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    }
}
