//! A domain's own policies that are map changes (no reload): suspension and the HTTPS policy.
//! They go through the same apply as domain changes, so the daemon coalesces them with those.

use super::{DomainChange, DomainResult, Edge, EdgeError};
use crate::apply::{ApplyError, ApplyReport};
use crate::model::{Domain, HttpsPolicy};
use crate::store::Tx;

impl Edge {
    /// Suspends a domain (503 page, ACME still answered) or resumes it.
    pub fn set_suspended(
        &mut self,
        domain: &Domain,
        suspended: bool,
    ) -> Result<ApplyReport, EdgeError> {
        self.domain_policy(domain, DomainChange::Suspend(domain.clone(), suspended))
    }

    /// Sets a domain's HTTPS policy.
    pub fn set_https_policy(
        &mut self,
        domain: &Domain,
        policy: HttpsPolicy,
    ) -> Result<ApplyReport, EdgeError> {
        self.domain_policy(domain, DomainChange::Https(domain.clone(), policy))
    }

    /// `change`, a policy of `domain`, which must exist: an absent one runs no apply and
    /// leaves no history (or, removed meanwhile, is refused after the apply).
    fn domain_policy(
        &mut self,
        domain: &Domain,
        change: DomainChange,
    ) -> Result<ApplyReport, EdgeError> {
        if !self.has_domain(domain)? {
            return Err(not_found(domain).into());
        }
        let mut results = self.apply_domain_changes(std::slice::from_ref(&change))?;
        let (report, result) = results.pop().expect("one result per change");
        if result == Some(DomainResult::NotFound) {
            return Err(not_found(domain).into());
        }
        Ok(report)
    }
}

/// Policies apply to domains that exist.
pub(super) fn require_domain(tx: &Tx<'_>, d: &Domain) -> Result<(), ApplyError> {
    match tx.has_domain(d)? {
        true => Ok(()),
        false => Err(not_found(d)),
    }
}

fn not_found(d: &Domain) -> ApplyError {
    ApplyError::NotFound(format!(
        "domain {d} does not exist; `hapctl domain ls` lists them"
    ))
}
