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

pub mod data;
pub mod nodes;
pub mod write;

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

use super::error::ApiError;
use crate::service::node::NodePath;

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
