//! `[fleet]`: this edge is one of several sharing one desired state in etcd (docs/fleet.md).
//! Absent, the edge is alone and its SQLite database is the desired state.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::Refused;
use crate::model::{bounded, EdgeName};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// etcd's client URLs (`http://HOST:PORT` or `https://…`); calls move to the next one
    /// when one fails.
    pub endpoints: Vec<String>,
    /// This edge's name, unique in the fleet (its status key).
    pub name: EdgeName,
    /// Where this edge's HAProxy meets the others' to share the client tables (`peers`):
    /// its address on the fleet's network. Absent, the tables stay per edge.
    pub peer: Option<std::net::SocketAddr>,
    /// Every key of the fleet starts with it (`/hapctl` by default): several fleets can share
    /// one etcd.
    pub prefix: FleetPrefix,
    pub tls: Option<FleetTls>,
    /// etcd's user and the file holding its password (0600).
    pub auth: Option<(String, PathBuf)>,
    /// Bound of every etcd call.
    pub timeout: Duration,
    /// How often the whole desired state is read again, in case a watch missed an event.
    pub full_read_every: Duration,
    /// How a change that needs a reload reaches the edges.
    pub rollout: Rollout,
    /// The fleet key (`hapctl fleet key`): certificates' private keys are sealed with it in
    /// etcd. The same file on every edge.
    pub key_file: PathBuf,
}

