//! The `/v1/certificates` routes and a domain's HTTPS policy: thin handlers over the
//! certificate services (`edge/certs.rs`). Certificate work runs on a fresh `Edge` on a
//! blocking thread (an ACME order is seconds of network); ACME orders also take a slot of the
//! daemon's order gate. No answer carries a private key: `CertView` and `InstallReport` hold
//! none (only the edge manager's download routes send one).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::{ApiError, PathParam, ValuesBody};
use super::ApiState;
use crate::contract::{ImportRequest, OrderRequest};
use crate::edge::{CertView, Edge, EdgeError, EdgeStatus};
use crate::model::CertName;
use crate::tls::InstallReport;

fn cert_name(name: &str) -> Result<CertName, ApiError> {
    Ok(name.parse::<CertName>()?)
}

/// Whether `name` is not installed yet (the answer is then 201).
fn is_new(edge: &Edge, name: &CertName) -> Result<bool, EdgeError> {
    Ok(!edge.has_certificate(name)?)
}

fn installed(report: InstallReport, created: bool) -> Response {
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(report)).into_response()
}

pub async fn list(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    app.read(|edge| Ok(Json(json!({ "certificates": edge.certificates()? }))))
        .await
}

pub async fn show(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<CertView>, ApiError> {
    let name = cert_name(&name)?;
    app.read(move |edge| edge.certificate(&name))
        .await
        .map(Json)
}

pub async fn put(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
    ValuesBody(req): ValuesBody<ImportRequest>,
) -> Result<Response, ApiError> {
    let name = cert_name(&name)?;
    let (report, created) = app
        .with_new_edge(move |edge| {
            let created = is_new(edge, &name)?;
            let report = edge.import_certificate(&name, req.pem.as_bytes(), &req.names)?;
            Ok((report, created))
        })
        .await?;
    Ok(installed(report, created))
}

pub async fn request(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
    ValuesBody(req): ValuesBody<OrderRequest>,
) -> Result<Response, ApiError> {
    let name = cert_name(&name)?;
    let (report, created) = app
        .with_acme(move |edge| {
            let created = is_new(edge, &name)?;
            let report = edge.request_certificate(&name, &req.names, req.dns_01)?;
            Ok((report, created))
        })
        .await?;
    Ok(installed(report, created))
}

/// A failed renewal is a 502 (the current certificate keeps serving, the row records the
/// error and when to retry); a certificate that is not from ACME is a 400.
pub async fn renew(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Response, ApiError> {
    let name = cert_name(&name)?;
    let outcome = app
        .with_acme(move |edge| edge.renew_certificate(&name))
        .await?;
    app.services()
        .record_renewals(std::slice::from_ref(&outcome));
    match &outcome.error {
        None => Ok(Json(outcome).into_response()),
        Some(e) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "renewal_failed",
            format!(
                "the renewal of {} failed; the current certificate keeps serving: {e}",
                outcome.name
            ),
        )),
    }
}

/// `POST /v1/renewals`: renews every ACME certificate that is due (`hapctl cert renew --all`),
/// one order at a time: `{renewals: [{name, report, error}]}`, empty when none is due. A
/// failed one keeps serving its current certificate and says why in its `error`.
pub async fn renew_due(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let outcomes = app.with_acme(|edge| edge.renew_due(false)).await?;
    app.services().record_renewals(&outcomes);
    Ok(Json(json!({ "renewals": outcomes })).into_response())
}

pub async fn delete(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<InstallReport>, ApiError> {
    let name = cert_name(&name)?;
    app.with_new_edge(move |edge| edge.remove_certificate(&name))
        .await
        .map(Json)
}

/// The certificates part of `GET /v1/status`: how many, which expires first, which fail to
/// renew and why.
pub fn summary(status: &EdgeStatus, now: i64) -> Value {
    let soonest = status.soonest_expiry().map(|r| {
        json!({
            "name": r.name,
            "not_after": r.not_after,
            "expires_in_seconds": r.not_after - now,
        })
    });
    let failing: Vec<Value> = status
        .failing_certificates()
        .map(|r| {
            json!({
                "name": r.name,
                "last_error": r.last_error,
                "failures": r.failures,
                "retry_at": r.retry_at,
            })
        })
        .collect();
    json!({"count": status.certificates.len(), "soonest_expiry": soonest, "failing": failing})
}
