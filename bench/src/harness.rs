//! A real edge to measure: a state dir made by `hapctl init` in a temp dir, a public listener
//! and the HTTPS bind on free loopback ports, a counting wrapper in front of haproxy, the
//! release hapctl binary, and a tiny HTTP backend. Everything started here is stopped on drop
//! (also on errors and panics), and the temp dir is removed.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::haproxy::{CliSocket, Master, ProcList};
use hapctl::model::EdgeState;
use hapctl::process::{pid_alive, run_with_timeout};
use hapctl::settings::{Settings, HAPROXY_BIN_ENV};
use hapctl::store::Store;

use crate::stats::Summary;
use crate::sys::{self, TempDir};
use testkit::http;

/// Bound on every hapctl command the harness runs (a 10,000-domain start included).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

pub struct Edge {
    pub hapctl: PathBuf,
    pub state_dir: PathBuf,
    /// The public listener's port on 127.0.0.1.
    pub port: u16,
    /// `[edge] https_bind`: a free 127.0.0.1 port (never the built-in 8443).
    pub https: SocketAddr,
    pub settings: Settings,
    wrapper: PathBuf,
    calls_log: PathBuf,
    started: bool,
    // Last: removed after HAProxy was stopped (see Drop).
    dir: TempDir,
}

impl Edge {
    /// `hapctl init --http-bind 127.0.0.1:<free port>` in a fresh temp dir, then `[edge]
    /// https_bind` in `hapctl.toml` moved to another free loopback port (never the built-in
    /// 8443); HAProxy not started.
    pub fn init(hapctl: &Path, label: &str) -> anyhow::Result<Edge> {
        let dir = TempDir::new(label)?;
        let (wrapper, calls_log) = testkit::counting_haproxy(dir.path());
        let state_dir = dir.path().join("state");
        let port = testkit::free_port();
        let https_port = loop {
            let p = testkit::free_port();
            if p != port {
                break p;
            }
        };
        let https = SocketAddr::from((Ipv4Addr::LOCALHOST, https_port));
        let mut edge = Edge {
            hapctl: hapctl.to_path_buf(),
            state_dir: state_dir.clone(),
            port,
            https,
            settings: Settings::parse(&state_dir, Path::new("-"), "")?,
            wrapper,
            calls_log,
            started: false,
            dir,
        };
        edge.ok(&["init", "--http-bind", &format!("127.0.0.1:{port}")])?;
        // Never the built-in ports: benches and suites may run beside each other.
        let log_listen = SocketAddr::from((Ipv4Addr::LOCALHOST, testkit::free_port()));
        let path = state_dir.join("hapctl.toml");
        let mut text = std::fs::read_to_string(&path)?;
        for (builtin, ours) in [
            (
                "https_bind = \"127.0.0.1:8443\"",
                format!("https_bind = \"{https}\""),
            ),
            (
                "listen = \"127.0.0.1:601\"",
                format!("listen = \"{log_listen}\""),
            ),
        ] {
            if !text.contains(builtin) {
                bail!("{} has no line {builtin}", path.display());
            }
            text = text.replacen(builtin, &ours, 1);
        }
        std::fs::write(&path, text)?;
        edge.settings = Settings::load(&state_dir)?;
        if edge.settings.edge.https_bind != Some(https) {
            bail!(
                "hapctl.toml: https_bind is {:?}, not {https}",
                edge.settings.edge.https_bind
            );
        }
        Ok(edge)
    }

    /// The temp dir holding the state dir (logs and scripts of the bench go next to it).
    pub fn work_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Re-reads `hapctl.toml` (after the bench edited it).
    pub fn reload_settings(&mut self) -> anyhow::Result<()> {
        self.settings = Settings::load(&self.state_dir)?;
        Ok(())
    }

