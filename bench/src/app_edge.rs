//! An edge with one delivered application, as in hapctl's tests (`demo_app_edge`): app `shop`
//! (exec runner: a small `run-app.sh` around the release demo-app, ready delay 0), backend
//! `applicatif`, server `courante`, routed from one host, first version delivered. Dropping it
//! kills every generation it started (their process groups), then the edge stops HAProxy.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::process::pid_alive;

use crate::harness::Edge;

/// The Host routed to the app.
pub const HOST: &str = "shop.example.com";
pub const APP: &str = "shop";

pub struct AppEdge {
    pub edge: Edge,
}

impl std::ops::Deref for AppEdge {
    type Target = Edge;
    fn deref(&self) -> &Edge {
        &self.edge
    }
}

impl AppEdge {
    /// `hapctl init`, the `[[app]]` settings, `haproxy start`, `domain add HOST --app shop`,
    /// `deliver first`, and a wait until the edge serves it.
    pub fn start(
        hapctl: &Path,
        demo_app: &Path,
        label: &str,
        first: &str,
    ) -> anyhow::Result<AppEdge> {
        use std::os::unix::fs::PermissionsExt;
        let mut app = AppEdge {
            edge: Edge::init(hapctl, label)?,
        };
        let script = app.edge.state_dir.join("run-app.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec '{}' --version \"$1\" --port \"$2\" --ready-delay-ms 0\n",
                demo_app.display()
            ),
        )?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        let settings_path = app.edge.state_dir.join("hapctl.toml");
        let text = std::fs::read_to_string(&settings_path)?;
        // A range free now; ports are reused once their generation is removed.
        let first_port = testkit::free_port().clamp(20_000, 60_000);
        let settings = format!(
            "{text}\n[[app]]\nname = \"{APP}\"\nbackend = \"applicatif\"\nserver = \"courante\"\nreadiness_path = \"/ready\"\nreadiness_timeout = \"10s\"\nversion_path = \"/version\"\nport_range = \"{first_port}-{}\"\nstop_grace = \"2s\"\n[app.runner]\nkind = \"exec\"\ncommand = \"./run-app.sh {{version}} {{port}}\"\n",
            first_port + 40
        );
        std::fs::write(&settings_path, settings)?;
        app.edge.reload_settings()?;
        // From here on, drop stops HAProxy and kills the generations.
        app.edge.start()?;
        app.edge.ok(&["domain", "add", HOST, "--app", APP])?;
        app.edge.ok(&["deliver", first])?;
        app.wait_version(first, Duration::from_secs(10))?;
        Ok(app)
    }

    /// The version the edge serves for HOST now (body of `GET /`, trimmed), if it answers 200.
    pub fn served(&self) -> Option<String> {
        match self.edge.get(HOST) {
            Ok((200, body)) => Some(body.trim_end().to_string()),
            _ => None,
        }
    }

    pub fn wait_version(&self, version: &str, bound: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + bound;
        loop {
            let got = self.served();
            if got.as_deref() == Some(version) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the edge never served {version} within {bound:?}; last: {got:?}");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// PIDs of the running generations (the kit's reading of their pidfiles).
    pub fn generation_pids(&self) -> Vec<i32> {
        testkit::generation_pids(&self.edge.state_dir)
    }

    /// The log of a version's process (for error messages).
    pub fn generation_log(&self, version: &str) -> String {
        std::fs::read_to_string(
            self.edge
                .state_dir
                .join("generations")
                .join(APP)
                .join(format!("{version}.log")),
        )
        .unwrap_or_default()
    }
}

impl Drop for AppEdge {
    fn drop(&mut self) {
        // Each exec generation leads its own session (setsid): signal the whole group.
        let pids = self.generation_pids();
        for &pid in &pids {
            // SAFETY: kill(2) on a process group whose leader's start time we just checked.
            unsafe { libc::kill(-pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && pids.iter().any(|&p| pid_alive(p)) {
            thread::sleep(Duration::from_millis(10));
        }
        for &pid in pids.iter().filter(|&&p| pid_alive(p)) {
            // SAFETY: as above.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        // Then `edge` drops: HAProxy stopped, temp dir removed.
    }
}
