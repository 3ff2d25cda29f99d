//! Bearer-token authentication. The token lives in a file only its owner can read; running
//! without one needs an explicit flag, and only on a loopback address. Without a bearer token,
//! `/v1` also accepts the dashboard's session cookie (changes with its CSRF header: `ui/session.rs`).

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::ui::session::{constant_time_eq, SessionVerdict};
use super::{compat, ApiState};

/// The routes that need no token: the health checks and the old manager's two pages.
pub fn is_open(path: &str) -> bool {
    path == "/v1/health" || compat::is_open_path(path)
}

/// Rejects requests without the right `Authorization: Bearer <token>` (but the open routes).
/// On the old manager's paths the refusal is its own 401 body (E4).
pub async fn require_token(State(app): State<ApiState>, req: Request, next: Next) -> Response {
    let Some(expected) = app.token() else {
        return next.run(req).await;
    };
    if is_open(req.uri().path()) {
        return next.run(req).await;
    }
    let old = compat::is_old_path(req.uri().path());
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_none() && req.uri().path().starts_with("/v1/") {
        let now = std::time::Instant::now();
        match app.sessions().authorize(req.method(), req.headers(), now) {
            SessionVerdict::Allowed => return next.run(req).await,
            SessionVerdict::Forbidden(why) => {
                return ApiError::new(StatusCode::FORBIDDEN, "forbidden", why).into_response()
            }
            SessionVerdict::NoSession => {}
        }
    }
    match given {
        Some(token) if constant_time_eq(token.trim().as_bytes(), expected.as_bytes()) => next.run(req).await,
        _ if old => compat::unauthorized(),
        Some(_) => ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "wrong bearer token").into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing `Authorization: Bearer <token>`; the token is in the file named by [api] token_file",
        )
        .into_response(),
    }
}
