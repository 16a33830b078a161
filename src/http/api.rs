//! The REST API under `/api/v1`: mounts, nodes (metadata and hierarchy),
//! data (slices), chunks.
//!
//! URL scheme. A node is addressed by its mount and its path inside the
//! mount; since a path has any number of segments it comes last, after the
//! resource name:
//!
//! | route | methods |
//! |---|---|
//! | `/api/v1/mounts` | GET: the mounts |
//! | `/api/v1/nodes/{mount}` (root) and `/api/v1/nodes/{mount}/{*path}` | GET: describe; PUT: create; DELETE: delete |
//! | `/api/v1/attributes/{mount}/{*path}` | GET; PUT: replace; PATCH: merge |
//! | `/api/v1/resize/{mount}/{*path}` | POST |
//! | `/api/v1/consolidate/{mount}` and `/api/v1/consolidate/{mount}/{*path}` | POST |
//! | `/api/v1/data/{mount}/{*path}` | GET: read a selection (`?sel=`); POST: read (selection in the body); PUT: write |
//! | `/api/v1/chunks/{mount}/{*path}` | GET: one decoded chunk by grid coordinates |
//!
//! In the OpenAPI document `{*path}` is the parameter `{path}`: a generated
//! client percent-encodes the `/` inside it, which axum decodes.
//!
//! Handlers parse the request, call one service function and map its
//! result; errors use the JSON envelope of [`super::error`].

pub mod attributes;
pub mod consolidate;
pub mod data;
pub mod nodes;
pub mod resize;
pub mod write;

use std::collections::HashMap;

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use std::sync::Arc;

use super::error::ApiError;
use crate::service::node::NodePath;
use crate::service::App;

/// The mount and node path of a `/api/v1/<resource>/{mount}[/{*path}]`
/// route (the path is the root when the route has none).
#[derive(Debug, Clone)]
pub struct NodeTarget {
    /// The mount name.
    pub mount: String,
    /// The node's path in the mount.
    pub path: NodePath,
}

impl<S: Send + Sync> FromRequestParts<S> for NodeTarget {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(mut params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request("invalid_path", format!("invalid path: {e}")))?;
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
            .map_err(|e| ApiError::bad_request("invalid_query", format!("invalid query string: {}", e.body_text())))
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
        require_json(&req)?;
        let body = read_document(req, app).await?;
        parse_body(body, app)
            .await?
            .map(Self)
            .map_err(|e| ApiError::bad_request("invalid_body", format!("request body: {e}")))
    }
}

/// Bodies up to this many bytes are parsed on the async worker (less work
/// than the hand-off to the CPU pool); larger ones on the pool.
const INLINE_PARSE_MAX: usize = 64 * 1024;

/// Parses a JSON body within the document parse budget (already held when
/// the front reserved it for the whole request), on the CPU pool when it is
/// large enough to stall an async worker.
async fn parse_body<T: DeserializeOwned + Send + 'static>(
    body: bytes::Bytes,
    app: &App,
) -> Result<Result<T, serde_json::Error>, ApiError> {
    let _parse = crate::service::node::DocumentGate::of(app).reserve(body.len()).await;
    crate::service::cpu::run_or_inline(body.len() <= INLINE_PARSE_MAX, move || serde_json::from_slice::<T>(&body))
        .await
        .map_err(|e| ApiError::from(crate::service::ServiceError::Internal(e.to_string())))
}

/// A document body: at most `limits.max_body_bytes`.
async fn read_document(req: Request, app: &App) -> Result<bytes::Bytes, ApiError> {
    let (parts, body) = req.into_parts();
    let limit = app.config().limits.max_body_bytes;
    crate::http::store::read_body(&parts.headers, body, limit, "limits.max_body_bytes").await
}

/// A JSON request body that must say so: as [`JsonBody`], and besides a
/// `Content-Type` other than `application/json` (or `application/*+json`)
/// is 415, and JSON of the wrong shape (an unknown member, a wrong type) is
/// 422 rather than 400.
#[derive(Debug, Clone)]
pub struct TypedJsonBody<T>(pub T);

impl<T: DeserializeOwned + Send + 'static> FromRequest<Arc<App>> for TypedJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, Self::Rejection> {
        require_json(&req)?;
        let body = read_document(req, app).await?;
        parse_body(body, app).await?.map(Self).map_err(|e| {
            let status = match e.classify() {
                serde_json::error::Category::Data => axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                _ => axum::http::StatusCode::BAD_REQUEST,
            };
            ApiError::new(status, "invalid_body", format!("invalid request body: {e}"))
        })
    }
}

/// 415 unless the request says its body is JSON.
fn require_json(req: &Request) -> Result<(), ApiError> {
    let content_type =
        req.headers().get(axum::http::header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()));
    if content_type.as_deref().is_some_and(is_json_media_type) {
        return Ok(());
    }
    let got = content_type.map_or_else(|| "no Content-Type".to_string(), |c| format!("Content-Type `{c}`"));
    Err(ApiError::new(
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "invalid request body: {got}; this endpoint takes a JSON body, sent with `Content-Type: application/json`"
        ),
    ))
}

/// `application/json`, or a `+json` type, with any parameters.
fn is_json_media_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence.strip_prefix("application/").is_some_and(|subtype| subtype == "json" || subtype.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::is_json_media_type;

    #[test]
    fn json_media_types() {
        for yes in ["application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"] {
            assert!(is_json_media_type(yes), "{yes}");
        }
        for no in ["text/json", "application/jsonx", "application/octet-stream", ""] {
            assert!(!is_json_media_type(no), "{no}");
        }
    }
}
