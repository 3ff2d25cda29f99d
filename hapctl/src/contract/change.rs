//! The answer to a change applied through the safe path: a domain put or removal, a domain's
//! policy, `POST /v1/apply`.

use serde::{Deserialize, Serialize};

use crate::edge::DomainResult;

/// What the change did to its domain, and the apply that contained it. A domain put adds,
/// beside these, the servers that do not resolve now (`resolve::Resolution`'s fields).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeAnswer<A> {
    pub result: Option<DomainResult>,
    /// The apply's report: an `apply::ApplyReport` from the daemon; the CLI reads it as JSON,
    /// to print its fields in the order the daemon wrote them.
    pub apply: A,
}
