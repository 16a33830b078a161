//! Pyramid builds: `POST /api/v1/pyramids/{mount}/{*path}` starts (or
//! finds) the job turning an array into an OME-Zarr multiscale group (see
//! [`crate::service::pyramid`]); its progress is at `/api/v1/jobs/{mount}/{id}`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::http::error::{ApiResult, ErrorBody};
use crate::http::extract::{JsonBody, NodeTarget};
use crate::service::jobs::JobStatus;
use crate::service::pyramid::{self, PyramidRequest};
use crate::service::App;

/// Build an OME-Zarr pyramid of an array, as a job: answers at once (202)
/// with the job's status and its URL in `Location`. The same request again
/// finds the running job, or after a restart resumes the build where the
/// store says it stopped.
#[utoipa::path(
    post,
    path = "/api/v1/pyramids/{mount}/{*path}",
    tag = "jobs",
    params(NodeTarget),
    request_body(content = PyramidRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "The job, started or found (its URL in Location)", body = JobStatus),
        (status = 400, description = "A member that does not fit the array (factors, levels, coarsest, chunks, codecs, compressor, filters, method, destination: named); an array of fewer than 2 or more than 5 dimensions", body = ErrorBody),
        (status = 404, description = "No such mount or array", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape; stored metadata that is invalid or unsupported", body = ErrorBody),
        (status = 503, description = "Storage unavailable; as many jobs running as zarrd runs at once (4: `overloaded`, with Retry-After)", body = ErrorBody),
    )
)]
pub async fn build_pyramid(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    JsonBody(req): JsonBody<PyramidRequest>,
) -> ApiResult<Response> {
    let status = pyramid::start(&app, &app.node(&target.mount, &target.path)?, req).await?;
    let location = format!("/api/v1/jobs/{}/{}", status.mount, status.id);
    let mut response = (StatusCode::ACCEPTED, Json(status)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    Ok(response)
}
