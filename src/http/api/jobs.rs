//! Jobs: `GET /api/v1/jobs/{mount}/{id}` (state, chunks done and in all,
//! bytes written, elapsed time, an estimate of what remains) and `DELETE`
//! (cancel). A job lives in its mount's namespace so the access rules of
//! the mount guard it (reading its progress needs `read`, cancelling it
//! `admin`, as starting it does).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;

use crate::http::error::{ApiResult, ErrorBody, ErrorCode};
use crate::service::jobs::{Job, JobStatus};
use crate::service::App;

fn find(app: &App, mount: &str, id: &str) -> ApiResult<Arc<Job>> {
    app.jobs()
        .get(id)
        .filter(|j| j.mount == mount)
        .ok_or_else(|| ErrorCode::NotFound.error(format!("no job `{id}` in mount `{mount}` since the server started")))
}

/// A job's progress.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{mount}/{id}",
    tag = "jobs",
    params(("mount" = String, Path, description = "Mount name"), ("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job's status", body = JobStatus),
        (status = 404, description = "No such job in this mount (jobs are kept until the server stops; the same request resumes one after a restart)", body = ErrorBody),
    )
)]
pub async fn get_job(
    State(app): State<Arc<App>>,
    Path((mount, id)): Path<(String, String)>,
) -> ApiResult<Json<JobStatus>> {
    Ok(Json(find(&app, &mount, &id)?.status()))
}

/// Cancel a job: it stops between chunks; what it wrote stays (the same
/// request resumes it).
#[utoipa::path(
    delete,
    path = "/api/v1/jobs/{mount}/{id}",
    tag = "jobs",
    params(("mount" = String, Path, description = "Mount name"), ("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job's status (`cancelled`, or how it ended if it had ended)", body = JobStatus),
        (status = 404, description = "No such job in this mount", body = ErrorBody),
    )
)]
pub async fn cancel_job(
    State(app): State<Arc<App>>,
    Path((mount, id)): Path<(String, String)>,
) -> ApiResult<Json<JobStatus>> {
    let job = find(&app, &mount, &id)?;
    if job.cancel() {
        tracing::info!(target: "zarrd::jobs", job = %job.id, "job cancelled");
    }
    Ok(Json(job.status()))
}
