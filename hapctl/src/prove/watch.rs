//! Watching the master while the command runs: new workers (the reload), a replaced master
//! (a restart), a master socket that stops answering.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::haproxy::{Master, ProcList};

use super::report::Event;
use super::{ms, WATCH_INTERVAL};

/// Watches the master during the command: new workers, a replaced master, a silent socket.
pub(super) struct Watcher {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<Vec<Event>>,
}

impl Watcher {
    pub(super) fn stop(self) -> Vec<Event> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

pub(super) fn watch(master: Master, before: &ProcList, clock: Instant, max: Duration) -> Watcher {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let mut known: BTreeSet<i32> = before.all_worker_pids().into_iter().collect();
    let mut master_pid = before.master.pid;
    let handle = thread::spawn(move || {
        let started = Instant::now();
        let mut events = Vec::new();
        let mut silent_since: Option<(f64, String)> = None;
        while !flag.load(Ordering::SeqCst) && started.elapsed() < max {
            match master.show_proc() {
                Ok(p) => {
                    let t = ms(clock);
                    if let Some((since, why)) = silent_since.take() {
                        events.push(Event {
                            t_ms: since,
                            source: "master",
                            what: format!("master socket silent for {:.0} ms ({why})", t - since),
                        });
                    }
                    let replaced = p.master.pid != master_pid;
                    if replaced {
                        events.push(Event {
                            t_ms: t,
                            source: "master",
                            what: format!(
                                "MASTER REPLACED: PID {master_pid} -> {} (a restart)",
                                p.master.pid
                            ),
                        });
                        master_pid = p.master.pid;
                    }
                    let new: Vec<i32> = p
                        .workers
                        .iter()
                        .map(|w| w.pid)
                        .filter(|pid| !known.contains(pid))
                        .collect();
                    if !new.is_empty() {
                        events.push(Event {
                            t_ms: t,
                            source: "master",
                            what: if replaced {
                                format!("worker(s) {new:?} of the new master")
                            } else {
                                format!(
                                    "reload seen: new worker(s) {new:?}, old worker(s) {:?} keep \
                                     their established connections",
                                    p.old_workers.iter().map(|w| w.pid).collect::<Vec<_>>()
                                )
                            },
                        });
                        known.extend(new);
                    }
                }
                Err(e) => {
                    if silent_since.is_none() {
                        silent_since = Some((ms(clock), e.to_string()));
                    }
                }
            }
            thread::sleep(WATCH_INTERVAL);
        }
        if let Some((since, why)) = silent_since {
            events.push(Event {
                t_ms: since,
                source: "master",
                what: format!("master socket silent until the end of the watch ({why})"),
            });
        }
        events
    });
    Watcher { stop, handle }
}
