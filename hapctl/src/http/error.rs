//! The API's one error shape, `{"error": {"code", "message", "field"}}`, and how every failure
//! maps onto it; plus the JSON body extractor whose rejections use the same shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::apply::{ApplyError, ApplyOutcome, ApplyReport};
use crate::contract::{ErrorAnswer, ErrorDetail, QueryError};
use crate::daemon::JobError;
use crate::edge::{EdgeError, HaproxyConflict};
use crate::model::Invalid;
use crate::tls::CertError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    /// The apply behind the failure, when there is one.
    pub apply: Option<Box<ApplyReport>>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            apply: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            field: Some(field.to_string()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
        }
    }

    /// An apply that did not succeed, with the status that says why.
    pub fn from_apply(report: ApplyReport) -> ApiError {
        let (status, code) = match report.outcome {
            ApplyOutcome::Rejected => (StatusCode::UNPROCESSABLE_ENTITY, "rejected"),
            ApplyOutcome::ValidatorUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "validator_unavailable")
            }
            ApplyOutcome::ReloadFailedRolledBack => {
                (StatusCode::SERVICE_UNAVAILABLE, "reload_failed_rolled_back")
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "rollback_failed"),
        };
        ApiError {
            apply: Some(Box::new(report.clone())),
            ..ApiError::new(status, code, report.message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Bounded: a message may quote hostile input, and a field may be a hostile key.
        let shorten = |s: &str| {
            if s.len() > 600 {
                crate::model::bounded(s)
            } else {
                s.to_string()
            }
        };
        let body = ErrorAnswer {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: shorten(&self.message),
                field: self.field.as_deref().map(shorten),
            },
            apply: self
                .apply
                .map(|apply| serde_json::to_value(apply).unwrap_or_default()),
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> ApiError {
        ApiError::invalid(e.field, e.to_string())
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> ApiError {
        ApiError::invalid(&e.field, e.message)
    }
}

impl From<EdgeError> for ApiError {
    fn from(e: EdgeError) -> ApiError {
        ApiError::from_edge(&e)
    }
}

/// A worker's refusal keeps its status (a missing domain is a 404, a refused bundle a 400);
/// only a worker that is gone is the daemon's own 500.
impl From<JobError> for ApiError {
    fn from(e: JobError) -> ApiError {
        match e {
            JobError::Edge(e) => ApiError::from_edge(&e),
            JobError::Gone(why) => ApiError::internal(why),
        }
    }
}

impl ApiError {
    fn from_edge(e: &EdgeError) -> ApiError {
        match e {
            EdgeError::Apply(ApplyError::NotFound(m)) => ApiError::not_found(m.clone()),
            EdgeError::Deliver(d) if d.is_not_found() => ApiError::not_found(e.to_string()),
            EdgeError::Certs(c) => ApiError::from_cert(c),
            EdgeError::Fleet(f) => ApiError::from_fleet(f),
            _ if e.haproxy_conflict() == Some(HaproxyConflict::AlreadyRunning) => {
                ApiError::new(StatusCode::CONFLICT, "already_running", e.to_string())
            }
            _ if e.haproxy_conflict() == Some(HaproxyConflict::NotRunning) => {
                ApiError::new(StatusCode::CONFLICT, "not_running", e.to_string())
            }
            _ => ApiError::internal(e.to_string()),
        }
    }
}

impl ApiError {
    /// etcd down is a 503 (nothing changed, retry later); a concurrent change of the same
    /// object a 409; a change published but not yet applied here a 504.
    fn from_fleet(e: &crate::fleet::FleetError) -> ApiError {
        use crate::fleet::FleetError as F;
        let (status, code) = match e {
            F::Unreachable(_) => (StatusCode::SERVICE_UNAVAILABLE, "etcd_unreachable"),
            F::Conflict(..) | F::Behind { .. } => (StatusCode::CONFLICT, "conflict"),
            F::NotPublished(_) | F::AlreadyPublished(_) => (StatusCode::CONFLICT, "fleet_state"),
            F::NoFleet => (StatusCode::CONFLICT, "no_fleet"),
            F::NotApplied { .. } => (StatusCode::GATEWAY_TIMEOUT, "not_applied"),
            F::Unchecked(_) => (StatusCode::SERVICE_UNAVAILABLE, "validator_unavailable"),
            F::Etcd(_) | F::Setup(_) => (StatusCode::BAD_GATEWAY, "etcd"),
            F::Seal(_) => (StatusCode::CONFLICT, "fleet_key"),
            F::Busy { .. } => (StatusCode::CONFLICT, "in_progress"),
        };
        ApiError::new(status, code, e.to_string())
    }

    /// A refused bundle names its problem with the bundle's stable code (`key_mismatch`,
    /// `chain_misordered`…) against the `pem` field; a CA failure is the CA's (502), a
    /// certificate written but not served is HAProxy's (503).
    fn from_cert(e: &CertError) -> ApiError {
        match e {
            CertError::Bundle(b) => ApiError {
                field: Some("pem".into()),
                ..ApiError::new(StatusCode::BAD_REQUEST, b.code(), b.to_string())
            },
            CertError::Refused(m) => ApiError::new(StatusCode::BAD_REQUEST, "refused", m.clone()),
            CertError::NotFound(m) => ApiError::not_found(m.clone()),
            CertError::Acme(m) => ApiError::new(StatusCode::BAD_GATEWAY, "acme", m.clone()),
            CertError::NotServed { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_served", e.to_string())
            }
            _ => ApiError::internal(e.to_string()),
        }
    }
}

/// How long a request body may take to arrive.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A JSON request body: one object. A refused body answers in the API's error shape: 415
/// without a JSON content type, 413 over the limit, 400 naming the JSON path of the field.
pub struct Body<T>(pub T);

/// A JSON object body whose lists hold plain values (`"names": ["a.example"]`), which `Body`
/// refuses: its nested check exists because serde reads a struct from a list, field by
/// position. Only for types with no struct below the top level, where no list can be read as
/// one. A `null` body is accepted only when `T` accepts it (an `Option`).
pub struct ValuesBody<T>(pub T);

/// A JSON request body that is one object or a list of objects (`[i].field` in errors);
/// `listed` says which was sent.
pub struct BodyList<T> {
    pub items: Vec<T>,
    pub listed: bool,
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = json_bytes(req, state).await?;
        check_top(&bytes, false)?;
        let value = typed(&bytes)?;
        check_nested(&bytes)?;
        Ok(Body(value))
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ValuesBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = json_bytes(req, state).await?;
        if bytes.trim_ascii() != b"null" {
            check_top(&bytes, false)?;
        }
        Ok(ValuesBody(typed(&bytes)?))
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for BodyList<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = json_bytes(req, state).await?;
        let listed = check_top(&bytes, true)?;
        let items = if listed {
            typed(&bytes)?
        } else {
            vec![typed(&bytes)?]
        };
        check_nested(&bytes)?;
        Ok(BodyList { items, listed })
    }
}

/// The body's bytes, from a JSON request that arrived in time and within the size limit.
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    if !is_json(&req) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with `Content-Type: application/json`",
        ));
    }
    bounded_body(req, state).await
}

