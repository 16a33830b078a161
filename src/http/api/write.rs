//! Slice writes: `PUT /api/v1/data/{mount}/{*path}?sel=...`.
//!
//! The body's format comes from `format=` (`raw`, `npy`, `json`), else from
//! `Content-Type` (`application/octet-stream`, `application/x-npy`,
//! `application/json`). Its size is bounded by `limits.max_put_bytes`
//! (413 beyond).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::http::error::{ApiResult, ErrorBody};
use crate::http::extract::{read_upload, ApiQuery, NodeTarget, UploadBudget};
use crate::http::openapi::Binary;
use crate::http::params;
use crate::service::array::write::{self, WriteRequest};
use crate::service::App;

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

/// Write a selection of an array.
#[utoipa::path(
    put,
    path = "/api/v1/data/{mount}/{*path}",
    tag = "data",
    params(NodeTarget, WriteQuery),
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
    ApiQuery(query): ApiQuery<WriteQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<StatusCode> {
    let selection = params::selection(query.sel.as_deref(), query.mode.as_deref())?;
    let format = params::body_format(query.format.as_deref(), &headers)?;
    // Refuse before reading the body.
    let at = app.node(&target.mount, &target.path)?;
    at.writable()?;
    let (body, _share) =
        read_upload(&headers, body, app.config().limits.max_put_bytes, "limits.max_put_bytes", &UploadBudget::of(&app))
            .await?;
    let request = WriteRequest { selection, format, body, write_empty_chunks: query.write_empty_chunks };
    write::write(&at, request).await?;
    Ok(StatusCode::NO_CONTENT)
}
