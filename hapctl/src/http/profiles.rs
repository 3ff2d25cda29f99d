//! `PUT /v1/domains/{name}/profiles`: a domain's path-protection profiles and their
//! thresholds, a runtime map change (no reload).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::{ApiError, PathParam, ValuesBody};
use super::ApiState;
use crate::contract::ProfilesRequest;
use crate::edge::ProtectionsChange;
use crate::model::{Domain, DomainProtections, PostLimit, ProtectProfile};

/// The protections the request asks for, each refusal naming its field.
fn protections(request: ProfilesRequest) -> Result<DomainProtections, ApiError> {
    let mut p = DomainProtections::default();
    for name in &request.profiles {
        let profile: ProtectProfile = name
            .parse()
            .map_err(|e: crate::model::Invalid| ApiError::from(e.in_field("profiles")))?;
        p.profiles.insert(profile);
    }
    p.wp_admin_gate = request.wp_admin_gate.unwrap_or(true);
    let posts = |field, n: Option<u64>, default| {
        n.map_or(Ok(default), |n| PostLimit::new(field, n))
            .map_err(ApiError::from)
    };
    p.wp_login_posts = posts("wp_login_posts", request.wp_login_posts, p.wp_login_posts)?;
    p.wp_xmlrpc_posts = posts(
        "wp_xmlrpc_posts",
        request.wp_xmlrpc_posts,
        p.wp_xmlrpc_posts,
    )?;
    Ok(p)
}

/// Replaces the domain's profiles; answers with them and the apply report.
pub async fn put_profiles(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
    ValuesBody(req): ValuesBody<ProfilesRequest>,
) -> Result<Response, ApiError> {
    let domain: Domain = name.parse()?;
    let change = ProtectionsChange::Replace(protections(req)?);
    let (report, after) = app
        .with_new_edge(move |edge| edge.set_protections(&domain, change))
        .await?;
    app.services().metrics().apply(&report);
    if !report.outcome.is_success() {
        return Err(ApiError::from_apply(report));
    }
    Ok(Json(
        json!({"profiles": after.profiles, "wp_admin_gate": after.wp_admin_gate,
            "wp_login_posts": after.wp_login_posts, "wp_xmlrpc_posts": after.wp_xmlrpc_posts,
            "apply": report}),
    )
    .into_response())
}
