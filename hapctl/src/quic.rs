//! HTTP/3: what `[edge] http3` becomes for the HAProxy in use (`haproxy -vv` lists QUIC or
//! not, on OpenSSL's compatibility layer or not), and the cluster secret its tokens are
//! derived from, made once and kept across reloads and restarts (`STATE_DIR/quic/
//! cluster-secret`, 0600 in a 0700 folder).

use std::path::{Path, PathBuf};

use crate::fsutil;
use crate::haproxy::{Features, Validator, VersionError};
use crate::settings::{ClusterSecret, Http3, Quic, Settings};

#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("edge.http3 = true, but {binary} ({version}) was built without QUIC (`haproxy -vv` lists -QUIC): use a HAProxy built with QUIC (Debian 13's, or 3.2 and later), or set edge.http3 = \"auto\" or false")]
    NotBuiltIn { binary: String, version: String },
    #[error("edge.http3 = true, but what {binary} was built with is unknown: {source}")]
    Unknown {
        binary: String,
        #[source]
        source: VersionError,
    },
    #[error("the QUIC cluster secret {path} {why}")]
    Secret { path: String, why: String },
}

/// Whether the settings ask for HTTP/3 where it could be served: only then does [`resolve`]
/// need to know what HAProxy was built with.
pub fn wanted(settings: &Settings) -> bool {
    settings.edge.http3 != Http3::Off && settings.edge.https_bind.is_some()
}

/// HTTP/3 as this edge serves it with its settings and its HAProxy, whose build `features`
/// are (`haproxy -vv`; `None`: TCP only).
pub fn resolve(
    settings: &Settings,
    features: Result<Features, VersionError>,
) -> Result<Option<Quic>, QuicError> {
    let asked = settings.edge.http3;
    if !wanted(settings) {
        return Ok(None);
    }
    let validator = Validator::from_settings(settings);
    let binary = settings.haproxy.binary.display().to_string();
    let features = match features {
        Ok(features) => features,
        Err(e) if asked == Http3::Auto => {
            tracing::debug!("HTTP/3 off: cannot tell what {binary} was built with: {e}");
            return Ok(None);
        }
        Err(source) => return Err(QuicError::Unknown { binary, source }),
    };
    match (features.quic, asked) {
        (true, _) => Ok(Some(Quic {
            limited: features.quic_openssl_compat,
            cluster_secret: cluster_secret(&secret_path(settings))?,
        })),
        (false, Http3::On) => Err(QuicError::NotBuiltIn {
            version: validator.version().unwrap_or_else(|e| e.to_string()),
            binary,
        }),
        (false, _) => Ok(None),
    }
}

pub fn secret_path(settings: &Settings) -> PathBuf {
    settings.state_dir.join("quic").join("cluster-secret")
}

/// The secret in `path`, made there first if there is none.
fn cluster_secret(path: &Path) -> Result<ClusterSecret, QuicError> {
    let failed = |why: String| QuicError::Secret {
        path: path.display().to_string(),
        why,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => ClusterSecret::parse(&text).ok_or_else(|| {
            failed("is not 64 hex digits: remove it and hapctl makes another (QUIC clients then reconnect once)".into())
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            aws_lc_rs::rand::fill(&mut bytes)
                .map_err(|_| failed("cannot be made: the system gave no random numbers".into()))?;
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            fsutil::write_secret(path, format!("{hex}\n").as_bytes())
                .map_err(|e| failed(format!("cannot be written: {e}")))?;
            ClusterSecret::parse(&hex).ok_or_else(|| failed("was made malformed".into()))
        }
        Err(e) => Err(failed(format!("cannot be read: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_secret_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("quic/cluster-secret");
        let first = cluster_secret(&path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(
            cluster_secret(&path).unwrap(),
            first,
            "kept, not made again"
        );
        std::fs::write(&path, "garbage").unwrap();
        let e = cluster_secret(&path).unwrap_err().to_string();
        assert!(
            e.contains("not 64 hex digits") && !e.contains("garbage"),
            "{e}"
        );
    }
}
