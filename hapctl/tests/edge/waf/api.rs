//! The agent through the API: `GET /v1/waf` (what `hapctl waf status --json` prints),
//! `POST /v1/waf/reload`, `GET /v1/waf/rules` and `POST /v1/waf/test`, against `hapctl serve`
//! running the real agent over Debian's CRS.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{agent_pid, get, lab, policy, SHOP, SQLI};
use testkit::daemon::ApiClient;

/// `GET /v1/waf`, once `ok` holds for it (the agent rewrites its state file every second).
fn waf_once(api: &ApiClient, what: &str, ok: &dyn Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = api.get("/v1/waf");
        assert_eq!(r.status, 200, "{r:?}");
        if ok(&r.json) {
            return r.json;
        }
        assert!(Instant::now() < deadline, "{what}: {}", r.text);
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_agents_health_counters_and_rules_reload_through_the_api() {
    let lab = lab();
    let (edge, api) = (&lab.edge, lab.daemon.client());
    let pid = agent_pid(edge).unwrap();
    // The lab's probe: one injection blocked.
    let first = waf_once(&api, "the probe counted", &|w| w["blocked"] == 1);
    assert_eq!(
        (&first["configured"], &first["up"], &first["down_reason"]),
        (&Value::Bool(true), &Value::Bool(true), &Value::Null),
        "{first}"
    );
    assert_eq!(first["pid"], pid, "{first}");
    assert!(first["rules"].as_u64().unwrap() > 100, "{first}");
    let crs = first["crs"].as_str().unwrap_or_default();
    assert!(crs.starts_with("OWASP_CRS/3."), "{first}");
    let engine = first["engine"].as_str().unwrap_or_default();
    assert!(engine.starts_with("ModSecurity v3"), "{first}");
    let loaded_at = first["rules_loaded_at"].as_i64().unwrap();
    assert!(
        loaded_at > 0 && loaded_at <= hapctl::clock::unix_now(),
        "{first}"
    );
    // One view: the CLI's JSON is the same; and no heartbeat in it, so a poll repeated while
    // nothing happens is the same body (a 304 for the dashboard).
    let cli: Value = serde_json::from_str(&edge.ok(&["waf", "status", "--json"])).unwrap();
    assert_eq!(cli, first);
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        api.get("/v1/waf").text,
        serde_json::to_string(&first).unwrap()
    );

    // An SQL injection through the edge moves the counters, by rule id.
    assert_eq!(get(edge, SQLI).status, 403);
    let hits = |w: &Value| w["by_rule"]["942100"].as_u64().unwrap_or(0);
    let moved = waf_once(&api, "the block counted", &|w| w["blocked"] == 2);
    assert!(
        moved["inspected"].as_u64() > first["inspected"].as_u64(),
        "{moved}"
    );
    assert_eq!(hits(&moved), hits(&first) + 1, "{moved}");

    // A reload: answered once the new rules serve, the same process, HAProxy still blocks.
    let r = api.call("POST", "/v1/waf/reload", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (
            &r.json["outcome"],
            &r.json["pid"],
            &r.json["rules"],
            &r.json["crs"]
        ),
        (
            &"reloaded".into(),
            &first["pid"],
            &first["rules"],
            &first["crs"]
        ),
        "{r:?}"
    );
    assert!(
        r.json["rules_loaded_at"].as_i64() >= Some(loaded_at),
        "{r:?}"
    );
    let reloaded = waf_once(&api, "the reload counted", &|w| w["reloads"] == 1);
    assert_eq!(reloaded["rules_loaded_at"], r.json["rules_loaded_at"]);
    assert_eq!(get(edge, SQLI).status, 403);

    // A rule set libmodsecurity refuses: a 422 naming the loader and why, the old rules serve.
    let mut loader = std::fs::read_to_string(&lab.crs).unwrap();
    loader += "\nSecRule ARGS \"@rx x\" \"id:1,phase:1,nonsense\"\n";
    std::fs::write(&lab.crs, loader).unwrap();
    let r = api.call("POST", "/v1/waf/reload", None);
    assert_eq!(
        (r.status, r.error_code()),
        (422, "waf_rules_refused"),
        "{r:?}"
    );
    let message = r.json["error"]["message"].as_str().unwrap();
    let named = lab.crs.display().to_string();
    assert!(
        message.contains(&named) && message.contains("nonsense") && message.contains("old ones"),
        "{message}"
    );
    let refused = waf_once(&api, "the refusal counted", &|w| w["reload_failures"] == 1);
    assert!(
        refused["reload_error"].as_str().unwrap().contains(&named),
        "{refused}"
    );
    assert_eq!(
        (&refused["up"], &refused["rules_loaded_at"]),
        (&Value::Bool(true), &reloaded["rules_loaded_at"]),
        "{refused}"
    );
    assert_eq!(get(edge, SQLI).status, 403);
    assert_eq!(get(edge, "/products?page=2").status, 200);
    // Four blocked in all (the probe, one before the reload, one after each reload).
    waf_once(&api, "every block counted", &|w| w["blocked"] == 4);

    // Killed (and its rules still refused, so no new agent starts): DOWN, with why, its last
    // counters kept; a reload says it is down.
    hapctl::process::send_signal(pid, libc::SIGKILL).unwrap();
    let down = waf_once(&api, "DOWN", &|w| w["up"] == false);
    let why = down["down_reason"].as_str().unwrap();
    assert!(
        why.contains(&format!("pid {pid}")) && why.contains("gone"),
        "{down}"
    );
    assert_eq!(
        (&down["pid"], &down["blocked"]),
        (&pid.into(), &4.into()),
        "{down}"
    );
    let r = api.call("POST", "/v1/waf/reload", None);
    assert_eq!((r.status, r.error_code()), (503, "waf_agent_down"), "{r:?}");
    assert!(r.text.contains("gone"), "{r:?}");
}

