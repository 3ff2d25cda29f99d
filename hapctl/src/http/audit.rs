//! The audit trail on the HTTP side: every change is recorded before it is made (no record,
//! no change: 503) and its result after; refusals are recorded too; `GET /v1/audit` reads it.

use axum::body::{to_bytes, Body};
use axum::extract::{FromRequestParts, Query, RawPathParams, Request, State};
use std::net::SocketAddr;

use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::auth::{peer, Caller};
use super::error::{bounded_body, is_json, ApiError};
use super::{compat, v1, ApiState};
use crate::access::audit::describe;
use crate::clock::unix_millis;
use crate::contract::AuditQuery;
use crate::model::{BlockKey, BlockQuery, Domain};
use crate::store::{AuditAttempt, AuditResult};

/// Most bytes of an answer read back for the apply's outcome (larger ones are passed on
/// as they are, the outcome unread).
const ANSWER_LIMIT: usize = 4 * 1024 * 1024;

/// Records the attempt, makes the change, records its result. The attempt is committed
/// before the handler runs: a change the daemon acknowledged always has its record.
pub async fn record(
    app: ApiState,
    caller: Caller,
    route: String,
    req: Request,
    next: Next,
    old: bool,
) -> Response {
    // A JSON body is read here, as its handler would (bounded in size and time), to name its
    // objects; any other body is left to the handler, which refuses it or ignores it.
    let (req, body) = if is_json(&req) {
        let (parts, body) = req.into_parts();
        let probe = Request::from_parts(parts.clone(), body);
        match bounded_body(probe, &app).await {
            Ok(bytes) => (
                Request::from_parts(parts, Body::from(bytes.clone())),
                Some(bytes),
            ),
            Err(e) => {
                return if old {
                    compat::refusal(e)
                } else {
                    e.into_response()
                }
            }
        }
    } else {
        (req, None)
    };
    let (mut parts, req_body) = req.into_parts();
    let params: Vec<String> = RawPathParams::from_request_parts(&mut parts, &app)
        .await
        .map(|p| p.iter().map(|(_, v)| v.to_string()).collect())
        .unwrap_or_default();
    let json: Option<Value> = body.and_then(|b| serde_json::from_slice(&b).ok());
    let (objects, mut asked) = describe(&params, json.as_ref());
    if asked.is_empty() && parts.method == axum::http::Method::DELETE {
        asked = "removed".into();
    }
    let summary = match before(&app, &route, &objects).await {
        Some(before) => format!("{before} → {asked}"),
        None => asked,
    };
    let req = Request::from_parts(parts, req_body);
    let attempt = AuditAttempt {
        at_ms: unix_millis(),
        who: caller.who,
        via: caller.via,
        peer: peer_text(peer(&req)),
        forwarded: forwarded(&app, peer(&req), req.headers()).await,
        action: format!("{} {route}", req.method()),
        objects,
        summary,
    };
    let access = app.access().clone();
    let begun = tokio::task::spawn_blocking(move || access.begin(&attempt)).await;
    let id = match begun {
        Ok(Ok(id)) => id,
        Ok(Err(e)) => return unavailable(e.to_string(), old),
        Err(e) => return unavailable(e.to_string(), old),
    };
    let response = next.run(req).await;
    let (response, outcome) = outcome_of(response).await;
    let result = AuditResult {
        at_ms: unix_millis(),
        status: response.status().as_u16(),
        outcome,
    };
    let access = app.access().clone();
    match tokio::task::spawn_blocking(move || access.finish(id, &result)).await {
        Ok(Ok(())) => {}
        // The change is made and its attempt recorded; only its result is missing.
        Ok(Err(e)) => tracing::warn!("audit record {id}: cannot write the result: {e}"),
        Err(e) => tracing::warn!("audit record {id}: cannot write the result: {e}"),
    }
    response
}

