//! `hapctl.toml`: where everything lives and how HAProxy is driven.
//!
//! Parsing is strict (`deny_unknown_fields`), so a typo in a key is an error that names the key
//! instead of a silently ignored setting. Relative paths are resolved against the state
//! directory, so the embedded default is self-contained and a production layout
//! (`/etc/haproxy/...`) is a matter of absolute paths.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::model::bounded;

mod alerts;
mod api;
mod apps;
mod fleet;
mod http3;
mod logs;
mod paths;
mod privileges;
mod resolvers;
mod tls;
mod traffic;
mod unknown_host;
pub mod waf;

pub use crate::model::EdgeName;
pub use alerts::{AlertSettings, SmtpSecurity, SmtpSettings, WebhookFormat, WebhookUrl};
pub use api::{ApiSettings, ApiTls, PlainHttpRefused};
pub use apps::{AppSettings, PortPlan, RunnerSettings};
pub use fleet::{without_fleet, FleetPrefix, FleetSettings, FleetTls, Rollout};
pub use http3::{ClusterSecret, Http3, Quic};
pub use logs::{LogSettings, LogTarget, DEV_LOG};
pub use paths::Paths;
pub use privileges::{user_exists, Account, Privileges, DEFAULT_USER};
pub use resolvers::{ResolverSettings, RESOLVERS_NAME};
pub use tls::{AcmeSettings, TlsSettings, TlsVersion, KEY_TYPES, LETS_ENCRYPT};
pub use traffic::{MaxDomains, TopDomains, TrafficSettings};
pub use unknown_host::UnknownHost;

/// Name of the settings file inside the state directory.
pub const SETTINGS_FILE: &str = "hapctl.toml";
/// Environment variable that overrides `[haproxy] binary`.
pub const HAPROXY_BIN_ENV: &str = "HAPCTL_HAPROXY_BIN";

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read {path}: {}", describe_read_error(.error))]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid settings in {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid settings in {path}: key `{key}`: {message}")]
    Value {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// How HAProxy's master process is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// hapctl starts the master itself, detached, with a pidfile and a log file.
    Direct,
    /// A systemd unit runs the master; hapctl talks to it through `systemctl` and the master socket.
    Systemd,
}

/// Fully resolved settings: every path absolute, every value checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub state_dir: PathBuf,
    pub edge: EdgeSettings,
    pub haproxy: HaproxySettings,
    pub paths: Paths,
    pub render: RenderSettings,
    /// Applications delivered as generations (`[[app]]`).
    pub apps: Vec<AppSettings>,
    pub api: ApiSettings,
    pub tls: TlsSettings,
    pub acme: AcmeSettings,
    pub logs: LogSettings,
    /// `[resolvers]`, if the servers' names are resolved at runtime.
    pub resolvers: Option<ResolverSettings>,
    /// `[traffic]`: traffic per domain from the access log.
    pub traffic: TrafficSettings,
    /// `[alerts]`, if alerts are sent.
    pub alerts: Option<AlertSettings>,
    pub waf: Option<waf::WafSettings>,
    /// `[fleet]`, if this edge shares its desired state with others through etcd.
    pub fleet: Option<FleetSettings>,
}

#[derive(Debug, Clone)]
pub struct EdgeSettings {
    /// Address of the public HTTP listener.
    pub http_bind: SocketAddr,
    /// Address of the public HTTPS listener; `None` when disabled.
    pub https_bind: Option<SocketAddr>,
    /// App whose backend serves requests for unknown hosts (instead of the 404 page): for an
    /// edge in front of a single application.
    pub default_app: Option<crate::model::AppName>,
    /// Normalise every request URI before any rule reads it (`http-request normalize-uri`:
    /// percent case, unreserved decoding, `//`, `/./`, `/../`), so `/wp-admin//x` and
    /// `/%77p-admin/x` meet the same rules as `/wp-admin/x`. HAProxy (2.6 at least) ships it as
    /// an experimental action: on, the config also gets `expose-experimental-directives`.
    pub normalize_uri: bool,
    /// The answer for an unknown host: the 404 page or the old 200 "site not configured" one.
    pub unknown_host: UnknownHost,
    /// `[edge] http3` as asked.
    pub http3: Http3,
    /// HTTP/3 as served, once `crate::quic::resolve` looked at the HAProxy binary (an `Edge`
    /// does when it opens): `None` is TCP only.
    pub quic: Option<Quic>,
}

