//! The OpenAPI document, generated from the handlers' annotations.
//!
//! `zarrd openapi` prints it; `openapi/openapi.json` is that output,
//! committed, and `tests/openapi.rs` fails when the two drift.

use axum::Json;
use utoipa::OpenApi;

use super::dav::{JsonEntry, JsonListing};
use super::error::{ErrorBody, ErrorDetail};
use super::health::{FailingMount, Health};

/// The document's root.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "zarrd",
        description = "An HTTP server for Zarr v2 and v3 arrays: the Zarr store protocol, server-side slices, and operations.",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        super::store::get_key,
        super::store::put_key,
        super::store::delete_key,
        super::health::healthz,
        super::health::readyz,
        serve,
    ),
    components(schemas(ErrorBody, ErrorDetail, Health, FailingMount, JsonListing, JsonEntry)),
    tags(
        (name = "store", description = "The Zarr store protocol: keys over HTTP, for zarr-python, TensorStore, zarrita.js and neuroglancer"),
        (name = "operations", description = "Health and the API description"),
    )
)]
pub struct ApiDoc;

/// The document as pretty JSON, with a trailing newline.
#[must_use]
pub fn document_json() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    let mut s = doc.to_pretty_json().expect("the OpenAPI document serialises");
    s.push('\n');
    s
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub async fn serve() -> Json<serde_json::Value> {
    Json(serde_json::from_str(&document_json()).unwrap_or_default())
}
