//! The whole desired state of the edge, as the renderer sees it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::app::{AppName, Generation};
use super::block::ProxyNet;
use super::error::Invalid;
use super::limits::Limits;
use super::name::Domain;
use super::placement::Placement;
use super::profile::Profile;
use super::protections::DomainProtections;
use super::server::Server;
use super::tls::HttpsPolicy;

/// Most servers one domain may have; a bound, not a HAProxy limit.
pub const MAX_SERVERS: usize = 64;

/// A domain's backend: its servers and profile. Always at least one server, names unique.
///
/// Shared, not copied: the state kept between applies, the apply's before and after, and the
/// renderer's memo hold the same backends (at 10,000 domains a deep copy was megabytes and
/// milliseconds per apply), and two holders of one backend compare equal without looking.
#[derive(Debug, Clone, Eq)]
pub struct Backend(Arc<Parts>);

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
struct Parts {
    servers: Vec<Server>,
    profile: Profile,
    /// Event-stream requests (`Accept: text/event-stream`, `?action=stream`) go to a
    /// long-lived twin of this backend (the old manager's `-sse-backend`).
    sse_routing: bool,
}

impl PartialEq for Backend {
    fn eq(&self, other: &Backend) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl serde::Serialize for Backend {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl Backend {
    pub fn new(servers: Vec<Server>, profile: Profile) -> Result<Backend, Invalid> {
        if servers.is_empty() {
            return Err(Invalid::new(
                "servers",
                "",
                "a domain needs at least one server",
            ));
        }
        if servers.len() > MAX_SERVERS {
            return Err(Invalid::new(
                "servers",
                &servers.len().to_string(),
                format!("a domain may have at most {MAX_SERVERS} servers"),
            ));
        }
        let mut names = BTreeSet::new();
        for s in &servers {
            if !names.insert(s.name.as_str()) {
                return Err(Invalid::new(
                    "server name",
                    s.name.as_str(),
                    "is used twice in this domain",
                ));
            }
        }
        Ok(Backend(Arc::new(Parts {
            servers,
            profile,
            sse_routing: false,
        })))
    }

    /// The same backend with per-request SSE routing on or off.
    pub fn with_sse_routing(self, on: bool) -> Backend {
        Backend(Arc::new(Parts {
            sse_routing: on,
            ..Arc::unwrap_or_clone(self.0)
        }))
    }

    pub fn sse_routing(&self) -> bool {
        self.0.sse_routing
    }

    pub fn servers(&self) -> &[Server] {
        &self.0.servers
    }

    pub fn profile(&self) -> &Profile {
        &self.0.profile
    }
}

/// Everything the edge should be that the apply renders, ordered so rendering is
/// deterministic. Blocks are not here: the block path owns the blocked map (`crate::blocks`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeState {
    pub domains: BTreeMap<Domain, Backend>,
    /// Domains routed to a delivered application's backend instead of their own servers.
    pub app_domains: BTreeMap<Domain, AppName>,
    /// The generation in service for each delivered application.
    pub live_generations: BTreeMap<AppName, Generation>,
    pub trusted_proxies: BTreeSet<ProxyNet>,
    /// Domains whose HTTPS policy is not the default (serve both, no HSTS).
    pub https: BTreeMap<Domain, HttpsPolicy>,
    /// Domains answered with the suspended page (503) instead of their backend.
    pub suspended: BTreeSet<Domain>,
    /// Domains whose requests the WAF inspects (docs/waf.md); absent means off.
    pub waf: BTreeMap<Domain, super::waf::WafPolicy>,
    /// Per-client rate limits: table windows, policies, exemptions.
    pub limits: Limits,
    /// Domains with path-protection profiles (`wordpress`, …); absent means none.
    pub protections: BTreeMap<Domain, DomainProtections>,
    /// Which domains sit in pre-allocated slot backends, and how many each kind has.
    pub placement: Placement,
    /// On an edge of a fleet with `[fleet] peer`: the edges its client tables are shared with.
    pub peers: Option<super::FleetPeers>,
}