#[derive(Debug, Clone)]
pub struct HaproxySettings {
    pub binary: PathBuf,
    pub mode: Mode,
    /// Unit name used in `systemd` mode.
    pub systemd_unit: String,
    /// Bound on one `haproxy -c` run.
    pub check_timeout: Duration,
    /// Bound on a reload, from the command to the confirmed new worker.
    pub reload_timeout: Duration,
    /// Bound on starting the master until its first worker is up.
    pub start_timeout: Duration,
    /// What the workers drop to (`user`, `group`, `chroot`) when the master starts as root.
    pub privileges: Privileges,
}

#[derive(Debug, Clone, Default)]
pub struct RenderSettings {
    /// Folder whose templates replace the embedded ones of the same name.
    pub templates_dir: Option<PathBuf>,
}

// ---- raw file format -------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    edge: RawEdge,
    #[serde(default)]
    haproxy: RawHaproxy,
    #[serde(default)]
    paths: RawPaths,
    #[serde(default)]
    render: RawRender,
    #[serde(default)]
    app: Vec<apps::RawApp>,
    #[serde(default)]
    api: api::RawApi,
    #[serde(default)]
    tls: tls::RawTls,
    #[serde(default)]
    acme: tls::RawAcme,
    #[serde(default)]
    logs: logs::RawLogs,
    resolvers: Option<resolvers::RawResolvers>,
    #[serde(default)]
    traffic: traffic::RawTraffic,
    alerts: Option<alerts::RawAlerts>,
    waf: Option<waf::RawWaf>,
    fleet: Option<fleet::RawFleet>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdge {
    http_bind: Option<String>,
    https_bind: Option<String>,
    default_app: Option<String>,
    normalize_uri: Option<bool>,
    unknown_host: Option<String>,
    http3: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHaproxy {
    binary: Option<PathBuf>,
    mode: Option<Mode>,
    systemd_unit: Option<String>,
    check_timeout: Option<String>,
    reload_timeout: Option<String>,
    start_timeout: Option<String>,
    user: Option<String>,
    group: Option<String>,
    chroot: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPaths {
    config: Option<PathBuf>,
    generation: Option<PathBuf>,
    maps_dir: Option<PathBuf>,
    pages_dir: Option<PathBuf>,
    known_good_dir: Option<PathBuf>,
    run_dir: Option<PathBuf>,
    journal_dir: Option<PathBuf>,
    database: Option<PathBuf>,
    blocks_database: Option<PathBuf>,
    master_socket: Option<PathBuf>,
    admin_socket: Option<PathBuf>,
    pidfile: Option<PathBuf>,
    haproxy_log: Option<PathBuf>,
    certs_dir: Option<PathBuf>,
    acme_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRender {
    templates_dir: Option<PathBuf>,
}

/// The settings file `hapctl init` writes: every key with its default, commented.
pub const DEFAULT_SETTINGS_TOML: &str = r#"# hapctl settings. Relative paths are relative to the state directory.

[edge]
# Public HTTP listener of the edge.
http_bind = "127.0.0.1:8080"
# Public HTTPS listener ("" disables it). SNI picks the certificate; unknown names get the
# default certificate made by `hapctl init` (replace it with `hapctl cert import default`).
https_bind = "127.0.0.1:8443"
# App serving requests for unknown hosts, instead of the 404 page (an edge for one app).
# default_app = "shop"
# Normalise request URIs (percent case, unreserved decoding, //, /./, /../) before any rule
# reads them. An experimental HAProxy action (2.6+): on, the global section also gets
# expose-experimental-directives. Turn it off only for a HAProxy that refuses it.
# normalize_uri = true
# Unknown hosts get "404" (the unknown-host page) or "200" (the old manager's "site not
# configured" page on /). Both pages are templates (render.templates_dir).
# unknown_host = "404"
# HTTP/3 on the HTTPS port (UDP, QUIC): "auto" turns it on where `haproxy -vv` lists QUIC;
# true asks for it (an error where HAProxy has none), false turns it off.
# http3 = "auto"

[haproxy]
# Path of the haproxy binary (the HAPCTL_HAPROXY_BIN environment variable overrides it).
binary = "haproxy"
# "direct": hapctl runs the master itself. "systemd": a unit runs it (see dist/).
mode = "direct"
systemd_unit = "haproxy.service"
check_timeout = "30s"
reload_timeout = "30s"
start_timeout = "30s"
# When the master starts as root, its workers drop to this user and group ("" = stay as the
# starting user; group defaults to the user's primary group). `hapctl init` writes "haproxy"
# when that user exists. chroot (optional) cannot be used with [logs] target = "journald".
user = ""
# group = "haproxy"
# chroot = "/var/empty"

[paths]
# Every file HAProxy reads. For a production layout use absolute paths under /etc/haproxy.
config = "live/haproxy.cfg"
generation = "live/generation.cfg"
maps_dir = "live/maps"
pages_dir = "live/pages"
known_good_dir = "known-good"
run_dir = "run"
journal_dir = "journal"
database = "state.db"
blocks_database = "blocks.db"
master_socket = "run/master.sock"
admin_socket = "run/admin.sock"
pidfile = "run/haproxy.pid"
haproxy_log = "haproxy.log"
certs_dir = "live/certs"
acme_dir = "acme"

[api]
# `hapctl serve` listens here; every route but /health needs a bearer token: the admin one in
# token_file, or one `hapctl token add` made (docs/access.md).
listen = "127.0.0.1:9090"
token_file = "api-token"
# tls_cert = "api.pem"        # serve the API over TLS (with tls_key); needed off loopback
# tls_key = "api.key"
# certificate = "api.example.com" # or a certificate hapctl manages (hapctl cert), renewed in place
# client_ca = "clients.pem"   # then require client certificates this CA signed
# allow_plain_http = false    # plain HTTP off loopback: only behind a TLS proxy
# audit_retention = "90d"     # audit records older than this are deleted

[tls]
# Oldest TLS version of the HTTPS bind: "1.2" or "1.3".
min_version = "1.2"
# ciphers = "ECDHE-ECDSA-AES128-GCM-SHA256:..."   # TLS 1.2 cipher list (default: ECDHE + AEAD only)
# ciphersuites = "TLS_AES_128_GCM_SHA256:..."      # TLS 1.3 suites

[acme]
# The CA (default: Let's Encrypt production).
directory = "https://acme-v02.api.letsencrypt.org/directory"
# contact = "ops@example.com"
# ca_root = "/etc/hapctl/private-ca.pem"   # trust this root for the directory (private/test CA)
# Key of new certificates: ecdsa-p256, ecdsa-p384, rsa2048, rsa3072 or rsa4096.
key_type = "ecdsa-p256"
# DNS-01 (wildcards): run as `HOOK set _acme-challenge.example.com VALUE`, then `HOOK clear ...`.
# dns_hook = "/usr/local/bin/acme-dns-hook"
dns_propagation = "10s"
hook_timeout = "60s"
order_timeout = "180s"

[logs]
# Access log, one JSON line per request. "file": HAProxy keeps the lines in a ring of `buffer`
# bytes (per HAProxy process) and streams it over TCP to `listen` (loopback only), which
# `hapctl serve` reads, from HAProxy's own user only, and writes to `file` (rotated at
# max_size, `keep` old files). While `hapctl serve` is down the lines wait
# in the ring; the oldest are lost once it is full (requests are never affected).
# Or "syslog:HOST:PORT" (RFC 5424 over UDP) or "journald" (/dev/log, systemd hosts).
target = "file"
listen = "127.0.0.1:601"
file = "logs/access.log"
max_size = "100MiB"
keep = 5
buffer = "16MiB"

# [resolvers]
# DNS servers that resolve the servers' host names at runtime (e.g. Docker's 127.0.0.11:53
# for container names such as wp_site_1). Without it, names resolve only when HAProxy loads
# (a reload): a server whose name does not resolve then stays down until the next one.
# nameservers = ["127.0.0.11:53"]
# hold_valid = "10s"

[traffic]
# Traffic per domain (hapctl top, GET /v1/traffic, /metrics, the dashboard; docs/traffic.md),
# counted by hapctl serve from the access log (target "file") in memory: 1 min, 15 min, 1 h.
collect = true
top_domains = 20           # domains with their own series in /metrics; the rest as "(other)"
max_domains = 20000        # host names counted apart (about 1.5 KiB each); the rest as "(other)"

# [alerts]: who hears when something needs a person (docs/alerts.md).
# webhook = "https://hooks.example.com/…"   # or a list; webhook_format = "slack" for {"text"}
# smtp = "smtp+starttls://mail.example.com:587"   # smtp://, smtp+starttls://, smtps://
# smtp_user = "hapctl"; smtp_password_file = "smtp-password"   # 0600, never in this file
# email_from = "hapctl@edge.example.com"; email_to = ["ops@example.com"]
# cert_expiry = "14d"; error_ratio = 0.05; error_min_requests = 20
# restart_loop = 3; restart_window = "10m"; quiet = "5m"; check_every = "10s"; timeout = "10s"

# [waf]: the web application firewall agent (listen, crs, workers, timeout; docs/waf.md).

# [fleet]: several edges share one desired state in etcd (docs/fleet.md). Without it this edge
# is alone and its database is the desired state.
# endpoints = ["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"]
# name = "edge-a"                  # unique in the fleet
# prefix = "/hapctl"
# ca = "etcd-ca.pem"               # https endpoints; cert/key when etcd asks for a client one
# user = "hapctl"                  # etcd auth; the password in a 0600 file
# password_file = "etcd-password"
# timeout = "3s"                   # every etcd call
# full_read_every = "5m"           # the whole state read again, in case a watch missed an event
# rollout = "canary"               # a reload change: here first, then the fleet ("all": at once)
# peer = "10.0.0.1:10000"          # HAProxy's peers address: client tables shared by the fleet
# key_file = "fleet.key"           # seals certificates' keys in etcd: `hapctl fleet key`, same on every edge
[render]
# Optional folder whose templates override the embedded ones (same file names).
# templates_dir = "templates"

# Applications delivered as generations (`hapctl deliver VERSION`), one [[app]] each:
# [[app]]
# name = "shop"
# backend = "app_shop"            # HAProxy backend in the generation file
# server = "current"              # its single server line
# readiness_path = "/ready"       # must answer 200 several times before the cutover
# readiness_timeout = "30s"
# readiness_successes = 3
# version_path = "/version"       # optional: its body must equal the version
# port_range = "18200-18299"      # or: ports = { "1.4.2" = 18211, "1.5.0" = 18212 }
# hard_stop_after = "10m"         # optional: old workers (and their streams) are cut after this
# stop_grace = "10s"              # exec runner: SIGTERM, then SIGKILL after this
# [app.runner]
# kind = "exec"                   # or: kind = "systemd" with unit = "shop@{version}.service"
# command = "/opt/shop/bin/server --version {version} --port {port}"
"#;

impl Settings {
    /// Reads `STATE_DIR/hapctl.toml`.
    pub fn load(state_dir: &Path) -> Result<Settings, SettingsError> {
        let path = state_dir.join(SETTINGS_FILE);
        let text = std::fs::read_to_string(&path).map_err(|error| SettingsError::Read {
            path: path.clone(),
            error,
        })?;
        Settings::parse(state_dir, &path, &text)
    }

    /// Parses settings text; `file` is only used in error messages.
    pub fn parse(state_dir: &Path, file: &Path, text: &str) -> Result<Settings, SettingsError> {
        let raw: RawSettings = toml::from_str(text).map_err(|e| SettingsError::Parse {
            path: file.to_path_buf(),
            message: describe_toml_error(text, &e),
        })?;
        Settings::resolve(raw, absolute(state_dir)).map_err(|(key, message)| SettingsError::Value {
            path: file.to_path_buf(),
            key,
            message,
        })
    }

    /// Checks every value of `raw` and resolves its paths against `state_dir`, in the order
    /// of the file's sections.
    fn resolve(raw: RawSettings, state_dir: PathBuf) -> Result<Settings, Refused> {
        let resolve = |p: Option<PathBuf>, default: &str| -> PathBuf {
            let p = p.unwrap_or_else(|| PathBuf::from(default));
            if p.is_absolute() {
                p
            } else {
                state_dir.join(p)
            }
        };
        let http_bind = parse_addr("edge.http_bind", raw.edge.http_bind, LOCAL_HTTP)?;
        if http_bind.port() == 0 {
            return Err(refused("edge.http_bind")(
                "port 0 is not a listening port".into(),
            ));
        }
        let mut haproxy = resolve_haproxy(&raw.haproxy)?;
        let paths = Paths::resolve(raw.paths, &resolve)?;
        let render = RenderSettings {
            templates_dir: raw.render.templates_dir.map(|p| resolve(Some(p), "")),
        };
        let apps = apps::resolve(raw.app, &state_dir)?;
        let default_app = default_app(raw.edge.default_app, &apps)?;
        let https_bind = tls::parse_https_bind(raw.edge.https_bind.as_deref())?;
        if https_bind.is_some_and(|a| a == http_bind) {
            return Err(refused("edge.https_bind")(
                "must differ from edge.http_bind".into(),
            ));
        }
        let tls = tls::resolve_tls(raw.tls)?;
        let acme = tls::resolve_acme(raw.acme, |p| resolve(Some(p), ""))?;
        let logs = logs::resolve_logs(raw.logs, |p| resolve(Some(p), ""))?;
        let resolvers = resolvers::resolve_resolvers(raw.resolvers)?;
        let traffic = traffic::resolve_traffic(raw.traffic)?;
        let alerts = alerts::resolve_alerts(raw.alerts, |p| resolve(Some(p), ""))?;
        haproxy.privileges = privileges::resolve(
            raw.haproxy.user,
            raw.haproxy.group,
            raw.haproxy.chroot,
            haproxy.mode,
            &logs,
            |p| resolve(Some(p), ""),
        )?;
        let fleet = fleet::resolve_fleet(raw.fleet, |p| resolve(Some(p), ""))?;
        let api = api::resolve_api(raw.api, resolve, &paths.certs_dir)?;
        Ok(Settings {
            api,
            state_dir,
            edge: EdgeSettings {
                http_bind,
                https_bind,
                default_app,
                normalize_uri: raw.edge.normalize_uri.unwrap_or(true),
                unknown_host: unknown_host::resolve(raw.edge.unknown_host.as_deref())?,
                http3: http3::resolve(raw.edge.http3.as_ref(), https_bind.is_some())?,
                quic: None,
            },
            tls,
            acme,
            logs,
            resolvers,
            traffic,
            alerts,
            waf: waf::resolve_waf(raw.waf)?,
            fleet,
            haproxy,
            paths,
            render,
            apps,
        })
    }
}

/// A value the settings refuse: its key, and why.
type Refused = (String, String);

/// The refusal of `key`'s value, for `map_err`.
fn refused(key: &str) -> impl FnOnce(String) -> Refused + '_ {
    move |message| (key.to_string(), message)
}

const LOCAL_HTTP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);
const LOCAL_API: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9090);

