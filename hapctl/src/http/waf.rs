//! `/v1/waf…`: the WAF agent's health and counters, its rules reload, the rule list and a
//! request evaluated without sending it, through the same code as `hapctl waf status`,
//! `reload`, `rules` and `test` (`waf::status`, `waf::trial`). The rule list and the trial
//! run `hapctl waf rules|test --json` as a child: loading the CRS takes libmodsecurity ~40 MiB
//! that the daemon would keep, and a crash of the C library stays in the child.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::error::{ApiError, Body};
use super::ApiState;
use crate::contract::WafTestRequest;
use crate::model::WafPolicy;
use crate::waf::status::{self, RulesReloadError};
use crate::waf::trial::Trial;

/// One rule load at a time in children of the daemon; each is bounded.
static OFFLINE: Semaphore = Semaphore::const_new(1);
const OFFLINE_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn get_waf(State(app): State<ApiState>) -> Json<Value> {
    Json(serde_json::to_value(status::status(&app.settings())).unwrap_or_default())
}

fn not_configured(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "waf_not_configured",
        format!("no WAF {what}: [waf] is not set in hapctl.toml; set its listen and crs (docs/waf.md) and restart hapctl serve"),
    )
}

pub async fn post_reload(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let settings = app.settings();
    if settings.waf.is_none() {
        return Err(not_configured("agent to reload"));
    }
    let run_dir = settings.paths.run_dir;
    let reloaded = tokio::task::spawn_blocking(move || status::reload(&run_dir))
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
    offline(&app, vec!["rules".into(), "--json".into()])
        .await
        .map(Json)
}

pub async fn post_test(
    State(app): State<ApiState>,
    Body(req): Body<WafTestRequest>,
) -> Result<Json<Value>, ApiError> {
    let headers: Vec<(String, String)> =
        req.headers.into_iter().map(|h| (h.name, h.value)).collect();
    let trial = Trial::parse(&req.url, &req.method, &headers, req.body.as_deref())?;
    let given = req
        .policy
        .map(WafPolicy::checked)
        .transpose()
        .map_err(|e| e.in_field("policy"))?;
    // Bad input is named first, even without an agent to test against.
    if app.settings().waf.is_none() {
        return Err(not_configured("rules to test against"));
    }
    let stored = app.read(|edge| Ok(edge.state()?.waf)).await?;
    let (policy, from) = trial.policy(given, req.domain.as_ref(), &stored);
    let mut args = vec!["test".to_string(), "--json".into()];
    args.extend(trial.to_args(&policy));
    let mut outcome = offline(&app, args).await?;
    outcome["policy_from"] = json!(from);
    Ok(Json(outcome))
}

/// `hapctl waf ARGS` for this state directory; its JSON answer, or its error as a 422 (a rule
/// set libmodsecurity refuses) or a 500.
async fn offline(app: &ApiState, args: Vec<String>) -> Result<Value, ApiError> {
    let _one = OFFLINE
        .acquire()
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let dir = app.state_dir().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.arg("--state-dir").arg(dir).arg("waf").args(args);
        crate::process::run_with_timeout(&mut cmd, OFFLINE_TIMEOUT).map_err(std::io::Error::other)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("hapctl waf: {e}")))?;
    if out.status.success() {
        return serde_json::from_slice(&out.stdout)
            .map_err(|e| ApiError::internal(format!("hapctl waf answered no JSON: {e}")));
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(match out.status.code() {
        Some(2) => ApiError::new(StatusCode::BAD_REQUEST, "invalid", err),
        _ if err.contains("refused") => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "waf_rules_refused", err)
        }
        _ => ApiError::internal(err),
    })
}
