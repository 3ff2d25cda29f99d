//! What `hapctl status` and `GET /v1/status` show, read once for both, and the questions the
//! daemon's health routes ask of HAProxy.

use serde::Serialize;

use super::{CertView, Edge, EdgeError, Supervision};
use crate::apply::RuntimeCheck;
use crate::haproxy::{HaproxyStatus, MigrateReq};
use crate::resolve::Resolution;
use crate::store::{ApplyRecord, CertRecord};
use crate::waf::status::WafStatus;

/// The edge at one moment: HAProxy and its supervision, the live set, the last applies,
/// counts, certificates, name resolution, the WAF agent, the kernel's handover. (Not the
/// generations: [`Edge::generations`] asks each one's readiness over HTTP.)
#[derive(Debug, Clone)]
pub struct EdgeStatus {
    pub haproxy: HaproxyStatus,
    pub supervision: Supervision,
    pub live_is_known_good: bool,
    pub runtime_check: RuntimeCheck,
    /// The last applies, newest first.
    pub applies: Vec<ApplyRecord>,
    pub counts: Counts,
    pub certificates: Vec<CertView>,
    /// As HAProxy holds it; `None` when it does not answer.
    pub resolution: Option<Resolution>,
    pub waf: WafStatus,
    pub tcp_migrate_req: MigrateReq,
}

/// How much desired state there is.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Counts {
    pub domains: usize,
    pub blocked: usize,
    pub trusted_proxies: usize,
}

impl EdgeStatus {
    /// The certificate that expires first.
    pub fn soonest_expiry(&self) -> Option<&CertRecord> {
        self.certificates
            .iter()
            .map(|c| &c.record)
            .min_by_key(|r| r.not_after)
    }

    /// The certificates whose last renewal failed (they keep serving the current one).
    pub fn failing_certificates(&self) -> impl Iterator<Item = &CertRecord> {
        self.certificates
            .iter()
            .map(|c| &c.record)
            .filter(|r| r.last_error.is_some())
    }
}

impl Edge {
    /// The status, with the last `applies` applies.
    pub fn status(&self, applies: usize) -> Result<EdgeStatus, EdgeError> {
        let (domains, trusted_proxies) = self.with_state(|state| {
            (
                state.domains.len() + state.app_domains.len(),
                state.trusted_proxies.len(),
            )
        })?;
        Ok(EdgeStatus {
            haproxy: self.supervisor().status(),
            supervision: self.supervision(),
            live_is_known_good: self.live_is_known_good()?,
            runtime_check: self.runtime_check(),
            applies: self.history(applies)?,
            counts: Counts {
                domains,
                blocked: self.block_count()?,
                trusted_proxies,
            },
            certificates: self.certificates()?,
            resolution: self.resolution_now()?,
            waf: crate::waf::status::status(&self.settings),
            tcp_migrate_req: MigrateReq::read(),
        })
    }

    /// Whether the master answers with a current worker.
    pub fn haproxy_serving(&self) -> bool {
        self.supervisor()
            .status()
            .procs
            .is_some_and(|p| !p.workers.is_empty())
    }

    /// Whether a master answers, waiting out one that re-executes for a reload (it is running,
    /// not to be started).
    pub fn haproxy_answering(&self) -> bool {
        self.supervisor()
            .procs_when_answering(self.settings.haproxy.reload_timeout)
            .is_some()
    }

    /// Why the edge is not healthy (`GET /v1/health`): no master, no current worker, a refused
    /// runtime change, or a live set that is not the known-good one; `None` when it is.
    pub fn health_problem(&self) -> Result<Option<String>, EdgeError> {
        Ok(match &self.supervisor().status().procs {
            None => Some("the HAProxy master is not running (or its socket does not answer)".to_string()),
            Some(p) if p.workers.is_empty() => Some("the HAProxy master has no current worker".to_string()),
            Some(_) => match self.runtime_check() {
                RuntimeCheck::Failed(lines) => Some(format!(
                    "DEFECT: haproxy -c refuses the set hapctl changed at runtime: {}",
                    lines.join(" | ")
                )),
                // Changed at runtime, checked shortly: the committed state, not a failure.
                RuntimeCheck::Pending => None,
                RuntimeCheck::None if !self.live_is_known_good()? => Some(
                    "the live configuration is not the known-good one (an apply failed or was interrupted)".to_string(),
                ),
                RuntimeCheck::None => None,
            },
        })
    }
}
