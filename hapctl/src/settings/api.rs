//! `[api]`: where `hapctl serve` listens, its token file, TLS and the audit trail's retention
//! (`docs/access.md`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{parse_addr, parse_duration, refused, Refused, LOCAL_API};

/// How long audit records are kept by default: 90 days.
const DEFAULT_RETENTION_SECS: u64 = 90 * 24 * 3600;

/// The HTTP API daemon (`hapctl serve`).
#[derive(Debug, Clone)]
pub struct ApiSettings {
    pub listen: SocketAddr,
    /// File holding the `default` admin token (created mode 0600 by `hapctl init`).
    pub token_file: PathBuf,
    /// Served over TLS when set.
    pub tls: Option<ApiTls>,
    /// Plain HTTP on a non-loopback address, which sends tokens in clear: refused unless set.
    pub allow_plain_http: bool,
    /// Audit records older than this are deleted.
    pub audit_retention: Duration,
}

/// `tls_cert`, `tls_key` and, for client certificates (mTLS), `client_ca`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("refusing to serve the API in plain HTTP on {0}, a non-loopback address: tokens would cross the network in clear. Set [api] tls_cert and tls_key (docs/access.md), listen on 127.0.0.1, or set [api] allow_plain_http = true if a TLS proxy in front of it is the only way in")]
pub struct PlainHttpRefused(pub SocketAddr);

impl ApiSettings {
    /// Whether the API may listen on `listen` (the setting, or `hapctl serve --listen`).
    pub fn check_listen(&self, listen: SocketAddr) -> Result<(), PlainHttpRefused> {
        if self.tls.is_none() && !self.allow_plain_http && !listen.ip().is_loopback() {
            return Err(PlainHttpRefused(listen));
        }
        Ok(())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    listen: Option<String>,
    token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    /// A certificate hapctl manages (`hapctl cert`), by name, instead of tls_cert/tls_key.
    certificate: Option<String>,
    client_ca: Option<PathBuf>,
    allow_plain_http: Option<bool>,
    audit_retention: Option<String>,
}

/// `certs_dir` holds the certificates hapctl manages (chain and key in one file per name).
pub(super) fn resolve_api(
    raw: RawApi,
    resolve: impl Fn(Option<PathBuf>, &str) -> PathBuf,
    certs_dir: &std::path::Path,
) -> Result<ApiSettings, Refused> {
    let (tls_cert, tls_key) = match (raw.certificate, raw.tls_cert, raw.tls_key) {
        (Some(name), None, None) => {
            let name: crate::model::CertName = name
                .parse()
                .map_err(|e: crate::model::Invalid| refused("api.certificate")(e.to_string()))?;
            // The file HAProxy loads for it (`tls::crtlist::pem_path`): chain, then key.
            let pem = certs_dir.join(format!("{name}.pem"));
            (Some(pem.clone()), Some(pem))
        }
        (Some(_), _, _) => {
            return Err(refused("api.certificate")(
                "name a certificate hapctl manages, or tls_cert and tls_key: not both".into(),
            ))
        }
        (None, cert, key) => (cert, key),
    };
    let tls = match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => Some(ApiTls {
            cert: resolve(Some(cert), ""),
            key: resolve(Some(key), ""),
            client_ca: raw.client_ca.map(|p| resolve(Some(p), "")),
        }),
        (None, None) if raw.client_ca.is_some() => {
            return Err(refused("api.client_ca")(
                "client certificates need TLS: set api.tls_cert and api.tls_key too".into(),
            ))
        }
        (None, None) => None,
        (Some(_), None) => return Err(refused("api.tls_key")("api.tls_cert needs its key".into())),
        (None, Some(_)) => {
            return Err(refused("api.tls_cert")(
                "api.tls_key needs its certificate".into(),
            ))
        }
    };
    Ok(ApiSettings {
        listen: parse_addr("api.listen", raw.listen, LOCAL_API)?,
        token_file: resolve(raw.token_file, "api-token"),
        tls,
        allow_plain_http: raw.allow_plain_http.unwrap_or(false),
        audit_retention: parse_duration(raw.audit_retention.as_deref(), DEFAULT_RETENTION_SECS)
            .map_err(refused("api.audit_retention"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(toml: &str) -> Result<ApiSettings, Refused> {
        let raw: RawApi = toml::from_str(toml).unwrap();
        resolve_api(
            raw,
            |p, d| PathBuf::from("/s").join(p.unwrap_or_else(|| d.into())),
            std::path::Path::new("/s/live/certs"),
        )
    }

    #[test]
    fn plain_http_is_refused_off_loopback_unless_allowed_or_tls() {
        let plain = api("").unwrap();
        let public: SocketAddr = "192.0.2.10:9090".parse().unwrap();
        assert!(plain
            .check_listen("127.0.0.2:9090".parse().unwrap())
            .is_ok());
        assert!(plain.check_listen("[::1]:9090".parse().unwrap()).is_ok());
        let e = plain.check_listen(public).unwrap_err();
        assert!(e.to_string().contains("tls_cert") && e.to_string().contains("allow_plain_http"));
        assert!(api("allow_plain_http = true")
            .unwrap()
            .check_listen(public)
            .is_ok());
        let tls = api("tls_cert = \"c.pem\"\ntls_key = \"k.pem\"").unwrap();
        assert!(tls.check_listen(public).is_ok());
        assert_eq!(tls.tls.unwrap().cert, PathBuf::from("/s/c.pem"));
    }

    #[test]
    fn half_a_tls_setting_is_refused() {
        assert_eq!(api("tls_cert = \"c\"").unwrap_err().0, "api.tls_key");
        assert_eq!(api("tls_key = \"k\"").unwrap_err().0, "api.tls_cert");
        assert_eq!(api("client_ca = \"ca\"").unwrap_err().0, "api.client_ca");
        let managed = api("certificate = \"api.example.com\"")
            .unwrap()
            .tls
            .unwrap();
        assert_eq!(
            managed.cert,
            PathBuf::from("/s/live/certs/api.example.com.pem")
        );
        assert_eq!(managed.key, managed.cert, "chain and key in one file");
        let both = api("certificate = \"a.example.com\"\ntls_cert = \"c\"\ntls_key = \"k\"");
        assert_eq!(both.unwrap_err().0, "api.certificate");
        assert_eq!(
            api("certificate = \"../x\"").unwrap_err().0,
            "api.certificate"
        );
        assert_eq!(
            api("audit_retention = \"soon\"").unwrap_err().0,
            "api.audit_retention"
        );
        assert_eq!(
            api("").unwrap().audit_retention,
            Duration::from_secs(90 * 86400)
        );
    }
}
