//! `GET /v1/logs`: the access log `hapctl serve` writes, one bounded page at a time, newest
//! first (`daemon/access_log.rs`).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::ApiState;
use crate::contract::LogQuery;
use crate::logs::LogError;

/// `{records: [...], next, partial}`: each record as HAProxy wrote it (parsed), newest first;
/// `next` is the `before` of the older page, null on the last one; `partial`: the search
/// stopped at its budget before the page was full. 409 when the log does not go to a file
/// (syslog, journald), with where to read it. A bad or unknown parameter is a 400 naming it.
pub async fn list(
    State(app): State<ApiState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let query = LogQuery::from_pairs(&pairs)?;
    let services = app.services().clone();
    let page = tokio::task::spawn_blocking(move || services.access_log_page(&query))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| match e {
            LogError::NotAFile(_) => {
                ApiError::new(StatusCode::CONFLICT, "not_a_file", e.to_string())
            }
            _ => ApiError::internal(e.to_string()),
        })?;
    let records: Vec<_> = page.records.into_iter().map(|(_, r)| r).collect();
    Ok(
        Json(json!({"records": records, "next": page.next, "partial": page.partial}))
            .into_response(),
    )
}
