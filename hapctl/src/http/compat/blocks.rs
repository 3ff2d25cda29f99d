//! `/api/blocked-ips` (list, block, unblock, sync) and `/api/security/temporary-block|
//! clear-expired` (`PEER-API.md` §1.2), over the block fast path: validated keys, runtime map
//! with read-back, no reload. `runtime_map_updated` is true when the running worker's map was
//! changed and read back; false when HAProxy had to reload to take it, or is not running.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::super::error::{ApiError, ValuesBody};
use super::super::ApiState;
use super::schemas;
use super::{as_500, bad, e1, naive_iso, required, sql_time, text, Answer, Ignored, OldBody};
use crate::blocks::{BlockChange, BlockReport, ChangeResult, Enforcement};
use crate::edge::Edge;
use crate::model::{BlockKey, Note, Ttl};

/// The old `missing_ips` list was cut at 50.
const MAX_MISSING: usize = 50;

fn updated(report: &BlockReport) -> bool {
    matches!(
        report.enforcement,
        Enforcement::Runtime | Enforcement::Unchanged
    )
}

/// A note as the old route defaulted it, parsed by the model.
fn note(v: Option<&Value>, field: &'static str, default: &str) -> Result<Note, ApiError> {
    let given = text(v, field)?;
    Note::parse(field, given.as_deref().unwrap_or(default))
        .map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// The address of a request: required, and a valid IP or CIDR (the old route stored anything).
fn ip(v: Option<&Value>) -> Result<(String, BlockKey), ApiError> {
    let raw = required(v, "ip_address", "IP address is required")?;
    let key = raw
        .parse::<BlockKey>()
        .map_err(|e| ApiError::invalid("ip_address", format!("Invalid IP address format: {e}")))?;
    Ok((raw, key))
}

/// A bare array, newest first.
pub async fn list_blocks(State(app): State<ApiState>) -> Response {
    e1(app
        .read(|edge| {
            let ids = edge.block_ids()?;
            let mut blocks = edge.blocks()?;
            let id = |key: &BlockKey| ids.get(&key.to_string()).copied();
            blocks.sort_by_key(|b| std::cmp::Reverse((b.created_at, id(&b.key))));
            let list: Vec<Value> = blocks
                .iter()
                .map(|b| {
                    json!({
                        "id": id(&b.key),
                        "ip_address": b.key,
                        "reason": b.reason.as_str(),
                        "blocked_at": sql_time(b.created_at),
                        // A temporary block had no author (NULL).
                        "blocked_by": Some(b.author.as_str()).filter(|a| !a.is_empty()),
                        "expiry_time": b.expires_at.map(naive_iso),
                    })
                })
                .collect();
            Ok(Json(list).into_response())
        })
        .await)
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct BlockBody {
    #[serde(default)]
    #[schema(schema_with = schemas::text, required = true)]
    ip_address: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::text)]
    reason: Option<Value>,
    #[serde(default)]
    #[schema(schema_with = schemas::text)]
    blocked_by: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

pub async fn post_block(State(app): State<ApiState>, body: OldBody<BlockBody>) -> Response {
    e1(block(app, body).await)
}

async fn block(app: ApiState, body: OldBody<BlockBody>) -> Answer {
    let ValuesBody(req) = body?;
    let (raw, key) = ip(req.ip_address.as_ref())?;
    let block = Edge::new_block(
        key,
        note(req.reason.as_ref(), "reason", "No reason provided")?,
        note(req.blocked_by.as_ref(), "blocked_by", "API")?,
        None,
    );
    let (results, report) = app
        .block_job(vec![BlockChange::Add(block)])
        .await
        .map_err(as_500)?;
    if results == [ChangeResult::Exists] {
        return Err(ApiError::conflict("IP address is already blocked"));
    }
    let id = app
        .read(move |edge| edge.block_id(&key.to_string()))
        .await?;
    Ok(Json(json!({
        "status": "success",
        "blocked_ip_id": id,
        "message": format!("IP {raw} has been blocked"),
        "runtime_map_updated": updated(&report),
    }))
    .into_response())
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct IpBody {
    #[serde(default)]
    #[schema(schema_with = schemas::text, required = true)]
    ip_address: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

pub async fn delete_block(State(app): State<ApiState>, body: OldBody<IpBody>) -> Response {
    e1(unblock(app, body).await)
}

async fn unblock(app: ApiState, body: OldBody<IpBody>) -> Answer {
    let ValuesBody(req) = body?;
    let (raw, key) = ip(req.ip_address.as_ref())?;
    let (results, report) = app
        .block_job(vec![BlockChange::Remove(key)])
        .await
        .map_err(as_500)?;
    if results == [ChangeResult::NotFound] {
        return Err(ApiError::not_found("IP address not found in blocked list"));
    }
    Ok(Json(json!({
        "status": "success",
        "message": format!("IP {raw} has been unblocked"),
        "runtime_map_updated": updated(&report),
    }))
    .into_response())
}

/// Rebuilds file and runtime map from the database, then reads the runtime map back: 200 when
/// every block is in it, 207 `partial` naming (up to 50 of) the missing ones.
pub async fn sync_blocks(State(app): State<ApiState>) -> Response {
    e1(sync(app).await)
}

async fn sync(app: ApiState) -> Answer {
    app.block_sync().await.map_err(as_500)?;
    let (wanted, live) = app
        .read(|edge| {
            let now = crate::clock::unix_now();
            let wanted: Vec<String> = edge
                .blocks()?
                .iter()
                .filter(|b| !b.is_expired(now))
                .map(|b| b.key.to_string())
                .collect();
            let live = edge.served_block_keys().map_err(|e| e.to_string());
            Ok((wanted, live))
        })
        .await?;
    let total = wanted.len();
    let live: std::collections::HashSet<String> = match live {
        Ok(keys) => keys.into_iter().collect(),
        Err(e) => {
            let body = json!({
                "status": "error",
                "message": format!("Could not read back the runtime map to verify the sync: {e}"),
                "map_file_updated": true,
                "runtime_map_synced": false,
                "total_ips": total,
            });
            return Ok((StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response());
        }
    };
    let missing: Vec<&String> = wanted.iter().filter(|k| !live.contains(*k)).collect();
    let synced = total - missing.len();
    let (status, word) = if missing.is_empty() {
        (StatusCode::OK, "success")
    } else {
        (StatusCode::MULTI_STATUS, "partial")
    };
    let body = json!({
        "status": word,
        "message": format!("Verified {synced}/{total} IPs present in the runtime map"),
        "total_ips": total,
        "synced_ips": synced,
        // The map is replaced whole (prepare/commit), so HAProxy took one entry per block.
        "accepted_commands": total,
        "missing_ips": missing.iter().take(MAX_MISSING).collect::<Vec<_>>(),
        "runtime_map_synced": missing.is_empty(),
    });
    Ok((status, Json(body)).into_response())
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct TemporaryBody {
    #[serde(default)]
    #[schema(schema_with = schemas::text, required = true)]
    ip_address: Option<Value>,
    /// `null` kept as a value: the old route had no default for it (it failed).
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = schemas::minutes)]
    duration_minutes: Option<Value>,
    /// Not read by the old route; taken (checked) when given.
    #[serde(default)]
    #[schema(ignore)]
    reason: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    _other: Ignored,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The duration as the old route took it (a number, 60 when absent), and as its messages
/// wrote it; it must last at least a second and at most 3650 days.
fn minutes(v: Option<&Value>) -> Result<(String, Ttl), ApiError> {
    let field = "duration_minutes";
    let n = match v {
        None => serde_json::Number::from(60),
        Some(Value::Number(n)) => n.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                field,
                "duration_minutes must be a number of minutes",
            ))
        }
    };
    let secs = n.as_f64().map(|m| (m * 60.0).ceil()).unwrap_or(-1.0);
    let ttl = if (1.0..=3650.0 * 86_400.0).contains(&secs) {
        format!("{}s", secs as u64).parse::<Ttl>().ok()
    } else {
        None
    };
    let ttl = ttl.ok_or_else(|| {
        ApiError::invalid(
            field,
            format!("duration_minutes {n}: must be more than 0 and at most 5256000 (3650 days)"),
        )
    })?;
    Ok((n.to_string(), ttl))
}

pub async fn temporary_block(
    State(app): State<ApiState>,
    body: OldBody<TemporaryBody>,
) -> Response {
    e1(temporary(app, body).await)
}

async fn temporary(app: ApiState, body: OldBody<TemporaryBody>) -> Answer {
    let ValuesBody(req) = body?;
    let (raw, key) = ip(req.ip_address.as_ref())?;
    if key.is_network() || raw.contains('/') {
        return Err(bad(
            "Invalid IP address format: give one address, not a network",
        ));
    }
    let (shown, ttl) = minutes(req.duration_minutes.as_ref())?;
    let block = Edge::new_block(
        key,
        note(
            req.reason.as_ref(),
            "reason",
            &format!("Temporary block for {shown} minutes"),
        )?,
        Note::parse("blocked_by", "")?,
        Some(ttl),
    );
    let expires = block.expires_at.map(naive_iso);
    let (_, report) = app
        .block_job(vec![BlockChange::Put(block)])
        .await
        .map_err(as_500)?;
    Ok(Json(json!({
        "status": "success",
        "message": format!("IP {raw} temporarily blocked for {shown} minutes"),
        "expires_at": expires,
        "runtime_map_updated": updated(&report),
    }))
    .into_response())
}

/// Removes the expired blocks now (the daemon also lifts them by itself, so this usually finds
/// none).
pub async fn clear_expired(State(app): State<ApiState>) -> Response {
    e1(async {
        let (_, report) = app.block_job(Vec::new()).await.map_err(as_500)?;
        let failures: &[String] = if report.runtime_error.is_some() {
            &report.expired
        } else {
            &[]
        };
        Ok(Json(json!({
            "status": if failures.is_empty() { "success" } else { "partial" },
            "message": format!("Cleared {} expired IP blocks", report.expired.len()),
            "cleared_ips": report.expired,
            "runtime_map_failures": failures,
        }))
        .into_response())
    }
    .await)
}
