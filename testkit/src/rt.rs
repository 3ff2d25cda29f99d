//! What the kit's async clients ([`crate::h2`], [`crate::h3`]) share: each client a runtime of
//! its own on its caller's thread (the kit's API stays blocking), its peer named in its errors
//! with a bound on every step, and the answer as the kit reads it.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// A one-thread runtime for one client: its tasks (the connection's driver) run while the
/// caller waits on a request.
pub(crate) fn runtime(client: &str) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the {client} client: {e}"))
}

/// Where a client talks to, as its error messages name it.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// `HTTP/2`, `HTTP/3`.
    pub proto: &'static str,
    pub to: SocketAddr,
    /// The SNI and the requests' authority.
    pub host: String,
}

impl Peer {
    /// `host` on 127.0.0.1:`port`.
    pub fn loopback(proto: &'static str, port: u16, host: &str) -> Peer {
        Peer {
            proto,
            to: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            host: host.to_string(),
        }
    }

    pub fn failed(&self, what: &str, e: impl std::fmt::Display) -> String {
        let Peer { proto, to, host } = self;
        format!("{proto} to {to} (SNI {host}): {what}: {e}")
    }

    /// Runs `step` on `runtime`; an error naming the peer once `limit` has passed.
    pub fn within<T>(
        &self,
        runtime: &tokio::runtime::Runtime,
        limit: Duration,
        step: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        runtime.block_on(async {
            tokio::time::timeout(limit, step).await.unwrap_or_else(|_| {
                Err(format!(
                    "no {} answer from {} within {limit:?}",
                    self.proto, self.to
                ))
            })
        })
    }
}

/// An HTTP/2 or HTTP/3 answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// Names lowercase, as HTTP/2 and HTTP/3 send them.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::http::header(&self.headers, name)
    }
}

/// Headers as (lowercase name, value) pairs, as HTTP/2 and HTTP/3 send them.
pub(crate) fn header_pairs(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}
