//! Consolidating a group's metadata: `POST /api/v1/consolidate/{mount}[/{*path}]`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::error::{ApiResult, ErrorBody};
use crate::http::extract::NodeTarget;
use crate::service::node as ops;
use crate::service::node::{self, Node};
use crate::service::App;
use crate::zarr::array::ZarrFormat;

/// The outcome of a consolidation.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsolidateResult {
    /// The key written (`zarr.json` with inline `consolidated_metadata`, or v2 `.zmetadata`).
    #[schema(example = "climate/zarr.json")]
    pub key: String,
    /// Descendant nodes recorded.
    #[schema(example = 3)]
    pub nodes: usize,
}

/// Consolidate a group's metadata, as zarr-python's `consolidate_metadata`
/// does: v3 inline `consolidated_metadata` in the group's `zarr.json`, or a
/// v2 `.zmetadata`, so clients open the whole hierarchy in one request.
///
/// The walk lists at most `limits.max_list_entries` names in all and holds
/// at most the documents one stored document may be (twice
/// `limits.max_body_bytes`); a larger hierarchy is 413
/// `hierarchy_too_large`, naming the limit, and nothing is written.
#[utoipa::path(
    post,
    path = "/api/v1/consolidate/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget),
    responses(
        (status = 200, description = "Consolidated", body = ConsolidateResult),
        (status = 400, description = "Invalid path, or the node is an array", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 413, description = "The hierarchy has more names than `limits.max_list_entries`, or more documents than one stored document may hold", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn consolidate(State(app): State<Arc<App>>, target: NodeTarget) -> ApiResult<Json<ConsolidateResult>> {
    let at = app.node(&target.mount, &target.path)?;
    let nodes = ops::consolidate(&at).await?;
    let format = match node::open(&at).await? {
        Node::Group(g) => g.format,
        Node::Array(a) => a.format(),
    };
    let name = if format == ZarrFormat::V3 { "zarr.json" } else { ".zmetadata" };
    Ok(Json(ConsolidateResult { key: target.path.key(name)?.to_string(), nodes }))
}
