//! Deliveries edge by edge (`hapctl deliver V --fleet`, docs/fleet.md): the edge that runs the
//! command asks each edge in turn through etcd, and each edge's daemon delivers locally under
//! `hapctl prove`'s measurement and answers with its proof.
//!
//! Keys under the prefix:
//! - `delivery/lock`: the edge running a fleet delivery, under its lease (one at a time);
//! - `delivery/request/<edge>`: what that edge is asked to do now;
//! - `delivery/result/<edge>`: how it went (the request's id, running → proved or failed);
//! - `delivery/last`: the last fleet delivery and where it stands, for `fleet status`.

use serde::{Deserialize, Serialize};

use super::Layout;
use crate::model::{AppName, Version};

/// A delivery, or a rollback to the previous generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Deliver,
    Rollback,
}

/// What one edge is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The fleet delivery it belongs to (unique: the edge and the time it began).
    pub id: String,
    pub app: AppName,
    pub kind: Kind,
    /// The version delivered (`deliver` only).
    pub version: Option<Version>,
    pub by: String,
    pub at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Running,
    /// Delivered and every check of the proof passed.
    Proved,
    /// The delivery or a check of its proof failed.
    Failed,
}

/// How one edge's part went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub id: String,
    pub state: State,
    /// The generation live before, and after.
    pub from: Option<String>,
    pub to: Option<String>,
    /// What the proof said (its failed checks), or why it could not run.
    pub message: String,
    /// The proof's journal on that edge.
    pub journal: Option<String>,
    pub at: i64,
}

impl Outcome {
    /// Whether the cutover changed the live generation (what a rollback must undo).
    pub fn changed(&self) -> bool {
        self.from != self.to
    }
}

/// The last fleet delivery, as `fleet status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// What the fleet was asked (each edge gets the same, its id included).
    #[serde(flatten)]
    pub asked: Request,
    /// `running`, `delivered`, or `stopped at <edge>` (then rolled back).
    pub state: String,
    /// Each edge in order, with what happened there.
    pub edges: Vec<(String, String)>,
}

impl Layout {
    pub fn delivery_lock(&self) -> String {
        format!("{}delivery/lock", self.root())
    }

    pub fn delivery_request(&self, edge: &str) -> String {
        format!("{}delivery/request/{edge}", self.root())
    }

    pub fn delivery_result(&self, edge: &str) -> String {
        format!("{}delivery/result/{edge}", self.root())
    }

    pub fn delivery_last(&self) -> String {
        format!("{}delivery/last", self.root())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_parsed_through_the_model() {
        let ok =
            r#"{"id":"e0-1","app":"shop","kind":"deliver","version":"1.2.0","by":"e0","at":1}"#;
        let r: Request = serde_json::from_str(ok).unwrap();
        assert_eq!(r.kind, Kind::Deliver);
        let bad = ok.replace("1.2.0", "1.2.0; rm -rf /");
        assert!(serde_json::from_str::<Request>(&bad).is_err());
    }
}
