//! Schemas of the old manager's bodies where their fields are read leniently (as any JSON
//! value, checked by the handlers with the old messages): what the old clients send.

use serde_json::json;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

pub(super) fn text() -> ObjectBuilder {
    string()
}

pub(super) fn domain() -> ObjectBuilder {
    string().examples([json!("example.com")])
}

pub(super) fn names() -> ArrayBuilder {
    ArrayBuilder::new().items(string().examples([json!("shop.example.com")]))
}

/// A list of host names, or one.
pub(super) fn names_or_name() -> OneOfBuilder {
    OneOfBuilder::new().item(names()).item(string())
}

pub(super) fn nullable_text() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(utoipa::openapi::schema::SchemaType::from_iter([
        Type::String,
        Type::Null,
    ]))
}

pub(super) fn wildcard() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .description(Some("also 1/0 and \"true\"/\"false\""))
}

pub(super) fn minutes() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Number)
        .default(Some(json!(60)))
}

pub(super) fn include_www() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .default(Some(json!(true)))
}

/// The old `servers`: address and port, with the old free-text options.
pub(super) fn servers() -> ArrayBuilder {
    let server = ObjectBuilder::new()
        .schema_type(Type::Object)
        .required("address")
        .required("port")
        .property("name", string())
        .property("address", string())
        .property(
            "port",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .description(Some("also a numeric string")),
        )
        .property(
            "options",
            string().examples([json!("check weight 10 maxconn 100")]),
        );
    ArrayBuilder::new().items(server)
}

pub(super) fn boolean() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean)
}
