//! `POST /v1/haproxy/start|reload|stop`: the master, through the services `hapctl haproxy`
//! calls. Under `hapctl serve` the supervision loop respects both: a stop leaves the stop
//! marker (so the loop does not start it again), a start runs under the apply lock and
//! `Supervisor::start` refuses a second master (so it never doubles the loop's restart).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::ApiState;
use crate::edge::StopReport;

/// Applies the committed state, then starts the master (409 when one runs).
pub async fn post_start(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let (report, started) = app
        .with_new_edge(|edge| edge.apply_and_start("api haproxy start"))
        .await?;
    app.services().metrics().apply(&report);
    let Some(started) = started else {
        return Err(ApiError::from_apply(report));
    };
    Ok(Json(json!({"master_pid": started.master_pid, "apply": report})).into_response())
}

/// Reloads through the master, confirmed by its new worker (409 when none runs).
pub async fn post_reload(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let reloaded = app
        .with_new_edge(|edge| edge.reload_haproxy("POST /v1/haproxy/reload"))
        .await?;
    app.services().metrics().reload_requested();
    let r = &reloaded.report;
    Ok(Json(json!({
        "master_pid": r.master_pid,
        "new_workers": r.new_workers,
        "old_workers": r.old_workers,
        "duration_ms": r.duration.as_secs_f64() * 1000.0,
        "reason": reloaded.reason,
    }))
    .into_response())
}

/// Stops the master and its workers; it stays down (also under `hapctl serve`) until a start.
pub async fn post_stop(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let stopped = app.with_new_edge(|edge| edge.stop_haproxy()).await?;
    let (outcome, pid) = match stopped {
        StopReport::Stopped { pid } => ("stopped", Some(pid)),
        StopReport::Killed { pid } => ("killed", Some(pid)),
        StopReport::NotRunning => ("not-running", None),
    };
    Ok(Json(json!({"outcome": outcome, "master_pid": pid})).into_response())
}
