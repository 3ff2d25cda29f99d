//! A real ACME CA for tests: Debian's Pebble (`pebble`, `pebble-challtestsrv`, package
//! `pebble` 2.4.0) on free loopback ports in a temp dir.
//!
//! - `pebble` serves ACME on `directory_url()` (HTTPS, its own TLS certificate made here with
//!   `openssl`: trust `ca_root_path()` for the ACME connection) and a management API on its
//!   own HTTPS port (`/roots/0`, `/intermediates/0`: a NEW issuing root on every start).
//! - `pebble-challtestsrv` is Pebble's DNS server (`-dnsserver`): it answers every A query with
//!   127.0.0.1 (`set_default_ipv4`, or a name's own `add_a`), no AAAA, and the TXT records set
//!   through its plain-HTTP management API (`management_url()`, `set_txt`/`clear_txt`, or
//!   `testkit/fixtures/dns-hook.sh`). Its HTTP-01, HTTPS-01 and TLS-ALPN-01 listeners are off.
//! - HTTP-01: Pebble's validator resolves the identifier through challtestsrv (→ 127.0.0.1)
//!   and sends `GET http://<identifier>:<http01_port>/.well-known/acme-challenge/<token>` to
//!   127.0.0.1:`http01_port`, so the `Host` header is `<identifier>:<http01_port>` (with the
//!   port). It makes 3 concurrent validation requests per challenge, follows redirects and
//!   needs a 200 whose body (trailing whitespace trimmed) is the key authorization.
//! - Pebble's own test traps stay on: 5 % of good nonces are rejected (`badNonce`: clients
//!   must retry; instant-acme retries twice by itself) and valid authorizations of the same
//!   account are reused 50 % of the time (an order may come back `ready`, an authorization
//!   already `valid`). `start_with_env` can turn them off (`PEBBLE_WFE_NONCEREJECT=0`,
//!   `PEBBLE_AUTHZREUSE=0`; even then one order in a hundred reuses one, as Pebble makes a new
//!   authorization only when `rand.Intn(100) > percent`: a test that needs a fresh challenge
//!   uses a fresh account). `PEBBLE_VA_NOSLEEP=1` is always set (no random 0-5 s sleeps).
//!
//! Everything started here is stopped on drop (SIGTERM, then SIGKILL after a grace), also when
//! the test panics, and the temp dir is removed. Every external command and socket read is
//! bounded by a timeout.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::http;

/// How long Pebble may take to answer its directory (it generates RSA keys at start:
/// ~3 s measured on 2 cores, more when several tests start one at the same time).
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// SIGTERM → SIGKILL grace on drop.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Bound of every management call and every helper command.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The DNS-01 hook the product calls as `HOOK set|clear <record-name> <value>` (it reads
/// `CHALLTESTSRV_URL`, see `Pebble::hook_env`).
pub fn dns_hook_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/dns-hook.sh")
}

/// One Pebble + pebble-challtestsrv pair. Dropping it stops both and removes the temp dir.
pub struct Pebble {
    dir: tempfile::TempDir,
    acme_port: u16,
    pebble_mgmt_port: u16,
    dns_port: u16,
    chall_mgmt_port: u16,
    http01_port: u16,
    tls_port: u16,
    pebble: Option<Child>,
    challtestsrv: Option<Child>,
    startup: Duration,
}

impl Pebble {
    /// Start Pebble with its HTTP-01 validator pointed at 127.0.0.1:`http01_port` (the edge's
    /// HTTP bind). Waits (bounded) until the ACME directory answers; panics with the logs'
    /// tails if a process exits early or the directory never answers.
    pub fn start(http01_port: u16) -> Pebble {
        Pebble::start_with_env(http01_port, &[])
    }

