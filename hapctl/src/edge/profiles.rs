//! Path-protection profiles per domain and their thresholds: a runtime map change, no reload.

use super::policies::require_domain;
use super::{Edge, EdgeError};
use crate::apply::ApplyReport;
use crate::model::{Domain, DomainProtections, PostLimit, ProtectProfile};

/// A change to a domain's protections: a whole new set (API `PUT`) or an edit (CLI).
#[derive(Debug, Clone)]
pub enum ProtectionsChange {
    Replace(DomainProtections),
    Edit {
        add: Vec<ProtectProfile>,
        rm: Vec<ProtectProfile>,
        wp_admin_gate: Option<bool>,
        wp_login_posts: Option<PostLimit>,
        wp_xmlrpc_posts: Option<PostLimit>,
    },
}

impl ProtectionsChange {
    fn apply(self, mut current: DomainProtections) -> DomainProtections {
        match self {
            ProtectionsChange::Replace(p) => p,
            ProtectionsChange::Edit {
                add,
                rm,
                wp_admin_gate,
                wp_login_posts,
                wp_xmlrpc_posts,
            } => {
                current.profiles.extend(add);
                for p in rm {
                    current.profiles.remove(&p);
                }
                if let Some(on) = wp_admin_gate {
                    current.wp_admin_gate = on;
                }
                current.wp_login_posts = wp_login_posts.unwrap_or(current.wp_login_posts);
                current.wp_xmlrpc_posts = wp_xmlrpc_posts.unwrap_or(current.wp_xmlrpc_posts);
                current
            }
        }
    }
}

impl Edge {
    /// Changes a domain's profiles; returns the report and the domain's protections after.
    pub fn set_protections(
        &mut self,
        domain: &Domain,
        change: ProtectionsChange,
    ) -> Result<(ApplyReport, DomainProtections), EdgeError> {
        let d = domain.clone();
        let (report, after) = self.applier_run(&format!("domain profile {domain}"), move |tx| {
            require_domain(tx, &d)?;
            let current = tx.load_state()?.protections.remove(&d).unwrap_or_default();
            let after = change.apply(current);
            tx.set_protections(&d, &after)?;
            Ok(after)
        })?;
        let after = match after {
            Some(a) => a,
            None => self.state()?.protections.remove(domain).unwrap_or_default(),
        };
        Ok((report, after))
    }
}
