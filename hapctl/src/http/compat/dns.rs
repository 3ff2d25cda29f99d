//! The edge manager's two-call DNS-01 flow (`PEER-API.md` §1.2
//! `/api/ssl/dns-challenge/request|verify`, envelope E3): the first call orders `*.<base>`
//! and answers the TXT value, the caller publishes `_acme-challenge.<base>`, the second call
//! has the CA check it and installs `wildcard.<base>`. Only the wildcard is ordered, not the
//! apex, as before.
//!
//! The order waits between the calls in the daemon's memory, keyed by base domain: at most
//! 16, 300 s each (the old hook's wait), so abandoned flows cannot pile up; a restart forgets
//! them (request again). When the CA still holds a valid authorization for the name, no
//! record is needed: `challenge_token` is then `""` and verify just completes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::super::error::{ApiError, ValuesBody};
use super::super::ApiState;
use super::certs::{cert_path, label_ok, DomainRequest};
use super::{bad, e3, failed, Answer, OldBody};
use crate::model::{CertName, Domain};
use crate::tls::acme::PendingOrder;

const MAX_PENDING: usize = 16;
const PENDING_FOR: Duration = Duration::from_secs(300);

/// The DNS routes' pattern for the base domain: dot-separated labels.
fn dns_base_ok(base: &str) -> bool {
    base.split('.').all(|l| label_ok(l, usize::MAX))
}

/// DNS-01 orders between their two calls, by base domain: bounded in number and age, so
/// abandoned flows cannot pile up.
#[derive(Default)]
pub struct PendingDns(Mutex<Vec<(String, Instant, PendingOrder)>>);

impl PendingDns {
    fn fresh(&self) -> std::sync::MutexGuard<'_, Vec<(String, Instant, PendingOrder)>> {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|(_, since, _)| since.elapsed() < PENDING_FOR);
        list
    }

    /// Whether an order for `base` can be kept (a new request for it replaces the old one).
    fn has_room(&self, base: &str) -> bool {
        let list = self.fresh();
        list.len() < MAX_PENDING || list.iter().any(|(b, _, _)| b == base)
    }

    fn insert(&self, base: String, order: PendingOrder) -> bool {
        let mut list = self.fresh();
        list.retain(|(b, _, _)| *b != base);
        if list.len() >= MAX_PENDING {
            return false;
        }
        list.push((base, Instant::now(), order));
        true
    }

    fn take(&self, base: &str) -> Option<PendingOrder> {
        let mut list = self.fresh();
        let i = list.iter().position(|(b, _, _)| b == base)?;
        Some(list.swap_remove(i).2)
    }
}

/// `*.<base>` and its certificate name from the DNS routes' `domain` (with or without `*.`).
fn wildcard_of(domain: Option<&str>) -> Result<(Domain, CertName), ApiError> {
    let raw = domain
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| bad("Domain is required"))?;
    let base = raw.strip_prefix("*.").unwrap_or(raw);
    if !dns_base_ok(base) {
        return Err(bad("Invalid domain format"));
    }
    let wildcard: Domain = format!("*.{base}").parse()?;
    let name = CertName::for_host(&wildcard.to_string())?;
    Ok((wildcard, name))
}

fn too_many() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many",
        format!("{MAX_PENDING} DNS challenges are pending: verify one, or wait until one expires ({} s)", PENDING_FOR.as_secs()),
    )
}

/// `POST /api/ssl/dns-challenge/request`: orders `*.<base>` and hands back the TXT value the
/// caller publishes at `_acme-challenge.<base>`.
pub async fn post_dns_request(
    State(app): State<ApiState>,
    body: OldBody<DomainRequest>,
) -> Response {
    e3(dns_request(app, body).await)
}

async fn dns_request(app: ApiState, body: OldBody<DomainRequest>) -> Answer {
    let ValuesBody(req) = body?;
    let (wildcard, _) = wildcard_of(req.domain.as_deref())?;
    let base = wildcard.name().to_string();
    // Checked before ordering too, so a full table does not cost the CA an order.
    if !app.dns().has_room(&base) {
        return Err(too_many());
    }
    let pending = app
        .with_acme(move |edge| edge.begin_dns_order(&[wildcard]))
        .await?;
    let token = pending
        .dns_records()
        .first()
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    if !app.dns().insert(base.clone(), pending) {
        return Err(too_many());
    }
    Ok(
        Json(json!({"success": true, "data": {"challenge_token": token, "base_domain": base}}))
            .into_response(),
    )
}

/// `POST /api/ssl/dns-challenge/verify`: the CA checks the record, the certificate
/// `wildcard.<base>` is installed.
pub async fn post_dns_verify(
    State(app): State<ApiState>,
    body: OldBody<DomainRequest>,
) -> Response {
    e3(dns_verify(app, body).await)
}

async fn dns_verify(app: ApiState, body: OldBody<DomainRequest>) -> Answer {
    let ValuesBody(req) = body?;
    let (wildcard, name) = wildcard_of(req.domain.as_deref())?;
    let base = wildcard.name().to_string();
    let pending = app.dns().take(&base).ok_or_else(|| {
        bad(format!(
            "No pending DNS challenge for {base}: call /api/ssl/dns-challenge/request first (a challenge is kept {} s)",
            PENDING_FOR.as_secs()
        ))
    })?;
    let path = app
        .with_acme(move |edge| {
            let report = edge.finish_dns_order(&name, pending)?;
            Ok(cert_path(edge, &report.name))
        })
        .await
        .map_err(|e| failed(e.message))?;
    Ok(Json(json!({"success": true, "data": {
        "domain": wildcard,
        "cert_path": path,
        "message": "Wildcard certificate obtained and HAProxy updated",
    }}))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_base_pattern() {
        for ok in ["example.com", "localhost", "a1-b.c"] {
            assert!(dns_base_ok(ok), "{ok}");
        }
        for bad in ["", "-a.com", "a_b.com", "a..b", "a.com."] {
            assert!(!dns_base_ok(bad), "{bad}");
        }
    }
}
