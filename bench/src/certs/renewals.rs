//! certs: handshakes/s through the HTTPS bind during 100 renewals (and the runtime-API-only
//! control), with the CPU each phase used.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};

use super::edge::TlsEdge;
use super::install::{modes, Install};
use super::load::{self, Handshake, Load};
use super::pki::{Leaf, TestCa};
use super::{elapsed_ms, pct, site, MEDIAN_SHARE, MIN_BUCKET_SHARE, RENEWALS};
use crate::api::Api;
use crate::stats::ms;
use crate::{Table, Target};

/// The renewals come in rounds with a pause after each but the last: the pauses measure the
/// handshake rate under the same background load as the renewals around them.
const ROUNDS: usize = 10;
const PAUSE: Duration = Duration::from_millis(1000);
/// The control's replacements (a few ms each) start at most this often.
const CONTROL_EVERY: Duration = Duration::from_millis(100);
const LOAD_BEFORE: Duration = Duration::from_secs(3);
const LOAD_AFTER: Duration = Duration::from_secs(2);
/// Bound on the 100 renewals.
const RENEWALS_BOUND: Duration = Duration::from_secs(120);
const BUCKET_MS: u64 = 100;

/// What the load was doing in a window of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Before,
    Renewing,
    /// A pause between two rounds of renewals: the same moment's background load, no renewal.
    Quiet,
    After,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Before, Kind::Renewing, Kind::Quiet, Kind::After];

    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Before => "before renewals",
            Kind::Renewing => "during renewals",
            Kind::Quiet => "pauses between rounds",
            Kind::After => "after renewals",
        }
    }
}

/// Who replaces the certificates during the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Renewer {
    /// `hapctl cert import`, as a user (or the renewal path) does it.
    Cli,
    /// Control: the same replacements straight through the runtime API from the bench
    /// (`RuntimeCerts::install`: `set`/`commit ssl cert`), no hapctl process, no files, no
    /// database: HAProxy's own share of a renewal. One every `CONTROL_EVERY` at most.
    RuntimeApi,
    /// `PUT /v1/certificates/{name}` to a `hapctl serve` started for the run: the daemon's own
    /// install path (its renewer's), no process per certificate. Its CPU is the daemon's, in
    /// "everything else".
    Daemon,
}

impl Renewer {
    pub(super) fn label(self) -> &'static str {
        match self {
            Renewer::Cli => "`hapctl cert import`",
            Renewer::RuntimeApi => "runtime API only, one per 100 ms at most (control)",
            Renewer::Daemon => "`PUT /v1/certificates` to `hapctl serve` (the daemon's path)",
        }
    }
}

/// A window of the load, with the CPU counters at its ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) kind: Kind,
    pub(super) from: Cpu,
    pub(super) to: Cpu,
}

pub(super) struct Renewals {
    pub(super) ops: Vec<Install>,
    pub(super) windows: Vec<Window>,
    /// Per handshake: completion offset (ms), its duration (ms) and the error, if it failed.
    pub(super) handshakes: Vec<Handshake>,
    pub(super) certificates: usize,
    pub(super) names: usize,
    pub(super) how: Renewer,
    pub(super) load: Load,
}

/// CPU time counters, to tell what ran during each phase.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cpu {
    pub(super) at_ms: f64,
    /// Whole machine from /proc/stat, in clock ticks: busy (all but idle and iowait) and total.
    pub(super) machine_busy: u64,
    pub(super) machine_total: u64,
    /// The HAProxy worker(s), utime + stime ticks.
    pub(super) haproxy: u64,
    /// Children of the bench that were waited for (the hapctl commands), µs.
    pub(super) children_us: u64,
    /// The bench process itself (the handshake client thread, mostly), µs.
    pub(super) self_us: u64,
}

pub(super) fn rusage_us(who: libc::c_int) -> u64 {
    // SAFETY: getrusage only fills the struct it is given.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut r) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(r.ru_utime) + us(r.ru_stime)
}

pub(super) fn proc_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime (fields 14 and 15 of /proc/PID/stat).
    field(11) + field(12)
}

pub(super) fn cpu_now(t0: Instant, haproxy: &[i32]) -> Cpu {
    let (busy, total) = crate::sys::machine_ticks();
    Cpu {
        at_ms: elapsed_ms(t0),
        machine_busy: busy,
        machine_total: total,
        haproxy: haproxy.iter().map(|p| proc_ticks(*p)).sum(),
        children_us: rusage_us(libc::RUSAGE_CHILDREN),
        self_us: rusage_us(libc::RUSAGE_SELF),
    }
}

