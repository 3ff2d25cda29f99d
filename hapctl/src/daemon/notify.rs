//! systemd's service notifications (sd_notify(3)) for `hapctl serve` under `Type=notify`:
//! `READY=1` once the API listens and HAProxy runs, `STATUS=` lines, `STOPPING=1`, and
//! `WATCHDOG=1` pings sent only while the daemon is healthy, so `WatchdogSec=` restarts a
//! daemon that stays broken.
//!
//! The protocol is one datagram per message on `NOTIFY_SOCKET`, spoken here directly: the
//! variables are read once and removed from the environment, so that what the daemon starts
//! (HAProxy in direct mode, generations) does not inherit them — systemd refuses and logs every
//! message from a process that is not the unit's main one. (The `sd-notify` crate reads the
//! variable at each call, so it would have to stay set, and it has no abstract addresses.)

use std::ffi::OsStr;
use std::future::Future;
use std::net::SocketAddr as TcpAddr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

use super::Services;

const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
const WATCHDOG_USEC: &str = "WATCHDOG_USEC";
const WATCHDOG_PID: &str = "WATCHDOG_PID";

/// The threads whose death leaves every change failing until a restart (`workers.rs`).
const WORKER_THREADS: [&str; 2] = ["apply-worker", "block-worker"];

/// Where notifications go; does nothing outside a `Type=notify` unit.
#[derive(Debug, Default)]
pub struct Notifier {
    socket: Option<SocketAddr>,
    /// Half of `WATCHDOG_USEC`, the interval sd_watchdog_enabled(3) advises.
    ping_every: Option<Duration>,
}

impl Notifier {
    /// Reads the notification variables and removes them from the environment. Call it before
    /// any other thread exists: changing the environment races with threads that read it.
    pub fn from_env() -> Notifier {
        let var = |name| std::env::var_os(name);
        let notifier = Notifier::parse(
            var(NOTIFY_SOCKET).as_deref(),
            var(WATCHDOG_USEC).as_deref(),
            var(WATCHDOG_PID).as_deref(),
            std::process::id(),
        );
        for name in [NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID] {
            std::env::remove_var(name);
        }
        notifier
    }

    /// `pid` is this process: a `WATCHDOG_PID` naming another one means the watchdog is not ours.
    fn parse(
        socket: Option<&OsStr>,
        usec: Option<&OsStr>,
        watchdog_pid: Option<&OsStr>,
        pid: u32,
    ) -> Notifier {
        let socket = socket.and_then(|s| {
            let bytes = s.as_bytes();
            let addr = match bytes.first() {
                Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..]),
                Some(b'/') => SocketAddr::from_pathname(s),
                _ => {
                    tracing::warn!("NOTIFY_SOCKET={s:?} is not a unix socket address; systemd is not told the daemon's state");
                    return None;
                }
            };
            addr.map_err(|e| tracing::warn!("NOTIFY_SOCKET={s:?}: {e}"))
                .ok()
        });
        let ours = watchdog_pid.is_none_or(|p| p.to_str() == Some(&pid.to_string()));
        let ping_every = usec
            .and_then(|u| u.to_str()?.parse::<u64>().ok())
            .filter(|&u| u > 0 && ours)
            .map(|u| Duration::from_micros(u / 2));
        Notifier { socket, ping_every }
    }

    /// How often to ping, when systemd watches this process.
    pub fn ping_every(&self) -> Option<Duration> {
        self.socket.as_ref().and(self.ping_every)
    }

    pub fn status(&self, text: &str) {
        self.send(&format!("STATUS={}", one_line(text)));
    }

    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping the API; HAProxy keeps running");
    }

    fn ping(&self) {
        self.send("WATCHDOG=1");
    }

    /// A lost notification is logged, never fatal: the daemon works without systemd.
    fn send(&self, message: &str) {
        let Some(addr) = &self.socket else { return };
        let sent = UnixDatagram::unbound().and_then(|s| s.send_to_addr(message.as_bytes(), addr));
        if let Err(e) = sent {
            tracing::warn!("cannot notify systemd ({message:?}): {e}");
        }
    }
}

