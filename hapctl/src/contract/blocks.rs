//! `POST /v1/blocked-ips`: one entry, or a list of them. The answer is the change's
//! [`crate::blocks::BlockReport`], with the results of this request's entries.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::{BlockKey, Note, Ttl};

/// One block entry.
// Every field stays text here and is parsed by the model in the handler, so an error names
// its path (`[3].ip`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockRequest {
    /// An IP or CIDR.
    #[schema(examples("203.0.113.0/24"))]
    pub ip: String,
    #[serde(default)]
    pub reason: String,
    /// `api` when absent.
    #[serde(default)]
    pub author: Option<String>,
    /// How long the block lasts (`30m`, `2h`, `7d`); forever when absent.
    #[schema(examples("30m"))]
    pub ttl: Option<String>,
}

impl BlockRequest {
    /// The request for a block the CLI parsed already.
    pub fn new(key: BlockKey, reason: &Note, author: &Note, ttl: Option<Ttl>) -> BlockRequest {
        BlockRequest {
            ip: key.to_string(),
            reason: reason.as_str().to_string(),
            author: Some(author.as_str().to_string()),
            // Whole seconds: a ttl's display ("1day 2h") is not one word the route takes.
            ttl: ttl.map(|t| format!("{}s", t.duration().as_secs())),
        }
    }
}
