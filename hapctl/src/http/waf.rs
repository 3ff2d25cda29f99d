//! `/v1/waf…`: the WAF agent's health and counters, its rules reload, the rule list and a
//! request evaluated without sending it (`daemon/waf.rs`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use serde_json::{json, Value};

use super::error::{ApiError, Body};
use super::ApiState;
use crate::contract::WafTestRequest;
use crate::daemon::WafRunError;
use crate::waf::status::RulesReloadError;

pub async fn get_waf(State(app): State<ApiState>) -> Json<Value> {
    Json(serde_json::to_value(app.services().waf_status()).unwrap_or_default())
}

fn not_configured(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "waf_not_configured",
        format!("no WAF {what}: [waf] is not set in hapctl.toml; set its listen and crs (docs/waf.md) and restart hapctl serve"),
    )
}

pub async fn post_reload(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    if app.settings().waf.is_none() {
        return Err(not_configured("agent to reload"));
    }
    let services = app.services().clone();
    let reloaded = tokio::task::spawn_blocking(move || services.reload_waf())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| {
            let (status, code) = match &e {
                RulesReloadError::NotRunning(_) => {
                    (StatusCode::SERVICE_UNAVAILABLE, "waf_agent_down")
                }
                RulesReloadError::Refused(_) => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "waf_rules_refused")
                }
                RulesReloadError::NoOutcome(_) => {
                    (StatusCode::GATEWAY_TIMEOUT, "waf_reload_timeout")
                }
                RulesReloadError::Signal { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            };
            ApiError::new(status, code, e.to_string())
        })?;
    let mut answer = serde_json::to_value(reloaded).unwrap_or_default();
    answer["outcome"] = json!("reloaded");
    Ok(Json(answer))
}

pub async fn get_rules(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    if app.settings().waf.is_none() {
        return Err(not_configured("rules"));
    }
    Ok(Json(app.services().waf_rules().await?))
}

pub async fn post_test(
    State(app): State<ApiState>,
    Body(req): Body<WafTestRequest>,
) -> Result<Json<Value>, ApiError> {
    let test = req.parse()?;
    // Bad input is named first, even without an agent to test against.
    if app.settings().waf.is_none() {
        return Err(not_configured("rules to test against"));
    }
    Ok(Json(app.services().waf_test(test).await?))
}

/// A rule set libmodsecurity refuses is a 422; arguments the child refused a 400.
impl From<WafRunError> for ApiError {
    fn from(e: WafRunError) -> ApiError {
        match e {
            WafRunError::Invalid(err) => ApiError::new(StatusCode::BAD_REQUEST, "invalid", err),
            WafRunError::Refused(err) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "waf_rules_refused", err)
            }
            WafRunError::Failed(err) => ApiError::internal(err),
            WafRunError::Job(e) => e.into(),
        }
    }
}
