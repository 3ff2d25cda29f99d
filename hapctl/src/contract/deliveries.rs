//! `POST /v1/deliveries`, `POST /v1/rollback`, `POST /v1/proofs`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;
use crate::model::{AppName, Version};

/// A version of an app to deliver (or to deliver and prove); the only app when `app` is
/// absent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryRequest {
    #[schema(schema_with = schemas::string)]
    pub app: Option<AppName>,
    #[schema(value_type = String)]
    pub version: Version,
}

/// The app to cut back to its previous generation; the only app when absent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    #[schema(schema_with = schemas::string)]
    pub app: Option<AppName>,
}
