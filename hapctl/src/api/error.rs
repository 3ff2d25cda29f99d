//! The API's one error shape, `{"error": {"code", "message", "field"}}`, and how every failure
//! maps onto it; plus the JSON body extractor whose rejections use the same shape.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::apply::{ApplyError, ApplyReport, Outcome};
use crate::edge::EdgeError;
use crate::model::Invalid;

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
            Outcome::Rejected => (StatusCode::UNPROCESSABLE_ENTITY, "rejected"),
            Outcome::ValidatorUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "validator_unavailable")
            }
            Outcome::ReloadFailedRolledBack => {
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
        let mut body = json!({
            "error": {"code": self.code, "message": self.message, "field": self.field}
        });
        if let Some(apply) = self.apply {
            body["apply"] = serde_json::to_value(apply).unwrap_or_default();
        }
        (self.status, Json(body)).into_response()
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> ApiError {
        ApiError::invalid(e.field, e.to_string())
    }
}

impl From<EdgeError> for ApiError {
    fn from(e: EdgeError) -> ApiError {
        match &e {
            EdgeError::Apply(ApplyError::NotFound(m)) => ApiError::not_found(m.clone()),
            EdgeError::Deliver(d) if d.is_not_found() => ApiError::not_found(e.to_string()),
            _ => ApiError::internal(e.to_string()),
        }
    }
}

/// A JSON request body; a refused body answers in the API's error shape (415 wrong content
/// type, 413 too large, 400 invalid with the field's JSON path).
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(rejection) => Err(reject(rejection)),
        }
    }
}

fn reject(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let text = rejection.body_text();
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with `Content-Type: application/json`",
        ),
        JsonRejection::JsonDataError(_) => {
            // "Failed to deserialize ... : servers[0].address: invalid server address ..."
            let detail = text.split_once(": ").map_or(text.as_str(), |(_, d)| d);
            let field = detail.split_once(": ").map(|(path, _)| path.to_string());
            ApiError {
                field,
                ..ApiError::new(StatusCode::BAD_REQUEST, "invalid", detail.to_string())
            }
        }
        JsonRejection::JsonSyntaxError(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", text)
        }
        _ if status == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            "too_large",
            "the request body is larger than the limit (1 MiB)",
        ),
        _ => ApiError::new(status, "bad_request", text),
    }
}