/// What the object a change names looked like before it (a domain's fields, whether an
/// address was blocked, the edge-wide limits): the "before" of the record. Other changes'
/// records say what was asked only.
async fn before(app: &ApiState, route: &str, objects: &[String]) -> Option<String> {
    let view = if route.starts_with("/v1/domains/{name}") || route == "/api/domain" {
        let domain: Domain = objects.first()?.parse().ok()?;
        let view = app
            .read(move |edge| edge.with_state(|state| v1::domain_json(state, &domain)))
            .await
            .ok()?;
        view.map(|v| describe(&[], Some(&v)).1)
    } else if route.starts_with("/v1/blocked-ips") && objects.len() == 1 {
        let key: BlockKey = objects[0].parse().ok()?;
        let query = BlockQuery {
            limit: 1,
            prefix: Some(key),
            ..BlockQuery::default()
        };
        let page = app.read(move |edge| edge.blocks_page(&query)).await.ok()?;
        page.blocks
            .into_iter()
            .find(|b| b.key == key)
            .map(|b| format!("blocked ({})", b.reason))
    } else if route == "/v1/limits" {
        let limits = app.read(|edge| edge.limits()).await.ok()?;
        Some(describe(&[], Some(&serde_json::to_value(limits).ok()?)).1)
    } else {
        return None;
    };
    Some(format!("before: {}", view.as_deref().unwrap_or("absent")))
}

/// A record made in one go, attempt and result: a refused request (best effort: nothing was
/// changed either way) or a dashboard sign-in.
pub async fn event(
    app: &ApiState,
    from: From<'_>,
    who: &str,
    via: &str,
    summary: String,
    status: u16,
) {
    let attempt = AuditAttempt {
        at_ms: unix_millis(),
        who: who.into(),
        via: via.into(),
        peer: peer_text(from.peer),
        forwarded: forwarded(app, from.peer, from.headers).await,
        action: from.action,
        objects: Vec::new(),
        summary,
    };
    let access = app.access().clone();
    let written = tokio::task::spawn_blocking(move || access.event(&attempt, status)).await;
    if !matches!(written, Ok(Ok(()))) {
        tracing::warn!("cannot write a record of the audit trail");
    }
}

fn unavailable(why: String, old: bool) -> Response {
    tracing::error!("audit trail: {why}; the change was refused");
    let e = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "audit_unavailable",
        format!("the audit record could not be written ({why}); nothing was changed. Check the disk and access.db in the state directory"),
    );
    if old {
        compat::refusal(e)
    } else {
        e.into_response()
    }
}

/// Where a request came from and what it asked, for the record of its refusal.
pub struct From<'a> {
    pub peer: Option<SocketAddr>,
    pub headers: &'a HeaderMap,
    /// `METHOD /route`.
    pub action: String,
}

impl<'a> From<'a> {
    pub fn request(req: &'a Request, route: &str) -> From<'a> {
        From {
            peer: peer(req),
            headers: req.headers(),
            action: format!("{} {route}", req.method()),
        }
    }
}

fn peer_text(peer: Option<SocketAddr>) -> String {
    peer.map_or_else(|| "local".to_string(), |p| p.to_string())
}

/// The client a trusted proxy named in `X-Forwarded-For` (its last entry: the one the proxy
/// added), only when the peer is one of `hapctl proxy ls`.
async fn forwarded(
    app: &ApiState,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Option<String> {
    let peer = peer?.ip();
    let named = headers
        .get("x-forwarded-for")?
        .to_str()
        .ok()?
        .rsplit(',')
        .next()?
        .trim()
        .parse::<std::net::IpAddr>()
        .ok()?;
    let proxies = app.read(|edge| edge.trusted_proxies()).await.ok()?;
    proxies
        .iter()
        .any(|(net, _)| net.net().contains(&peer))
        .then(|| named.to_string())
}

/// The apply's outcome in a JSON answer (`apply.outcome`, or an error's), if there is one.
/// Only answers of a known, bounded size are read (a stream passes as it is).
async fn outcome_of(response: Response) -> (Response, Option<String>) {
    use axum::body::HttpBody;
    let small = response
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n as usize <= ANSWER_LIMIT);
    if !small {
        return (response, None);
    }
    let (parts, body) = response.into_parts();
    let bytes = match to_bytes(body, ANSWER_LIMIT).await {
        Ok(bytes) => bytes,
        Err(e) => return (ApiError::internal(e.to_string()).into_response(), None),
    };
    let outcome = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
        ["/apply/outcome", "/error/apply/outcome", "/outcome"]
            .iter()
            .find_map(|p| v.pointer(p).and_then(Value::as_str).map(String::from))
    });
    (Response::from_parts(parts, Body::from(bytes)), outcome)
}

/// `GET /v1/audit`: `{records}`, newest first; a bad parameter is a 400 naming it.
pub async fn list(
    State(app): State<ApiState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let query = AuditQuery::from_pairs(&pairs)?;
    let filter = query.filter(unix_millis());
    let access = app.access().clone();
    let records = tokio::task::spawn_blocking(move || access.audit(&filter))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(json!({ "records": records })).into_response())
}
