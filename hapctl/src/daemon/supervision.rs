//! The supervision loop of `hapctl serve`: a thread that looks at HAProxy's master every
//! 100 ms and, in direct mode, starts it again when it died (`Edge::restart_haproxy`), with a
//! backoff when it keeps dying. Under systemd the unit's `Restart=` does the restarting: the
//! loop only notices a new master, rebuilds the worker's runtime state and counts it. An
//! intentional stop (`hapctl haproxy stop`) is respected in both modes.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::metrics::Metrics;
use crate::edge::{Edge, Look, Restart, SupervisorState, Watched};
use crate::settings::Mode;

/// Between two looks at the master: a dead one is started again well within a second.
const POLL: Duration = Duration::from_millis(100);
/// A master that stayed up this long makes the backoff start over.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// The pause after the first failed start; each further failure doubles it, up to the cap.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// When to start again a master that keeps dying: at once the first time, then after 1, 2,
/// 4 … s, at most 30 s. Forgotten once a master stayed up for `STABLE_AFTER`.
#[derive(Debug, Default)]
struct Backoff {
    /// Start attempts since the master was last stable.
    attempts: u32,
    up_since: Option<Instant>,
}

impl Backoff {
    /// The pause before the next start attempt, which it counts.
    fn next_pause(&mut self) -> Duration {
        let pause = match self.attempts {
            0 => Duration::ZERO,
            n => FIRST_PAUSE
                .saturating_mul(1 << (n - 1).min(16))
                .min(MAX_PAUSE),
        };
        self.attempts += 1;
        self.up_since = None;
        pause
    }

    /// A master runs at `now`.
    fn running(&mut self, now: Instant) {
        let since = *self.up_since.get_or_insert(now);
        if now.duration_since(since) >= STABLE_AFTER {
            self.attempts = 0;
        }
    }
}

