//! One edge under test: a state dir, settings on free ports, the hapctl binary and the HAProxy
//! it starts (stopped on drop).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::haproxy::{CliSocket, Master, ProcList};
use hapctl::process::{pid_alive, run_with_timeout};
use hapctl::settings::{Settings, HAPROXY_BIN_ENV};

use crate::{
    check_runs, counting_haproxy, describe, free_port, hapctl_bin, haproxy_bin, http_get,
    try_http_get, Response,
};

/// How an [`Edge`] is made: the tests' defaults ([`EdgeSetup::for_tests`]) or a benchmark's.
#[derive(Debug, Clone)]
pub struct EdgeSetup {
    /// The hapctl binary every command runs.
    pub hapctl: PathBuf,
    /// hapctl runs haproxy through a wrapper that logs its calls ([`Edge::check_runs`]).
    pub counting: bool,
    /// `[haproxy] user = ""`: workers stay root, as the suites ran them before the setting;
    /// false keeps the user `hapctl init` picked.
    pub root_workers: bool,
    /// Bound on each hapctl command.
    pub command_timeout: Duration,
}

impl EdgeSetup {
    /// The binary cargo built beside the test, the real haproxy, root workers, 120 s per
    /// command.
    pub fn for_tests() -> EdgeSetup {
        EdgeSetup {
            hapctl: hapctl_bin(),
            counting: false,
            root_workers: true,
            command_timeout: Duration::from_secs(120),
        }
    }
}

/// One edge under test: a state dir, settings on a free port, and the HAProxy it starts.
pub struct Edge {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The `[edge] https_bind` port (127.0.0.1), free when the edge was made.
    pub https_port: u16,
    env: Vec<(String, String)>,
    hapctl: PathBuf,
    command_timeout: Duration,
    /// The counting wrapper's log, when the edge was made with one.
    calls_log: Option<PathBuf>,
}

impl Edge {
    /// A fresh state dir (`hapctl init`), HAProxy not started.
    // Not `Default`: making one runs `hapctl init` in a new temp dir.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Edge {
        Edge::try_new(&EdgeSetup::for_tests()).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// A fresh state dir made by `setup.hapctl init` on free loopback ports (never the
    /// built-in ones), HAProxy not started.
    pub fn try_new(setup: &EdgeSetup) -> anyhow::Result<Edge> {
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let https_port = loop {
            let p = free_port();
            if p != port {
                break p;
            }
        };
        let (haproxy, calls_log) = if setup.counting {
            let (wrapper, log) = counting_haproxy(dir.path());
            (wrapper, Some(log))
        } else {
            (haproxy_bin(), None)
        };
        let edge = Edge {
            port,
            https_port,
            dir,
            env: vec![(HAPROXY_BIN_ENV.into(), haproxy.display().to_string())],
            hapctl: setup.hapctl.clone(),
            command_timeout: setup.command_timeout,
            calls_log,
        };
        let bind = format!("127.0.0.1:{}", edge.port);
        edge.try_ok(&["init", "--http-bind", &bind])?;
        // Never the built-in 127.0.0.1:8443 and :601: suites and benches run in parallel.
        edge.set_setting_keys(
            "edge",
            &[("https_bind", format!("127.0.0.1:{}", edge.https_port))],
        );
        let log_port = loop {
            let p = free_port();
            if p != port && p != https_port {
                break p;
            }
        };
        edge.set_setting_keys("logs", &[("listen", format!("127.0.0.1:{log_port}"))]);
        if setup.root_workers {
            // `init` picks user = "haproxy" where that user exists; the suites keep root
            // workers unless they opt in, as tests/edge/privileges.rs does.
            edge.set_setting_keys("haproxy", &[("user", String::new())]);
        }
        Ok(edge)
    }

    /// A fresh edge on a HAProxy that serves QUIC ([`crate::quic_haproxy_bin`]), running:
    /// `[edge] http3` ("auto") turns HTTP/3 on.
    pub fn started_with_quic() -> Edge {
        let mut edge = Edge::new();
        edge.set_env(
            HAPROXY_BIN_ENV,
            &crate::quic_haproxy_bin().display().to_string(),
        );
        edge.start().unwrap_or_else(|e| panic!("{e:#}"));
        edge
    }

    /// A fresh edge with HAProxy running.
    pub fn started() -> Edge {
        let edge = Edge::new();
        edge.start().unwrap_or_else(|e| panic!("{e:#}"));
        edge
    }

