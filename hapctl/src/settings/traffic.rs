//! `[traffic]`: traffic per domain, counted in the daemon's memory from the access log
//! (`crate::traffic`, `docs/traffic.md`).

use serde::Deserialize;

/// A count kept within its bounds: parsed once, trusted after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded<const MIN: u32, const MAX: u32>(u32);

impl<const MIN: u32, const MAX: u32> Bounded<MIN, MAX> {
    fn parse(key: &str, value: u32) -> Result<Self, (String, String)> {
        if (MIN..=MAX).contains(&value) {
            Ok(Bounded(value))
        } else {
            Err((
                format!("traffic.{key}"),
                format!("{value} is not between {MIN} and {MAX}"),
            ))
        }
    }

    pub fn get(self) -> usize {
        self.0 as usize
    }
}

/// Domains with their own series in `/metrics`.
pub type TopDomains = Bounded<1, 1_000>;
/// Host names counted apart in memory (about 1.5 KiB each); the rest count together.
pub type MaxDomains = Bounded<1, 100_000>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficSettings {
    /// Whether `hapctl serve` counts the access log at all.
    pub collect: bool,
    pub top_domains: TopDomains,
    pub max_domains: MaxDomains,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTraffic {
    collect: Option<bool>,
    top_domains: Option<u32>,
    max_domains: Option<u32>,
}

/// An error is `(key, message)`.
pub(super) fn resolve_traffic(raw: RawTraffic) -> Result<TrafficSettings, (String, String)> {
    Ok(TrafficSettings {
        collect: raw.collect.unwrap_or(true),
        top_domains: TopDomains::parse("top_domains", raw.top_domains.unwrap_or(20))?,
        max_domains: MaxDomains::parse("max_domains", raw.max_domains.unwrap_or(20_000))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        let t = resolve_traffic(RawTraffic::default()).unwrap();
        assert!(t.collect);
        assert_eq!((t.top_domains.get(), t.max_domains.get()), (20, 20_000));
        let bad = resolve_traffic(RawTraffic {
            top_domains: Some(0),
            ..RawTraffic::default()
        });
        assert_eq!(bad.unwrap_err().0, "traffic.top_domains");
    }
}
