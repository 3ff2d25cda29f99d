//! Backend servers: address (IPv4, IPv6 or host name, plus port), name and typed options.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU16;
use std::str::FromStr;

use super::error::{describe_char, find_blank_or_control, serde_via_str, Invalid};
use super::server_options::ServerOptions;

/// Where a server lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerHost {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    Name(HostName),
}

/// A server's host name: a DNS name, or a container name as Docker's DNS answers it (`_` is
/// allowed: `wp_site_1`). Lowercase ASCII, labels of 1–63 letters, digits, `-` and `_` (not
/// starting or ending with `-`), at most 253 characters. Unlike a routed [`DomainName`], it is
/// only ever resolved, never matched against a client's Host.
///
/// [`DomainName`]: super::DomainName
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostName(String);

impl FromStr for HostName {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<HostName, Invalid> {
        let err = |rule: String| Invalid::new("server address", s, rule);
        let lower = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
        if lower.is_empty() || lower.len() > 253 {
            return Err(err("a host name has 1 to 253 characters".into()));
        }
        if let Some(c) = lower
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(*c)))
        {
            return Err(err(format!(
                "contains {}; a host name has letters, digits, '-', '_' and '.'",
                describe_char(c)
            )));
        }
        for label in lower.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(err("each dot-separated label has 1 to 63 characters".into()));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(err(format!("label {label:?} starts or ends with '-'")));
            }
        }
        Ok(HostName(lower))
    }
}

impl HostName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(HostName);

/// A TCP port, 1–65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Port(NonZeroU16);

impl Port {
    pub fn get(self) -> u16 {
        self.0.get()
    }
}

impl FromStr for Port {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Port, Invalid> {
        let rule = "must be a number from 1 to 65535";
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Invalid::new("port", s, rule));
        }
        s.parse::<u16>()
            .ok()
            .and_then(NonZeroU16::new)
            .map(Port)
            .ok_or_else(|| Invalid::new("port", s, rule))
    }
}

impl TryFrom<u16> for Port {
    type Error = Invalid;
    fn try_from(p: u16) -> Result<Port, Invalid> {
        p.to_string().parse()
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl serde::Serialize for Port {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(self.get())
    }
}

/// `HOST:PORT`, with IPv6 in brackets (`[2001:db8::1]:8080`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerAddr {
    pub host: ServerHost,
    pub port: Port,
}

impl ServerAddr {
    pub fn parse_host(input: &str) -> Result<ServerHost, Invalid> {
        let err = |rule: &str| Invalid::new("server address", input, rule);
        if let Some((i, c)) = find_blank_or_control(input) {
            return Err(err(&format!(
                "contains whitespace or a control character ({} at position {i})",
                describe_char(c)
            )));
        }
        let ip = input
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or(input);
        if ip.contains(':') {
            let v6: Ipv6Addr = ip.parse().map_err(|_| err("is not a valid IPv6 address"))?;
            return check_usable(IpAddr::V6(v6))
                .map(|_| ServerHost::V6(v6))
                .map_err(err);
        }
        if !ip.is_empty() && ip.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            let v4: Ipv4Addr = ip.parse().map_err(|_| {
                err("is not a valid IPv4 address (four numbers 0-255, no leading zeros)")
            })?;
            return check_usable(IpAddr::V4(v4))
                .map(|_| ServerHost::V4(v4))
                .map_err(err);
        }
        HostName::from_str(ip).map(ServerHost::Name)
    }
}

fn check_usable(ip: IpAddr) -> Result<(), &'static str> {
    if ip.is_unspecified() {
        Err("is the unspecified address; name the server's own address")
    } else if ip.is_multicast() {
        Err("is a multicast address")
    } else {
        Ok(())
    }
}

