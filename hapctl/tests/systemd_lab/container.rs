//! A booted Debian (12, 13, or 13 with HAProxy 3.4) with systemd as PID 1: a copy of a cached
//! image (`scripts/ensure-systemd-image.sh`) in a temp dir, with this build's `hapctl` and `demo-app`
//! in `/usr/local/bin` and the lab in `/root/lab`, run by `systemd-nspawn -b` with its own
//! network namespace (loopback only, so its port 80 is its own). Commands run inside through
//! `nsenter`. Dropping it kills the container and removes the copy, also when a test panicked.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::{demo_app_bin, describe, run_bounded};

/// Where the lab lives inside the container (a copy of `examples/lab`).
pub const LAB: &str = "/root/lab";

/// A command inside that outlives this bound is a failure.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);
/// Generous bounds on the container's own steps (measured: well under a few seconds each).
const BOOT_TIMEOUT: Duration = Duration::from_secs(90);
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(90);

pub struct Container {
    /// `root/` is the container's tree; `console-N.log` the console of boot N.
    dir: tempfile::TempDir,
    name: String,
    nspawn: Option<Child>,
    /// The container's PID 1 as the host sees it.
    leader: i32,
    boots: u32,
    image: Image,
}

/// The images `scripts/ensure-systemd-image.sh` caches.
#[derive(Debug, Clone, Copy)]
pub enum Image {
    /// Debian 12 and its HAProxy 2.6.
    Bookworm,
    /// Debian 13 and its HAProxy 3.0.
    Trixie,
    /// Debian 13 with HAProxy 3.4 from experimental: the delivery lesson's lab.
    TrixieHaproxy34,
}

impl Image {
    /// Its folder: the script's variable for it, else the script's default.
    fn dir(self) -> PathBuf {
        let (var, default) = match self {
            Image::Bookworm => ("HAPCTL_SYSTEMD_IMAGE", "bookworm-systemd"),
            Image::Trixie => ("HAPCTL_SYSTEMD_IMAGE_TRIXIE", "trixie-systemd"),
            Image::TrixieHaproxy34 => (
                "HAPCTL_SYSTEMD_IMAGE_TRIXIE_HAPROXY34",
                "trixie-haproxy34-systemd",
            ),
        };
        let image = std::env::var_os(var).map_or_else(
            || {
                let cache = std::env::var_os("HAPCTL_TEST_CACHE")
                    .unwrap_or_else(|| "/var/cache/hapctl-tests".into());
                Path::new(&cache).join(default)
            },
            PathBuf::from,
        );
        assert!(
            image.join(".hapctl-image").is_file(),
            "the systemd test image {} is missing: run ./scripts/ensure-systemd-image.sh \
             (scripts/test.sh does)",
            image.display()
        );
        image
    }

    /// The start of the version its stock `haproxy -v` prints.
    fn haproxy_series(self) -> &'static str {
        match self {
            Image::Bookworm => "2.6.",
            Image::Trixie => "3.0.",
            Image::TrixieHaproxy34 => "3.4.",
        }
    }
}

fn copy_file(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), to.display()));
}

impl Container {
    /// A fresh copy of the image with this build's `hapctl` and `demo-app`; not booted yet.
    pub fn new(image: Image) -> Container {
        let c = Container::without_hapctl(image);
        copy_file(
            Path::new(env!("CARGO_BIN_EXE_hapctl")),
            &c.root().join("usr/local/bin/hapctl"),
        );
        c
    }

    /// The same with `demo-app` only (hapctl comes from its Debian package).
    pub fn without_hapctl(image: Image) -> Container {
        let dir = tempfile::Builder::new()
            .prefix("hapctl-systemd-")
            .tempdir()
            .unwrap();
        let root = dir.path().join("root");
        let mut cp = Command::new("cp");
        cp.args(["-a", "--reflink=auto"])
            .arg(image.dir())
            .arg(&root);
        let out = run_bounded(cp, Duration::from_secs(120));
        assert!(
            out.status.success(),
            "copying the image: {}",
            describe(&out)
        );
        copy_file(&demo_app_bin(), &root.join("usr/local/bin/demo-app"));
        let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
        let mut cp = Command::new("cp");
        cp.arg("-a")
            .arg(&lab)
            .arg(root.join(LAB.trim_start_matches('/')));
        let out = run_bounded(cp, Duration::from_secs(30));
        assert!(out.status.success(), "copying the lab: {}", describe(&out));
        // The machine name must be unique: nspawn keeps per-machine state under /run.
        let name = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        Container {
            dir,
            name,
            nspawn: None,
            leader: 0,
            boots: 0,
            image,
        }
    }