/// Whether the request says its body is JSON (`application/json` or `application/*+json`).
pub fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        })
}

/// The body's bytes, within the size limit and in time (what every body extractor reads).
pub async fn bounded_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    // Refused before reading (and before a `100 Continue`) when it announces too much.
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > super::BODY_LIMIT as u64) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the request body is larger than the limit (1 MiB)",
        ));
    }
    // A client that stops sending its body does not hold a task forever.
    let read = tokio::time::timeout(BODY_TIMEOUT, Bytes::from_request(req, state))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the request body did not arrive in time",
            )
        })?;
    let bytes = read.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                r.status(),
                "too_large",
                "the request body is larger than the limit (1 MiB)",
            )
        } else {
            ApiError::new(r.status(), "bad_request", r.body_text())
        }
    })?;
    Ok(bytes)
}

/// The body is an object (or, when `list_ok`, a list): serde would otherwise read a top-level
/// array as a struct, field by position. Returns whether it is a list.
fn check_top(bytes: &[u8], list_ok: bool) -> Result<bool, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(false),
        Some(b'[') if list_ok => Ok(true),
        _ => {
            if let Err(e) = serde_json::from_slice::<Value>(bytes) {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_json",
                    format!("the body is not valid JSON: {e}"),
                ));
            }
            let want = if list_ok {
                "a JSON object or a list of objects"
            } else {
                "a JSON object"
            };
            Err(ApiError::invalid(
                "body",
                format!("the body must be {want}"),
            ))
        }
    }
}

/// After the typed parse succeeded: every array in the body holds objects (an array of
/// values read as a struct would have been accepted field by position).
fn check_nested(bytes: &[u8]) -> Result<(), ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    match array_of_non_objects(&value, String::new()) {
        Some(path) => Err(ApiError::invalid(
            &path,
            format!("{path} must be a list of JSON objects"),
        )),
        None => Ok(()),
    }
}

/// The path of the first array holding something other than objects.
fn array_of_non_objects(value: &Value, path: String) -> Option<String> {
    match value {
        Value::Array(items) => {
            if !items.iter().all(Value::is_object) {
                return Some(if path.is_empty() { "body".into() } else { path });
            }
            items
                .iter()
                .enumerate()
                .find_map(|(i, v)| array_of_non_objects(v, format!("{path}[{i}]")))
        }
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let key = crate::model::bounded(k);
            array_of_non_objects(
                v,
                if path.is_empty() {
                    key
                } else {
                    format!("{path}.{key}")
                },
            )
        }),
        _ => None,
    }
}

/// Deserializes with the path of a refused field (`servers[0].address`).
fn typed<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = typed_from(de)?;
    // Anything after the value (`{…}x`, `{…}{…}`) makes the body not JSON.
    de.end().map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    Ok(value)
}

fn typed_from<'de, T: DeserializeOwned>(
    de: &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        // "expected struct PutDomainRequest" says nothing to a client.
        let message = match message.find("expected struct ") {
            Some(i) => format!("{}expected a JSON object", &message[..i]),
            None => message,
        };
        // Not JSON at all (a syntax error, a cut body, invalid UTF-8, a number out of range):
        // `invalid_json`, naming the field when the parser was inside one.
        if e.inner().is_syntax() || e.inner().is_eof() {
            let at = (path != "." && path != "?").then_some(path);
            return ApiError {
                field: at,
                ..ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_json",
                    format!("the body is not valid JSON: {}", e.inner()),
                )
            };
        }
        // A missing field is reported at its parent: name it from the message.
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next());
        let field = match (path.as_str(), missing) {
            ("." | "?", Some(name)) => name.to_string(),
            ("." | "?", None) => "body".to_string(),
            (parent, Some(name)) => format!("{parent}.{name}"),
            (at, None) => at.to_string(),
        };
        ApiError::invalid(&field, format!("{field}: {message}"))
    })
}

/// A path parameter; a refused one (bad percent-encoding, invalid UTF-8) answers in the API's
/// error shape.
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(p)| PathParam(p))
            .map_err(|r| {
                ApiError::invalid(
                    "path",
                    format!("the path parameter is not valid: {}", r.body_text()),
                )
            })
    }
}