/// `[fleet] rollout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rollout {
    /// The edge that takes the change applies it first (check, reload, confirmation); the
    /// fleet gets it only once that succeeded.
    Canary,
    /// Checked with `haproxy -c` on the edge that takes it, then published to every edge at
    /// once.
    All,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetTls {
    /// The CA that signed etcd's server certificates.
    pub ca: PathBuf,
    /// A client certificate and its key, when etcd asks for one.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// The fleet's key prefix: starts with `/`, no trailing `/`, `A-Z a-z 0-9 / - _ .` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetPrefix(String);

impl FleetPrefix {
    pub fn parse(text: &str) -> Result<FleetPrefix, String> {
        let ok = text.len() >= 2
            && text.len() <= 128
            && text.starts_with('/')
            && !text.ends_with('/')
            && !text.contains("//")
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
        if ok {
            Ok(FleetPrefix(text.to_string()))
        } else {
            Err(format!(
                "{:?} is not a key prefix: '/' then letters, digits, '/', '-', '_', '.', no trailing '/'",
                bounded(text)
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `text` (a hapctl.toml) without its `[fleet]` table: every line from the table's header to
/// the next table's, comments elsewhere kept. `None` when it has no `[fleet]`.
pub fn without_fleet(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    let mut found = false;
    for line in text.split_inclusive('\n') {
        let header = line.trim_start();
        if header.starts_with('[') {
            inside = header.trim_end() == "[fleet]" || header.starts_with("[fleet.");
            found |= inside;
        }
        if !inside {
            out.push_str(line);
        }
    }
    found.then_some(out)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    endpoints: Vec<String>,
    name: String,
    prefix: Option<String>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    user: Option<String>,
    password_file: Option<PathBuf>,
    timeout: Option<String>,
    full_read_every: Option<String>,
    rollout: Option<Rollout>,
    peer: Option<String>,
    key_file: Option<PathBuf>,
}

/// `None` when the section is absent. `path` resolves a relative path against the state
/// directory.
pub(super) fn resolve_fleet(
    raw: Option<RawFleet>,
    path: impl Fn(PathBuf) -> PathBuf,
) -> Result<Option<FleetSettings>, Refused> {
    let Some(raw) = raw else { return Ok(None) };
    let err = |key: &str, m: String| (format!("fleet.{key}"), m);
    let endpoints = endpoints(&raw.endpoints).map_err(|m| err("endpoints", m))?;
    let name = EdgeName::parse(&raw.name).map_err(|m| err("name", m))?;
    let prefix = FleetPrefix::parse(raw.prefix.as_deref().unwrap_or("/hapctl"))
        .map_err(|m| err("prefix", m))?;
    let identity = match (raw.cert, raw.key) {
        (Some(c), Some(k)) => Some((path(c), path(k))),
        (None, None) => None,
        _ => return Err(err("cert", "cert and key go together".into())),
    };
    let tls = match raw.ca {
        Some(ca) => Some(FleetTls {
            ca: path(ca),
            identity,
        }),
        None if identity.is_some() => {
            return Err(err(
                "ca",
                "a client certificate needs the CA of etcd's".into(),
            ))
        }
        None => None,
    };
    if tls.is_none() && endpoints.iter().any(|e| e.starts_with("https://")) {
        return Err(err(
            "ca",
            "https endpoints need `ca`, the CA that signed etcd's certificates".into(),
        ));
    }
    let auth = match (raw.user, raw.password_file) {
        (Some(u), Some(p)) => Some((u, path(p))),
        (None, None) => None,
        _ => return Err(err("user", "user and password_file go together".into())),
    };
    let duration = |key: &str, text: Option<&str>, default: Duration, range| {
        let Some(text) = text else { return Ok(default) };
        humantime::parse_duration(text)
            .ok()
            .filter(|d| std::ops::RangeInclusive::contains(&range, d))
            .ok_or_else(|| {
                err(
                    key,
                    format!("{:?} is not a duration in {range:?}", bounded(text)),
                )
            })
    };
    let secs = Duration::from_secs;
    Ok(Some(FleetSettings {
        endpoints,
        name,
        prefix,
        tls,
        auth,
        timeout: duration(
            "timeout",
            raw.timeout.as_deref(),
            secs(3),
            Duration::from_millis(100)..=secs(60),
        )?,
        full_read_every: duration(
            "full_read_every",
            raw.full_read_every.as_deref(),
            secs(300),
            secs(5)..=secs(86_400),
        )?,
        rollout: raw.rollout.unwrap_or(Rollout::Canary),
        key_file: path(raw.key_file.unwrap_or_else(|| PathBuf::from("fleet.key"))),
        peer: match raw.peer.as_deref() {
            None => None,
            Some(text) => Some(
                text.parse()
                    .map_err(|_| err("peer", format!("{:?} is not an IP:PORT", bounded(text))))?,
            ),
        },
    }))
}

fn endpoints(raw: &[String]) -> Result<Vec<String>, String> {
    if raw.is_empty() {
        return Err("name at least one etcd client URL, e.g. [\"http://10.0.0.1:2379\"]".into());
    }
    raw.iter()
        .map(|url| {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            let ok = rest.is_some_and(|r| {
                r.rsplit_once(':').is_some_and(|(host, port)| {
                    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
                })
            });
            if ok {
                Ok(url.clone())
            } else {
                Err(format!(
                    "{:?} is not an etcd client URL (http://HOST:PORT or https://HOST:PORT)",
                    bounded(url)
                ))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<FleetSettings>, Refused> {
        resolve_fleet(Some(toml::from_str(text).unwrap()), |p| {
            PathBuf::from("/state").join(p)
        })
    }

    #[test]
    fn a_minimal_section_takes_the_defaults() {
        let f = parse("endpoints = [\"http://127.0.0.1:2379\"]\nname = \"edge-a\"")
            .unwrap()
            .unwrap();
        assert_eq!(f.prefix.as_str(), "/hapctl");
        assert_eq!(f.name.as_str(), "edge-a");
        assert_eq!(f.timeout, Duration::from_secs(3));
        assert_eq!(f.rollout, Rollout::Canary);
        assert!(f.tls.is_none() && f.auth.is_none());
    }

    #[test]
    fn tls_and_auth_paths_resolve_against_the_state_dir() {
        let f = parse(
            "endpoints = [\"https://10.0.0.1:2379\"]\nname = \"a\"\nca = \"etcd/ca.pem\"\n\
             cert = \"/etc/c.pem\"\nkey = \"/etc/k.pem\"\nuser = \"edge\"\npassword_file = \"etcd.pw\"",
        )
        .unwrap()
        .unwrap();
        let tls = f.tls.unwrap();
        assert_eq!(tls.ca, PathBuf::from("/state/etcd/ca.pem"));
        assert_eq!(
            tls.identity,
            Some((PathBuf::from("/etc/c.pem"), PathBuf::from("/etc/k.pem")))
        );
        assert_eq!(
            f.auth,
            Some(("edge".into(), PathBuf::from("/state/etcd.pw")))
        );
    }

    #[test]
    fn leaving_removes_the_fleet_table_only() {
        let text = "[edge]\nhttp_bind = \"127.0.0.1:80\"\n\n[fleet]\nendpoints = [\"http://h:1\"]\nname = \"a\"\n\n[api]\nlisten = \"127.0.0.1:9\"\n";
        let left = without_fleet(text).unwrap();
        assert_eq!(
            left,
            "[edge]\nhttp_bind = \"127.0.0.1:80\"\n\n[api]\nlisten = \"127.0.0.1:9\"\n"
        );
        assert_eq!(without_fleet(&left), None);
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("endpoints = []\nname = \"a\"", "fleet.endpoints"),
            (
                "endpoints = [\"127.0.0.1:2379\"]\nname = \"a\"",
                "fleet.endpoints",
            ),
            (
                "endpoints = [\"http://h:1\"]\nname = \"Edge A\"",
                "fleet.name",
            ),
            (
                "endpoints = [\"http://h:1\"]\nname = \"a\"\nprefix = \"x/\"",
                "fleet.prefix",
            ),
            ("endpoints = [\"https://h:1\"]\nname = \"a\"", "fleet.ca"),
            (
                "endpoints = [\"http://h:1\"]\nname = \"a\"\nuser = \"u\"",
                "fleet.user",
            ),
            (
                "endpoints = [\"http://h:1\"]\nname = \"a\"\ntimeout = \"2h\"",
                "fleet.timeout",
            ),
        ];
        for (text, key) in cases {
            assert_eq!(parse(text).unwrap_err().0, key, "{text}");
        }
    }
}
