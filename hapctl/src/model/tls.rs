//! TLS in the desired state: certificate names and sources, and each domain's HTTPS policy.

use std::fmt;
use std::str::FromStr;

use super::error::{serde_via_str, Invalid};

/// A certificate's name: 1–64 characters of `[a-z0-9._-]`, starting with a letter or digit.
/// It is the file name of the certificate's PEM (`<certs_dir>/<name>.pem`), so nothing else
/// is allowed. `default` is the certificate that answers unknown SNI.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CertName(String);

impl CertName {
    pub const DEFAULT: &'static str = "default";

    pub fn default_cert() -> CertName {
        CertName(Self::DEFAULT.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }

    /// A certificate name derived from a host name (`*.example.com` → `wildcard.example.com`).
    pub fn for_host(host: &str) -> Result<CertName, Invalid> {
        match host.strip_prefix("*.") {
            Some(base) => format!("wildcard.{base}").parse(),
            None => host.parse(),
        }
    }
}

impl FromStr for CertName {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<CertName, Invalid> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && s.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_' || c == '-'
            })
            && !s.contains("..");
        if ok {
            Ok(CertName(s.to_string()))
        } else {
            Err(Invalid::new(
                "certificate name",
                s,
                "must be 1-64 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
            ))
        }
    }
}

impl fmt::Display for CertName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(CertName);

/// Where a certificate comes from, which decides how it is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertSource {
    AcmeHttp01,
    AcmeDns01,
    Upload,
    /// The self-signed certificate `hapctl init` makes for unknown SNI.
    SelfSigned,
}

impl CertSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CertSource::AcmeHttp01 => "acme-http-01",
            CertSource::AcmeDns01 => "acme-dns-01",
            CertSource::Upload => "upload",
            CertSource::SelfSigned => "self-signed",
        }
    }

    pub fn is_acme(self) -> bool {
        matches!(self, CertSource::AcmeHttp01 | CertSource::AcmeDns01)
    }
}

impl FromStr for CertSource {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<CertSource, Invalid> {
        Ok(match s {
            "acme-http-01" => CertSource::AcmeHttp01,
            "acme-dns-01" => CertSource::AcmeDns01,
            "upload" => CertSource::Upload,
            "self-signed" => CertSource::SelfSigned,
            _ => {
                return Err(Invalid::new(
                    "certificate source",
                    s,
                    "must be acme-http-01, acme-dns-01, upload or self-signed",
                ))
            }
        })
    }
}

impl fmt::Display for CertSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
serde_via_str!(CertSource);

/// How plain HTTP requests for a domain are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Redirect {
    /// Served on both HTTP and HTTPS.
    #[default]
    Off,
    /// `301 Moved Permanently` to HTTPS (browsers may turn a POST into a GET).
    Permanent301,
    /// `308 Permanent Redirect` to HTTPS (method and body kept).
    Permanent308,
}

impl Redirect {
    pub fn code(self) -> u16 {
        match self {
            Redirect::Off => 0,
            Redirect::Permanent301 => 301,
            Redirect::Permanent308 => 308,
        }
    }
}

/// Longest HSTS max-age accepted: two years, the preload list's own ceiling.
pub const MAX_HSTS_AGE: u32 = 63_072_000;

/// `Strict-Transport-Security` sent on HTTPS answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hsts {
    max_age: u32,
    pub include_subdomains: bool,
}

impl Hsts {
    pub fn new(max_age: u32, include_subdomains: bool) -> Result<Hsts, Invalid> {
        if max_age == 0 || max_age > MAX_HSTS_AGE {
            return Err(Invalid::new(
                "hsts max-age",
                &max_age.to_string(),
                format!("must be 1 to {MAX_HSTS_AGE} seconds (two years)"),
            ));
        }
        Ok(Hsts {
            max_age,
            include_subdomains,
        })
    }

    pub fn max_age(self) -> u32 {
        self.max_age
    }
}

