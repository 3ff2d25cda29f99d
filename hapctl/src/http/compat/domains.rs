//! `GET /api/domains`, `POST /api/domain`, `DELETE /api/domain` (`PEER-API.md` §1.2).
//!
//! The body is read as the old route read it (unknown fields ignored, a port as a number or a
//! numeric string, `is_wildcard` any truthy value), then through the same model parsers as
//! `/v1`: a free-text server option is mapped to a typed one or refused, never pasted.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::error::{ApiError, ValuesBody};
use super::super::v1::{backend, resolution_after};
use super::super::ApiState;
use super::certs::cert_path;
use super::schemas;
use super::{as_500, e1, required, text, Answer, Ignored, OldBody};
use crate::edge::{DomainChange, DomainResult};
use crate::model::{
    BackendLabel, Domain, Port, Profile, ServerAddr, ServerName, ServerOptions, TextContext,
};

#[derive(Deserialize, utoipa::ToSchema)]
pub struct DomainBody {
    #[serde(default)]
    #[schema(schema_with = schemas::text, required = true)]
    domain: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::text, required = true)]
    backend_name: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::nullable_text)]
    template_override: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::servers)]
    servers: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::wildcard)]
    is_wildcard: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

/// The old free-text server options, typed (`ServerOptions::parse_text`); anything else is
/// refused naming the token.
fn parse_options(text: &str, field: &str, context: TextContext) -> Result<ServerOptions, ApiError> {
    ServerOptions::parse_text(text, context).map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// A profile as the old clients read it back: the old template name where one exists.
fn template_name(profile: &Profile) -> Value {
    match profile {
        Profile::Default => Value::Null,
        Profile::LongLived => json!("hap_backend_longlived"),
        Profile::HttpCheck(p) if p.as_str() == "/" => json!("hap_backend_http_check"),
        p => json!(p.to_string()),
    }
}

/// The old template names (and hapctl's own profile names) as profiles.
fn profile(template_override: Option<&str>) -> Result<Profile, ApiError> {
    let name = template_override.unwrap_or("").trim();
    match Profile::from_template(name) {
        Some(p) => Ok(p),
        None => name.parse().map_err(|_| {
            ApiError::invalid(
                "template_override",
                format!(
                    "template override {:?} is not supported: use hap_backend_basic, hap_backend_http_check, hap_backend_longlived, hap_backend_websocket, or a hapctl profile (default, websocket, sse, long-lived, http-check:/path)",
                    crate::model::bounded(name)
                ),
            )
        }),
    }
}

/// `is_wildcard` as the old route took it (any truthy value), without Python's surprises: a
/// string must say yes or no (`"false"` was true there), a list or object is refused.
fn truthy(v: Option<&Value>) -> Result<bool, ApiError> {
    let refuse = || {
        ApiError::invalid(
            "is_wildcard",
            "is_wildcard must be true/false, 1/0 or \"true\"/\"false\"",
        )
    };
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::Number(n)) => Ok(n.as_f64().ok_or_else(refuse)? != 0.0),
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "" | "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(refuse()),
        },
        Some(_) => Err(refuse()),
    }
}

/// A port as a JSON integer or a numeric string (SQLite's affinity made both work).
fn port(v: Option<&Value>, field: &str) -> Result<Port, ApiError> {
    let digits = match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(field, format!("{field} is required")))
        }
        Some(_) => {
            return Err(ApiError::invalid(
                field,
                format!("{field} must be a number from 1 to 65535"),
            ))
        }
    };
    digits
        .parse::<Port>()
        .map_err(|e| ApiError::invalid(field, e.to_string()))
}

type ServerItem = (Option<ServerName>, ServerAddr, ServerOptions);

