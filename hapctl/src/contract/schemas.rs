//! Schemas of fields whose Rust type is a model type read from a string or with its own
//! checks (`serde_via_str`, `try_from`): the derive cannot see the words or bounds they take,
//! so these say them, with the model's own limits.

use serde_json::json;
use utoipa::openapi::schema::{AdditionalProperties, ArrayBuilder, ObjectBuilder, Type};

use crate::model::{MAX_BODY_LIMIT, MAX_EXCLUSIONS, MAX_WAF_THRESHOLD};

pub(super) fn string_enum(words: &[&str]) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(words.iter().copied()))
}

fn integer(minimum: u32, maximum: u32) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(minimum))
        .maximum(Some(maximum))
}

pub(super) fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

pub(super) fn boolean() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean)
}

pub(super) fn interval() -> ObjectBuilder {
    string().examples([json!("2s")])
}

pub(super) fn weight() -> ObjectBuilder {
    integer(0, 256)
}

pub(super) fn maxconn() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
}

/// `fall` and `rise`: checks in a row.
pub(super) fn checks() -> ObjectBuilder {
    integer(1, 100)
}

pub(super) fn profile() -> ObjectBuilder {
    string_enum(&[
        "default",
        "websocket",
        "sse",
        "long-lived",
        "http-check:/path",
    ])
}

pub(super) fn send_proxy() -> ObjectBuilder {
    string_enum(&["v1", "v2"])
}

/// `model::ServerTls`.
pub(super) fn server_tls() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("verify", string_enum(&["none", "system"]))
        .property(
            "sni",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .examples([json!("host")]),
        )
}

/// A domain's WAF policy (docs/waf.md), as `model::WafPolicy` reads it.
pub(super) fn waf_policy() -> ObjectBuilder {
    let exclusion = ObjectBuilder::new()
        .schema_type(Type::Object)
        .required("rule")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .property("rule", integer(1, 999_999_999))
        .property(
            "path",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .examples([json!("/search")])
                .description(Some("only under this path prefix")),
        );
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .required("mode")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .description(Some(
            "the WAF policy, replaced whole (absent: unchanged); a runtime map change",
        ))
        .property("mode", string_enum(&["off", "detect", "block"]))
        .property(
            "fail",
            string_enum(&["open", "closed"]).default(Some(json!("open"))),
        )
        .property("paranoia", integer(1, 4).default(Some(json!(1))))
        .property(
            "threshold",
            integer(1, MAX_WAF_THRESHOLD).default(Some(json!(5))),
        )
        .property(
            "body_limit",
            integer(0, MAX_BODY_LIMIT).default(Some(json!(8192))),
        )
        .property(
            "exclusions",
            ArrayBuilder::new()
                .items(exclusion)
                .max_items(Some(MAX_EXCLUSIONS)),
        )
}
