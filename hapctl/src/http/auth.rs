//! Who calls, and whether they may: a bearer token (named, with scopes: `access/`) or, on
//! `/v1`, the dashboard's session cookie (changes with its CSRF header: `ui/session.rs`).
//! Each route's guard comes from the route table; a token outside its scope gets a 403 naming
//! the scope it lacks. Wrong tokens are recorded in the audit trail and slowed down per
//! address. Running without tokens needs `--no-auth`, on a loopback address only.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::routes::Guard;
use super::ui::session::SessionVerdict;
use super::{audit, compat, ApiState};
use crate::access::{WHO_NO_AUTH, WHO_UNKNOWN};
use crate::model::{Scope, Scopes};

/// Who a request acts as, once authenticated.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name (`(no-auth)` under `--no-auth`).
    pub who: String,
    /// `api`, `old-api`, `dashboard session <tag>`.
    pub via: String,
    pub scopes: Scopes,
}

/// Why a request was not let in.
enum Refusal {
    /// No credentials, or wrong ones: 401.
    Unauthenticated { wrong: bool, why: &'static str },
    /// A session's change without its CSRF header or from another origin: 403.
    Session(&'static str),
}

/// The peer address of a TCP request (`None`: the CLI's unix socket).
pub fn peer(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

/// Lets a request in when its caller's scopes cover its route's guard; records every change
/// (`audit.rs`) and every refusal. On the old manager's paths refusals keep its envelope (E4).
pub async fn require_token(State(app): State<ApiState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    // A route missing from the table's guards would be a bug; it gets the strictest one.
    let guard = app
        .guard(req.method(), &route)
        .unwrap_or(Guard::Needs(Scope::Admin));
    let Guard::Needs(scope) = guard else {
        return next.run(req).await;
    };
    let old = compat::is_old_path(req.uri().path());
    let caller = match identify(&app, req.method(), req.uri().path(), req.headers(), old).await {
        Ok(caller) => caller,
        Err(refusal) => {
            let from = audit::From::request(&req, &route);
            return refuse(&app, from, refusal, old).await;
        }
    };
    if !caller.scopes.covers(scope) {
        let why = format!(
            "the token `{}` (scopes {}) lacks the scope `{scope}` this route needs; an admin can add a token with it: `hapctl token add NAME --scope {scope}`",
            caller.who, caller.scopes
        );
        let from = audit::From::request(&req, &route);
        let summary = format!("refused: {why}");
        audit::event(&app, from, &caller.who, &caller.via, summary, 403).await;
        let e = ApiError {
            field: Some("scope".into()),
            ..ApiError::new(StatusCode::FORBIDDEN, "forbidden", why)
        };
        return if old {
            compat::refusal(e)
        } else {
            e.into_response()
        };
    }
    if guard.audited() && !recorded_by_the_cli(&req) {
        return audit::record(app, caller, route, req, next, old).await;
    }
    next.run(req).await
}

/// A change the command line handed over its unix socket, which recorded it as the local user
/// before sending it: one record per change. Only the unix socket (no peer address) is
/// believed; whoever may use it may change the state directory anyway.
fn recorded_by_the_cli(req: &Request) -> bool {
    peer(req).is_none() && req.headers().contains_key(super::CLI_RECORDED)
}

/// The caller a request's bearer token or session names.
async fn identify(
    app: &ApiState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    old: bool,
) -> Result<Caller, Refusal> {
    let via = if old { "old-api" } else { "api" };
    if !app.auth_required() {
        return Ok(Caller {
            who: WHO_NO_AUTH.into(),
            via: via.into(),
            scopes: Scopes::admin(),
        });
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let Some(given) = given else {
        return session_caller(app, method, path, headers);
    };
    let access = app.access().clone();
    let now = crate::clock::unix_now();
    let found = tokio::task::spawn_blocking(move || access.authenticate(&given, now))
        .await
        .map_err(|_| Refusal::Unauthenticated {
            wrong: false,
            why: "the token check stopped; try again",
        })?;
    match found {
        Ok(Some(id)) => Ok(Caller {
            who: id.name.to_string(),
            via: via.into(),
            scopes: id.scopes,
        }),
        Ok(None) => Err(Refusal::Unauthenticated {
            wrong: true,
            why: "wrong or expired bearer token",
        }),
        Err(e) => {
            tracing::error!("cannot check a token: {e}");
            Err(Refusal::Unauthenticated {
                wrong: false,
                why: "the token database cannot be read; see the daemon's log",
            })
        }
    }
}

/// A request without a bearer token: the dashboard's session, on `/v1` only.
fn session_caller(
    app: &ApiState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Caller, Refusal> {
    let missing = Refusal::Unauthenticated {
        wrong: false,
        why: "missing `Authorization: Bearer <token>`; the admin token is in the file named by [api] token_file, others come from `hapctl token add`",
    };
    if !path.starts_with("/v1/") {
        return Err(missing);
    }
    let now = std::time::Instant::now();
    match app.sessions().authorize(method, headers, now) {
        SessionVerdict::Allowed(user) => Ok(Caller {
            who: user.token,
            via: format!("dashboard session {}", user.tag),
            scopes: user.scopes,
        }),
        SessionVerdict::Forbidden(why) => Err(Refusal::Session(why)),
        SessionVerdict::NoSession => Err(missing),
    }
}

/// The answer to a refused request, recorded, and held a while after a wrong token.
async fn refuse(app: &ApiState, from: audit::From<'_>, r: Refusal, old: bool) -> Response {
    let (status, why) = match r {
        Refusal::Unauthenticated { wrong, why } => {
            if wrong {
                tokio::time::sleep(app.failed_token(from.peer)).await;
            }
            (StatusCode::UNAUTHORIZED, why)
        }
        Refusal::Session(why) => (StatusCode::FORBIDDEN, why),
    };
    let via = if old { "old-api" } else { "api" };
    let summary = format!("refused: {why}");
    audit::event(app, from, WHO_UNKNOWN, via, summary, status.as_u16()).await;
    match (status, old) {
        (StatusCode::UNAUTHORIZED, true) => compat::unauthorized(),
        (StatusCode::UNAUTHORIZED, false) => {
            ApiError::new(status, "unauthorized", why).into_response()
        }
        (_, true) => compat::refusal(ApiError::new(status, "forbidden", why)),
        _ => ApiError::new(status, "forbidden", why).into_response(),
    }
}
