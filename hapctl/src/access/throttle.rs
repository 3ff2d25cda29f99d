//! Slows down guessing: the wrong tokens of one address are let through at a steady rate
//! after a burst; each one past it waits for its slot before its answer (a cell-rate
//! algorithm, so sending them in parallel gains nothing). Pure: the caller passes the time and
//! sleeps.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// One wrong token per this interval, in the long run.
const INTERVAL: Duration = Duration::from_millis(50);
/// Wrong tokens answered at once before the rate applies (a client with a stale token).
const BURST: u32 = 20;
/// The longest wait (a revoked client still gets its answer in time).
const MAX: Duration = Duration::from_secs(8);
/// Addresses tracked at most; past it the one quiet the longest is forgotten.
const MAX_ADDRS: usize = 4096;

#[derive(Default)]
pub struct Throttle {
    /// Each address's theoretical arrival time: when its next wrong token is on schedule.
    by_addr: HashMap<IpAddr, Instant>,
}

impl Throttle {
    /// Records a wrong token from `addr` at `now` and answers how long to hold its answer.
    pub fn failed(&mut self, addr: IpAddr, now: Instant) -> Duration {
        self.by_addr.retain(|_, tat| *tat > now);
        if self.by_addr.len() >= MAX_ADDRS && !self.by_addr.contains_key(&addr) {
            let quietest = self
                .by_addr
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(a, _)| *a);
            if let Some(a) = quietest {
                self.by_addr.remove(&a);
            }
        }
        let tat = self.by_addr.get(&addr).copied().unwrap_or(now).max(now) + INTERVAL;
        self.by_addr.insert(addr, tat);
        (tat - now).saturating_sub(INTERVAL * BURST).min(MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_each_waits_for_its_slot_and_others_do_not() {
        let mut t = Throttle::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let now = Instant::now();
        let waits: Vec<Duration> = (0..40).map(|_| t.failed(a, now)).collect();
        assert!(
            waits[..BURST as usize].iter().all(|w| w.is_zero()),
            "{waits:?}"
        );
        assert_eq!(waits[BURST as usize], INTERVAL);
        assert_eq!(waits[BURST as usize + 4], INTERVAL * 5);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*waits.last().unwrap(), INTERVAL * (40 - BURST));
        assert_eq!(
            t.failed(b, now),
            Duration::ZERO,
            "another address is not slowed down"
        );
        // A client that waited its slot each time keeps waiting one interval, no more.
        let mut at = now + INTERVAL * 40;
        for _ in 0..5 {
            let w = t.failed(a, at);
            assert!(w <= INTERVAL * (BURST + 1), "{w:?}");
            at += w;
        }
        assert!(
            t.failed(a, now + Duration::from_secs(3600)).is_zero(),
            "quiet: forgotten"
        );
        for _ in 0..1000 {
            t.failed(a, now);
        }
        assert_eq!(t.failed(a, now), MAX);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = Throttle::default();
        let now = Instant::now();
        for i in 0..(MAX_ADDRS as u32 + 10) {
            t.failed(IpAddr::from(i.to_be_bytes()), now);
        }
        assert!(t.by_addr.len() <= MAX_ADDRS);
    }
}