/// STATUS is one line: the rest of a multi-line message would be read as other assignments.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// Pings every `every` while `healthy` answers `Ok` within half of it; a failed check sends its
/// reason as STATUS and no ping (and `serving` again once it passes).
pub(super) async fn watchdog<F, Fut>(
    notifier: Arc<Notifier>,
    every: Duration,
    serving: String,
    healthy: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticks.tick().await;
        let bound = every / 2;
        let verdict = tokio::time::timeout(bound, healthy())
            .await
            .unwrap_or_else(|_| Err(format!("the health check did not answer within {bound:?}")));
        match verdict {
            Ok(()) => {
                if failing {
                    tracing::info!("watchdog: healthy again");
                    notifier.status(&serving);
                    failing = false;
                }
                notifier.ping();
            }
            Err(why) => {
                tracing::error!("watchdog: not healthy, systemd is not pinged: {why}");
                notifier.status(&format!("unhealthy: {why}"));
                failing = true;
            }
        }
    }
}

/// Tells systemd the daemon is ready and, when systemd watches it, starts the watchdog task.
pub(super) fn announce_ready(notifier: &Arc<Notifier>, services: &Services, listen: TcpAddr) {
    let serving = format!("serving the API on {listen}");
    notifier.ready(&serving);
    if let Some(every) = notifier.ping_every() {
        let services = services.clone();
        tokio::spawn(watchdog(notifier.clone(), every, serving, move || {
            healthy(services.clone())
        }));
    }
}

/// Healthy: the shared read connection answers and the workers' threads live.
async fn healthy(services: Services) -> Result<(), String> {
    services
        .read(|edge| edge.history(1).map(drop))
        .await
        .map_err(|e| format!("the read connection fails: {e}"))?;
    workers_alive()
}

fn workers_alive() -> Result<(), String> {
    let running = thread_names().map_err(|e| format!("cannot list the daemon's threads: {e}"))?;
    match WORKER_THREADS
        .iter()
        .find(|w| !running.iter().any(|r| r == *w))
    {
        Some(dead) => Err(format!("the {dead} thread is gone")),
        None => Ok(()),
    }
}

