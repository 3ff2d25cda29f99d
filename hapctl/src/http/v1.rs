//! The `/v1` routes, `/health`, `/metrics` and `/openapi.json`.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::{ApiError, Body, BodyList, PathParam};
use super::{domain_page, ApiState};
use crate::apply::ApplyReport;
use crate::blocks::{BlockChange, BlockReport, ChangeResult};
use crate::clock::unix_now;
use crate::contract::{
    BlockQuery, BlockRequest, ChangeAnswer, DeliveryRequest, DomainQuery, PutDomainRequest,
    RollbackRequest, ServerRequest,
};
use crate::deliver::{DeliveryReport, DeliveryStep};
use crate::edge::{after_put, DomainChange, DomainResult, Edge, EdgeError};
use crate::model::{
    AppName, Backend, BlockKey, Domain, EdgeState, Note, Profile, Server, ServerAddr, ServerName,
    ServerOptions, Ttl, WafPolicy,
};
use crate::resolve::Resolution;

pub async fn health(State(app): State<ApiState>) -> Response {
    let (status, body) = match app.read(|edge| edge.health_problem()).await {
        Ok(None) => (StatusCode::OK, json!({"status": "ok"})),
        Ok(Some(reason)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "unhealthy", "reason": reason}),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "unhealthy", "reason": e.message}),
        ),
    };
    (status, Json(body)).into_response()
}

pub async fn status(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let (s, generations) = app
        .read(|edge| Ok((edge.status(10)?, edge.generations()?)))
        .await?;
    Ok(Json(json!({
        "haproxy": s.haproxy,
        "supervision": s.supervision,
        "live_is_known_good": s.live_is_known_good,
        "runtime_check": s.runtime_check,
        "applies": s.applies,
        "generations": generations,
        "counts": s.counts,
        "certificates": super::certs::summary(&s, unix_now()),
        "resolution": s.resolution,
    })))
}

pub async fn fleet(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let view = app.fleet_view().await?;
    Ok(Json(serde_json::to_value(view).unwrap_or_default()))
}

/// One domain as the API shows it (borrowed: a list of 10,000 is serialised straight out).
#[derive(serde::Serialize)]
struct DomainView<'a> {
    domain: &'a Domain,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<&'a Profile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    servers: Option<&'a [Server]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sse_routing: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    app: Option<&'a AppName>,
    /// Always shown: `off` when the domain has no policy.
    waf: std::borrow::Cow<'a, WafPolicy>,
}

fn domain_view<'a>(state: &'a EdgeState, domain: &'a Domain) -> Option<DomainView<'a>> {
    let waf = state
        .waf
        .get(domain)
        .map_or_else(Default::default, std::borrow::Cow::Borrowed);
    if let Some(backend) = state.domains.get(domain) {
        return Some(DomainView {
            domain,
            backend: Some(domain.backend_name()),
            profile: Some(backend.profile()),
            servers: Some(backend.servers()),
            sse_routing: Some(backend.sse_routing()),
            app: None,
            waf,
        });
    }
    state.app_domains.get(domain).map(|app| DomainView {
        domain,
        backend: None,
        profile: None,
        servers: None,
        sse_routing: None,
        app: Some(app),
        waf,
    })
}

pub(super) fn domain_json(state: &EdgeState, domain: &Domain) -> Option<Value> {
    domain_view(state, domain).map(|v| serde_json::to_value(v).unwrap_or_default())
}

/// Every domain (a bare array), or with `limit`, `after` or `q` one page (`domain_page.rs`).
pub async fn list_domains(
    State(app): State<ApiState>,
    axum::extract::Query(pairs): axum::extract::Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let query = DomainQuery::from_pairs(&pairs)?;
    app.read(move |edge| {
        // Serialised from the store's copy: no clone of the whole state per request.
        edge.with_state(|state| {
            if let Some(query) = query {
                let page = domain_page::page(&query, state, |d| domain_json(state, d));
                return Json(page).into_response();
            }
            let all: Vec<DomainView> = state
                .domains
                .keys()
                .chain(state.app_domains.keys())
                .filter_map(|d| domain_view(state, d))
                .collect();
            Json(all).into_response()
        })
    })
    .await
}

