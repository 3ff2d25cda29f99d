//! A throwaway HAProxy for tests: temp dir, free loopback port, and a guard that always stops
//! it, even when the test panics.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::process::{pid_alive, send_signal};
use crate::prove::http::{self, Timeouts};

use super::master::Master;
use super::supervisor::{StartReport, Supervisor, SupervisorError};

// The kit's free port, from its source: these unit tests cannot link the kit (it links hapctl).
#[path = "../../../testkit/src/ports.rs"]
mod ports;
pub(crate) use ports::free_port;

/// The HAProxy under test: `HAPCTL_HAPROXY_BIN` (to test another version) or Debian's.
pub(crate) fn haproxy_bin() -> PathBuf {
    std::env::var_os(crate::settings::HAPROXY_BIN_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/haproxy"))
}

/// A main configuration answering 200 on `port`.
pub(crate) fn edge_config(port: u16) -> String {
    format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         frontend edge\n    bind 127.0.0.1:{port}\n    http-request return status 200 content-type text/plain string ok\n"
    )
}

/// Status code of `GET /` on a loopback port (prove's client).
pub(crate) fn http_get(port: u16) -> u16 {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        read: Duration::from_secs(5),
    };
    http::get(addr, "test", "/", timeouts, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("GET / on {addr}: {e}"))
        .head
        .status
}

/// Files and paths of one test edge; stops whatever master it started when dropped.
pub(crate) struct TestEdge {
    pub port: u16,
    pub generation: PathBuf,
    pub pidfile: PathBuf,
    pub supervisor: Supervisor,
    started: RefCell<Vec<i32>>,
    // Last, so the files outlive the master during Drop.
    _dir: tempfile::TempDir,
}

impl TestEdge {
    pub(crate) fn new() -> TestEdge {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("haproxy.cfg");
        let generation = dir.path().join("generation.cfg");
        std::fs::write(&config, edge_config(port)).unwrap();
        std::fs::write(&generation, "").unwrap();
        let pidfile = dir.path().join("run/haproxy.pid");
        let supervisor = Supervisor::Direct {
            binary: haproxy_bin(),
            files: vec![config, generation.clone()],
            master_socket: dir.path().join("run/master.sock"),
            pidfile: pidfile.clone(),
            log_file: dir.path().join("haproxy.log"),
        };
        TestEdge {
            port,
            generation,
            pidfile,
            supervisor,
            started: RefCell::new(Vec::new()),
            _dir: dir,
        }
    }

    /// Starts the master; whatever it started is stopped when the edge is dropped.
    pub(crate) fn try_start(&self) -> Result<StartReport, SupervisorError> {
        let result = self.supervisor.start(Duration::from_secs(20));
        if let Ok(report) = &result {
            self.started.borrow_mut().push(report.master_pid);
        }
        result
    }

    pub(crate) fn start(&self) -> StartReport {
        self.try_start().expect("test HAProxy did not start")
    }

    pub(crate) fn master(&self) -> Master {
        self.supervisor.master()
    }
}

impl Drop for TestEdge {
    fn drop(&mut self) {
        let mut pids = self.started.borrow().clone();
        if let Some(pid) = std::fs::read_to_string(&self.pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            pids.push(pid);
        }
        for pid in pids {
            stop_pid(pid);
        }
    }
}

/// SIGTERM, up to 5 s, then SIGKILL to the master's whole process group; reaps it.
fn stop_pid(pid: i32) {
    let reap = || {
        // SAFETY: WNOHANG waitpid on one PID; ECHILD when it is not ours.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    };
    // After a test's own `stop`, the PID may already belong to an unrelated process.
    let is_haproxy = std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("haproxy"));
    if !pid_alive(pid) || !is_haproxy {
        reap();
        return;
    }
    let _ = send_signal(pid, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(pid) && Instant::now() < deadline {
        reap();
        thread::sleep(Duration::from_millis(10));
    }
    if pid_alive(pid) {
        let _ = send_signal(-pid, libc::SIGKILL);
        let _ = send_signal(pid, libc::SIGKILL);
        thread::sleep(Duration::from_millis(50));
    }
    reap();
}

#[test]
fn the_guard_stops_the_master_even_when_the_test_panics() {
    let edge = TestEdge::new();
    let pid = edge.start().master_pid;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _edge = edge;
        panic!("test failure");
    }));
    assert!(result.is_err());
    assert!(!pid_alive(pid), "master {pid} survived its test");
}
