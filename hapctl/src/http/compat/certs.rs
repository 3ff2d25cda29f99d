//! The edge manager's certificate routes (`PEER-API.md` §1.2 `/api/ssl*`,
//! `/api/certificates*`) with its shapes and status codes, served by the native ACME client
//! instead of certbot. What a client can see differs in these ways:
//!
//! - Every error of these routes is in the route's own envelope: E1
//!   `{"status":"error","message"}`, E3 `{"success":false,"error"}` for the DNS flow. That
//!   includes refused bodies (a wrong type is a 400 naming the field; 415 without JSON, 413
//!   over 1 MiB); unknown fields are ignored, as they were.
//! - `/api/ssl/bundle` answers `cleanup` with empty lists, always: each host name is served
//!   by exactly one certificate (the one named after it, else the one expiring last; see
//!   `tls::crtlist`), so overlapping certificates never compete and no file is superseded,
//!   moved or quarantined.
//! - `/api/certificates/renew` never reloads HAProxy (renewals go through the runtime API);
//!   the success message keeps the old words for the clients that match on them.
//! - `/api/certificates/request` without `force_renewal` keeps a current ACME certificate
//!   that covers the names, as certbot kept an unexpired lineage, instead of ordering again;
//!   at most 100 domains per request.
//! - The DNS-01 two-call flow is in `dns.rs`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::super::error::{ApiError, PathParam, ValuesBody};
use super::super::ApiState;
use super::schemas;
use super::{bad, cap, e1, failed, naive_seconds, Answer, Ignored, OldBody};
use crate::clock::unix_now;
use crate::edge::{CertView, Edge, EdgeError};
use crate::model::{CertName, Domain};

const MAX_DOMAINS: usize = 100;
/// Let's Encrypt's limit, which the old route enforced.
const MAX_NAMES: usize = 100;

/// Where a certificate's PEM (chain and key) is, as the old `cert_path` said.
pub(super) fn cert_path(edge: &Edge, name: &CertName) -> String {
    edge.certificate_path(name).display().to_string()
}

/// A wildcard can only be proven through DNS (`[acme] dns_hook`).
fn needs_dns(names: &[Domain]) -> bool {
    names.iter().any(Domain::is_wildcard)
}

