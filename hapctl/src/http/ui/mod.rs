//! The web dashboard at `/ui/`: static files embedded in the binary (`hapctl/ui/`, plain HTML,
//! CSS and JavaScript modules, no build step) and the sign-in that turns the API token into a
//! session (`session.rs`). The pages only call the `/v1` API; the files are public (they hold
//! no data), every `/v1` call needs the session.

mod assets;
mod etag;
pub mod session;

use std::time::Instant;

use axum::extract::{ConnectInfo, State};
use axum::http::Extensions;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::error::{ApiError, Body, PathParam};
use super::{audit, ApiState};
use crate::access::{WHO_NO_AUTH, WHO_UNKNOWN};
use crate::model::Scopes;
pub use etag::etag;
pub use session::Sessions;
use session::{SessionUser, SessionVerdict};

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

/// `GET /ui/session`: the CSRF token, token name and scopes of the cookie's live session (a
/// page reloaded keeps its session), else 401. Cross-site pages cannot read it (no CORS).
async fn current(State(app): State<ApiState>, headers: HeaderMap) -> Response {
    let session = session::cookie(&headers).and_then(|id| app.sessions().csrf(id, Instant::now()));
    match session {
        Some((csrf, user)) => hardened(signed_in(&csrf, &user), "no-store"),
        None => no_session(),
    }
}

/// What the pages learn of their session: the CSRF header's value, and the token's name and
/// scopes (a page shows no button its session cannot use).
fn signed_in(csrf: &str, user: &SessionUser) -> Response {
    Json(json!({"csrf": csrf, "token": user.token, "scopes": user.scopes})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// `POST /ui/session {token}`: an API token (or anything, under `--no-auth`) → a new session
/// cookie acting with its name and scopes. A wrong token is recorded and slowed down.
async fn sign_in(
    State(app): State<ApiState>,
    extensions: Extensions,
    headers: HeaderMap,
    Body(req): Body<SignIn>,
) -> Response {
    let peer = extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0);
    let (token, scopes) = match who_signs_in(&app, req.token).await {
        Some(found) => found,
        None => {
            tokio::time::sleep(app.failed_token(peer)).await;
            let from = audit::From {
                peer,
                headers: &headers,
                action: "POST /ui/session".into(),
            };
            let summary = "refused: wrong API token".to_string();
            audit::event(&app, from, WHO_UNKNOWN, "dashboard", summary, 401).await;
            let e = ApiError {
                field: Some("token".into()),
                ..ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "wrong API token, or an expired one (the admin one is in the file named by [api] token_file)",
                )
            };
            return hardened(e.into_response(), "no-store");
        }
    };
    let (id, csrf) = match app.sessions().create(Instant::now(), token, scopes) {
        Ok(pair) => pair,
        Err(e) => return ApiError::internal(e.to_string()).into_response(),
    };
    let Some((_, user)) = app.sessions().csrf(&id, Instant::now()) else {
        return no_session();
    };
    tracing::info!(token = %user.token, "dashboard: signed in");
    let from = audit::From {
        peer,
        headers: &headers,
        action: "POST /ui/session".into(),
    };
    let via = format!("dashboard session {}", user.tag);
    audit::event(&app, from, &user.token, &via, "signed in".into(), 200).await;
    let cookie = session::set_cookie(&id, session::over_https(&headers));
    let mut response = signed_in(&csrf, &user);
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    hardened(response, "no-store")
}

/// The name and scopes of the live token `given` (any name and every scope under `--no-auth`).
async fn who_signs_in(app: &ApiState, given: String) -> Option<(String, Scopes)> {
    if !app.auth_required() {
        return Some((WHO_NO_AUTH.into(), Scopes::admin()));
    }
    let access = app.access().clone();
    let now = crate::clock::unix_now();
    let found = tokio::task::spawn_blocking(move || access.authenticate(&given, now)).await;
    match found {
        Ok(Ok(Some(id))) => Some((id.name.to_string(), id.scopes)),
        Ok(Err(e)) => {
            tracing::error!("cannot check a token: {e}");
            None
        }
        _ => None,
    }
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
        SessionVerdict::Allowed(_) => {}
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
