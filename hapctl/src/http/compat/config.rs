//! `GET /health`, `GET /api/regenerate`, `GET /api/reload`, `POST /api/config/reload`, and the
//! two pages, `/` and `/default-page` (`PEER-API.md` §1.2).
//!
//! The old regenerate and config reload always re-rendered and reloaded. Here they run the
//! safe apply (check, reload, confirm, rollback); when the apply finds nothing to change they
//! still reload through the master, confirmed, since that is what the caller asked for.
//! `/api/reload` is the old raw reload: the master re-reads the live files, which are the
//! known-good set, or HAProxy is started when it is not running.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::super::error::ApiError;
use super::super::ApiState;
use super::{as_500, e1, e2, Answer};
use crate::apply::ApplyOutcome;

/// `{"status":"healthy","haproxy_status":"running"|"stopped","database":"connected"}`, 200
/// even when HAProxy is down (as before; `/v1/health` is the strict check); 500
/// `{"status":"unhealthy","error"}` when the database cannot be read.
pub async fn health(State(app): State<ApiState>) -> Response {
    let verdict = app
        .read(|edge| {
            edge.block_count()?;
            edge.with_state(|_| ())?;
            Ok(edge.haproxy_serving())
        })
        .await;
    match verdict {
        Ok(running) => Json(json!({
            "status": "healthy",
            "haproxy_status": if running { "running" } else { "stopped" },
            "database": "connected",
        }))
        .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"status": "unhealthy", "error": e.message})),
        )
            .into_response(),
    }
}

/// A reload through the master, confirmed by a new worker: the path of every requested
/// reload (`POST /v1/haproxy/reload`), under the apply lock and recorded in the apply history.
/// `who` is the route that asked.
async fn master_reload(app: &ApiState, who: &'static str) -> Result<(), ApiError> {
    app.services()
        .with_new_edge(move |edge| edge.reload_haproxy(who))
        .await
        .map_err(|e| ApiError::internal(format!("HAProxy reload failed: {e}")))?;
    app.services().metrics().reload_requested();
    Ok(())
}

/// The safe apply of the committed state, then a reload if it changed nothing.
async fn apply_and_reload(app: &ApiState, who: &'static str) -> Result<(), ApiError> {
    let (report, _) = app.domain_job(None).await.map_err(as_500)?;
    match report.outcome {
        ApplyOutcome::Unchanged => master_reload(app, who).await,
        _ if report.outcome.is_success() => Ok(()),
        _ => Err(as_500(ApiError::from_apply(report))),
    }
}

pub async fn regenerate(State(app): State<ApiState>) -> Response {
    e2(async {
        apply_and_reload(&app, "GET /api/regenerate").await?;
        Ok(Json(json!({"status": "success"})).into_response())
    }
    .await)
}

pub async fn config_reload(State(app): State<ApiState>) -> Response {
    e1(async {
        apply_and_reload(&app, "POST /api/config/reload").await?;
        Ok(
            Json(json!({"status": "success", "message": "HAProxy configuration reloaded safely"}))
                .into_response(),
        )
    }
    .await)
}

/// `GET /api/reload`: reload the running HAProxy, or start it.
pub async fn reload(State(app): State<ApiState>) -> Response {
    e2(raw_reload(app).await)
}

async fn raw_reload(app: ApiState) -> Answer {
    let running = app
        .with_new_edge(|edge| Ok(edge.haproxy_answering()))
        .await?;
    if running {
        master_reload(&app, "GET /api/reload").await?;
    } else {
        app.read(|edge| {
            edge.start_haproxy()
                .map(|_| ())
                .map_err(|e| crate::edge::EdgeError::Io {
                    context: "Failed to start HAProxy".into(),
                    source: std::io::Error::other(e.to_string()),
                })
        })
        .await
        .map_err(as_500)?;
    }
    Ok(Json(json!({"status": "success"})).into_response())
}

const STYLE: &str =
    "body{font-family:sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#333}";

fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// The old default page, with its default texts.
pub async fn default_page() -> Response {
    html(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Site Not Configured</title>\
         <style>{STYLE}</style></head>\n<body><h1>Site Not Configured</h1>\
         <p>This domain has not been configured yet. Please contact your system administrator to set up this website.</p>\
         <p>If you believe this is an error, please check the domain name and try again.</p></body></html>\n"
    ))
}

/// The old manager served a web UI here; hapctl has none and says where to look instead.
pub async fn root() -> Response {
    html(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hapctl</title>\
         <style>{STYLE}</style></head>\n<body><h1>hapctl</h1>\
         <p>This edge is managed by hapctl. Its web dashboard is at <a href=\"/ui/\">/ui/</a> (sign in \
         with the API token); there is also the <code>hapctl</code> command, and the HTTP API described \
         at <code>/openapi.json</code> (bearer token needed).</p></body></html>\n"
    ))
}
