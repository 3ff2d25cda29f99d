//! Traffic per domain end to end: a known pattern of requests through the real HAProxy (N
//! answered, M blocked, K limited, F failing at the backend) → the access log → `hapctl
//! serve`'s counts → the same numbers in `hapctl top --json`, `GET /v1/traffic` and
//! `/metrics`; HAProxy's own counters per backend beside them.

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::daemon::Daemon;
use testkit::{free_port, Backend, Edge};

/// The pattern's three domains. Each test has its own names: an edge's access log may get a
/// line from another test's HAProxy (a worker still sending while the log port it knew is
/// reused; every test's HAProxy runs as root, which the receiver admits), and the figures
/// asserted exactly are the test's own domains'.
pub(crate) struct Hosts {
    pub shop: &'static str,
    pub api: &'static str,
    pub broken: &'static str,
}

// Names no other test uses: a line another test's HAProxy sends to a log port this test's
// daemon took over (after that test ended) must not count as this pattern's.
const HOSTS: Hosts = Hosts {
    shop: "shop.pattern.example.com",
    api: "api.pattern.example.com",
    broken: "broken.pattern.example.com",
};
const SHOP: &str = HOSTS.shop;
const API: &str = HOSTS.api;
const BROKEN: &str = HOSTS.broken;
const BLOCKED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const LIMITED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// The pattern: answered by shop, blocked at shop, let through and limited at api, failing.
pub(crate) const N: u64 = 30;
pub(crate) const M: u64 = 4;
pub(crate) const API_ALLOWED: u64 = 5;
pub(crate) const K: u64 = 7;
pub(crate) const F: u64 = 6;
pub(crate) const TOTAL: u64 = N + M + API_ALLOWED + K + F;

/// Dropped in field order: the daemon first, so that its supervision does not start the
/// master again after the edge stopped it (that master would outlive the test).
struct Setup {
    daemon: Daemon,
    edge: Edge,
    _app: Backend,
}

/// An edge with the three domains, limits only on api (5 requests per window per client),
/// 127.0.0.2 blocked, broken's server a port nobody listens on; `hapctl serve` on it.
pub(crate) fn pattern_edge(h: &Hosts) -> (Edge, Backend, Daemon) {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", h.shop, "--server", &app.addr()]);
    edge.ok(&["domain", "add", h.api, "--server", &app.addr()]);
    let dead = format!("127.0.0.1:{}", free_port());
    edge.ok(&["domain", "add", h.broken, "--server", &dead]);
    edge.ok(&["limits", "set", "--local-exempt", "off", "--preset", "off"]);
    edge.ok(&[
        "domain",
        "limits",
        h.api,
        "--preset",
        "custom",
        "--req-rate",
        "5:deny",
    ]);
    edge.ok(&["block", "add", &BLOCKED.to_string()]);
    let daemon = Daemon::start(&edge);
    (edge, app, daemon)
}

/// The pattern through the edge: N answered and M blocked at shop, 5 let through and K
/// limited at api, F 5xx at broken.
pub(crate) fn send_pattern(edge: &Edge, h: &Hosts) {
    for _ in 0..N {
        assert_eq!(edge.get(h.shop, "/").status, 200);
    }
    for _ in 0..M {
        assert_eq!(edge.get_from(BLOCKED, h.shop, "/").status, 403);
    }
    let api: Vec<u16> = (0..API_ALLOWED + K)
        .map(|_| edge.get_from(LIMITED, h.api, "/").status)
        .collect();
    let mut expected = vec![200; API_ALLOWED as usize];
    expected.extend(vec![429; K as usize]);
    assert_eq!(
        api, expected,
        "5 requests within the limit, the rest over it"
    );
    for _ in 0..F {
        assert_eq!(edge.get(h.broken, "/").status, 503);
    }
}

/// [`pattern_edge`] with the pattern sent and counted by the daemon.
fn traffic_sent() -> Setup {
    let (edge, app, daemon) = pattern_edge(&HOSTS);
    send_pattern(&edge, &HOSTS);
    let setup = Setup {
        edge,
        daemon,
        _app: app,
    };
    wait_counted(&setup, &[SHOP, API, BROKEN], TOTAL);
    setup
}

