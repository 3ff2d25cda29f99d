//! Certificate renewal in the daemon, and the gate every ACME order of the daemon goes
//! through.
//!
//! The worker is a thread with its own `Edge`: a few seconds after start, then every minute,
//! it renews what `tls::renew` says is due (on an edge of a fleet, every few seconds it also
//! finishes an order whose edge died mid-way) (`Edge::renew_due(false)`, one order at a time).
//! A failure never loops: `Edge::renew_certificate` records it on the row with a `retry_at`
//! that backs off exponentially, and `renew::due` skips a row until then. The thread has no
//! tokio context, so the edge runs each order on a small runtime of its own instead of
//! borrowing the daemon's, which stops first at shutdown.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::metrics::Metrics;
use crate::edge::{Edge, RenewOutcome};
use crate::tls::renew::MAX_IN_FLIGHT;

/// The first look, a little after start (HAProxy is up and the API answers first).
const FIRST_RUN: Duration = Duration::from_secs(5);
/// Renewals are looked at every `RENEW_EVERY` ticks; on an edge of a fleet, every tick looks
/// for an order whose edge died mid-way.
const TICK: Duration = Duration::from_secs(5);
const RENEW_EVERY: u32 = 12;

/// At most `MAX_IN_FLIGHT` ACME orders at once across the daemon: the worker, the v1 and the
/// edge manager's routes share it. A std semaphore, because orders run on blocking threads.
#[derive(Default)]
pub struct OrderGate {
    busy: Mutex<usize>,
    freed: Condvar,
}

/// One order in flight; the slot frees on drop.
pub struct Permit<'a>(&'a OrderGate);

impl OrderGate {
    /// Waits for a free slot (blocking: call it from a blocking thread only).
    pub fn acquire(&self) -> Permit<'_> {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        while *busy >= MAX_IN_FLIGHT {
            busy = self.freed.wait(busy).unwrap_or_else(|e| e.into_inner());
        }
        *busy += 1;
        Permit(self)
    }

    #[cfg(test)]
    fn in_flight(&self) -> usize {
        *self.busy.lock().unwrap()
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut busy = self.0.busy.lock().unwrap_or_else(|e| e.into_inner());
        *busy -= 1;
        self.0.freed.notify_one();
    }
}

/// Counts and logs renewal outcomes, whoever ran them (the worker or a renew route).
pub fn record(metrics: &Metrics, outcomes: &[RenewOutcome]) {
    for o in outcomes {
        metrics.renewal(&o.name, o.error.is_none());
        for _ in 0..o.report.as_ref().map_or(0, |r| r.reloads) {
            metrics.reload(crate::haproxy::ReloadKind::CertificateFallback);
        }
        match (&o.report, &o.error) {
            (_, Some(error)) => tracing::warn!(
                certificate = %o.name,
                %error,
                "renewal failed; the current certificate keeps serving, retried later with backoff"
            ),
            (Some(r), None) => tracing::info!(
                certificate = %o.name,
                serial = r.serial.as_deref().unwrap_or("?"),
                installed = ?r.installed,
                reloads = r.reloads,
                "renewed"
            ),
            (None, None) => {}
        }
    }
}

/// Starts the renewal worker on its own connection (`edge`). It runs until the process exits:
/// an install it is in the middle of is crash-safe (the certificate path leaves the old or the
/// new one served).
pub fn start(mut edge: Edge, metrics: Arc<Metrics>, gate: Arc<OrderGate>) {
    std::thread::Builder::new()
        .name("renewal-worker".into())
        .spawn(move || {
            std::thread::sleep(FIRST_RUN);
            let fleet = edge.settings.fleet.is_some();
            for tick in 0u32.. {
                if tick % RENEW_EVERY == 0 {
                    renew_once(&mut edge, &metrics, &gate);
                }
                if fleet {
                    finish_orphans(&mut edge, &metrics, &gate);
                }
                std::thread::sleep(TICK);
            }
        })
        .expect("spawn the renewal worker");
}

/// Finishes the fleet's orders whose edge died mid-way (whichever edge gets the lock).
fn finish_orphans(edge: &mut Edge, metrics: &Metrics, gate: &OrderGate) {
    let _permit = gate.acquire();
    match edge.finish_orphaned_orders() {
        Ok(names) => {
            for name in names {
                metrics.renewal(&name, true);
            }
        }
        Err(e) => tracing::debug!("cannot look for the fleet's unfinished orders: {e}"),
    }
}

fn renew_once(edge: &mut Edge, metrics: &Metrics, gate: &OrderGate) {
    // `renew_due` runs its orders one after the other: one slot covers the whole pass.
    let _permit = gate.acquire();
    match edge.renew_due(false) {
        Ok(outcomes) => record(metrics, &outcomes),
        Err(e) => tracing::error!("the renewal pass failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_holds_at_most_max_in_flight() {
        let gate = Arc::new(OrderGate::default());
        let peak = Arc::new(Mutex::new(0usize));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, peak) = (gate.clone(), peak.clone());
                std::thread::spawn(move || {
                    let _p = gate.acquire();
                    let now = gate.in_flight();
                    let mut p = peak.lock().unwrap();
                    *p = (*p).max(now);
                    drop(p);
                    std::thread::sleep(Duration::from_millis(20));
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(*peak.lock().unwrap() <= MAX_IN_FLIGHT);
        assert_eq!(gate.in_flight(), 0);
    }
}
