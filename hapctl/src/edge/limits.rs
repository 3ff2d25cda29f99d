//! Rate-limit services: edge-wide settings, per-domain policies, exemptions, and the client
//! table (security stats, clearing one client).

use std::net::IpAddr;

use super::policies::require_domain;
use super::{Edge, EdgeError};
use crate::apply::{ApplyError, ApplyReport};
use crate::model::{BlockKey, Domain, LimitPolicy, Limits};
use crate::protect::{SecurityStats, Stats, StatsError};

impl Edge {
    /// The committed rate-limit configuration.
    pub fn limits(&self) -> Result<Limits, EdgeError> {
        Ok(self.state()?.limits)
    }

    /// Writes the edge-wide settings of `limits` (windows, tarpit, local exemption, default
    /// policy; its domains and exemptions are not read). A policy or exemption change is a
    /// runtime map change; a window or tarpit change reloads.
    pub fn set_limit_settings(&mut self, limits: &Limits) -> Result<ApplyReport, EdgeError> {
        let limits = limits.clone();
        let (report, _) =
            self.applier_run("limits set", move |tx| Ok(tx.set_limit_settings(&limits)?))?;
        Ok(report)
    }

    /// A domain's own policy, or `None` to follow the edge-wide default (no reload).
    pub fn set_domain_limits(
        &mut self,
        domain: &Domain,
        policy: Option<LimitPolicy>,
    ) -> Result<ApplyReport, EdgeError> {
        let d = domain.clone();
        let (report, _) = self.applier_run(&format!("domain limits {domain}"), move |tx| {
            require_domain(tx, &d)?;
            Ok(tx.set_domain_limits(&d, policy.as_ref())?)
        })?;
        Ok(report)
    }

    /// Adds or removes a trusted network that skips every limit (no reload). Removing one
    /// that is not there is "not found".
    pub fn set_limit_exempt(
        &mut self,
        net: &BlockKey,
        exempt: bool,
    ) -> Result<ApplyReport, EdgeError> {
        let n = *net;
        let verb = if exempt { "add" } else { "rm" };
        let (report, _) = self.applier_run(&format!("limits exempt {verb} {net}"), move |tx| {
            if !tx.set_exempt(&n, exempt)? && !exempt {
                return Err(ApplyError::NotFound(format!(
                    "{n} is not exempt; `hapctl limits exempt ls` lists the exemptions"
                )));
            }
            Ok(())
        })?;
        Ok(report)
    }

    /// The busiest clients of the stick table (through the admin socket).
    pub fn security_top(
        &self,
        limit: usize,
        min_req_rate: u64,
    ) -> Result<SecurityStats, StatsError> {
        Stats::from_settings(&self.settings).top(limit, min_req_rate)
    }

    /// Clears one client's counters.
    pub fn security_clear(&self, ip: IpAddr) -> Result<(), StatsError> {
        Stats::from_settings(&self.settings).clear(ip)
    }
}
