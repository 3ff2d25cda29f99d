//! `hapctl import-legacy` against a real HAProxy: an old manager's edge (its SQLite schema as
//! `PEER-API.md` §2.1b describes it, with the quirks it lists; a certificate folder of real
//! bundles; its list files) is planned, dry-run, imported, imported again, and refused when
//! the input is not that edge.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection};
use serde_json::{json, Value};

use hapctl::tls::probe;
use hapctl::tls::x509::{serial_matches, CertInfo};
use testkit::daemon::Daemon;
use testkit::pki::TestCa;
use testkit::{check_runs, counting_haproxy, Backend, Edge};

const TIMEOUT: Duration = Duration::from_secs(5);

/// The old schema, written from the description: `is_wildcard` and `expiry_time` were added
/// by migrations, so they are the last columns.
const OLD_SCHEMA: &str = "
CREATE TABLE domains (id INTEGER PRIMARY KEY, domain TEXT UNIQUE NOT NULL,
    ssl_enabled BOOLEAN DEFAULT 0, ssl_cert_path TEXT, template_override TEXT);
ALTER TABLE domains ADD COLUMN is_wildcard BOOLEAN DEFAULT 0;
CREATE TABLE backends (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,
    domain_id INTEGER REFERENCES domains(id), settings TEXT);
CREATE TABLE backend_servers (id INTEGER PRIMARY KEY, backend_id INTEGER REFERENCES backends(id),
    server_name TEXT NOT NULL, server_address TEXT NOT NULL, server_port INTEGER NOT NULL,
    server_options TEXT);
CREATE TABLE blocked_ips (id INTEGER PRIMARY KEY, ip_address TEXT UNIQUE NOT NULL, reason TEXT,
    blocked_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, blocked_by TEXT);
ALTER TABLE blocked_ips ADD COLUMN expiry_time TEXT;
";

/// The old edge's files: database, certificate folder, lists folder.
struct OldEdge {
    _dir: tempfile::TempDir,
    db: PathBuf,
    certs: PathBuf,
    lists: PathBuf,
}

impl OldEdge {
    fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "import-legacy",
            "--db",
            self.db.to_str().unwrap(),
            "--certs",
            self.certs.to_str().unwrap(),
            "--lists",
            self.lists.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args
    }
}

fn domain(
    db: &Connection,
    id: i64,
    name: &str,
    template: Option<&str>,
    wildcard: rusqlite::types::Value,
) {
    db.execute(
        "INSERT INTO domains (id, domain, ssl_enabled, template_override, is_wildcard) VALUES (?1, ?2, 1, ?3, ?4)",
        params![id, name, template, wildcard],
    )
    .unwrap();
}

fn backend(db: &Connection, id: i64, name: &str, domain_id: i64) {
    db.execute(
        "INSERT INTO backends (id, name, domain_id) VALUES (?1, ?2, ?3)",
        params![id, name, domain_id],
    )
    .unwrap();
}

fn server(
    db: &Connection,
    backend_id: i64,
    name: &str,
    addr: &str,
    port: rusqlite::types::Value,
    options: Option<&str>,
) {
    db.execute(
        "INSERT INTO backend_servers (backend_id, server_name, server_address, server_port, server_options) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![backend_id, name, addr, port, options],
    )
    .unwrap();
}

fn block(
    db: &Connection,
    id: i64,
    ip: &str,
    reason: Option<&str>,
    by: Option<&str>,
    expiry: Option<&str>,
) {
    db.execute(
        "INSERT INTO blocked_ips (id, ip_address, reason, blocked_at, blocked_by, expiry_time) VALUES (?1, ?2, ?3, '2026-11-30 10:00:00', ?4, ?5)",
        params![id, ip, reason, by, expiry],
    )
    .unwrap();
}

fn int(i: i64) -> rusqlite::types::Value {
    rusqlite::types::Value::Integer(i)
}

