//! `/v1/trusted-proxies`: the proxies whose forwarding headers name the real client
//! (`hapctl proxy add|rm|ls`), through the same parsers and edge services as the CLI; each
//! change is one safe apply.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::{ApiError, PathParam, ValuesBody};
use super::limits::run_apply;
use super::ApiState;
use crate::contract::TrustRequest;
use crate::model::{Invalid, ProxyNet, ProxyPreset};

/// `{proxies: [{net, preset}]}`: `preset` names the preset a range came with, else null.
pub async fn list(State(app): State<ApiState>) -> Result<Response, ApiError> {
    let proxies = app.read(|edge| edge.trusted_proxies()).await?;
    let shown: Vec<_> = proxies
        .iter()
        .map(|(net, preset)| json!({"net": net, "preset": preset}))
        .collect();
    Ok(Json(json!({ "proxies": shown })).into_response())
}

fn parse_net(field: &str, text: &str) -> Result<ProxyNet, ApiError> {
    text.parse()
        .map_err(|e: Invalid| ApiError::invalid(field, e.to_string()))
}

fn parse_preset(text: &str) -> Result<ProxyPreset, ApiError> {
    text.parse()
        .map_err(|e: Invalid| ApiError::invalid("preset", e.to_string()))
}

pub async fn post(
    State(app): State<ApiState>,
    ValuesBody(req): ValuesBody<TrustRequest>,
) -> Result<Response, ApiError> {
    // Each field given is parsed first, so a refusal names the field that is wrong.
    let net = req
        .net
        .as_deref()
        .map(|n| parse_net("net", n))
        .transpose()?;
    let preset = req.preset.as_deref().map(parse_preset).transpose()?;
    let nets = match req.nets {
        Some(list) if list.is_empty() => {
            return Err(ApiError::invalid(
                "nets",
                "nets is empty; a preset needs at least one range (leave nets out for the list shipped with hapctl)",
            ))
        }
        Some(list) => Some(
            list.iter()
                .enumerate()
                .map(|(i, n)| parse_net(&format!("nets[{i}]"), n))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    match (net, preset, nets) {
        (Some(net), None, None) => {
            run_apply(app, move |edge| {
                edge.trust_proxy(&net).map(|(report, _)| Ok(report))
            })
            .await
        }
        (None, Some(preset), nets) => {
            run_apply(app, move |edge| {
                edge.trust_preset(preset, nets).map(|(report, _)| Ok(report))
            })
            .await
        }
        (Some(_), Some(_), _) => Err(ApiError::invalid(
            "preset",
            "give net or preset, not both",
        )),
        (Some(_), None, Some(_)) => Err(ApiError::invalid(
            "nets",
            "nets is the list of a preset: give it with preset, or net alone",
        )),
        (None, None, _) => Err(ApiError::invalid(
            "net",
            "give net (an IP or CIDR), or preset (with nets, or without for the list shipped with hapctl)",
        )),
    }
}

/// Stops trusting one network (404 when it is not trusted).
pub async fn delete(
    State(app): State<ApiState>,
    PathParam(key): PathParam,
) -> Result<Response, ApiError> {
    let net = parse_net("key", &key)?;
    run_apply(app, move |edge| edge.distrust_proxy(&net).map(Ok)).await
}

/// Stops trusting every range of a preset.
pub async fn delete_preset(
    State(app): State<ApiState>,
    PathParam(preset): PathParam,
) -> Result<Response, ApiError> {
    let preset = parse_preset(&preset)?;
    run_apply(app, move |edge| edge.distrust_preset(preset).map(Ok)).await
}
