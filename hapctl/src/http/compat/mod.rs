//! The routes of the Python edge manager hapctl replaces (`PEER-API.md` §1.1), with its status
//! codes and body shapes, so its clients (a PHP panel, shell scripts, monitors) switch without
//! a change. Each file translates one route group onto the same edge services as `/v1`;
//! nothing here renders or writes on its own. `docs/compat.md` lists every route and every
//! deliberate deviation.
//!
//! Shared here: the envelopes (E1 `{"status":"error","message"}`, E2
//! `{"status":"failed","error"}`, E3 `{"success":false,"error"}`, E4 `{"error"}` for 401),
//! the lenient body reading of the old routes (unknown fields ignored, `null` read as absent,
//! wrong types refused with a 400 naming the field), and the old time formats.

mod blocks;
mod certs;
mod config;
mod dns;
mod domains;
mod schemas;
mod security;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::{ApiError, ValuesBody};

pub use blocks::{
    clear_expired, delete_block, list_blocks, post_block, sync_blocks, temporary_block, BlockBody,
    IpBody, TemporaryBody,
};
pub use certs::{
    get_cert, get_download, get_key, post_bundle, post_certificates_request, post_renew, post_ssl,
    status, BundleRequest, CertificatesRequest, DomainRequest,
};
pub use config::{config_reload, default_page, health, regenerate, reload, root};
pub use dns::{post_dns_request, post_dns_verify, PendingDns};
pub use domains::{delete_domain, list_domains, post_domain, DomainBody, NameBody};
pub use security::get_stats;

/// Longest message in an answer (the old manager cut certbot's stderr at 800).
const MAX_MESSAGE: usize = 800;

pub(super) type Answer = Result<Response, ApiError>;

/// A JSON object body as the old routes read it: the extractor's refusal (415, 413, 408,
/// malformed JSON) is kept and answered in the route's envelope.
pub(super) type OldBody<T> = Result<ValuesBody<T>, ApiError>;

/// The fields a body has beyond those a route reads. They are ignored, as the old routes did,
/// but read as JSON values (`#[serde(flatten)]`): skipped unread, a body with invalid UTF-8, a
/// lone surrogate or an out-of-range number there would be accepted although it is not JSON.
pub(super) type Ignored = serde_json::Map<String, Value>;

/// The paths that answer in the old envelopes: every route of the old manager, and anything
/// else under `/api/`.
pub fn is_old_path(path: &str) -> bool {
    path.starts_with("/api/") || matches!(path, "/api" | "/health" | "/" | "/default-page")
}

pub(super) fn cap(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE) {
        Some((i, _)) => format!("{}…", &message[..i]),
        None => message.to_string(),
    }
}

/// The message of an error as the old clients read it: it names the refused field when the
/// message does not already.
fn message_of(e: &ApiError) -> String {
    match e.field.as_deref() {
        Some(field) if field != "body" && !e.message.contains(field) => {
            cap(&format!("{field}: {}", e.message))
        }
        _ => cap(&e.message),
    }
}

/// E1: `{"status":"error","message"}`.
pub(super) fn e1(answer: Answer) -> Response {
    answer.unwrap_or_else(|e| {
        (
            e.status,
            Json(json!({"status": "error", "message": message_of(&e)})),
        )
            .into_response()
    })
}

/// E2: `{"status":"failed","error"}` (`/api/regenerate`, `/api/reload`).
pub(super) fn e2(answer: Answer) -> Response {
    answer.unwrap_or_else(|e| {
        (
            e.status,
            Json(json!({"status": "failed", "error": message_of(&e)})),
        )
            .into_response()
    })
}

/// E3: `{"success":false,"error"}` (the DNS-01 routes).
pub(super) fn e3(answer: Answer) -> Response {
    answer.unwrap_or_else(|e| {
        (
            e.status,
            Json(json!({"success": false, "error": message_of(&e)})),
        )
            .into_response()
    })
}

/// E4, the old 401: `error` is a string.
pub fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": "Unauthorized - Invalid or missing API key"})),
    )
        .into_response()
}

/// A refusal before the old manager's handler ran (scope, audit trail), in E1.
pub fn refusal(e: ApiError) -> Response {
    e1(Err(e))
}

