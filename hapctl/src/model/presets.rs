//! Named, shipped sets of trusted proxies.

use std::fmt;
use std::str::FromStr;

use super::block::ProxyNet;
use super::error::Invalid;

/// A CDN whose edge addresses may be trusted as proxies in one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProxyPreset {
    Cloudflare,
}

/// Cloudflare's published ranges (cloudflare.com/ips, as of 2026-12). `hapctl proxy add
/// --preset cloudflare --from FILE` replaces them with a newer list.
const CLOUDFLARE: &[&str] = &[
    "173.245.48.0/20",
    "103.21.244.0/22",
    "103.22.200.0/22",
    "103.31.4.0/22",
    "141.101.64.0/18",
    "108.162.192.0/18",
    "190.93.240.0/20",
    "188.114.96.0/20",
    "197.234.240.0/22",
    "198.41.128.0/17",
    "162.158.0.0/15",
    "104.16.0.0/13",
    "104.24.0.0/14",
    "172.64.0.0/13",
    "131.0.72.0/22",
    "2400:cb00::/32",
    "2606:4700::/32",
    "2803:f800::/32",
    "2405:b500::/32",
    "2405:8100::/32",
    "2a06:98c0::/29",
    "2c0f:f248::/32",
];

impl ProxyPreset {
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyPreset::Cloudflare => "cloudflare",
        }
    }

    /// The ranges shipped with this version of hapctl.
    pub fn shipped(self) -> Vec<ProxyNet> {
        let list = match self {
            ProxyPreset::Cloudflare => CLOUDFLARE,
        };
        list.iter()
            .map(|n| n.parse().expect("shipped ranges parse"))
            .collect()
    }
}

impl FromStr for ProxyPreset {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<ProxyPreset, Invalid> {
        match s {
            "cloudflare" => Ok(ProxyPreset::Cloudflare),
            _ => Err(Invalid::new("proxy preset", s, "must be cloudflare")),
        }
    }
}

impl fmt::Display for ProxyPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_ranges_parse_and_cover_both_families() {
        let nets = ProxyPreset::Cloudflare.shipped();
        assert_eq!(nets.len(), 22);
        assert!(nets.iter().any(|n| n.to_string().contains(':')));
        assert!("akamai".parse::<ProxyPreset>().is_err());
    }
}