    /// `hapctl haproxy start`; from here on, drop stops the master.
    pub fn start(&self) -> anyhow::Result<()> {
        self.try_ok(&["haproxy", "start"]).map(drop)
    }

    pub fn state_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Sets an environment variable for every later hapctl run.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.hapctl);
        cmd.arg("--state-dir").arg(self.dir.path()).args(args);
        // The run's own fault injection and log level never leak into an edge's commands.
        cmd.env_remove("HAPCTL_FAULT").env_remove("HAPCTL_LOG");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs hapctl (bounded) and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.try_run(args).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// [`Edge::run`], an error when the command cannot run or outlives its bound.
    pub fn try_run(&self, args: &[&str]) -> anyhow::Result<Output> {
        run_with_timeout(&mut self.command(args), self.command_timeout)
            .with_context(|| format!("hapctl {}", args.join(" ")))
    }

    /// Runs hapctl and asserts exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.try_ok(args).unwrap_or_else(|e| panic!("{e:#}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// [`Edge::ok`], an error unless hapctl exits 0.
    pub fn try_ok(&self, args: &[&str]) -> anyhow::Result<Output> {
        let out = self.try_run(args)?;
        if !out.status.success() {
            bail!("hapctl {args:?} failed: {}", describe(&out));
        }
        Ok(out)
    }

    /// Runs hapctl and asserts the exit code; returns stdout + stderr.
    pub fn expect_code(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "hapctl {args:?}: {}",
            describe(&out)
        );
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    pub fn settings_text(&self) -> String {
        std::fs::read_to_string(self.path("hapctl.toml")).unwrap()
    }

    pub fn write_settings(&self, text: &str) {
        std::fs::write(self.path("hapctl.toml"), text).unwrap();
    }

    /// `[resolvers]` asking `nameserver`, each answer held 1 s.
    pub fn set_resolvers(&self, nameserver: std::net::SocketAddr) {
        self.write_settings(&format!(
            "{}\n[resolvers]\nnameservers = [\"{nameserver}\"]\nhold_valid = \"1s\"\n",
            self.settings_text()
        ));
    }

    /// Sets `key = "value"` (TOML strings) in `[section]` of hapctl.toml, replacing the keys
    /// already there (commented-out lines are left alone); appends the section if missing.
    pub fn set_setting_keys(&self, section: &str, keys: &[(&str, String)]) {
        let text = self.settings_text();
        let header = format!("[{section}]");
        let key_of = |line: &str| line.split('=').next().unwrap_or("").trim().to_string();
        let mut out = Vec::new();
        let mut in_section = false;
        let mut found = false;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                in_section = trimmed == header;
                out.push(line.to_string());
                if in_section {
                    found = true;
                    for (k, v) in keys {
                        out.push(format!("{k} = {}", toml::Value::String(v.clone())));
                    }
                }
                continue;
            }
            if in_section
                && !trimmed.starts_with('#')
                && keys.iter().any(|(k, _)| key_of(trimmed) == *k)
            {
                continue;
            }
            out.push(line.to_string());
        }
        if !found {
            out.push(header);
            for (k, v) in keys {
                out.push(format!("{k} = {}", toml::Value::String(v.clone())));
            }
        }
        self.write_settings(&(out.join("\n") + "\n"));
    }

    /// `[acme]` for a test CA: its directory, the root its HTTPS endpoint is signed by, an
    /// optional DNS-01 hook, no propagation wait, and an order bounded well below the
    /// harness's 120 s command limit.
    pub fn set_acme(&self, directory: &str, ca_root: &Path, dns_hook: Option<&Path>) {
        let mut keys = vec![
            ("directory", directory.to_string()),
            ("ca_root", ca_root.display().to_string()),
            ("dns_propagation", "0s".to_string()),
            ("order_timeout", "30s".to_string()),
        ];
        if let Some(hook) = dns_hook {
            keys.push(("dns_hook", hook.display().to_string()));
        }
        self.set_setting_keys("acme", &keys);
    }

    /// The HTTPS bind's address.
    pub fn https_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.https_port))
    }

    pub fn master(&self) -> Master {
        Master::new(CliSocket::new(
            self.path("run/master.sock"),
            Duration::from_secs(5),
        ))
    }

    pub fn show_proc(&self) -> ProcList {
        self.try_show_proc().unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// `show proc`, retried while the master re-executes (bounded to 10 s).
    pub fn try_show_proc(&self) -> anyhow::Result<ProcList> {
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

    pub fn master_pid(&self) -> i32 {
        self.show_proc().master.pid
    }

    /// Every live file HAProxy reads, with its bytes, sorted by path.
    pub fn live_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        collect_files(&self.path("live"), &mut out);
        out.sort();
        out
    }

    /// Leftover temp files anywhere in the state dir.
    pub fn temp_files(&self) -> Vec<PathBuf> {
        let mut all = Vec::new();
        collect_files(self.dir.path(), &mut all);
        all.into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.to_string_lossy().contains(".hapctl-tmp."))
            .collect()
    }

    /// `haproxy -c` on the live set, as HAProxy itself judges it.
    pub fn live_set_is_valid(&self) -> bool {
        Command::new(haproxy_bin())
            .args(["-c", "-q", "-f"])
            .arg(self.path("live/haproxy.cfg"))
            .arg("-f")
            .arg(self.path("live/generation.cfg"))
            .status()
            .unwrap()
            .success()
    }

    pub fn get(&self, host: &str, path: &str) -> Response {
        http_get(None, self.port, host, path, &[])
    }

    /// [`Edge::get`], saying why there is no answer instead of panicking.
    pub fn try_get(&self, host: &str, path: &str) -> Result<Response, String> {
        try_http_get(None, self.port, host, path, &[])
    }

    pub fn get_from(&self, source: Ipv4Addr, host: &str, path: &str) -> Response {
        http_get(Some(source), self.port, host, path, &[])
    }

    pub fn get_with_headers(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        http_get(None, self.port, host, path, headers)
    }

    /// Polls until `host` answers 200 with `body` (a reload takes effect for new connections).
    pub fn wait_for_body(&self, host: &str, body: &str) {
        self.try_wait_for_body(host, body)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// [`Edge::wait_for_body`], an error after 10 s.
    pub fn try_wait_for_body(&self, host: &str, body: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.try_get(host, "/");
            if r.as_ref().is_ok_and(|r| r.status == 200 && r.body == body) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{host} never served {body:?}; last: {r:?}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `hapctl.toml` as hapctl reads it now.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        Settings::load(self.dir.path()).context("load hapctl.toml")
    }

    /// How many `haproxy -c` runs the counting wrapper has seen so far.
    ///
    /// # Panics
    /// When the edge was not made with [`EdgeSetup::counting`].
    pub fn check_runs(&self) -> usize {
        check_runs(
            self.calls_log
                .as_ref()
                .expect("an edge made with a counting haproxy"),
        )
    }

    /// Waits (bounded) until no old worker is left, so each measurement starts from the same
    /// state. Returns false if some were still there at the bound.
    pub fn wait_old_workers_gone(&self, bound: Duration) -> anyhow::Result<bool> {
        let deadline = Instant::now() + bound;
        loop {
            if self.try_show_proc()?.old_workers.is_empty() {
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
        let marker = self.path("run/unchecked");
        let deadline = Instant::now() + bound;
        while marker.exists() {
            if Instant::now() > deadline {
                bail!("the runtime-changed set was not checked within {bound:?}");
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Stops the master the pidfile names, if it is a running haproxy (a stale pidfile may
    /// name a reused PID): SIGTERM, then SIGKILL after 10 s.
    pub fn stop_haproxy(&self) {
        let Ok(text) = std::fs::read_to_string(self.path("run/haproxy.pid")) else {
            return;
        };
        let Ok(pid) = text.trim().parse::<i32>() else {
            return;
        };
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

/// Prints the last `n` lines of `path` to stderr, headed `what`: what a failed test leaves
/// for whoever reads the CI log, since the temp dir goes with the test.
pub fn print_tail(what: &str, path: &std::path::Path, n: usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    eprintln!(
        "--- the last {n} lines of {what} ({})\n{tail}",
        path.display()
    );
}

impl Drop for Edge {
    fn drop(&mut self) {
        if thread::panicking() {
            print_tail("HAProxy's log", &self.path("haproxy.log"), 40);
        }
        // Stop the master even if the test failed half-way.
        self.stop_haproxy();
    }
}

/// Also the cached builds named by version (`haproxy-3.2`, `haproxy-3.4`): their name is
/// their `comm`.
fn is_haproxy(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim().starts_with("haproxy"))
}

pub(crate) fn collect_files(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            collect_files(&p, out);
        } else if ft.is_file() {
            out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
        }
    }
}