/// CPUs in use on average over some windows: machine, HAProxy, hapctl, bench, the rest.
pub(super) fn cores<'w>(windows: impl Iterator<Item = &'w Window>) -> [f64; 5] {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ncpu = thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let (mut secs, mut busy, mut total, mut haproxy, mut hapctl, mut bench) =
        (0.0, 0u64, 0u64, 0u64, 0u64, 0u64);
    for w in windows {
        secs += (w.to.at_ms - w.from.at_ms) / 1000.0;
        busy += w.to.machine_busy - w.from.machine_busy;
        total += w.to.machine_total - w.from.machine_total;
        haproxy += w.to.haproxy - w.from.haproxy;
        hapctl += w.to.children_us - w.from.children_us;
        bench += w.to.self_us - w.from.self_us;
    }
    let secs = secs.max(1e-9);
    let machine = busy as f64 / total.max(1) as f64 * ncpu;
    let haproxy = haproxy as f64 / hz / secs;
    let hapctl = hapctl as f64 / 1e6 / secs;
    let bench = bench as f64 / 1e6 / secs;
    [
        machine,
        haproxy,
        hapctl,
        bench,
        (machine - haproxy - hapctl - bench).max(0.0),
    ]
}

pub(super) struct RenewStats {
    pub(super) total: usize,
    pub(super) failures: usize,
    pub(super) first_error: Option<String>,
    /// Median and smallest bucket during renewals over the median bucket before them, and over
    /// the median bucket of the pauses between rounds.
    pub(super) median_ratio: f64,
    pub(super) min_ratio: f64,
    pub(super) median_ratio_pauses: f64,
    pub(super) min_ratio_pauses: f64,
}

impl RenewStats {
    /// The section's no-dip reading of these renewals as a target (0 failures included).
    pub(super) fn no_dip(&self, goal: String) -> Target {
        Target {
            goal,
            met: Some(
                self.failures == 0
                    && self.median_ratio >= MEDIAN_SHARE
                    && self.min_ratio >= MIN_BUCKET_SHARE,
            ),
            detail: format!(
                "median during / before {:.2}, smallest {:.2}; against the pauses {:.2} and {:.2}; {} failed of {} handshakes",
                self.median_ratio,
                self.min_ratio,
                self.median_ratio_pauses,
                self.min_ratio_pauses,
                self.failures,
                self.total
            ),
        }
    }
}

/// One renewal of `leaf` the way `how` says.
fn renew_one(
    a: &mut TlsEdge,
    how: Renewer,
    api: Option<&Api>,
    leaf: &Leaf,
) -> anyhow::Result<Install> {
    Ok(match how {
        Renewer::Cli => a.import(leaf, true)?,
        Renewer::Daemon => a.import_api(api.context("started for Renewer::Daemon")?, leaf)?,
        Renewer::RuntimeApi => {
            let t = Instant::now();
            let op = a.runtime_replace(leaf)?;
            // Paced, so that the rounds last long enough to be counted in buckets.
            thread::sleep(CONTROL_EVERY.saturating_sub(t.elapsed()));
            op
        }
    })
}

pub(super) fn renewals_under_load(
    a: &mut TlsEdge,
    ca: &TestCa,
    names: usize,
    how: Renewer,
    load: Load,
) -> anyhow::Result<Renewals> {
    let certificates = a.serials.len();
    let names: Vec<String> = (0..names).map(site).collect();
    let leaves: Vec<Leaf> = (0..RENEWALS)
        .map(|k| ca.leaf(&names[k % names.len()]))
        .collect::<anyhow::Result<_>>()?;
    let daemon = match how {
        Renewer::Daemon => Some(Daemon::try_start(
            &a.edge,
            &Serve::within(Duration::from_secs(60)),
        )?),
        Renewer::Cli | Renewer::RuntimeApi => None,
    };
    let api = daemon.as_ref().map(Api::of);
    let workers = a.worker_pids()?;
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let hard_bound =
        LOAD_BEFORE + RENEWALS_BOUND + PAUSE * ROUNDS as u32 + LOAD_AFTER + Duration::from_secs(10);
    let handshake_load = load::spawn(load, a.https, names.clone(), t0, stop.clone(), hard_bound);
    // From here on the load thread must be stopped and joined on every path.
    let mut windows = Vec::new();
    let mut ops = Vec::with_capacity(RENEWALS);
    let mut renew = || -> anyhow::Result<()> {
        // The first bucket is left out (threads starting).
        thread::sleep(Duration::from_millis(BUCKET_MS));
        let mut from = cpu_now(t0, &workers);
        thread::sleep(LOAD_BEFORE - Duration::from_millis(BUCKET_MS));
        let mut window = |kind, from: &mut Cpu| {
            let to = cpu_now(t0, &workers);
            windows.push(Window {
                kind,
                from: *from,
                to,
            });
            *from = to;
        };
        window(Kind::Before, &mut from);
        let started = Instant::now();
        for (round, chunk) in leaves.chunks(RENEWALS.div_ceil(ROUNDS)).enumerate() {
            for leaf in chunk {
                ops.push(renew_one(a, how, api.as_ref(), leaf)?);
                if started.elapsed() > RENEWALS_BOUND {
                    bail!("renewals: only {} within {RENEWALS_BOUND:?}", ops.len());
                }
            }
            window(Kind::Renewing, &mut from);
            if round + 1 < ROUNDS {
                thread::sleep(PAUSE);
                window(Kind::Quiet, &mut from);
            }
        }
        thread::sleep(LOAD_AFTER);
        window(Kind::After, &mut from);
        Ok(())
    };
    let renewed = renew();
    stop.store(true, Ordering::SeqCst);
    let handshakes = handshake_load
        .join()
        .map_err(|_| anyhow::anyhow!("the handshake load thread panicked"))?;
    renewed?;
    Ok(Renewals {
        ops,
        windows,
        handshakes,
        certificates,
        names: names.len(),
        how,
        load,
    })
}

