//! `GET /v1/logs`: the access log `hapctl serve` writes, read as `hapctl logs` reads it (the
//! same filters and parsers), one bounded page at a time, newest first.

use std::net::IpAddr;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::ApiState;
use crate::logs::{access_log_file, read_page, Filter, LogError, RequestId};
use crate::model::bounded;

pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;
/// The bytes of log one request examines past its cursor: a filter that matches little
/// answers a partial page (and a `next` to search on) rather than read 600 MiB of files.
pub const SCAN_BUDGET: u64 = 16 << 20;

/// The query, parsed: a bad or unknown parameter is a 400 naming it.
struct LogQuery {
    filter: Filter,
    limit: usize,
    before: Option<RequestId>,
}

impl LogQuery {
    fn from_pairs(pairs: &[(String, String)]) -> Result<LogQuery, ApiError> {
        let mut q = LogQuery {
            filter: Filter::default(),
            limit: DEFAULT_LIMIT,
            before: None,
        };
        for (key, value) in pairs {
            let bad = |why: String| ApiError::invalid(key, format!("{key}: {why}"));
            match key.as_str() {
                "domain" => q.filter.domain = Some(value.parse().map_err(bad)?),
                "status" => q.filter.status = Some(value.parse().map_err(bad)?),
                "client" => {
                    let ip = value.parse::<IpAddr>().map_err(|_| {
                        bad(format!("{:?} is not an IPv4 or IPv6 address", bounded(value)))
                    })?;
                    q.filter.client = Some(ip);
                }
                "before" => q.before = Some(value.parse().map_err(bad)?),
                "limit" => {
                    q.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| bad(format!("must be a number from 1 to {MAX_LIMIT}")))?
                }
                _ => {
                    return Err(ApiError::invalid(
                        key,
                        format!(
                            "{:?} is not a parameter of /v1/logs (domain, status, client, before, limit)",
                            bounded(key)
                        ),
                    ))
                }
            }
        }
        Ok(q)
    }
}

/// `{records: [...], next, partial}`: each record as HAProxy wrote it (parsed), newest first;
/// `next` is the `before` of the older page, null on the last one; `partial`: the search
/// stopped at `SCAN_BUDGET` before the page was full. 409 when the log does not go to a
/// file (syslog, journald), with where to read it.
pub async fn list(
    State(app): State<ApiState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let q = LogQuery::from_pairs(&pairs)?;
    let logs = app.settings().logs;
    let page = tokio::task::spawn_blocking(move || {
        let file = access_log_file(&logs)?;
        read_page(
            file,
            logs.keep,
            &q.filter,
            q.limit,
            q.before.as_ref(),
            SCAN_BUDGET,
        )
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| match e {
        LogError::NotAFile(_) => ApiError::new(StatusCode::CONFLICT, "not_a_file", e.to_string()),
        _ => ApiError::internal(e.to_string()),
    })?;
    let records: Vec<_> = page.records.into_iter().map(|(_, r)| r).collect();
    Ok(
        Json(json!({"records": records, "next": page.next, "partial": page.partial}))
            .into_response(),
    )
}
