//! The API's one error shape: `{"error": {"code", "message", "field"}}`, with the apply
//! behind the failure when there is one.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorAnswer {
    #[schema(inline)]
    pub error: ErrorDetail,
    /// The apply report of a refused or failed apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub apply: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable: `invalid`, `not_found`, `conflict`, `rejected`, a bundle's problem...
    pub code: String,
    pub message: String,
    /// The JSON path of the refused field, when one is.
    pub field: Option<String>,
}