fn server(
    i: usize,
    item: &Map<String, Value>,
    context: TextContext,
) -> Result<ServerItem, ApiError> {
    let at = |name: &str| format!("servers[{i}].{name}");
    let address = text(item.get("address"), &at("address"))?.ok_or_else(|| {
        ApiError::invalid(&at("address"), format!("{} is required", at("address")))
    })?;
    let host = ServerAddr::parse_host(&address)
        .map_err(|e| ApiError::invalid(&at("address"), e.to_string()))?;
    let addr = ServerAddr {
        host,
        port: port(item.get("port"), &at("port"))?,
    };
    let name = text(item.get("name"), &at("name"))?
        .map(|n| n.parse::<ServerName>())
        .transpose()
        .map_err(|e| ApiError::invalid(&at("name"), e.to_string()))?;
    let options = text(item.get("options"), &at("options"))?;
    Ok((
        name,
        addr,
        parse_options(options.as_deref().unwrap_or(""), &at("options"), context)?,
    ))
}

fn servers(v: Option<&Value>, context: TextContext) -> Result<Vec<ServerItem>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(map) => server(i, map, context),
                _ => Err(ApiError::invalid(
                    &format!("servers[{i}]"),
                    format!("servers[{i}] must be an object with address and port"),
                )),
            })
            .collect(),
        Some(_) => Err(ApiError::invalid(
            "servers",
            "servers must be a list of objects",
        )),
    }
}

/// The domain as hapctl stores it: a wildcard flagged by `is_wildcard` without its `*.` gets
/// it (the old system stored it bare and matched it as a suffix all the same).
fn parse_domain(name: &str, is_wildcard: bool) -> Result<Domain, ApiError> {
    let name = if is_wildcard && !name.starts_with("*.") {
        format!("*.{name}")
    } else {
        name.to_string()
    };
    name.parse::<Domain>()
        .map_err(|e| ApiError::invalid("domain", e.to_string()))
}

/// Fails unless the apply loaded the change; every failure is the old 500.
fn loaded(report: crate::apply::ApplyReport) -> Result<(), ApiError> {
    if report.outcome.is_success() {
        Ok(())
    } else {
        Err(as_500(ApiError::from_apply(report)))
    }
}

pub async fn post_domain(State(app): State<ApiState>, body: OldBody<DomainBody>) -> Response {
    e1(put(app, body).await)
}

