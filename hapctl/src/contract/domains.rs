//! The domain routes' bodies: `PUT /v1/domains/{name}/https`.

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::ToSchema;

/// A domain's HTTPS policy: redirect HTTP to HTTPS, and HSTS.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpsRequest {
    // A string, parsed by the handler: an enum here would make a number a JSON syntax error
    // rather than a refused field.
    #[schema(schema_with = redirect_schema)]
    pub redirect: String,
    /// Seconds.
    // Wide, so an out-of-range value is refused with the rule, not the Rust type.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 63_072_000)]
    pub hsts_max_age: Option<u64>,
    #[serde(default)]
    pub hsts_include_subdomains: bool,
}

fn redirect_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["off", "301", "308"]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_hsts_bound_is_the_model_s() {
        let schema = crate::contract::schema_of::<super::HttpsRequest>();
        assert_eq!(
            schema["properties"]["hsts_max_age"]["maximum"],
            crate::model::MAX_HSTS_AGE
        );
    }
}
