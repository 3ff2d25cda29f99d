//! The daemon's HTTP API: the router, its handlers, the error mapping, the old manager's
//! routes (`compat/`), the dashboard (`ui/`) and the OpenAPI document.

mod auth;
mod certs;
pub(crate) mod compat;
pub(crate) mod cutover;
mod domain_page;
mod error;
mod haproxy;
mod history;
mod limits;
mod logs;
mod policies;
mod profiles;
mod proving;
mod proxies;
pub(crate) mod routes;
pub(crate) mod ui;
mod v1;
mod waf;

pub use error::ApiError;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::daemon::AppState;

/// Largest accepted request body.
const BODY_LIMIT: usize = 1024 * 1024;

/// Counts every request by route and status.
async fn count_requests(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let response = next.run(req).await;
    app.0
        .metrics
        .request(&method, &route, response.status().as_u16());
    tracing::debug!(%method, %route, status = response.status().as_u16(), ms = started.elapsed().as_secs_f64() * 1000.0);
    response
}
