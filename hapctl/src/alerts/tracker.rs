//! Deduplication (pure): a condition is notified once when it begins and once when it ends.
//! Conditions come two ways: states the daemon sees at each look (a certificate about to
//! expire), held while they are seen; and events (a restart), held until `quiet` passes
//! without another of the same.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Alert, Kind, Notice, State};

#[derive(Debug)]
pub struct Tracker {
    edge: String,
    quiet: Duration,
    /// Conditions notified as firing, with the alert that said so.
    firing: BTreeMap<(Kind, String), Alert>,
    /// Events: the alert and when the last one happened (Unix seconds).
    events: BTreeMap<(Kind, String), (Alert, i64)>,
}

impl Tracker {
    pub fn new(edge: impl Into<String>, quiet: Duration) -> Tracker {
        Tracker {
            edge: edge.into(),
            quiet,
            firing: BTreeMap::new(),
            events: BTreeMap::new(),
        }
    }

    /// An event happened at `at`: its condition holds until `quiet` after the last one.
    pub fn event(&mut self, alert: Alert, at: i64) {
        self.events.insert(alert.key(), (alert, at));
    }

    /// The notices of a look at `now` that saw `holding`: firing for a condition not notified
    /// yet, resolved for one notified that no longer holds.
    pub fn step(&mut self, now: i64, holding: Vec<Alert>) -> Vec<Notice> {
        let quiet = self.quiet.as_secs() as i64;
        self.events.retain(|_, (_, at)| now - *at < quiet);
        let mut now_holding: BTreeMap<(Kind, String), Alert> =
            holding.into_iter().map(|a| (a.key(), a)).collect();
        for (key, (alert, _)) in &self.events {
            now_holding
                .entry(key.clone())
                .or_insert_with(|| alert.clone());
        }
        let mut notices = Vec::new();
        for (key, alert) in &now_holding {
            if !self.firing.contains_key(key) {
                notices.push(self.notice(State::Firing, alert.clone(), now));
            }
        }
        let ended: Vec<(Kind, String)> = self
            .firing
            .keys()
            .filter(|k| !now_holding.contains_key(*k))
            .cloned()
            .collect();
        for key in ended {
            if let Some(alert) = self.firing.remove(&key) {
                notices.push(self.notice(State::Resolved, alert, now));
            }
        }
        for (key, alert) in now_holding {
            self.firing.entry(key).or_insert(alert);
        }
        notices
    }

    fn notice(&self, state: State, alert: Alert, at: i64) -> Notice {
        Notice {
            state,
            alert,
            edge: self.edge.clone(),
            at,
        }
    }

    /// The conditions firing now.
    pub fn firing(&self) -> impl Iterator<Item = &Alert> {
        self.firing.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states(n: &[Notice]) -> Vec<(State, Kind, &str)> {
        n.iter()
            .map(|n| (n.state, n.alert.kind, n.alert.subject.as_str()))
            .collect()
    }

    #[test]
    fn once_while_it_holds_then_resolved_and_events_hold_until_quiet() {
        let mut t = Tracker::new("edge-a", Duration::from_secs(60));
        let expiring = Alert::new(Kind::CertificateExpiring, "shop", "expires in 3 days");
        let n = t.step(0, vec![expiring.clone()]);
        assert_eq!(
            states(&n),
            [(State::Firing, Kind::CertificateExpiring, "shop")]
        );
        assert!(
            t.step(10, vec![expiring.clone()]).is_empty(),
            "once, not again"
        );
        let n = t.step(20, vec![]);
        assert_eq!(
            states(&n),
            [(State::Resolved, Kind::CertificateExpiring, "shop")]
        );

        t.event(Alert::new(Kind::HaproxyRestarted, "", "restarted"), 100);
        assert_eq!(t.step(100, vec![]).len(), 1);
        t.event(
            Alert::new(Kind::HaproxyRestarted, "", "restarted again"),
            130,
        );
        assert!(t.step(150, vec![]).is_empty(), "the same condition");
        assert!(t.step(189, vec![]).is_empty(), "quiet for less than 60 s");
        let n = t.step(190, vec![]);
        assert_eq!(states(&n), [(State::Resolved, Kind::HaproxyRestarted, "")]);
        assert_eq!(t.firing().count(), 0);
    }
}
