//! The synthetic edge every section measures: N domains (4 in 5 exact, 1 in 5 wildcard, with
//! a mix of profiles), 1–3 servers each, a few hundred blocked IPs and networks, and a couple of
//! trusted proxies. Deterministic: the same N always gives the same state.

use hapctl::model::{
    Backend, Block, BlockKey, Domain, EdgeState, Note, Profile, ProxyNet, Server, ServerName,
};

/// Blocked keys in every fixture, whatever N.
pub const BLOCKS: usize = 300;

/// Where the servers of the fixture point.
#[derive(Debug, Clone, Copy)]
pub enum Servers<'a> {
    /// Spread over 10.0.0.0/8 (for rendering only: nothing is contacted).
    Spread,
    /// All at one real backend (e.g. `127.0.0.1:PORT`), health checks off.
    At(&'a str),
}

/// The name of the `i`-th domain.
pub fn domain(i: usize) -> Domain {
    let text = if i % 5 == 4 {
        format!("*.tenant-{i}.example.net")
    } else {
        format!("app-{i}.example.com")
    };
    text.parse().expect("fixture domain names are valid")
}

fn profile(i: usize) -> Profile {
    let text = match i % 20 {
        3 => "websocket",
        7 => "sse",
        11 => "http-check:/healthz",
        _ => "default",
    };
    text.parse().expect("fixture profiles are valid")
}

/// The backend of the `i`-th domain: 1–3 servers.
pub fn backend(i: usize, servers: Servers<'_>) -> Backend {
    let list = (0..1 + i % 3)
        .map(|s| {
            let spec = match servers {
                Servers::Spread => {
                    let options = match (i + s) % 4 {
                        0 => ",weight=10",
                        1 => ",maxconn=500",
                        2 => ",nocheck",
                        _ => "",
                    };
                    format!(
                        "10.{}.{}.{}:{}{options}",
                        (i >> 16) & 0xff,
                        (i >> 8) & 0xff,
                        (i & 0xff).max(1),
                        8000 + s
                    )
                }
                Servers::At(addr) => format!("{addr},nocheck"),
            };
            Server::parse_spec(&spec, ServerName::nth(s + 1)).expect("fixture servers are valid")
        })
        .collect();
    Backend::new(list, profile(i)).expect("fixture backends are valid")
}

/// The `i`-th blocked key: mostly single addresses, every 10th a /24, every 50th IPv6.
pub fn block(i: usize) -> Block {
    let key = if i.is_multiple_of(50) {
        format!("2001:db8:{:x}::/48", i + 1)
    } else if i.is_multiple_of(10) {
        format!("203.0.{}.0/24", i % 256)
    } else {
        format!("198.18.{}.{}", (i >> 8) & 0xff, i & 0xff)
    };
    let key: BlockKey = key.parse().expect("fixture block keys are valid");
    Block {
        key,
        reason: Note::parse("reason", "hapctl-bench fixture").expect("valid note"),
        author: Note::parse("author", "hapctl-bench").expect("valid note"),
        created_at: 1_700_000_000,
        expires_at: None,
    }
}

pub fn trusted_proxies() -> Vec<ProxyNet> {
    ["192.0.2.10", "192.0.2.128/25"]
        .iter()
        .map(|s| s.parse().expect("fixture proxies are valid"))
        .collect()
}

/// The whole state with `n` domains.
pub fn state(n: usize, servers: Servers<'_>) -> EdgeState {
    let mut state = EdgeState::default();
    for i in 0..n {
        state.domains.insert(domain(i), backend(i, servers));
    }
    state.trusted_proxies.extend(trusted_proxies());
    state
}

/// A block of the address `ip` for `reason`, as the bench writes it (no expiry).
pub fn address_block(ip: std::net::Ipv4Addr, reason: &str) -> Block {
    Block {
        key: ip.to_string().parse().expect("a valid address"),
        reason: Note::parse("reason", reason).expect("a valid note"),
        author: Note::parse("author", "hapctl-bench").expect("a valid note"),
        created_at: 1_700_000_000,
        expires_at: None,
    }
}

/// The fixture's blocks (they live beside the state, in their own database).
pub fn blocks() -> Vec<Block> {
    (0..BLOCKS).map(block).collect()
}
