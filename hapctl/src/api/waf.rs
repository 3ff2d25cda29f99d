//! `GET /v1/waf` and `POST /v1/waf/reload`: the WAF agent's health and counters, and its rules
//! reload, through the same code as `hapctl waf status` and `hapctl waf reload`
//! (`waf::status`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;
use crate::waf::status::{self, ReloadError};

pub async fn get_waf(State(app): State<AppState>) -> Json<Value> {
    Json(serde_json::to_value(status::status(&app.settings())).unwrap_or_default())
}

pub async fn post_reload(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let settings = app.settings();
    if settings.waf.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "waf_not_configured",
            "no WAF agent to reload: [waf] is not set in hapctl.toml; set its listen and crs (docs/waf.md) and restart hapctl serve",
        ));
    }
    let run_dir = settings.paths.run_dir;
    let reloaded = tokio::task::spawn_blocking(move || status::reload(&run_dir))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| {
            let (status, code) = match &e {
                ReloadError::NotRunning(_) => (StatusCode::SERVICE_UNAVAILABLE, "waf_agent_down"),
                ReloadError::Refused(_) => (StatusCode::UNPROCESSABLE_ENTITY, "waf_rules_refused"),
                ReloadError::NoOutcome(_) => (StatusCode::GATEWAY_TIMEOUT, "waf_reload_timeout"),
                ReloadError::Signal { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            };
            ApiError::new(status, code, e.to_string())
        })?;
    let mut answer = serde_json::to_value(reloaded).unwrap_or_default();
    answer["outcome"] = json!("reloaded");
    Ok(Json(answer))
}
