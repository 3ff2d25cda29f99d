//! What hapctl's tests and benchmarks run against: a real edge (the hapctl binary and a real
//! haproxy) in a temp dir on free loopback ports, real backends, and a plain HTTP client.
//! Everything started here is stopped on drop, also when a test panics.
//!
//! The hapctl binary is the one cargo built beside the test binary ([`hapctl_bin`]), so only
//! the test targets of the `hapctl` package (which cargo builds the binary for) use [`Edge`].

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hapctl::haproxy::{CliSocket, Master, ProcList};

/// The real haproxy binary: `HAPCTL_HAPROXY_BIN` (test.sh runs the suites again on 3.0
/// that way), else Debian's, which `.ci/run` installs; a test never skips without it.
pub fn haproxy_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os(hapctl::settings::HAPROXY_BIN_ENV) {
        return PathBuf::from(bin);
    }
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/usr/local/sbin"])
    {
        let p = Path::new(dir).join("haproxy");
        if p.is_file() {
            return p;
        }
    }
    panic!("haproxy is not installed: run ./scripts/test.sh, which installs it");
}

/// The HAProxy under test's (major, minor) version, for the few measured differences.
pub fn haproxy_version() -> (u32, u32) {
    let version = hapctl::haproxy::Validator::new(haproxy_bin(), Duration::from_secs(10))
        .version()
        .expect("haproxy -v");
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

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
        while Instant::now() < deadline && unsafe { libc::kill(pid, 0) } == 0 && !is_zombie(pid) {
            thread::sleep(Duration::from_millis(10));
        }
        if unsafe { libc::kill(pid, 0) } == 0 {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

fn collect_files(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
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

pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command (stdin closed, output captured) and panics if it takes longer than `timeout`
/// (it is killed then): hapctl's own bounded run, for tests.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Output {
    hapctl::process::run_with_timeout(&mut cmd, timeout)
        .unwrap_or_else(|e| panic!("command {cmd:?}: {e}"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
    /// What the backend saw in `X-Real-IP` (our test backends echo it).
    pub seen_real_ip: String,
    /// The response head, lowercased (`seen` reads the backend's echoes from it).
    pub head: String,
}

impl Response {
    /// The first response header `name` (lowercase), value lowercased.
    pub fn header(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}:");
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map(str::trim)
    }

    /// What the backend saw in request header `name` (lowercase), as it echoes it.
    pub fn seen(&self, name: &str) -> &str {
        let prefix = format!("x-seen-{name}:");
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or("")
            .trim()
    }
}

/// A plain HTTP/1.1 GET with `Connection: close`, every step bounded by a timeout.
/// `source` binds the client to another loopback address (e.g. 127.0.0.2) first.
pub fn http_get(
    source: Option<Ipv4Addr>,
    port: u16,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    http_send(source, "GET", port, host, path, headers)
}

/// [`http_get`] with another method (a body-less request: send `Content-Length: 0` for POST).
pub fn http_send(
    source: Option<Ipv4Addr>,
    method: &str,
    port: u16,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let stream = http::connect(source, port).expect("connect to the edge");
    let raw = http::raw_request(method, path, host, headers, None);
    let answer = http::exchange(stream, &raw, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{method} {path} on {host}: {e}"));
    let head = answer.head.to_lowercase();
    let seen_real_ip = answer.header("x-seen-real-ip").unwrap_or("").to_string();
    Response {
        status: answer.status,
        body: answer.text(),
        seen_real_ip,
        head,
    }
}

/// A TCP connection to the edge's port on 127.0.0.1 from `source` (a request left open).
pub fn connect_source(source: Ipv4Addr, port: u16) -> TcpStream {
    http::connect(Some(source), port).unwrap()
}

/// A backend server answering every request with 200 and a fixed body.
pub struct Backend {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl Backend {
    pub fn start(body: &str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let body = body.to_string();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let body = body.clone();
                thread::spawn(move || serve(&mut conn, &body));
            }
        });
        Backend { port, stop }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

fn serve(conn: &mut TcpStream, body: &str) {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // One request per connection is enough here; answer once the head is complete.
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_lowercase();
    // Echo what the edge told us about the client, so tests can check the real-IP logic.
    let seen = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let real_ip = seen("x-real-ip: ");
    let (proto, port) = (seen("x-forwarded-proto: "), seen("x-forwarded-port: "));
    let (cf, true_client) = (seen("cf-connecting-ip: "), seen("true-client-ip: "));
    // Every X-Request-Id line, comma-joined: a client's own must never arrive next to the edge's.
    let request_ids: Vec<&str> = head
        .lines()
        .filter_map(|l| l.strip_prefix("x-request-id: "))
        .map(str::trim)
        .collect();
    let request_id = request_ids.join(",");
    // The request line as the backend received it (method, normalised URI, version).
    let line = head.lines().next().unwrap_or("").trim();
    let resp = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-seen-request-line: {line}\r\nx-seen-request-id: {request_id}\r\nx-seen-real-ip: {real_ip}\r\nx-seen-forwarded-proto: {proto}\r\nx-seen-forwarded-port: {port}\r\nx-seen-cf-connecting-ip: {cf}\r\nx-seen-true-client-ip: {true_client}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(resp.as_bytes());
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A shell script standing in front of the real haproxy that logs each invocation's
/// arguments, to count `haproxy -c` runs. It `exec`s the real binary, so the master it starts
/// is the real one with the same PID.
pub fn counting_haproxy(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("haproxy-calls.log");
    let script = dir.join("haproxy-counting");
    let text = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        haproxy_bin().display()
    );
    write_script(&script, &text);
    (script, log)
}

/// Writes an executable shell script.
fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A wrapper in front of the real haproxy whose `haproxy -c` refuses a set holding `needle`: it
/// first runs `sed -i <sed>` on each checked file that contains `needle` (in place, so HAProxy
/// names the file and line hapctl wrote), then the real check. It stands for an HAProxy that
/// refuses what hapctl rendered for one item: the real one accepts every server the model
/// admits. It logs its calls as [`counting_haproxy`] does. `needle` and `sed` must not contain
/// `'`.
pub fn refusing_haproxy(dir: &Path, needle: &str, sed: &str) -> (PathBuf, PathBuf) {
    assert!(!needle.contains('\'') && !sed.contains('\''));
    let (script, log) = (dir.join("haproxy-refusing"), dir.join("haproxy-calls.log"));
    let text = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\ncase \" $* \" in *\" -c \"*)\n  prev=\n  for a in \"$@\"; do\n    if [ \"$prev\" = -f ] && grep -qF '{needle}' \"$a\"; then sed -i '{sed}' \"$a\"; fi\n    prev=\"$a\"\n  done;;\nesac\nexec '{}' \"$@\"\n",
        log.display(),
        haproxy_bin().display()
    );
    write_script(&script, &text);
    (script, log)
}

/// How many `haproxy -c` runs the counting wrapper saw.
pub fn check_runs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().any(|a| a == "-c"))
        .count()
}

/// The hapctl binary cargo built for the running test: beside `deps/`, where the test binary
/// itself lives (`target/<profile>/deps/<test>-<hash>`).
pub fn hapctl_bin() -> PathBuf {
    built_bin("hapctl", "cargo build -p hapctl")
}

/// The demo application, built with the workspace (`cargo build --workspace` builds it; the
/// test scripts do).
pub fn demo_app_bin() -> PathBuf {
    built_bin("demo-app", "cargo build -p demo-app")
}

/// `name` in the profile directory of the running test binary, which must exist.
fn built_bin(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary in target/<profile>/deps");
    let bin = profile_dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: run `{build}` (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// A long chunked stream read through the edge, line by line, in a thread.
pub struct Stream {
    handle: thread::JoinHandle<Result<Vec<String>, String>>,
}

impl Stream {
    /// Opens `/stream?lines=N&interval_ms=M` on `host` and waits for its first line.
    pub fn open(port: u16, host: &str, lines: u32, interval_ms: u32) -> Stream {
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let host = host.to_string();
        let handle = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(s, "GET /stream?lines={lines}&interval_ms={interval_ms} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            let mut told = false;
            loop {
                let n = s
                    .read(&mut buf)
                    .map_err(|e| format!("after {} lines: {e}", got.len()))?;
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&buf[..n]);
                got = decode_chunked_lines(&raw);
                if !told && !got.is_empty() {
                    let _ = first_tx.send(got[0].clone());
                    told = true;
                }
            }
            let text = String::from_utf8_lossy(&raw);
            if !text.ends_with("0\r\n\r\n") {
                return Err(format!(
                    "stream cut after {} lines (no final chunk)",
                    got.len()
                ));
            }
            Ok(got)
        });
        first_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the stream's first line");
        Stream { handle }
    }

    /// Waits for the end; returns every line, or why it broke.
    pub fn finish(self) -> Result<Vec<String>, String> {
        self.handle.join().unwrap()
    }
}

/// The lines carried by the complete chunks of a chunked HTTP response.
fn decode_chunked_lines(raw: &[u8]) -> Vec<String> {
    let Some(start) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Vec::new();
    };
    let (data, _) = http::dechunk(&raw[start + 4..]);
    String::from_utf8_lossy(&data)
        .lines()
        .map(String::from)
        .collect()
}

