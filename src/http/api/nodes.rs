//! Mounts and nodes: `GET /api/v1/mounts`, `GET /api/v1/nodes/{mount}[/{*path}]`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::NodeTarget;
use crate::http::error::{ApiResult, ErrorBody};
use crate::service::node::{self, Node};
use crate::service::App;
use crate::zarr::array::ZarrFormat;

/// One mount.
#[derive(Debug, Serialize, ToSchema)]
pub struct MountInfo {
    /// The mount's name, as used in URLs.
    #[schema(example = "data")]
    pub name: String,
    /// Whether writes are refused.
    pub read_only: bool,
}

/// The mounts.
#[derive(Debug, Serialize, ToSchema)]
pub struct MountList {
    /// Every mount, by name.
    pub mounts: Vec<MountInfo>,
}

/// The configured mounts.
#[utoipa::path(get, path = "/api/v1/mounts", tag = "nodes", responses((status = 200, description = "The mounts", body = MountList)))]
pub async fn list_mounts(State(app): State<Arc<App>>) -> Json<MountList> {
    let mounts = app.mounts().map(|m| MountInfo { name: m.name().to_string(), read_only: m.read_only() }).collect();
    Json(MountList { mounts })
}

/// A node (array or group), as stored and normalised.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeInfo {
    /// The mount.
    #[schema(example = "data")]
    pub mount: String,
    /// The path in the mount (`""` for the root).
    #[schema(example = "climate/temperature")]
    pub path: String,
    /// `array` or `group`.
    #[schema(example = "array")]
    pub node_type: &'static str,
    /// 2 or 3.
    #[schema(example = 3)]
    pub zarr_format: u8,
    /// Arrays: the shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Arrays: the (outer) chunk shape: the shape of what is stored under one key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_shape: Option<Vec<u64>>,
    /// User attributes.
    #[schema(value_type = Object)]
    pub attributes: Map<String, Value>,
    /// The stored metadata document (`zarr.json`, `.zarray` or `.zgroup`), as stored.
    #[schema(value_type = Object)]
    pub metadata: Value,
}

fn format_number(f: ZarrFormat) -> u8 {
    match f {
        ZarrFormat::V2 => 2,
        ZarrFormat::V3 => 3,
    }
}

impl NodeInfo {
    fn of(node: &Node) -> Self {
        match node {
            Node::Array(a) => Self {
                mount: a.mount.name().to_string(),
                path: a.path.as_str().to_string(),
                node_type: "array",
                zarr_format: format_number(a.format()),
                shape: Some(a.desc.shape.clone()),
                chunk_shape: Some(a.desc.chunk_shape.clone()),
                attributes: a.desc.attributes.clone(),
                metadata: a.metadata.clone(),
            },
            Node::Group(g) => Self {
                mount: g.mount.name().to_string(),
                path: g.path.as_str().to_string(),
                node_type: "group",
                zarr_format: format_number(g.format),
                shape: None,
                chunk_shape: None,
                attributes: g.attributes.clone(),
                metadata: g.metadata.clone(),
            },
        }
    }
}

/// Describe the node at a path.
#[utoipa::path(
    get,
    path = "/api/v1/nodes/{mount}/{*path}",
    tag = "nodes",
    params(
        ("mount" = String, Path, description = "Mount name", example = "data"),
        ("path" = String, Path, description = "Node path inside the mount", example = "climate/temperature"),
    ),
    responses(
        (status = 200, description = "The node", body = NodeInfo),
        (status = 400, description = "Invalid path", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid or unsupported", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_node(State(app): State<Arc<App>>, target: NodeTarget) -> ApiResult<Json<NodeInfo>> {
    let node = node::open(&app, &target.mount, &target.path).await?;
    Ok(Json(NodeInfo::of(&node)))
}

/// Describe the mount's root node.
#[utoipa::path(
    get,
    path = "/api/v1/nodes/{mount}",
    tag = "nodes",
    params(("mount" = String, Path, description = "Mount name", example = "data")),
    responses(
        (status = 200, description = "The root node", body = NodeInfo),
        (status = 404, description = "No such mount, or no node at its root", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid or unsupported", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_root_node(State(app): State<Arc<App>>, target: NodeTarget) -> ApiResult<Json<NodeInfo>> {
    get_node(State(app), target).await
}
