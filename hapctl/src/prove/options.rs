//! What `hapctl prove` is asked to measure ([`Options`], checked before anything runs) and
//! which cutovers ([`Subject`]).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::model::AppName;

use super::http;

#[derive(Debug, thiserror::Error)]
pub enum ProveError {
    #[error("cannot measure, nothing was run: {0}")]
    Before(String),
    #[error("invalid prove options: {0}")]
    Options(String),
}

/// What `hapctl prove` was asked to measure, and how.
#[derive(Debug, Clone, Serialize)]
pub struct Options {
    /// Long streams opened before the command.
    pub streams: usize,
    /// Short requests per second.
    pub rate: f64,
    pub stream_lines: u32,
    pub stream_interval_ms: u32,
    /// Held streams: closed by the client this long after the command ended instead of at
    /// their announced end, so that they outlast a command of any duration.
    #[serde(serialize_with = "ser_opt_ms", rename = "stream_hold_ms")]
    pub stream_hold: Option<Duration>,
    #[serde(serialize_with = "ser_ms", rename = "settle_ms")]
    pub settle: Duration,
    /// Probe failures tolerated.
    pub max_failures: u64,
    pub expect_version: Option<String>,
    /// `Host` header of every request.
    pub host: String,
    /// Path of the short requests.
    pub path: String,
    /// Bound on the command.
    #[serde(serialize_with = "ser_ms", rename = "timeout_ms")]
    pub timeout: Duration,
    /// Bound on one short request (connect, write, every read).
    #[serde(serialize_with = "ser_ms", rename = "request_timeout_ms")]
    pub request_timeout: Duration,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

fn ser_opt_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => ser_ms(d, s),
        None => s.serialize_none(),
    }
}

/// Bound on a delivery measured for the dashboard or the fleet (the held streams must
/// outlast it: see `Options::check`).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

impl Options {
    /// `hapctl prove`'s defaults for a delivery run by hapctl itself (`POST /v1/proofs`, an
    /// edge's part of a fleet delivery), with held streams so that a slow one still spans them.
    pub fn for_delivery(host: String, expect_version: Option<String>) -> Options {
        Options {
            streams: 2,
            rate: 50.0,
            stream_lines: 2000,
            stream_interval_ms: 50,
            stream_hold: Some(Duration::from_secs(1)),
            settle: Duration::from_secs(1),
            max_failures: 0,
            expect_version,
            host,
            path: "/".into(),
            timeout: DELIVERY_TIMEOUT,
            request_timeout: Duration::from_secs(2),
        }
    }

    pub fn check(&self) -> Result<(), ProveError> {
        let bad = |m: String| Err(ProveError::Options(m));
        if !(self.rate > 0.0 && self.rate <= 1000.0) {
            return bad(format!(
                "--rate {} must be above 0 and at most 1000 requests/s",
                self.rate
            ));
        }
        if self.streams > 64 {
            return bad(format!("--streams {} must be at most 64", self.streams));
        }
        if self.stream_lines == 0 || self.stream_lines > 100_000 {
            return bad(format!(
                "--stream-lines {} must be 1 to 100000",
                self.stream_lines
            ));
        }
        if self.stream_interval_ms > 60_000 {
            return bad(format!(
                "--stream-interval-ms {} must be at most 60000",
                self.stream_interval_ms
            ));
        }
        if let Some(hold) = self.stream_hold {
            let length = Duration::from_millis(
                u64::from(self.stream_lines) * u64::from(self.stream_interval_ms),
            );
            if length < self.timeout + hold + Duration::from_secs(10) {
                return bad(format!(
                    "held streams of {} lines every {} ms end on their own before the command's \
                     timeout ({:?}) plus the hold ({hold:?}) and 10 s",
                    self.stream_lines, self.stream_interval_ms, self.timeout
                ));
            }
        }
        if !self.path.starts_with('/') || self.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return bad(format!(
                "--path {:?} must start with / and hold no space or control character",
                self.path
            ));
        }
        if self.host.is_empty() || self.host.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return bad(format!(
                "--host {:?} must be a host name without spaces",
                self.host
            ));
        }
        if let Some(v) = &self.expect_version {
            if !http::is_version(v) {
                return bad(format!(
                    "--expect-version {v:?} must be 1-64 characters of [A-Za-z0-9._-]"
                ));
            }
        }
        if self.request_timeout.is_zero() || self.timeout.is_zero() {
            return bad("--timeout and --request-timeout must be above 0".into());
        }
        Ok(())
    }
}

/// The cutovers to prove.
#[derive(Debug, Clone)]
pub enum Subject {
    /// Any command (`hapctl prove -- COMMAND ARGS…`).
    Command(Vec<String>),
    /// `deliver VERSION` then `rollback`, run by this hapctl binary on the same state dir.
    Cycle {
        version: String,
        app: Option<AppName>,
        hapctl: PathBuf,
    },
}
