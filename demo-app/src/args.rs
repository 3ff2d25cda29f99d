//! The command line: flags, their defaults and their validation.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::routes;

pub const USAGE: &str = "\
usage: demo-app --version V --port P [options]

  --version V             version served by this instance: 1-64 characters of
                          [A-Za-z0-9._-] (required)
  --port P                TCP port to listen on, 0-65535 (required)
  --bind ADDR             IP address to listen on (default 127.0.0.1)
  --ready-delay-ms N      the ready path answers 503 for N ms after start,
                          then 200 (default 0)
  --ready-path PATH       path of the readiness check (default /ready)
  --max-connections N     concurrent connections served; beyond, 503 and
                          close (default 512)
  --idle-timeout-ms N     idle time allowed between two requests on a
                          connection, and longest blocked write (default 60000)
  -h, --help              print this help

Routes: GET <ready-path>, GET /version, GET /, GET /stream?lines=N&interval_ms=M.
Every response of the app carries `x-version: V`. SIGTERM ends the process immediately
(no graceful drain): stop a generation only once nothing routes to it.
Exit status: 0 on --help, 1 if the socket cannot be opened, 2 on a bad argument.";

const MAX_VERSION_LEN: usize = 64;
const MAX_READY_PATH_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub version: String,
    pub port: u16,
    pub bind: IpAddr,
    pub ready_delay: Duration,
    pub ready_path: String,
    pub max_connections: usize,
    pub idle_timeout: Duration,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Run(Config),
}

fn validate_version(v: &str) -> Result<(), String> {
    let ok = !v.is_empty()
        && v.len() <= MAX_VERSION_LEN
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid --version {v:?}: expected 1-{MAX_VERSION_LEN} characters of [A-Za-z0-9._-]"
        ))
    }
}

fn validate_ready_path(p: &str) -> Result<(), String> {
    let ok = p.starts_with('/')
        && p.len() <= MAX_READY_PATH_LEN
        && p.bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b'?' && b != b'#');
    if !ok {
        return Err(format!(
            "invalid --ready-path {p:?}: expected a path starting with '/', at most \
             {MAX_READY_PATH_LEN} visible ASCII characters, without '?' or '#'"
        ));
    }
    if routes::BUILTIN_PATHS.contains(&p) {
        return Err(format!(
            "invalid --ready-path {p:?}: it would shadow a built-in route"
        ));
    }
    Ok(())
}

fn parse_number<T>(flag: &str, value: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let err = || format!("invalid {flag} {value:?}: expected an integer between {min} and {max}");
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    match value.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(err()),
    }
}

pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, String> {
    let mut version = None;
    let mut port = None;
    let mut bind = None;
    let mut ready_delay_ms = None;
    let mut ready_path = None;
    let mut max_connections = None;
    let mut idle_timeout_ms = None;

    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg
            .into_string()
            .map_err(|a| format!("argument {a:?} is not valid UTF-8"))?;
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let slot: &mut Option<String> = match flag.as_str() {
            "--version" => &mut version,
            "--port" => &mut port,
            "--bind" => &mut bind,
            "--ready-delay-ms" => &mut ready_delay_ms,
            "--ready-path" => &mut ready_path,
            "--max-connections" => &mut max_connections,
            "--idle-timeout-ms" => &mut idle_timeout_ms,
            _ => return Err(format!("unknown argument {arg:?}")),
        };
        let value = match inline {
            Some(v) => v,
            None => args
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?
                .into_string()
                .map_err(|a| format!("value {a:?} of {flag} is not valid UTF-8"))?,
        };
        if slot.is_some() {
            return Err(format!("{flag} given more than once"));
        }
        *slot = Some(value);
    }

    let version = version.ok_or("--version is required")?;
    validate_version(&version)?;
    let port = parse_number("--port", &port.ok_or("--port is required")?, 0, u16::MAX)?;
    let bind = match bind {
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(b) => b
            .parse()
            .map_err(|_| format!("invalid --bind {b:?}: expected an IP address"))?,
    };
    let ready_delay_ms = match ready_delay_ms {
        None => 0,
        Some(v) => parse_number("--ready-delay-ms", &v, 0, 86_400_000u64)?,
    };
    let ready_path = ready_path.unwrap_or_else(|| "/ready".to_string());
    validate_ready_path(&ready_path)?;
    let max_connections = match max_connections {
        None => 512,
        Some(v) => parse_number("--max-connections", &v, 1, 100_000usize)?,
    };
    let idle_timeout_ms = match idle_timeout_ms {
        None => 60_000,
        Some(v) => parse_number("--idle-timeout-ms", &v, 1, 86_400_000u64)?,
    };
    Ok(Command::Run(Config {
        version,
        port,
        bind,
        ready_delay: Duration::from_millis(ready_delay_ms),
        ready_path,
        max_connections,
        idle_timeout: Duration::from_millis(idle_timeout_ms),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(OsString::from))
    }

    fn config(args: &[&str]) -> Config {
        match parse(args) {
            Ok(Command::Run(c)) => c,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c = config(&["--version", "1.4.2", "--port", "18211"]);
        assert_eq!(c.version, "1.4.2");
        assert_eq!(c.port, 18211);
        assert_eq!(c.bind, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(c.ready_delay, Duration::ZERO);
        assert_eq!(c.ready_path, "/ready");
        assert_eq!(c.max_connections, 512);
        assert_eq!(c.idle_timeout, Duration::from_secs(60));
    }

    #[test]
    fn all_options() {
        let c = config(&[
            "--port=0",
            "--version=v_1.5.0-rc1",
            "--bind",
            "::1",
            "--ready-delay-ms",
            "1500",
            "--ready-path",
            "/pret",
            "--max-connections=4",
            "--idle-timeout-ms=250",
        ]);
        assert_eq!(c.version, "v_1.5.0-rc1");
        assert_eq!(c.port, 0);
        assert_eq!(c.bind, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(c.ready_delay, Duration::from_millis(1500));
        assert_eq!(c.ready_path, "/pret");
        assert_eq!(c.max_connections, 4);
        assert_eq!(c.idle_timeout, Duration::from_millis(250));
        assert_eq!(parse(&["--port", "1", "--help"]), Ok(Command::Help));
    }

    #[test]
    fn versions() {
        let max = "a".repeat(64);
        assert!(validate_version(&max).is_ok());
        assert!(validate_version("A.z_0-9").is_ok());
        for bad in ["", "1 2", "1/2", "é", "1.4.2\n", "v:1", &"a".repeat(65)] {
            let err = validate_version(bad).unwrap_err();
            assert!(err.contains("invalid --version"), "{err}");
        }
    }

    #[test]
    fn bad_arguments() {
        for args in [
            &[][..],
            &["--port", "1"],
            &["--version", "1"],
            &["--version", "bad version", "--port", "1"],
            &["--version", "1", "--port", "65536"],
            &["--version", "1", "--port", "-1"],
            &["--version", "1", "--port"],
            &["--version", "1", "--port", "1", "--bind", "localhost"],
            &["--version", "1", "--port", "1", "--ready-path", "ready"],
            &["--version", "1", "--port", "1", "--ready-path", "/a?b"],
            &["--version", "1", "--port", "1", "--ready-path", "/version"],
            &["--version", "1", "--port", "1", "--ready-delay-ms", "1s"],
            &["--version", "1", "--port", "1", "--max-connections", "0"],
            &["--version", "1", "--port", "1", "--idle-timeout-ms", "0"],
            &["--version", "1", "--version", "2", "--port", "1"],
            &["--version", "1", "--port", "1", "--grace-ms", "10"],
            &["--version", "1", "--port", "1", "extra"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