/// A domain's HTTPS policy. The default (serve both, no HSTS, `alt-svc` on) writes no map
/// entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HttpsPolicy {
    pub redirect: Redirect,
    pub hsts: Option<Hsts>,
    /// HTTPS answers announce HTTP/3 (`alt-svc`) where the edge serves it.
    pub alt_svc: bool,
}

impl Default for HttpsPolicy {
    fn default() -> HttpsPolicy {
        HttpsPolicy {
            redirect: Redirect::Off,
            hsts: None,
            alt_svc: true,
        }
    }
}

impl HttpsPolicy {
    pub fn is_default(&self) -> bool {
        *self == HttpsPolicy::default()
    }

    /// The map value the frontend splits with `field(N,:)`: `REDIRECT:MAXAGE:SUBDOMAINS`,
    /// then `:0` when `alt-svc` is off (so every value written before it existed stays the
    /// value of the same policy).
    pub fn map_value(&self) -> String {
        let (age, sub) = self
            .hsts
            .map_or((0, 0), |h| (h.max_age, h.include_subdomains as u8));
        let alt_svc = if self.alt_svc { "" } else { ":0" };
        format!("{}:{age}:{sub}{alt_svc}", self.redirect.code())
    }

    /// Parses `map_value`'s form back (how the database stores it).
    pub fn from_map_value(s: &str) -> Result<HttpsPolicy, Invalid> {
        let bad = || {
            Invalid::new(
                "https policy",
                s,
                "must be REDIRECT:MAXAGE:SUBDOMAINS, then :0 when alt-svc is off",
            )
        };
        let mut parts = s.split(':');
        let (Some(r), Some(age), Some(sub), alt_svc, None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        let alt_svc = match alt_svc {
            None => true,
            Some("0") => false,
            Some(_) => return Err(bad()),
        };
        let redirect = match r {
            "0" => Redirect::Off,
            "301" => Redirect::Permanent301,
            "308" => Redirect::Permanent308,
            _ => return Err(bad()),
        };
        let age: u32 = age.parse().map_err(|_| bad())?;
        let include = match sub {
            "0" => false,
            "1" => true,
            _ => return Err(bad()),
        };
        let hsts = match age {
            0 if !include => None,
            0 => return Err(bad()),
            n => Some(Hsts::new(n, include)?),
        };
        Ok(HttpsPolicy {
            redirect,
            hsts,
            alt_svc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_names_are_file_names() {
        assert!("shop.example.com".parse::<CertName>().is_ok());
        assert!("wildcard.example.com".parse::<CertName>().is_ok());
        for bad in ["", "../x", "a/b", "A", ".x", "a..b", "x y", "a\nb", "*.x"] {
            assert!(bad.parse::<CertName>().is_err(), "{bad:?}");
        }
        assert_eq!(
            CertName::for_host("*.example.com").unwrap().as_str(),
            "wildcard.example.com"
        );
    }

    #[test]
    fn policy_round_trips_through_its_map_value() {
        let p = HttpsPolicy {
            redirect: Redirect::Permanent308,
            hsts: Some(Hsts::new(31_536_000, true).unwrap()),
            alt_svc: true,
        };
        assert_eq!(p.map_value(), "308:31536000:1");
        assert_eq!(HttpsPolicy::from_map_value(&p.map_value()).unwrap(), p);
        assert_eq!(HttpsPolicy::default().map_value(), "0:0:0");
        let quiet = HttpsPolicy {
            alt_svc: false,
            ..HttpsPolicy::default()
        };
        assert_eq!(quiet.map_value(), "0:0:0:0");
        assert_eq!(HttpsPolicy::from_map_value("0:0:0:0").unwrap(), quiet);
        assert!(!quiet.is_default());
        for bad in [
            "",
            "308",
            "302:0:0",
            "0:-1:0",
            "0:0:1",
            "0:99999999999:0",
            "1:2:3:4",
            "0:0:0:1",
            "0:0:0:0:0",
        ] {
            assert!(HttpsPolicy::from_map_value(bad).is_err(), "{bad:?}");
        }
        assert!(Hsts::new(0, false).is_err());
        assert!(Hsts::new(MAX_HSTS_AGE + 1, false).is_err());
    }
}