/// Waits until the daemon counted `n` requests for `hosts` (the access log reaches it within
/// a second).
fn wait_counted(s: &Setup, hosts: &[&str], n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = s.daemon.client().get("/v1/traffic?limit=100000");
        assert_eq!(r.status, 200, "{}", r.text);
        let counted: u64 = r.json["domains"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| hosts.iter().any(|h| d["domain"] == *h))
            .map(|d| d["totals"]["requests"].as_u64().unwrap_or(0))
            .sum();
        if counted >= n || Instant::now() > deadline {
            assert_eq!(counted, n, "requests counted: {}", r.text);
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

fn domain<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["domain"] == name)
        .unwrap_or_else(|| panic!("{name} in {report}"))
}

/// The 15-minute window (the whole test fits in it).
fn window<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["windows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["window"] == name)
        .unwrap()
}

/// The pattern, as every reader of the counts must show it.
fn assert_pattern(report: &Value) {
    for w in ["15m", "1h"] {
        let shop = window(domain(report, SHOP), w);
        assert_eq!(shop["requests"], N + M, "{shop}");
        assert_eq!(shop["status"]["2xx"], N);
        assert_eq!(shop["status"]["4xx"], M);
        assert_eq!(shop["turned_away"], M);
        assert_eq!(shop["by_reason"]["blocked"], M);
        assert!(shop["bytes_in"].as_u64().unwrap() > 0);
        assert!(shop["bytes_out"].as_u64().unwrap() > 0);
        assert!(shop["time_ms"]["p95"].is_number(), "{shop}");

        let api = window(domain(report, API), w);
        assert_eq!(api["requests"], API_ALLOWED + K, "{api}");
        assert_eq!(api["status"]["2xx"], API_ALLOWED);
        assert_eq!(api["status"]["4xx"], K);
        assert_eq!(api["by_reason"]["limit:req_rate"], K);

        let broken = window(domain(report, BROKEN), w);
        assert_eq!(broken["requests"], F, "{broken}");
        assert_eq!(broken["status"]["5xx"], F);
        assert_eq!(broken["turned_away"], 0);

        // The edge holds them (and whatever another test's HAProxy may have sent).
        let edge = window(&report["edge"], w);
        assert!(edge["requests"].as_u64().unwrap() >= TOTAL, "{edge}");
        assert!(edge["turned_away"].as_u64().unwrap() >= M + K, "{edge}");
    }
    // Sorted by requests, largest first.
    let names: Vec<&str> = report["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["domain"].as_str().unwrap())
        .filter(|d| [SHOP, API, BROKEN].contains(d))
        .collect();
    assert_eq!(names, [SHOP, API, BROKEN], "{report}");
}

#[test]
fn a_known_pattern_reads_the_same_in_top_the_api_and_the_metrics() {
    let s = traffic_sent();

    let api = s
        .daemon
        .client()
        .get("/v1/traffic?window=15m&backends=true");
    assert_eq!(api.status, 200, "{}", api.text);
    assert_pattern(&api.json);
    assert!(api.json["since"].as_u64().unwrap() <= api.json["now"].as_u64().unwrap());
    // HAProxy's own counters agree: the blocked and limited requests never reached a
    // backend; the failing one answered 5xx.
    let backends = api.json["backends"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", api.text));
    let with = |twoxx: u64, fivexx: u64| {
        backends
            .iter()
            .any(|b| b["status_total"]["2xx"] == twoxx && b["status_total"]["5xx"] == fivexx)
    };
    assert!(with(N, 0), "shop's backend: {backends:?}");
    assert!(with(API_ALLOWED, 0), "api's backend: {backends:?}");
    assert!(with(0, F), "broken's backend: {backends:?}");

    let top = s.edge.ok(&["top", "--json", "--window", "15m"]);
    let top: Value = serde_json::from_str(&top).unwrap();
    assert_pattern(&top);
    let by_errors = s.edge.ok(&["top", "--json", "--sort", "errors", "-n", "1"]);
    let by_errors: Value = serde_json::from_str(&by_errors).unwrap();
    assert_eq!(by_errors["domains"][0]["domain"], BROKEN);
    assert_eq!(by_errors["domains"].as_array().unwrap().len(), 1);

    let metrics = s.daemon.client().get("/metrics").text;
    for line in [
        format!("hapctl_domain_requests_total{{domain=\"{SHOP}\",class=\"2xx\"}} {N}"),
        format!("hapctl_domain_requests_total{{domain=\"{SHOP}\",class=\"4xx\"}} {M}"),
        format!("hapctl_domain_turned_away_total{{domain=\"{SHOP}\",reason=\"blocked\"}} {M}"),
        format!(
            "hapctl_domain_turned_away_total{{domain=\"{API}\",reason=\"limit:req_rate\"}} {K}"
        ),
        format!("hapctl_domain_requests_total{{domain=\"{BROKEN}\",class=\"5xx\"}} {F}"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }

    // The live view prints the same domains.
    let screen = s.edge.ok(&["top", "--iterations", "1", "--window", "15m"]);
    assert!(screen.contains(SHOP) && screen.contains(BROKEN), "{screen}");
}

#[test]
fn the_metrics_keep_the_top_domains_apart_and_sum_the_rest() {
    let edge = Edge::started();
    let settings = edge.settings_text();
    assert!(settings.contains("\ntop_domains = 20 "), "{settings}");
    edge.write_settings(&settings.replace("\ntop_domains = 20 ", "\ntop_domains = 1 "));
    let app = Backend::start("ok");
    let (top, second, third) = (
        "a.metrics.example.com",
        "b.metrics.example.com",
        "c.metrics.example.com",
    );
    for (host, n) in [(top, 3), (second, 2), (third, 1)] {
        edge.ok(&["domain", "add", host, "--server", &app.addr()]);
        for _ in 0..n {
            assert_eq!(edge.get(host, "/").status, 200);
        }
    }
    // Requests for names the edge does not serve are counted too, as what they are.
    let nowhere = "nowhere.metrics.example.net";
    assert_eq!(edge.get(nowhere, "/").status, 404);
    let daemon = Daemon::start(&edge);
    let s = Setup {
        edge,
        daemon,
        _app: app,
    };
    // The lines waited in HAProxy's ring until the daemon listened.
    wait_counted(&s, &[top, second, third, nowhere], 7);
    let metrics = s.daemon.client().get("/metrics").text;
    let traffic = s.daemon.client().get("/v1/traffic?limit=100000").json;
    // (other) is every domain but the top one: the three this test sent, and any other.
    let others = traffic["domains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["domain"] != top);
    let sum = |class: &str| -> u64 {
        others
            .clone()
            .map(|d| d["totals"]["status"][class].as_u64().unwrap())
            .sum()
    };
    let (twoxx, fourxx) = (sum("2xx"), sum("4xx"));
    assert!(twoxx >= 3 && fourxx >= 1, "{traffic}");
    for line in [
        format!("hapctl_domain_requests_total{{domain=\"{top}\",class=\"2xx\"}} 3"),
        format!("hapctl_domain_requests_total{{domain=\"(other)\",class=\"2xx\"}} {twoxx}"),
        format!("hapctl_domain_requests_total{{domain=\"(other)\",class=\"4xx\"}} {fourxx}"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    assert!(
        metrics.contains(
            "hapctl_domain_turned_away_total{domain=\"(other)\",reason=\"unknown-host\"}"
        ),
        "{metrics}"
    );
    assert!(
        !metrics.contains(second) && !metrics.contains(third),
        "{metrics}"
    );
    let bad = s.daemon.client().get("/v1/traffic?sort=loudest");
    assert_eq!(
        (bad.status, bad.error_field()),
        (400, "sort"),
        "{}",
        bad.text
    );
}