impl FromStr for ServerAddr {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<ServerAddr, Invalid> {
        let err = |rule: &str| Invalid::new("server address", s, rule);
        let (host, port) = if s.starts_with('[') {
            let end = s.find(']').ok_or_else(|| err("has '[' without ']'"))?;
            let port = s[end + 1..]
                .strip_prefix(':')
                .ok_or_else(|| err("needs a port: [IPv6]:PORT"))?;
            (&s[..=end], port)
        } else {
            let (host, port) = s
                .rsplit_once(':')
                .ok_or_else(|| err("needs a port: HOST:PORT"))?;
            if host.contains(':') {
                return Err(err("IPv6 addresses go in brackets: [2001:db8::1]:80"));
            }
            (host, port)
        };
        if host.is_empty() {
            return Err(err("needs a host before the port"));
        }
        Ok(ServerAddr {
            host: ServerAddr::parse_host(host)?,
            port: port
                .parse()
                .map_err(|e: Invalid| e.in_field("server port"))?,
        })
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            ServerHost::V4(ip) => write!(f, "{ip}:{}", self.port),
            ServerHost::V6(ip) => write!(f, "[{ip}]:{}", self.port),
            ServerHost::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}
serde_via_str!(ServerAddr);

/// A server's name inside its backend: 1–32 characters of `[A-Za-z0-9_.-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerName(String);

impl ServerName {
    /// The default name of the n-th server (1-based).
    pub fn nth(n: usize) -> ServerName {
        ServerName(format!("s{n}"))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ServerName {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<ServerName, Invalid> {
        let ok = !s.is_empty()
            && s.len() <= 32
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if ok {
            Ok(ServerName(s.to_string()))
        } else {
            Err(Invalid::new(
                "server name",
                s,
                "must be 1-32 characters of letters, digits, '_', '.' and '-'",
            ))
        }
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(ServerName);

/// One server of a domain's backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Server {
    pub name: ServerName,
    pub addr: ServerAddr,
    #[serde(default)]
    pub options: ServerOptions,
}

impl Server {
    /// Parses the command-line form `HOST:PORT[,option…]`, e.g. `10.0.0.5:8080,weight=5,nocheck`.
    pub fn parse_spec(spec: &str, name: ServerName) -> Result<Server, Invalid> {
        let mut parts = spec.split(',');
        let addr: ServerAddr = parts.next().unwrap_or_default().parse()?;
        let mut options = ServerOptions::default();
        for item in parts {
            options.set(item)?;
        }
        Ok(Server {
            name,
            addr,
            options,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Result<String, String> {
        s.parse::<ServerAddr>()
            .map(|a| a.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parses_every_host_form() {
        assert_eq!(addr("10.0.0.1:80").unwrap(), "10.0.0.1:80");
        assert_eq!(addr("[2001:DB8::1]:8080").unwrap(), "[2001:db8::1]:8080");
        assert_eq!(addr("App.Internal:9000").unwrap(), "app.internal:9000");
        // Docker's container names.
        assert_eq!(addr("wp_site_1:80").unwrap(), "wp_site_1:80");
        assert_eq!(addr("whp_php-fpm_1.:9000").unwrap(), "whp_php-fpm_1:9000");
        assert_eq!(addr("127.0.0.1:65535").unwrap(), "127.0.0.1:65535");
    }

    #[test]
    fn refuses_bad_addresses_with_the_rule() {
        for (input, needle) in [
            ("10.0.0.1:0", "1 to 65535"),
            ("10.0.0.1:65536", "1 to 65535"),
            ("10.0.0.1:-1", "1 to 65535"),
            ("10.0.0.1:", "1 to 65535"),
            ("10.0.0.1", "needs a port"),
            ("300.1.1.1:80", "IPv4"),
            ("010.0.0.1:80", "IPv4"),
            ("2001:db8::1:80", "brackets"),
            ("[2001:db8::1:80", "without ']'"),
            ("[zz::1]:80", "IPv6"),
            (":80", "host"),
            ("0.0.0.0:80", "unspecified"),
            ("a b:80", "whitespace"),
            ("host\n:80", "whitespace"),
            ("h#st:80", "'#'"),
            ("%[src]:80", "'%'"),
        ] {
            let e = addr(input).unwrap_err();
            assert!(e.contains(needle), "{input:?}: {e:?} lacks {needle:?}");
        }
    }

    #[test]
    fn server_specs_take_typed_options_only() {
        let s = Server::parse_spec(
            "10.0.0.1:80,weight=5,maxconn=100,nocheck",
            ServerName::nth(1),
        )
        .unwrap();
        assert_eq!(
            s.options,
            ServerOptions {
                weight: Some(5),
                maxconn: Some(100),
                check: false,
                ..ServerOptions::default()
            }
        );
        for bad in [
            "10.0.0.1:80,weight=300",
            "10.0.0.1:80,maxconn=0",
            "10.0.0.1:80,backups",
            "10.0.0.1:80,weight=x",
            "10.0.0.1:80,fall=0",
            "10.0.0.1:80,inter=50ms",
            "10.0.0.1:80,sni=%[src]",
        ] {
            assert!(
                Server::parse_spec(bad, ServerName::nth(1)).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn server_names_are_identifiers() {
        assert!("web-1".parse::<ServerName>().is_ok());
        assert!("web 1".parse::<ServerName>().is_err());
        assert!("".parse::<ServerName>().is_err());
        assert!("a".repeat(33).parse::<ServerName>().is_err());
    }
}
