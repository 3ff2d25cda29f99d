//! A demo-app process answering `/version` and `/stream`, for tests whose backends must hold
//! long requests.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A demo-app answering `version` on a free port; killed on drop.
pub struct App {
    child: Child,
    pub port: u16,
}

impl App {
    pub fn start(version: &str) -> App {
        let port = super::free_port();
        let child = Command::new(super::demo_app_bin())
            .args(["--version", version, "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        App { child, port }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON report of a hapctl command run with `--json` (it must succeed).
pub fn apply_json(edge: &super::Edge, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    serde_json::from_str(&edge.ok(&args)).unwrap()
}