fn parse_domain(name: &str) -> Result<Domain, ApiError> {
    Ok(name.parse::<Domain>()?)
}

pub async fn get_domain(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<Value>, ApiError> {
    let domain = parse_domain(&name)?;
    let shown = app
        .read(move |edge| edge.with_state(|state| domain_json(state, &domain)))
        .await?;
    shown
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("domain {name} does not exist")))
}

/// Turns the API's server list into a validated backend.
pub fn backend(
    servers: Vec<(Option<ServerName>, ServerAddr, ServerOptions)>,
    profile: Profile,
) -> Result<Backend, ApiError> {
    let servers = servers
        .into_iter()
        .enumerate()
        .map(|(i, (name, addr, options))| {
            Ok(Server {
                name: name.unwrap_or_else(|| ServerName::nth(i + 1)),
                addr,
                options: options.validate()?,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Backend::new(servers, profile)?)
}

/// The answer to a change applied through the safe path.
pub fn applied(report: ApplyReport, result: Option<DomainResult>) -> Result<Response, ApiError> {
    applied_with(report, result, None)
}

/// [`applied`], with which of the put domain's servers do not resolve now.
fn applied_with(
    report: ApplyReport,
    result: Option<DomainResult>,
    resolution: Option<Resolution>,
) -> Result<Response, ApiError> {
    if !report.outcome.is_success() {
        return Err(ApiError::from_apply(report));
    }
    let status = if result == Some(DomainResult::Created) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = serde_json::to_value(ChangeAnswer {
        result,
        apply: &report,
    })
    .unwrap_or_default();
    let body = match &resolution {
        Some(r) => r.merged_into(body),
        None => body,
    };
    Ok((status, Json(body)).into_response())
}

/// Which servers of `domain`, just put with `backend`, do not resolve now; `None` unless the
/// apply succeeded. Off the read lock: with `[resolvers]` it may wait for HAProxy a moment.
pub async fn resolution_after(
    app: &ApiState,
    report: &ApplyReport,
    domain: Domain,
    backend: Backend,
) -> Result<Option<Resolution>, ApiError> {
    if !report.outcome.is_success() {
        return Ok(None);
    }
    let settings = app.settings();
    tokio::task::spawn_blocking(move || Some(after_put(&settings, &domain, &backend)))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))
}

pub async fn put_domain(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
    Body(req): Body<PutDomainRequest>,
) -> Result<Response, ApiError> {
    let domain = parse_domain(&name)?;
    let mut put = None;
    if let Some(p) = &req.waf {
        crate::settings::waf::check_policy(app.settings().waf.as_ref(), p)
            .map_err(|e| e.in_field("waf.mode"))?;
    }
    let change = match (req.app, req.servers.is_empty()) {
        (Some(_), _) if req.sse_routing.is_some() => {
            return Err(ApiError::invalid(
                "sse_routing",
                "sse_routing needs the domain's own servers; an app domain has none",
            ))
        }
        (Some(_), false) => {
            return Err(ApiError::invalid(
                "app",
                "give either servers or app, not both",
            ))
        }
        (Some(a), true) => {
            let settings = app.settings();
            if !settings.apps.iter().any(|x| x.name == a) {
                return Err(ApiError::invalid(
                    "app",
                    format!("{a} is not an [[app]] of the settings"),
                ));
            }
            DomainChange::PutApp(domain.clone(), a)
        }
        (None, _) => {
            let servers = req
                .servers
                .into_iter()
                .enumerate()
                .map(|(i, s)| server_of(i, s))
                .collect::<Result<Vec<_>, ApiError>>()?;
            let backend = backend(servers, req.profile.unwrap_or_default())?;
            let backend = backend.with_sse_routing(req.sse_routing.unwrap_or(false));
            put = Some(backend.clone());
            DomainChange::Put(domain.clone(), backend)
        }
    };
    let change = match req.waf {
        Some(p) => DomainChange::WithWaf(Box::new(change), p),
        None => change,
    };
    let (report, result) = app.domain_job(Some(change)).await?;
    let resolution = match put {
        Some(backend) => resolution_after(&app, &report, domain, backend).await?,
        None => None,
    };
    applied_with(report, result, resolution)
}

/// A server of the request, each number checked against its range (`servers[i].field`).
fn server_of(
    i: usize,
    s: ServerRequest,
) -> Result<(Option<ServerName>, ServerAddr, ServerOptions), ApiError> {
    let range = |field: &str, v: Option<u64>, max: u64, rule: &str| match v {
        Some(n) if n > max => Err(ApiError::invalid(
            &format!("servers[{i}].{field}"),
            format!("{field} {n}: {rule}"),
        )),
        _ => Ok(v),
    };
    let options = ServerOptions {
        weight: range("weight", s.weight, 256, "must be 0 to 256")?.map(|w| w as u16),
        maxconn: range("maxconn", s.maxconn, 1_000_000, "must be 1 to 1000000")?.map(|m| m as u32),
        check: s.check.unwrap_or(true),
        inter: s.inter,
        fall: range("fall", s.fall, 100, "must be 1 to 100")?.map(|n| n as u8),
        rise: range("rise", s.rise, 100, "must be 1 to 100")?.map(|n| n as u8),
        backup: s.backup,
        send_proxy: s.send_proxy,
        tls: s.tls,
    };
    Ok((s.name, s.address, options))
}

pub async fn delete_domain(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Response, ApiError> {
    remove_domain(&app, parse_domain(&name)?).await
}

/// Removes a domain; an absent one is a 404 that neither queues an apply nor leaves history.
pub async fn remove_domain(app: &ApiState, domain: Domain) -> Result<Response, ApiError> {
    let (report, result) =
        change_existing(app, &domain, DomainChange::Remove(domain.clone())).await?;
    applied(report, Some(result))
}

/// Applies `change` of `domain`, which must exist: else a 404 that neither queues an apply
/// nor leaves history (or, removed meanwhile, a 404 after the apply).
pub async fn change_existing(
    app: &ApiState,
    domain: &Domain,
    change: DomainChange,
) -> Result<(ApplyReport, DomainResult), ApiError> {
    let probe = domain.clone();
    let exists = app.read(move |edge| edge.has_domain(&probe)).await?;
    let absent = || ApiError::not_found(format!("domain {domain} does not exist"));
    if !exists {
        return Err(absent());
    }
    match app.domain_job(Some(change)).await? {
        (_, Some(DomainResult::NotFound)) => Err(absent()),
        (report, result) => Ok((report, result.unwrap_or(DomainResult::Replaced))),
    }
}

/// `GET /v1/blocked-ips`: one page of the blocks in force, in key order, filtered; `next` is
/// the `after` of the next page (`null` on the last one).
pub async fn list_blocks(
    State(app): State<ApiState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let query = BlockQuery::from_query(raw.as_deref())?;
    app.read(move |edge| {
        let page = edge.blocks_page(&query)?;
        Ok(Json(json!({"blocks": page.blocks, "next": page.next})))
    })
    .await
}

/// The block an entry asks for; `path` prefixes the field an error names (`[3].`).
fn block_of(request: BlockRequest, path: &str) -> Result<crate::model::Block, ApiError> {
    let at = |field: &str, e: crate::model::Invalid| {
        ApiError::invalid(&format!("{path}{field}"), e.to_string())
    };
    let key: BlockKey = request.ip.parse().map_err(|e| at("ip", e))?;
    let ttl = request
        .ttl
        .map(|t| t.parse::<Ttl>())
        .transpose()
        .map_err(|e| at("ttl", e))?;
    let reason = Note::parse("reason", &request.reason).map_err(|e| at("reason", e))?;
    let author = Note::parse("author", request.author.as_deref().unwrap_or("api"))
        .map_err(|e| at("author", e))?;
    Ok(Edge::new_block(key, reason, author, ttl))
}

/// The answer to a block change: which results, and how HAProxy enforces it.
pub fn blocked(results: Vec<ChangeResult>, report: BlockReport, status: StatusCode) -> Response {
    (status, Json(BlockReport { results, ..report })).into_response()
}

pub async fn post_blocks(
    State(app): State<ApiState>,
    BodyList {
        items: requests,
        listed,
    }: BodyList<BlockRequest>,
) -> Result<Response, ApiError> {
    if requests.is_empty() || requests.len() > 100_000 {
        return Err(ApiError::invalid("ip", "send 1 to 100000 entries"));
    }
    let indexed = listed;
    let changes = requests
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let path = if indexed {
                format!("[{i}].")
            } else {
                String::new()
            };
            block_of(r, &path).map(BlockChange::Put)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (results, report) = app.block_job(changes).await?;
    let status = if results.contains(&ChangeResult::Created) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(blocked(results, report, status))
}

pub async fn delete_block(
    State(app): State<ApiState>,
    PathParam(key): PathParam,
) -> Result<Response, ApiError> {
    let key: BlockKey = key
        .parse()
        .map_err(|e: crate::model::Invalid| e.in_field("key"))?;
    let (results, report) = app.block_job(vec![BlockChange::Remove(key)]).await?;
    if results == [ChangeResult::NotFound] {
        return Err(ApiError::not_found(format!("{key} is not blocked")));
    }
    Ok(blocked(results, report, StatusCode::OK))
}

pub async fn sync_blocks(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    app.block_sync().await?;
    Ok(Json(json!({"status": "synced"})))
}

fn delivery_response(report: crate::deliver::DeliveryReport) -> Response {
    let status = match report.exit_code() {
        0 => StatusCode::OK,
        8 => StatusCode::UNPROCESSABLE_ENTITY,
        3 => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (
        status,
        Json(serde_json::to_value(report).unwrap_or_default()),
    )
        .into_response()
}

pub async fn post_delivery(
    State(app): State<ApiState>,
    Body(req): Body<DeliveryRequest>,
) -> Result<Response, ApiError> {
    let label = req.version.as_str().to_string();
    cutover(app, "deliver", req.app, label, move |edge, name, step| {
        edge.deliver(name, &req.version, step)
    })
    .await
}

pub async fn post_rollback(
    State(app): State<ApiState>,
    Body(req): Body<RollbackRequest>,
) -> Result<Response, ApiError> {
    cutover(
        app,
        "rollback",
        req.app,
        String::new(),
        |edge, name, step| edge.rollback(name, step),
    )
    .await
}

/// One delivery or rollback of `requested` (the default app when `None`) on a fresh edge,
/// shown by `GET /v1/deliveries/current` while it runs; answers with its report.
async fn cutover(
    app: ApiState,
    kind: &'static str,
    requested: Option<AppName>,
    version: String,
    run: impl FnOnce(
            &mut Edge,
            &AppName,
            &mut dyn FnMut(&DeliveryStep),
        ) -> Result<DeliveryReport, EdgeError>
        + Send
        + 'static,
) -> Result<Response, ApiError> {
    let live = app.clone();
    let report = app
        .with_new_edge(move |edge| {
            let name = edge.resolve_app(requested)?;
            let cutovers = live.cutovers();
            cutovers.start(kind, name.as_str(), &version);
            run(edge, &name, &mut |step| cutovers.step(step))
        })
        .await;
    let outcome = report.as_ref().map_or("error", |r| r.outcome.as_str());
    app.cutovers().finish(outcome);
    Ok(delivery_response(report?))
}

pub async fn current_delivery(State(app): State<ApiState>) -> Json<Value> {
    Json(app.cutovers().current())
}

pub async fn list_deliveries(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    app.read(|edge| {
        Ok(Json(
            serde_json::to_value(edge.delivery_history(100)?).unwrap_or_default(),
        ))
    })
    .await
}

pub async fn post_apply(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let (report, _) = app.domain_job(None).await?;
    applied(report, None)
}

pub async fn metrics(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let (blocked, certs) = app
        .read(|edge| Ok((edge.block_count()?, edge.certificates()?)))
        .await?;
    let mut text = app.services().metrics().render(blocked, &certs, unix_now());
    text += &app.services().waf_metrics();
    text += &app.services().traffic_metrics();
    Ok(([("content-type", "text/plain; version=0.0.4")], text).into_response())
}
