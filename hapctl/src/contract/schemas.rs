//! Schemas of fields whose Rust type is a model type read from a string or with its own
//! checks (`serde_via_str`, `try_from`): the derive cannot see the words or bounds they take,
//! so these say them, with the model's own limits.

use serde_json::json;
use utoipa::openapi::schema::{AdditionalProperties, ArrayBuilder, ObjectBuilder, Type};

use crate::model::{
    ProtectProfile, Slot, MAX_BODY_LIMIT, MAX_EXCLUSIONS, MAX_POST_LIMIT, MAX_TARPIT_SECS,
    MAX_WAF_THRESHOLD, MAX_WINDOW_SECS,
};

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

/// Host names (`names` of a certificate).
pub(super) fn names() -> ArrayBuilder {
    ArrayBuilder::new().items(string().examples([json!("shop.example.com")]))
}

pub(super) fn strings() -> ArrayBuilder {
    ArrayBuilder::new().items(string())
}

pub(super) fn net() -> ObjectBuilder {
    string().examples([json!("203.0.113.0/24")])
}

pub(super) fn proxy_preset() -> ObjectBuilder {
    string_enum(&["cloudflare"])
}

pub(super) fn limits_preset() -> ObjectBuilder {
    string_enum(&["standard", "off", "custom"])
}

/// A rule per slot (`req_rate`...), each `off` or `THRESHOLD:ACTION`.
pub(super) fn limit_rules() -> ObjectBuilder {
    let rule = || {
        string().examples([json!("5000:deny-429")]).description(Some(
            "off, or THRESHOLD:ACTION (1-1000000; log, deny[-403|-429|-503], tarpit[-403|-429|-503])",
        ))
    };
    Slot::ALL.iter().fold(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(AdditionalProperties::FreeForm(false))),
        |rules, slot| rules.property(slot.name(), rule()),
    )
}

pub(super) fn window_secs() -> ObjectBuilder {
    integer(1, MAX_WINDOW_SECS)
}

pub(super) fn tarpit_secs() -> ObjectBuilder {
    integer(1, MAX_TARPIT_SECS)
}

/// The counting windows (`contract::WindowsRequest`), as an object.
pub(super) fn windows() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .property("req", window_secs())
        .property("conn", window_secs())
        .property("err", window_secs())
}

pub(super) fn protect_profiles() -> ArrayBuilder {
    let names: Vec<&str> = ProtectProfile::ALL.iter().map(|p| p.name()).collect();
    ArrayBuilder::new().items(string_enum(&names))
}

pub(super) fn wp_admin_gate() -> ObjectBuilder {
    boolean().default(Some(json!(true)))
}

pub(super) fn wp_login_posts() -> ObjectBuilder {
    integer(1, MAX_POST_LIMIT)
        .default(Some(json!(30)))
        .description(Some(
            "wordpress login POSTs per client per 60 s (fixed window) before the tarpit; runtime",
        ))
}

pub(super) fn wp_xmlrpc_posts() -> ObjectBuilder {
    integer(1, MAX_POST_LIMIT)
        .default(Some(json!(60)))
        .description(Some(
            "wordpress xmlrpc POSTs per client per 60 s before the tarpit; runtime",
        ))
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
