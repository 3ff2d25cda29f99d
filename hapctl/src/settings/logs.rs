//! `[logs]`: where HAProxy's access log goes.
//!
//! `file` (the default): HAProxy writes each line to a `ring` of `buffer` bytes and streams
//! the ring over loopback TCP to `listen`, where `hapctl serve` reads it and writes a rotated
//! file (`crate::logs`). Without a running `hapctl serve` the lines wait in the ring and are sent
//! when it connects; once the ring is full its oldest lines are overwritten. Requests are
//! never affected.
//! `syslog:HOST:PORT` sends RFC 5424 over UDP; `journald` sends to `/dev/log`, which systemd's
//! journal reads on a systemd host.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use serde::Deserialize;

use crate::model::bounded;

/// The datagram socket systemd's journal (and any syslog daemon) reads.
pub const DEV_LOG: &str = "/dev/log";

/// Where `hapctl serve` takes the access log by default: IANA's port for syslog over TCP,
/// below 1024, so only root can listen there. On a higher port another local user could take
/// it while `hapctl serve` is down, and HAProxy would send them the access log.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:601";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// `LogSettings::listen`, which `hapctl serve` reads and writes to `LogSettings::file`.
    File,
    /// A syslog server over UDP, `HOST:PORT` (an IPv6 host in brackets).
    Syslog { host: String, port: u16 },
    /// `/dev/log`.
    Journald,
}

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub target: LogTarget,
    /// The loopback address HAProxy's ring is forwarded to (target `file`). TCP, not a unix
    /// socket: HAProxy (2.6, and 3.0 once its ring holds a line) retries a unix connect that
    /// fails at once (no reader) in a busy loop, a whole core while `hapctl serve` is down; a
    /// refused TCP connect waits 1 s.
    pub listen: SocketAddr,
    /// The access log `hapctl serve` writes; rotated files are `FILE.1` (newest) … `FILE.keep`.
    pub file: PathBuf,
    /// A file is rotated before a line would make it larger than this.
    pub max_size: u64,
    /// Rotated files kept besides the current one.
    pub keep: u32,
    /// Size of HAProxy's log ring (target `file`), per HAProxy process: what waits there while
    /// `hapctl serve` is down or behind.
    pub buffer: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLogs {
    target: Option<String>,
    listen: Option<String>,
    /// The unix socket of earlier versions: refused with a message naming `listen`.
    socket: Option<serde::de::IgnoredAny>,
    file: Option<PathBuf>,
    max_size: Option<String>,
    keep: Option<u32>,
    buffer: Option<String>,
}

/// Bounds of `max_size`: a file must hold a few long lines; 1 TiB is beyond any sane file.
const MIN_SIZE: u64 = 64 * 1024;
const MAX_SIZE: u64 = 1 << 40;
const MAX_KEEP: u32 = 100;
/// Bounds of `buffer`: a few long lines; HAProxy allocates it per process (twice during a
/// reload), so more than 1 GiB is a typo.
const MIN_BUFFER: u64 = 64 * 1024;
const MAX_BUFFER: u64 = 1 << 30;

/// An error is `(key, message)`.
pub(super) fn resolve_logs(
    raw: RawLogs,
    resolve: impl Fn(PathBuf) -> PathBuf,
) -> Result<LogSettings, (String, String)> {
    let err = |key: &str, m: String| (format!("logs.{key}"), m);
    let target = match raw.target.as_deref() {
        None | Some("file") => LogTarget::File,
        Some("journald") => LogTarget::Journald,
        Some(other) => match other.strip_prefix("syslog:") {
            Some(addr) => parse_syslog(addr).map_err(|m| err("target", m))?,
            None => {
                return Err(err(
                    "target",
                    format!(
                        "{:?} is not \"file\", \"journald\" or \"syslog:HOST:PORT\"",
                        bounded(other)
                    ),
                ))
            }
        },
    };
    let max_size = size_in(
        raw.max_size.as_deref(),
        100 << 20,
        MIN_SIZE..=MAX_SIZE,
        "64KiB..1TiB",
    )
    .map_err(|m| err("max_size", m))?;
    let buffer = size_in(
        raw.buffer.as_deref(),
        16 << 20,
        MIN_BUFFER..=MAX_BUFFER,
        "64KiB..1GiB",
    )
    .map_err(|m| err("buffer", m))?;
    let keep = raw.keep.unwrap_or(5);
    if keep > MAX_KEEP {
        return Err(err("keep", format!("{keep} is more than {MAX_KEEP} files")));
    }
    if raw.socket.is_some() {
        return Err(err(
            "socket",
            format!("is no longer used: HAProxy sends the access log over loopback TCP; replace the line with listen = \"{DEFAULT_LISTEN}\" (or another free loopback port)"),
        ));
    }
    let listen = parse_listen(raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN))
        .map_err(|m| err("listen", m))?;
    Ok(LogSettings {
        target,
        listen,
        file: resolve(raw.file.unwrap_or_else(|| PathBuf::from("logs/access.log"))),
        max_size,
        keep,
        buffer,
    })
}

/// A loopback `IP:PORT`: only local processes may reach it, and `hapctl serve` still checks
/// who they are (`crate::logs`).
fn parse_listen(addr: &str) -> Result<SocketAddr, String> {
    let listen: SocketAddr = addr.parse().map_err(|_| {
        format!(
            "{:?} is not an IP:PORT address such as \"{DEFAULT_LISTEN}\"",
            bounded(addr)
        )
    })?;
    if !listen.ip().is_loopback() {
        return Err(format!(
            "{listen} is not a loopback address: the access log must stay on this host (127.0.0.1 or [::1])"
        ));
    }
    if listen.port() == 0 {
        return Err(format!(
            "{listen}: the port must be fixed (not 0): HAProxy's configuration names it"
        ));
    }
    Ok(listen)
}

