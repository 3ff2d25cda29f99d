//! The HAProxy side of the web application firewall (docs/waf.md): the template's view (SPOE
//! filter, agent backend, pages) and the per-domain policy maps.

use std::fmt::Write;

use serde::Serialize;

use crate::model::{EdgeState, WafMode};
use crate::settings::waf::WafSettings;
use crate::settings::Paths;

use super::FileId;

/// The agent's backend in haproxy.cfg (no domain backend can take this name: theirs are
/// derived from domain names with a prefix).
pub const AGENT_BACKEND: &str = "hapctl_waf_agent";

#[derive(Debug, Serialize)]
pub(super) struct View {
    spoe_conf: String,
    map: String,
    wildcards_map: String,
    blocked_page: String,
    unavailable_page: String,
    backend: &'static str,
    /// `mode spop` for the backend (HAProxy 3.1+), else the TCP defaults' mode.
    spop: bool,
    agent: String,
    timeout: String,
    body_max: u32,
}

/// `None` without `[waf]`: no filter, no agent backend, and the SPOE file holds only its header.
pub(super) fn view(settings: Option<&WafSettings>, paths: &Paths) -> Option<View> {
    let s = settings?;
    let at = |id: FileId| id.path(paths).display().to_string();
    Some(View {
        spoe_conf: at(FileId::WafSpoe),
        map: at(FileId::WafMap),
        wildcards_map: at(FileId::WafWildcardsMap),
        blocked_page: at(FileId::WafBlockedPage),
        unavailable_page: at(FileId::WafUnavailablePage),
        backend: AGENT_BACKEND,
        spop: s.spop_backend,
        agent: s.listen.to_string(),
        timeout: format!("{}ms", s.timeout.as_millis()),
        body_max: s.body_max,
    })
}

/// One line per domain whose WAF is not off: exact names, or (`wildcards`) the `.suffix`
/// lines, longest first, as the other per-domain maps.
pub(super) fn map(out: &mut String, state: &EdgeState, wildcards: bool) {
    let mut lines: Vec<_> = state
        .waf
        .iter()
        .filter(|(d, p)| d.is_wildcard() == wildcards && p.mode != WafMode::Off)
        .collect();
    lines.sort_by_key(|(d, _)| (std::cmp::Reverse(d.name().as_str().len()), *d));
    for (domain, policy) in lines {
        let key = if wildcards {
            format!(".{}", domain.name())
        } else {
            domain.to_string()
        };
        let _ = writeln!(out, "{key} {}", policy.to_map_value());
    }
}
