//! An edge delivering the demo app (exec generations stopped on drop), and a long stream read
//! through it.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use hapctl::process::start_time;
use hapctl::prove::http::{AnswerLimits, Cause, Conn};

use crate::edge::collect_files;
use crate::{demo_app_bin, free_port, Edge};

/// A long chunked stream read through the edge, line by line, in a thread.
pub struct Stream {
    handle: thread::JoinHandle<Result<Vec<String>, String>>,
}

impl Stream {
    /// Opens `/stream?lines=N&interval_ms=M` on `host` and waits for its first line.
    pub fn open(port: u16, host: &str, lines: u32, interval_ms: u32) -> Stream {
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let host = host.to_string();
        let handle = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            write!(s, "GET /stream?lines={lines}&interval_ms={interval_ms} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
            let mut conn = Conn::new(s, Duration::from_secs(10), AnswerLimits::PROBE);
            conn.read_head()
                .map_err(|e| format!("after 0 lines: {e}"))?;
            let mut data = Vec::new();
            let mut got: Vec<String> = Vec::new();
            loop {
                match conn.next_chunk() {
                    Ok(Some(chunk)) => data.extend_from_slice(&chunk),
                    Ok(None) => return Ok(got),
                    Err(e) if e.cause == Cause::Reset => {
                        return Err(format!(
                            "stream cut after {} lines (no final chunk)",
                            got.len()
                        ))
                    }
                    Err(e) => return Err(format!("after {} lines: {e}", got.len())),
                }
                let told = !got.is_empty();
                got = String::from_utf8_lossy(&data)
                    .lines()
                    .map(String::from)
                    .collect();
                if !told && !got.is_empty() {
                    let _ = first_tx.send(got[0].clone());
                }
            }
        });
        first_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the stream's first line");
        Stream { handle }
    }

    /// Waits for the end; returns every line, or why it broke.
    pub fn finish(self) -> Result<Vec<String>, String> {
        self.handle.join().unwrap()
    }
}

/// The app `shop` an edge delivers: demo-app behind an exec runner, backend `applicatif`,
/// server `courante`, routed from `host`. Versions containing `never` never become ready.
#[derive(Debug, Clone)]
pub struct DemoApp<'a> {
    /// The demo-app binary.
    pub bin: PathBuf,
    pub host: &'a str,
    /// The version delivered first.
    pub first: &'a str,
    /// `readiness_timeout`, as the settings write it ("2s").
    pub readiness_timeout: &'a str,
    /// How many ports `port_range` spans past its first.
    pub ports: u16,
    /// The versions that never become ready: a `case` pattern of the run script.
    pub never_ready: &'a str,
}

impl<'a> DemoApp<'a> {
    /// The tests' app: the workspace's demo-app, ready within 2 s, 30 ports.
    pub fn for_tests(host: &'a str, first: &'a str) -> DemoApp<'a> {
        DemoApp {
            bin: demo_app_bin(),
            host,
            first,
            readiness_timeout: "2s",
            ports: 30,
            never_ready: "*never*",
        }
    }

    /// Writes the run script and the `[[app]]` table into `edge`'s state folder (its ports
    /// from a range free now; they are reused once their generation is removed).
    pub fn install(&self, edge: &Edge) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let script = edge.path("run-app.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\ncase \"$1\" in {}) delay=600000;; *) delay=0;; esac\nexec '{}' --version \"$1\" --port \"$2\" --ready-delay-ms $delay\n",
                self.never_ready,
                self.bin.display()
            ),
        )?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        let first_port = free_port().clamp(20_000, 60_000);
        edge.write_settings(&(edge.settings_text() + &self.settings(first_port)));
        Ok(())
    }

    /// The `[[app]]` table, on ports from `first_port`.
    fn settings(&self, first_port: u16) -> String {
        format!(
            "\n[[app]]\nname = \"shop\"\nbackend = \"applicatif\"\nserver = \"courante\"\nreadiness_path = \"/ready\"\nreadiness_timeout = \"{}\"\nversion_path = \"/version\"\nport_range = \"{first_port}-{}\"\nstop_grace = \"2s\"\n[app.runner]\nkind = \"exec\"\ncommand = \"./run-app.sh {{version}} {{port}}\"\n",
            self.readiness_timeout,
            first_port + self.ports
        )
    }
}

/// An edge with [`DemoApp::for_tests`] routed from `host` and `first` delivered. Unlike
/// [`Edge`] alone, dropping it also stops every generation it started.
pub fn demo_app_edge(host: &str, first: &str) -> DemoEdge {
    DemoEdge::try_start(Edge::new(), &DemoApp::for_tests(host, first))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// An [`Edge`] whose exec generations (`generations/<app>/<version>.pid`) are killed on drop,
/// before HAProxy is stopped, also when the test panicked.
pub struct DemoEdge {
    pub edge: Edge,
}

impl std::ops::Deref for DemoEdge {
    type Target = Edge;
    fn deref(&self) -> &Edge {
        &self.edge
    }
}

impl std::ops::DerefMut for DemoEdge {
    fn deref_mut(&mut self) -> &mut Edge {
        &mut self.edge
    }
}

impl DemoEdge {
    /// `edge` (HAProxy not started) with `app`'s settings, then `haproxy start`, `domain add
    /// HOST --app shop`, `deliver FIRST`, and a wait until the edge serves it.
    pub fn try_start(edge: Edge, app: &DemoApp) -> anyhow::Result<DemoEdge> {
        // From here on, drop stops the generations (then the edge stops HAProxy).
        let edge = DemoEdge { edge };
        app.install(&edge)?;
        edge.start()?;
        edge.try_ok(&["domain", "add", app.host, "--app", "shop"])?;
        edge.try_ok(&["deliver", app.first])?;
        edge.try_wait_for_body(app.host, &format!("{}\n", app.first))?;
        Ok(edge)
    }

    /// PIDs of the running generations ([`generation_pids`]).
    pub fn generation_pids(&self) -> Vec<i32> {
        generation_pids(self.state_dir())
    }
}

/// PIDs of the running generations of the edge in `state_dir`, from their pidfiles
/// (`generations/<app>/<version>.pid`: `PID START-TIME`), checked against PID reuse.
pub fn generation_pids(state_dir: &Path) -> Vec<i32> {
    let mut pidfiles = Vec::new();
    collect_files(&state_dir.join("generations"), &mut pidfiles);
    pidfiles
        .iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "pid"))
        .filter_map(|(_, bytes)| {
            let text = String::from_utf8_lossy(bytes);
            let mut parts = text.split_whitespace();
            let pid: i32 = parts.next()?.parse().ok()?;
            let stamp: u64 = parts.next()?.parse().ok()?;
            (pid > 1 && start_time(pid) == Some(stamp)).then_some(pid)
        })
        .collect()
}

/// Kills every exec generation of the edge in `state_dir`. Each leads its own session
/// (setsid): the whole group goes.
pub fn stop_generations(state_dir: &Path) {
    for pid in generation_pids(state_dir) {
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

impl Drop for DemoEdge {
    fn drop(&mut self) {
        stop_generations(self.state_dir());
    }
}

/// Stops the exec generations of these state folders on drop, also when a test panicked
/// (for edges that are not [`DemoEdge`]s, such as a fleet lab's).
pub struct GenerationsGuard(pub Vec<PathBuf>);

impl Drop for GenerationsGuard {
    fn drop(&mut self) {
        for dir in &self.0 {
            stop_generations(dir);
        }
    }
}
