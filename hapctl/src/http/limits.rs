//! `/v1/limits…` and `/v1/security…`: per-client rate limits (runtime map changes, except
//! windows and the tarpit, which reload) and the client table.

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::{ApiError, Body, PathParam};
use super::ApiState;
use crate::apply::ApplyReport;
use crate::contract::{ClearRequest, ExemptRequest, LimitsRequest, PolicyRequest};
use crate::edge::{Edge, EdgeError};
use crate::model::{check_secs, BlockKey, Domain, Invalid, Slot, MAX_TARPIT_SECS, MAX_WINDOW_SECS};
use crate::protect::{EdgeEdit, PolicyEdit, SecurityStats, StatsError};

/// The edit a policy request asks for; a rule of an unknown slot is refused.
fn policy_edit(
    preset: Option<String>,
    rules: BTreeMap<String, String>,
) -> Result<PolicyEdit, Invalid> {
    let rules = rules
        .into_iter()
        .map(|(name, spec)| Ok((Slot::from_name(&name)?, spec)))
        .collect::<Result<Vec<_>, Invalid>>()?;
    Ok(PolicyEdit { preset, rules })
}

fn secs(field: &'static str, n: Option<u64>, max: u32) -> Result<Option<String>, Invalid> {
    n.map(|n| check_secs(field, n, max).map(|n| n.to_string()))
        .transpose()
}

pub async fn get_limits(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let limits = app.with_new_edge(|edge| edge.limits()).await?;
    Ok(Json(limits).into_response())
}

pub async fn put_limits(
    State(app): State<ApiState>,
    Body(req): Body<LimitsRequest>,
) -> Result<Response, ApiError> {
    let w = req.windows.unwrap_or_default();
    let edit = EdgeEdit {
        policy: policy_edit(req.preset, req.rules)?,
        req_window: secs("req_window", w.req, MAX_WINDOW_SECS)?,
        conn_window: secs("conn_window", w.conn, MAX_WINDOW_SECS)?,
        err_window: secs("err_window", w.err, MAX_WINDOW_SECS)?,
        tarpit: secs("tarpit_secs", req.tarpit_secs, MAX_TARPIT_SECS)?,
        local_exempt: req.local_exempt,
    };
    run_apply(app, move |edge| {
        let next = edit.apply(&edge.limits()?);
        swap(next.map(|next| edge.set_limit_settings(&next)))
    })
    .await
}

/// A refused edit outside, an edge failure inside → the other way round.
fn swap<T>(r: Result<Result<T, EdgeError>, Invalid>) -> Result<Result<T, Invalid>, EdgeError> {
    match r {
        Ok(inner) => inner.map(Ok),
        Err(invalid) => Ok(Err(invalid)),
    }
}

/// Runs a change on a fresh edge: a refused edit (`Invalid`, found against the committed
/// state) is a 400, an apply failure the apply's own error.
pub(super) async fn run_apply(
    app: ApiState,
    change: impl FnOnce(&mut Edge) -> Result<Result<ApplyReport, Invalid>, EdgeError> + Send + 'static,
) -> Result<Response, ApiError> {
    let report = app.with_new_edge(change).await??;
    app.services().metrics().apply(&report);
    super::v1::applied(report, None)
}

/// `PUT /v1/domains/{name}/limits`: the domain's own policy, from its current one (or the
/// default).
pub async fn put_domain_limits(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
    Body(req): Body<PolicyRequest>,
) -> Result<Response, ApiError> {
    let domain: Domain = name.parse()?;
    let edit = policy_edit(req.preset, req.rules)?;
    if edit.is_empty() {
        return Err(ApiError::invalid(
            "preset",
            "give a preset or rules (DELETE follows the default again)",
        ));
    }
    run_apply(app, move |edge| {
        let limits = edge.limits()?;
        let base = *limits.domains.get(&domain).unwrap_or(&limits.default);
        swap(
            edit.apply(base)
                .map(|policy| edge.set_domain_limits(&domain, Some(policy))),
        )
    })
    .await
}

pub async fn delete_domain_limits(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Response, ApiError> {
    let domain: Domain = name.parse()?;
    run_apply(app, move |edge| {
        edge.set_domain_limits(&domain, None).map(Ok)
    })
    .await
}

pub async fn post_exempt(
    State(app): State<ApiState>,
    Body(req): Body<ExemptRequest>,
) -> Result<Response, ApiError> {
    let net: BlockKey = req.net.parse().map_err(|e: Invalid| e.in_field("net"))?;
    exempt(app, net, true).await
}

pub async fn delete_exempt(
    State(app): State<ApiState>,
    PathParam(key): PathParam,
) -> Result<Response, ApiError> {
    exempt(app, key.parse()?, false).await
}

async fn exempt(app: ApiState, net: BlockKey, add: bool) -> Result<Response, ApiError> {
    run_apply(app, move |edge| edge.set_limit_exempt(&net, add).map(Ok)).await
}

/// `limit` and a minimum request rate from a query string; `None` for a value that is not
/// an integer.
pub(super) fn stats_query(
    query: Option<&str>,
    rate_key: &str,
    default_limit: u64,
) -> Option<(usize, u64)> {
    let (mut limit, mut rate) = (default_limit as i64, 1i64);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "limit" => limit = v.parse().ok()?,
            k if k == rate_key => rate = v.parse().ok()?,
            _ => {}
        }
    }
    // Clamped like the old manager: limit to 1-1000, the rate to at least 0.
    Some((limit.clamp(1, 1000) as usize, rate.max(0) as u64))
}

pub(super) async fn read_stats(
    app: &ApiState,
    limit: usize,
    rate: u64,
) -> Result<Result<SecurityStats, StatsError>, ApiError> {
    app.with_new_edge(move |edge| Ok(edge.security_top(limit, rate)))
        .await
}

pub(super) fn bad_gateway(e: StatsError) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, "haproxy", e.to_string())
}

/// `GET /v1/security/stats?limit=N&min_rate=R`.
pub async fn get_stats(
    State(app): State<ApiState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let (limit, rate) = stats_query(query.as_deref(), "min_rate", 20)
        .ok_or_else(|| ApiError::invalid("limit", "limit and min_rate must be integers"))?;
    let stats = read_stats(&app, limit, rate).await?.map_err(bad_gateway)?;
    Ok(Json(stats).into_response())
}

/// `POST /v1/security/clear {"ip"}`: forgets one client's counters.
pub async fn post_clear(
    State(app): State<ApiState>,
    Body(req): Body<ClearRequest>,
) -> Result<Response, ApiError> {
    let ip: IpAddr = req.ip.parse().map_err(|_| {
        ApiError::invalid(
            "ip",
            format!(
                "ip {:?}: must be one IPv4 or IPv6 address",
                crate::model::bounded(&req.ip)
            ),
        )
    })?;
    app.with_new_edge(move |edge| Ok(edge.security_clear(ip)))
        .await?
        .map_err(bad_gateway)?;
    Ok(Json(serde_json::json!({"cleared": ip.to_string()})).into_response())
}