/// Names of this process's threads (`/proc/self/task/*/comm`).
fn thread_names() -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        // A thread that just ended has no comm left to read.
        if let Ok(comm) = std::fs::read_to_string(task?.path().join("comm")) {
            names.push(comm.trim_end().to_string());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> &OsStr {
        OsStr::from_bytes(s.as_bytes())
    }

    fn receive(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("a notification");
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    fn bound() -> (tempfile::TempDir, UnixDatagram, Notifier) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let notifier = Notifier::parse(Some(path.as_os_str()), Some(os("4000000")), None, 1);
        (dir, socket, notifier)
    }

    #[test]
    fn messages_reach_a_real_socket() {
        let (_dir, socket, notifier) = bound();
        notifier.status("starting: applying\nthe committed state");
        assert_eq!(
            receive(&socket),
            "STATUS=starting: applying the committed state"
        );
        notifier.ready("serving on 127.0.0.1:9090");
        assert_eq!(
            receive(&socket),
            "READY=1\nSTATUS=serving on 127.0.0.1:9090"
        );
        notifier.ping();
        assert_eq!(receive(&socket), "WATCHDOG=1");
        notifier.stopping();
        assert!(receive(&socket).starts_with("STOPPING=1\nSTATUS="));
        assert_eq!(notifier.ping_every(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn abstract_addresses_are_understood() {
        let name = format!("hapctl-notify-test-{}", std::process::id());
        let socket =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let notifier = Notifier::parse(Some(os(&format!("@{name}"))), None, None, 1);
        notifier.ready("up");
        assert_eq!(receive(&socket), "READY=1\nSTATUS=up");
        assert_eq!(notifier.ping_every(), None, "no WATCHDOG_USEC, no pings");
    }

    #[test]
    fn the_watchdog_belongs_to_the_pid_it_names() {
        let p = Some(os("/run/systemd/notify"));
        let usec = Some(os("30000000"));
        let half = Some(Duration::from_secs(15));
        assert_eq!(
            Notifier::parse(p, usec, Some(os("42")), 42).ping_every(),
            half
        );
        assert_eq!(
            Notifier::parse(p, usec, Some(os("43")), 42).ping_every(),
            None
        );
        assert_eq!(
            Notifier::parse(p, Some(os("0")), None, 42).ping_every(),
            None
        );
        assert_eq!(
            Notifier::parse(p, Some(os("soon")), None, 42).ping_every(),
            None
        );
        // Without a socket there is nobody to ping.
        assert_eq!(Notifier::parse(None, usec, None, 42).ping_every(), None);
        assert!(Notifier::parse(Some(os("vsock:2:1")), None, None, 42)
            .socket
            .is_none());
        assert!(Notifier::parse(Some(os("")), None, None, 42)
            .socket
            .is_none());
    }

    #[test]
    fn nothing_is_sent_without_a_socket() {
        // Must neither fail nor block: the daemon also runs outside systemd.
        let n = Notifier::default();
        n.ready("up");
        n.ping();
        n.stopping();
    }

    #[tokio::test]
    async fn the_watchdog_pings_only_while_healthy() {
        let (_dir, socket, notifier) = bound();
        let checks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = checks.clone();
        // Healthy, then failing twice, then healthy again.
        let task = tokio::spawn(watchdog(
            Arc::new(notifier),
            Duration::from_millis(40),
            "serving".into(),
            move || {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    match n {
                        1 | 2 => Err("the read connection fails: locked".to_string()),
                        _ => Ok(()),
                    }
                }
            },
        ));
        let seen: Vec<String> =
            tokio::task::spawn_blocking(move || (0..5).map(|_| receive(&socket)).collect())
                .await
                .unwrap();
        task.abort();
        assert_eq!(
            seen,
            [
                "WATCHDOG=1",
                "STATUS=unhealthy: the read connection fails: locked",
                "STATUS=unhealthy: the read connection fails: locked",
                "STATUS=serving",
                "WATCHDOG=1",
            ]
        );
    }

    #[tokio::test]
    async fn a_check_that_hangs_is_a_failure() {
        let (_dir, socket, notifier) = bound();
        let task = tokio::spawn(watchdog(
            Arc::new(notifier),
            Duration::from_millis(40),
            "serving".into(),
            std::future::pending::<Result<(), String>>,
        ));
        let first = tokio::task::spawn_blocking(move || receive(&socket))
            .await
            .unwrap();
        task.abort();
        assert_eq!(
            first,
            "STATUS=unhealthy: the health check did not answer within 20ms"
        );
    }

    /// `workers_alive()` once `done` holds, or at the deadline.
    fn wait_for(done: impl Fn() -> bool) -> Result<(), String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        workers_alive()
    }

    #[test]
    fn a_worker_thread_that_ends_makes_the_daemon_unhealthy() {
        let dir = tempfile::tempdir().unwrap();
        crate::edge::init(dir.path(), false, crate::edge::Layout::StateDir, None).unwrap();
        // No other test of this binary starts the workers.
        assert!(workers_alive().is_err());
        let metrics = Arc::new(super::super::metrics::Metrics::default());
        let edge = crate::edge::Edge::open(dir.path()).unwrap();
        let reads = Arc::new(std::sync::Mutex::new(edge.connection().unwrap()));
        let senders =
            super::super::workers::start(metrics, reads, edge, Default::default()).unwrap();
        // A new thread takes its name a moment after `spawn` returns.
        assert_eq!(wait_for(|| workers_alive().is_ok()), Ok(()));
        // Without senders both workers return, as after a panic.
        drop(senders);
        let verdict = wait_for(|| workers_alive().is_err());
        let why = verdict.unwrap_err();
        assert!(
            why.starts_with("the ") && why.ends_with("-worker thread is gone"),
            "{why}"
        );
    }
}
