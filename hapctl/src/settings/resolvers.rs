//! `[resolvers]`: the DNS servers HAProxy asks, at runtime, for the addresses of servers named
//! by host name (a container's name on Docker's network, a service name). Either way a server
//! whose name does not resolve when HAProxy loads waits in maintenance (`init-addr
//! last,libc,none`) while the others serve. Without it, names are resolved only then (libc),
//! so such a server stays down until a reload finds its name; with it, HAProxy follows the
//! name and puts the server in service as soon as it resolves.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::model::{bounded, Interval};

/// The `resolvers` section's name in haproxy.cfg.
pub const RESOLVERS_NAME: &str = "hapctl";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverSettings {
    /// `IP:PORT` of each DNS server (at most 8), asked in turn.
    pub nameservers: Vec<SocketAddr>,
    /// How long an answer is used before it is asked again (`hold valid`).
    pub hold_valid: Interval,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResolvers {
    nameservers: Option<Vec<String>>,
    hold_valid: Option<String>,
}

const MAX_NAMESERVERS: usize = 8;

/// `None` when the section is absent; an error is `(key, message)`.
pub(super) fn resolve_resolvers(
    raw: Option<RawResolvers>,
) -> Result<Option<ResolverSettings>, (String, String)> {
    let Some(raw) = raw else { return Ok(None) };
    let err = |key: &str, m: String| (format!("resolvers.{key}"), m);
    let list = raw.nameservers.unwrap_or_default();
    if list.is_empty() || list.len() > MAX_NAMESERVERS {
        return Err(err(
            "nameservers",
            format!("give 1 to {MAX_NAMESERVERS} DNS servers as \"IP:PORT\" (Docker's is \"127.0.0.11:53\")"),
        ));
    }
    let nameservers = list
        .iter()
        .map(|s| {
            s.parse::<SocketAddr>()
                .ok()
                .filter(|a| a.port() != 0)
                .ok_or_else(|| {
                    err(
                        "nameservers",
                        format!("{:?} is not IP:PORT (IPv6 in brackets)", bounded(s)),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let hold_valid = match raw.hold_valid.as_deref() {
        None => "10s".parse().expect("a valid interval"),
        Some(s) => s
            .parse()
            .map_err(|e: crate::model::Invalid| err("hold_valid", e.rule))?,
    };
    Ok(Some(ResolverSettings {
        nameservers,
        hold_valid,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(list: &[&str]) -> Option<RawResolvers> {
        Some(RawResolvers {
            nameservers: Some(list.iter().map(|s| s.to_string()).collect()),
            hold_valid: None,
        })
    }

    #[test]
    fn nameservers_are_addresses() {
        assert_eq!(resolve_resolvers(None).unwrap(), None);
        let r = resolve_resolvers(raw(&["127.0.0.11:53", "[::1]:5353"]))
            .unwrap()
            .unwrap();
        assert_eq!(r.nameservers.len(), 2);
        assert_eq!(r.hold_valid.to_string(), "10s");
        for bad in [
            &[][..],
            &["127.0.0.11"],
            &["dns.example:53"],
            &["1.2.3.4:0"],
            &["1.2.3.4:53\nnameserver x 1.1.1.1:53"],
        ] {
            let (key, _) = resolve_resolvers(raw(bad)).unwrap_err();
            assert_eq!(key, "resolvers.nameservers", "{bad:?}");
        }
        let (key, _) = resolve_resolvers(Some(RawResolvers {
            nameservers: Some(vec!["127.0.0.11:53".into()]),
            hold_valid: Some("forever".into()),
        }))
        .unwrap_err();
        assert_eq!(key, "resolvers.hold_valid");
    }
}
