//! `--with-changes`: runtime changes landing while the cutovers run. One thread, in a loop
//! until told to stop: a domain's server weight flipped between two values (`hapctl domain
//! add NAME --server ADDR,weight=W`: the runtime path, 0 `haproxy -c` and 0 reloads in that
//! apply), then a block added and removed again (`hapctl block add/rm`, the block fast path).
//! Every change is a real hapctl command on the same state dir; its exit and its apply report
//! (`--json`) are kept.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::DemoEdge;

use crate::harness::HttpBackend;
use crate::stats::{ms, percentile};
use crate::sys;
use crate::{Table, Target};

const DOMAIN: &str = "changes.example.com";
const WEIGHTS: [u16; 2] = [10, 20];
/// Pause between two rounds (weight, block add, block rm).
const PAUSE: Duration = Duration::from_millis(100);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
const KINDS: [&str; 3] = ["server weight", "block add", "block rm"];
/// Failures kept with their message.
const FAILURES_KEPT: usize = 20;

/// The changed domain's backend, and how many changes have landed so far.
pub struct Setup {
    backend: HttpBackend,
    landed: AtomicU64,
}

/// What the change thread did.
pub struct Log {
    /// Per kind: durations of the successful ones (ms).
    durations: [Vec<f64>; 3],
    failed: [u64; 3],
    /// Weight changes whose apply made a reload or a `haproxy -c`.
    reloaded: u64,
    checked: u64,
    failures: Vec<String>,
    /// The message of the first weight change (what path it took).
    first_message: String,
}

impl Setup {
    /// The domain, with its first weight (a new domain: one check and one reload, before the
    /// series starts).
    pub fn new(app: &DemoEdge) -> anyhow::Result<Setup> {
        let backend = HttpBackend::start("changes\n");
        app.try_ok(&[
            "domain",
            "add",
            DOMAIN,
            "--server",
            &server(&backend, WEIGHTS[0]),
        ])?;
        Ok(Setup {
            backend,
            landed: AtomicU64::new(0),
        })
    }

    /// Changes that succeeded so far.
    pub fn landed(&self) -> u64 {
        self.landed.load(Ordering::SeqCst)
    }

    pub fn run(&self, app: &DemoEdge, stop: &AtomicBool) -> Log {
        let mut log = Log {
            durations: Default::default(),
            failed: [0; 3],
            reloaded: 0,
            checked: 0,
            failures: Vec::new(),
            first_message: String::new(),
        };
        let mut round = 0usize;
        while !stop.load(Ordering::SeqCst) {
            round += 1;
            let weight = server(&self.backend, WEIGHTS[round % 2]);
            let block = format!("198.51.100.{}", round % 250 + 1);
            let commands: [Vec<&str>; 3] = [
                vec!["domain", "add", DOMAIN, "--server", &weight, "--json"],
                vec!["block", "add", &block, "--reason", "bench", "--json"],
                vec!["block", "rm", &block, "--json"],
            ];
            for (kind, args) in commands.iter().enumerate() {
                let started = Instant::now();
                let out =
                    hapctl::process::run_with_timeout(&mut app.command(args), COMMAND_TIMEOUT);
                let took = started.elapsed().as_secs_f64() * 1000.0;
                match out {
                    Ok(out) if out.status.success() => {
                        log.durations[kind].push(took);
                        self.landed.fetch_add(1, Ordering::SeqCst);
                        if kind == 0 {
                            log.weight_report(&String::from_utf8_lossy(&out.stdout));
                        }
                    }
                    other => {
                        log.failed[kind] += 1;
                        if log.failures.len() < FAILURES_KEPT {
                            log.failures.push(format!(
                                "round {round}, {}: {}",
                                KINDS[kind],
                                match other {
                                    Ok(out) => sys::describe(&out),
                                    Err(e) => format!("{e:#}"),
                                }
                            ));
                        }
                    }
                }
            }
            thread::sleep(PAUSE);
        }
        log
    }
}

fn server(backend: &HttpBackend, weight: u16) -> String {
    format!("{},weight={weight}", backend.addr())
}

impl Log {
    /// Counts what the apply of a weight change did (its `--json` report).
    fn weight_report(&mut self, stdout: &str) {
        let report: Value = serde_json::from_str(stdout).unwrap_or(Value::Null);
        if self.first_message.is_empty() {
            self.first_message = report["message"].as_str().unwrap_or(stdout).to_string();
        }
        // Unreadable counts as a reload: never report "0 reloads" without having seen it.
        if report["reloads"].as_u64() != Some(0) {
            self.reloaded += 1;
        }
        if report["checks"].as_u64() != Some(0) {
            self.checked += 1;
        }
    }

    fn total_failed(&self) -> u64 {
        self.failed.iter().sum()
    }

    pub fn table(&self) -> Table {
        let mut t = Table::new(
            "cutovers: runtime changes made meanwhile (ms, the hapctl command's whole run)",
            &[
                "change",
                "landed",
                "failed",
                "p50",
                "p99",
                "max",
                "applies with a reload / haproxy -c",
            ],
        );
        for (kind, name) in KINDS.iter().enumerate() {
            let mut d = self.durations[kind].clone();
            d.sort_by(f64::total_cmp);
            let stat = |p: f64| {
                if d.is_empty() {
                    "-".into()
                } else {
                    ms(percentile(&d, p))
                }
            };
            t.row(vec![
                name.to_string(),
                d.len().to_string(),
                self.failed[kind].to_string(),
                stat(50.0),
                stat(99.0),
                stat(100.0),
                if kind == 0 {
                    format!("{} / {}", self.reloaded, self.checked)
                } else {
                    "-".into()
                },
            ]);
        }
        t
    }

    pub fn target(&self) -> Target {
        let weights = self.durations[0].len() as u64;
        Target {
            goal: "runtime changes meanwhile: all landed, weight changes with 0 reloads and 0 haproxy -c".into(),
            met: Some(self.total_failed() == 0 && weights > 0 && self.reloaded == 0 && self.checked == 0),
            detail: format!(
                "{} landed, {} failed{}; weight changes: {weights}, {} with a reload, {} with a check; the first said: {}",
                self.durations.iter().map(Vec::len).sum::<usize>(),
                self.total_failed(),
                if self.failures.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", self.failures.join("; "))
                },
                self.reloaded,
                self.checked,
                self.first_message
            ),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "kinds": KINDS,
            "landed": self.durations.iter().map(Vec::len).collect::<Vec<_>>(),
            "failed": self.failed,
            "weight_changes_with_reload": self.reloaded,
            "weight_changes_with_check": self.checked,
            "failures": self.failures,
            "first_weight_message": self.first_message,
            "durations_ms": self.durations,
        })
    }
}
