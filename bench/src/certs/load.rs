//! certs: the TLS handshake load during renewals, in two shapes.
//!
//! - **Closed**: one thread, one full handshake after the other, as fast as it can. Its rate
//!   is what the edge and the client manage on this machine, so on 2 cores any CPU a renewal
//!   takes shows as fewer handshakes: it measures the renewal's CPU share.
//! - **Open**: a fixed rate below that capacity, scheduled ahead of time over a few threads,
//!   the way clients arrive at an edge (they do not wait for each other). It measures whether
//!   the edge keeps serving its load while certificates change: a stall shows as an empty
//!   bucket followed by a burst, and a handshake's time counts from its scheduled start, so a
//!   late one is not hidden (no coordinated omission).
//!
//! Every handshake is a new rustls config (nothing resumed) with an SNI among the renewed
//! names, and must present a certificate for that name.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hapctl::tls::probe;
use hapctl::tls::x509::CertInfo;

use super::edge::HANDSHAKE_TIMEOUT;
use super::elapsed_ms;

/// Threads of the open load: enough that one slow handshake does not hold the next ones.
const OPEN_THREADS: u32 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Load {
    Closed,
    Open { per_second: u32 },
}

impl Load {
    pub(super) fn label(self) -> String {
        match self {
            Load::Closed => "one client thread, back to back (closed loop)".into(),
            Load::Open { per_second } => format!(
                "{per_second} handshakes/s offered on a fixed schedule over {OPEN_THREADS} threads (open loop; ms from the scheduled start)"
            ),
        }
    }
}

/// Completion (ms since the load's start), duration (ms) and the error, if it failed.
pub(super) type Handshake = (f64, f64, Option<String>);

/// Starts the load at `t0`; it runs until `stop` or `bound`. Join it for the handshakes, in
/// completion order.
pub(super) fn spawn(
    load: Load,
    addr: SocketAddr,
    names: Vec<String>,
    t0: Instant,
    stop: Arc<AtomicBool>,
    bound: Duration,
) -> JoinHandle<Vec<Handshake>> {
    let names = Arc::new(names);
    thread::spawn(move || match load {
        Load::Closed => {
            let mut out = Vec::new();
            let mut k = 0;
            while !stop.load(Ordering::SeqCst) && t0.elapsed() < bound {
                let started = Instant::now();
                let result = one(addr, &names[k % names.len()]);
                k += 1;
                out.push((elapsed_ms(t0), elapsed_ms(started), result.err()));
            }
            out
        }
        Load::Open { per_second } => {
            let every = Duration::from_secs(1) / per_second.max(1);
            let threads: Vec<_> = (0..OPEN_THREADS)
                .map(|j| {
                    let (stop, names) = (stop.clone(), names.clone());
                    thread::spawn(move || {
                        let mut out = Vec::new();
                        let mut k = j;
                        while !stop.load(Ordering::SeqCst) && t0.elapsed() < bound {
                            let due = t0 + every * k;
                            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                                thread::sleep(wait);
                            }
                            let result = one(addr, &names[k as usize % names.len()]);
                            out.push((elapsed_ms(t0), elapsed_ms(due), result.err()));
                            k += OPEN_THREADS;
                        }
                        out
                    })
                })
                .collect();
            let mut all: Vec<Handshake> = threads
                .into_iter()
                .flat_map(|t| t.join().unwrap_or_default())
                .collect();
            all.sort_by(|a, b| a.0.total_cmp(&b.0));
            all
        }
    })
}

/// One full handshake with `sni`, which must get a certificate for that name.
fn one(addr: SocketAddr, sni: &str) -> Result<(), String> {
    let s = probe::handshake(addr, sni, HANDSHAKE_TIMEOUT).map_err(|e| e.to_string())?;
    let leaf = s.chain.first().ok_or("no certificate presented")?;
    let info = CertInfo::from_der(leaf).map_err(|e| e.to_string())?;
    if info.names.iter().any(|n| n == sni) {
        Ok(())
    } else {
        Err(format!("SNI {sni} got a certificate for {:?}", info.names))
    }
}
