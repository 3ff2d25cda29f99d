//! The old manager's `GET /api/security/stats`, with its exact shape (PEER-API §1.2); errors
//! are E1 `{"status":"error","message"}`: 400 for a bad query, 502 when the table cannot be
//! read or parsed.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::super::limits::{bad_gateway, read_stats, stats_query};
use super::super::ApiState;
use super::{bad, e1};

const NOTE: &str = "Rates are per client IP over each counter's window (counter_windows_ms), from the stick table hapctl's rate limits track; IPv4 clients are stored IPv4-mapped and shown as IPv4.";

pub async fn get_stats(State(app): State<ApiState>, RawQuery(query): RawQuery) -> Response {
    e1(async {
        let (limit, min_req_rate) = stats_query(query.as_deref(), "min_req_rate", 50)
            .ok_or_else(|| bad("limit and min_req_rate must be integers"))?;
        let stats = read_stats(&app, limit, min_req_rate)
            .await?
            .map_err(bad_gateway)?;
        Ok(Json(json!({
            "status": "success",
            "table": stats.table,
            "table_size": stats.table_size,
            "total_tracked_ips": stats.total_tracked_ips,
            "sources_with_activity": stats.sources_with_activity,
            "counters": stats.counters,
            "counter_windows_ms": stats.counter_windows_ms,
            "returned": stats.returned,
            "min_req_rate": stats.min_req_rate,
            "sources": stats.sources,
            "note": NOTE,
        }))
        .into_response())
    }
    .await)
}
