//! The web dashboard at `/ui/`: static files embedded in the binary (`hapctl/ui/`, plain HTML,
//! CSS and JavaScript modules, no build step) and the sign-in that turns the API token into a
//! session (`session.rs`). The pages only call the `/v1` API; the files are public (they hold
//! no data), every `/v1` call needs the session.

mod assets;
mod etag;
pub mod session;

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::error::{ApiError, Body, PathParam};
use super::ApiState;
pub use etag::etag;
pub use session::Sessions;
use session::{constant_time_eq, SessionVerdict};

/// How long a wrong token is held before its answer, to slow guessing.
const WRONG_TOKEN_DELAY: Duration = Duration::from_millis(250);

/// The dashboard's routes: not behind the bearer token (the sign-in must be reachable).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { asset("") }))
        .route("/ui/session", get(current).post(sign_in).delete(sign_out))
        .route(
            "/ui/{*path}",
            get(|PathParam(path): PathParam| async move { asset(&path) }),
        )
}

/// The headers of every dashboard answer: nothing but its own scripts, styles and API may run
/// or be reached, it may not be framed, and no URL leaks in a `Referer`.
fn hardened(mut response: Response, cache: &'static str) -> Response {
    let h = response.headers_mut();
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(h, "content-security-policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    set(h, "x-content-type-options", "nosniff");
    set(h, "referrer-policy", "no-referrer");
    set(h, "x-frame-options", "DENY");
    set(h, "cache-control", cache);
    response
}

fn asset(path: &str) -> Response {
    match assets::find(path) {
        Some(a) => hardened(
            ([(header::CONTENT_TYPE, a.mime)], a.bytes).into_response(),
            "no-cache",
        ),
        None => ApiError::not_found(format!("no dashboard file {path}")).into_response(),
    }
}

fn no_session() -> Response {
    let e = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "not signed in: POST /ui/session with the API token",
    );
    hardened(e.into_response(), "no-store")
}

/// `GET /ui/session`: the CSRF token of the cookie's live session (a page reloaded keeps its
/// session), else 401. Cross-site pages cannot read it (no CORS).
async fn current(State(app): State<ApiState>, headers: HeaderMap) -> Response {
    let csrf = session::cookie(&headers).and_then(|id| app.sessions().csrf(id, Instant::now()));
    match csrf {
        Some(csrf) => hardened(Json(json!({"csrf": csrf})).into_response(), "no-store"),
        None => no_session(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// `POST /ui/session {token}`: the API token (or anything, under `--no-auth`) → a new session
/// cookie and its CSRF token.
async fn sign_in(
    State(app): State<ApiState>,
    headers: HeaderMap,
    Body(req): Body<SignIn>,
) -> Response {
    let right = app
        .token()
        .is_none_or(|t| constant_time_eq(req.token.trim().as_bytes(), t.as_bytes()));
    if !right {
        tokio::time::sleep(WRONG_TOKEN_DELAY).await;
        let e = ApiError {
            field: Some("token".into()),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "wrong API token (the file named by [api] token_file)",
            )
        };
        return hardened(e.into_response(), "no-store");
    }
    let (id, csrf) = match app.sessions().create(Instant::now()) {
        Ok(pair) => pair,
        Err(e) => return ApiError::internal(e.to_string()).into_response(),
    };
    tracing::info!("dashboard: signed in");
    let cookie = session::set_cookie(&id, session::over_https(&headers));
    hardened(
        ([(header::SET_COOKIE, cookie)], Json(json!({"csrf": csrf}))).into_response(),
        "no-store",
    )
}

/// `DELETE /ui/session`: ends the session (CSRF-checked like every change).
async fn sign_out(State(app): State<ApiState>, headers: HeaderMap) -> Response {
    match app
        .sessions()
        .authorize(&Method::DELETE, &headers, Instant::now())
    {
        SessionVerdict::NoSession => return no_session(),
        SessionVerdict::Forbidden(why) => {
            return ApiError::new(StatusCode::FORBIDDEN, "forbidden", why).into_response()
        }
        SessionVerdict::Allowed => {}
    }
    if let Some(id) = session::cookie(&headers) {
        app.sessions().remove(id);
    }
    let cookie = session::clear_cookie(session::over_https(&headers));
    hardened(
        (
            [(header::SET_COOKIE, cookie)],
            Json(json!({"status": "signed out"})),
        )
            .into_response(),
        "no-store",
    )
}
