//! The routes of the Python edge manager hapctl replaces, with its request and response
//! shapes, so its clients can switch. Everything goes through the same model parsers: a
//! free-text server option is mapped to a typed one or refused, never pasted.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, Body};
use super::v1::{applied, backend};
use super::AppState;
use crate::blocks::{BlockChange, ChangeResult};
use crate::edge::{DomainChange, Edge};
use crate::model::{
    BlockKey, Domain, Note, Profile, ServerAddr, ServerHost, ServerName, ServerOptions, Ttl,
};

fn iso(unix: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompatServer {
    name: Option<String>,
    address: String,
    port: u16,
    #[serde(default)]
    options: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompatDomain {
    domain: String,
    /// Accepted (and must be a string) but not used: hapctl names backends itself.
    #[serde(default, rename = "backend_name")]
    _backend_name: Option<String>,
    #[serde(default)]
    template_override: Option<String>,
    #[serde(default)]
    servers: Vec<CompatServer>,
    #[serde(default)]
    is_wildcard: bool,
}

/// Maps the old free-text server options onto typed ones; anything else is refused.
fn parse_options(text: &str) -> Result<ServerOptions, ApiError> {
    let mut options = ServerOptions {
        check: false,
        ..ServerOptions::default()
    };
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        let mut number = |name: &str| {
            words
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or_else(|| {
                    ApiError::invalid("servers.options", format!("`{name}` needs a number"))
                })
        };
        match word {
            "check" => options.check = true,
            "weight" => options.weight = Some(u16::try_from(number("weight")?).unwrap_or(u16::MAX)),
            "maxconn" => options.maxconn = Some(number("maxconn")?),
            other => {
                return Err(ApiError::invalid(
                    "servers.options",
                    format!("server option {:?} is not supported; hapctl accepts check, weight N and maxconn N", crate::model::bounded(other)),
                ))
            }
        }
    }
    Ok(options.validate()?)
}

fn profile(template_override: Option<&str>) -> Result<Profile, ApiError> {
    match template_override.map(str::trim) {
        None | Some("") | Some("default") => Ok(Profile::Default),
        Some("websocket") => Ok(Profile::WebSocket),
        Some("sse") => Ok(Profile::Sse),
        Some(other) => Err(ApiError::invalid(
            "template_override",
            format!("template override {:?} is not supported: hapctl renders no free text; use default, websocket or sse", crate::model::bounded(other)),
        )),
    }
}

fn compat_domain(name: &str, is_wildcard: bool) -> Result<Domain, ApiError> {
    let name = if is_wildcard && !name.starts_with("*.") {
        format!("*.{name}")
    } else {
        name.to_string()
    };
    Ok(name.parse::<Domain>()?)
}

pub async fn post_domain(
    State(app): State<AppState>,
    Body(req): Body<CompatDomain>,
) -> Result<Response, ApiError> {
    let domain = compat_domain(&req.domain, req.is_wildcard)?;
    let servers = req
        .servers
        .into_iter()
        .map(|s| {
            let host = ServerAddr::parse_host(&s.address)?;
            let addr = ServerAddr {
                host,
                port: s
                    .port
                    .try_into()
                    .map_err(|e: crate::model::Invalid| e.in_field("servers.port"))?,
            };
            let name = s.name.map(|n| n.parse::<ServerName>()).transpose()?;
            Ok((
                name,
                addr,
                parse_options(s.options.as_deref().unwrap_or(""))?,
            ))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let backend = backend(servers, profile(req.template_override.as_deref())?)?;
    let (report, result) = app
        .domain_job(Some(DomainChange::Put(domain, backend)))
        .await?;
    applied(report, result)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompatDomainName {
    domain: String,
}

pub async fn delete_domain(
    State(app): State<AppState>,
    Body(req): Body<CompatDomainName>,
) -> Result<Response, ApiError> {
    super::v1::remove_domain(&app, compat_domain(&req.domain, false)?).await
}

fn server_host(host: &ServerHost) -> String {
    match host {
        ServerHost::V4(ip) => ip.to_string(),
        ServerHost::V6(ip) => ip.to_string(),
        ServerHost::Name(n) => n.to_string(),
    }
}

pub async fn list_domains(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    app.read(|edge| {
        let state = edge.state()?;
        let list: Vec<Value> = state
            .domains
            .iter()
            .map(|(domain, backend)| {
                let servers: Vec<Value> = backend
                    .servers()
                    .iter()
                    .map(|s| {
                        let mut options = Vec::new();
                        if s.options.check {
                            options.push("check".to_string());
                        }
                        if let Some(w) = s.options.weight {
                            options.push(format!("weight {w}"));
                        }
                        if let Some(m) = s.options.maxconn {
                            options.push(format!("maxconn {m}"));
                        }
                        json!({"name": s.name, "address": server_host(&s.addr.host), "port": s.addr.port.get(), "options": options.join(" ")})
                    })
                    .collect();
                json!({
                    "domain": domain.name(),
                    "backend_name": domain.backend_name(),
                    "template_override": match backend.profile() { Profile::Default => Value::Null, p => json!(p.to_string()) },
                    "servers": servers,
                    "is_wildcard": domain.is_wildcard(),
                })
            })
            .collect();
        Ok(Json(json!({"domains": list})))
    })
    .await
}

pub async fn list_blocks(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    app.read(|edge| {
        let list: Vec<Value> = edge
            .blocks()?
            .iter()
            .map(|b| {
                json!({
                    "ip_address": b.key,
                    "reason": b.reason,
                    "blocked_by": b.author,
                    "created_at": iso(b.created_at),
                    "expires_at": b.expires_at.map(iso),
                })
            })
            .collect();
        Ok(Json(json!({"blocked_ips": list})))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompatBlock {
    ip_address: BlockKey,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    blocked_by: Option<String>,
}

fn block_answer(
    status: StatusCode,
    message: String,
    report: &crate::blocks::BlockReport,
) -> Response {
    (
        status,
        Json(json!({"success": true, "message": message, "enforcement": report.enforcement})),
    )
        .into_response()
}

pub async fn post_block(
    State(app): State<AppState>,
    Body(req): Body<CompatBlock>,
) -> Result<Response, ApiError> {
    let block = Edge::new_block(
        req.ip_address,
        Note::parse("reason", req.reason.as_deref().unwrap_or(""))?,
        Note::parse("blocked_by", req.blocked_by.as_deref().unwrap_or("api"))?,
        None,
    );
    let (results, report) = app.block_job(vec![BlockChange::Add(block)]).await?;
    if results == [ChangeResult::Exists] {
        return Err(ApiError::conflict(format!(
            "{} is already blocked",
            req.ip_address
        )));
    }
    Ok(block_answer(
        StatusCode::CREATED,
        format!("{} blocked", req.ip_address),
        &report,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompatIp {
    ip_address: BlockKey,
}

pub async fn delete_block(
    State(app): State<AppState>,
    Body(req): Body<CompatIp>,
) -> Result<Response, ApiError> {
    let (results, report) = app
        .block_job(vec![BlockChange::Remove(req.ip_address)])
        .await?;
    if results == [ChangeResult::NotFound] {
        return Err(ApiError::not_found(format!(
            "{} is not blocked",
            req.ip_address
        )));
    }
    Ok(block_answer(
        StatusCode::OK,
        format!("{} unblocked", req.ip_address),
        &report,
    ))
}

pub async fn sync_blocks(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    app.block_sync().await?;
    Ok(Json(
        json!({"success": true, "message": "blocked IPs synchronised"}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemporaryBlock {
    ip_address: BlockKey,
    #[serde(default = "sixty")]
    duration_minutes: u64,
    #[serde(default)]
    reason: Option<String>,
}

fn sixty() -> u64 {
    60
}

pub async fn temporary_block(
    State(app): State<AppState>,
    Body(req): Body<TemporaryBlock>,
) -> Result<Response, ApiError> {
    let ttl: Ttl = format!("{}m", req.duration_minutes)
        .parse()
        .map_err(|e: crate::model::Invalid| ApiError::invalid("duration_minutes", e.rule))?;
    let reason = req.reason.unwrap_or_else(|| "temporary block".into());
    let block = Edge::new_block(
        req.ip_address,
        Note::parse("reason", &reason)?,
        Note::parse("blocked_by", "security")?,
        Some(ttl),
    );
    let expires = block.expires_at.map(iso);
    let (_, report) = app.block_job(vec![BlockChange::Put(block)]).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"success": true, "ip_address": req.ip_address, "expires_at": expires, "enforcement": report.enforcement})),
    )
        .into_response())
}

pub async fn clear_expired(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let (_, report) = app.block_job(Vec::new()).await?;
    Ok(Json(
        json!({"success": true, "cleared": report.expired.len(), "ip_addresses": report.expired}),
    ))
}

pub async fn regenerate(State(app): State<AppState>) -> Result<Response, ApiError> {
    let (report, _) = app.domain_job(None).await?;
    applied(report, None)
}

/// The old route reloaded HAProxy. Here: apply the desired state, and when nothing changed,
/// reload through the master anyway (confirmed), since that is what the caller asked for.
pub async fn reload(State(app): State<AppState>) -> Result<Response, ApiError> {
    let (report, _) = app.domain_job(None).await?;
    if report.outcome != crate::apply::Outcome::Unchanged {
        return applied(report, None);
    }
    let settings = app.settings();
    let reloaded = tokio::task::spawn_blocking(move || {
        crate::haproxy::Master::from_settings(&settings).reload(settings.haproxy.reload_timeout)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "reload_failed",
            e.to_string(),
        )
    })?;
    app.0.metrics.reloads(1);
    Ok(Json(json!({"success": true, "message": "HAProxy reloaded", "master_pid": reloaded.master_pid, "new_workers": reloaded.new_workers})).into_response())
}
