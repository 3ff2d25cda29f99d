//! Backend profiles: how a domain's backend is shaped for its kind of traffic.

use std::fmt;
use std::str::FromStr;

use super::error::{describe_char, serde_via_str, Invalid};

/// A request path for health checks: starts with `/`, at most 256 characters of
/// `[A-Za-z0-9-._~/?=&+]` — nothing HAProxy's tokenizer would read as a separator, quote,
/// comment or variable.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HttpPath(String);

impl HttpPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for HttpPath {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<HttpPath, Invalid> {
        let err = |rule: String| Invalid::new("path", s, rule);
        if !s.starts_with('/') {
            return Err(err("must start with '/'".into()));
        }
        if s.len() > 256 {
            return Err(err("is longer than 256 characters".into()));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-._~/?=&+".contains(*c)))
        {
            return Err(err(format!(
                "contains {}; allowed: letters, digits and - . _ ~ / ? = & +",
                describe_char(c)
            )));
        }
        Ok(HttpPath(s.to_string()))
    }
}

impl fmt::Display for HttpPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(HttpPath);

/// How a domain's backend treats its connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Profile {
    /// Short HTTP requests.
    #[default]
    Default,
    /// Long-lived tunnels (WebSocket upgrades): long tunnel timeout, least-connections balancing.
    WebSocket,
    /// Server-sent events: long server timeout, no buffering delay.
    Sse,
    /// The old manager's long-lived backends (its `websocket` and `longlived` templates):
    /// 6 h server, tunnel and keep-alive timeouts, no buffering delay.
    LongLived,
    /// Servers are health-checked with `GET <path>` expecting a 2xx/3xx.
    HttpCheck(HttpPath),
}

impl Profile {
    /// The old manager's backend template (`template_override`, empty for its default) as a
    /// profile; `None` for a name it did not ship. Its `longlived` and `websocket` templates
    /// rendered the same 6 h directives, hence one profile.
    pub fn from_template(name: &str) -> Option<Profile> {
        match name.trim() {
            "" | "hap_backend" | "hap_backend_basic" => Some(Profile::Default),
            "hap_backend_longlived" | "hap_backend_websocket" => Some(Profile::LongLived),
            "hap_backend_http_check" => Some(Profile::HttpCheck(HttpPath("/".into()))),
            _ => None,
        }
    }

    /// Whether the old manager sent a domain's event streams to an `-sse-backend` twin: its
    /// default, `websocket` and `longlived` templates rendered one and its exact-domain ACLs
    /// routed to it; `basic`, `http_check` and its wildcard ACLs had none (`docs/compat.md`).
    pub fn template_sse_routing(name: &str, wildcard: bool) -> bool {
        let twin = [
            "",
            "hap_backend",
            "hap_backend_websocket",
            "hap_backend_longlived",
        ];
        !wildcard && twin.contains(&name.trim())
    }
}

impl FromStr for Profile {
    type Err = Invalid;
    /// `default`, `websocket`, `sse`, `http-check` (path `/`) or `http-check:/path`.
    fn from_str(s: &str) -> Result<Profile, Invalid> {
        match s {
            "default" => Ok(Profile::Default),
            "websocket" => Ok(Profile::WebSocket),
            "sse" => Ok(Profile::Sse),
            "long-lived" => Ok(Profile::LongLived),
            "http-check" => Ok(Profile::HttpCheck(HttpPath("/".into()))),
            _ => match s.strip_prefix("http-check:") {
                Some(path) => {
                    Ok(Profile::HttpCheck(path.parse().map_err(|e: Invalid| {
                        Invalid::new("profile", s, e.rule)
                    })?))
                }
                None => Err(Invalid::new(
                    "profile",
                    s,
                    "must be default, websocket, sse, long-lived, http-check or http-check:/path",
                )),
            },
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Profile::Default => f.write_str("default"),
            Profile::WebSocket => f.write_str("websocket"),
            Profile::Sse => f.write_str("sse"),
            Profile::LongLived => f.write_str("long-lived"),
            Profile::HttpCheck(p) => write!(f, "http-check:{p}"),
        }
    }
}
serde_via_str!(Profile);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_round_trip() {
        for s in [
            "default",
            "websocket",
            "sse",
            "long-lived",
            "http-check:/healthz?full=1",
        ] {
            assert_eq!(s.parse::<Profile>().unwrap().to_string(), s);
        }
        assert_eq!(
            "http-check".parse::<Profile>().unwrap().to_string(),
            "http-check:/"
        );
    }

    #[test]
    fn refuses_unknown_profiles_and_unsafe_paths() {
        assert!("grpc"
            .parse::<Profile>()
            .unwrap_err()
            .to_string()
            .contains("must be default"));
        for bad in [
            "http-check:health",
            "http-check:/a b",
            "http-check:/a#b",
            "http-check:/%[src]",
            "http-check:/\"x\"",
        ] {
            assert!(bad.parse::<Profile>().is_err(), "{bad}");
        }
    }
}
