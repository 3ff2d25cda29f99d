//! The rate-limit routes' bodies: `PUT /v1/limits`, `PUT /v1/domains/{name}/limits`,
//! `POST /v1/limits/exempt`, `POST /v1/security/clear`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;

/// A domain's own policy, edited from its current one: a preset, and rules by slot
/// (`{"req_rate": "5000:deny"}`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    #[serde(default)]
    #[schema(schema_with = schemas::limits_preset)]
    pub preset: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schemas::limit_rules)]
    pub rules: BTreeMap<String, String>,
}

/// The edge-wide limits: the default policy, the counting windows, the tarpit, the local
/// exemption.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    #[serde(default)]
    #[schema(schema_with = schemas::limits_preset)]
    pub preset: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schemas::limit_rules)]
    pub rules: BTreeMap<String, String>,
    #[serde(default)]
    #[schema(schema_with = schemas::windows)]
    pub windows: Option<WindowsRequest>,
    // Wide integers, so an out-of-range value is refused with the rule, not the Rust type.
    #[serde(default)]
    #[schema(schema_with = schemas::tarpit_secs)]
    pub tarpit_secs: Option<u64>,
    #[serde(default)]
    #[schema(schema_with = schemas::boolean)]
    pub local_exempt: Option<bool>,
}

/// The counting windows, in seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowsRequest {
    #[schema(schema_with = schemas::window_secs)]
    pub req: Option<u64>,
    #[schema(schema_with = schemas::window_secs)]
    pub conn: Option<u64>,
    #[schema(schema_with = schemas::window_secs)]
    pub err: Option<u64>,
}

/// An IP or CIDR exempt from every limit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExemptRequest {
    #[schema(examples("203.0.113.0/24"))]
    pub net: String,
}

/// The client whose counters are forgotten.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearRequest {
    #[schema(examples("192.0.2.7"))]
    pub ip: String,
}