/// An `IP:PORT` address, `default` when absent.
fn parse_addr(
    key: &str,
    value: Option<String>,
    default: SocketAddr,
) -> Result<SocketAddr, Refused> {
    match value {
        None => Ok(default),
        Some(s) => s.parse().map_err(|_| {
            refused(key)(format!(
                "{:?} is not an IP:PORT address such as \"{default}\"",
                bounded(&s)
            ))
        }),
    }
}

/// `[haproxy]` but its privileges, which depend on the logs.
fn resolve_haproxy(raw: &RawHaproxy) -> Result<HaproxySettings, Refused> {
    let binary = match std::env::var_os(HAPROXY_BIN_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => raw
            .binary
            .clone()
            .unwrap_or_else(|| PathBuf::from("haproxy")),
    };
    let systemd_unit = raw
        .systemd_unit
        .clone()
        .unwrap_or_else(|| "haproxy.service".into());
    if systemd_unit.is_empty()
        || !systemd_unit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@._-:".contains(c))
    {
        return Err(refused("haproxy.systemd_unit")(format!(
            "{systemd_unit:?} is not a systemd unit name"
        )));
    }
    let duration = |key: &str, v: &Option<String>, default: u64| {
        parse_duration(v.as_deref(), default).map_err(refused(key))
    };
    Ok(HaproxySettings {
        binary,
        mode: raw.mode.unwrap_or(Mode::Direct),
        systemd_unit,
        check_timeout: duration("haproxy.check_timeout", &raw.check_timeout, 30)?,
        reload_timeout: duration("haproxy.reload_timeout", &raw.reload_timeout, 30)?,
        start_timeout: duration("haproxy.start_timeout", &raw.start_timeout, 30)?,
        privileges: Privileges::default(),
    })
}

