//! Resizing an array: `POST /api/v1/resize/{mount}/{*path}`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::error::{ApiResult, ErrorBody};
use crate::http::extract::{JsonBody, NodeTarget};
use crate::service::node::{self as ops, Resize};
use crate::service::App;

/// A resize request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"shape": [500, 2000], "shrink_only": true}))]
pub struct ResizeRequest {
    /// The new shape (same rank as the array; each dimension at most 2^62).
    pub shape: Vec<u64>,
    /// Fail (400) if any dimension would shrink.
    #[serde(default)]
    pub expand_only: bool,
    /// Fail (400) if any dimension would grow.
    #[serde(default)]
    pub shrink_only: bool,
}

/// The outcome of a resize.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResizeResult {
    /// The shape now stored.
    #[schema(example = json!([500, 2000]))]
    pub shape: Vec<u64>,
    /// Chunks deleted because they lie wholly outside the new shape.
    #[schema(example = 4)]
    pub deleted_chunks: u64,
}

/// Resize an array: rewrites `shape` and deletes the chunks wholly outside
/// the new shape (as zarr-python does; chunks straddling the new boundary
/// are kept as stored).
#[utoipa::path(
    post,
    path = "/api/v1/resize/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget),
    request_body(content = ResizeRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Resized", body = ResizeResult),
        (status = 400, description = "Bad body: wrong rank, a dimension above 2^62, a guard (`expand_only`, `shrink_only`) violated, or not an array (each named)", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 413, description = "Body larger than `limits.max_body_bytes`", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn resize(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    JsonBody(req): JsonBody<ResizeRequest>,
) -> ApiResult<Json<ResizeResult>> {
    let req = Resize { shape: req.shape, expand_only: req.expand_only, shrink_only: req.shrink_only };
    let (array, deleted_chunks) = ops::resize(&app.node(&target.mount, &target.path)?, &req).await?;
    Ok(Json(ResizeResult { shape: array.desc.shape.clone(), deleted_chunks }))
}
