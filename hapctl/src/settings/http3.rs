//! `[edge] http3`: whether the edge serves HTTP/3 (QUIC) on the HTTPS address's UDP port.
//! What the settings ask for becomes [`Quic`] (or nothing) against the HAProxy binary in use:
//! `crate::quic` decides, since that takes running `haproxy -vv`.

/// What `[edge] http3` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http3 {
    /// `"auto"` (the default): on where `haproxy -vv` lists QUIC and HTTPS is on.
    #[default]
    Auto,
    /// `true`: on, and an error naming why where the HAProxy in use has no QUIC.
    On,
    /// `false`: TCP only.
    Off,
}

/// HTTP/3 as this edge serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quic {
    /// HAProxy's QUIC runs on OpenSSL's compatibility layer (`+QUIC_OPENSSL_COMPAT`): it
    /// starts QUIC listeners only with `limited-quic` in the global section.
    pub limited: bool,
    /// The `cluster-secret` its stateless-reset and retry tokens are derived from.
    pub cluster_secret: ClusterSecret,
}

/// The QUIC cluster secret: 32 random bytes as hex, made once and kept (0600) so that tokens
/// stay valid across reloads and restarts. Never printed: its `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    /// Parses the secret file's text: 64 hex digits (a newline after them is fine).
    pub fn parse(text: &str) -> Option<ClusterSecret> {
        let hex = text.trim_end_matches('\n');
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| ClusterSecret(hex.to_ascii_lowercase()))
    }

    /// For the global section of haproxy.cfg, which only the master (root) reads.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

/// `None` is the default; an error is `(key, message)`.
pub(super) fn resolve(raw: Option<&toml::Value>, https: bool) -> Result<Http3, (String, String)> {
    let refused = |message: String| Err(("edge.http3".to_string(), message));
    let asked = match raw {
        None => Http3::Auto,
        Some(toml::Value::Boolean(true)) => Http3::On,
        Some(toml::Value::Boolean(false)) => Http3::Off,
        Some(toml::Value::String(s)) if s == "auto" => Http3::Auto,
        Some(other) => {
            return refused(format!(
                "{} must be true, false or \"auto\" (on where HAProxy has QUIC)",
                crate::model::bounded(&other.to_string())
            ))
        }
    };
    if asked == Http3::On && !https {
        return refused(
            "true needs edge.https_bind: HTTP/3 runs over QUIC, which is TLS on the HTTPS port"
                .into(),
        );
    }
    Ok(asked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_false_and_auto_are_accepted_and_true_needs_https() {
        let v = |s: &str| toml::from_str::<toml::Table>(&format!("x = {s}")).unwrap()["x"].clone();
        assert_eq!(resolve(None, true), Ok(Http3::Auto));
        assert_eq!(resolve(Some(&v("\"auto\"")), true), Ok(Http3::Auto));
        assert_eq!(resolve(Some(&v("true")), true), Ok(Http3::On));
        assert_eq!(resolve(Some(&v("false")), false), Ok(Http3::Off));
        let (key, message) = resolve(Some(&v("true")), false).unwrap_err();
        assert_eq!(key, "edge.http3");
        assert!(message.contains("edge.https_bind"), "{message}");
        for bad in ["\"yes\"", "1", "\"AUTO\""] {
            let (_, message) = resolve(Some(&v(bad)), true).unwrap_err();
            assert!(
                message.contains("must be true, false or \"auto\""),
                "{message}"
            );
        }
    }

    #[test]
    fn a_secret_is_64_hex_digits_and_never_debug_printed() {
        let hex = "ab".repeat(32);
        let secret = ClusterSecret::parse(&format!("{hex}\n")).unwrap();
        assert_eq!(secret.expose(), hex);
        assert!(!format!("{secret:?}").contains("ab"));
        for bad in ["", "ab", &"zz".repeat(32), &"ab".repeat(33)] {
            assert!(ClusterSecret::parse(bad).is_none(), "{bad:?}");
        }
    }
}
