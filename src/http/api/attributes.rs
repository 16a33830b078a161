//! Attributes of a node: `GET`, `PUT` (replace) and `PATCH` (merge) on
//! `/api/v1/attributes/{mount}/{*path}`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{Map, Value};

use crate::http::error::{ApiResult, ErrorBody, ErrorCode};
use crate::http::extract::{JsonBody, NodeTarget};
use crate::service::node::{self, Node};
use crate::service::nodes::{self as ops, AttributeUpdate};
use crate::service::App;

fn object(body: Value) -> ApiResult<Map<String, Value>> {
    match body {
        Value::Object(m) => Ok(m),
        _ => Err(ErrorCode::InvalidBody.error("request body: expected a JSON object of attributes")),
    }
}

/// A node's user attributes.
#[utoipa::path(
    get,
    path = "/api/v1/attributes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget),
    responses(
        (status = 200, description = "The attributes", body = Object, example = json!({"units": "K", "long_name": "temperature"})),
        (status = 400, description = "Invalid path", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_attributes(State(app): State<Arc<App>>, target: NodeTarget) -> ApiResult<Json<Map<String, Value>>> {
    Ok(Json(match node::open(&app, &target.mount, &target.path).await? {
        Node::Array(a) => a.desc.attributes.clone(),
        Node::Group(g) => g.attributes.clone(),
    }))
}

/// Replace a node's attributes (v3: `attributes` of `zarr.json`, other
/// members kept as stored; v2: `.zattrs`).
#[utoipa::path(
    put,
    path = "/api/v1/attributes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget),
    request_body(content = Object, content_type = "application/json", description = "The new attributes", example = json!({"units": "K"})),
    responses(
        (status = 200, description = "The attributes now stored", body = Object),
        (status = 400, description = "Body not a JSON object", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 413, description = "Body larger than `limits.max_body_bytes`", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn put_attributes(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Json<Map<String, Value>>> {
    let attrs = object(body)?;
    Ok(Json(ops::update_attributes(&app, &target.mount, &target.path, attrs, AttributeUpdate::Replace).await?))
}

/// Merge into a node's attributes (JSON merge patch on the top-level
/// members: `null` removes a member, other values replace it).
#[utoipa::path(
    patch,
    path = "/api/v1/attributes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget),
    request_body(content = Object, content_type = "application/json", description = "Members to set (`null` to remove)", example = json!({"units": "degC", "obsolete": null})),
    responses(
        (status = 200, description = "The attributes now stored", body = Object),
        (status = 400, description = "Body not a JSON object", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 413, description = "Body larger than `limits.max_body_bytes`", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn patch_attributes(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Json<Map<String, Value>>> {
    let attrs = object(body)?;
    Ok(Json(ops::update_attributes(&app, &target.mount, &target.path, attrs, AttributeUpdate::Merge).await?))
}
