//! The Debian package on a stock Debian 12 or 13 whose distribution HAProxy serves a site: install,
//! adoption, a master killed while `hapctl.service` runs, upgrade and removal, each under a
//! probe of that site (`docs/production.md`, followed step by step).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::container::{Container, Image};
use super::probe::Probe;
use super::{kill_master_under_probe, master_pid, served, wait_served};

pub(super) const SITE: &str = "shop.example";
/// What the site's backend (a demo-app) answers on `/`.
const SITE_BODY: &str = "shop-1";

/// The newest `target/debian/hapctl_*.deb` (scripts/build-deb.sh).
fn package() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_hapctl"))
        .parent()
        .and_then(|p| p.parent())
        .unwrap()
        .join("debian");
    std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("hapctl_") && name.ends_with(".deb")
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| {
            panic!(
                "no hapctl_*.deb in {}: run ./scripts/build-deb.sh",
                dir.display()
            )
        })
}

/// Runs `step` under a probe of the site: not one request may fail; prints the numbers.
fn under_probe(c: &Container, what: &str, step: impl FnOnce()) {
    let probe = Probe::start(c, SITE, SITE_BODY);
    let started = Instant::now();
    step();
    let took = started.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let log = probe.stop(c);
    println!(
        "systemd-lab: package {what}: {:.2} s, probe {}",
        took.as_secs_f64(),
        log.summary()
    );
    assert!(
        log.failures.is_empty(),
        "{what}: requests failed: {:?}",
        log.failures
    );
}