#[test]
fn the_rule_list_and_a_request_evaluated_without_sending_it_through_the_api() {
    let lab = lab();
    let (edge, api) = (&lab.edge, lab.daemon.client());
    // The rule list is the CLI's.
    let r = api.get("/v1/waf/rules");
    assert_eq!(r.status, 200, "{r:?}");
    let cli: Value = serde_json::from_str(&edge.ok(&["waf", "rules", "--json"])).unwrap();
    assert_eq!(r.json, cli);
    assert!(
        r.json["rules"].as_u64().unwrap() > 300,
        "{}",
        r.json["rules"]
    );

    let inspected = |w: &Value| w["inspected"].as_u64().unwrap();
    // The lab's probe, counted (the state file is rewritten every second).
    waf_once(&api, "the probe counted", &|w| w["blocked"] == 1);
    thread::sleep(Duration::from_millis(1200));
    let before = inspected(&waf_once(&api, "counted", &|_| true));
    let trial = |body: Value| {
        let r = api.call("POST", "/v1/waf/test", Some(&body));
        assert_eq!(r.status, 200, "{r:?}");
        r.json
    };
    // Under the host's stored policy (the lab's: block).
    let attack = json!({"url": format!("https://{SHOP}{SQLI}"), "headers": [{"name": "User-Agent", "value": "Mozilla/5.0"}]});
    let blocked = trial(attack.clone());
    assert_eq!(blocked["verdict"], "block", "{blocked}");
    assert_eq!(blocked["policy_from"], format!("{SHOP}'s"), "{blocked}");
    let counted: Vec<u64> = blocked["counted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(counted.contains(&942100), "{blocked}");
    let m = blocked["matched"].as_array().unwrap();
    assert!(
        m.iter().any(|m| m["id"] == 942100
            && m["points"] == 5
            && !m["message"].as_str().unwrap().is_empty()),
        "{blocked}"
    );
    policy(edge, &["--mode", "detect"]);
    assert_eq!(trial(attack.clone())["verdict"], "detect");
    // A policy given wins; an exclusion of every counted rule lets it through.
    let mut given = attack.clone();
    given["policy"] = json!({"mode": "block", "exclusions": counted.iter().map(|r| json!({"rule": r})).collect::<Vec<_>>()});
    let passed = trial(given);
    assert_eq!(
        (&passed["verdict"], &passed["policy_from"]),
        (&json!("pass"), &json!("given")),
        "{passed}"
    );
    // A body, and a domain named instead of a host.
    let xss = trial(json!({"url": "/comment", "method": "POST", "domain": SHOP,
        "headers": [{"name": "Content-Type", "value": "application/x-www-form-urlencoded"}, {"name": "Host", "value": SHOP}],
        "body": "text=%3Cscript%3Ealert(1)%3C%2Fscript%3E"}));
    assert_eq!(xss["verdict"], "detect", "{xss}");
    assert!(
        xss["counted"].as_array().unwrap().contains(&json!(941100)),
        "{xss}"
    );
    let clean = trial(json!({"url": format!("http://{SHOP}/products?page=2"),
        "headers": [{"name": "User-Agent", "value": "Mozilla/5.0"}, {"name": "Accept", "value": "text/html"}]}));
    assert_eq!(clean["verdict"], "pass", "{clean}");

    // Hostile input: a 400 naming the field.
    for (body, field) in [
        (json!({"url": "search?q=1"}), "url"),
        (json!({"url": "/a\r\nX: 1"}), "url"),
        (json!({"url": "/", "method": "G T"}), "method"),
        (
            json!({"url": "/", "headers": [{"name": "A", "value": "b\r\nInjected: 1"}]}),
            "header",
        ),
        (
            json!({"url": "/", "headers": [{"name": "A:b", "value": "c"}]}),
            "header",
        ),
        (json!({"url": "/", "headers": ["A: b"]}), "headers[0]"),
        (
            json!({"url": "/", "policy": {"mode": "block", "exclusions": [{"rule": "x"}]}}),
            "policy.exclusions[0].rule",
        ),
        (
            json!({"url": "/", "policy": {"mode": "block", "paranoia": 9}}),
            "policy.paranoia",
        ),
        (json!({"url": "/", "sent": true}), "sent"),
        (json!({"url": "/", "body": "x".repeat(70_000)}), "body"),
    ] {
        let r = api.call("POST", "/v1/waf/test", Some(&body));
        assert_eq!(
            (r.status, &r.json["error"]["field"]),
            (400, &json!(field)),
            "{body}: {r:?}"
        );
    }
    // Nothing was sent through the edge: the agent inspected nothing meanwhile.
    thread::sleep(Duration::from_millis(1200));
    assert_eq!(inspected(&waf_once(&api, "counted", &|_| true)), before);
}
