//! The alert loop (`[alerts]`, `docs/alerts.md`): every `check_every` it looks at what needs
//! a person — certificates, renewals, HAProxy's restarts, the defect alarm, failed
//! rollbacks, the WAF agent, 5xx per domain, the fleet's edges — hands what holds to the
//! tracker (one notice per condition until it clears, then "resolved") and sends the notices.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::metrics::Metrics;
use super::Services;
use crate::alerts::{Alert, Kind, Sender, Tracker};
use crate::apply::RuntimeCheck;
use crate::clock::unix_now;
use crate::settings::AlertSettings;

/// Bound on reading the fleet's view from etcd.
const FLEET_TIMEOUT: Duration = Duration::from_secs(5);

/// What the last look saw of the counters that only go up.
#[derive(Default)]
struct Seen {
    restarts: u64,
    rollbacks_failed: u64,
    /// Restart times (Unix seconds) within the restart window.
    restart_times: VecDeque<i64>,
    /// Fleet edges seen: one missing later is gone.
    edges: BTreeSet<String>,
    /// The fleet's revision at the last look: an edge lags once it has not applied it by the
    /// next look. An edge is behind the newest revision for a moment after every change.
    fleet_revision: i64,
    /// When the loop started, and whether the WAF agent was up at a look since.
    started: i64,
    agent_was_up: bool,
}

/// How long after the daemon's start an agent that was never up is not yet down: the daemon
/// starts it, and loading the CRS takes seconds (longer on a busy machine).
const AGENT_START_GRACE: i64 = 60;

/// Whether a WAF agent not up now is down: at once when it was up since the daemon started
/// (killed, stuck), else once it had its start's grace.
fn agent_down(up: bool, was_up: bool, started: i64, now: i64) -> bool {
    !up && (was_up || now - started >= AGENT_START_GRACE)
}

