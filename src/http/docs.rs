//! `/docs`: a browsable page for the OpenAPI document (Swagger UI).
//!
//! Swagger UI's files are compiled into the binary (utoipa-swagger-ui's
//! `vendored` feature), so the page works with no internet access at build
//! or run time; it loads the document from `/openapi.json`.

use std::sync::{Arc, OnceLock};

use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use utoipa_swagger_ui::Config;

use super::error::{ErrorBody, ErrorCode};
use super::openapi::Binary;

fn config() -> Arc<Config<'static>> {
    static CONFIG: OnceLock<Arc<Config<'static>>> = OnceLock::new();
    Arc::clone(CONFIG.get_or_init(|| Arc::new(Config::new(["/openapi.json"]))))
}

fn file(path: &str) -> Response {
    match utoipa_swagger_ui::serve(path, config()) {
        Ok(Some(f)) => {
            let content_type = HeaderValue::from_str(&f.content_type)
                .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
            (
                [(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))],
                f.bytes.into_owned(),
            )
                .into_response()
        }
        Ok(None) => ErrorCode::NoRoute.error(format!("no documentation file {path}")).into_response(),
        Err(e) => {
            tracing::error!(error = %e, path, "cannot render a Swagger UI file");
            ErrorCode::Internal.error("cannot render the documentation page").into_response()
        }
    }
}

/// The documentation page's address without its slash: redirects to
/// `/docs/` (the page's assets are relative to it).
#[utoipa::path(get, path = "/docs", tag = "operations", responses(
    (status = 308, description = "Redirect to `/docs/`", headers(("location" = String, description = "`/docs/`"))),
))]
pub async fn docs_redirect() -> Redirect {
    Redirect::permanent("/docs/")
}

/// The documentation page (Swagger UI over `/openapi.json`).
#[utoipa::path(get, path = "/docs/", tag = "operations", responses(
    (status = 200, description = "The page", content_type = "text/html"),
))]
pub async fn docs_index() -> Response {
    file("index.html")
}

/// A file of the documentation page (scripts, styles, icons).
#[utoipa::path(get, path = "/docs/{*rest}", tag = "operations",
    params(("rest" = String, Path, description = "The file", example = "swagger-ui.css")),
    responses(
        (status = 200, description = "The file", content(
            (String = "text/html"), (String = "text/css"), (String = "text/javascript"), (inline(Binary) = "image/png"),
        )),
        (status = 404, description = "No such file", body = ErrorBody),
    ),
)]
pub async fn docs_file(Path(rest): Path<String>) -> Response {
    file(&rest)
}
