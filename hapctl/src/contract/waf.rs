//! `POST /v1/waf/test`: a request evaluated against the rules without being sent.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;
use crate::model::{Domain, WafPolicy};

/// The request to evaluate, and the policy to score it under (as in the domain API).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WafTestRequest {
    /// a path and query or an http:// or https:// URL
    pub url: String,
    #[serde(default = "get")]
    pub method: String,
    #[serde(default)]
    #[schema(inline)]
    pub headers: Vec<WafTestHeader>,
    pub body: Option<String>,
    #[schema(schema_with = schemas::string)]
    pub domain: Option<Domain>,
    #[schema(schema_with = schemas::waf_policy)]
    pub policy: Option<WafPolicy>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WafTestHeader {
    pub name: String,
    pub value: String,
}

fn get() -> String {
    "GET".into()
}