/// A JSON value as Python's `repr` shows it, as the old messages quoted entries.
fn repr(v: &Value) -> String {
    let text = match v {
        Value::Null => "None".to_string(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{s}'"),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(repr).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("'{k}': {}", repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    crate::model::bounded(&text)
}

/// Absent or `null`: the old route's `data.get(x) or default`. Other values of the wrong
/// type (`{}`, `0`, `false`) are refused rather than read as absent.
fn absent(v: &Value) -> bool {
    v.is_null()
}

/// One label of the old patterns: letters, digits and inner hyphens.
pub(super) fn label_ok(label: &str, max: usize) -> bool {
    (1..=max).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// The bundle route's pattern: an optional `*.`, labels of 1–63, an alphabetic TLD of 2+.
fn bundle_name_ok(name: &str) -> bool {
    let rest = name.strip_prefix("*.").unwrap_or(name);
    let labels: Vec<&str> = rest.split('.').collect();
    match labels.split_last() {
        Some((tld, others)) => {
            !others.is_empty()
                && tld.len() >= 2
                && tld.bytes().all(|b| b.is_ascii_alphabetic())
                && others.iter().all(|l| label_ok(l, 63))
        }
        None => false,
    }
}

fn required_domain(domain: Option<&str>) -> Result<Domain, ApiError> {
    let raw = domain
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| bad("Domain is required"))?;
    Ok(raw.parse::<Domain>()?)
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct DomainRequest {
    #[serde(default)]
    #[schema(schema_with = schemas::domain, required = true)]
    pub(super) domain: Option<String>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

/// `POST /api/ssl`: one HTTP-01 certificate for `domain`.
pub async fn post_ssl(State(app): State<ApiState>, body: OldBody<DomainRequest>) -> Response {
    e1(ssl(app, body).await)
}

async fn ssl(app: ApiState, body: OldBody<DomainRequest>) -> Answer {
    let ValuesBody(req) = body?;
    let domain = required_domain(req.domain.as_deref())?;
    let name = CertName::for_host(&domain.to_string())?;
    let names = vec![domain.clone()];
    let path = app
        .with_acme(move |edge| {
            let report = edge.request_certificate(&name, &names, needs_dns(&names))?;
            Ok(cert_path(edge, &report.name))
        })
        .await
        .map_err(|e| failed(format!("Failed to obtain SSL certificate: {}", e.message)))?;
    Ok(Json(json!({
        "status": "success",
        "domain": domain,
        "cert_path": path,
        "message": "Certificate obtained successfully",
    }))
    .into_response())
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct BundleRequest {
    #[serde(default)]
    #[schema(schema_with = schemas::text, required = true)]
    primary: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::names)]
    sans: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

/// The names of a bundle, checked in the old route's order and with its messages.
fn bundle_names(req: BundleRequest) -> Result<Vec<Domain>, ApiError> {
    let one = |what: &str, raw: &str| -> Result<Domain, ApiError> {
        if !bundle_name_ok(raw) {
            return Err(bad(format!(
                "invalid {what}: '{}'",
                crate::model::bounded(raw)
            )));
        }
        raw.parse::<Domain>().map_err(|e| {
            bad(format!(
                "invalid {what}: '{}': {}",
                crate::model::bounded(raw),
                e.rule
            ))
        })
    };
    let primary = match req.primary.filter(|p| !absent(p)) {
        None => return Err(bad("\"primary\" is required")),
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err(bad("\"primary\" is required"))
        }
        Some(Value::String(s)) => one("primary", s.trim())?,
        Some(other) => return Err(bad(format!("invalid primary: {}", repr(&other)))),
    };
    let sans = match req.sans.filter(|s| !absent(s)) {
        None => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(bad("\"sans\" must be a list")),
    };
    let mut names = vec![primary];
    for entry in &sans {
        let Value::String(s) = entry else {
            return Err(bad(format!("invalid SAN entry: {}", repr(entry))));
        };
        if s.trim().is_empty() {
            continue;
        }
        let san = one("SAN", s.trim())?;
        if !names.contains(&san) {
            names.push(san);
        }
    }
    if names.len() > MAX_NAMES {
        return Err(bad(format!(
            "Too many SANs ({}); Let's Encrypt limit is {MAX_NAMES}",
            names.len()
        )));
    }
    Ok(names)
}

/// `POST /api/ssl/bundle`: one certificate named after `primary` for it and its SANs.
pub async fn post_bundle(
    State(app): State<ApiState>,
    body: OldBody<Option<BundleRequest>>,
) -> Response {
    e1(bundle(app, body).await)
}

async fn bundle(app: ApiState, body: OldBody<Option<BundleRequest>>) -> Answer {
    let ValuesBody(req) = body?;
    let names = bundle_names(req.unwrap_or(BundleRequest {
        primary: None,
        sans: None,
        _other: Ignored::new(),
    }))?;
    let primary = names[0].clone();
    let name = CertName::for_host(&primary.to_string())?;
    let ordered = names.clone();
    let issued = app
        .with_acme(move |edge| {
            let report = edge.request_certificate(&name, &ordered, needs_dns(&ordered))?;
            Ok(cert_path(edge, &report.name))
        })
        .await;
    match issued {
        Ok(path) => Ok(Json(json!({
            "status": "success",
            "primary": primary,
            "names": names,
            "cert_path": path,
            "cleanup": {"removed": [], "errors": [], "skipped": []},
            "message": format!("Bundled certificate obtained for {} names", names.len()),
        }))
        .into_response()),
        Err(e) => Ok((
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({
                "status": "error",
                "message": cap(&format!("Failed to obtain SSL bundle for {primary}: {}", e.message)),
                "primary": primary,
                "attempted_names": names,
            })),
        )
            .into_response()),
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct CertificatesRequest {
    #[serde(default)]
    #[schema(schema_with = schemas::names_or_name, required = true)]
    domains: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::boolean)]
    force_renewal: Option<bool>,
    #[serde(default)]
    #[schema(schema_with = schemas::include_www)]
    include_www: Option<bool>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

/// `domains` as the old route read it: a list, or one string wrapped in a list; every entry
/// must be a host name (400 naming the first that is not: nothing is ordered).
fn requested_domains(domains: Option<Value>) -> Result<Vec<Domain>, ApiError> {
    let list = match domains {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![Value::String(s)],
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(bad(
                "domains must be a list of host names, or one host name",
            ))
        }
    };
    if list.is_empty() {
        return Err(bad("At least one domain is required"));
    }
    if list.len() > MAX_DOMAINS {
        return Err(bad(format!(
            "Too many domains ({}); send at most {MAX_DOMAINS} per request",
            list.len()
        )));
    }
    list.iter()
        .map(|raw| match raw {
            Value::String(text) => text
                .trim()
                .parse::<Domain>()
                .map_err(|e| bad(e.to_string())),
            other => Err(bad(format!("invalid domain entry: {}", repr(other)))),
        })
        .collect()
}

/// Whether `name` is an ACME certificate covering `names` and not due yet: certbot kept such a
/// lineage unless asked to force a renewal.
fn is_current(edge: &Edge, name: &CertName, names: &[Domain]) -> Result<bool, EdgeError> {
    let view = match edge.certificate(name) {
        Ok(v) => v,
        Err(EdgeError::Certs(crate::tls::CertError::NotFound(_))) => return Ok(false),
        Err(e) => return Err(e),
    };
    let r = &view.record;
    Ok(r.source.is_acme()
        && r.next_renewal.is_some_and(|t| t > unix_now())
        && names.iter().all(|n| view.names_cover(&n.to_string())))
}

/// One domain of `/api/certificates/request`: its certificate name and the names covered, or
/// why it failed.
fn request_one(
    edge: &mut Edge,
    domain: &Domain,
    force: bool,
    www: bool,
) -> Result<(CertName, Vec<Domain>), String> {
    let mut names = vec![domain.clone()];
    if www && !domain.is_wildcard() && !domain.to_string().starts_with("www.") {
        names.push(
            format!("www.{domain}")
                .parse()
                .map_err(|e: crate::model::Invalid| e.to_string())?,
        );
    }
    let name = CertName::for_host(&domain.to_string()).map_err(|e| e.to_string())?;
    if force || !is_current(edge, &name, &names).map_err(|e| e.to_string())? {
        edge.request_certificate(&name, &names, needs_dns(&names))
            .map_err(|e| format!("Failed to obtain certificate: {e}"))?;
    }
    Ok((name, names))
}

/// `POST /api/certificates/request`: one certificate per domain, one order after the other;
/// 200 when all succeeded, 207 when some did, 500 when none did.
pub async fn post_certificates_request(
    State(app): State<ApiState>,
    body: OldBody<CertificatesRequest>,
) -> Response {
    e1(certificates_request(app, body).await)
}

async fn certificates_request(app: ApiState, body: OldBody<CertificatesRequest>) -> Answer {
    let ValuesBody(req) = body?;
    let domains = requested_domains(req.domains)?;
    let (force, www) = (
        req.force_renewal.unwrap_or(false),
        req.include_www.unwrap_or(true),
    );
    let results: Vec<Value> = app
        .with_acme(move |edge| {
            Ok(domains
                .iter()
                .map(|domain| {
                    let shown = domain.to_string();
                    match request_one(edge, domain, force, www) {
                        Ok((name, names)) => json!({
                            "domain": names[0],
                            "status": "success",
                            "message": "Certificate obtained successfully",
                            "cert_path": cert_path(edge, &name),
                            "domains_covered": names,
                        }),
                        Err(message) => {
                            json!({"domain": shown, "status": "error", "message": cap(&message)})
                        }
                    }
                })
                .collect())
        })
        .await
        .map_err(|e| failed(e.message))?;
    let ok = results.iter().filter(|r| r["status"] == "success").count();
    let status = match ok {
        n if n == results.len() => StatusCode::OK,
        0 => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::MULTI_STATUS,
    };
    let summary = json!({"total": results.len(), "successful": ok, "failed": results.len() - ok});
    Ok((
        status,
        Json(json!({"status": "completed", "summary": summary, "results": results})),
    )
        .into_response())
}

/// `POST /api/certificates/renew`: renews what is due, through the runtime API (never a
/// reload, whatever the message says).
pub async fn post_renew(State(app): State<ApiState>) -> Response {
    e1(renew(app).await)
}

async fn renew(app: ApiState) -> Answer {
    let outcomes = app
        .with_acme(|edge| edge.renew_due(false))
        .await
        .map_err(|e| failed(format!("Certificate renewal failed: {}", e.message)))?;
    app.services().record_renewals(&outcomes);
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.error.as_ref().map(|e| format!("{}: {e}", o.name)))
        .collect();
    if !failures.is_empty() {
        return Err(failed(format!(
            "Certificate renewal failed: {}",
            failures.join("; ")
        )));
    }
    let message = if outcomes.is_empty() {
        "No certificates needed renewal"
    } else {
        "Certificates renewed and HAProxy reloaded"
    };
    Ok(Json(json!({"status": "success", "message": message})).into_response())
}

/// `GET /api/certificates/status`: one entry per host name a certificate serves.
pub async fn status(State(app): State<ApiState>) -> Response {
    e1(app
        .read(move |edge| {
            let now = unix_now();
            let entries: Vec<Value> = edge
                .certificates()?
                .iter()
                .filter(|v| !v.record.name.is_default())
                .flat_map(|v| {
                    let path = cert_path(edge, &v.record.name);
                    let r = &v.record;
                    v.serves.iter().map(move |host| {
                        json!({
                            "domain": host,
                            "ssl_enabled": true,
                            "cert_path": path,
                            // Naive, as the old route wrote it: UTC without the `Z`.
                            "expires": naive_seconds(r.not_after),
                            "days_until_expiry": (r.not_after - now).div_euclid(86_400),
                        })
                    })
                })
                .collect();
            Ok(Json(json!({ "certificates": entries })).into_response())
        })
        .await)
}

/// The certificate a handshake for `host` gets (exact, then wildcard), else the one named
/// after it; never the default.
fn for_host<'a>(views: &'a [CertView], host: &Domain) -> Option<&'a CertView> {
    let host_text = host.to_string();
    let named = CertName::for_host(&host_text).ok();
    let candidates = || views.iter().filter(|v| !v.record.name.is_default());
    candidates()
        .find(|v| v.serves.contains(&host_text))
        .or_else(|| candidates().find(|v| v.serving_covers(&host_text)))
        .or_else(|| candidates().find(|v| Some(&v.record.name) == named.as_ref()))
}

