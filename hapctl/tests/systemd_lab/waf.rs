//! The WAF agent's own unit (`dist/hapctl-waf.service`) under a real systemd, from the Debian
//! package: with `[waf]` set it inspects requests for the stock HAProxy, a killed agent is
//! started again by `Restart=on-failure`, and the domain's fail mode answers meanwhile.

use std::time::{Duration, Instant};

use super::container::{Container, Image};
use super::package::{install_and_adopt, SITE};

/// An SQL injection the Core Rule Set blocks (942100, libinjection).
const ATTACK: &str = "/?id=1%27%20OR%20%271%27%3D%271";

/// The status HAProxy answers `path` on the site with.
fn status(c: &Container, path: &str) -> String {
    c.sh(&format!(
        "curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 -H 'Host: {SITE}' 'http://127.0.0.1{path}'"
    ))
}

/// Waits until `path` gets `want`.
fn wait_status(c: &Container, path: &str, want: &str, what: &str) -> Duration {
    let started = Instant::now();
    loop {
        let got = status(c, path);
        if got == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: {path} answers {got}, not {want}\n{}",
            c.sh("systemctl status hapctl-waf.service --no-pager 2>&1; tail -20 /var/lib/hapctl/run/waf.json 2>&1")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_waf_unit_inspects_requests_and_is_restarted_when_killed() {
    let c = install_and_adopt(Image::Bookworm);
    // [waf] makes the next apply add the SPOE filter; the agent's unit then serves it.
    c.sh("printf '\\n[waf]\\nlisten = \"127.0.0.1:12345\"\\n' >> /var/lib/hapctl/hapctl.toml");
    let out = c.sh("systemctl enable --now hapctl-waf.service 2>&1 && hapctl apply 2>&1");
    println!("systemd-lab: waf: {out}");
    c.sh(&format!(
        "hapctl waf policy {SITE} --mode block --fail closed 2>&1"
    ));
    let took = wait_status(&c, ATTACK, "403", "the attack through the agent's unit");
    println!(
        "systemd-lab: waf: blocking after {:.2} s",
        took.as_secs_f64()
    );
    assert_eq!(status(&c, "/"), "200", "clean traffic passes");

    // Killed: fail-closed answers 503 until systemd has started the agent again.
    let restarts = || c.sh("systemctl show -p NRestarts --value hapctl-waf.service");
    let before = restarts();
    c.sh("systemctl kill -s SIGKILL hapctl-waf.service");
    let down = wait_status(&c, "/", "503", "fail-closed while the agent is down");
    let back = wait_status(&c, "/", "200", "the agent started again by its unit");
    assert_ne!(restarts(), before, "systemd did not restart the agent");
    assert_eq!(
        status(&c, ATTACK),
        "403",
        "inspected again after the restart"
    );
    println!(
        "systemd-lab: waf: 503 after {:.2} s, served again {:.2} s later",
        down.as_secs_f64(),
        back.as_secs_f64()
    );
}
