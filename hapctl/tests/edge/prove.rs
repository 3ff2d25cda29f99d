//! `hapctl prove` against the real haproxy and real demo-app generations. A check that cannot
//! fail proves nothing: for each check there is a "delivery" that must make it fail, and the
//! real deliveries must pass every check, many times in a row.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;
use testkit::{demo_app_bin, demo_app_edge, describe, free_port, DemoEdge, Edge};

const HOST: &str = "shop.example.com";

/// Short streams and settle, so each proof takes about three seconds. The streams (2.5 s) must
/// outlive the command, also on a loaded machine: a rollback took 2.1 s once in CI, longer
/// than the 1.5 s streams used before.
const STREAM_LINES: u64 = 50;
const FAST: &[&str] = &[
    "--streams",
    "2",
    "--stream-lines",
    "50", // STREAM_LINES
    "--stream-interval-ms",
    "50",
    "--settle",
    "300ms",
];

fn edge_14() -> DemoEdge {
    let mut edge = demo_app_edge(HOST, "1.4.2");
    edge.set_env("HAPCTL", env!("CARGO_BIN_EXE_hapctl"));
    edge
}

/// Runs `hapctl prove ARGS` with `--json`, asserts the exit code, returns the JSON report.
fn prove(edge: &Edge, code: i32, args: &[&str]) -> Value {
    let json = edge.path(&format!("prove-{}.json", free_port()));
    let json_arg = json.display().to_string();
    let mut all = vec!["prove", "--json", &json_arg];
    all.extend_from_slice(args);
    let out = edge.run(&all);
    assert_eq!(
        out.status.code(),
        Some(code),
        "hapctl {all:?}: {}",
        describe(&out)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap())
        .unwrap_or_else(|e| panic!("bad JSON report: {e}; {}", describe(&out)));
    assert_eq!(report["exit_code"], code, "{report:#}");
    report
}

/// The status of check `name` of proof `i`: `pass`, `fail` or `skipped`.
fn check<'a>(report: &'a Value, i: usize, name: &str) -> &'a str {
    report["proofs"][i]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report:#}"))["status"]
        .as_str()
        .unwrap()
}

fn measured<'a>(report: &'a Value, i: usize, name: &str) -> &'a str {
    report["proofs"][i]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()["measured"]
        .as_str()
        .unwrap()
}

/// Asserts each `(check, status)` of proof `i`, showing the whole report when one differs.
fn expect_checks(report: &Value, i: usize, expected: &[(&str, &str)]) {
    for (name, status) in expected {
        assert_eq!(
            check(report, i, name),
            *status,
            "check {name} of proof {i}: {}\n{report:#}",
            measured(report, i, name)
        );
    }
}