/// A booted stock Debian whose HAProxy serves the site, with the package installed (nothing
/// of HAProxy's changed), then adopted and `hapctl.service` running (production.md).
pub(super) fn install_and_adopt(image: Image) -> Container {
    let deb = package();
    let deb_name = deb.file_name().unwrap().to_string_lossy().into_owned();
    let mut c = Container::without_hapctl(image);
    std::fs::copy(&deb, c.root().join("root").join(&deb_name)).unwrap();
    c.boot();
    println!("systemd-lab: {}", c.haproxy_version());

    // The stock HAProxy serves a site before hapctl comes: a frontend added to the stock
    // haproxy.cfg, its backend a demo-app unit.
    c.sh(
        "systemd-run --unit=shop-app /usr/local/bin/demo-app --version shop-1 --port 18300 && \
         printf '\\nfrontend site\\n\\tbind :80\\n\\tdefault_backend shop\\n\\nbackend shop\\n\\tserver app 127.0.0.1:18300\\n' >> /etc/haproxy/haproxy.cfg && \
         systemctl reload haproxy.service",
    );
    wait_served(&c, SITE, SITE_BODY);
    let master = master_pid(&c);
    let stock_cfg = c.read("/etc/haproxy/haproxy.cfg");

    // Install: nothing HAProxy reads or runs changes.
    under_probe(&c, "install", || {
        let out = c.sh(&format!(
            "cd /root && DEBIAN_FRONTEND=noninteractive apt install -y ./{deb_name} 2>&1"
        ));
        println!("systemd-lab: {out}");
    });
    assert_eq!(c.read("/etc/haproxy/haproxy.cfg"), stock_cfg);
    assert_eq!(master_pid(&c), master, "the install replaced the master");
    assert_eq!(c.sh("stat -c %a /var/lib/hapctl").trim(), "700");
    assert!(c.root().join("var/lib/hapctl/hapctl.toml").is_file());
    assert_eq!(
        String::from_utf8_lossy(
            &c.run(
                "systemctl is-enabled hapctl.service; systemctl is-active hapctl.service",
                Duration::from_secs(10)
            )
            .stdout
        ),
        "disabled\ninactive\n"
    );

    // Adoption (production.md, section 5): the desired state first holds the site — its first
    // apply is the adoption, one checked reload of the stock master — then adopt and the daemon.
    under_probe(&c, "adoption", || {
        for step in [
            format!("hapctl domain add {SITE} --server 127.0.0.1:18300"),
            "hapctl haproxy adopt --dry-run".into(),
            "hapctl haproxy adopt".into(),
            "systemctl enable --now hapctl.service".into(),
        ] {
            let out = c.sh(&format!("{step} 2>&1"));
            println!("systemd-lab: {step}:\n{out}");
        }
    });
    assert_eq!(master_pid(&c), master, "the adoption replaced the master");
    assert_ne!(c.read("/etc/haproxy/haproxy.cfg"), stock_cfg);
    wait_healthy(&c);
    // The access log as in production: the workers (user haproxy) send it over loopback TCP
    // to the daemon (root, port 601), which admits their user and writes it.
    c.sh(&format!(
        "curl -s -o /dev/null -m 2 -H 'Host: {SITE}' http://127.0.0.1/logged-in-the-lab"
    ));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !c
        .sh("cat /var/lib/hapctl/logs/access.log 2>/dev/null; true")
        .contains("/logged-in-the-lab")
    {
        assert!(
            Instant::now() < deadline,
            "no access-log line from the stock unit's workers:\n{}",
            c.sh("journalctl -u hapctl.service --no-pager | tail -20; true")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The package's sysctl drop-in, and status reporting what the kernel has (a container's
    // /proc/sys may refuse the package's write: then status says "off").
    assert!(c.root().join("usr/lib/sysctl.d/60-hapctl.conf").is_file());
    let kernel = c.sh("cat /proc/sys/net/ipv4/tcp_migrate_req");
    let status: serde_json::Value = serde_json::from_str(&c.sh("hapctl status --json")).unwrap();
    let want = if kernel.trim() == "1" { "on" } else { "off" };
    assert_eq!(status["tcp_migrate_req"], want, "{status}");
    c
}

#[test]
fn the_package_installs_adopts_upgrades_and_is_removed_under_a_probe() {
    package_life(Image::Bookworm);
}

#[test]
fn the_package_installs_adopts_upgrades_and_is_removed_on_debian_13() {
    package_life(Image::Trixie);
}

fn package_life(image: Image) {
    let c = install_and_adopt(image);
    let deb_name = package()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    // A block, then the master killed while the daemon runs: the unit's Restart= brings it
    // back, the daemon notices, reconciles and counts it, and the block is still enforced.
    c.sh("hapctl block add 127.0.0.9");
    assert_eq!(blocked_client_status(&c), "403");
    let new = kill_master_under_probe(&c, SITE, SITE_BODY, "hapctl.service running");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !metrics(&c).contains("\nhapctl_haproxy_restarts_total 1\n") {
        assert!(
            Instant::now() < deadline,
            "the daemon did not count the unit's restart:\n{}",
            metrics(&c)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let history = c.sh("hapctl status 2>&1");
    assert!(
        history.contains("restarted by its systemd unit"),
        "no restart in the history:\n{history}"
    );
    assert_eq!(blocked_client_status(&c), "403");
    wait_healthy(&c);

    // Upgrade: the same package with a bumped version (repacked inside with dpkg-deb). The
    // settings and the token stay byte for byte; the databases keep their domains and blocks
    // (the restarted daemon may add history rows).
    let kept = || c.sh("sha256sum /var/lib/hapctl/hapctl.toml /var/lib/hapctl/api-token");
    let before = kept();
    let domains = c.sh("hapctl domain ls");
    let blocks = c.sh("hapctl block ls");
    let daemon = c.sh("systemctl show -p MainPID --value hapctl.service");
    c.sh(&format!(
        "cd /root && dpkg-deb -R {deb_name} up && \
         sed -i 's/^Version: .*/&+up1/' up/DEBIAN/control && dpkg-deb -b up up.deb >/dev/null"
    ));
    under_probe(&c, "upgrade", || {
        let out = c.sh("cd /root && DEBIAN_FRONTEND=noninteractive apt install -y ./up.deb 2>&1");
        println!("systemd-lab: {out}");
    });
    // The upgrade restarted the running daemon.
    assert_stopped_on_sigterm(&c, "upgrade");
    let version = c.sh("dpkg-query -W -f '${Version}' hapctl");
    assert!(version.ends_with("+up1"), "installed: {version}");
    assert_eq!(kept(), before);
    assert_eq!(c.sh("hapctl block ls"), blocks);
    assert_eq!(c.sh("hapctl domain ls"), domains);
    assert_eq!(c.sh("systemctl is-active hapctl.service").trim(), "active");
    assert_ne!(
        c.sh("systemctl show -p MainPID --value hapctl.service"),
        daemon,
        "the upgrade did not restart the running daemon"
    );
    assert_eq!(master_pid(&c), new, "the upgrade replaced the master");
    assert_eq!(blocked_client_status(&c), "403");

    // Remove: the daemon stops, HAProxy keeps serving, the state stays.
    under_probe(&c, "remove", || {
        let out = c.sh("DEBIAN_FRONTEND=noninteractive apt remove -y hapctl 2>&1");
        println!("systemd-lab: {out}");
    });
    assert_stopped_on_sigterm(&c, "remove");
    assert!(!c.root().join("usr/bin/hapctl").exists());
    assert_eq!(
        c.run(
            "systemctl is-active hapctl.service",
            Duration::from_secs(10)
        )
        .stdout,
        b"inactive\n"
    );
    for f in ["hapctl.toml", "api-token", "state.db", "blocks.db"] {
        assert!(
            c.root().join("var/lib/hapctl").join(f).is_file(),
            "apt remove deleted /var/lib/hapctl/{f}"
        );
    }
    assert_eq!(
        kept(),
        before,
        "apt remove changed the settings or the token"
    );
    assert_eq!(master_pid(&c), new, "the removal replaced the master");
    assert_eq!(served(&c, SITE), SITE_BODY);
}

/// Every stop of hapctl.service so far ended on its SIGTERM (while the site is busy too), none
/// by systemd's kill after TimeoutStopSec; prints how long each took.
fn assert_stopped_on_sigterm(c: &Container, during: &str) {
    let stops = c.sh(
        "journalctl -u hapctl.service --no-pager -o short-unix | grep -E 'Stopping|Deactivated|timed out|Killing' || true",
    );
    let mut began = None;
    let mut took = Vec::new();
    for line in stops.lines() {
        let t: f64 = line.split(' ').next().unwrap().parse().unwrap();
        if line.contains("Stopping") {
            began = Some(t);
        } else if let (Some(b), true) = (began, line.contains("Deactivated")) {
            took.push(format!("{:.2} s", t - b));
            began = None;
        }
    }
    println!("systemd-lab: hapctl.service stops up to the {during}: {took:?}");
    assert!(
        !stops.contains("timed out"),
        "hapctl.service did not stop on SIGTERM by the {during}; systemd killed it:\n{stops}"
    );
}

/// The status a client at 127.0.0.9 (blocked) gets from the site.
fn blocked_client_status(c: &Container) -> String {
    c.sh(&format!(
        "curl -s -o /dev/null -m 2 --interface 127.0.0.9 -w '%{{http_code}}' -H 'Host: {SITE}' http://127.0.0.1/"
    ))
}

fn metrics(c: &Container) -> String {
    c.sh("curl -s -m 2 -H \"Authorization: Bearer $(cat /var/lib/hapctl/api-token)\" http://127.0.0.1:9090/metrics")
}

/// Waits (60 s at most) until the daemon's `/health` says healthy.
fn wait_healthy(c: &Container) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let health = c
            .run(
                "curl -s -m 2 http://127.0.0.1:9090/health",
                Duration::from_secs(10),
            )
            .stdout;
        if String::from_utf8_lossy(&health).contains("\"status\":\"healthy\"") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "hapctl.service is not healthy: {}\n{}",
            String::from_utf8_lossy(&health),
            c.sh("systemctl --no-pager status hapctl.service 2>&1 | tail -30; true")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
