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
//! | `/api/v1/preview/{mount}/{*path}` | GET: a PNG thumbnail of an array |
//!
//! In the OpenAPI document `{*path}` is the parameter `{path}`: a generated
//! client percent-encodes the `/` inside it, which axum decodes.
//!
//! A node route and its root twin are one handler with one `#[utoipa::path]`
//! (the `{*path}` route), registered at both by [`node_routes`], which
//! derives the root operation from it: the same responses, without the
//! `path` parameter.
//!
//! Handlers parse the request (extractors in [`super::extract`], shared
//! parameters in [`super::params`]), call one service function and map its
//! result; errors use the JSON envelope of [`super::error`].

pub mod attributes;
pub mod consolidate;
pub mod data;
pub mod image;
pub mod jobs;
pub mod nodes;
pub mod pyramids;
pub mod resize;
pub mod write;

use std::sync::Arc;

use utoipa::openapi::path::{Operation, Paths};
use utoipa::openapi::RefOr;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};

use crate::service::App;

/// The catch-all segment every node route ends with.
const PATH_SEGMENT: &str = "/{*path}";

/// Registers the operations of one node route, `/api/v1/<resource>/{mount}/{*path}`,
/// and their twins at the mount's root, `/api/v1/<resource>/{mount}`: the
/// same handlers, and in the document the same operations (responses,
/// query parameters, body) without the `path` parameter, each with its
/// root operation id (`get_data` → `get_root_data`, `consolidate` →
/// `consolidate_root`).
///
/// # Panics
/// When a route does not end with `/{*path}` (a programming error every
/// test would show).
#[must_use]
pub fn node_routes(
    router: OpenApiRouter<Arc<App>>,
    (schemas, paths, method_router): UtoipaMethodRouter<Arc<App>>,
) -> OpenApiRouter<Arc<App>> {
    let mut root = Paths::new();
    for (template, item) in &paths.paths {
        let root_template = template.strip_suffix(PATH_SEGMENT).expect("a node route ends with /{*path}");
        let mut item = item.clone();
        for (method, op) in super::openapi::operations_mut(&mut item) {
            at_root(op, method, template);
        }
        root.paths.insert(root_template.to_string(), item);
    }
    router.routes((schemas, paths, method_router.clone())).routes((Vec::new(), root, method_router))
}

/// `op` of `METHOD template` made its root twin's.
fn at_root(op: &mut Operation, method: &str, template: &str) {
    op.operation_id = op.operation_id.as_deref().map(root_operation_id);
    if let Some(params) = &mut op.parameters {
        params.retain(|p| !matches!(p, RefOr::T(p) if p.name == "path"));
    }
    let twin = template.replace(PATH_SEGMENT, "/{path}");
    op.description = Some(format!("As `{method} {twin}`, for the node at the mount's root."));
}

/// The root twin's operation id: `get_data` → `get_root_data`,
/// `consolidate` → `consolidate_root`.
fn root_operation_id(id: &str) -> String {
    match id.split_once('_') {
        Some((verb, rest)) => format!("{verb}_root_{rest}"),
        None => format!("{id}_root"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_operation_ids() {
        assert_eq!(root_operation_id("get_data"), "get_root_data");
        assert_eq!(root_operation_id("delete_node"), "delete_root_node");
        assert_eq!(root_operation_id("consolidate"), "consolidate_root");
    }

    #[test]
    fn every_node_route_has_its_root_twin_with_the_same_responses() {
        let (_, doc) = crate::http::routes().split_for_parts();
        let names = |o: &Operation| -> Vec<String> {
            let params = o.parameters.iter().flatten();
            params.filter_map(|p| if let RefOr::T(p) = p { Some(p.name.clone()) } else { None }).collect()
        };
        let mut twins = 0;
        for (template, item) in &doc.paths.paths {
            let Some(root_item) = template.strip_suffix(PATH_SEGMENT).and_then(|root| doc.paths.paths.get(root)) else {
                continue;
            };
            for (op, root_op) in [
                (&item.get, &root_item.get),
                (&item.put, &root_item.put),
                (&item.post, &root_item.post),
                (&item.delete, &root_item.delete),
                (&item.patch, &root_item.patch),
            ] {
                assert_eq!(op.is_some(), root_op.is_some(), "{template}");
                let (Some(op), Some(root_op)) = (op, root_op) else { continue };
                twins += 1;
                let json = |o: &Operation| serde_json::to_value(&o.responses).unwrap();
                assert_eq!(json(op), json(root_op), "{template}");
                let mut expected = names(op);
                assert!(expected.iter().any(|n| n == "path"), "{template}");
                expected.retain(|n| n != "path");
                assert_eq!(names(root_op), expected, "{template}");
            }
        }
        // nodes (GET, PUT, DELETE), data (GET, POST, PUT), chunks, consolidate, preview, browse,
        // attributes (GET, PUT, PATCH), resize.
        assert_eq!(twins, 14);
    }
}
