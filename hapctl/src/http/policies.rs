//! Per-domain policies that are runtime map changes (no reload): the HTTPS policy and
//! suspension, queued for the apply worker like domain changes (coalesced with them).

use axum::extract::State;
use axum::response::Response;

use super::error::{ApiError, Body, PathParam};
use super::ApiState;
use crate::contract::HttpsRequest;
use crate::edge::DomainChange;
use crate::model::{Domain, Hsts, HttpsPolicy, Redirect, MAX_HSTS_AGE};

/// The policy the request asks for, each refusal naming its field.
fn https_policy(request: HttpsRequest) -> Result<HttpsPolicy, ApiError> {
    let redirect = match request.redirect.as_str() {
        "off" => Redirect::Off,
        "301" => Redirect::Permanent301,
        "308" => Redirect::Permanent308,
        other => {
            return Err(ApiError::invalid(
                "redirect",
                format!(
                    "redirect {:?}: must be \"off\", \"301\" or \"308\"",
                    crate::model::bounded(other)
                ),
            ))
        }
    };
    let hsts = match request.hsts_max_age {
        None if request.hsts_include_subdomains => {
            return Err(ApiError::invalid(
                "hsts_include_subdomains",
                "hsts_include_subdomains needs hsts_max_age (it is part of the HSTS header)",
            ))
        }
        None => None,
        Some(age) if age == 0 || age > u64::from(MAX_HSTS_AGE) => {
            return Err(ApiError::invalid(
                "hsts_max_age",
                format!("hsts_max_age {age}: must be 1 to {MAX_HSTS_AGE} seconds (two years)"),
            ))
        }
        Some(age) => Some(
            Hsts::new(age as u32, request.hsts_include_subdomains)
                .map_err(|e| e.in_field("hsts_max_age"))?,
        ),
    };
    Ok(HttpsPolicy {
        redirect,
        hsts,
        alt_svc: request.alt_svc,
    })
}

/// A map change at runtime: no `haproxy -c`, no reload (the apply report says so).
pub async fn put_https(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
    Body(req): Body<HttpsRequest>,
) -> Result<Response, ApiError> {
    let domain: Domain = name.parse()?;
    let policy = https_policy(req)?;
    let change = DomainChange::Https(domain.clone(), policy);
    let (report, _) = super::v1::change_existing(&app, &domain, change).await?;
    super::v1::applied(report, None)
}

/// `POST /v1/domains/{name}/suspend` and `/resume`: the 503 page on or off, at runtime.
async fn suspension(app: ApiState, name: String, suspended: bool) -> Result<Response, ApiError> {
    let domain: Domain = name.parse()?;
    let change = DomainChange::Suspend(domain.clone(), suspended);
    let (report, _) = super::v1::change_existing(&app, &domain, change).await?;
    super::v1::applied(report, None)
}

pub async fn post_suspend(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Response, ApiError> {
    suspension(app, name, true).await
}

pub async fn post_resume(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Response, ApiError> {
    suspension(app, name, false).await
}