impl Renewals {
    pub(super) fn of(&self, kind: Kind) -> impl Iterator<Item = &Window> {
        self.windows.iter().filter(move |w| w.kind == kind)
    }

    /// Handshakes completed per bucket, for the buckets wholly inside windows of `kind`.
    pub(super) fn buckets(&self, kind: Kind) -> Vec<f64> {
        let mut out = Vec::new();
        for w in self.of(kind) {
            let first = (w.from.at_ms / BUCKET_MS as f64).ceil() as u64;
            let last = (w.to.at_ms / BUCKET_MS as f64).floor() as u64; // exclusive
            let mut counts = vec![0f64; last.saturating_sub(first) as usize];
            for (at, _, err) in &self.handshakes {
                let b = (*at as u64) / BUCKET_MS;
                if err.is_none() && b >= first && b < last {
                    counts[(b - first) as usize] += 1.0;
                }
            }
            out.extend(counts);
        }
        out
    }

    /// The handshakes that completed in windows of `kind`.
    pub(super) fn handshakes_in(&self, kind: Kind) -> Vec<&Handshake> {
        let spans: Vec<(f64, f64)> = self.of(kind).map(|w| (w.from.at_ms, w.to.at_ms)).collect();
        self.handshakes
            .iter()
            .filter(|(at, _, _)| spans.iter().any(|(f, t)| at >= f && at < t))
            .collect()
    }

    pub(super) fn seconds(&self, kind: Kind) -> f64 {
        self.of(kind)
            .map(|w| (w.to.at_ms - w.from.at_ms) / 1000.0)
            .sum()
    }

    pub(super) fn stats(&self) -> RenewStats {
        let during = self.buckets(Kind::Renewing);
        let before = pct(&self.buckets(Kind::Before), 50.0);
        let pauses = pct(&self.buckets(Kind::Quiet), 50.0);
        let failed: Vec<&String> = self
            .handshakes
            .iter()
            .filter_map(|(_, _, e)| e.as_ref())
            .collect();
        RenewStats {
            total: self.handshakes.len(),
            failures: failed.len(),
            first_error: failed.first().map(|e| e.to_string()),
            median_ratio: pct(&during, 50.0) / before,
            min_ratio: pct(&during, 0.0) / before,
            median_ratio_pauses: pct(&during, 50.0) / pauses,
            min_ratio_pauses: pct(&during, 0.0) / pauses,
        }
    }

