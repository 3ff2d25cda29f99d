//! What every handler shares: the application's state and the shape of its
//! answers. Below `routes` and `stream`, which both use it.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::Response;

/// Shared, read-only application state.
pub struct App {
    pub version: Arc<str>,
    /// `version` as the value of the `x-version` header of every response.
    pub x_version: HeaderValue,
    pub ready_path: String,
    /// The instant from which `ready_path` answers 200.
    pub ready_at: Instant,
}

/// A `text/plain` response.
pub fn text(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut res = Response::new(body.into());
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    res
}
