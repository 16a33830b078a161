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
use axum::Json;
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
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let message = e.to_string();
        match e {
            ServiceError::Storage(s) => s.into(),
            ServiceError::UnknownMount(_) => Self::new(StatusCode::NOT_FOUND, "unknown_mount", message),
            ServiceError::ReadOnly(_) => Self::new(StatusCode::METHOD_NOT_ALLOWED, "read_only", message)
                .with_header(header::ALLOW, READ_ONLY_ALLOW),
            ServiceError::InvalidMetadata { .. } => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_metadata", message)
            }
            ServiceError::BadRequest(_) => Self::bad_request("bad_request", message),
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
                tracing::error!(error = %message, "corrupt stored data");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt_chunk", message)
            }
            ServiceError::SelectionTooLarge(_) => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "selection_too_large", message)
            }
            ServiceError::Internal(_) => {
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
            let body = ErrorBody { error: ErrorDetail { code: self.code, message: self.message } };
            (self.status, Json(body)).into_response()
        };
        resp.headers_mut().extend(self.headers.into_iter().map(|(k, v)| (Some(k), v)));
        resp
    }
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
}
