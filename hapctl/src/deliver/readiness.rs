//! Waiting until a generation answers, before HAProxy is shown it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::model::Generation;
use crate::prove::http::{self, Timeouts};
use crate::settings::AppSettings;

/// Pause between two readiness requests: short, since the wait adds to every cutover.
const INTERVAL: Duration = Duration::from_millis(10);
/// Bound on one request (connect, write, read).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What to require of a generation before the cutover.
pub struct Readiness<'a> {
    pub port: u16,
    pub path: &'a str,
    pub successes: u32,
    pub timeout: Duration,
    /// `(path, version)`: the body at `path` must equal `version`.
    pub version_check: Option<(&'a str, &'a str)>,
}

impl<'a> Readiness<'a> {
    /// What `app` requires of `generation`.
    pub fn of(app: &'a AppSettings, generation: &'a Generation) -> Readiness<'a> {
        Readiness {
            port: generation.port.get(),
            path: app.readiness_path.as_str(),
            successes: app.readiness_successes,
            timeout: app.readiness_timeout,
            version_check: app
                .version_path
                .as_ref()
                .map(|p| (p.as_str(), generation.version.as_str())),
        }
    }

    /// Polls until `successes` consecutive 200 answers (then the version check passes), or
    /// `alive` says the process died, or the timeout. Returns the last failure on error.
    pub fn wait(&self, mut alive: impl FnMut() -> bool) -> Result<Duration, String> {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let mut streak = 0;
        let mut last = String::from("no answer yet");
        loop {
            match get(self.port, self.path) {
                Ok((200, _)) => streak += 1,
                Ok((status, _)) => {
                    streak = 0;
                    last = format!("GET {} answered {status}", self.path);
                }
                Err(e) => {
                    streak = 0;
                    last = format!("GET {}: {e}", self.path);
                }
            }
            if streak >= self.successes {
                return match self.version_check {
                    None => Ok(started.elapsed()),
                    Some((path, version)) => match get(self.port, path) {
                        Ok((200, body)) if body.trim_end() == version => Ok(started.elapsed()),
                        Ok((status, body)) => Err(format!(
                            "GET {path} answered {status} {:?}, not the version {version:?}: is the right build on this port?",
                            body.chars().take(80).collect::<String>()
                        )),
                        Err(e) => Err(format!("GET {path}: {e}")),
                    },
                };
            }
            if !alive() {
                return Err(format!("the process exited ({last})"));
            }
            if Instant::now() >= deadline {
                return Err(format!("not ready after {:?} ({last})", self.timeout));
            }
            std::thread::sleep(INTERVAL);
        }
    }
}

/// One `GET` on 127.0.0.1:`port` with prove's client (bounded, the body framed by its
/// length or its chunks): the status and the body.
pub fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let timeouts = Timeouts {
        connect: REQUEST_TIMEOUT,
        read: REQUEST_TIMEOUT,
    };
    let answer =
        http::get(addr, "127.0.0.1", path, timeouts, REQUEST_TIMEOUT).map_err(|e| e.to_string())?;
    Ok((
        answer.head.status,
        String::from_utf8_lossy(&answer.body).into_owned(),
    ))
}
