//! One edge under test: a state dir, settings on free ports, the hapctl binary and the HAProxy
//! it starts (stopped on drop).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use hapctl::haproxy::{CliSocket, Master, ProcList};
use hapctl::process::pid_alive;

use crate::{describe, free_port, hapctl_bin, haproxy_bin, http_get, run_bounded, Response};

/// One edge under test: a state dir, settings on a free port, and the HAProxy it starts.
pub struct Edge {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The `[edge] https_bind` port (127.0.0.1), free when the edge was made.
    pub https_port: u16,
    env: Vec<(String, String)>,
}

impl Edge {
    /// A fresh state dir (`hapctl init`), HAProxy not started.
    // Not `Default`: making one runs `hapctl init` in a new temp dir.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Edge {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let https_port = loop {
            let p = free_port();
            if p != port {
                break p;
            }
        };
        let edge = Edge {
            port,
            https_port,
            dir,
            env: vec![(
                "HAPCTL_HAPROXY_BIN".into(),
                haproxy_bin().display().to_string(),
            )],
        };
        let bind = format!("127.0.0.1:{}", edge.port);
        edge.ok(&["init", "--http-bind", &bind]);
        // Never the built-in 127.0.0.1:8443 and :601: suites run in parallel.
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
        // `init` picks user = "haproxy" where that user exists; the suites keep root workers
        // (as before the setting) unless they opt in, as tests/edge/privileges.rs does.
        edge.set_setting_keys("haproxy", &[("user", String::new())]);
        edge
    }

    /// A fresh edge with HAProxy running.
    pub fn started() -> Edge {
        let edge = Edge::new();
        edge.ok(&["haproxy", "start"]);
        edge
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
        let mut cmd = Command::new(hapctl_bin());
        cmd.arg("--state-dir").arg(self.dir.path()).args(args);
        cmd.env_remove("HAPCTL_FAULT");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs hapctl (bounded to 120 s) and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.command(args), Duration::from_secs(120))
    }

    /// Runs hapctl and asserts exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "hapctl {args:?} failed: {}",
            describe(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
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
        self.master()
            .show_proc()
            .expect("show proc on the master socket")
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

    pub fn get_from(&self, source: Ipv4Addr, host: &str, path: &str) -> Response {
        http_get(Some(source), self.port, host, path, &[])
    }

    pub fn get_with_headers(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        http_get(None, self.port, host, path, headers)
    }

    /// Polls until `host` answers 200 with `body` (a reload takes effect for new connections).
    pub fn wait_for_body(&self, host: &str, body: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.get(host, "/");
            if r.status == 200 && r.body == body {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{host} never served {body:?}; last: {r:?}"
            );
            thread::sleep(Duration::from_millis(20));
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
        // Stop the master even if the test failed half-way: SIGTERM, then SIGKILL.
        let Ok(pid) = std::fs::read_to_string(self.path("run/haproxy.pid")) else {
            return;
        };
        let Ok(pid) = pid.trim().parse::<i32>() else {
            return;
        };
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && pid_alive(pid) {
            thread::sleep(Duration::from_millis(10));
        }
        if unsafe { libc::kill(pid, 0) } == 0 {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
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