#[derive(Clone, Copy)]
enum Part {
    /// Chain then key, as HAProxy loads it.
    Combined,
    Key,
    Chain,
}

/// A PEM file of the certificate for `raw`, as an attachment.
async fn download(app: ApiState, raw: String, part: Part) -> Answer {
    let absent = match part {
        Part::Key => "Private key not found for domain",
        _ => "Certificate not found for domain",
    };
    let domain: Domain = raw.parse().map_err(|_| ApiError::not_found(absent))?;
    let host = domain.clone();
    let pem = app
        .read(move |edge| {
            let views = edge.certificates()?;
            let Some(view) = for_host(&views, &host) else {
                return Ok(Err(absent));
            };
            let chain = view.record.chain_pem.clone();
            let key = || match edge.certificate_key(&view.record.name) {
                Err(EdgeError::Certs(crate::tls::CertError::NotFound(_))) => Ok(None),
                other => other.map(Some),
            };
            Ok(match part {
                Part::Chain => Ok(chain),
                Part::Key => key()?.ok_or(absent),
                Part::Combined => key()?
                    .map(|k| format!("{chain}{k}"))
                    .ok_or("Certificate file not found"),
            })
        })
        .await?
        .map_err(ApiError::not_found)?;
    let (file, kind) = match part {
        Part::Combined => (format!("{domain}.pem"), "application/pem-certificate-chain"),
        Part::Key => (format!("{domain}_key.pem"), "application/x-pem-file"),
        Part::Chain => (
            format!("{domain}_cert.pem"),
            "application/pem-certificate-chain",
        ),
    };
    Ok((
        [
            (header::CONTENT_TYPE, kind.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
            // Key material must not sit in a cache on the way.
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
        pem,
    )
        .into_response())
}

pub async fn get_download(State(app): State<ApiState>, PathParam(domain): PathParam) -> Response {
    e1(download(app, domain, Part::Combined).await)
}

pub async fn get_key(State(app): State<ApiState>, PathParam(domain): PathParam) -> Response {
    e1(download(app, domain, Part::Key).await)
}

pub async fn get_cert(State(app): State<ApiState>, PathParam(domain): PathParam) -> Response {
    e1(download(app, domain, Part::Chain).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_patterns() {
        for ok in [
            "example.com",
            "*.example.com",
            "A-1.Example.ORG",
            "x.y.z.co",
        ] {
            assert!(bundle_name_ok(ok), "{ok}");
        }
        for bad in [
            "example", "-a.com", "a-.com", "a..com", "a.c0m", "a.c", "*.com", "a b.com", "",
        ] {
            assert!(!bundle_name_ok(bad), "{bad}");
        }
    }

    #[test]
    fn entries_are_quoted_as_python_did() {
        assert_eq!(repr(&json!(null)), "None");
        assert_eq!(repr(&json!(5)), "5");
        assert_eq!(repr(&json!({"a": [true, "x"]})), "{'a': [True, 'x']}");
    }
}