fn text(s: &str) -> rusqlite::types::Value {
    rusqlite::types::Value::Text(s.into())
}

/// A populated old edge: `shop` (two servers), `wild` (a wildcard) and `sus` (suspended) are
/// the backends' ports.
fn old_edge(ca: &TestCa, shop: [u16; 2], wild: u16, sus: u16) -> OldEdge {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("haproxy_config.db");
    let db = Connection::open(&db_path).unwrap();
    db.execute_batch(OLD_SCHEMA).unwrap();
    let null = rusqlite::types::Value::Null;

    // A port posted as a string: INTEGER affinity stores the number.
    domain(&db, 1, "shop.test", None, int(0));
    backend(&db, 1, "shop_test", 1);
    server(
        &db,
        1,
        "web1",
        "127.0.0.1",
        text(&shop[0].to_string()),
        Some("check weight 10"),
    );
    server(&db, 1, "web2", "127.0.0.1", int(shop[1].into()), None);
    // Wildcard flag as text, stored without `*.`.
    domain(
        &db,
        2,
        "w.test",
        Some("hap_backend_websocket"),
        text("true"),
    );
    backend(&db, 2, "w_test", 2);
    server(&db, 2, "app", "127.0.0.1", int(wild.into()), Some("check"));
    domain(&db, 3, "cert-only.test", None, null.clone());
    domain(&db, 4, "bad domain.test\nbackend x", None, int(0));
    backend(&db, 4, "bad", 4);
    server(&db, 4, "s", "127.0.0.1", int(80), None);
    domain(&db, 5, "opts.test", None, int(0));
    backend(&db, 5, "opts", 5);
    server(&db, 5, "s", "127.0.0.1", int(80), Some("check cookie s1"));
    domain(&db, 6, "noport.test", None, int(0));
    backend(&db, 6, "noport", 6);
    server(&db, 6, "s", "127.0.0.1", text(""), None);
    // Unique as a string, the same domain once normalised.
    domain(&db, 7, "SHOP.test", None, int(0));
    backend(&db, 7, "shop_upper", 7);
    server(&db, 7, "s", "127.0.0.1", int(80), None);
    domain(&db, 8, "empty.test", None, int(0));
    backend(&db, 8, "empty", 8);
    domain(&db, 9, "sus.test", None, null.clone());
    // A name that is no label: the domain comes, its backend_name does not.
    backend(&db, 9, "sus\tbackend", 9);
    server(&db, 9, "s1", "127.0.0.1", int(sus.into()), Some(""));
    domain(&db, 10, "tpl.test", Some("hap_backend_grpc"), int(0));
    backend(&db, 10, "tpl", 10);
    server(&db, 10, "s", "127.0.0.1", int(80), None);

    block(&db, 1, "192.0.2.7", Some("r"), Some("me"), None);
    block(
        &db,
        2,
        "127.0.0.2",
        Some("abuse"),
        None,
        Some("2099-01-01T00:00:00.000000"),
    );
    block(&db, 3, "not-an-ip", Some("x"), Some("API"), None);
    block(&db, 4, "192.0.2.7/32", None, None, None);
    block(
        &db,
        5,
        "198.51.100.9",
        Some("Temporary block for 5 minutes"),
        None,
        Some("2001-01-01T00:00:00.5"),
    );
    block(&db, 6, "10.9.0.0/16", None, Some("API"), None);
    block(&db, 7, "203.0.113.5", None, None, Some("tomorrow"));
    drop(db);

    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let write = |name: &str, pem: &str| std::fs::write(certs.join(name), pem).unwrap();
    write("shop.test.pem", &ca.bundle(&ca.leaf(&["shop.test"])));
    write("_wildcard_.w.test.pem", &ca.bundle(&ca.leaf(&["*.w.test"])));
    write("shop.test-0001.pem", &ca.bundle(&ca.leaf(&["shop.test"])));
    // The key of another certificate.
    let (a, b) = (ca.leaf(&["bad.test"]), ca.leaf(&["bad.test"]));
    write(
        "bad.test.pem",
        &format!("{}{}{}", a.cert_pem, ca.intermediate_pem, b.key_pem),
    );
    write(
        "default_self_signed_cert.pem",
        &ca.bundle(&ca.leaf(&["old-host"])),
    );

    let lists = dir.path().join("etc");
    std::fs::create_dir(&lists).unwrap();
    let list = |name: &str, text: &str| std::fs::write(lists.join(name), text).unwrap();
    list("cloudflare_ips.list", "173.245.48.0/20\n2400:cb00::/32\n");
    list(
        "trusted_proxies.list",
        "127.0.0.3\n# office\n\nnot-a-cidr\n",
    );
    list("trusted_ips.list", "127.0.0.1\n");
    list("trusted_ips.map", "127.0.0.1 1\n198.51.100.0/24 1\n");
    list("wpadmin_gate_exempt.list", "shop.test\nunknown.test\n");
    list("suspended_domains.list", "sus.test\n");
    OldEdge {
        _dir: dir,
        db: db_path,
        certs,
        lists,
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not one JSON value ({e}): {text}"))
}

/// The refused items of a JSON plan, as `source → reason`.
fn refused(plan: &Value) -> Vec<(String, String)> {
    plan["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["source"].as_str().unwrap().to_string(),
                r["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The domains a JSON plan imports or has, in its order.
fn domain_names(plan: &Value) -> Vec<&str> {
    plan["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["value"]["domain"].as_str().unwrap())
        .collect()
}

/// Each `(source, needle)` is refused with a reason containing the needle.
fn assert_refused(plan: &Value, expected: &[(&str, &str)]) {
    let got = refused(plan);
    for (source, needle) in expected {
        let hit = got.iter().find(|(s, _)| s == source);
        assert!(
            hit.is_some_and(|(_, reason)| reason.contains(needle)),
            "{source} not refused with {needle:?}: {got:#?}"
        );
    }
}

fn statuses(plan: &Value, section: &str) -> Vec<String> {
    plan[section]
        .as_array()
        .unwrap_or_else(|| panic!("no {section} in {plan}"))
        .iter()
        .map(|i| i["status"].as_str().unwrap().to_string())
        .collect()
}

/// The databases and the live files: what "nothing changed" compares.
fn snapshot(edge: &Edge) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = edge.live_files();
    for db in ["state.db", "blocks.db"] {
        files.push((edge.path(db), std::fs::read(edge.path(db)).unwrap()));
    }
    files
}

fn served_serial(edge: &Edge, sni: &str) -> String {
    let served = probe::handshake(edge.https_addr(), sni, TIMEOUT)
        .unwrap_or_else(|e| panic!("handshake with SNI {sni}: {e}"));
    let leaf = served.chain.first().expect("a certificate is served");
    CertInfo::from_der(leaf).unwrap().serial
}

fn bundle_serial(path: &Path) -> String {
    let pem = std::fs::read(path).unwrap();
    hapctl::tls::bundle::parse_bundle(
        &pem,
        &hapctl::tls::BundleCheck {
            now: hapctl::clock::unix_now(),
            must_cover: &[],
        },
    )
    .unwrap()
    .info
    .serial
}

#[test]
fn a_populated_old_edge_is_planned_dry_run_imported_once_and_then_unchanged() {
    let mut edge = Edge::new();
    let (wrapper, log) = counting_haproxy(edge.state_dir());
    edge.set_env("HAPCTL_HAPROXY_BIN", wrapper.to_str().unwrap());
    // The old manager wrote naive local times; this host's zone is UTC+2.
    edge.set_env("TZ", "XST-2");
    edge.ok(&["haproxy", "start"]);
    let (shop1, shop2) = (Backend::start("shop"), Backend::start("shop"));
    let (wild, sus) = (Backend::start("wild"), Backend::start("sus"));
    let ca = TestCa::new("legacy");
    let old = old_edge(&ca, [shop1.port, shop2.port], wild.port, sus.port);

    // Dry run: the plan, every refusal with its reason, HAProxy's verdict on a scratch copy
    // (one haproxy -c), nothing written, no reload.
    let before = snapshot(&edge);
    let (reloads, checks) = (edge.show_proc().master.reloads, check_runs(&log));
    let out = edge.ok(&old.args(&["--dry-run"]));
    assert!(out.contains("dry run: nothing was changed"), "{out}");
    assert!(
        out.contains("+ shop.test\tdefault\tweb1 127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("! blocked_ips id 3\t\"not-an-ip\""), "{out}");
    assert!(
        out.contains("haproxy -c of the set this import makes (a scratch copy): valid"),
        "{out}"
    );
    let dry = json(&edge.ok(&old.args(&["--dry-run", "--json"])));
    assert_eq!(dry["dry_run"], true);
    assert!(dry["outcome"].is_null(), "{dry}");
    let plan = &dry["plan"];
    assert_eq!(plan["haproxy_check"], json!({"verdict": "valid"}));
    assert_eq!(plan["resolution"]["unresolved_servers"], json!([]));
    assert_eq!(statuses(plan, "domains"), ["new"; 3], "{plan}");
    let domains = domain_names(plan);
    assert_eq!(domains, ["shop.test", "*.w.test", "sus.test"]);
    let shop = &plan["domains"][0]["value"]["backend"];
    assert_eq!(
        shop["servers"][0]["options"],
        serde_json::json!({"weight": 10, "check": true})
    );
    assert_eq!(
        shop["servers"][1]["options"],
        serde_json::json!({"check": false})
    );
    assert_eq!(
        plan["domains"][1]["value"]["backend"]["profile"],
        "long-lived"
    );
    let labels: Vec<&Value> = plan["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["value"]["backend_name"])
        .collect();
    assert_eq!(
        labels,
        [&json!("shop_test"), &json!("w_test"), &Value::Null]
    );
    assert_eq!(statuses(plan, "blocks").len(), 3, "{plan}");
    assert_eq!(
        plan["blocks"][1]["value"]["expires_at"],
        4_070_908_800i64 - 7200
    );
    assert_eq!(plan["blocks"][0]["value"]["created_at"], 1_796_032_800i64);
    assert_eq!(plan["blocks"][0]["value"]["author"], "me");
    assert_eq!(statuses(plan, "certificates").len(), 2, "{plan}");
    assert!(
        !dry.to_string().contains("PRIVATE KEY"),
        "the plan shows no key"
    );
    let expected_refusals = [
        ("domains id 3", "certificate-only"),
        ("domains id 4", "whitespace"),
        ("domains id 5", "cannot be typed"),
        ("domains id 6", "port"),
        ("domains id 7", "the same domain as domains id 1"),
        ("domains id 8", "no servers"),
        ("domains id 10", "hap_backend_grpc"),
        ("backends id 9", "backend_name not kept"),
        ("blocked_ips id 3", "is not an IPv4 or IPv6 address"),
        ("blocked_ips id 4", "the same block as blocked_ips id 1"),
        ("blocked_ips id 5", "expired at 2000-12-31T22:00:00Z"),
        ("blocked_ips id 7", "is not a local date"),
        ("certs/bad.test.pem", "key"),
        ("certs/default_self_signed_cert.pem", "own default"),
        ("certs/shop.test-0001.pem", "extra certbot lineage"),
        ("trusted_proxies.list:4", "not-a-cidr"),
        ("wpadmin_gate_exempt.list:2", "neither imported nor"),
    ];
    assert_refused(plan, &expected_refusals);
    let got = refused(plan);
    assert_eq!(got.len(), expected_refusals.len(), "{got:#?}");
    assert_eq!(snapshot(&edge), before, "a dry run writes nothing");
    assert_eq!(edge.show_proc().master.reloads, reloads);
    assert_eq!(
        check_runs(&log),
        checks + 2,
        "a scratch copy's check per dry run"
    );
    assert_eq!(edge.ok(&["domain", "ls"]), "");
    let checks = check_runs(&log);

    // The import: one haproxy -c, one reload; certificates at runtime, blocks on their path.
    let out = json(&edge.ok(&old.args(&["--json"])));
    assert!(out["error"].is_null(), "{out}");
    let outcome = &out["outcome"];
    assert_eq!(outcome["apply"]["outcome"], "applied", "{out}");
    assert_eq!(outcome["apply"]["checks"], 1);
    assert_eq!(outcome["certificates"].as_array().unwrap().len(), 2);
    for c in outcome["certificates"].as_array().unwrap() {
        assert_eq!(c["installed"], "runtime", "{c}");
    }
    assert_eq!(outcome["blocks"]["enforcement"], "runtime", "{out}");
    assert_eq!(check_runs(&log), checks + 1, "one haproxy -c");
    assert_eq!(edge.show_proc().master.reloads, reloads + 1, "one reload");

    edge.wait_for_body("shop.test", "shop");
    edge.wait_for_body("a.w.test", "wild");
    edge.wait_for_body("deep.a.w.test", "wild");
    assert_eq!(
        edge.get("w.test", "/").status,
        404,
        "a wildcard leaves the apex out"
    );
    assert_eq!(edge.get("sus.test", "/").status, 503, "suspended");
    assert_eq!(
        edge.get("opts.test", "/").status,
        404,
        "refused: not routed"
    );
    let blocked = edge.get_from("127.0.0.2".parse().unwrap(), "shop.test", "/");
    assert_eq!(blocked.status, 403, "{blocked:?}");
    assert_eq!(edge.get("shop.test", "/").status, 200);

    let shop_serial = bundle_serial(&old.certs.join("shop.test.pem"));
    let wild_serial = bundle_serial(&old.certs.join("_wildcard_.w.test.pem"));
    assert!(serial_matches(
        &served_serial(&edge, "shop.test"),
        &shop_serial
    ));
    assert!(serial_matches(
        &served_serial(&edge, "x.w.test"),
        &wild_serial
    ));
    let certs = edge.ok(&["cert", "ls"]);
    assert!(
        certs.contains("wildcard.w.test") && !certs.contains("bad.test"),
        "{certs}"
    );

    let blocks = edge.ok(&["block", "ls"]);
    for key in [
        "192.0.2.7\t",
        "127.0.0.2\tuntil 2098-12-31T22:00:00Z",
        "10.9.0.0/16",
    ] {
        assert!(blocks.contains(key), "{key} in {blocks}");
    }
    assert!(
        !blocks.contains("198.51.100.9") && !blocks.contains("192.0.2.7/32"),
        "{blocks}"
    );
    let proxies = edge.ok(&["proxy", "ls"]);
    for line in [
        "127.0.0.3\n",
        "173.245.48.0/20\tcloudflare",
        "2400:cb00::/32\tcloudflare",
    ] {
        assert!(proxies.contains(line), "{line} in {proxies}");
    }
    let exempt = edge.ok(&["limits", "exempt", "ls"]);
    assert!(
        exempt.contains("127.0.0.1") && exempt.contains("198.51.100.0/24"),
        "{exempt}"
    );

    // Again: everything is present, nothing runs.
    let after = snapshot(&edge);
    let reloads = edge.show_proc().master.reloads;
    let out = edge.ok(&old.args(&[]));
    assert!(
        out.contains("nothing to import: the edge already has every item"),
        "{out}"
    );
    assert!(
        out.contains("0 to import, 15 already present, 17 refused"),
        "{out}"
    );
    let again = json(&edge.ok(&old.args(&["--json"])));
    for section in [
        "domains",
        "blocks",
        "certificates",
        "suspended",
        "cloudflare",
    ] {
        assert!(
            statuses(&again["plan"], section)
                .iter()
                .all(|s| s == "unchanged"),
            "{section}: {again}"
        );
    }
    assert_eq!(snapshot(&edge), after, "a second run writes nothing");
    assert_eq!(edge.show_proc().master.reloads, reloads);
    assert_eq!(check_runs(&log), checks + 1);
    // The old clients read back the backend names they gave (hapctl's own where none is kept).
    let api = Daemon::start(&edge);
    let listed: Vec<(String, String)> = api
        .get("/api/domains")
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["domain"].as_str().unwrap().into(),
                d["backend_name"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("shop.test", "shop_test"),
        ("*.w.test", "w_test"),
        ("sus.test", "d_sus.test"),
    ];
    assert_eq!(listed, want.map(|(d, b)| (d.to_string(), b.to_string())));
}

/// Adds domain `id` with one backend and server `addr:port` to the old database.
fn add_row(old: &OldEdge, id: i64, name: &str, server_name: &str, addr: &str, port: u16) {
    let db = Connection::open(&old.db).unwrap();
    domain(&db, id, name, None, int(0));
    backend(&db, id, &format!("{name}_backend"), id);
    server(&db, id, server_name, addr, int(port.into()), Some("check"));
}

#[test]
fn the_rows_haproxy_refuses_are_refused_alone_and_a_name_that_does_not_resolve_waits() {
    let mut edge = Edge::new();
    let marker = "127.0.0.99:8099";
    let (wrapper, log) = testkit::refusing_haproxy(
        edge.state_dir(),
        marker,
        &format!("/{marker}/s/$/ no-such-keyword/"),
    );
    edge.set_env("HAPCTL_HAPROXY_BIN", wrapper.to_str().unwrap());
    edge.ok(&["haproxy", "start"]);
    let (shop1, shop2) = (Backend::start("shop"), Backend::start("shop"));
    let (wild, sus) = (Backend::start("wild"), Backend::start("sus"));
    let ca = TestCa::new("legacy-rows");
    let old = old_edge(&ca, [shop1.port, shop2.port], wild.port, sus.port);
    add_row(&old, 11, "refused.test", "s1", "127.0.0.99", 8099);
    add_row(&old, 12, "wp.test", "wp", "wp_site_1", 80);
    let suspended = old.lists.join("suspended_domains.list");
    std::fs::write(&suspended, "sus.test\nrefused.test\n").unwrap();

    // The dry run says what the import will do: the refused row and what needs it left out,
    // the container name imported, waiting for its name.
    let checks = check_runs(&log);
    let dry = json(&edge.ok(&old.args(&["--dry-run", "--json"])));
    assert_eq!(
        check_runs(&log),
        checks + 2,
        "refused, then valid without the row"
    );
    let plan = &dry["plan"];
    assert_eq!(plan["haproxy_check"], json!({"verdict": "valid"}), "{plan}");
    let domains = domain_names(plan);
    assert_eq!(domains, ["shop.test", "*.w.test", "sus.test", "wp.test"]);
    assert_refused(
        plan,
        &[
            ("domains id 11", "HAProxy refuses its backend: 'server d_refused.test/s1' : unknown keyword 'no-such-keyword'"),
            ("suspended_domains.list:2", "its domain refused.test is refused"),
        ],
    );
    assert_eq!(
        plan["resolution"]["unresolved_servers"],
        json!([{"domain": "wp.test", "server": "wp", "host": "wp_site_1", "seen": "no-address"}])
    );
    let text = edge.ok(&old.args(&["--dry-run"]));
    assert!(
        text.contains("WARNING: 1 server(s) do not resolve now: wp_site_1 (wp.test server wp)"),
        "{text}"
    );
    assert!(
        text.contains("until it resolves at a reload; set [resolvers]"),
        "{text}"
    );

    // The import: HAProxy refuses the set, the row is left out on scratch copies, the rest
    // goes in with one more apply (and one reload in all).
    let (checks, reloads) = (check_runs(&log), edge.show_proc().master.reloads);
    let out = json(&edge.ok(&old.args(&["--json"])));
    assert!(out["error"].is_null(), "{out}");
    assert_eq!(out["outcome"]["apply"]["outcome"], "applied", "{out}");
    assert_eq!(
        check_runs(&log),
        checks + 4,
        "the refused apply, two scratch checks, the apply"
    );
    assert_eq!(edge.show_proc().master.reloads, reloads + 1, "one reload");
    assert!(
        refused(&out["plan"])
            .iter()
            .any(|(s, _)| s == "domains id 11"),
        "{out}"
    );
    edge.wait_for_body("shop.test", "shop");
    assert_eq!(edge.get("sus.test", "/").status, 503, "suspended");
    assert_eq!(edge.get("refused.test", "/").status, 404, "not imported");
    assert_eq!(edge.get("wp.test", "/").status, 503, "waits for its name");
    assert!(edge
        .ok(&["status"])
        .contains("wp_site_1 (wp.test server wp)"));
}

#[test]
fn an_import_haproxy_refuses_changes_nothing_not_even_the_certificates() {
    let mut edge = Edge::started();
    let ca = TestCa::new("legacy-refused");
    let old = old_edge(&ca, [8081, 8082], 8083, 8084);
    // HAProxy refuses the set with shop.test's first server, in its global section.
    let (wrapper, _) = testkit::refusing_haproxy(
        edge.state_dir(),
        "127.0.0.1:8081",
        "s/^global$/global\\n    no-such-keyword/",
    );
    edge.set_env("HAPCTL_HAPROXY_BIN", wrapper.to_str().unwrap());
    // Name, source and what it serves: the days left may tick over during the test.
    let certs = || -> Vec<String> {
        edge.ok(&["cert", "ls"])
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                [f.first(), f.get(1), f.get(3)]
                    .map(|x| x.copied().unwrap_or(""))
                    .join("\t")
            })
            .collect()
    };
    let before_certs = certs();
    let reloads = edge.show_proc().master.reloads;
    // A refusal no row explains: the dry run says the import would be refused.
    let out = edge.expect_code(3, &old.args(&["--dry-run"]));
    assert!(
        out.contains("haproxy -c REFUSES the set this import makes, for reasons no row explains")
            && out.contains("the import would be refused"),
        "{out}"
    );
    let out = edge.expect_code(3, &old.args(&[]));
    assert!(
        out.contains("the import was not applied: the apply was rejected"),
        "{out}"
    );
    assert!(
        out.contains("no-such-keyword"),
        "HAProxy's message is shown: {out}"
    );
    assert!(out.contains("nothing was changed"), "{out}");
    assert_eq!(certs(), before_certs, "the certificates were taken out");
    assert_eq!(edge.ok(&["domain", "ls"]), "");
    assert_eq!(edge.ok(&["block", "ls"]), "");
    assert_eq!(edge.ok(&["proxy", "ls"]), "");
    assert_eq!(edge.show_proc().master.reloads, reloads);
    assert!(edge.live_set_is_valid());
}

#[test]
fn inputs_that_are_not_an_old_edge_are_refused_clearly_and_change_nothing() {
    let edge = Edge::new();
    let dir = tempfile::tempdir().unwrap();
    let before = snapshot(&edge);
    let run = |db: &Path, extra: &[&str], needle: &str| {
        let mut args = vec!["import-legacy", "--db", db.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = edge.expect_code(2, &args);
        assert!(out.contains(needle), "{args:?}: {out:?} lacks {needle:?}");
        assert!(
            out.contains(db.to_str().unwrap()) || !extra.is_empty(),
            "names the file: {out}"
        );
        assert_eq!(snapshot(&edge), before, "{args:?} changed something");
    };

    run(&dir.path().join("missing.db"), &[], "No such file");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, "id,domain\n1,shop.test\n".repeat(200)).unwrap();
    run(&garbage, &[], "not a database");
    run(dir.path(), &[], "is not a file");

    let partial = dir.path().join("partial.db");
    Connection::open(&partial)
        .unwrap()
        .execute_batch("CREATE TABLE domains (id INTEGER PRIMARY KEY, domain TEXT);")
        .unwrap();
    run(
        &partial,
        &[],
        "table(s) backends, backend_servers, blocked_ips missing",
    );

    let no_column = dir.path().join("no-column.db");
    Connection::open(&no_column)
        .unwrap()
        .execute_batch(&OLD_SCHEMA.replace("ip_address TEXT UNIQUE NOT NULL,", ""))
        .unwrap();
    run(
        &no_column,
        &[],
        "table blocked_ips has no column ip_address",
    );

    // A good database with a folder that is not there.
    let ca = TestCa::new("legacy-hostile");
    let old = old_edge(&ca, [8081, 8082], 8083, 8084);
    let missing = dir.path().join("no-certs");
    run(&old.db, &["--certs", missing.to_str().unwrap()], "no-certs");
    run(
        &old.db,
        &["--lists", missing.to_str().unwrap()],
        "is not a folder",
    );
    // The old database was only read.
    let mut db = Connection::open(&old.db).unwrap();
    let rows: i64 = db
        .transaction()
        .unwrap()
        .query_row("SELECT count(*) FROM domains", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 10);
}

/// On an edge of a fleet, the import is published: every edge serves the imported domains,
/// suspensions and blocks (certificates stay with the edge that imported them).
#[test]
fn an_import_on_an_edge_of_a_fleet_reaches_every_edge() {
    // Certificates go to the fleet sealed: the edges share the fleet key.
    let key = testkit::fleet::SharedKey::default();
    let lab = testkit::fleet::FleetLab::start_with(1, 2, |i, edge| key.prepare(i, edge).unwrap());
    let (shop1, shop2) = (Backend::start("shop"), Backend::start("shop"));
    let (wild, sus) = (Backend::start("wild"), Backend::start("sus"));
    let ca = TestCa::new("legacy-fleet");
    let old = old_edge(&ca, [shop1.port, shop2.port], wild.port, sus.port);
    lab.edge(0).ok(&old.args(&[]));
    lab.wait_all(Duration::from_secs(15), |_, edge| {
        let (shop, suspended) = (edge.get("shop.test", "/"), edge.get("sus.test", "/"));
        (shop.status == 200 && shop.body.contains("shop") && suspended.status == 503)
            .then_some(())
            .ok_or_else(|| format!("shop.test {}, sus.test {}", shop.status, suspended.status))
    });
    // The blocks follow the state in a publication of their own.
    lab.wait_all(Duration::from_secs(15), |i, _| {
        let keys = lab.daemon(i).blocked_keys();
        keys.contains("192.0.2.7")
            .then_some(())
            .ok_or_else(|| format!("blocks: {keys:?}"))
    });
    assert!(lab.etcd.get("/hapctl/state/domain/shop.test").is_some());
    // The imported certificates, in the fleet, are served by both edges.
    assert!(lab.etcd.get("/hapctl/certs/shop.test").is_some());
    lab.wait_all(Duration::from_secs(15), |_, edge| {
        let listed = edge.ok(&["cert", "ls", "--json"]);
        (listed.contains("\"shop.test\"") && listed.contains("\"wildcard.w.test\""))
            .then_some(())
            .ok_or_else(|| format!("cert ls: {listed}"))
    });
}