async fn put(app: ApiState, body: OldBody<DomainBody>) -> Answer {
    let ValuesBody(req) = body?;
    let missing = "Domain and backend_name are required";
    let name = required(req.domain.as_ref(), "domain", missing)?;
    // Required, as before, and kept to be shown back; hapctl names its backends itself.
    let label = required(req.backend_name.as_ref(), "backend_name", missing)?
        .parse::<BackendLabel>()
        .map_err(|e| ApiError::invalid("backend_name", e.to_string()))?;
    let domain = parse_domain(&name, truthy(req.is_wildcard.as_ref())?)?;
    let template = text(req.template_override.as_ref(), "template_override")?;
    let backend = backend(
        servers(
            req.servers.as_ref(),
            TextContext {
                resolvers: app.settings().resolvers.is_some(),
            },
        )?,
        profile(template.as_deref())?,
    )?
    .with_sse_routing(Profile::template_sse_routing(
        template.as_deref().unwrap_or(""),
        domain.is_wildcard(),
    ));
    let put = DomainChange::Put(domain.clone(), backend.clone());
    let (report, _) = app
        .domain_job(Some(DomainChange::WithLabel(Box::new(put), label)))
        .await
        .map_err(as_500)?;
    // Only a domain with a server named by host name says anything more than the old shape.
    let named = crate::resolve::has_names(&backend);
    let resolution = resolution_after(&app, &report, domain.clone(), backend)
        .await?
        .filter(|_| named);
    loaded(report)?;
    let stored = domain.to_string();
    let id = app.read(move |edge| edge.domain_id(&stored)).await?;
    // The old shape, and which servers wait for their name to resolve.
    let body = json!({"status": "success", "domain_id": id});
    let body = match &resolution {
        Some(r) => r.merged_into(body),
        None => body,
    };
    Ok(Json(body).into_response())
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct NameBody {
    #[serde(default)]
    #[schema(schema_with = schemas::text, required = true)]
    domain: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

pub async fn delete_domain(State(app): State<ApiState>, body: OldBody<NameBody>) -> Response {
    e1(remove(app, body).await)
}

async fn remove(app: ApiState, body: OldBody<NameBody>) -> Answer {
    let ValuesBody(req) = body?;
    let name = required(req.domain.as_ref(), "domain", "Domain is required")?;
    let exact = parse_domain(&name, false)?;
    let wildcard = (!exact.is_wildcard())
        .then(|| parse_domain(&name, true).ok())
        .flatten();
    // The name as posted, else the wildcard an `is_wildcard` post stored under it.
    let found = app
        .read(move |edge| {
            edge.with_state(|state| {
                let exists =
                    |d: &Domain| state.domains.contains_key(d) || state.app_domains.contains_key(d);
                [Some(exact), wildcard].into_iter().flatten().find(exists)
            })
        })
        .await?;
    let not_found = || ApiError::not_found("Domain not found");
    let domain = found.ok_or_else(not_found)?;
    let (report, result) = app
        .domain_job(Some(DomainChange::Remove(domain)))
        .await
        .map_err(as_500)?;
    if result == Some(DomainResult::NotFound) {
        return Err(not_found());
    }
    loaded(report)?;
    Ok(
        Json(json!({"status": "success", "message": "Domain configuration removed"}))
            .into_response(),
    )
}

/// A bare array, one object per domain with servers, in id (creation) order.
pub async fn list_domains(State(app): State<ApiState>) -> Response {
    e1(app
        .read(move |edge| {
            let state = edge.state()?;
            let ids = edge.domain_ids()?;
            let labels = edge.backend_labels()?;
            let certs = edge.certificates()?;
            let mut rows: Vec<(Option<i64>, Value)> = state
                .domains
                .iter()
                .map(|(domain, backend)| {
                    let name = domain.to_string();
                    let cert = certs
                        .iter()
                        .find(|v| !v.record.name.is_default() && v.serves.contains(&name));
                    let id = ids.get(&name).copied();
                    let row = json!({
                        "id": id,
                        "domain": name,
                        "ssl_enabled": i32::from(cert.is_some()),
                        "ssl_cert_path": cert.map(|v| cert_path(edge, &v.record.name)),
                        "template_override": template_name(backend.profile()),
                        "is_wildcard": i32::from(domain.is_wildcard()),
                        // What the client gave, else hapctl's own name.
                        "backend_name": labels.get(&name).map_or_else(
                            || domain.backend_name(),
                            |l| l.to_string()
                        ),
                    });
                    (id, row)
                })
                .collect();
            rows.sort_by_key(|(id, _)| id.unwrap_or(i64::MAX));
            let list: Vec<Value> = rows.into_iter().map(|(_, row)| row).collect();
            Ok((StatusCode::OK, Json(list)).into_response())
        })
        .await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_inputs_are_read_safely() {
        assert_eq!(port(Some(&json!("8080")), "p").unwrap().get(), 8080);
        assert_eq!(port(Some(&json!(80)), "p").unwrap().get(), 80);
        for bad in [
            json!("80a"),
            json!(0),
            json!(70000),
            json!(1.5),
            json!(true),
            json!(""),
        ] {
            assert!(port(Some(&bad), "servers[0].port").is_err(), "{bad}");
        }
        for (v, want) in [
            (json!(1), true),
            (json!(0), false),
            (json!("yes"), true),
            (json!("false"), false),
            (json!(null), false),
            (json!(true), true),
        ] {
            assert_eq!(truthy(Some(&v)).unwrap(), want, "{v}");
        }
        assert!(truthy(Some(&json!("maybe"))).is_err());
        assert!(truthy(Some(&json!([1]))).is_err());
        let plain = TextContext { resolvers: false };
        let o = parse_options("check weight 5 maxconn 100 inter 2s", "o", plain).unwrap();
        assert_eq!((o.check, o.weight, o.maxconn), (true, Some(5), Some(100)));
        let e = parse_options("check redir /x", "servers[0].options", plain).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("servers[0].options"));
        assert_eq!(
            parse_domain("w.example.com", true).unwrap().to_string(),
            "*.w.example.com"
        );
    }
}
