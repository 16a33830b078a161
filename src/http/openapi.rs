//! The OpenAPI document, generated from the same route registrations the
//! server serves.
//!
//! Every documented route is registered through utoipa-axum's
//! [`OpenApiRouter`](utoipa_axum::router::OpenApiRouter) in
//! [`routes`](super::routes()), so the document and the router are built
//! from one list and cannot diverge. `zarrd openapi` prints the
//! document; `openapi/openapi.json` is that output, committed, and
//! `tests/openapi.rs` fails when the two drift.
//!
//! axum spells a catch-all path segment `{*key}`; OpenAPI has no such
//! syntax, so [`document`] renames it to the plain parameter `{key}` (a
//! generated client percent-encodes `/` inside it, which axum decodes).

use std::sync::{Arc, OnceLock};

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi as OpenApiDoc, Ref, RefOr};
use utoipa::{Modify, OpenApi, ToSchema};

use super::auth::{self, Need};
use crate::config::Scope;

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
    modifiers(&BearerScheme),
    tags(
        (name = "store", description = "The Zarr store protocol: keys over HTTP, for zarr-python, TensorStore, zarrita.js and neuroglancer"),
        (name = "nodes", description = "Mounts, arrays and groups: describe, create, resize, attributes, delete"),
        (name = "data", description = "Slices of arrays (read and written) and decoded chunks, as raw bytes, .npy or JSON, encoded and decoded on the server"),
        (name = "jobs", description = "Background jobs: OME-Zarr pyramids built on the server, their progress, cancelling them"),
        (name = "operations", description = "Health and the API description"),
        (name = "browser", description = "HTML pages for people: mounts, groups, arrays and directories, with previews and snippets"),
    )
)]
pub struct ApiDoc;

// `Vec<u8>` would be documented as an array of integers (what a JSON body
// of numbers looks like), so binary bodies are documented with this type.
/// Bytes as they are (raw elements, an `.npy` file, a stored object).
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct Binary(pub Vec<u8>);

/// The `bearer` security scheme.
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut OpenApiDoc) {
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(
            "A token from the `[auth]` configuration, with scopes per mount: `read`, `write` (implies read), \
             `admin` (create, delete, resize, attributes; implies write). Reads may be anonymous on mounts with \
             `anonymous_read`, and with no tokens configured (every mount readable; from loopback peers of a \
             loopback-bound server, everything is allowed).",
        ));
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme.build()));
    }
}

/// Security requirements and 401/403 answers from [`auth::RULES`], so the
/// document says what the guard enforces: reads may be anonymous, the rest
/// need a token with the scope (listed as the role, as OpenAPI 3.1 allows).
fn secure(path: &str, method: &str, op: &mut Operation) {
    let rule = auth::rule(path);
    let parsed: axum::http::Method = method.parse().expect("static method name");
    if rule.and_then(|r| r.params(&parsed)).is_some() {
        // The guard refuses unknown query parameters on these routes.
        let unknown = "a query parameter the operation does not take (`unknown_parameter`, naming it)";
        let responses = &mut op.responses.responses;
        match responses.get_mut("400") {
            Some(RefOr::T(r)) => r.description = format!("{}; or {unknown}", r.description.trim_end_matches('.')),
            Some(RefOr::Ref(_)) => {}
            None => {
                let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
                let mut first = unknown.to_string();
                first[..1].make_ascii_uppercase();
                let r = ResponseBuilder::new().description(first).content("application/json", content).build();
                responses.insert("400".into(), RefOr::T(r));
            }
        }
    }
    let need = rule.and_then(|r| r.need(&parsed));
    let scope = match need {
        None | Some(Need::Public) => return,
        Some(Need::Caller | Need::Observer) => None,
        Some(Need::Mount(scope)) => Some(scope),
    };
    let bearer = SecurityRequirement::new("bearer", scope.map(Scope::as_str));
    op.security = Some(match scope {
        Some(Scope::Write | Scope::Admin) => vec![bearer],
        Some(Scope::Read) | None => vec![bearer, SecurityRequirement::default()],
    });
    let error = |description: &str| {
        let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
        RefOr::T(ResponseBuilder::new().description(description).content("application/json", content).build())
    };
    let responses = &mut op.responses.responses;
    responses.insert("401".into(), error("No token where one is needed, or a token that is not valid"));
    match scope {
        Some(Scope::Write | Scope::Admin) => {
            responses.insert(
                "403".into(),
                error(
                    "The token lacks the scope on this mount; or, without a token, a cross-site request: an \
                     `Origin` that is neither the server's own nor listed in `cors.allowed_origins` \
                     (`cross_site_refused`)",
                ),
            );
            if matches!(method, "PUT" | "POST" | "PATCH") {
                responses.entry("415".into()).or_insert_with(|| {
                    error("A body whose `Content-Type` the operation does not take (never a form or `text/plain`)")
                });
            }
        }
        Some(Scope::Read) => {
            responses.insert("403".into(), error("The token lacks the scope on this mount"));
        }
        None => {}
    }
    if matches!(method, "PUT" | "POST" | "PATCH") {
        responses.insert(
            "408".into(),
            error("The body stopped arriving for `limits.body_read_timeout_seconds`, or arrived slower than `limits.min_body_bytes_per_second`"),
        );
    }
    if need != Some(Need::Observer) {
        // Observers (`/metrics`) are not counted against the request limit.
        responses.insert("503".into(), error("Overloaded (`Retry-After`), or storage unavailable"));
    }
    responses.insert("504".into(), error("The request took longer than `limits.request_timeout_seconds`"));
}

/// The operations of a path item, with their methods.
pub fn operations_mut(item: &mut PathItem) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    let ops = [
        ("GET", &mut item.get),
        ("PUT", &mut item.put),
        ("POST", &mut item.post),
        ("DELETE", &mut item.delete),
        ("PATCH", &mut item.patch),
        ("HEAD", &mut item.head),
        ("OPTIONS", &mut item.options),
    ];
    ops.into_iter().filter_map(|(method, op)| op.as_mut().map(|op| (method, op)))
}

/// The whole document: [`ApiDoc`] plus every registered route, with
/// security from the access rules, catch-all segments renamed and the crate
/// version filled in.
#[must_use]
pub fn document() -> OpenApiDoc {
    let (_, mut doc) = super::routes().split_for_parts();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    for (path, item) in &mut doc.paths.paths {
        for (method, op) in operations_mut(item) {
            secure(path, method, op);
        }
    }
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
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "operations", responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub async fn serve() -> Response {
    let body = DOCUMENT.get_or_init(|| document_json().into()).clone();
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body.to_string()).into_response()
}