/// An unknown path or method under the old paths: JSON in E1 where Werkzeug sent HTML.
pub fn routing_error(status: StatusCode) -> Response {
    let message = if status == StatusCode::METHOD_NOT_ALLOWED {
        "Method Not Allowed: this route does not take that method"
    } else {
        "Not Found: no such route"
    };
    e1(Err(ApiError::new(status, "routing", message)))
}

pub(super) fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
}

pub(super) fn failed(message: impl Into<String>) -> ApiError {
    ApiError::internal(message)
}

/// Every failure the old manager could only answer 500 (a refused or failed apply, a reload
/// that did not take, the database) keeps its message and becomes a 500.
pub(super) fn as_500(e: ApiError) -> ApiError {
    if e.status.is_server_error() || e.status == StatusCode::UNPROCESSABLE_ENTITY {
        // The old 500s carried HAProxy's own words ("Safe reload failed: …"): the first one.
        let why = e
            .apply
            .as_ref()
            .and_then(|a| a.haproxy_messages.first())
            .map(|m| format!("{}: {m}", e.message));
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: why.unwrap_or(e.message.clone()),
            ..e
        }
    } else {
        e
    }
}

/// A string field as the old routes read it: absent and `null` are `None`; any other type is
/// refused naming the field (the old code failed on it with a 500).
pub(super) fn text(v: Option<&Value>, field: &str) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} must be a string"),
        )),
    }
}

/// A required string: absent, `null` and `""` give `missing` (the old `if not x` check).
pub(super) fn required(v: Option<&Value>, field: &str, missing: &str) -> Result<String, ApiError> {
    match text(v, field)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(bad(missing)),
    }
}

/// A Unix time as SQLite's `CURRENT_TIMESTAMP` wrote it: `YYYY-MM-DD HH:MM:SS`, UTC.
pub(super) fn sql_time(unix: i64) -> String {
    naive_seconds(unix).replacen('T', " ", 1)
}

/// A Unix time in UTC without the `Z`, to the second: `YYYY-MM-DDTHH:MM:SS`.
pub(super) fn naive_seconds(unix: i64) -> String {
    rfc3339(unix, false)
}

/// A Unix time as Python's naive `datetime.isoformat()`: `YYYY-MM-DDTHH:MM:SS.ffffff`, UTC.
pub(super) fn naive_iso(unix: i64) -> String {
    rfc3339(unix, true)
}

fn rfc3339(unix: i64, micros: bool) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix.max(0) as u64);
    let text = if micros {
        humantime::format_rfc3339_micros(t).to_string()
    } else {
        humantime::format_rfc3339_seconds(t).to_string()
    };
    text.trim_end_matches('Z').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_time_formats() {
        assert_eq!(sql_time(1_796_108_804), "2026-12-01 07:06:44");
        assert_eq!(naive_iso(1_796_109_104), "2026-12-01T07:11:44.000000");
    }

    #[test]
    fn strings_are_read_as_the_old_routes_did() {
        assert_eq!(text(None, "f").unwrap(), None);
        assert_eq!(text(Some(&Value::Null), "f").unwrap(), None);
        assert!(text(Some(&json!(5)), "domain")
            .unwrap_err()
            .message
            .contains("domain"));
        assert_eq!(
            required(Some(&json!("")), "f", "F is required")
                .unwrap_err()
                .message,
            "F is required"
        );
    }

    #[test]
    fn ignored_fields_must_still_be_json_and_known_ones_appear_once() {
        #[derive(serde::Deserialize, Debug)]
        struct B {
            #[serde(default)]
            a: Option<Value>,
            #[serde(flatten)]
            _other: Ignored,
        }
        let b: B = serde_json::from_str(r#"{"a":1,"x":{"y":[2]}}"#).unwrap();
        assert_eq!(b.a, Some(json!(1)));
        for bad in [
            r#"{"a":1,"x":"\ud800"}"#,
            r#"{"a":1,"x":1e999}"#,
            r#"{"a":1,"a":2}"#,
        ] {
            assert!(serde_json::from_str::<B>(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_slice::<B>(b"{\"x\":\"\xff\"}").is_err());
    }

    #[test]
    fn an_error_names_its_field() {
        let e = ApiError::invalid("servers[0].port", "must be a number from 1 to 65535");
        assert_eq!(
            message_of(&e),
            "servers[0].port: must be a number from 1 to 65535"
        );
    }
}
