//! TLS at the edge, end to end: the real binary, the real HAProxy and a real ACME CA (Pebble).
//! The default certificate, uploads, ACME HTTP-01 and DNS-01, renewal and removal — each
//! served with 0 reloads and checked by real handshakes — every bad bundle refused with nothing
//! written, and the per-domain HTTPS policy (redirect, HSTS) changed without a reload.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hapctl::tls::probe;
use hapctl::tls::x509::{serial_matches, CertInfo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConnection, RootCertStore, StreamOwned};
use serde_json::Value;

use testkit::pebble::{dns_hook_path, Pebble};
use testkit::pki::{Leaf, TestCa};
use testkit::{check_runs, counting_haproxy, http, Backend, Edge};

/// Bound of every handshake and HTTPS request.
const TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// Edges, JSON and what the edge serves
// ---------------------------------------------------------------------------------------

/// A started edge whose haproxy is the counting wrapper: `check_runs(&log)` counts `haproxy -c`.
fn counted_edge() -> (Edge, PathBuf) {
    let mut edge = Edge::new();
    let (wrapper, log) = counting_haproxy(edge.state_dir());
    edge.set_env("HAPCTL_HAPROXY_BIN", wrapper.to_str().unwrap());
    edge.ok(&["haproxy", "start"]);
    (edge, log)
}

/// An edge (not started) whose `[acme]` points at a fresh Pebble validating HTTP-01 on the
/// edge's HTTP bind. The Pebble is dropped (stopped) by the caller, the edge after it.
fn acme_edge(dns_hook: bool, pebble_env: &[(&str, &str)]) -> (Edge, Pebble) {
    let mut edge = Edge::new();
    let pebble = Pebble::start_with_env(edge.port, pebble_env);
    let hook = dns_hook.then(dns_hook_path);
    // A copy: Pebble's dir goes with it, and a CA that is down must look down (connection
    // refused), not like a missing settings file.
    let ca_root = edge.path("pebble-tls-ca.pem");
    std::fs::copy(pebble.ca_root_path(), &ca_root).unwrap();
    edge.set_acme(&pebble.directory_url(), &ca_root, hook.as_deref());
    if dns_hook {
        let (k, v) = pebble.hook_env();
        edge.set_env(&k, &v);
    }
    (edge, pebble)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not one JSON value ({e}): {text}"))
}

fn reloads(edge: &Edge) -> u32 {
    edge.show_proc().master.reloads
}

/// `cert ls --json` → its `certificates`.
fn cert_list(edge: &Edge) -> Vec<Value> {
    let v = json(&edge.ok(&["cert", "ls", "--json"]));
    v["certificates"]
        .as_array()
        .unwrap_or_else(|| panic!("no certificates array in {v}"))
        .clone()
}

/// One entry of `cert ls --json`.
fn cert_entry(edge: &Edge, name: &str) -> Value {
    let list = cert_list(edge);
    list.iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no certificate {name:?} in {list:?}"))
        .clone()
}

fn str_of<'v>(v: &'v Value, key: &str) -> &'v str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v}"))
}

/// The serial of the leaf the HTTPS bind presents for `sni` (any certificate accepted).
fn served_serial(edge: &Edge, sni: &str) -> String {
    let served = probe::handshake(edge.https_addr(), sni, TIMEOUT)
        .unwrap_or_else(|e| panic!("handshake with SNI {sni}: {e}"));
    leaf_info(&served.chain).serial
}

fn leaf_info(chain: &[Vec<u8>]) -> CertInfo {
    let leaf = chain.first().expect("the server sent a certificate");
    CertInfo::from_der(leaf).expect("the served leaf parses")
}

fn assert_serial(actual: &str, expected: &str, what: &str) {
    assert!(
        serial_matches(actual, expected),
        "{what}: serial {actual} served, {expected} expected"
    );
}

/// No private key in `text`: no PEM key header and no line of the key's base64 body.
fn assert_no_key(text: &str, key_pem: &str) {
    assert!(
        !text.contains("PRIVATE KEY"),
        "a private key is printed:\n{text}"
    );
    for line in key_pem
        .lines()
        .filter(|l| l.len() >= 24 && !l.contains("-----"))
    {
        assert!(
            !text.contains(line),
            "part of the private key is printed:\n{text}"
        );
    }
}

/// Every file under the state dir holding a private key (`key_pem`'s, which must be stored
/// somewhere since HAProxy reads it from a file, or any other: the default certificate's, the
/// ACME account's) is 0600 in a folder closed to group and others.
fn assert_key_files_private(edge: &Edge, key_pem: Option<&str>) {
    let marker = key_pem.map(|k| {
        k.lines()
            .find(|l| l.len() >= 24 && !l.contains("-----"))
            .expect("a key body line")
            .to_string()
    });
    let mut holders = Vec::new();
    let mut found = marker.is_none();
    walk(edge.state_dir(), &mut |path| {
        // The bundles the tests wrote hold keys too: they are ours, not hapctl's.
        if matches!(path.extension(), Some(e) if e == "bundle") {
            return;
        }
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
        let ours = marker.as_ref().is_some_and(|m| text.contains(m.as_str()));
        found |= ours;
        if ours || text.contains("PRIVATE KEY-----") {
            holders.push(path.to_path_buf());
        }
    });
    assert!(found, "the key is stored nowhere");
    for p in holders {
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode,
            0o600,
            "{} holds a key with mode {mode:o}",
            p.display()
        );
        let dir = p.parent().unwrap();
        let dmode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            dmode & 0o077,
            0,
            "{} (holding a key) is open to others: mode {dmode:o}",
            dir.display()
        );
    }
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => walk(&p, f),
            Ok(t) if t.is_file() => f(&p),
            _ => {}
        }
    }
}