/// `[edge] default_app`: the name of an `[[app]]`.
fn default_app(
    name: Option<String>,
    apps: &[AppSettings],
) -> Result<Option<crate::model::AppName>, Refused> {
    let Some(name) = name else {
        return Ok(None);
    };
    match apps.iter().find(|a| a.name.as_str() == name) {
        Some(app) => Ok(Some(app.name.clone())),
        None => Err(refused("edge.default_app")(format!(
            "{:?} is not the name of an [[app]] entry",
            bounded(&name)
        ))),
    }
}

fn describe_read_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("{e}; run `hapctl init` to create the state directory")
        }
        std::io::ErrorKind::InvalidData => "the file is not UTF-8 text; fix or recreate it".into(),
        _ => e.to_string(),
    }
}

/// A TOML error with the line it is on and that line's text (which names the key), bounded.
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return e.message().to_string();
    };
    let start = span.start.min(text.len());
    let line_no = text[..start].matches('\n').count() + 1;
    let line = text[..start].rsplit('\n').next().unwrap_or("").to_string()
        + text[start..].split('\n').next().unwrap_or("");
    format!(
        "line {line_no} ({:?}): {}",
        bounded(line.trim()),
        e.message()
    )
}

/// A positive duration such as `30s`, or `default` seconds when absent.
fn parse_duration(v: Option<&str>, default: u64) -> Result<Duration, String> {
    match v {
        None => Ok(Duration::from_secs(default)),
        Some(s) => match humantime::parse_duration(s) {
            Ok(d) if d.is_zero() => Err("must be greater than zero".into()),
            Ok(d) => Ok(d),
            Err(e) => Err(format!(
                "{:?} is not a duration like \"30s\": {e}",
                bounded(s)
            )),
        },
    }
}

