//! `[waf]`: hapctl's SPOE agent (`hapctl waf serve`, docs/waf.md). Absent, HAProxy's
//! configuration has no SPOE filter and per-domain policies are refused.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::model::{bounded, Invalid, WafMode, WafPolicy};

/// Debian's `modsecurity-crs` loader (crs-setup.conf, then the rules).
pub const DEBIAN_CRS: &str = "/usr/share/modsecurity-crs/owasp-crs.load";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WafSettings {
    /// Loopback `IP:PORT` the agent listens on and HAProxy's SPOE backend connects to.
    pub listen: SocketAddr,
    /// The CRS loader file.
    pub crs: PathBuf,
    /// Requests evaluated at the same time (blocking threads).
    pub workers: usize,
    /// HAProxy's `timeout processing`; the agent answers an error at 3/4 of it.
    pub timeout: Duration,
    /// Most request-body bytes HAProxy sends (a domain's `body_limit` cuts further).
    pub body_max: u32,
    /// HAProxy speaks SPOP through its own multiplexer (3.1 and later): the agent's backend is
    /// `mode spop`. Not a setting: what `haproxy -vv` says, set when an `Edge` opens.
    pub spop_backend: bool,
}

impl WafSettings {
    /// The agent's own deadline, so its error answer arrives before HAProxy gives up.
    pub fn agent_deadline(&self) -> Duration {
        self.timeout * 3 / 4
    }
}

/// Whether `policy` can be served with these settings: anything but `off` needs `[waf]`.
pub fn check_policy(waf: Option<&WafSettings>, policy: &WafPolicy) -> Result<(), Invalid> {
    if policy.mode != WafMode::Off && waf.is_none() {
        return Err(Invalid::new(
            "mode",
            policy.mode.as_str(),
            "needs the [waf] section in hapctl.toml and `hapctl waf serve` (docs/waf.md)",
        ));
    }
    Ok(())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWaf {
    listen: Option<String>,
    crs: Option<PathBuf>,
    workers: Option<usize>,
    timeout: Option<String>,
    body_max: Option<u32>,
}

/// `None` when the section is absent; an error is `(key, message)`.
pub(super) fn resolve_waf(raw: Option<RawWaf>) -> Result<Option<WafSettings>, (String, String)> {
    let Some(raw) = raw else { return Ok(None) };
    let err = |key: &str, m: String| (format!("waf.{key}"), m);
    let listen = match raw.listen.as_deref() {
        None => SocketAddr::from(([127, 0, 0, 1], 9310)),
        Some(s) => s
            .parse::<SocketAddr>()
            .ok()
            .filter(|a| a.ip().is_loopback() && a.port() != 0)
            .ok_or_else(|| {
                err(
                    "listen",
                    format!("{:?} is not a loopback IP:PORT", bounded(s)),
                )
            })?,
    };
    let crs = raw.crs.unwrap_or_else(|| PathBuf::from(DEBIAN_CRS));
    if !crs.is_absolute() {
        return Err(err(
            "crs",
            format!("{} is not an absolute path", crs.display()),
        ));
    }
    let workers = raw.workers.unwrap_or(2);
    if !(1..=64).contains(&workers) {
        return Err(err("workers", "must be from 1 to 64".into()));
    }
    let timeout = match raw.timeout.as_deref() {
        None => Duration::from_millis(200),
        Some(s) => humantime::parse_duration(s)
            .ok()
            .filter(|d| (Duration::from_millis(10)..=Duration::from_secs(10)).contains(d))
            .ok_or_else(|| {
                err(
                    "timeout",
                    format!("{:?} is not a duration from 10ms to 10s", bounded(s)),
                )
            })?,
    };
    let body_max = raw.body_max.unwrap_or(8192);
    if body_max > 12_288 {
        // The message (headers and body) must fit one SPOP frame (tune.bufsize - 4).
        return Err(err("body_max", "must be at most 12288 bytes".into()));
    }
    Ok(Some(WafSettings {
        listen,
        crs,
        workers,
        timeout,
        body_max,
        spop_backend: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<WafSettings>, (String, String)> {
        resolve_waf(Some(toml::from_str(text).unwrap()))
    }

    #[test]
    fn defaults_and_refusals() {
        let s = parse("").unwrap().unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:9310");
        assert_eq!(s.agent_deadline(), Duration::from_millis(150));
        assert_eq!(resolve_waf(None), Ok(None));
        for (text, key) in [
            ("listen = \"0.0.0.0:9310\"", "waf.listen"),
            ("crs = \"rules.load\"", "waf.crs"),
            ("workers = 0", "waf.workers"),
            ("timeout = \"1h\"", "waf.timeout"),
            ("body_max = 65536", "waf.body_max"),
        ] {
            assert_eq!(parse(text).unwrap_err().0, key, "{text}");
        }
    }
}
