//! The typed contract between the API's handlers and the CLI's forward path: the bodies the
//! routes take and the answers they give, serialised by one and read by the other, and the
//! source of their schemas in `/openapi.json` (`utoipa`), so the document, the handlers and
//! the CLI cannot drift apart. Below both `cli` and `http`; it only describes the wire.

mod blocks;
mod certs;
mod change;
mod deliveries;
mod domains;
mod error;
mod limits;
mod proxies;
mod schemas;
mod waf;

pub use blocks::BlockRequest;
pub use certs::{ImportRequest, OrderRequest};
pub use change::ChangeAnswer;
pub use deliveries::{DeliveryRequest, RollbackRequest};
pub use domains::{HttpsRequest, ProfilesRequest, PutDomainRequest, ServerRequest};
pub use error::{ErrorAnswer, ErrorDetail};
pub use limits::{ClearRequest, ExemptRequest, LimitsRequest, PolicyRequest, WindowsRequest};
pub use proxies::TrustRequest;
pub use waf::{WafTestHeader, WafTestRequest};

/// The JSON Schema of `T` as `/openapi.json` shows it: inline, every nested type in place
/// (clients and the hostile-input suite read the schemas without resolving references).
pub fn schema_of<T: utoipa::PartialSchema>() -> serde_json::Value {
    serde_json::to_value(T::schema()).expect("a schema serialises")
}