    /// `start` with extra environment for `pebble`, e.g. `("PEBBLE_AUTHZREUSE", "0")`,
    /// `("PEBBLE_WFE_NONCEREJECT", "0")`, `("PEBBLE_VA_ALWAYS_VALID", "1")`.
    pub fn start_with_env(http01_port: u16, env: &[(&str, &str)]) -> Pebble {
        // A free port may be taken by someone else between our probe and the bind: retry a
        // few times on "address already in use", panic on anything else.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Pebble::try_start(http01_port, env) {
                Ok(p) => return p,
                Err(msg) if attempt < 3 && msg.contains("address already in use") => continue,
                Err(msg) => panic!("Pebble did not start: {msg}"),
            }
        }
    }

    fn try_start(http01_port: u16, env: &[(&str, &str)]) -> Result<Pebble, String> {
        let began = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("hapctl-pebble-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        make_tls_cert(dir.path())?;

        // Hold every probe socket until all ports are chosen, so they are distinct.
        let (acme, acme_port) = tcp_probe();
        let (mgmt, pebble_mgmt_port) = tcp_probe();
        let (cmgmt, chall_mgmt_port) = tcp_probe();
        let (tls, tls_port) = tcp_probe();
        let (dns_tcp, dns_udp, dns_port) = dns_probe();
        drop((acme, mgmt, cmgmt, tls, dns_tcp, dns_udp));

        let mut p = Pebble {
            dir,
            acme_port,
            pebble_mgmt_port,
            dns_port,
            chall_mgmt_port,
            http01_port,
            tls_port,
            pebble: None,
            challtestsrv: None,
            startup: Duration::ZERO,
        };
        let d = p.dir.path().to_path_buf();
        let config = serde_json::json!({
            "pebble": {
                "listenAddress": format!("127.0.0.1:{acme_port}"),
                "managementListenAddress": format!("127.0.0.1:{pebble_mgmt_port}"),
                "certificate": d.join("tls-cert.pem"),
                "privateKey": d.join("tls-key.pem"),
                "httpPort": http01_port,
                "tlsPort": tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false
            }
        });
        fs::write(
            d.join("pebble-config.json"),
            serde_json::to_vec_pretty(&config).unwrap(),
        )
        .map_err(|e| format!("config: {e}"))?;

        // From here on a failure drops `p`, which stops whatever was started.
        p.challtestsrv = Some(spawn_logged(
            Command::new("pebble-challtestsrv")
                .arg("-dns01")
                .arg(format!("127.0.0.1:{dns_port}"))
                .arg("-management")
                .arg(format!("127.0.0.1:{chall_mgmt_port}"))
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""]),
            &d.join("challtestsrv.log"),
        )?);
        let mut cmd = Command::new("pebble");
        cmd.arg("-config")
            .arg(d.join("pebble-config.json"))
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{dns_port}"))
            // A Go bool flag: `-strict false` would mean strict + a stray argument.
            .arg("-strict=false")
            .env("PEBBLE_VA_NOSLEEP", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        p.pebble = Some(spawn_logged(&mut cmd, &d.join("pebble.log"))?);

        let deadline = began + READY_TIMEOUT;
        let mut chall_up = false;
        loop {
            p.check_running()?;
            // challtestsrv does not exit when a bind fails (it logs and runs on without that
            // listener): look at its log, and ask its DNS server one real question.
            let clog = fs::read_to_string(d.join("challtestsrv.log")).unwrap_or_default();
            if clog.contains("address already in use") {
                return Err(format!(
                    "pebble-challtestsrv: address already in use\n{}",
                    p.log_tail()
                ));
            }
            if !chall_up {
                chall_up = TcpStream::connect_timeout(
                    &SocketAddr::from((Ipv4Addr::LOCALHOST, chall_mgmt_port)),
                    Duration::from_millis(200),
                )
                .is_ok()
                    && dns_query_txt(p.dns_server(), "ready.probe.test.").is_ok();
            }
            // Pebble binds only after generating its keys: probe the port first, then make
            // one real HTTPS request that also proves our TLS certificate is trusted.
            if chall_up
                && TcpStream::connect_timeout(
                    &SocketAddr::from((Ipv4Addr::LOCALHOST, acme_port)),
                    Duration::from_millis(200),
                )
                .is_ok()
            {
                let cafile = p.ca_root_path();
                let url = p.directory_url();
                let out = run_bounded(
                    Command::new("curl")
                        .args(["-sS", "--max-time", "2", "--cacert"])
                        .arg(&cafile)
                        .arg(&url),
                    Duration::from_secs(3),
                )?;
                if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("newOrder")
                {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{url} did not answer: {}\n{}",
                        String::from_utf8_lossy(&out.stderr),
                        p.log_tail()
                    ));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "not ready after {READY_TIMEOUT:?}\n{}",
                    p.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
        p.startup = began.elapsed();
        Ok(p)
    }

    /// `Err` with the logs' tails if either process has exited.
    fn check_running(&mut self) -> Result<(), String> {
        let mut exited = None;
        for (name, child) in [
            ("pebble", &mut self.pebble),
            ("pebble-challtestsrv", &mut self.challtestsrv),
        ] {
            if let Some(c) = child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    *child = None; // reaped
                    exited = Some((name, status));
                    break;
                }
            }
        }
        match exited {
            None => Ok(()),
            Some((name, status)) => Err(format!(
                "{name} exited early ({status})\n{}",
                self.log_tail()
            )),
        }
    }

    /// Panics with the logs' tails if Pebble or challtestsrv is no longer running.
    pub fn assert_running(&mut self) {
        if let Err(msg) = self.check_running() {
            panic!("{msg}");
        }
    }

    /// `https://127.0.0.1:PORT/dir`
    pub fn directory_url(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.acme_port)
    }

    /// The CA (PEM, one certificate) that signed Pebble's own TLS certificate: what an ACME
    /// client must trust to talk to `directory_url()` (`Account::builder_with_root`).
    pub fn ca_root_path(&self) -> PathBuf {
        self.dir.path().join("tls-ca.pem")
    }

    /// Pebble's management API (HTTPS, same TLS certificate as the ACME port).
    pub fn pebble_management_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.pebble_mgmt_port)
    }

    /// The issuing root(s) of this Pebble run (`/roots/0`, `/roots/1`, … while they exist),
    /// concatenated PEM: the trust anchor for certificates Pebble issues. New on every start.
    pub fn issuing_roots_pem(&self) -> String {
        self.management_pems("roots")
    }

    /// The intermediate(s) of this run (`/intermediates/N`); the issued chain already
    /// contains the one that signed the leaf.
    pub fn issuing_intermediates_pem(&self) -> String {
        self.management_pems("intermediates")
    }

    fn management_pems(&self, kind: &str) -> String {
        let mut pem = String::new();
        for i in 0..8 {
            let url = format!("{}/{kind}/{i}", self.pebble_management_url());
            let out = run_bounded(
                Command::new("curl")
                    .args(["-sS", "-f", "--max-time", "5", "--cacert"])
                    .arg(self.ca_root_path())
                    .arg(&url),
                CALL_TIMEOUT + Duration::from_secs(1),
            )
            .unwrap_or_else(|e| panic!("GET {url}: {e}\n{}", self.log_tail()));
            // curl -f: exit 22 on an HTTP error (404 past the last one).
            if out.status.code() == Some(22) && i > 0 {
                break;
            }
            assert!(
                out.status.success(),
                "GET {url}: {} {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                self.log_tail()
            );
            let text = String::from_utf8(out.stdout).expect("PEM is UTF-8");
            assert!(
                text.contains("-----BEGIN CERTIFICATE-----"),
                "GET {url}: {text}"
            );
            pem.push_str(&text);
            if !pem.ends_with('\n') {
                pem.push('\n');
            }
        }
        pem
    }

    /// Publish a TXT record (added to any value the name already has). `host` with or without
    /// the trailing dot: challtestsrv only answers for the FQDN form and silently accepts the
    /// other, so it is normalized here.
    pub fn set_txt(&self, host: &str, value: &str) {
        let body = serde_json::json!({ "host": fqdn(host), "value": value });
        self.chall_post("/set-txt", &body.to_string());
    }

    /// Remove every TXT value of `host`.
    pub fn clear_txt(&self, host: &str) {
        let body = serde_json::json!({ "host": fqdn(host) });
        self.chall_post("/clear-txt", &body.to_string());
    }

    /// The address challtestsrv answers for every A query without a record of its own; `""`
    /// for none (such a name then has no address).
    pub fn set_default_ipv4(&self, ip: &str) {
        let body = serde_json::json!({ "ip": ip });
        self.chall_post("/set-default-ipv4", &body.to_string());
    }

    /// Answer `A <host>` with `ip` from now on.
    pub fn add_a(&self, host: &str, ip: &str) {
        let body = serde_json::json!({ "host": fqdn(host), "addresses": [ip] });
        self.chall_post("/add-a", &body.to_string());
    }

    fn chall_post(&self, path: &str, body: &str) {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.chall_mgmt_port));
        match http_post(addr, path, body) {
            Ok((200, _)) => {}
            Ok((status, text)) => panic!(
                "challtestsrv {path} {body}: HTTP {status} {text}\n{}",
                self.log_tail()
            ),
            Err(e) => panic!("challtestsrv {path} {body}: {e}\n{}", self.log_tail()),
        }
    }

    /// What challtestsrv answers for `TXT <name>` right now (one UDP query, bounded).
    pub fn query_txt(&self, name: &str) -> Vec<String> {
        dns_query_txt(self.dns_server(), &fqdn(name))
            .unwrap_or_else(|e| panic!("DNS TXT {name}: {e}\n{}", self.log_tail()))
    }

    /// challtestsrv's DNS server (Pebble's resolver).
    pub fn dns_server(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.dns_port))
    }

    /// challtestsrv's management API, plain HTTP: `http://127.0.0.1:PORT` (no trailing slash).
    pub fn management_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.chall_mgmt_port)
    }

    /// The environment the DNS-01 hook (`dns_hook_path()`) needs.
    pub fn hook_env(&self) -> (String, String) {
        ("CHALLTESTSRV_URL".to_string(), self.management_url())
    }

    /// The port Pebble's HTTP-01 validator connects to on 127.0.0.1.
    pub fn http01_port(&self) -> u16 {
        self.http01_port
    }

    /// The TLS-ALPN-01 port in Pebble's config (nothing listens there).
    pub fn tls_alpn_port(&self) -> u16 {
        self.tls_port
    }

    /// How long `start` took (certificate, processes, directory answering).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The temp dir (config, TLS files, logs); its path is in both command lines.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// PIDs of the running processes (pebble, challtestsrv).
    pub fn pids(&self) -> Vec<u32> {
        [&self.pebble, &self.challtestsrv]
            .into_iter()
            .flatten()
            .map(|c| c.id())
            .collect()
    }

    /// How many certificates this Pebble issued (its log says each one).
    pub fn issued_count(&self) -> usize {
        fs::read_to_string(self.dir.path().join("pebble.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Issued certificate serial"))
            .count()
    }

    /// [`Pebble::issued_count`] once it reaches `n`, or what it is after `within`: Pebble
    /// answers a finalization before it issues, so a client killed right after its finalize
    /// call may be gone before the certificate exists.
    pub fn issued_count_once(&self, n: usize, within: std::time::Duration) -> usize {
        let deadline = std::time::Instant::now() + within;
        loop {
            let count = self.issued_count();
            if count >= n || std::time::Instant::now() >= deadline {
                return count;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The last lines of both logs, for panic messages.
    pub fn log_tail(&self) -> String {
        let mut s = String::new();
        for name in ["pebble.log", "challtestsrv.log"] {
            let text = fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(30);
            s.push_str(&format!("--- {name} (last {} lines)\n", lines.len() - from));
            for l in &lines[from..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let children: Vec<Child> = [self.pebble.take(), self.challtestsrv.take()]
            .into_iter()
            .flatten()
            .collect();
        stop_all(children);
        // The TempDir field removes the directory after this.
    }
}

/// SIGTERM every child, wait up to `STOP_GRACE`, SIGKILL the rest, reap all.
fn stop_all(mut children: Vec<Child>) {
    for c in &mut children {
        if let Ok(None) = c.try_wait() {
            let _ = run_bounded(
                Command::new("kill").args(["-TERM", &c.id().to_string()]),
                Duration::from_secs(2),
            );
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    for c in &mut children {
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = c.kill(); // SIGKILL
                    let _ = c.wait();
                    break;
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    }
}

fn tcp_probe() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// A port free for both TCP and UDP (challtestsrv's DNS binds both).
fn dns_probe() -> (TcpListener, UdpSocket, u16) {
    for _ in 0..50 {
        let (l, port) = tcp_probe();
        if let Ok(u) = UdpSocket::bind(("127.0.0.1", port)) {
            return (l, u, port);
        }
    }
    panic!("no port free for both TCP and UDP on 127.0.0.1");
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> Result<Child, String> {
    let out = fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawn {:?}: {e}", cmd.get_program()))
}

/// hapctl's bounded run, its error as text.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    hapctl::process::run_with_timeout(cmd, limit).map_err(|e| e.to_string())
}

/// Pebble's own TLS certificate: a small CA (`tls-ca.pem`, what ACME clients trust) and a leaf
/// for `localhost` and `127.0.0.1` (`tls-cert.pem`, `tls-key.pem`), ECDSA P-256, 2 days.
fn make_tls_cert(dir: &Path) -> Result<(), String> {
    let ext = dir.join("tls-leaf.ext");
    fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\n\
         subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .map_err(|e| e.to_string())?;
    let steps: [Vec<&str>; 3] = [
        vec![
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "tls-ca.key",
            "-out",
            "tls-ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=hapctl test Pebble TLS CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        vec![
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "tls-key.pem",
            "-out",
            "tls-leaf.csr",
            "-subj",
            "/CN=localhost",
        ],
        vec![
            "x509",
            "-req",
            "-in",
            "tls-leaf.csr",
            "-CA",
            "tls-ca.pem",
            "-CAkey",
            "tls-ca.key",
            "-set_serial",
            "2",
            "-days",
            "2",
            "-extfile",
            "tls-leaf.ext",
            "-out",
            "tls-cert.pem",
        ],
    ];
    for args in steps {
        let out = run_bounded(
            Command::new("openssl").args(&args).current_dir(dir),
            Duration::from_secs(10),
        )?;
        if !out.status.success() {
            return Err(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

/// One HTTP/1.1 POST of JSON, every step bounded: (status, body).
fn http_post(addr: SocketAddr, path: &str, body: &str) -> Result<(u16, String), String> {
    let stream = TcpStream::connect_timeout(&addr, CALL_TIMEOUT).map_err(|e| e.to_string())?;
    let headers = [("Content-Type", "application/json")];
    let raw = http::raw_request(
        "POST",
        path,
        &addr.to_string(),
        &headers,
        Some(body.as_bytes()),
    );
    let answer = http::exchange(stream, &raw, CALL_TIMEOUT)?;
    Ok((answer.status, answer.text()))
}

/// A minimal DNS TXT lookup over UDP (2 s timeout).
fn dns_query_txt(server: SocketAddr, name: &str) -> Result<Vec<String>, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let id = (std::process::id() as u16) ^ (nanos as u16);
    let mut q = Vec::new();
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD, 1 question
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 16, 0, 1]); // root, TXT, IN
    let sock = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sock.send_to(&q, server).map_err(|e| e.to_string())?;
    let mut r = [0u8; 4096];
    let n = sock.recv(&mut r).map_err(|e| format!("recv: {e}"))?;
    let r = &r[..n];
    if n < 12 || r[0..2] != id.to_be_bytes() {
        return Err("short or foreign DNS answer".into());
    }
    let ancount = u16::from_be_bytes([r[6], r[7]]) as usize;
    let mut i = q.len(); // the question is echoed back as sent
    let mut out = Vec::new();
    let get = |i: usize| {
        r.get(i)
            .copied()
            .ok_or_else(|| "truncated DNS answer".to_string())
    };
    for _ in 0..ancount {
        // owner name: labels or a compression pointer
        loop {
            let len = get(i)?;
            if len & 0xC0 == 0xC0 {
                i += 2;
                break;
            }
            i += 1 + len as usize;
            if len == 0 {
                break;
            }
        }
        let rtype = u16::from_be_bytes([get(i)?, get(i + 1)?]);
        let rdlen = u16::from_be_bytes([get(i + 8)?, get(i + 9)?]) as usize;
        i += 10;
        let end = i + rdlen;
        if rtype == 16 {
            let mut j = i;
            let mut value = Vec::new();
            while j < end {
                let l = get(j)? as usize;
                value.extend_from_slice(r.get(j + 1..j + 1 + l).ok_or("truncated TXT")?);
                j += 1 + l;
            }
            out.push(String::from_utf8_lossy(&value).into_owned());
        }
        i = end;
    }
    Ok(out)
}