/// `HOST:PORT`: an IPv4 address, `[IPv6]` or a DNS name, and a port 1-65535.
fn parse_syslog(addr: &str) -> Result<LogTarget, String> {
    let shown = bounded(addr);
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("syslog:{shown:?} has no :PORT"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("syslog:{shown:?}: the port is not 1-65535"))?;
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            host.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv4())
                || (!host.is_empty()
                    && host.len() <= 253
                    && host
                        .split('.')
                        .all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-'))
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'))
        }
    };
    if !host_ok {
        return Err(format!(
            "syslog:{shown:?}: the host is not an IPv4 address, [IPv6] address or DNS name"
        ));
    }
    Ok(LogTarget::Syslog {
        host: host.to_string(),
        port,
    })
}

/// A size setting: `default` when absent, else parsed and within `range` (`shown` in errors).
fn size_in(
    raw: Option<&str>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    shown: &str,
) -> Result<u64, String> {
    let size = raw.map_or(Ok(default), parse_size)?;
    if !range.contains(&size) {
        return Err(format!("{size} bytes is outside {shown}"));
    }
    Ok(size)
}

/// `1048576`, `512KiB`, `100MiB`, `1GiB` (also `KB`/`MB`/`GB`, read as powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let (num, unit) = t.split_at(digits);
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{:?} is not a size like \"100MiB\"", bounded(s))),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("{:?} is not a size like \"100MiB\"", bounded(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logs(raw: RawLogs) -> Result<LogSettings, (String, String)> {
        resolve_logs(raw, |p| PathBuf::from("/srv").join(p))
    }

    #[test]
    fn defaults_and_targets() {
        let s = logs(RawLogs::default()).unwrap();
        assert_eq!(s.target, LogTarget::File);
        assert_eq!(s.file, PathBuf::from("/srv/logs/access.log"));
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!((s.max_size, s.keep, s.buffer), (100 << 20, 5, 16 << 20));
        let target = |t: &str| {
            logs(RawLogs {
                target: Some(t.into()),
                ..RawLogs::default()
            })
            .map(|s| s.target)
        };
        assert_eq!(target("journald").unwrap(), LogTarget::Journald);
        assert_eq!(
            target("syslog:10.0.0.5:514").unwrap(),
            LogTarget::Syslog {
                host: "10.0.0.5".into(),
                port: 514
            }
        );
        assert!(target("syslog:[::1]:514").is_ok());
        assert!(target("syslog:logs.example.com:6514").is_ok());
        for bad in [
            "syslog:",
            "syslog:1.2.3.4",
            "syslog:1.2.3.4:0",
            "syslog:a b:514",
            "syslog:x\nlog 1.2.3.4:514",
            "syslog:::1:514",
            "stdout",
        ] {
            let (key, m) = target(bad).unwrap_err();
            assert_eq!(key, "logs.target", "{bad}: {m}");
        }
    }

    #[test]
    fn the_listener_is_a_fixed_loopback_port_and_the_old_socket_key_says_so() {
        let listen = |l: &str| {
            logs(RawLogs {
                listen: Some(l.into()),
                ..RawLogs::default()
            })
            .map(|s| s.listen)
        };
        assert_eq!(
            listen("127.0.0.2:7000").unwrap().to_string(),
            "127.0.0.2:7000"
        );
        assert_eq!(listen("[::1]:7000").unwrap().to_string(), "[::1]:7000");
        for (bad, says) in [
            ("0.0.0.0:9514", "loopback"),
            ("10.0.0.5:9514", "loopback"),
            ("127.0.0.1:0", "fixed"),
            ("localhost:9514", "IP:PORT"),
            ("127.0.0.1", "IP:PORT"),
        ] {
            let (key, m) = listen(bad).unwrap_err();
            assert_eq!(key, "logs.listen", "{bad}");
            assert!(m.contains(says), "{bad}: {m}");
        }
        let old: RawLogs = toml::from_str("socket = \"run/log.sock\"").unwrap();
        let (key, m) = logs(old).unwrap_err();
        assert_eq!(key, "logs.socket");
        assert!(m.contains("listen = \"127.0.0.1:601\""), "{m}");
    }

    #[test]
    fn sizes_and_bounds() {
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("100MB").unwrap(), 100 << 20);
        assert_eq!(parse_size("70000").unwrap(), 70000);
        for bad in ["", "MiB", "-1", "1.5MiB", "99999999999999999999GiB", "1TB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        let too_small = logs(RawLogs {
            max_size: Some("1KiB".into()),
            ..RawLogs::default()
        });
        assert_eq!(too_small.unwrap_err().0, "logs.max_size");
        for bad in ["2GiB", "1KiB", "lots"] {
            let buffer = logs(RawLogs {
                buffer: Some(bad.into()),
                ..RawLogs::default()
            });
            assert_eq!(buffer.unwrap_err().0, "logs.buffer", "{bad}");
        }
        let too_many = logs(RawLogs {
            keep: Some(1000),
            ..RawLogs::default()
        });
        assert_eq!(too_many.unwrap_err().0, "logs.keep");
    }
}