/// Starts the loop on its own thread when `[alerts]` is set.
pub fn start(services: Services, metrics: Arc<Metrics>) {
    let Some(settings) = services.settings().alerts else {
        return;
    };
    let sender = match Sender::new(&settings) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("alerts: {e}; no alert will be sent");
            return;
        }
    };
    let edge = crate::alerts::edge_name(&services.settings());
    let spawned = std::thread::Builder::new()
        .name("alerts".into())
        .spawn(move || {
            let mut tracker = Tracker::new(edge, settings.quiet);
            let mut seen = Seen {
                restarts: metrics.haproxy_restarts(),
                rollbacks_failed: metrics.applies_with("rollback-failed"),
                started: unix_now(),
                ..Seen::default()
            };
            loop {
                let now = unix_now();
                events(&mut tracker, &mut seen, &metrics, &settings, now);
                let holding = holding(&services, &settings, &mut seen, now);
                for notice in tracker.step(now, holding) {
                    for d in sender.send(&notice) {
                        match d.result {
                            Ok(()) => tracing::info!(
                                "alert {} {:?} {} sent to {}",
                                notice.alert.kind.as_str(),
                                notice.state,
                                notice.alert.subject,
                                d.target
                            ),
                            Err(e) => tracing::warn!("alert not delivered: {e}"),
                        }
                    }
                }
                std::thread::sleep(settings.check_every);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("alerts: cannot start the loop: {e}");
    }
}

/// Restarts and failed rollbacks since the last look, as events.
fn events(t: &mut Tracker, seen: &mut Seen, m: &Metrics, s: &AlertSettings, now: i64) {
    let restarts = m.haproxy_restarts();
    for _ in seen.restarts..restarts {
        seen.restart_times.push_back(now);
    }
    if restarts > seen.restarts {
        t.event(
            Alert::new(
                Kind::HaproxyRestarted,
                "",
                format!("HAProxy's master died and hapctl serve started it again ({restarts} restarts since the daemon started); its log says why"),
            ),
            now,
        );
    }
    seen.restarts = restarts;
    let window = s.restart_window.as_secs() as i64;
    while seen
        .restart_times
        .front()
        .is_some_and(|at| now - at >= window)
    {
        seen.restart_times.pop_front();
    }
    if seen.restart_times.len() >= s.restart_loop as usize {
        t.event(
            Alert::new(
                Kind::HaproxyRestartLoop,
                "",
                format!(
                    "HAProxy restarted {} times within {} s: it keeps dying",
                    seen.restart_times.len(),
                    window
                ),
            ),
            now,
        );
    }
    let failed = m.applies_with("rollback-failed");
    if failed > seen.rollbacks_failed {
        t.event(
            Alert::new(
                Kind::RollbackFailed,
                "",
                "ROLLBACK FAILED: an apply failed and the known-good set could not be restored; hapctl status and the apply history say what happened",
            ),
            now,
        );
    }
    seen.rollbacks_failed = failed;
}

/// The conditions that hold now.
fn holding(services: &Services, s: &AlertSettings, seen: &mut Seen, now: i64) -> Vec<Alert> {
    let mut out = Vec::new();
    let (certs, check, link) =
        services.read_now(|edge| (edge.certificates(), edge.runtime_check(), edge.link().ok()));
    match certs {
        Ok(certs) => {
            for c in certs.iter().map(|v| &v.record) {
                let left = c.not_after - now;
                if left < s.cert_expiry.as_secs() as i64 {
                    out.push(Alert::new(
                        Kind::CertificateExpiring,
                        c.name.to_string(),
                        format!("expires in {} h (not after {})", left / 3600, c.not_after),
                    ));
                }
                if c.failures > 0 {
                    out.push(Alert::new(
                        Kind::RenewalFailing,
                        c.name.to_string(),
                        format!(
                            "{} renewal attempts failed in a row: {}",
                            c.failures,
                            c.last_error.as_deref().unwrap_or("no error recorded")
                        ),
                    ));
                }
            }
        }
        Err(e) => tracing::warn!("alerts: cannot read the certificates: {e}"),
    }
    if let RuntimeCheck::Failed(lines) = check {
        out.push(Alert::new(
            Kind::DefectAlarm,
            "",
            format!(
                "DEFECT: haproxy -c refuses the set changed at runtime (not promoted to known-good): {}",
                lines.join(" | ").chars().take(500).collect::<String>()
            ),
        ));
    }
    let agent = services.waf_status().agent.filter(|a| {
        seen.agent_was_up |= a.up;
        agent_down(a.up, seen.agent_was_up, seen.started, now)
    });
    if let Some(agent) = agent {
        out.push(Alert::new(
            Kind::WafAgentDown,
            "",
            format!(
                "the WAF agent is down: {}",
                agent.down_reason.as_deref().unwrap_or("no reason known")
            ),
        ));
    }
    out.extend(domain_errors(services, s));
    if let Some(link) = link {
        out.extend(fleet(&link, seen));
    }
    out
}

/// Domains whose share of 5xx over the last minute is above the threshold.
fn domain_errors(services: &Services, s: &AlertSettings) -> Vec<Alert> {
    let Some(traffic) = services.traffic() else {
        return Vec::new();
    };
    let now = unix_now().max(0) as u64;
    let domains = traffic.with(|b| b.domain_reports(now));
    crate::alerts::domain_errors(&domains, s.error_ratio, s.error_min_requests)
}

/// The edges that have not applied `before`, the fleet's revision a look ago (0 at the first
/// look: none yet). Right after a change every edge is behind the newest revision for the
/// moment its apply takes; that is not lagging.
fn lagging(view: &crate::fleet::status::FleetView, before: i64) -> Vec<Alert> {
    view.edges
        .iter()
        .filter(|e| e.report.applied_revision < before)
        .map(|e| {
            Alert::new(
                Kind::FleetEdgeLagging,
                e.report.name.clone(),
                format!(
                    "applied revision {} of {}; it had not applied {before}, the fleet's revision a look before",
                    e.report.applied_revision, view.revision
                ),
            )
        })
        .collect()
}

/// Edges of the fleet that lag, and edges seen before whose status key is gone.
fn fleet(link: &crate::fleet::FleetLink, seen: &mut Seen) -> Vec<Alert> {
    let view = link.handle().block_on(async {
        tokio::time::timeout(
            FLEET_TIMEOUT,
            crate::fleet::status::read_view(link.etcd(), link.layout()),
        )
        .await
    });
    let Ok(Ok(view)) = view else {
        // etcd away: every edge keeps serving; the follower's own log says so.
        return Vec::new();
    };
    let now: BTreeSet<String> = view.edges.iter().map(|e| e.report.name.clone()).collect();
    let mut out = lagging(&view, seen.fleet_revision);
    seen.fleet_revision = view.revision;
    for gone in seen.edges.difference(&now) {
        out.push(Alert::new(
            Kind::FleetEdgeGone,
            gone.clone(),
            "its status key is gone from etcd: the edge or its hapctl serve is down, or it left the fleet",
        ));
    }
    // Once seen, an edge is missed until it comes back.
    seen.edges.extend(now);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_never_up_is_down_after_its_start_grace_one_that_was_up_at_once() {
        // Starting: not up yet, not down.
        assert!(!agent_down(false, false, 100, 100 + AGENT_START_GRACE - 1));
        assert!(agent_down(false, false, 100, 100 + AGENT_START_GRACE));
        // Up once, then not: down at once.
        assert!(agent_down(false, true, 100, 101));
        assert!(!agent_down(true, true, 100, 101));
    }

    #[test]
    fn an_edge_lags_only_behind_a_revision_the_fleet_had_a_look_ago() {
        use crate::fleet::status::{EdgeReport, EdgeView, FleetView};
        let edge = |name: &str, applied: i64| EdgeView {
            report: EdgeReport {
                name: name.into(),
                applied_revision: applied,
                ..EdgeReport::default()
            },
            lagging: applied < 12,
        };
        let view = FleetView {
            revision: 12,
            published: true,
            edges: vec![edge("e0", 12), edge("e1", 11), edge("e2", 9)],
            rollout: None,
            delivery: None,
        };
        // The fleet moved from 10 to 12 since the last look: e1 is on its way, e2 is not.
        let names =
            |alerts: Vec<Alert>| -> Vec<String> { alerts.into_iter().map(|a| a.subject).collect() };
        assert_eq!(names(lagging(&view, 10)), ["e2"]);
        assert!(
            lagging(&view, 0).is_empty(),
            "the first look has nothing to compare with"
        );
    }
}
