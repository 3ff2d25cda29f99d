//! `hapctl import-legacy`: moves an edge of the old Python manager onto hapctl — its database
//! (domains, backends, servers, blocked IPs), its certificate folder (`<domain>.pem`
//! bundles) and its lists (trusted proxies, Cloudflare, exempt IPs, wp-admin gate
//! exemptions, suspended domains). See `docs/migration.md`.
//!
//! Three steps, so the middle one is pure: `read` (the old files, read-only) → `plan` (every
//! value through the model's parsers: what will be imported, what is already here, and what
//! is refused and why) → `import` (through the edge services: one apply, certificates on the
//! runtime path, blocks on the block path; undone if any part fails).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::apply::ApplyReport;
use crate::edge::EdgeError;
use crate::model::{Backend, BackendLabel, Block, BlockKey, CertName, Domain, EdgeState, ProxyNet};
use crate::resolve::Resolution;

mod apply;
mod changes;
mod check;
mod plan;
mod read;
mod values;

pub use apply::{import, ImportOutcome};
pub use check::{check, HaproxyCheck};
pub use plan::{plan, Context};
pub use read::{local_to_unix, read, Legacy, LIST_FILES};
pub use values::Naive;

#[derive(Debug, thiserror::Error)]
pub enum LegacyError {
    /// An input that cannot be read as the old edge's: nothing was changed.
    #[error("{path}: {message}")]
    Source { path: String, message: String },
    #[error(transparent)]
    Edge(#[from] EdgeError),
    /// A step of the import failed; what had been done before it was undone.
    #[error("the import was not applied: {message}; {undone}")]
    NotApplied {
        message: String,
        undone: String,
        /// The apply's report when the apply itself refused the change.
        report: Option<Box<ApplyReport>>,
    },
}

/// Whether an item changes the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemStatus {
    New,
    /// hapctl already has it, the same: nothing to do.
    Unchanged,
}

/// One thing to import, with where it comes from (`domains id 3`, `trusted_ips.map:2`).
#[derive(Debug, Clone, Serialize)]
pub struct Item<T> {
    pub source: String,
    pub status: ItemStatus,
    pub value: T,
}

/// Something the import leaves out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    pub source: String,
    /// The old value, escaped and bounded.
    pub value: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct DomainImport {
    pub domain: Domain,
    pub backend: Backend,
    /// The old backend's name, kept for `GET /api/domains` (`None` when it is not a label).
    pub backend_name: Option<BackendLabel>,
}

/// A checked bundle of the certificate folder. `Debug` and JSON leave the PEM out: it holds
/// the private key.
#[derive(Clone, Serialize)]
pub struct CertImport {
    pub name: CertName,
    /// The host the file is named after; the certificate must cover it.
    pub host: Domain,
    pub names: Vec<String>,
    pub serial: String,
    pub not_after: i64,
    #[serde(skip)]
    pub pem: Vec<u8>,
}

impl std::fmt::Debug for CertImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertImport")
            .field("name", &self.name)
            .field("serial", &self.serial)
            .finish_non_exhaustive()
    }
}

/// Everything the import would do.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    pub domains: Vec<Item<DomainImport>>,
    pub blocks: Vec<Item<Block>>,
    pub certificates: Vec<Item<CertImport>>,
    pub trusted_proxies: Vec<Item<ProxyNet>>,
    /// `cloudflare_ips.list`: hapctl's `cloudflare` proxy preset.
    pub cloudflare: Vec<Item<ProxyNet>>,
    /// `trusted_ips.list` and `trusted_ips.map`: clients that skip every rate limit.
    pub limit_exempt: Vec<Item<BlockKey>>,
    /// `wpadmin_gate_exempt.list`: the wordpress wp-admin gate turned off for these hosts.
    pub wp_admin_gate_off: Vec<Item<Domain>>,
    pub suspended: Vec<Item<Domain>>,
    pub refused: Vec<Refused>,
    /// The new domains' servers whose host name does not resolve now (they would wait in
    /// maintenance): filled by [`Plan::look_up_names`].
    pub resolution: Resolution,
    /// `haproxy -c` of the set the import makes, when it ran (a dry run; a real run HAProxy
    /// refused).
    pub haproxy_check: Option<HaproxyCheck>,
}

impl Plan {
    /// (new, unchanged) items.
    pub fn counts(&self) -> (usize, usize) {
        fn count<T>(items: &[Item<T>], s: ItemStatus) -> usize {
            items.iter().filter(|i| i.status == s).count()
        }
        let by = |s| {
            count(&self.domains, s)
                + count(&self.blocks, s)
                + count(&self.certificates, s)
                + count(&self.trusted_proxies, s)
                + count(&self.cloudflare, s)
                + count(&self.limit_exempt, s)
                + count(&self.wp_admin_gate_off, s)
                + count(&self.suspended, s)
        };
        (by(ItemStatus::New), by(ItemStatus::Unchanged))
    }

    /// Looks the host names of the new domains' servers up (the system resolver, as HAProxy's
    /// `libc` init-addr will when it loads them); `follows`: `[resolvers]` is configured.
    pub fn look_up_names(&mut self, follows: bool) {
        let servers = self
            .domains
            .iter()
            .filter(|i| i.status == ItemStatus::New)
            .flat_map(|i| {
                i.value
                    .backend
                    .servers()
                    .iter()
                    .map(|s| (&i.value.domain, s))
            });
        self.resolution = crate::resolve::by_lookup(servers, follows);
    }

    /// Leaves a new domain out with `reason`, and the list items that name it (they need it).
    pub fn refuse_domain(&mut self, domain: &Domain, reason: &str) {
        let new = |d: &Domain, s: ItemStatus| d == domain && s == ItemStatus::New;
        if let Some(at) = self
            .domains
            .iter()
            .position(|i| new(&i.value.domain, i.status))
        {
            let item = self.domains.remove(at);
            self.refused.push(Refused {
                source: item.source,
                value: domain.to_string(),
                reason: reason.to_string(),
            });
        }
        self.resolution.unresolved.retain(|u| &u.domain != domain);
        let needs = format!("its domain {domain} is refused");
        for list in [&mut self.wp_admin_gate_off, &mut self.suspended] {
            let (gone, kept) = std::mem::take(list)
                .into_iter()
                .partition(|i| new(&i.value, i.status));
            *list = kept;
            self.refused
                .extend(gone.into_iter().map(|i: Item<Domain>| Refused {
                    source: i.source,
                    value: domain.to_string(),
                    reason: needs.clone(),
                }));
        }
    }
}

/// What hapctl has now, as the planner compares against it.
#[derive(Debug, Clone, Default)]
pub struct Current {
    pub state: EdgeState,
    /// Blocks in force.
    pub blocks: BTreeSet<BlockKey>,
    /// Certificates by name, with their serial.
    pub certs: BTreeMap<CertName, String>,
    /// The networks of the `cloudflare` proxy preset.
    pub cloudflare: BTreeSet<ProxyNet>,
}

impl Current {
    pub fn of(edge: &crate::edge::Edge) -> Result<Current, EdgeError> {
        Ok(Current {
            state: edge.state()?,
            blocks: edge.blocks()?.into_iter().map(|b| b.key).collect(),
            certs: edge
                .certificates()?
                .into_iter()
                .map(|c| (c.record.name, c.record.serial))
                .collect(),
            cloudflare: edge
                .trusted_proxies()?
                .into_iter()
                .filter(|(_, p)| {
                    p.as_deref() == Some(crate::model::ProxyPreset::Cloudflare.as_str())
                })
                .map(|(n, _)| n)
                .collect(),
        })
    }
}
