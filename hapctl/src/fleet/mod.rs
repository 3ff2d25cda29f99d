//! The fleet: several edges sharing one desired state in etcd (`[fleet]`, docs/fleet.md).
//! Writers publish changes in transactions that compare revisions (`publish.rs`); every edge,
//! the writer too, follows the prefix (`follow.rs`) and applies what it reads through its own
//! safe path; each edge says how it stands under a leased key (`status.rs`).

pub mod certs;
pub mod deliveries;
pub mod etcd;
pub mod follow;
pub mod link;
pub mod lock;
pub mod object;
pub mod publish;
pub mod seal;
pub mod status;

pub use link::FleetLink;

use crate::model::bounded;
use crate::settings::{EdgeName, FleetPrefix};

#[derive(Debug, Clone, thiserror::Error)]
pub enum FleetError {
    /// No endpoint answered: nothing was changed.
    #[error("etcd is unreachable ({0}); nothing was changed: this edge keeps serving its last applied state")]
    Unreachable(String),
    #[error("etcd refused the request: {0}")]
    Etcd(String),
    /// A compare failed: an object this change read was changed by another writer.
    #[error(
        "{0} changed on another edge since this edge applied revision {1}; read it again and retry"
    )]
    Conflict(String, i64),
    /// `haproxy -c` could not run on a change that needs a reload.
    /// This edge had not applied the fleet's latest change when it judged a change.
    #[error("this edge is at fleet revision {at} and the fleet's state changed at {fleet}: the change was judged on an old state and not made; retry in a moment")]
    Behind { at: i64, fleet: i64 },
    #[error("the change needs a reload and could not be checked with haproxy -c ({0}); it was not published to the fleet")]
    Unchecked(String),
    #[error("this edge is in no fleet: hapctl.toml has no [fleet] section (docs/fleet.md)")]
    NoFleet,
    #[error("the fleet's settings cannot be used: {0}")]
    Setup(String),
    /// The fleet's state was never published (no marker key).
    #[error("no fleet state is published under {0}: publish this edge's state first with `hapctl fleet publish`")]
    NotPublished(String),
    #[error("a fleet is already published under {0}: an edge joins it by starting `hapctl serve` with [fleet]; it does not publish again")]
    AlreadyPublished(String),
    #[error(transparent)]
    Seal(#[from] seal::SealError),
    /// Another edge holds the lock of what was asked (a certificate's order, a fleet
    /// delivery).
    #[error("{what} runs on edge {edge} since {since} (unix seconds): {then}")]
    Busy {
        what: String,
        edge: String,
        since: i64,
        /// What the caller may do.
        then: &'static str,
    },
    #[error("revision {revision} was published, but this edge had not applied it after {waited:?}: `hapctl fleet status` shows where it stands")]
    NotApplied {
        revision: i64,
        waited: std::time::Duration,
    },
}

impl FleetError {
    fn unreachable(endpoint: &str, e: impl std::fmt::Display) -> FleetError {
        FleetError::Unreachable(format!("{}: {e}", bounded(endpoint)))
    }
}

/// Where the fleet's keys live under its prefix.
#[derive(Debug, Clone)]
pub struct Layout {
    prefix: String,
}

impl Layout {
    pub fn new(prefix: &FleetPrefix) -> Layout {
        Layout {
            prefix: prefix.as_str().to_string(),
        }
    }

    /// Everything of this fleet (what an edge watches).
    pub fn root(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// The desired state's objects.
    pub fn state(&self) -> String {
        format!("{}/state/", self.prefix)
    }

    pub fn object(&self, key: &object::ObjectKey) -> String {
        format!("{}/state/{}", self.prefix, key.path())
    }

    /// Written once, by `hapctl fleet publish`: the fleet's state exists.
    pub fn marker(&self) -> String {
        format!("{}/published", self.prefix)
    }

    /// Written by every publication: its revision is the last change of the desired state
    /// (deletions leave no key of their own to tell).
    pub fn changed(&self) -> String {
        format!("{}/changed", self.prefix)
    }

    /// The last rollout of a change that needs a reload.
    pub fn rollout(&self) -> String {
        format!("{}/rollout", self.prefix)
    }

    /// The edges' status keys.
    pub fn edges(&self) -> String {
        format!("{}/edges/", self.prefix)
    }

    pub fn edge(&self, name: &EdgeName) -> String {
        format!("{}/edges/{name}", self.prefix)
    }

    /// What a full key of this fleet is.
    pub fn classify<'k>(&self, key: &'k str) -> KeyClass<'k> {
        let Some(rest) = key
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix('/'))
        else {
            return KeyClass::Other;
        };
        if let Some(path) = rest.strip_prefix("state/") {
            KeyClass::Object(path)
        } else if rest == "published" {
            KeyClass::Marker
        } else {
            KeyClass::Other
        }
    }
}

/// A key of the fleet, as the follower sees it.
pub enum KeyClass<'k> {
    /// An object's key below `state/`, not yet parsed.
    Object(&'k str),
    Marker,
    /// The edges' status keys, or anything else: not part of the desired state.
    Other,
}
