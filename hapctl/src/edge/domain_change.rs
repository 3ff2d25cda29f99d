//! One change to the domains, as the CLI, the API and batches hand it to an apply: a put, a
//! removal, or a domain's own map policy (HTTPS, suspension).

use crate::apply::ApplyError;
use crate::clock::unix_now;
use crate::model::{AppName, Backend, BackendLabel, Domain};

/// One change to the domains.
#[derive(Debug, Clone)]
pub enum DomainChange {
    Put(Domain, Backend),
    PutApp(Domain, AppName),
    Remove(Domain),
    /// A put and the domain's WAF policy, in the same apply (`PUT /v1/domains` with `waf`).
    WithWaf(Box<DomainChange>, crate::model::WafPolicy),
    /// A put and the `backend_name` the old API's client gave it (kept, never rendered).
    WithLabel(Box<DomainChange>, BackendLabel),
    /// An existing domain's HTTPS policy (a map: no reload).
    Https(Domain, crate::model::HttpsPolicy),
    /// An existing domain suspended (the 503 page) or served again (a map: no reload).
    Suspend(Domain, bool),
}

/// What a domain change did to the desired state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DomainResult {
    Created,
    Replaced,
    Removed,
    NotFound,
}

impl DomainChange {
    pub(super) fn describe(&self) -> String {
        match self {
            DomainChange::Put(d, _) => format!("domain put {d}"),
            DomainChange::PutApp(d, app) => format!("domain put {d} -> app {app}"),
            DomainChange::Remove(d) => format!("domain rm {d}"),
            DomainChange::WithWaf(c, p) => format!("{} waf {}", c.describe(), p.mode),
            DomainChange::WithLabel(c, _) => c.describe(),
            DomainChange::Https(d, _) => format!("domain https {d}"),
            DomainChange::Suspend(d, true) => format!("domain suspend {d}"),
            DomainChange::Suspend(d, false) => format!("domain resume {d}"),
        }
    }

    pub(super) fn apply(&self, tx: &crate::store::Tx) -> Result<DomainResult, ApplyError> {
        let created = |new| {
            if new {
                DomainResult::Created
            } else {
                DomainResult::Replaced
            }
        };
        Ok(match self {
            DomainChange::Put(d, backend) => created(tx.put_domain(d, backend, unix_now())?),
            // An app domain is not listed by the old API: its label goes.
            DomainChange::PutApp(d, app) => {
                tx.set_backend_label(d, None)?;
                created(tx.put_app_domain(d, app, unix_now())?)
            }
            // A removed domain takes its policies with it: re-adding it starts from defaults.
            DomainChange::Remove(d) if tx.remove_domain(d)? => {
                tx.set_backend_label(d, None)?;
                tx.set_https_policy(d, &crate::model::HttpsPolicy::default())?;
                tx.set_suspended(d, false, unix_now())?;
                tx.set_domain_limits(d, None)?;
                tx.set_protections(d, &crate::model::DomainProtections::default())?;
                tx.set_waf_policy(d, &crate::model::WafPolicy::default())?;
                DomainResult::Removed
            }
            DomainChange::Remove(_) => DomainResult::NotFound,
            DomainChange::WithWaf(c, policy) => {
                let result = c.apply(tx)?;
                if let DomainChange::Put(d, _) | DomainChange::PutApp(d, _) = &**c {
                    tx.set_waf_policy(d, policy)?;
                }
                result
            }
            // A put without one (`/v1`, the CLI) keeps the label the domain has.
            DomainChange::WithLabel(c, label) => {
                let result = c.apply(tx)?;
                if let DomainChange::Put(d, _) = &**c {
                    tx.set_backend_label(d, Some(label))?;
                }
                result
            }
            // A policy of an absent domain is not an error of the whole batch.
            DomainChange::Https(d, _) | DomainChange::Suspend(d, _) if !tx.has_domain(d)? => {
                DomainResult::NotFound
            }
            DomainChange::Https(d, policy) => {
                tx.set_https_policy(d, policy)?;
                DomainResult::Replaced
            }
            DomainChange::Suspend(d, on) => {
                tx.set_suspended(d, *on, unix_now())?;
                DomainResult::Replaced
            }
        })
    }
}
