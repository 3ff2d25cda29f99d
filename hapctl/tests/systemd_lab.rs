//! The lab on a real systemd: a booted Debian container (systemd as PID 1, the stock
//! `haproxy` package and its unit: Debian 12's 2.6, Debian 13's 3.0, and Debian 13 with 3.4,
//! the version the delivery lesson ran), where `examples/lab/README.md` is followed as written —
//! its shell blocks are run as they are — and every cutover is measured by `hapctl prove`;
//! real template units for the generations, real power-offs and boots, and a master killed
//! under a probe. The image is built once by `scripts/ensure-systemd-image.sh`.

// The container harness (a crate root finds its modules next to it, hence the path).
#[path = "systemd_lab/container.rs"]
mod container;
#[path = "systemd_lab/package.rs"]
mod package;
#[path = "systemd_lab/probe.rs"]
mod probe;
#[path = "systemd_lab/waf.rs"]
mod waf;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use container::{Container, Image};
use probe::Probe;

/// The shell blocks (```sh) of the README section `## {title}`, joined.
fn readme_section(title: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/lab/README.md");
    let text = std::fs::read_to_string(path).unwrap();
    let heading = format!("## {title}\n");
    let start = text
        .find(&heading)
        .unwrap_or_else(|| panic!("examples/lab/README.md has no section {heading:?}"));
    let section = &text[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut script = String::new();
    let mut rest = section;
    while let Some(open) = rest.find("```sh\n") {
        let body = &rest[open + 6..];
        let close = body.find("```").expect("an unclosed shell block");
        script.push_str(&body[..close]);
        rest = &body[close + 3..];
    }
    assert!(
        !script.is_empty(),
        "section {title:?} of the README has no sh block"
    );
    script
}

/// The lab's settings (`examples/lab/hapctl.toml`).
fn lab_settings() -> toml::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/lab/hapctl.toml");
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A booted container where the README's "The application" and "Set up" sections ran as
/// written: the lab serves 1.4.2. Returns it with the line that exports the state directory
/// (every later command of the README runs in that shell).
fn lab_set_up(image: Image) -> (Container, String) {
    let mut c = Container::new(image);
    let boot = c.boot();
    println!(
        "systemd-lab: boot {:.2} s, {}",
        boot.as_secs_f64(),
        c.haproxy_version()
    );
    let app = readme_section("The application");
    let set_up = readme_section("Set up");
    let export = set_up
        .lines()
        .find(|l| l.starts_with("export HAPCTL_STATE_DIR="))
        .expect("the Set up section exports HAPCTL_STATE_DIR")
        .to_string();
    c.sh(&format!("set -e\n{app}"));
    let started = Instant::now();
    let out = c.sh(&format!("set -e\n{set_up}"));
    println!(
        "systemd-lab: Set up {:.2} s\n{out}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(served(&c, LAB_HOST), "1.4.2");
    (c, export)
}

/// Any name: the lab serves its one application whatever the Host header says.
const LAB_HOST: &str = "pub-maj.example";

/// What a short request for `host` to the edge (port 80 inside) gets, trimmed; `-` when
/// nothing answers.
fn served(c: &Container, host: &str) -> String {
    let out = c.run(
        &format!("curl -sS -m 2 -H 'Host: {host}' http://127.0.0.1/"),
        Duration::from_secs(10),
    );
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        "-".into()
    }
}

/// The master HAProxy's PID, as systemd knows it (`MainPID` of the stock unit).
fn master_pid(c: &Container) -> i32 {
    c.sh("systemctl show -p MainPID --value haproxy.service")
        .trim()
        .parse()
        .unwrap()
}

/// The version `generation.cfg` designates: its `server courante` line's port, looked up in
/// the lab's `ports`.
fn designated(c: &Container) -> String {
    let settings = lab_settings();
    let app = &settings["app"][0];
    let server = app["server"].as_str().unwrap();
    let cfg = c.read(settings["paths"]["generation"].as_str().unwrap());
    let port: i64 = cfg
        .lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix(&format!("server {server} "))?;
            rest.split_whitespace()
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no `server {server}` line in generation.cfg:\n{cfg}"));
    let ports: BTreeMap<String, i64> = app["ports"]
        .as_table()
        .unwrap()
        .iter()
        .map(|(v, p)| (v.clone(), p.as_integer().unwrap()))
        .collect();
    ports
        .into_iter()
        .find(|(_, p)| *p == port)
        .unwrap_or_else(|| panic!("port {port} of generation.cfg is no version's"))
        .0
}

/// Waits until the edge serves `version` (deadline 60 s); returns how long that took.
fn wait_served(c: &Container, host: &str, version: &str) -> Duration {
    let started = Instant::now();
    loop {
        let got = served(c, host);
        if got == version {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the edge still serves {got:?}, not {version}:\n{}",
            c.sh(
                "systemctl --no-pager status haproxy.service 'pub-maj-app@*' 2>&1 | tail -40; true"
            )
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `hapctl prove --expect-version VERSION -- COMMAND` inside (as the README shows it):
/// every check passes, 0 failed short requests; prints its numbers.
fn prove(c: &Container, export: &str, version: &str, command: &str) -> Value {
    let out = c.run(
        // Streams of 15 s: a delivery on a loaded 2-core machine has taken 4.8 s, and prove
        // (rightly) fails a stream that ends before the command does.
        &format!("{export}\nhapctl prove --json - --stream-lines 150 --expect-version {version} -- {command}"),
        Duration::from_secs(180),
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "prove of `{command}` gave no JSON ({e}): {}",
            testkit::describe(&out)
        )
    });
    let proof = &report["proofs"][0];
    let checks: Vec<String> = proof["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{} {}: {}", c["name"], c["status"], c["measured"]))
        .collect();
    let probe = &proof["probe"];
    println!(
        "systemd-lab: prove `{command}`: {} in {:.0} ms (command {:.0} ms), probe {} requests / {} failed, p99 {:.1} ms, master {} -> {}",
        if report["passed"] == true { "passed" } else { "FAILED" },
        proof["duration_ms"].as_f64().unwrap_or(0.0),
        proof["run"]["duration_ms"].as_f64().unwrap_or(0.0),
        probe["requests"],
        probe["failed"],
        probe["latency_ms"]["p99"].as_f64().unwrap_or(0.0),
        proof["before"]["processes"]["master_pid"],
        proof["after"]["processes"]["master_pid"],
    );
    assert!(
        report["passed"] == true && out.status.success(),
        "prove of `{command}` failed:\n{}\n{}\n--- stderr\n{}",
        checks.join("\n"),
        proof["run"]["stdout"].as_str().unwrap_or(""),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(probe["failed"], 0, "{}", checks.join("\n"));
    report
}

/// The README's "Use" block has this command (the test runs only what the lab documents).
fn documented(command: &str) -> &str {
    let block = readme_section("Use");
    assert!(
        block
            .lines()
            .any(|l| l.split('#').next().unwrap().trim() == command),
        "the README's Use section no longer shows `{command}`:\n{block}"
    );
    command
}

#[test]
fn the_lab_readme_works_literally_on_a_real_systemd() {
    lab_readme(Image::Bookworm);
}

#[test]
fn the_lab_readme_works_on_debian_13() {
    lab_readme(Image::Trixie);
}

/// As the lesson ran it: Debian 13 with HAProxy 3.4 (whose unit also loads an empty
/// `/etc/haproxy/conf.d`).
#[test]
fn the_lab_readme_works_on_debian_13_with_haproxy_3_4() {
    lab_readme(Image::TrixieHaproxy34);
}

/// The README's cycle: deliveries, a return, one that never gets ready, a reboot, again.
fn lab_readme(image: Image) {
    let (mut c, export) = lab_set_up(image);
    let master = master_pid(&c);

    prove(&c, &export, "1.5.0", documented("./livrer 1.5.0"));
    prove(&c, &export, "1.4.2", documented("./revenir"));
    prove(&c, &export, "1.6.0", documented("./livrer 1.6.0"));
    assert_eq!(designated(&c), "1.6.0");

    // A version that never gets ready: exit 8, nothing changed, its unit not left behind.
    let generation_cfg = c.read("/etc/haproxy/service.d/generation.cfg");
    let started = Instant::now();
    let out = c.expect_code(8, &format!("{export}\n{}", documented("./livrer 1.7.0")));
    println!(
        "systemd-lab: never-ready delivery refused in {:.1} s:\n{out}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        c.read("/etc/haproxy/service.d/generation.cfg"),
        generation_cfg
    );
    assert_eq!(served(&c, LAB_HOST), "1.6.0");
    let unit = c.run(
        "systemctl is-active pub-maj-app@1.7.0.service; systemctl is-enabled pub-maj-app@1.7.0.service",
        Duration::from_secs(10),
    );
    assert_eq!(
        String::from_utf8_lossy(&unit.stdout),
        "inactive\ndisabled\n",
        "the never-ready generation's unit was left behind"
    );
    assert_eq!(master_pid(&c), master, "a delivery replaced the master");
    let generations = c.sh(&format!("{export}\n{}", documented("hapctl generations")));
    println!("systemd-lab: {generations}");

    // A real power-off and boot: systemd starts HAProxy and the generation enabled at boot;
    // nobody runs anything.
    reboot_serves_what_generation_cfg_designates(&mut c, &export, "1.6.0");

    // The cycle again, on the new master.
    let master = master_pid(&c);
    prove(&c, &export, "1.5.0", "./livrer 1.5.0");
    prove(&c, &export, "1.6.0", "./revenir");
    assert_eq!(master_pid(&c), master, "a delivery replaced the master");
    reboot_serves_what_generation_cfg_designates(&mut c, &export, "1.6.0");
}

/// Powers off and boots again; without any command, the edge serves what `generation.cfg`
/// designates (`expected`), and only that generation runs. Then the README's `hapctl boot`
/// confirms it and changes nothing.
fn reboot_serves_what_generation_cfg_designates(c: &mut Container, export: &str, expected: &str) {
    assert_eq!(designated(c), expected);
    let down = c.poweroff();
    let boot = c.boot();
    let serving = wait_served(c, LAB_HOST, expected);
    println!(
        "systemd-lab: power-off {:.2} s, boot {:.2} s, {expected} served {:.2} s after the boot",
        down.as_secs_f64(),
        boot.as_secs_f64(),
        serving.as_secs_f64()
    );
    let running = || {
        c.sh("systemctl list-units --no-legend --plain --state=running 'pub-maj-app@*' | cut -d' ' -f1")
    };
    assert_eq!(running().trim(), format!("pub-maj-app@{expected}.service"));
    let master = master_pid(c);
    let out = c.sh(&format!("{export}\n{}", documented("hapctl boot")));
    println!("systemd-lab: hapctl boot after the boot:\n{out}");
    assert_eq!(master_pid(c), master, "hapctl boot replaced the master");
    assert_eq!(running().trim(), format!("pub-maj-app@{expected}.service"));
    assert_eq!(served(c, LAB_HOST), expected);
}

#[test]
fn a_killed_master_is_restarted_by_the_stock_unit() {
    let (c, _export) = lab_set_up(Image::Bookworm);
    kill_master_under_probe(&c, LAB_HOST, "1.4.2", "stock unit Restart=always");
}

/// `kill -9` of the master while a probe asks `host` for `body`: systemd brings HAProxy back
/// and the probe's last requests succeed, none failed before the kill; prints the seconds
/// without service. Returns the new master's PID.
fn kill_master_under_probe(c: &Container, host: &str, body: &str, setting: &str) -> i32 {
    let old = master_pid(c);
    let probe = Probe::start(c, host, body);
    let killed_at: f64 = c
        .sh(&format!("date +%s.%N; kill -9 {old}"))
        .trim()
        .parse()
        .unwrap();
    let new = wait_new_master(c, old, host, body);
    std::thread::sleep(Duration::from_secs(1));
    let log = probe.stop(c);
    println!(
        "systemd-lab: kill -9 of the master (systemd mode, {setting}): {:.2} s without service, probe {}; master {old} -> {new}",
        log.seconds_without_service(killed_at),
        log.summary()
    );
    assert!(
        log.samples.last().is_some_and(|s| s.1),
        "the probe's last request failed: {:?}",
        log.failures
    );
    assert!(
        log.samples.iter().all(|s| s.1 || s.0 >= killed_at - 0.5),
        "requests failed before the kill: {:?}",
        log.failures
    );
    assert_eq!(c.sh("systemctl is-active haproxy.service").trim(), "active");
    new
}

/// Waits (60 s at most) until systemd runs a master other than `old` and the edge serves
/// `version` again; returns the new master's PID.
fn wait_new_master(c: &Container, old: i32, host: &str, version: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pid = master_pid(c);
        if pid != 0 && pid != old && served(c, host) == version {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "HAProxy did not come back after kill -9 of its master:\n{}",
            c.sh("systemctl --no-pager status haproxy.service 2>&1 | tail -30; true")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
