//! Deduplication and rate limiting (pure): a condition is notified once when it begins, and
//! once when it has not held for `quiet` — so one that comes and goes faster than that stays
//! one alert. Conditions come two ways: states the daemon sees at each look (a certificate
//! about to expire), and events (a restart), which hold at the moment they happen.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Alert, Kind, Notice, State};

#[derive(Debug)]
pub struct Tracker {
    edge: String,
    quiet: Duration,
    /// Conditions notified as firing, with the alert that said so and when they last held
    /// (Unix seconds).
    firing: BTreeMap<(Kind, String), (Alert, i64)>,
    /// Events since the last look, with when they happened.
    events: Vec<(Alert, i64)>,
}

impl Tracker {
    pub fn new(edge: impl Into<String>, quiet: Duration) -> Tracker {
        Tracker {
            edge: edge.into(),
            quiet,
            firing: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    /// An event happened at `at`: its condition holds then.
    pub fn event(&mut self, alert: Alert, at: i64) {
        self.events.push((alert, at));
    }

    /// The notices of a look at `now` that saw `holding`: firing for a condition not notified
    /// yet, resolved for one that has not held for `quiet`.
    pub fn step(&mut self, now: i64, holding: Vec<Alert>) -> Vec<Notice> {
        let mut notices = Vec::new();
        let seen: Vec<(Alert, i64)> = holding
            .into_iter()
            .map(|a| (a, now))
            .chain(self.events.drain(..))
            .collect();
        for (alert, at) in seen {
            match self.firing.get_mut(&alert.key()) {
                Some((_, last)) => *last = (*last).max(at),
                None => {
                    notices.push(self.notice(State::Firing, alert.clone(), now));
                    self.firing.insert(alert.key(), (alert, at));
                }
            }
        }
        let quiet = self.quiet.as_secs() as i64;
        let ended: Vec<(Kind, String)> = self
            .firing
            .iter()
            .filter(|(_, (_, last))| now - last >= quiet)
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            if let Some((alert, _)) = self.firing.remove(&key) {
                notices.push(self.notice(State::Resolved, alert, now));
            }
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
    fn once_while_it_holds_resolved_after_quiet_and_flapping_is_one_alert() {
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
        assert!(t.step(20, vec![]).is_empty(), "gone for less than quiet");
        assert!(
            t.step(30, vec![expiring.clone()]).is_empty(),
            "back: still one alert"
        );
        assert!(t.step(89, vec![]).is_empty());
        let n = t.step(90, vec![]);
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
        assert!(t.step(300, vec![]).is_empty(), "nothing left firing");
    }
}