    pub(super) fn tables(&self) -> (Vec<Table>, RenewStats) {
        let stats = self.stats();
        let mut load = Table::new(
            format!(
                "certs: full TLS handshakes through the HTTPS bind ({}, SNI over the {} renewed names) per {BUCKET_MS} ms bucket, {} certificates installed; {RENEWALS} renewals by {} in {ROUNDS} rounds with {} ms pauses",
                self.load.label(),
                self.names,
                self.certificates,
                self.how.label(),
                PAUSE.as_millis()
            ),
            &["phase", "seconds", "buckets", "handshakes ok", "failed", "median / bucket", "min", "max", "handshakes/s", "median ÷ median before", "min ÷ median before", "handshake ms p50", "p99", "max"],
        );
        let mut cpu = Table::new(
            format!("certs: CPUs in use during each phase of that load, renewals by {} (average cores of 2; /proc/stat, /proc/<worker>/stat, getrusage)", self.how.label()),
            &["phase", "machine", "HAProxy worker", "hapctl commands", "bench (handshake client)", "everything else"],
        );
        let base = pct(&self.buckets(Kind::Before), 50.0);
        for kind in Kind::ALL {
            let b = self.buckets(kind);
            let hs = self.handshakes_in(kind);
            let ok = hs.iter().filter(|(_, _, e)| e.is_none()).count();
            let failed = hs.len() - ok;
            let took: Vec<f64> = hs
                .iter()
                .filter(|(_, _, e)| e.is_none())
                .map(|(_, d, _)| *d)
                .collect();
            let secs = self.seconds(kind);
            load.row(vec![
                kind.label().to_string(),
                format!("{secs:.1}"),
                b.len().to_string(),
                ok.to_string(),
                failed.to_string(),
                format!("{:.0}", pct(&b, 50.0)),
                format!("{:.0}", pct(&b, 0.0)),
                format!("{:.0}", pct(&b, 100.0)),
                format!("{:.0}", ok as f64 / secs),
                format!("{:.2}", pct(&b, 50.0) / base),
                format!("{:.2}", pct(&b, 0.0) / base),
                ms(pct(&took, 50.0)),
                ms(pct(&took, 99.0)),
                ms(pct(&took, 100.0)),
            ]);
            let mut row = vec![kind.label().to_string()];
            row.extend(cores(self.of(kind)).iter().map(|v| format!("{v:.2}")));
            cpu.row(row);
        }
        let mut ren = Table::new(
            format!("certs: the {RENEWALS} renewals (a new serial for an installed name) by {} during that load, ms", self.how.label()),
            &["renewals", "seconds renewing", "renewals/s", "cmd exit p50", "p90", "max", "duration_ms p50", "p90", "hapctl CPU ms / renewal", "installed", "haproxy -c", "reloads (report / master)"],
        );
        let exit: Vec<f64> = self.ops.iter().map(|o| o.exit_ms).collect();
        let own: Vec<f64> = self.ops.iter().map(|o| o.duration_ms).collect();
        let secs = self.seconds(Kind::Renewing);
        let hapctl_us: u64 = self
            .of(Kind::Renewing)
            .map(|w| w.to.children_us - w.from.children_us)
            .sum();
        ren.row(vec![
            self.ops.len().to_string(),
            format!("{secs:.1}"),
            format!("{:.1}", self.ops.len() as f64 / secs),
            ms(pct(&exit, 50.0)),
            ms(pct(&exit, 90.0)),
            ms(pct(&exit, 100.0)),
            ms(pct(&own, 50.0)),
            ms(pct(&own, 90.0)),
            ms(hapctl_us as f64 / 1000.0 / self.ops.len().max(1) as f64),
            modes(&self.ops),
            self.ops.iter().map(|o| o.checks).sum::<usize>().to_string(),
            format!(
                "{} / {}",
                self.ops.iter().map(|o| o.report_reloads).sum::<i64>(),
                self.ops.iter().map(|o| o.reloads).sum::<i64>()
            ),
        ]);
        (vec![load, cpu, ren], stats)
    }

    pub(super) fn to_json(&self) -> Value {
        let stats = self.stats();
        json!({
            "renewer": self.how.label(),
            "load": self.load.label(),
            "certificates": self.certificates,
            "renewed_names": self.names,
            "bucket_ms": BUCKET_MS,
            "windows": self.windows.iter().map(|w| json!({
                "phase": w.kind.label(), "from_ms": w.from.at_ms, "to_ms": w.to.at_ms,
            })).collect::<Vec<_>>(),
            "phases": Kind::ALL.iter().map(|k| {
                let c = cores(self.of(*k));
                json!({
                    "phase": k.label(),
                    "buckets": self.buckets(*k),
                    "cpu_cores": {"machine": c[0], "haproxy": c[1], "hapctl": c[2], "bench": c[3], "other": c[4]},
                })
            }).collect::<Vec<_>>(),
            "handshakes": stats.total,
            "failures": stats.failures,
            "first_error": stats.first_error,
            "median_ratio": stats.median_ratio,
            "min_ratio": stats.min_ratio,
            "median_ratio_pauses": stats.median_ratio_pauses,
            "min_ratio_pauses": stats.min_ratio_pauses,
            "renewals": self.ops.iter().map(Install::to_json).collect::<Vec<_>>(),
            "handshake_ms": self.handshakes.iter().map(|(at, d, e)| json!([at, d, e])).collect::<Vec<_>>(),
        })
    }
}