/// A path written into haproxy.cfg must be a plain token: no whitespace, quotes, `#` or `%`.
fn check_config_path(path: &Path) -> Result<(), String> {
    let s = path
        .to_str()
        .ok_or_else(|| format!("{path:?} is not valid UTF-8"))?;
    let shown = bounded(s);
    match s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "\"'#%\\$,{}".contains(*c))
    {
        Some(c) => Err(format!(
            "{shown:?} contains {c:?}; HAProxy paths may not contain whitespace, quotes, '#', '%', '$', ',', braces or backslashes"
        )),
        None => Ok(()),
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Settings, SettingsError> {
        Settings::parse(Path::new("/srv/hapctl"), Path::new("hapctl.toml"), text)
    }

    #[test]
    fn defaults_resolve_under_the_state_dir() {
        let s = parse(DEFAULT_SETTINGS_TOML).unwrap();
        assert_eq!(s.paths.config, Path::new("/srv/hapctl/live/haproxy.cfg"));
        assert_eq!(s.edge.http_bind.to_string(), "127.0.0.1:8080");
        assert_eq!(s.haproxy.mode, Mode::Direct);
        assert_eq!(s.haproxy.check_timeout, Duration::from_secs(30));
    }

    #[test]
    fn production_layout_keeps_absolute_paths() {
        let s = parse("[paths]\nconfig = \"/etc/haproxy/haproxy.cfg\"\n").unwrap();
        assert_eq!(s.paths.config, Path::new("/etc/haproxy/haproxy.cfg"));
        assert_eq!(s.paths.maps_dir, Path::new("/srv/hapctl/live/maps"));
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("[edge]\nhttp_bind = \"nope\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("edge.http_bind"), "{e}");
        let e = parse("[haproxy]\nmode = \"docker\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mode") || e.contains("docker"), "{e}");
        let e = parse("[edge]\nhttp_bnd = \"1.2.3.4:80\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http_bnd"), "{e}");
        let e = parse("[haproxy]\ncheck_timeout = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("haproxy.check_timeout"), "{e}");
        let e = parse("[paths]\nmaps_dir = \"/etc/ha proxy\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("paths.maps_dir"), "{e}");
    }
}