/// Names, sizes and mtimes of every file under `live/certs/` (recursively), sorted.
fn certs_dir_listing(edge: &Edge) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out = Vec::new();
    walk(&edge.path("live/certs"), &mut |p| {
        let m = std::fs::metadata(p).unwrap();
        out.push((p.to_path_buf(), m.len(), m.modified().unwrap()));
    });
    out.sort();
    out
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Writes the bundle of `leaf` into the edge's state dir; returns its path.
fn write_bundle(ca: &TestCa, edge: &Edge, file: &str, leaf: &Leaf) -> String {
    let path = edge.path(&format!("{file}.bundle"));
    std::fs::write(&path, ca.bundle(leaf)).unwrap();
    path.display().to_string()
}

fn roots_from_pem(pem: &str) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(der.expect("a PEM certificate")).unwrap();
    }
    assert!(!roots.is_empty(), "no root in {pem}");
    roots
}

// ---------------------------------------------------------------------------------------
// HTTP over TLS: curl for one-shot requests, a rustls keep-alive connection for the rest
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
struct Answer {
    status: u16,
    /// Names lowercased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn parse_head(head: &str) -> (u16, Vec<(String, String)>) {
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers)
}

/// `curl` to `scheme://host:port/path` on 127.0.0.1 (`-k`: any certificate), no redirect
/// followed; `extra` are more curl arguments (`--interface 127.0.0.2`, `-H ...`).
fn curl(scheme: &str, port: u16, host: &str, path: &str, extra: &[&str]) -> Answer {
    let out = testkit::run_bounded(
        {
            let mut c = Command::new("curl");
            c.args(["-sS", "-k", "-i", "--max-time", "5", "--resolve"])
                .arg(format!("{host}:{port}:127.0.0.1"))
                .args(extra)
                .arg(format!("{scheme}://{host}:{port}{path}"));
            c
        },
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "curl {scheme}://{host}:{port}{path} {extra:?}: {}",
        testkit::describe(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let (status, headers) = parse_head(head);
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

fn https(edge: &Edge, host: &str, path: &str, extra: &[&str]) -> Answer {
    curl("https", edge.https_port, host, path, extra)
}

fn http(edge: &Edge, host: &str, path: &str, extra: &[&str]) -> Answer {
    curl("http", edge.port, host, path, extra)
}

enum Trust {
    Roots(RootCertStore),
    /// Any certificate (to talk to the self-signed default).
    Any,
}

/// One TLS connection with HTTP/1.1 keep-alive: requests one after the other on it.
struct TlsConn {
    tls: StreamOwned<ClientConnection, TcpStream>,
}

impl TlsConn {
    fn open(addr: SocketAddr, sni: &str, trust: Trust, alpn: &[&str]) -> TlsConn {
        let mut config = probe::client_config(match trust {
            Trust::Roots(roots) => Some(roots),
            Trust::Any => None,
        });
        config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        let sock = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect to the HTTPS bind");
        sock.set_read_timeout(Some(TIMEOUT)).unwrap();
        sock.set_write_timeout(Some(TIMEOUT)).unwrap();
        let name = ServerName::try_from(sni.to_string()).unwrap();
        let conn = ClientConnection::new(Arc::new(config), name).unwrap();
        let mut tls = StreamOwned::new(conn, sock);
        while tls.conn.is_handshaking() {
            tls.conn
                .complete_io(&mut tls.sock)
                .unwrap_or_else(|e| panic!("TLS handshake with SNI {sni}: {e}"));
        }
        TlsConn { tls }
    }

    fn leaf_serial(&self) -> String {
        let chain = self
            .tls
            .conn
            .peer_certificates()
            .expect("a peer certificate");
        CertInfo::from_der(chain[0].as_ref()).unwrap().serial
    }

    fn alpn(&self) -> Option<String> {
        self.tls
            .conn
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }

    /// `GET path` with keep-alive.
    fn get(&mut self, host: &str, path: &str) -> Answer {
        write!(self.tls, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")
            .and_then(|_| self.tls.flush())
            .unwrap_or_else(|e| panic!("send GET {path} on the open TLS connection: {e}"));
        let answer = http::read_response(&mut self.tls)
            .unwrap_or_else(|e| panic!("the answer to {path} on the open TLS connection: {e}"));
        Answer {
            status: answer.status,
            body: answer.text(),
            headers: answer.headers,
        }
    }
}

// ---------------------------------------------------------------------------------------
// 1. The default certificate and HTTPS routing
// ---------------------------------------------------------------------------------------

#[test]
fn the_default_certificate_answers_unknown_sni_and_https_routes_like_http() {
    let edge = Edge::started();
    let app = Backend::start("hello over tls");
    edge.ok(&["domain", "add", "shop.test", "--server", &app.addr()]);

    let default = cert_entry(&edge, "default");
    assert_eq!(default["source"], "self-signed", "{default}");
    let default_serial = str_of(&default, "serial").to_string();

    // Unknown SNI, no SNI at all, and a routed domain without a certificate: the default.
    let served = probe::handshake(edge.https_addr(), "unknown.test", TIMEOUT)
        .expect("handshake with an unknown SNI");
    let leaf = leaf_info(&served.chain);
    assert_serial(&leaf.serial, &default_serial, "unknown SNI");
    assert_eq!(leaf.issuer, leaf.subject, "the default is self-signed");
    assert_eq!(served.alpn.as_deref(), Some("h2"), "h2 is offered first");
    assert_serial(
        &served_serial(&edge, "127.0.0.1"),
        &default_serial,
        "no SNI",
    );
    assert_serial(
        &served_serial(&edge, "shop.test"),
        &default_serial,
        "shop.test",
    );
    // http/1.1 is offered too.
    let conn = TlsConn::open(edge.https_addr(), "shop.test", Trust::Any, &["http/1.1"]);
    assert_eq!(conn.alpn().as_deref(), Some("http/1.1"));
    drop(conn);

    // Routing over HTTPS (curl negotiates h2 here), with the forwarding headers.
    let a = https(&edge, "shop.test", "/", &[]);
    assert_eq!(
        (a.status, a.body.as_str()),
        (200, "hello over tls"),
        "{a:?}"
    );
    assert_eq!(a.header("x-seen-forwarded-proto"), Some("https"), "{a:?}");
    let https_port = edge.https_port.to_string();
    assert_eq!(a.header("x-seen-forwarded-port"), Some(https_port.as_str()));
    let a = https(&edge, "shop.test", "/", &["--http1.1"]);
    assert_eq!(a.status, 200, "{a:?}");
    let a = http(&edge, "shop.test", "/", &[]);
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("x-seen-forwarded-proto"), Some("http"), "{a:?}");
    let http_port = edge.port.to_string();
    assert_eq!(a.header("x-seen-forwarded-port"), Some(http_port.as_str()));
    let a = https(&edge, "nowhere.test", "/", &[]);
    assert_eq!(a.status, 404, "{a:?}");
    assert!(a.body.contains("Unknown host"), "the same page: {a:?}");

    // Blocks and trusted proxies, the same on HTTPS.
    edge.ok(&["block", "add", "127.0.0.2"]);
    let a = https(&edge, "shop.test", "/", &["--interface", "127.0.0.2"]);
    assert_eq!(a.status, 403, "{a:?}");
    assert!(a.body.contains("Access denied"), "{a:?}");
    assert_eq!(https(&edge, "shop.test", "/", &[]).status, 200);

    edge.ok(&["block", "add", "203.0.113.9"]);
    edge.ok(&["proxy", "add", "127.0.0.3"]);
    let via_proxy = [
        "--interface",
        "127.0.0.3",
        "-H",
        "X-Forwarded-For: 203.0.113.9",
    ];
    assert_eq!(https(&edge, "shop.test", "/", &via_proxy).status, 403);
    let spoofed = ["-H", "X-Forwarded-For: 203.0.113.9"];
    let a = https(&edge, "shop.test", "/", &spoofed);
    assert_eq!(
        a.status, 200,
        "an untrusted peer's header is ignored: {a:?}"
    );
    assert_eq!(a.header("x-seen-real-ip"), Some("127.0.0.1"), "{a:?}");
    let other = [
        "--interface",
        "127.0.0.3",
        "-H",
        "X-Forwarded-For: 198.51.100.7",
    ];
    let a = https(&edge, "shop.test", "/", &other);
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("x-seen-real-ip"), Some("198.51.100.7"), "{a:?}");
}

// ---------------------------------------------------------------------------------------
// 2. Import: served at once, with 0 reloads
// ---------------------------------------------------------------------------------------

#[test]
fn an_imported_certificate_is_served_with_no_reload() {
    let (edge, log) = counted_edge();
    let default_serial = str_of(&cert_entry(&edge, "default"), "serial").to_string();
    let ca = TestCa::new("import");
    let leaf = ca.leaf(&["shop.test"]);
    let bundle = write_bundle(&ca, &edge, "shop", &leaf);
    let (reloads_before, checks_before) = (reloads(&edge), check_runs(&log));

    let out = edge.ok(&["cert", "import", "shop.test", "--pem", &bundle, "--json"]);
    assert_no_key(&out, &leaf.key_pem);
    let r = json(&out);
    assert_eq!(r["name"], "shop.test", "{r}");
    assert_serial(str_of(&r, "serial"), &leaf.serial, "import report");
    assert_eq!(r["installed"], "runtime", "{r}");
    assert!(r["runtime_error"].is_null(), "{r}");
    assert_eq!(r["handshake_sni"], "shop.test", "{r}");
    assert_eq!(r["reloads"], 0, "{r}");
    assert!(r["not_after"].is_i64() || r["not_after"].is_string(), "{r}");
    assert!(r["duration_ms"].is_number(), "{r}");
    assert_eq!(
        r["checks"].as_u64(),
        Some((check_runs(&log) - checks_before) as u64),
        "the report counts the haproxy -c runs there were: {r}"
    );

    // What a client sees: the new leaf with its chain, trusted through the test root.
    let served = probe::verified_handshake(edge.https_addr(), "shop.test", ca.roots(), TIMEOUT)
        .expect("shop.test verifies against the test CA");
    assert_serial(&leaf_info(&served.chain).serial, &leaf.serial, "shop.test");
    assert_eq!(served.chain.len(), 2, "leaf and intermediate are sent");
    assert_serial(
        &served_serial(&edge, "other.test"),
        &default_serial,
        "unknown SNI",
    );
    assert_eq!(reloads(&edge), reloads_before, "no reload");

    let entry = cert_entry(&edge, "shop.test");
    assert_eq!(entry["source"], "upload", "{entry}");
    assert_eq!(entry["names"], serde_json::json!(["shop.test"]), "{entry}");
    assert_eq!(entry["serves"], serde_json::json!(["shop.test"]), "{entry}");
    assert_serial(str_of(&entry, "serial"), &leaf.serial, "cert ls");
    let info = leaf_info(&served.chain);
    assert_eq!(entry["not_after"], info.not_after, "{entry}");
    assert_eq!(entry["not_before"], info.not_before, "{entry}");
    assert!(
        str_of(&entry, "issuer").contains("hapctl test intermediate import"),
        "{entry}"
    );
    assert!(entry["last_error"].is_null(), "{entry}");
    assert_eq!(entry["failures"], 0, "{entry}");
    let show = edge.ok(&["cert", "show", "shop.test", "--json"]);
    assert_no_key(&show, &leaf.key_pem);
    let show = json(&show);
    assert_eq!(show["name"], "shop.test", "{show}");
    assert_serial(str_of(&show, "serial"), &leaf.serial, "cert show");
    assert_no_key(&edge.ok(&["cert", "ls"]), &leaf.key_pem);
    assert_no_key(&edge.ok(&["cert", "show", "shop.test"]), &leaf.key_pem);
    edge.expect_code(7, &["cert", "show", "nothere.test"]);
    assert_key_files_private(&edge, Some(&leaf.key_pem));

    // A later reload loads exactly what was installed at runtime (the files came first).
    let app = Backend::start("other");
    edge.ok(&["domain", "add", "other.test", "--server", &app.addr()]);
    assert!(reloads(&edge) > reloads_before, "a domain change reloads");
    assert_serial(
        &served_serial(&edge, "shop.test"),
        &leaf.serial,
        "after a reload",
    );
    assert_serial(
        &served_serial(&edge, "other.test"),
        &default_serial,
        "after a reload",
    );

    // Imported while HAProxy is stopped: on disk only, served from the start.
    edge.ok(&["haproxy", "stop"]);
    let late = ca.leaf(&["late.test"]);
    let bundle = write_bundle(&ca, &edge, "late", &late);
    let r = json(&edge.ok(&["cert", "import", "late.test", "--pem", &bundle, "--json"]));
    assert_eq!(r["installed"], "not-running", "{r}");
    edge.ok(&["haproxy", "start"]);
    assert_serial(
        &served_serial(&edge, "late.test"),
        &late.serial,
        "after start",
    );
    assert_serial(
        &served_serial(&edge, "shop.test"),
        &leaf.serial,
        "after start",
    );
}

// ---------------------------------------------------------------------------------------
// 3. Replacement while a connection is open
// ---------------------------------------------------------------------------------------

#[test]
fn a_replaced_certificate_serves_new_handshakes_while_open_connections_continue() {
    let (edge, _log) = counted_edge();
    let app = Backend::start("shop");
    edge.ok(&["domain", "add", "shop.test", "--server", &app.addr()]);
    let ca = TestCa::new("replace");
    let first = ca.leaf(&["shop.test"]);
    let bundle = write_bundle(&ca, &edge, "first", &first);
    edge.ok(&["cert", "import", "shop.test", "--pem", &bundle]);

    let mut open = TlsConn::open(
        edge.https_addr(),
        "shop.test",
        Trust::Roots(ca.roots()),
        &["http/1.1"],
    );
    assert_serial(&open.leaf_serial(), &first.serial, "the open connection");
    let a = open.get("shop.test", "/");
    assert_eq!((a.status, a.body.as_str()), (200, "shop"), "{a:?}");
    let reloads_before = reloads(&edge);

    let second = ca.leaf(&["shop.test"]);
    let bundle = write_bundle(&ca, &edge, "second", &second);
    let r = json(&edge.ok(&["cert", "import", "shop.test", "--pem", &bundle, "--json"]));
    assert_eq!(r["installed"], "runtime", "{r}");
    assert_eq!(r["reloads"], 0, "{r}");
    assert_serial(str_of(&r, "serial"), &second.serial, "import report");

    let a = open.get("shop.test", "/again");
    assert_eq!((a.status, a.body.as_str()), (200, "shop"), "{a:?}");
    assert_serial(
        &open.leaf_serial(),
        &first.serial,
        "the open connection kept its leaf",
    );
    let served = probe::verified_handshake(edge.https_addr(), "shop.test", ca.roots(), TIMEOUT)
        .expect("the new leaf verifies");
    assert_serial(
        &leaf_info(&served.chain).serial,
        &second.serial,
        "new handshakes",
    );
    let mut fresh = TlsConn::open(
        edge.https_addr(),
        "shop.test",
        Trust::Roots(ca.roots()),
        &["http/1.1"],
    );
    assert_eq!(fresh.get("shop.test", "/").status, 200);
    assert_eq!(reloads(&edge), reloads_before, "no reload");
    assert_serial(
        str_of(&cert_entry(&edge, "shop.test"), "serial"),
        &second.serial,
        "cert ls",
    );
}

// ---------------------------------------------------------------------------------------
// 4. Removal
// ---------------------------------------------------------------------------------------

#[test]
fn a_removed_certificate_falls_back_to_a_covering_one_then_the_default() {
    let (edge, _log) = counted_edge();
    let default_serial = str_of(&cert_entry(&edge, "default"), "serial").to_string();
    let files_before: Vec<PathBuf> = certs_dir_listing(&edge).into_iter().map(|f| f.0).collect();
    let ca = TestCa::new("rm");
    let wild = ca.leaf(&["*.example.test"]);
    let exact = ca.leaf(&["a.example.test"]);
    let wb = write_bundle(&ca, &edge, "wild", &wild);
    let eb = write_bundle(&ca, &edge, "exact", &exact);
    edge.ok(&[
        "cert",
        "import",
        "wildcard.example.test",
        "--pem",
        &wb,
        "--name",
        "*.example.test",
    ]);
    edge.ok(&["cert", "import", "a.example.test", "--pem", &eb]);
    let reloads_before = reloads(&edge);

    // Exact beats wildcard; the wildcard covers the others, not the apex.
    assert_serial(
        &served_serial(&edge, "a.example.test"),
        &exact.serial,
        "exact",
    );
    assert_serial(
        &served_serial(&edge, "b.example.test"),
        &wild.serial,
        "wildcard",
    );
    assert_serial(
        &served_serial(&edge, "example.test"),
        &default_serial,
        "apex",
    );
    let served: Vec<String> = cert_entry(&edge, "wildcard.example.test")["serves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        !served.contains(&"a.example.test".to_string()),
        "a.example.test is served by its exact certificate: {served:?}"
    );

    let r = json(&edge.ok(&["cert", "rm", "a.example.test", "--json"]));
    assert_eq!(r["reloads"], 0, "{r}");
    assert_serial(
        &served_serial(&edge, "a.example.test"),
        &wild.serial,
        "after rm",
    );
    edge.ok(&["cert", "rm", "wildcard.example.test"]);
    assert_serial(
        &served_serial(&edge, "a.example.test"),
        &default_serial,
        "after rm",
    );
    assert_serial(
        &served_serial(&edge, "b.example.test"),
        &default_serial,
        "after rm",
    );
    assert_eq!(reloads(&edge), reloads_before, "no reload");

    let names: Vec<Value> = cert_list(&edge).iter().map(|c| c["name"].clone()).collect();
    assert_eq!(
        names,
        vec![Value::from("default")],
        "only the default is left"
    );
    let files_after: Vec<PathBuf> = certs_dir_listing(&edge).into_iter().map(|f| f.0).collect();
    assert_eq!(
        files_after, files_before,
        "the removed certificates' files are gone"
    );
    edge.expect_code(7, &["cert", "rm", "a.example.test"]);

    let out = edge.expect_code(2, &["cert", "rm", "default"]);
    assert!(out.contains("default"), "{out}");
    assert_serial(
        &served_serial(&edge, "x.test"),
        &default_serial,
        "default kept",
    );

    // A reload after all this serves the same: nothing removed comes back.
    let app = Backend::start("x");
    edge.ok(&["domain", "add", "x.test", "--server", &app.addr()]);
    assert_serial(
        &served_serial(&edge, "a.example.test"),
        &default_serial,
        "after a reload",
    );

    // `default` is replaced, not removed: unknown names get the upload, with no reload.
    let reloads_before = reloads(&edge);
    let fallback = ca.leaf(&["fallback.test"]);
    let fb = write_bundle(&ca, &edge, "fallback", &fallback);
    let r = json(&edge.ok(&["cert", "import", "default", "--pem", &fb, "--json"]));
    assert_eq!(r["installed"], "runtime", "{r}");
    assert_serial(
        &served_serial(&edge, "unknown.test"),
        &fallback.serial,
        "new default",
    );
    assert_serial(
        &served_serial(&edge, "127.0.0.1"),
        &fallback.serial,
        "no SNI",
    );
    assert_eq!(cert_entry(&edge, "default")["source"], "upload");
    assert_eq!(reloads(&edge), reloads_before, "no reload");
}

// ---------------------------------------------------------------------------------------
// 5. The hostile corpus through the CLI
// ---------------------------------------------------------------------------------------

#[test]
fn every_bundle_of_the_hostile_corpus_is_refused_and_nothing_is_written() {
    let (edge, log) = counted_edge();
    // Dated around the real clock, which the binary checks against.
    let corpus = testkit::tls_corpus::hostile_corpus_at(now());
    assert!(corpus.len() >= 30, "{} cases", corpus.len());
    let mut listing = edge.ok(&["cert", "ls", "--json"]);
    let mut files = certs_dir_listing(&edge);
    let (reloads_before, checks_before) = (reloads(&edge), check_runs(&log));

    let mut failures = Vec::new();
    for (i, case) in corpus.iter().enumerate() {
        let path = edge.path(&format!("case-{i}.bundle"));
        std::fs::write(&path, &case.input).unwrap();
        let path = path.display().to_string();
        // The names to cover come from --name, or (every other case with one name) from a
        // NAME that is that host; a NAME with '_' is no host and asks for no name.
        let cert_name = format!("hostile_{i}");
        let mut args = vec!["cert", "import"];
        match case.must_cover.as_slice() {
            [one] if i % 2 == 0 => args.push(one.as_str()),
            names => {
                args.push(cert_name.as_str());
                for n in names {
                    args.extend(["--name", n.as_str()]);
                }
            }
        }
        args.extend(["--pem", path.as_str()]);
        let out = edge.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let printed = format!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
        if out.status.code() != Some(2) {
            failures.push(format!(
                "{}: exit {:?}, not 2: {printed}",
                case.name,
                out.status.code()
            ));
        } else if !stderr.contains(clock_free(&case.fragment)) {
            failures.push(format!(
                "{}: stderr does not name the problem ({:?}): {stderr}",
                case.name, case.fragment
            ));
        }
        if testkit::tls_corpus::key_fragments(&case.input)
            .iter()
            .any(|secret| printed.contains(secret.as_str()))
        {
            failures.push(format!("{}: key material is printed", case.name));
        }
        let now_listing = edge.ok(&["cert", "ls", "--json"]);
        if now_listing != listing {
            failures.push(format!("{}: cert ls changed: {now_listing}", case.name));
            listing = now_listing; // judge the next case on its own
        }
        let now_files = certs_dir_listing(&edge);
        if now_files != files {
            failures.push(format!("{}: live/certs changed: {now_files:?}", case.name));
            files = now_files;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n")
    );
    assert!(edge.temp_files().is_empty(), "{:?}", edge.temp_files());
    assert_eq!(reloads(&edge), reloads_before, "no reload");
    assert_eq!(check_runs(&log), checks_before, "no haproxy -c");
    // The edge still serves the default certificate.
    let default_serial = str_of(&cert_entry(&edge, "default"), "serial").to_string();
    assert_serial(
        &served_serial(&edge, "www.example.com"),
        &default_serial,
        "after the corpus",
    );

    // The names rule through the CLI: NAME or --name must be covered by the leaf.
    let ca = TestCa::new("names");
    let leaf = ca.leaf(&["shop.test"]);
    let bundle = write_bundle(&ca, &edge, "names", &leaf);
    for args in [
        vec!["cert", "import", "other.test", "--pem", &bundle],
        vec![
            "cert",
            "import",
            "shop.test",
            "--pem",
            &bundle,
            "--name",
            "www.shop.test",
        ],
        vec!["cert", "import", "wildcard.shop.test", "--pem", &bundle],
    ] {
        let out = edge.expect_code(2, &args);
        assert_no_key(&out, &leaf.key_pem);
        assert_eq!(edge.ok(&["cert", "ls", "--json"]), listing, "{args:?}");
        assert_eq!(certs_dir_listing(&edge), files, "{args:?}");
    }
}

/// The part of a corpus message fragment that does not quote the clock: `expired on D (now
/// is T)` names the second the corpus was made, and the binary reads the clock later.
fn clock_free(fragment: &str) -> &str {
    fragment.split(" (now is ").next().unwrap_or(fragment)
}

// ---------------------------------------------------------------------------------------
// 6. ACME HTTP-01 with Pebble: issue, renew, fail to renew, remove
// ---------------------------------------------------------------------------------------

#[test]
fn acme_http01_issues_renews_keeps_serving_on_failure_and_removes_with_no_reload() {
    let (edge, pebble) = acme_edge(false, &[]);
    let mut pebble = Some(pebble);
    edge.ok(&["haproxy", "start"]);
    let app = Backend::start("shop");
    edge.ok(&["domain", "add", "shop.test", "--server", &app.addr()]);
    let default_serial = str_of(&cert_entry(&edge, "default"), "serial").to_string();
    let p = pebble.as_ref().unwrap();
    let roots = roots_from_pem(&p.issuing_roots_pem());
    let reloads_before = reloads(&edge);

    let out = edge.ok(&["cert", "request", "shop.test", "--json"]);
    let r = json(&out);
    assert_eq!(r["name"], "shop.test", "{r}");
    assert_eq!(r["installed"], "runtime", "{r}");
    assert_eq!(r["reloads"], 0, "{r}");
    assert!(!out.contains("PRIVATE KEY"), "{out}");
    let issued = str_of(&r, "serial").to_string();
    let served = probe::verified_handshake(edge.https_addr(), "shop.test", roots.clone(), TIMEOUT)
        .expect("shop.test verifies against Pebble's issuing root");
    assert_serial(&leaf_info(&served.chain).serial, &issued, "issued");
    assert_serial(
        &served_serial(&edge, "other.test"),
        &default_serial,
        "unknown SNI",
    );
    assert_eq!(reloads(&edge), reloads_before, "no reload to issue");
    let entry = cert_entry(&edge, "shop.test");
    assert_eq!(entry["source"], "acme-http-01", "{entry}");
    assert_eq!(entry["names"], serde_json::json!(["shop.test"]), "{entry}");
    assert!(entry["last_error"].is_null(), "{entry}");
    let next = entry["next_renewal"]
        .as_i64()
        .unwrap_or_else(|| panic!("{entry}"));
    assert!(
        next > now() && next < entry["not_after"].as_i64().unwrap(),
        "renewal planned before expiry: {entry}"
    );
    assert_key_files_private(&edge, None);
    // The ACME account key, made once and kept.
    let acme = edge.path("acme");
    let dmode = std::fs::metadata(&acme).unwrap().permissions().mode() & 0o777;
    assert_eq!(dmode & 0o077, 0, "acme/ is open to others: {dmode:o}");
    let mut account_files = 0;
    walk(&acme, &mut |p| {
        account_files += 1;
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}: {mode:o}", p.display());
    });
    assert!(account_files > 0, "no account stored in acme/");

    // Renewal: a new serial for new handshakes, the open connection keeps working.
    let mut open = TlsConn::open(
        edge.https_addr(),
        "shop.test",
        Trust::Roots(roots.clone()),
        &["http/1.1"],
    );
    assert_eq!(open.get("shop.test", "/").status, 200);
    edge.ok(&["cert", "renew", "shop.test", "--force"]);
    let served = probe::verified_handshake(edge.https_addr(), "shop.test", roots.clone(), TIMEOUT)
        .expect("the renewed certificate verifies");
    let renewed = leaf_info(&served.chain).serial;
    assert!(
        !serial_matches(&renewed, &issued),
        "renewal served a new serial"
    );
    assert_serial(
        str_of(&cert_entry(&edge, "shop.test"), "serial"),
        &renewed,
        "cert ls after renew",
    );
    let a = open.get("shop.test", "/after-renewal");
    assert_eq!((a.status, a.body.as_str()), (200, "shop"), "{a:?}");
    assert_serial(
        &open.leaf_serial(),
        &issued,
        "the open connection kept its leaf",
    );
    assert_eq!(reloads(&edge), reloads_before, "no reload to renew");

    // The CA is gone: the renewal fails, the current certificate keeps serving.
    pebble.take();
    let out = edge.run(&["cert", "renew", "shop.test", "--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", testkit::describe(&out));
    assert_serial(
        &served_serial(&edge, "shop.test"),
        &renewed,
        "after a failed renewal",
    );
    probe::verified_handshake(edge.https_addr(), "shop.test", roots, TIMEOUT)
        .expect("still a valid chain after a failed renewal");
    let entry = cert_entry(&edge, "shop.test");
    assert!(
        entry["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "the failure is shown: {entry}"
    );
    assert!(entry["failures"].as_u64().unwrap_or(0) >= 1, "{entry}");
    assert_serial(
        str_of(&entry, "serial"),
        &renewed,
        "cert ls after the failure",
    );

    // Without --force only due certificates are renewed: this one is not due, so no order is
    // placed (with the CA down, one would fail).
    for args in [
        &["cert", "renew", "shop.test"][..],
        &["cert", "renew", "--all"],
    ] {
        let out = edge.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            testkit::describe(&out)
        );
    }
    assert_serial(
        &served_serial(&edge, "shop.test"),
        &renewed,
        "not due, not renewed",
    );

    // Removal: the default again, still no reload.
    edge.ok(&["cert", "rm", "shop.test"]);
    assert_serial(
        &served_serial(&edge, "shop.test"),
        &default_serial,
        "after rm",
    );
    assert_eq!(reloads(&edge), reloads_before, "no reload to remove");
    assert!(cert_list(&edge).iter().all(|c| c["name"] != "shop.test"));
}

// ---------------------------------------------------------------------------------------
// 7. ACME DNS-01: a wildcard through the hook
// ---------------------------------------------------------------------------------------

#[test]
fn acme_dns01_issues_a_wildcard_through_the_hook() {
    // Every order proves control anew (no reused authorization), so a renewal whose
    // challenge fails below really fails.
    let (edge, pebble) = acme_edge(true, &[("PEBBLE_AUTHZREUSE", "0")]);
    edge.ok(&["haproxy", "start"]);
    let default_serial = str_of(&cert_entry(&edge, "default"), "serial").to_string();
    let roots = roots_from_pem(&pebble.issuing_roots_pem());
    let reloads_before = reloads(&edge);

    let out = edge.ok(&[
        "cert",
        "request",
        "wildcard.example.test",
        "--name",
        "*.example.test",
        "--dns-01",
        "--json",
    ]);
    let r = json(&out);
    assert_eq!(r["name"], "wildcard.example.test", "{r}");
    assert_eq!(r["installed"], "runtime", "{r}");
    assert_eq!(r["reloads"], 0, "{r}");
    let issued = str_of(&r, "serial").to_string();
    for sni in ["a.example.test", "b.example.test"] {
        let served = probe::verified_handshake(edge.https_addr(), sni, roots.clone(), TIMEOUT)
            .unwrap_or_else(|e| panic!("{sni} verifies against Pebble's root: {e}"));
        assert_serial(&leaf_info(&served.chain).serial, &issued, sni);
    }
    assert_serial(
        &served_serial(&edge, "example.test"),
        &default_serial,
        "apex",
    );
    assert_eq!(reloads(&edge), reloads_before, "no reload");
    let entry = cert_entry(&edge, "wildcard.example.test");
    assert_eq!(entry["source"], "acme-dns-01", "{entry}");
    assert_eq!(
        entry["names"],
        serde_json::json!(["*.example.test"]),
        "{entry}"
    );
    assert!(
        pebble.query_txt("_acme-challenge.example.test").is_empty(),
        "the hook was asked to clean up"
    );

    // A challenge the CA refuses (the hook publishes nothing): the renewal fails, the
    // wildcard keeps serving, the error is shown.
    // Pebble reuses a valid authorization one order in a hundred even at
    // PEBBLE_AUTHZREUSE=0 (it makes a new one only when `rand.Intn(100) > percent`), and
    // authorizations belong to an account: with the account moved away, hapctl registers a
    // new one, which has none to reuse, so this renewal must prove control and fail.
    let acme = edge.path("acme");
    let moved = edge.path("acme-first-account");
    std::fs::create_dir(&moved).unwrap();
    for entry in std::fs::read_dir(&acme).unwrap() {
        let p = entry.unwrap().path();
        std::fs::rename(&p, moved.join(p.file_name().unwrap())).unwrap();
    }
    edge.set_setting_keys("acme", &[("dns_hook", "/bin/true".to_string())]);
    let out = edge.run(&["cert", "renew", "wildcard.example.test", "--force"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        testkit::describe(&out),
        pebble.log_tail()
    );
    let account_key = |dir: &std::path::Path| {
        let file = std::fs::read_dir(dir)
            .unwrap()
            .next()
            .expect("an account file");
        std::fs::read(file.unwrap().path()).unwrap()
    };
    assert_ne!(
        account_key(&acme),
        account_key(&moved),
        "a new account was registered"
    );
    let served = probe::verified_handshake(edge.https_addr(), "a.example.test", roots, TIMEOUT)
        .expect("still served after a refused challenge");
    assert_serial(
        &leaf_info(&served.chain).serial,
        &issued,
        "after the failure",
    );
    let entry = cert_entry(&edge, "wildcard.example.test");
    assert!(
        entry["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "the failure is shown: {entry}"
    );
    assert_serial(
        str_of(&entry, "serial"),
        &issued,
        "cert ls after the failure",
    );
    assert_eq!(reloads(&edge), reloads_before, "no reload");
}

// ---------------------------------------------------------------------------------------
// 8. The HTTPS policy of a domain: redirect and HSTS from a map
// ---------------------------------------------------------------------------------------

#[test]
fn the_https_policy_redirects_and_sets_hsts_without_reload_and_never_on_the_acme_path() {
    let (edge, log) = counted_edge();
    let app = Backend::start("shop");
    edge.ok(&["domain", "add", "shop.test", "--server", &app.addr()]);
    edge.ok(&["domain", "add", "plain.test", "--server", &app.addr()]);
    let (reloads_before, checks_before) = (reloads(&edge), check_runs(&log));
    let policy = |args: &[&str]| {
        let mut all = vec!["domain", "https", "shop.test"];
        all.extend(args);
        all.push("--json");
        let r = json(&edge.ok(&all));
        assert_eq!(r["checks"], 0, "a map change: {r}");
        assert_eq!(r["reloads"], 0, "a map change: {r}");
    };

    policy(&[
        "--redirect",
        "308",
        "--hsts",
        "31536000",
        "--hsts-subdomains",
    ]);
    let a = http(&edge, "shop.test", "/x?y=1", &[]);
    assert_eq!(a.status, 308, "{a:?}");
    let location = format!("https://shop.test:{}/x?y=1", edge.https_port);
    assert_eq!(a.header("location"), Some(location.as_str()), "{a:?}");
    assert_eq!(
        a.header("strict-transport-security"),
        None,
        "no HSTS on HTTP"
    );
    let a = http(
        &edge,
        "shop.test",
        "/.well-known/acme-challenge/anything",
        &[],
    );
    assert!(
        [200, 404].contains(&a.status) && a.header("location").is_none(),
        "the ACME path is never redirected: {a:?}"
    );
    let a = https(&edge, "shop.test", "/x?y=1", &[]);
    assert_eq!((a.status, a.body.as_str()), (200, "shop"), "{a:?}");
    assert_eq!(
        a.header("strict-transport-security"),
        Some("max-age=31536000; includeSubDomains"),
        "{a:?}"
    );
    // Another domain keeps serving both schemes, without HSTS.
    let a = http(&edge, "plain.test", "/", &[]);
    assert_eq!(a.status, 200, "{a:?}");
    let a = https(&edge, "plain.test", "/", &[]);
    assert_eq!(a.header("strict-transport-security"), None, "{a:?}");
    assert_eq!(reloads(&edge), reloads_before, "no reload");
    assert_eq!(check_runs(&log), checks_before, "no haproxy -c");

    // Kept across a reload (the map file says the same as the runtime map).
    let other = Backend::start("other");
    edge.ok(&["domain", "add", "other.test", "--server", &other.addr()]);
    assert_eq!(http(&edge, "shop.test", "/x?y=1", &[]).status, 308);
    let (reloads_before, checks_before) = (reloads(&edge), check_runs(&log));

    policy(&["--redirect", "301", "--hsts", "600"]);
    let a = http(&edge, "shop.test", "/p", &[]);
    assert_eq!(a.status, 301, "{a:?}");
    let location = format!("https://shop.test:{}/p", edge.https_port);
    assert_eq!(a.header("location"), Some(location.as_str()), "{a:?}");
    let a = https(&edge, "shop.test", "/", &[]);
    assert_eq!(
        a.header("strict-transport-security"),
        Some("max-age=600"),
        "{a:?}"
    );

    policy(&["--redirect", "off", "--no-hsts"]);
    let a = http(&edge, "shop.test", "/x?y=1", &[]);
    assert_eq!((a.status, a.body.as_str()), (200, "shop"), "{a:?}");
    let a = https(&edge, "shop.test", "/", &[]);
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("strict-transport-security"), None, "{a:?}");
    assert_eq!(reloads(&edge), reloads_before, "no reload");
    assert_eq!(check_runs(&log), checks_before, "no haproxy -c");

    edge.expect_code(7, &["domain", "https", "nothere.test", "--redirect", "308"]);
    let out = edge.expect_code(2, &["domain", "https", "shop.test", "--redirect", "302"]);
    assert!(out.contains("302"), "{out}");
}
