//! `hapctl init`: the state directory.

use std::path::Path;

use clap::{Args, ValueEnum};

use hapctl::edge::{self, Layout};

use super::Failure;

#[derive(Args)]
pub struct InitArgs {
    /// Reset existing state (the database is deleted).
    #[arg(long)]
    force: bool,
    /// Where HAProxy's files go and who runs the master.
    #[arg(long, value_enum, default_value = "state-dir")]
    layout: LayoutArg,
    /// Public HTTP listener, IP:PORT (default 127.0.0.1:8080; 0.0.0.0:80 with --layout debian).
    #[arg(long)]
    http_bind: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LayoutArg {
    /// Everything under the state directory; hapctl runs the master itself (direct mode).
    StateDir,
    /// The distribution's haproxy.service runs the master (systemd mode); HAProxy's files
    /// under /etc/haproxy; listeners on 0.0.0.0:80 and :443. What the Debian package uses.
    Debian,
}

pub fn run(dir: &Path, args: InitArgs) -> Result<u8, Failure> {
    let layout = match args.layout {
        LayoutArg::StateDir => Layout::StateDir,
        LayoutArg::Debian => Layout::Debian,
    };
    let path = edge::init(dir, args.force, layout, args.http_bind.as_deref()).map_err(|e| {
        match e {
            // Only --http-bind can make the built-in settings invalid: input, exit 2.
            edge::EdgeError::Settings(_) => Failure::input(e),
            e => e.into(),
        }
    })?;
    let next = match layout {
        Layout::StateDir => format!("hapctl --state-dir {} haproxy start", dir.display()),
        // Starting anything here would take over a running HAProxy's configuration.
        Layout::Debian => {
            "adopt the running HAProxy, as production.md says (in docs/, or /usr/share/doc/hapctl/)"
                .into()
        }
    };
    println!("initialised {}; next: {next}", path.display());
    Ok(0)
}
