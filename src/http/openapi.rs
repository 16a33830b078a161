//! The OpenAPI document, generated from the same route registrations the
//! server serves.
//!
//! Every documented route is registered through utoipa-axum's
//! [`OpenApiRouter`] in [`super::routes`], so the document and the router are
//! built from one list and cannot diverge. `zarrd openapi` prints the
//! document; `openapi/openapi.json` is that output, committed, and
//! `tests/openapi.rs` fails when the two drift.
//!
//! axum spells a catch-all path segment `{*key}`; OpenAPI has no such
//! syntax, so [`document`] renames it to the plain parameter `{key}` (a
//! generated client percent-encodes `/` inside it, which axum decodes).

use std::sync::{Arc, OnceLock};

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::OpenApi as OpenApiDoc;
use utoipa::OpenApi;

use super::dav::{JsonEntry, JsonListing};
use super::error::{ErrorBody, ErrorDetail};
use super::health::{FailingMount, Health};

/// The document's root: information, tags and shared schemas. Paths come
/// from the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "zarrd",
        description = "An HTTP server for Zarr v2 and v3 arrays: the Zarr store protocol, server-side slices, and operations.",
        license(name = "MIT OR Apache-2.0")
    ),
    components(schemas(ErrorBody, ErrorDetail, Health, FailingMount, JsonListing, JsonEntry)),
    tags(
        (name = "store", description = "The Zarr store protocol: keys over HTTP, for zarr-python, TensorStore, zarrita.js and neuroglancer"),
        (name = "nodes", description = "Mounts, arrays and groups: describe, create, resize, attributes, delete"),
        (name = "data", description = "Slices of arrays (read and written) and decoded chunks, as raw bytes, .npy or JSON, encoded and decoded on the server"),
        (name = "operations", description = "Health and the API description"),
    )
)]
pub struct ApiDoc;

/// The whole document: [`ApiDoc`] plus every registered route, with
/// catch-all segments renamed and the crate version filled in.
#[must_use]
pub fn document() -> OpenApiDoc {
    let (_, mut doc) = super::routes().split_for_parts();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    let paths = std::mem::take(&mut doc.paths.paths);
    doc.paths.paths = paths.into_iter().map(|(path, item)| (path.replace("{*", "{"), item)).collect();
    doc
}

/// The document as pretty JSON, with a trailing newline.
#[must_use]
pub fn document_json() -> String {
    let mut s = document().to_pretty_json().expect("the OpenAPI document serialises");
    s.push('\n');
    s
}

static DOCUMENT: OnceLock<Arc<str>> = OnceLock::new();

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub async fn serve() -> Response {
    let body = DOCUMENT.get_or_init(|| document_json().into()).clone();
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body.to_string()).into_response()
}