    /// The container's tree as the host sees it.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Boots it and waits until systemd says the boot finished (`running`); returns how long
    /// that took.
    pub fn boot(&mut self) -> Duration {
        assert!(self.nspawn.is_none(), "the container is already running");
        self.boots += 1;
        let console = File::create(self.console_log()).unwrap();
        let started = Instant::now();
        let child = Command::new("systemd-nspawn")
            .arg("--directory")
            .arg(self.root())
            .args(["--boot", "--register=no", "--keep-unit", "--private-network"])
            .args(["--console=read-only", "--quiet", "--setenv=SYSTEMD_COLORS=0"])
            .arg(format!("--machine={}", self.name))
            .stdin(Stdio::null())
            .stdout(console.try_clone().unwrap())
            .stderr(console)
            .spawn()
            .expect("cannot run systemd-nspawn: is systemd-container installed (scripts/ensure-systemd-image.sh)?");
        let nspawn_pid = child.id() as i32;
        self.nspawn = Some(child);
        self.leader = 0;
        let deadline = started + BOOT_TIMEOUT;
        // PID 1 of the container is nspawn's child once it runs systemd.
        while self.leader == 0 {
            self.assert_nspawn_runs("booting");
            let children =
                std::fs::read_to_string(format!("/proc/{nspawn_pid}/task/{nspawn_pid}/children"))
                    .unwrap_or_default();
            self.leader = children
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .find(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "systemd")
                })
                .unwrap_or(0);
            assert!(Instant::now() < deadline, "{}", self.why("no systemd"));
            thread::sleep(Duration::from_millis(20));
        }
        // Until systemd has set itself up, systemctl cannot reach it: ask again.
        loop {
            let out = self.run("systemctl is-system-running --wait", BOOT_TIMEOUT);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            match state.as_str() {
                "running" => break,
                "degraded" => panic!(
                    "{}",
                    self.why(&format!(
                        "the boot is degraded:\n{}",
                        self.sh("systemctl --failed --no-pager; journalctl -b -p warning --no-pager | tail -40")
                    ))
                ),
                _ => {}
            }
            self.assert_nspawn_runs("booting");
            assert!(
                Instant::now() < deadline,
                "{}",
                self.why(&format!("the boot did not finish: {}", describe(&out)))
            );
            thread::sleep(Duration::from_millis(50));
        }
        started.elapsed()
    }

    /// Asserts that the image's HAProxy is the one it stands for; returns its version line.
    pub fn haproxy_version(&self) -> String {
        let line = self.sh("haproxy -v | sed -n 1p").trim().to_string();
        let series = self.image.haproxy_series();
        assert!(
            line.contains(&format!("version {series}")),
            "{:?} runs `{line}`, not HAProxy {series}x: rebuild it (scripts/ensure-systemd-image.sh)",
            self.image
        );
        line
    }

    /// `systemctl poweroff` inside, then waits for the container to end; returns how long that
    /// took.
    pub fn poweroff(&mut self) -> Duration {
        let started = Instant::now();
        // The command may lose its connection to systemd as it goes down: judge by the end.
        let _ = self.run("systemctl poweroff", Duration::from_secs(30));
        let child = self.nspawn.as_mut().expect("the container is not running");
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < POWEROFF_TIMEOUT,
                "{}",
                self.why("the power-off did not end")
            );
            thread::sleep(Duration::from_millis(20));
        };
        self.nspawn = None;
        self.leader = 0;
        assert!(
            status.success(),
            "{}",
            self.why(&format!(
                "systemd-nspawn ended with {status} after power-off"
            ))
        );
        started.elapsed()
    }

    /// Runs `script` with `/bin/sh` inside the container (in the lab's directory, as root),
    /// bounded by `timeout`.
    pub fn run(&self, script: &str, timeout: Duration) -> Output {
        assert!(self.leader > 0, "the container is not running");
        run_bounded(self.command(script), timeout)
    }

    /// A command that runs `script` inside the container (spawn it for a background job).
    pub fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--target={}", self.leader))
            .args(["--all", "--root", "--wd", "--", "/bin/sh", "-c"])
            .arg(format!("cd {LAB} && {script}"))
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `script` inside and asserts exit 0; returns its stdout.
    pub fn sh(&self, script: &str) -> String {
        let out = self.run(script, COMMAND_TIMEOUT);
        assert!(
            out.status.success(),
            "{}",
            self.why(&format!("`{script}` failed: {}", describe(&out)))
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `script` inside and asserts its exit code; returns stdout + stderr.
    pub fn expect_code(&self, code: i32, script: &str) -> String {
        let out = self.run(script, COMMAND_TIMEOUT);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            self.why(&format!("`{script}`: {}", describe(&out)))
        );
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// A file of the container, read from the host.
    pub fn read(&self, path: &str) -> String {
        let p = self.root().join(path.trim_start_matches('/'));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
    }

    fn console_log(&self) -> PathBuf {
        self.dir.path().join(format!("console-{}.log", self.boots))
    }

    fn assert_nspawn_runs(&mut self, doing: &str) {
        let child = self.nspawn.as_mut().unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            self.nspawn = None;
            panic!(
                "{}",
                self.why(&format!("systemd-nspawn ended ({status}) while {doing}"))
            );
        }
    }

    /// `what`, with the end of the console for context.
    fn why(&self, what: &str) -> String {
        let console = std::fs::read_to_string(self.console_log()).unwrap_or_default();
        let lines: Vec<&str> = console.lines().collect();
        format!(
            "{what}\n--- container console (last lines)\n{}",
            lines[lines.len().saturating_sub(25)..].join("\n")
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut child) = self.nspawn.take() {
            if child.try_wait().ok().flatten().is_none() {
                // Killing PID 1 ends every process of the container's PID namespace.
                if self.leader > 0 {
                    unsafe { libc::kill(self.leader, libc::SIGKILL) };
                }
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        // nspawn leaves this (empty) directory behind when /run is not a tmpfs.
        let _ = std::fs::remove_dir(format!("/run/systemd/nspawn/propagate/{}", self.name));
        // The temp dir (the whole tree) goes with `self.dir`.
    }
}
