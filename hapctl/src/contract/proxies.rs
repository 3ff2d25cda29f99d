//! `POST /v1/trusted-proxies`: one network, or a preset's ranges.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;

/// One network (`net`), or a preset's ranges (`preset`: the list shipped with hapctl, or
/// `nets`, a newer one).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrustRequest {
    #[schema(schema_with = schemas::net)]
    pub net: Option<String>,
    #[schema(schema_with = schemas::proxy_preset)]
    pub preset: Option<String>,
    #[schema(schema_with = schemas::strings)]
    pub nets: Option<Vec<String>>,
}
