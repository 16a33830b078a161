//! `/healthz` (the process is alive) and `/readyz` (every mount answers).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorCode};
use crate::service::App;

/// A health answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable`.
    #[schema(example = "ok")]
    pub status: &'static str,
    /// Mounts that did not answer, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failing_mounts: Vec<FailingMount>,
}

/// A mount that did not answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct FailingMount {
    pub mount: String,
    pub reason: String,
}

/// Liveness: answers 200 while the process serves requests.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok", failing_mounts: Vec::new() })
}

/// Readiness: 200 when every mount answers, 503 naming those that do not.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "Every mount answers", body = Health),
    (status = 503, description = "Some mount does not answer", body = Health),
))]
pub async fn readyz(State(app): State<Arc<App>>) -> (StatusCode, Json<Health>) {
    let failing: Vec<FailingMount> =
        app.probe_mounts().await.into_iter().map(|(mount, reason)| FailingMount { mount, reason }).collect();
    if failing.is_empty() {
        (StatusCode::OK, Json(Health { status: "ok", failing_mounts: failing }))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "unavailable", failing_mounts: failing }))
    }
}

/// Any other path: the JSON 404.
pub async fn not_found(uri: Uri) -> ApiError {
    ErrorCode::NoRoute.error(format!("no route for {}", uri.path()))
}
