//! The typed contract between the API's handlers and the CLI's forward path: the bodies the
//! routes take and the answers they give, serialised by one and read by the other, and the
//! source of their schemas in `/openapi.json` (`utoipa`), so the document, the handlers and
//! the CLI cannot drift apart. Below both `cli` and `http`; it only describes the wire.

mod audit_query;
mod blocks;
mod certs;
mod change;
mod deliveries;
mod domain_query;
mod domains;
mod error;
mod limits;
mod log_query;
mod proxies;
mod query;
mod schemas;
mod traffic_query;
mod waf;

use utoipa::openapi::schema::{ArrayBuilder, OneOfBuilder, Schema};
use utoipa::openapi::RefOr;

pub use audit_query::AuditQuery;
pub use blocks::BlockRequest;
pub use certs::{ImportRequest, OrderRequest};
pub use change::ChangeAnswer;
pub use deliveries::{DeliveryRequest, RollbackRequest};
pub use domain_query::DomainQuery;
pub use domains::{HttpsRequest, ProfilesRequest, PutDomainRequest, ServerRequest};
pub use error::{ErrorAnswer, ErrorDetail};
pub use limits::{ClearRequest, ExemptRequest, LimitsRequest, PolicyRequest, WindowsRequest};
pub use log_query::LogQuery;
pub use proxies::TrustRequest;
pub use query::QueryError;
pub use traffic_query::{TrafficQuery, MAX_LIMIT as TRAFFIC_MAX_LIMIT};
pub use waf::{WafTest, WafTestHeader, WafTestRequest};

/// `GET /v1/blocked-ips`'s query (and `hapctl block ls`'s): the model's, as the store runs it;
/// its parameters are derived there.
pub use crate::model::BlockQuery;

/// The schema of a body that is one `T` or a list of them (`POST /v1/blocked-ips`).
pub fn one_or_list<T: utoipa::PartialSchema>() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(T::schema())
        .item(ArrayBuilder::new().items(T::schema()))
        .into()
}
