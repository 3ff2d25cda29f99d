//! Events of the edge that no history table keeps, for the dashboard's timeline: the WAF
//! agent going down, coming up, or started again (a new PID). A bounded ring in memory (a
//! restart of the daemon empties it, like the traffic series); a watcher thread looks at the
//! agent's status while `[waf]` is set.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use super::Services;
use crate::clock::unix_now;

/// Events kept; the oldest go first.
const KEEP: usize = 256;
/// How often the agent's status is looked at (it rewrites its state file every second).
const LOOK_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EdgeEvent {
    /// Unix seconds.
    pub at: i64,
    /// `waf-down`, `waf-up`, `waf-restarted`.
    pub kind: &'static str,
    pub text: String,
}

#[derive(Debug, Default)]
pub struct Events(Mutex<VecDeque<EdgeEvent>>);

impl Events {
    pub fn push(&self, kind: &'static str, text: String) {
        let mut ring = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == KEEP {
            ring.pop_front();
        }
        ring.push_back(EdgeEvent {
            at: unix_now(),
            kind,
            text,
        });
    }

    /// Every event kept, oldest first.
    pub fn all(&self) -> Vec<EdgeEvent> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// What the watcher saw of the agent last: up, and its PID.
type AgentSeen = Option<(bool, Option<u32>)>;

/// The event a change of the agent's state makes, if any (pure).
fn agent_change(
    before: AgentSeen,
    up: bool,
    pid: Option<u32>,
    why: &str,
) -> Option<(&'static str, String)> {
    match before {
        None if !up => Some(("waf-down", format!("WAF agent down: {why}"))),
        None => None,
        Some((true, _)) if !up => Some(("waf-down", format!("WAF agent down: {why}"))),
        Some((false, _)) if up => {
            Some(("waf-up", format!("WAF agent up (PID {})", pid.unwrap_or(0))))
        }
        Some((true, Some(old))) if pid.is_some_and(|p| p != old) => Some((
            "waf-restarted",
            format!("WAF agent started again (PID {old} → {})", pid.unwrap_or(0)),
        )),
        _ => None,
    }
}

/// Starts the watcher when `[waf]` is set.
pub fn start(services: Services) {
    if services.settings().waf.is_none() {
        return;
    }
    let events = services.events().clone();
    let spawned = std::thread::Builder::new()
        .name("edge-events".into())
        .spawn(move || {
            let mut seen: AgentSeen = None;
            loop {
                if let Some(a) = services.waf_status().agent {
                    let why = a.down_reason.as_deref().unwrap_or("no reason known");
                    if let Some((kind, text)) = agent_change(seen, a.up, a.pid, why) {
                        events.push(kind, text);
                    }
                    seen = Some((a.up, a.pid));
                }
                std::thread::sleep(LOOK_EVERY);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the events watcher: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_up_and_a_new_pid_are_events() {
        assert_eq!(agent_change(None, true, Some(7), ""), None);
        assert_eq!(agent_change(None, false, None, "x").unwrap().0, "waf-down");
        assert_eq!(
            agent_change(Some((true, Some(7))), false, Some(7), "gone")
                .unwrap()
                .1,
            "WAF agent down: gone"
        );
        assert_eq!(
            agent_change(Some((false, Some(7))), true, Some(8), "")
                .unwrap()
                .0,
            "waf-up"
        );
        assert_eq!(
            agent_change(Some((true, Some(7))), true, Some(8), "")
                .unwrap()
                .0,
            "waf-restarted"
        );
        assert_eq!(agent_change(Some((true, Some(7))), true, Some(7), ""), None);
        let e = Events::default();
        for _ in 0..KEEP + 3 {
            e.push("waf-up", String::new());
        }
        assert_eq!(e.all().len(), KEEP);
    }
}