/// An executable shell script in the edge's directory.
fn script(edge: &Edge, name: &str, body: &str) -> PathBuf {
    let path = edge.path(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn journal(report: &Value) -> String {
    let path = report["journal"].as_str().expect("a journal path");
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_restart_instead_of_a_reload_fails_the_master_check() {
    let edge = edge_14();
    let restart = script(
        &edge,
        "restart.sh",
        "\"$HAPCTL\" haproxy stop && \"$HAPCTL\" haproxy start",
    );
    let before = edge.master_pid();
    let mut args = FAST.to_vec();
    args.extend(["--", restart.to_str().unwrap()]);
    let report = prove(&edge, 9, &args);
    expect_checks(&report, 0, &[("master", "fail"), ("command", "pass")]);
    let p = &report["proofs"][0];
    assert_eq!(p["before"]["processes"]["master_pid"], before);
    assert_ne!(p["after"]["processes"]["master_pid"], before);
    assert!(
        measured(&report, 0, "master").contains("restarted"),
        "{report:#}"
    );
    // A restart takes the established connections with it.
    assert_eq!(check(&report, 0, "streams"), "fail");
}

#[test]
fn stopping_the_replaced_generation_fails_the_stream_check() {
    let edge = edge_14();
    // A "clean" delivery: deliver, then stop the generation it has just replaced.
    let careless = script(
        &edge,
        "careless.sh",
        "set -e\n\"$HAPCTL\" deliver 1.5.0\npid=$(cut -d' ' -f1 \"$HAPCTL_STATE_DIR/generations/shop/1.4.2.pid\")\nkill -KILL \"-$pid\"",
    );
    let mut args = FAST.to_vec();
    args.extend([
        "--expect-version",
        "1.5.0",
        "--",
        careless.to_str().unwrap(),
    ]);
    let report = prove(&edge, 9, &args);
    expect_checks(
        &report,
        0,
        &[
            ("streams", "fail"),
            ("master", "pass"),
            ("new-worker", "pass"),
            ("probe", "pass"),
            ("version", "pass"),
            ("command", "pass"),
        ],
    );
    for s in report["proofs"][0]["streams"].as_array().unwrap() {
        assert_eq!(s["version"], "1.4.2");
        // Cut before its end: how far it got depends on how long the delivery took.
        assert!(
            s["received"].as_u64().unwrap() < s["announced"].as_u64().unwrap(),
            "{s}"
        );
        assert_eq!(s["final_chunk"], false, "{s}");
    }
}

#[test]
fn a_command_that_switches_nothing_fails_the_version_and_worker_checks() {
    let edge = edge_14();
    let mut args = FAST.to_vec();
    args.extend(["--expect-version", "1.5.0", "--", "true"]);
    let report = prove(&edge, 9, &args);
    expect_checks(
        &report,
        0,
        &[
            ("version", "fail"),
            ("new-worker", "fail"),
            ("master", "pass"),
            ("probe", "pass"),
            ("streams", "pass"),
            ("command", "pass"),
        ],
    );
    assert_eq!(
        report["proofs"][0]["after"]["version_answers"],
        serde_json::json!(["1.4.2", "1.4.2", "1.4.2", "1.4.2", "1.4.2"])
    );
}

#[test]
fn an_edge_down_for_a_second_fails_the_probe_check() {
    let edge = edge_14();
    let gap = script(
        &edge,
        "gap.sh",
        "\"$HAPCTL\" haproxy stop; sleep 1; \"$HAPCTL\" haproxy start",
    );
    let mut args = FAST.to_vec();
    args.extend(["--", gap.to_str().unwrap()]);
    let report = prove(&edge, 9, &args);
    expect_checks(&report, 0, &[("probe", "fail"), ("command", "pass")]);
    let probe = &report["proofs"][0]["probe"];
    // About a second at 50/s without a listener.
    let refused = probe["by_cause"]["refused"].as_u64().unwrap_or(0);
    assert!(refused >= 20, "{probe:#}");
    let failures = report["proofs"][0]["failures"].as_array().unwrap();
    assert!(failures.iter().all(|f| f["phase"] != "before"), "{probe:#}");
    assert!(failures.iter().any(|f| f["cause"] == "refused"));
}

/// Resumes stopped processes when dropped, whatever happened in the test.
struct Resume(Vec<i32>);

impl Drop for Resume {
    fn drop(&mut self) {
        for pid in &self.0 {
            unsafe { libc::kill(*pid, libc::SIGCONT) };
        }
    }
}

#[test]
fn frozen_workers_fail_the_probe_check_alone() {
    let edge = edge_14();
    let workers: Vec<i32> = edge.show_proc().workers.iter().map(|w| w.pid).collect();
    assert!(!workers.is_empty());
    let _resume = Resume(workers.clone());
    let list = workers
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let freeze = script(
        &edge,
        "freeze.sh",
        &format!("trap 'kill -CONT {list}' EXIT\nkill -STOP {list}\nsleep 1"),
    );
    // Longer streams: they must outlive the pause and the command.
    let report = prove(
        &edge,
        9,
        &[
            "--streams",
            "2",
            "--stream-lines",
            "50",
            "--stream-interval-ms",
            "50",
            "--settle",
            "300ms",
            "--request-timeout",
            "400ms",
            "--",
            freeze.to_str().unwrap(),
        ],
    );
    expect_checks(
        &report,
        0,
        &[
            ("probe", "fail"),
            ("master", "pass"),
            ("streams", "pass"),
            ("command", "pass"),
            ("new-worker", "fail"),
        ],
    );
    let probe = &report["proofs"][0]["probe"];
    assert!(
        probe["by_cause"]["timeout"].as_u64().unwrap_or(0) >= 1,
        "{probe:#}"
    );
}

#[test]
fn deliver_and_rollback_pass_every_check_ten_times_in_a_row() {
    let edge = edge_14();
    let started = Instant::now();
    let (mut requests, mut failed, mut streams, mut intact) = (0, 0, 0, 0);
    let mut cutovers = Vec::new();
    let mut master_pids = std::collections::BTreeSet::new();
    for cycle in 1..=10 {
        let mut args = FAST.to_vec();
        args.extend(["--cycle", "1.5.0"]);
        let report = prove(&edge, 0, &args);
        assert_eq!(report["kind"], "cycle");
        assert_eq!(report["passed"], true);
        let proofs = report["proofs"].as_array().unwrap();
        assert_eq!(proofs.len(), 2, "deliver and rollback, cycle {cycle}");
        for (i, expected) in ["1.5.0", "1.4.2"].iter().enumerate() {
            expect_checks(
                &report,
                i,
                &[
                    ("master", "pass"),
                    ("new-worker", "pass"),
                    ("probe", "pass"),
                    ("streams", "pass"),
                    ("version", "pass"),
                    ("command", "pass"),
                ],
            );
            let p = &proofs[i];
            assert_eq!(p["expect_version"], *expected);
            assert_eq!(p["probe"]["failed"], 0, "{p:#}");
            requests += p["probe"]["requests"].as_u64().unwrap();
            failed += p["probe"]["failed"].as_u64().unwrap();
            for s in p["streams"].as_array().unwrap() {
                streams += 1;
                if s["final_chunk"] == true
                    && s["received"] == STREAM_LINES
                    && s["foreign_lines"] == 0
                {
                    intact += 1;
                }
            }
            master_pids.insert(p["before"]["processes"]["master_pid"].as_i64().unwrap());
            master_pids.insert(p["after"]["processes"]["master_pid"].as_i64().unwrap());
            cutovers.push(p["run"]["duration_ms"].as_f64().unwrap());
        }
        if cycle == 1 {
            let text = journal(&report);
            assert!(text.len() > 400, "{text}");
            assert!(text.contains("rollback"), "{text}");
            assert!(text.contains("established connections"), "{text}");
        }
    }
    cutovers.sort_by(f64::total_cmp);
    eprintln!(
        "prove, 10 cycles = {} cutovers in {:.1} s: {requests} probe requests, {failed} failed, \
         {intact}/{streams} streams intact, {} master PID(s), cutover (command) median {:.0} ms, \
         max {:.0} ms",
        cutovers.len(),
        started.elapsed().as_secs_f64(),
        master_pids.len(),
        cutovers[cutovers.len() / 2],
        cutovers[cutovers.len() - 1]
    );
    assert_eq!(failed, 0);
    assert_eq!(intact, streams);
    assert_eq!(master_pids.len(), 1, "the master never changed");
}

#[test]
fn a_single_delivery_is_proven_with_a_journal_that_shows_the_way_back() {
    let edge = edge_14();
    let mut args = FAST.to_vec();
    args.extend(["--expect-version", "1.5.0", "--", "/nonexistent/deliver"]);
    // A command that cannot even start fails the command check; nothing else moved.
    let report = prove(&edge, 9, &args);
    expect_checks(
        &report,
        0,
        &[("command", "fail"), ("master", "pass"), ("probe", "pass")],
    );

    let hapctl = env!("CARGO_BIN_EXE_hapctl");
    let mut args = FAST.to_vec();
    args.extend([
        "--expect-version",
        "1.5.0",
        "--",
        hapctl,
        "deliver",
        "1.5.0",
    ]);
    let report = prove(&edge, 0, &args);
    assert_eq!(report["kind"], "command");
    let p = &report["proofs"][0];
    assert_eq!(p["before"]["version_served"], "1.4.2");
    assert_eq!(p["after"]["version_served"], "1.5.0");
    assert!(p["run"]["stdout"].as_str().unwrap().contains("delivered"));
    // A cutover reloads: until the old worker handles its soft-stop signal it still accepts
    // beside the new one, so on a loaded machine a probe may meet 1.4.2 again for a few ms.
    // What must hold: it goes from 1.4.2, it ends on 1.5.0, and never anywhere else.
    let switches = p["probe"]["switches"].as_array().unwrap();
    assert_eq!(switches[0]["from"], "1.4.2", "{switches:?}");
    assert_eq!(switches.last().unwrap()["to"], "1.5.0", "{switches:?}");
    assert!(
        switches.iter().all(|s| [&s["from"], &s["to"]]
            .iter()
            .all(|v| *v == "1.4.2" || *v == "1.5.0")),
        "{switches:?}"
    );
    let text = journal(&report);
    assert!(text.contains("## What was measured"), "{text}");
    assert!(
        text.contains("### Timeline") && text.contains("reload seen"),
        "{text}"
    );
    assert!(text.contains("first request served by 1.5.0"), "{text}");
    assert!(
        text.contains("### The way back") && text.contains("rollback"),
        "{text}"
    );
    let name = Path::new(report["journal"].as_str().unwrap());
    assert_eq!(name.parent().unwrap(), edge.path("journal"));
    assert!(name
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("prove-20"));
}

#[test]
fn nothing_runs_when_the_edge_cannot_be_measured() {
    let edge = edge_14();
    let marker = edge.path("ran");
    let touch = format!("touch {}", marker.display());
    // A host nobody serves: the edge answers 404, so a cutover cannot be measured.
    let out = edge.run(&[
        "prove",
        "--host",
        "nobody.example.org",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing was run"),
        "{}",
        describe(&out)
    );
    assert!(!marker.exists(), "the command must not run");
    // Bad options are invalid input.
    let out = edge.run(&["prove", "--rate", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let out = edge.run(&["prove", "--path", "no-slash", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    // Held streams must not end on their own before the command could: 50 x 100 ms is short.
    let out = edge.run(&["prove", "--stream-hold", "1s", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("held streams"),
        "{}",
        describe(&out)
    );
}

/// A command slower than the streams: fixed streams (2.5 s) end before it does, and the
/// streams check fails, as it must; held streams, closed by the client 500 ms after the
/// command ended, span it whatever it takes.
#[test]
fn held_streams_span_a_slow_command_that_fixed_streams_do_not() {
    let edge = edge_14();
    let slow = script(
        &edge,
        "slow.sh",
        "set -e\nsleep 3.5\n\"$HAPCTL\" deliver 1.5.0",
    );
    let mut args = FAST.to_vec();
    args.extend(["--expect-version", "1.5.0", "--", slow.to_str().unwrap()]);
    let report = prove(&edge, 9, &args);
    expect_checks(
        &report,
        0,
        &[("streams", "fail"), ("probe", "pass"), ("command", "pass")],
    );
    assert!(
        measured(&report, 0, "streams").contains("did not span the cutover"),
        "{report:#}"
    );

    let slow_back = script(
        &edge,
        "slow-back.sh",
        "set -e\nsleep 3.5\n\"$HAPCTL\" rollback",
    );
    let report = prove(
        &edge,
        0,
        &[
            "--streams",
            "2",
            "--stream-lines",
            "400",
            "--stream-interval-ms",
            "50",
            "--stream-hold",
            "500ms",
            "--timeout",
            "8s",
            "--settle",
            "300ms",
            "--expect-version",
            "1.4.2",
            "--",
            slow_back.to_str().unwrap(),
        ],
    );
    let p = &report["proofs"][0];
    let ended = p["run"]["ended_ms"].as_f64().unwrap();
    for s in p["streams"].as_array().unwrap() {
        assert_eq!(s["version"], "1.5.0", "{s}");
        assert_eq!(s["closed_by_client"], true, "{s}");
        assert_eq!(
            s["final_chunk"], false,
            "closed before its announced end: {s}"
        );
        assert!(s["ended_ms"].as_f64().unwrap() >= ended + 500.0, "{s}");
        // 3.5 s of sleep alone is 70 lines of 50 ms.
        let received = s["received"].as_u64().unwrap();
        assert!((70..400).contains(&received), "{s}");
    }
    assert!(
        measured(&report, 0, "streams").contains("until the client closed it"),
        "{report:#}"
    );
}

/// The lab of the delivery lesson (examples/lab/) in direct mode: its settings with an exec
/// runner instead of systemd, its two wrappers, proven like the lab's validation does.
#[test]
fn the_lab_wrappers_are_proven() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
    let mut edge = DemoEdge { edge: Edge::new() };
    let mut settings: toml::Value =
        toml::from_str(&std::fs::read_to_string(lab.join("hapctl.toml")).unwrap()).unwrap();
    let t = settings.as_table_mut().unwrap();
    t["edge"]["http_bind"] = format!("127.0.0.1:{}", edge.port).into();
    t.remove("paths");
    let haproxy = t["haproxy"].as_table_mut().unwrap();
    haproxy.insert("mode".into(), "direct".into());
    haproxy.remove("binary");
    let app = &mut t["app"][0];
    assert_eq!(app["backend"].as_str(), Some("applicatif"));
    assert_eq!(app["server"].as_str(), Some("courante"));
    assert_eq!(app["readiness_path"].as_str(), Some("/pret"));
    let (p1, p2) = (free_port(), free_port());
    app["ports"] =
        toml::from_str::<toml::Value>(&format!("\"1.4.2\" = {p1}\n\"1.5.0\" = {p2}")).unwrap();
    app["runner"] = toml::from_str::<toml::Value>(&format!(
        "kind = \"exec\"\ncommand = \"{} --version {{version}} --port {{port}} --ready-path /pret\"",
        demo_app_bin().display()
    ))
    .unwrap();
    edge.write_settings(&toml::to_string(&settings).unwrap());
    edge.set_env("HAPCTL", env!("CARGO_BIN_EXE_hapctl"));
    let state_dir = edge.state_dir().display().to_string();
    edge.set_env("HAPCTL_STATE_DIR", &state_dir);
    edge.ok(&["haproxy", "start"]);

    let livrer = lab.join("livrer").display().to_string();
    let revenir = lab.join("revenir").display().to_string();
    let mut first = std::process::Command::new(&livrer);
    first
        .arg("1.4.2")
        .env("HAPCTL", env!("CARGO_BIN_EXE_hapctl"))
        .env("HAPCTL_STATE_DIR", &state_dir)
        .env("HAPCTL_HAPROXY_BIN", testkit::haproxy_bin());
    let start = testkit::run_bounded(first, std::time::Duration::from_secs(60));
    assert!(start.status.success(), "livrer 1.4.2: {}", describe(&start));
    edge.wait_for_body("anything.example", "1.4.2\n");

    let mut args = FAST.to_vec();
    args.extend(["--expect-version", "1.5.0", "--", &livrer, "1.5.0"]);
    let there = prove(&edge, 0, &args);
    let mut args = FAST.to_vec();
    args.extend(["--expect-version", "1.4.2", "--", &revenir]);
    let back = prove(&edge, 0, &args);
    for report in [&there, &back] {
        expect_checks(
            report,
            0,
            &[
                ("master", "pass"),
                ("new-worker", "pass"),
                ("probe", "pass"),
                ("streams", "pass"),
                ("version", "pass"),
                ("command", "pass"),
            ],
        );
        let text = journal(report);
        assert!(text.len() > 400);
        assert!(
            text.contains("stream") && text.contains("rollback"),
            "{text}"
        );
    }
    assert!(journal(&there).contains("revenir"));
    let cfg = std::fs::read_to_string(edge.path("live/generation.cfg")).unwrap();
    assert!(
        cfg.contains("backend applicatif")
            && cfg.contains(&format!("server courante 127.0.0.1:{p1}")),
        "{cfg}"
    );
}
