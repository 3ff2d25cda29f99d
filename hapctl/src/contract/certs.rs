//! `PUT /v1/certificates/{name}` and `POST /v1/certificates/{name}/request`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;
use crate::model::Domain;

/// A PEM bundle to install.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// Leaf, chain and unencrypted key, PEM.
    pub pem: String,
    /// Host names it must cover (default: the host the name stands for).
    #[serde(default)]
    #[schema(schema_with = schemas::names)]
    pub names: Vec<Domain>,
}

/// A certificate to order from the ACME CA.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderRequest {
    #[serde(default)]
    #[schema(schema_with = schemas::names)]
    pub names: Vec<Domain>,
    /// Prove control through DNS (`[acme] dns_hook`), as wildcards need.
    #[serde(default)]
    pub dns_01: bool,
}
