//! The domain routes' bodies: `PUT /v1/domains/{name}`, its `/https` and its `/profiles`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;
use crate::model::{
    AppName, Backend, Interval, Profile, ProxyProtocol, Server, ServerAddr, ServerName, ServerTls,
    WafPolicy,
};

/// Create or replace a domain: its servers and profile, or an app.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutDomainRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(inline)]
    pub servers: Vec<ServerRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::profile)]
    pub profile: Option<Profile>,
    /// Event streams to the backend's long-lived twin (off when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::boolean)]
    pub sse_routing: Option<bool>,
    /// Route to a delivered application instead of servers.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::string)]
    pub app: Option<AppName>,
    /// The domain's WAF policy, replaced whole; absent: the policy it has stays.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::waf_policy)]
    pub waf: Option<WafPolicy>,
}

impl PutDomainRequest {
    /// The request that puts `backend` (`hapctl domain add --server`).
    pub fn servers(backend: &Backend) -> PutDomainRequest {
        PutDomainRequest {
            servers: backend.servers().iter().map(ServerRequest::from).collect(),
            profile: Some(backend.profile().clone()),
            sse_routing: Some(backend.sse_routing()),
            ..PutDomainRequest::default()
        }
    }

    /// The request that routes the domain to `app` (`hapctl domain add --app`).
    pub fn app(app: AppName) -> PutDomainRequest {
        PutDomainRequest {
            app: Some(app),
            ..PutDomainRequest::default()
        }
    }
}

/// One server of a domain: its address, and its options, each checked by the handler.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerRequest {
    #[schema(value_type = String, examples("10.0.0.5:8080"))]
    pub address: ServerAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::string)]
    pub name: Option<ServerName>,
    // Wide integers, so an out-of-range value is refused with the rule, not the Rust type.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::weight)]
    pub weight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::maxconn)]
    pub maxconn: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::boolean)]
    pub check: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::interval)]
    pub inter: Option<Interval>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::checks)]
    pub fall: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::checks)]
    pub rise: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backup: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::send_proxy)]
    pub send_proxy: Option<ProxyProtocol>,
    #[serde(
        default,
        deserialize_with = "tls_object",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(schema_with = schemas::server_tls)]
    pub tls: Option<ServerTls>,
}

impl From<&Server> for ServerRequest {
    fn from(server: &Server) -> ServerRequest {
        let o = &server.options;
        ServerRequest {
            address: server.addr.clone(),
            name: Some(server.name.clone()),
            weight: o.weight.map(u64::from),
            maxconn: o.maxconn.map(u64::from),
            check: Some(o.check),
            inter: o.inter,
            fall: o.fall.map(u64::from),
            rise: o.rise.map(u64::from),
            backup: o.backup,
            send_proxy: o.send_proxy,
            tls: o.tls.clone(),
        }
    }
}

/// `tls` as a JSON object only: serde would also read the struct from an array (`[]`).
fn tls_object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ServerTls>, D::Error> {
    let object: Option<serde_json::Map<String, serde_json::Value>> = Option::deserialize(d)?;
    object
        .map(|m| serde_json::from_value(serde_json::Value::Object(m)))
        .transpose()
        .map_err(serde::de::Error::custom)
}

/// A domain's path-protection profiles, replaced whole, and their thresholds.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfilesRequest {
    // Names, parsed by the handler (an unknown one is refused with the known ones named).
    #[schema(schema_with = schemas::protect_profiles)]
    pub profiles: Vec<String>,
    #[serde(default)]
    #[schema(schema_with = schemas::wp_admin_gate)]
    pub wp_admin_gate: Option<bool>,
    // Wide integers, so an out-of-range value is refused with the rule, not the Rust type.
    #[serde(default)]
    #[schema(schema_with = schemas::wp_login_posts)]
    pub wp_login_posts: Option<u64>,
    #[serde(default)]
    #[schema(schema_with = schemas::wp_xmlrpc_posts)]
    pub wp_xmlrpc_posts: Option<u64>,
}

/// A domain's HTTPS policy: redirect HTTP to HTTPS, and HSTS.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpsRequest {
    // A string, parsed by the handler: an enum here would make a number a JSON syntax error
    // rather than a refused field.
    #[schema(schema_with = redirect)]
    pub redirect: String,
    /// Seconds.
    // Wide, so an out-of-range value is refused with the rule, not the Rust type.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 63_072_000)]
    pub hsts_max_age: Option<u64>,
    #[serde(default)]
    pub hsts_include_subdomains: bool,
    /// HTTPS answers announce HTTP/3 (`alt-svc`) where the edge serves it (the default).
    #[serde(default = "on")]
    #[schema(default = true)]
    pub alt_svc: bool,
}

fn on() -> bool {
    true
}

fn redirect() -> utoipa::openapi::schema::ObjectBuilder {
    schemas::string_enum(&["off", "301", "308"])
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_hsts_bound_is_the_model_s() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(super::HttpsRequest::schema()).unwrap();
        assert_eq!(
            schema["properties"]["hsts_max_age"]["maximum"],
            crate::model::MAX_HSTS_AGE
        );
    }
}