    /// A hapctl command on this state dir, haproxy being the counting wrapper.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.hapctl);
        cmd.arg("--state-dir")
            .arg(&self.state_dir)
            .args(args)
            .env(HAPROXY_BIN_ENV, &self.wrapper)
            .env_remove("HAPCTL_FAULT")
            .env_remove("HAPCTL_LOG");
        cmd
    }

    /// Runs a hapctl command (bounded) and insists on exit 0.
    pub fn ok(&self, args: &[&str]) -> anyhow::Result<Output> {
        let out = run_with_timeout(&mut self.command(args), COMMAND_TIMEOUT)?;
        if !out.status.success() {
            bail!("hapctl {}: {}", args.join(" "), sys::describe(&out));
        }
        Ok(out)
    }

    /// Writes `state` into the database directly (no apply runs): the domains and proxies in one
    /// transaction, the blocks (their own database file) in another.
    pub fn load(&self, state: &EdgeState) -> anyhow::Result<()> {
        let paths = &self.settings.paths;
        let mut store = Store::open(&paths.database, &paths.blocks_database)?;
        let tx = store.begin()?;
        for (domain, backend) in &state.domains {
            tx.put_domain(domain, backend, 1_700_000_000)?;
        }
        for net in &state.trusted_proxies {
            tx.add_trusted_proxy(net)?;
        }
        tx.commit()?;
        drop(store);
        self.add_blocks(&crate::fixture::blocks())
    }

    /// Inserts blocks straight into the blocks database, in one transaction.
    pub fn add_blocks(&self, blocks: &[hapctl::model::Block]) -> anyhow::Result<()> {
        let paths = &self.settings.paths;
        let mut store = Store::open(&paths.database, &paths.blocks_database)?;
        let tx = store.begin_blocks()?;
        for block in blocks {
            tx.put_block(block)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Times `Store::load_state` (what every apply does first) on this edge's database.
    pub fn time_load_state(&self, times: usize) -> anyhow::Result<Summary> {
        let paths = &self.settings.paths;
        let store = Store::open(&paths.database, &paths.blocks_database)?;
        let mut samples = Vec::new();
        for _ in 0..times.max(1) {
            let t = Instant::now();
            std::hint::black_box(store.load_state()?);
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(Summary::of(&samples).expect("at least one sample"))
    }

    /// One `haproxy -c` of the live set with the real binary (not counted), in ms.
    pub fn time_haproxy_check(&self) -> anyhow::Result<f64> {
        let paths = &self.settings.paths;
        let mut cmd = Command::new(testkit::haproxy_bin());
        cmd.args(["-c", "-q", "-f"])
            .arg(&paths.config)
            .arg("-f")
            .arg(&paths.generation);
        let t = Instant::now();
        let out = run_with_timeout(&mut cmd, COMMAND_TIMEOUT)?;
        let elapsed = t.elapsed().as_secs_f64() * 1000.0;
        if !out.status.success() {
            bail!("haproxy -c on the live set failed: {}", sys::describe(&out));
        }
        Ok(elapsed)
    }

    /// `hapctl haproxy start`; from here on, drop stops the master.
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.started = true;
        self.ok(&["haproxy", "start"])?;
        Ok(())
    }

    pub fn master(&self) -> Master {
        Master::new(CliSocket::new(
            &self.settings.paths.master_socket,
            Duration::from_secs(5),
        ))
    }

    /// `show proc`, retried while the master re-executes (bounded).
    pub fn show_proc(&self) -> anyhow::Result<ProcList> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.master().show_proc() {
                Ok(p) => return Ok(p),
                Err(e) if Instant::now() > deadline => {
                    return Err(e).context("show proc on the master socket")
                }
                Err(_) => thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Waits (bounded) until no old worker is left, so each measurement starts from the same
    /// state. Returns false if some were still there at the bound.
    pub fn wait_old_workers_gone(&self, bound: Duration) -> anyhow::Result<bool> {
        let deadline = Instant::now() + bound;
        loop {
            if self.show_proc()?.old_workers.is_empty() {
                return Ok(true);
            }
            if Instant::now() > deadline {
                return Ok(false);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) until no old worker is left and a runtime-changed set is checked (the
    /// CLI checks before it exits; the daemon when idle). `run/unchecked` is the marker
    /// `apply/pending.rs` keeps while such a set waits for its check.
    pub fn settle(&self, bound: Duration) -> anyhow::Result<()> {
        if !self.wait_old_workers_gone(bound)? {
            eprintln!("  (old workers still draining after {bound:?}; measuring anyway)");
        }
        let marker = self.settings.paths.run_dir.join("unchecked");
        let deadline = Instant::now() + bound;
        while marker.exists() {
            if Instant::now() > deadline {
                bail!("the runtime-changed set was not checked within {bound:?}");
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// How many `haproxy -c` runs the wrapper has seen so far.
    pub fn check_runs(&self) -> usize {
        testkit::check_runs(&self.calls_log)
    }

    /// GET / with this Host through the edge, on a fresh connection.
    pub fn get(&self, host: &str) -> std::io::Result<(u16, String)> {
        http_get(self.port, host)
    }

    /// Stops the master started by `start`: SIGTERM, then SIGKILL after 10 s.
    pub fn stop_haproxy(&mut self) {
        if !std::mem::take(&mut self.started) {
            return;
        }
        let Ok(text) = std::fs::read_to_string(&self.settings.paths.pidfile) else {
            return;
        };
        let Ok(pid) = text.trim().parse::<i32>() else {
            return;
        };
        // Only ever signal the HAProxy this pidfile names (a stale pidfile may name a reused PID).
        if !is_haproxy(pid) {
            return;
        }
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && pid_alive(pid) {
            thread::sleep(Duration::from_millis(10));
        }
        if pid_alive(pid) && is_haproxy(pid) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        self.stop_haproxy();
        // `dir` is dropped after this, removing the state dir.
    }
}

fn is_haproxy(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim() == "haproxy")
        .unwrap_or(false)
}

/// A plain HTTP/1.1 GET / with `Connection: close`, every step bounded; status and body.
pub fn http_get(port: u16, host: &str) -> std::io::Result<(u16, String)> {
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&target, Duration::from_secs(2))?;
    get_on(stream, host)
}

/// [`http_get`] from another loopback source address (e.g. 127.10.0.1): what a client with
/// that IP gets from the edge.
pub fn http_get_from(source: Ipv4Addr, port: u16, host: &str) -> std::io::Result<(u16, String)> {
    get_on(
        http::connect(Some(source), port).map_err(std::io::Error::other)?,
        host,
    )
}

fn get_on(stream: TcpStream, host: &str) -> std::io::Result<(u16, String)> {
    let raw = http::raw_request("GET", "/", host, &[], None);
    let answer =
        http::exchange(stream, &raw, Duration::from_secs(5)).map_err(std::io::Error::other)?;
    Ok((answer.status, answer.text()))
}

/// The benches' backends: 200 and a fixed body on every request.
pub use testkit::Backend as HttpBackend;