/// The running loop; stopping it (drop) waits for a restart in progress to end.
pub struct SupervisionLoop {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for SupervisionLoop {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the loop on its own connection (`edge`). `HAProxy` has been started (or left
/// stopped) by then.
pub fn start(edge: Edge, metrics: Arc<Metrics>) -> SupervisionLoop {
    let mut watch = Watch::new(edge, metrics);
    // The first look before `serve` goes on, not after the thread's first pause and state
    // file write (an fsync, slow under I/O load): a master killed from here on is one the loop
    // already watches, so the status it is reaped with says how it ended.
    watch.tick(Instant::now());
    let (stop, stopped) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("haproxy-supervisor".into())
        .spawn(move || {
            watch.publish();
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(POLL) {
                watch.tick(Instant::now());
            }
            watch.edge.withdraw_supervision();
        })
        .expect("spawn the supervision loop");
    SupervisionLoop {
        stop: Some(stop),
        thread: Some(thread),
    }
}

/// What the loop last saw.
enum Seen {
    /// Nothing yet: the first master seen is the one `serve` started or found.
    Nothing,
    Running(Watched),
    Stopped,
    Down(Down),
}

struct Down {
    /// What became of the last master, for the log and the history.
    what: String,
    since: Instant,
    next_try: Instant,
    last_pause: Duration,
}

struct Watch {
    edge: Edge,
    metrics: Arc<Metrics>,
    state: SupervisorState,
    backoff: Backoff,
    seen: Seen,
}

impl Watch {
    fn new(edge: Edge, metrics: Arc<Metrics>) -> Watch {
        let state = SupervisorState::new(edge.settings.haproxy.mode);
        Watch {
            edge,
            metrics,
            state,
            backoff: Backoff::default(),
            seen: Seen::Nothing,
        }
    }

    fn direct(&self) -> bool {
        self.edge.settings.haproxy.mode == Mode::Direct
    }

    fn publish(&self) {
        if let Err(e) = self.edge.publish_supervision(&self.state) {
            tracing::warn!("supervision: {e}");
        }
    }

    fn tick(&mut self, now: Instant) {
        let last = match &self.seen {
            Seen::Running(w) => Some(*w),
            _ => None,
        };
        match (self.edge.look_at_master(last), &self.seen) {
            (Look::Running(w), Seen::Running(v)) if w == *v => self.backoff.running(now),
            (Look::Running(w), _) => {
                self.appeared(w, now);
                self.seen = Seen::Running(w);
                self.backoff.running(now);
            }
            (Look::Stopped, Seen::Stopped) => {}
            (Look::Stopped, _) => {
                tracing::info!("HAProxy was stopped with `hapctl haproxy stop`: it stays down until `hapctl haproxy start`");
                self.seen = Seen::Stopped;
                self.backoff = Backoff::default();
            }
            (Look::Down { .. }, Seen::Down(down)) => {
                if self.direct() && now >= down.next_try {
                    self.restart();
                }
            }
            (Look::Down { what }, _) => {
                if self.direct() {
                    tracing::warn!("HAProxy's {what}; starting it again");
                } else {
                    tracing::warn!("HAProxy's {what}; waiting for its systemd unit to restart it");
                }
                let pause = self.backoff.next_pause();
                self.seen = Seen::Down(Down {
                    what,
                    since: now,
                    next_try: now + pause,
                    last_pause: pause,
                });
                if self.direct() && pause.is_zero() {
                    self.restart();
                }
            }
        }
    }

    /// A master this loop did not start appeared: started by the systemd unit (a restart), or
    /// by someone else (`hapctl haproxy start`, `GET /api/reload`). Its runtime state is
    /// rebuilt in either case.
    fn appeared(&mut self, master: Watched, now: Instant) {
        let previous = match &self.seen {
            Seen::Nothing => return,
            Seen::Running(w) => format!("master PID {} was replaced", w.pid),
            Seen::Down(d) => format!(
                "{}, back after {} ms",
                d.what,
                now.duration_since(d.since).as_millis()
            ),
            Seen::Stopped => "it was stopped".to_string(),
        };
        let by_unit = !self.direct() && !matches!(self.seen, Seen::Stopped);
        if by_unit {
            let trigger = format!(
                "haproxy restarted by its systemd unit: {previous}; new master PID {}",
                master.pid
            );
            tracing::warn!("{trigger}");
            self.metrics.haproxy_restart(true);
            self.state.restarts += 1;
            self.state.event(trigger.clone());
            self.publish();
            if let Err(e) = self.edge.note_restart(&trigger, master) {
                tracing::error!("supervision: cannot record the restart: {e}");
            }
        } else {
            tracing::info!(
                "HAProxy runs again (master PID {}, not started by this loop: {previous})",
                master.pid
            );
            if let Err(e) = self.edge.after_haproxy_started() {
                tracing::error!("after HAProxy started: {e}");
            }
        }
    }

    /// One attempt to start the dead master again (direct mode).
    fn restart(&mut self) {
        let Seen::Down(down) = &mut self.seen else {
            return;
        };
        let mut trigger = format!("haproxy restarted: {}", down.what);
        if self.backoff.attempts > 1 {
            trigger += &format!(
                "; start {} in a row, after a {} s pause",
                self.backoff.attempts,
                down.last_pause.as_secs()
            );
        }
        match self.edge.restart_haproxy(&trigger) {
            Ok(Restart::Started { master }) => {
                tracing::warn!(
                    "{trigger}; new master PID {} {} ms after its death was seen",
                    master.pid,
                    down.since.elapsed().as_millis()
                );
                self.metrics.haproxy_restart(true);
                self.state.restarts += 1;
                self.state
                    .event(format!("{trigger}; new master PID {}", master.pid));
                self.seen = Seen::Running(master);
            }
            // The next look adopts it, or sees the stop.
            Ok(Restart::AlreadyRunning { .. }) | Ok(Restart::StopRequested) => return,
            Err(e) => {
                let pause = self.backoff.next_pause();
                down.next_try = Instant::now() + pause;
                down.last_pause = pause;
                tracing::error!(
                    "{trigger} FAILED: {e}; next attempt in {} s",
                    pause.as_secs()
                );
                self.metrics.haproxy_restart(false);
                self.state.failed_starts += 1;
                self.state.event(format!("start failed: {e}"));
            }
        }
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_starts_at_once_then_doubles_up_to_the_cap() {
        let mut b = Backoff::default();
        let pauses: Vec<u64> = (0..9).map(|_| b.next_pause().as_secs()).collect();
        assert_eq!(pauses, [0, 1, 2, 4, 8, 16, 30, 30, 30]);
        // Very long streaks neither overflow nor exceed the cap.
        b.attempts = u32::MAX - 1;
        assert_eq!(b.next_pause(), MAX_PAUSE);
    }

    #[test]
    fn a_master_that_stayed_up_resets_the_backoff_a_short_life_does_not() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert_eq!(b.next_pause(), Duration::ZERO);
        // Up for 5 s, then dead again: the streak goes on.
        b.running(t0);
        b.running(t0 + Duration::from_secs(5));
        assert_eq!(b.next_pause(), FIRST_PAUSE);
        // Up for the stable time: the next death is restarted at once again.
        let t1 = t0 + Duration::from_secs(10);
        b.running(t1);
        b.running(t1 + STABLE_AFTER - Duration::from_millis(1));
        assert_eq!(b.attempts, 2, "not stable yet");
        b.running(t1 + STABLE_AFTER);
        assert_eq!(b.next_pause(), Duration::ZERO);
        assert_eq!(b.next_pause(), FIRST_PAUSE);
    }

    #[test]
    fn a_death_forgets_when_the_master_came_up() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        b.running(t0);
        b.next_pause();
        // Up again later: the stable time counts from this start, not the first one.
        b.running(t0 + STABLE_AFTER);
        assert_eq!(b.attempts, 1);
        b.running(t0 + STABLE_AFTER * 2);
        assert_eq!(b.attempts, 0);
    }
}
