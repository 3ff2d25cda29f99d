//! `GET /v1/traffic`: traffic per domain over 1 min, 15 min and 1 h (`daemon/traffic.rs`,
//! `docs/traffic.md`); with `points`, one domain's hour for a chart.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::ApiState;
use crate::contract::TrafficQuery;
use crate::daemon::NOT_COLLECTED;

pub async fn get(
    State(app): State<ApiState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let query = TrafficQuery::from_pairs(&pairs)?;
    let services = app.services().clone();
    if let Some(domain) = &query.points {
        let points = services
            .traffic_points(domain)
            .ok_or_else(|| ApiError::conflict(NOT_COLLECTED))?;
        let since = services.traffic().map(|t| t.with(|b| b.started()));
        // The whole edge's hour comes with the events no history route has (the WAF agent's).
        let events = (domain == "*").then(|| services.edge_events());
        let answer = json!({
            "domain": domain,
            "since": since,
            "points": points.unwrap_or_default(),
            "events": events,
        });
        return Ok(Json(answer).into_response());
    }
    let report = tokio::task::spawn_blocking(move || services.traffic_report(&query))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .ok_or_else(|| ApiError::conflict(NOT_COLLECTED))?;
    Ok(Json(report).into_response())
}
