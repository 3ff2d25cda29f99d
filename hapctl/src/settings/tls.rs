//! `[tls]` (how the HTTPS bind negotiates) and `[acme]` (where certificates come from).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::parse_duration;
use crate::model::bounded;

/// Let's Encrypt's production directory: the default CA, as with Caddy and certbot.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// ECDHE with AEAD ciphers only, for TLS 1.2 (TLS 1.3 suites are all modern).
const DEFAULT_CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
const DEFAULT_CIPHERSUITES: &str =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

/// The key types `tls::KeyType` parses.
pub const KEY_TYPES: [&str; 5] = ["ecdsa-p256", "ecdsa-p384", "rsa2048", "rsa3072", "rsa4096"];

/// Oldest protocol version the HTTPS bind accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    V12,
    V13,
}

impl TlsVersion {
    /// HAProxy's name (`ssl-min-ver`).
    pub fn haproxy_name(self) -> &'static str {
        match self {
            TlsVersion::V12 => "TLSv1.2",
            TlsVersion::V13 => "TLSv1.3",
        }
    }
}

#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub min_version: TlsVersion,
    /// OpenSSL cipher list for TLS ≤ 1.2 (checked to be a plain token).
    pub ciphers: String,
    /// TLS 1.3 cipher suites.
    pub ciphersuites: String,
}

#[derive(Debug, Clone)]
pub struct AcmeSettings {
    /// The CA's directory URL.
    pub directory: String,
    /// `mailto:` contact given to the CA (expiry notices, policy changes).
    pub contact: Option<String>,
    /// A root certificate (PEM) to trust for the connection to the directory, for a private or
    /// test CA; without it the system's roots are used.
    pub ca_root: Option<PathBuf>,
    /// Key type of new certificates (`ecdsa-p256`, `ecdsa-p384`, `rsa2048`, `rsa3072`,
    /// `rsa4096`); parsed by `tls::KeyType`.
    pub key_type: String,
    /// DNS-01 hook: run as `HOOK set RECORD VALUE` and `HOOK clear RECORD VALUE`.
    pub dns_hook: Option<Vec<String>>,
    /// Wait after the hook published the record, before the CA is asked to look.
    pub dns_propagation: Duration,
    /// Bound on one hook run.
    pub hook_timeout: Duration,
    /// Bound on one whole order (authorizations, finalization, download).
    pub order_timeout: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    min_version: Option<String>,
    ciphers: Option<String>,
    ciphersuites: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAcme {
    directory: Option<String>,
    contact: Option<String>,
    ca_root: Option<PathBuf>,
    key_type: Option<String>,
    dns_hook: Option<String>,
    dns_propagation: Option<String>,
    hook_timeout: Option<String>,
    order_timeout: Option<String>,
}

/// An error is `(key, message)`.
pub(super) fn resolve_tls(raw: RawTls) -> Result<TlsSettings, (String, String)> {
    let err = |key: &str, m: String| (format!("tls.{key}"), m);
    let min_version = match raw.min_version.as_deref() {
        None | Some("1.2") => TlsVersion::V12,
        Some("1.3") => TlsVersion::V13,
        Some(other) => {
            return Err(err(
                "min_version",
                format!("{:?} is not \"1.2\" or \"1.3\"", bounded(other)),
            ))
        }
    };
    let list = |key: &str, v: Option<String>, default: &str| {
        let v = v.unwrap_or_else(|| default.to_string());
        // Pasted into the bind line: only the characters of OpenSSL cipher strings.
        if v.is_empty()
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ":-_+!@=.".contains(c))
        {
            return Err(err(
                key,
                format!(
                    "{:?} is not an OpenSSL cipher list (names separated by ':')",
                    bounded(&v)
                ),
            ));
        }
        Ok(v)
    };
    Ok(TlsSettings {
        min_version,
        ciphers: list("ciphers", raw.ciphers, DEFAULT_CIPHERS)?,
        ciphersuites: list("ciphersuites", raw.ciphersuites, DEFAULT_CIPHERSUITES)?,
    })
}

/// An error is `(key, message)`.
pub(super) fn resolve_acme(
    raw: RawAcme,
    resolve: impl Fn(PathBuf) -> PathBuf,
) -> Result<AcmeSettings, (String, String)> {
    let err = |key: &str, m: String| (format!("acme.{key}"), m);
    let directory = raw.directory.unwrap_or_else(|| LETS_ENCRYPT.to_string());
    if !directory.starts_with("https://") || directory.chars().any(|c| c.is_whitespace()) {
        return Err(err(
            "directory",
            format!(
                "{:?} is not an https:// URL; ACME directories are served over HTTPS",
                bounded(&directory)
            ),
        ));
    }
    let contact = match raw.contact {
        None => None,
        Some(c) if c.is_empty() => None,
        Some(c) => {
            let mail = c.strip_prefix("mailto:").unwrap_or(&c);
            let ok = mail.split_once('@').is_some_and(|(user, host)| {
                !user.is_empty()
                    && host.contains('.')
                    && mail
                        .chars()
                        .all(|ch| ch.is_ascii_graphic() && !"<>\"',;".contains(ch))
            });
            if !ok {
                return Err(err(
                    "contact",
                    format!("{:?} is not an e-mail address", bounded(&c)),
                ));
            }
            Some(format!("mailto:{mail}"))
        }
    };
    let key_type = raw.key_type.unwrap_or_else(|| "ecdsa-p256".into());
    if !KEY_TYPES.contains(&key_type.as_str()) {
        return Err(err(
            "key_type",
            format!(
                "{:?} is not a key type; use one of {}",
                bounded(&key_type),
                KEY_TYPES.join(", ")
            ),
        ));
    }
    let dns_hook = match raw.dns_hook {
        None => None,
        Some(h) if h.trim().is_empty() => None,
        Some(h) => Some(h.split_whitespace().map(String::from).collect()),
    };
    let duration = |key: &str, v: Option<String>, default: u64| {
        parse_duration(v.as_deref(), default).map_err(|m| err(key, m))
    };
    Ok(AcmeSettings {
        directory,
        contact,
        ca_root: raw.ca_root.map(&resolve),
        key_type,
        dns_hook,
        dns_propagation: match raw.dns_propagation.as_deref() {
            Some("0s") | Some("0") => Duration::ZERO,
            other => duration("dns_propagation", other.map(String::from), 10)?,
        },
        hook_timeout: duration("hook_timeout", raw.hook_timeout, 60)?,
        order_timeout: duration("order_timeout", raw.order_timeout, 180)?,
    })
}

/// `""` disables the HTTPS bind; anything else must be IP:PORT.
pub(super) fn parse_https_bind(
    v: Option<&str>,
) -> Result<Option<std::net::SocketAddr>, (String, String)> {
    let key = "edge.https_bind".to_string();
    match v {
        None => Ok(Some(std::net::SocketAddr::from(([127, 0, 0, 1], 8443)))),
        Some("") => Ok(None),
        Some(s) => match s.parse::<std::net::SocketAddr>() {
            Ok(a) if a.port() != 0 => Ok(Some(a)),
            _ => Err((
                key,
                format!(
                    "{:?} is not an IP:PORT address such as \"127.0.0.1:8443\" (or \"\" to disable HTTPS)",
                    bounded(s)
                ),
            )),
        },
    }
}
