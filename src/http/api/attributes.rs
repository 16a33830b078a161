//! Attributes of a node: `GET`, `PUT` (replace) and `PATCH` (merge) on
//! `/api/v1/attributes/{mount}/{*path}`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{Map, Value};
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::response::{Response as ResponseDoc, ResponseBuilder};
use utoipa::openapi::schema::{Object, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::IntoResponses;

use crate::http::error::{ApiResult, ErrorBody, ErrorCode};
use crate::http::extract::{JsonBody, NodeTarget};
use crate::service::node::{self as ops, AttributeUpdate};
use crate::service::node::{self, Node};
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
    Ok(Json(match node::open(&app.node(&target.mount, &target.path)?).await? {
        Node::Array(a) => a.desc.attributes.clone(),
        Node::Group(g) => g.attributes.clone(),
    }))
}

/// The answers of an attributes write, replace (`PUT`) or merge (`PATCH`).
pub struct AttributesWritten;

impl IntoResponses for AttributesWritten {
    fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
        let json = |schema: RefOr<Schema>| ContentBuilder::new().schema(Some(schema)).build();
        let answer = |description: &str, schema| {
            RefOr::T(ResponseBuilder::new().description(description).content("application/json", json(schema)).build())
        };
        let error = |description| answer(description, Ref::from_schema_name("ErrorBody").into());
        BTreeMap::from([
            ("200".into(), answer("The attributes now stored", Object::with_type(Type::Object).into())),
            ("400".into(), error("Body not a JSON object")),
            ("404".into(), error("No such mount or node")),
            ("405".into(), error("Read-only mount")),
            ("413".into(), error("Body larger than `limits.max_body_bytes`")),
            ("422".into(), error("Stored metadata is invalid")),
            ("503".into(), error("Storage unavailable")),
        ])
    }
}

/// Replace a node's attributes (v3: `attributes` of `zarr.json`, other
/// members kept as stored; v2: `.zattrs`).
#[utoipa::path(
    put,
    path = "/api/v1/attributes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget),
    request_body(content = Object, content_type = "application/json", description = "The new attributes", example = json!({"units": "K"})),
    responses(AttributesWritten)
)]
pub async fn put_attributes(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Json<Map<String, Value>>> {
    let attrs = object(body)?;
    Ok(Json(ops::update_attributes(&app.node(&target.mount, &target.path)?, attrs, AttributeUpdate::Replace).await?))
}

/// Merge into a node's attributes (JSON merge patch on the top-level
/// members: `null` removes a member, other values replace it).
#[utoipa::path(
    patch,
    path = "/api/v1/attributes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget),
    request_body(content = Object, content_type = "application/json", description = "Members to set (`null` to remove)", example = json!({"units": "degC", "obsolete": null})),
    responses(AttributesWritten)
)]
pub async fn patch_attributes(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Json<Map<String, Value>>> {
    let attrs = object(body)?;
    Ok(Json(ops::update_attributes(&app.node(&target.mount, &target.path)?, attrs, AttributeUpdate::Merge).await?))
}
