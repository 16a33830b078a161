//! Slice writes: `PUT /api/v1/data/{mount}/{*path}?sel=...`.
//!
//! The body's format comes from `format=` (`raw`, `npy`, `json`), else from
//! `Content-Type` (`application/octet-stream`, `application/x-npy`,
//! `application/json`). Its size is bounded by `limits.max_put_bytes`
//! (413 beyond).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use serde::Deserialize;
use utoipa::IntoParams;

use super::NodeTarget;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::openapi::Binary;
use crate::http::store::read_body;
use crate::service::wire::WireFormat;
use crate::service::write::{self, WriteRequest};
use crate::service::App;
use crate::zarr::selection::{SelectionMode, SelectionSpec};

/// The query of a slice write.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WriteQuery {
    /// The selection: comma-separated dimensions, each `i`, `a:b:c`, `...`
    /// or `[i,j,k]`; `name=spec` items for named dimensions. Absent: the
    /// whole array.
    #[param(example = "0:10,::2")]
    pub sel: Option<String>,
    /// `basic` (default; a list makes it orthogonal), `orthogonal` or
    /// `coordinate` (one list per dimension, zipped into points).
    #[param(example = "orthogonal")]
    pub mode: Option<String>,
    /// Body format: `raw` (little-endian, C order), `npy` or `json`.
    /// Absent: from `Content-Type`.
    #[param(example = "npy")]
    pub format: Option<String>,
    /// Store chunks that end up equal to the fill value instead of
    /// deleting them (default: the array's `write_empty_chunks` attribute,
    /// else false).
    pub write_empty_chunks: Option<bool>,
}

fn parse_mode(mode: Option<&str>) -> ApiResult<SelectionMode> {
    match mode.map(str::trim) {
        None | Some("" | "basic") => Ok(SelectionMode::Basic),
        Some("orthogonal") => Ok(SelectionMode::Orthogonal),
        Some("coordinate") => Ok(SelectionMode::Coordinate),
        Some(other) => Err(ApiError::bad_request(
            "invalid_mode",
            format!("mode `{other}`: expected basic, orthogonal or coordinate"),
        )),
    }
}

fn body_format(query: &WriteQuery, headers: &HeaderMap) -> ApiResult<WireFormat> {
    if let Some(name) = &query.format {
        return WireFormat::from_name(name).ok_or_else(|| {
            ApiError::bad_request("invalid_format", format!("format `{name}`: expected raw, npy or json"))
        });
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    match content_type {
        Some(ct) => WireFormat::from_content_type(ct).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "Content-Type `{ct}`: expected application/octet-stream (raw), application/x-npy or \
                     application/json, or a format= parameter"
                ),
            )
        }),
        None => Err(ApiError::bad_request(
            "missing_format",
            "say how the body is encoded: a format= parameter (raw, npy, json) or a Content-Type",
        )),
    }
}

async fn put(
    app: &App,
    target: NodeTarget,
    query: Result<Query<WriteQuery>, QueryRejection>,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", format!("invalid query: {e}")))?;
    let mode = parse_mode(query.mode.as_deref())?;
    // 413 for too many listed indices, else 400 `invalid_selection`.
    let selection = SelectionSpec::parse(query.sel.as_deref().unwrap_or(""), mode)
        .map_err(|e| ApiError::from(crate::service::ServiceError::from(e)))?;
    let format = body_format(&query, headers)?;
    // Refuse before reading the body.
    app.mount_ref(&target.mount)?.writable()?;
    let body = read_body(headers, body, app.config().limits.max_put_bytes, "limits.max_put_bytes").await?;
    let request = WriteRequest { selection, format, body, write_empty_chunks: query.write_empty_chunks };
    write::write(app, &target.mount, &target.path, request).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Write a selection of an array.
#[utoipa::path(
    put,
    path = "/api/v1/data/{mount}/{*path}",
    tag = "data",
    params(
        ("mount" = String, Path, description = "Mount name", example = "data"),
        ("path" = String, Path, description = "The array's path in the mount", example = "climate/temperature"),
        WriteQuery,
    ),
    request_body(
        description = "The selection's elements (its result shape, C order) or one element to broadcast: raw little-endian bytes, an .npy file, or nested JSON lists. The format is `format=`, else the `Content-Type`",
        content(
            (inline(Binary) = "application/octet-stream"),
            (inline(Binary) = "application/x-npy"),
            (serde_json::Value = "application/json"),
        )
    ),
    responses(
        (status = 204, description = "Written"),
        (status = 400, description = "Bad selection, or a body whose shape, data type or length does not match it (the message says what was expected)", body = ErrorBody),
        (status = 404, description = "No such mount or array", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 413, description = "Body larger than `limits.max_put_bytes`", body = ErrorBody),
        (status = 415, description = "Unknown Content-Type", body = ErrorBody),
        (status = 422, description = "The array's metadata is invalid or unsupported", body = ErrorBody),
        (status = 502, description = "A stored chunk the write must update does not decode: the store answered corrupt bytes (naming the key)", body = ErrorBody),
        (status = 503, description = "Storage unavailable, or other writers kept changing a chunk (retry)", body = ErrorBody),
    )
)]
pub async fn put_data(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    query: Result<Query<WriteQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    put(&app, target, query, &headers, body).await
}

/// Write a selection of the array at the mount's root.
#[utoipa::path(
    put,
    path = "/api/v1/data/{mount}",
    tag = "data",
    params(
        ("mount" = String, Path, description = "Mount name", example = "data"),
        WriteQuery,
    ),
    request_body(
        description = "As for `PUT /api/v1/data/{mount}/{path}`",
        content(
            (inline(Binary) = "application/octet-stream"),
            (inline(Binary) = "application/x-npy"),
            (serde_json::Value = "application/json"),
        )
    ),
    responses(
        (status = 204, description = "Written"),
        (status = 400, description = "Bad selection or body", body = ErrorBody),
        (status = 404, description = "No such mount or array", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 413, description = "Body larger than `limits.max_put_bytes`", body = ErrorBody),
        (status = 415, description = "Unknown Content-Type", body = ErrorBody),
        (status = 422, description = "The array's metadata is invalid or unsupported", body = ErrorBody),
        (status = 502, description = "A stored chunk the write must update does not decode: the store answered corrupt bytes (naming the key)", body = ErrorBody),
        (status = 503, description = "Storage unavailable, or other writers kept changing a chunk (retry)", body = ErrorBody),
    )
)]
pub async fn put_root_data(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    query: Result<Query<WriteQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    put(&app, target, query, &headers, body).await
}
