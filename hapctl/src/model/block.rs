//! Blocked clients: a normalised IP or CIDR key, with who blocked it, why, and until when.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;

use super::error::{describe_char, find_blank_or_control, serde_via_str, Invalid};

/// An IP address or network, normalised: host bits cleared (`10.1.2.3/8` → `10.0.0.0/8`),
/// IPv4-mapped IPv6 turned into IPv4, and a full-length prefix written as a bare address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockKey(IpNet);

impl BlockKey {
    pub fn net(&self) -> IpNet {
        self.0
    }

    /// Whether the key covers a whole network rather than one address.
    pub fn is_network(&self) -> bool {
        self.0.prefix_len() < self.0.max_prefix_len()
    }

    fn parse_field(field: &'static str, s: &str) -> Result<BlockKey, Invalid> {
        let err = |rule: String| Invalid::new(field, s, rule);
        if let Some((i, c)) = find_blank_or_control(s) {
            return Err(err(format!(
                "contains whitespace or a control character ({} at position {i})",
                describe_char(c)
            )));
        }
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let ip: IpAddr = addr.parse().map_err(|_| {
            err(
                "is not an IPv4 or IPv6 address (four numbers 0-255, no leading zeros; or IPv6)"
                    .into(),
            )
        })?;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let leading_zero = p.len() > 1 && p.starts_with('0');
                if p.is_empty()
                    || !p.bytes().all(|b| b.is_ascii_digit())
                    || p.len() > 3
                    || leading_zero
                {
                    return Err(err(format!("prefix {p:?} is not a number from 0 to {max}")));
                }
                let n: u8 = p.parse().unwrap_or(u8::MAX);
                if n > max {
                    return Err(err(format!(
                        "prefix /{n} is longer than {max}, the maximum for {}",
                        if max == 32 { "IPv4" } else { "IPv6" }
                    )));
                }
                n
            }
        };
        if prefix == 0 {
            return Err(err(
                "a /0 covers every address: as a block it would lock every client out, as a trusted proxy it would trust everyone".into(),
            ));
        }
        let net = IpNet::new(ip, prefix)
            .map_err(|e| err(e.to_string()))?
            .trunc();
        Ok(BlockKey(net))
    }
}

impl FromStr for BlockKey {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<BlockKey, Invalid> {
        BlockKey::parse_field("IP or CIDR", s)
    }
}

impl fmt::Display for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_network() {
            write!(f, "{}", self.0)
        } else {
            write!(f, "{}", self.0.addr())
        }
    }
}
serde_via_str!(BlockKey);

/// A trusted proxy network: same rules as a block key (a /0 would trust everyone).
pub type ProxyNet = BlockKey;

/// Free text for people (reason, author): bounded, single line, no control characters.
/// It never reaches a file HAProxy reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Note(String);

impl Note {
    pub const MAX_CHARS: usize = 500;

    pub fn parse(field: &'static str, s: &str) -> Result<Note, Invalid> {
        if s.chars().count() > Note::MAX_CHARS {
            return Err(Invalid::new(
                field,
                s,
                format!("is longer than {} characters", Note::MAX_CHARS),
            ));
        }
        if let Some(c) = s
            .chars()
            .find(|c| c.is_control() || super::error::is_invisible(*c))
        {
            return Err(Invalid::new(
                field,
                s,
                format!(
                    "contains {}, a control or invisible character",
                    describe_char(c)
                ),
            ));
        }
        Ok(Note(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Note {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// How long a block lasts: 1 second to 10 years, written like `90s`, `30m`, `12h`, `7d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(Duration);

impl Ttl {
    pub fn duration(self) -> Duration {
        self.0
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}
serde_via_str!(Ttl);

impl FromStr for Ttl {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Ttl, Invalid> {
        if s.trim() != s || s.contains(char::is_whitespace) {
            return Err(Invalid::new(
                "ttl",
                s,
                "must be one duration word such as 90s, 30m, 12h or 7d, without spaces",
            ));
        }
        let d = humantime::parse_duration(s).map_err(|_| {
            Invalid::new("ttl", s, "must be a duration such as 90s, 30m, 12h or 7d")
        })?;
        if d < Duration::from_secs(1) || d > Duration::from_secs(3650 * 86400) {
            return Err(Invalid::new("ttl", s, "must be between 1s and 3650d"));
        }
        Ok(Ttl(d))
    }
}

/// A blocked key with its bookkeeping. Times are Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Block {
    pub key: BlockKey,
    pub reason: Note,
    pub author: Note,
    pub created_at: i64,
    pub expires_at: Option<i64>,
}

#[cfg(test)]
impl Block {
    /// A block of `key` as the unit tests write one.
    pub fn sample(key: &str, expires_at: Option<i64>) -> Block {
        Block {
            key: key.parse().unwrap(),
            reason: Note::parse("reason", "test").unwrap(),
            author: Note::parse("author", "test").unwrap(),
            created_at: 0,
            expires_at,
        }
    }
}

impl Block {
    pub fn is_expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Result<String, String> {
        s.parse::<BlockKey>()
            .map(|k| k.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn normalises_keys() {
        assert_eq!(key("203.0.113.7").unwrap(), "203.0.113.7");
        assert_eq!(key("203.0.113.7/32").unwrap(), "203.0.113.7");
        assert_eq!(key("10.1.2.3/8").unwrap(), "10.0.0.0/8");
        assert_eq!(key("::ffff:192.0.2.1").unwrap(), "192.0.2.1");
        assert_eq!(key("2001:DB8::1/48").unwrap(), "2001:db8::/48");
    }

    #[test]
    fn refuses_bad_keys() {
        for (input, needle) in [
            ("300.1.1.1", "IPv4"),
            ("198.51.10", "IPv4"),
            ("10.0.0.0/33", "/33"),
            ("2001:db8::/129", "/129"),
            ("10.0.0.0/", "prefix"),
            ("10.0.0.0/x", "prefix"),
            ("0.0.0.0/0", "every client"),
            ("10.0.0.0/08", "prefix"),
            ("10.0.0.1 ", "whitespace"),
            ("10.0.0.1\n", "whitespace"),
            ("", "IPv4"),
            ("example.com", "IPv4"),
        ] {
            let e = key(input).unwrap_err();
            assert!(e.contains(needle), "{input:?}: {e:?} lacks {needle:?}");
        }
    }

    #[test]
    fn notes_and_ttls() {
        assert!(Note::parse("reason", "abuse from ticket #42").is_ok());
        assert!(Note::parse("reason", "line\nbreak").is_err());
        assert!(Note::parse("reason", &"x".repeat(501)).is_err());
        assert_eq!(
            "30m".parse::<Ttl>().unwrap().duration(),
            Duration::from_secs(1800)
        );
        assert!("0s".parse::<Ttl>().is_err());
        assert!("soon".parse::<Ttl>().is_err());
        assert!("20000d".parse::<Ttl>().is_err());
    }
}
