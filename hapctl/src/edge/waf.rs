//! A domain's web application firewall policy: a runtime map change, no reload.

use super::policies::require_domain;
use super::{Edge, EdgeError};
use crate::apply::ApplyReport;
use crate::model::{Domain, Invalid, WafPolicy};

impl Edge {
    /// Whether `policy` can be served here: anything but `off` needs `[waf]`.
    pub fn check_waf_policy(&self, policy: &WafPolicy) -> Result<(), Invalid> {
        crate::settings::waf::check_policy(self.settings.waf.as_ref(), policy)
    }

    /// Replaces a domain's WAF policy (checked first with [`Edge::check_waf_policy`]).
    pub fn set_waf_policy(
        &mut self,
        domain: &Domain,
        policy: WafPolicy,
    ) -> Result<ApplyReport, EdgeError> {
        let d = domain.clone();
        let (report, _) = self.applier_run(&format!("domain waf {domain}"), move |tx| {
            require_domain(tx, &d)?;
            tx.set_waf_policy(&d, &policy)?;
            Ok(())
        })?;
        Ok(report)
    }
}