/// An edge with app `shop` (exec runner around demo-app, backend `applicatif`, server
/// `courante`) routed from `host`, and `first` delivered. Versions containing `never` never
/// become ready. Unlike [`Edge`] alone, dropping it also stops every generation it started.
pub fn demo_app_edge(host: &str, first: &str) -> DemoEdge {
    use std::os::unix::fs::PermissionsExt;
    let edge = DemoEdge { edge: Edge::new() };
    let script = edge.path("run-app.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in *never*) delay=600000;; *) delay=0;; esac\nexec '{}' --version \"$1\" --port \"$2\" --ready-delay-ms $delay\n",
            demo_app_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let first_port = free_port().min(65000);
    let settings = format!(
        "{}\n[[app]]\nname = \"shop\"\nbackend = \"applicatif\"\nserver = \"courante\"\nreadiness_path = \"/ready\"\nreadiness_timeout = \"2s\"\nversion_path = \"/version\"\nport_range = \"{first_port}-{}\"\nstop_grace = \"2s\"\n[app.runner]\nkind = \"exec\"\ncommand = \"./run-app.sh {{version}} {{port}}\"\n",
        edge.settings_text(),
        first_port + 30
    );
    edge.write_settings(&settings);
    edge.ok(&["haproxy", "start"]);
    edge.ok(&["domain", "add", host, "--app", "shop"]);
    edge.ok(&["deliver", first]);
    edge.wait_for_body(host, &format!("{first}\n"));
    edge
}

/// An [`Edge`] whose exec generations (`generations/<app>/<version>.pid`) are killed on drop,
/// before HAProxy is stopped, also when the test panicked.
pub struct DemoEdge {
    pub edge: Edge,
}

impl std::ops::Deref for DemoEdge {
    type Target = Edge;
    fn deref(&self) -> &Edge {
        &self.edge
    }
}

impl std::ops::DerefMut for DemoEdge {
    fn deref_mut(&mut self) -> &mut Edge {
        &mut self.edge
    }
}

impl DemoEdge {
    /// PIDs of the running generations, from their pidfiles (`PID START-TIME`), checked
    /// against PID reuse.
    pub fn generation_pids(&self) -> Vec<i32> {
        let mut pidfiles = Vec::new();
        collect_files(&self.path("generations"), &mut pidfiles);
        pidfiles
            .iter()
            .filter(|(p, _)| p.extension().is_some_and(|e| e == "pid"))
            .filter_map(|(_, bytes)| {
                let text = String::from_utf8_lossy(bytes);
                let mut parts = text.split_whitespace();
                let pid: i32 = parts.next()?.parse().ok()?;
                let stamp = parts.next()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let started = stat.rsplit(')').next()?.split_whitespace().nth(19)?;
                (pid > 1 && started == stamp).then_some(pid)
            })
            .collect()
    }
}

impl Drop for DemoEdge {
    fn drop(&mut self) {
        // Each exec generation leads its own session (setsid): kill the whole group.
        for pid in self.generation_pids() {
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

pub mod app;
pub mod daemon;
pub mod http;
pub mod pages;
pub mod pebble;
pub mod pki;
mod ports;
pub mod seed;
pub mod tls_corpus;

pub use ports::free_port;
