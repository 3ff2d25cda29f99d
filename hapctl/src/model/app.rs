//! Applications delivered as generations: names, versions, and the generation in service.

use std::fmt;
use std::str::FromStr;

use super::error::{describe_char, serde_via_str, Invalid};
use super::server::Port;

/// An application's name: 1–32 characters of `[a-z0-9_-]`, starting with a letter or digit.
/// It appears in file names, lock names and (by default) the HAProxy backend name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AppName(String);

impl AppName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AppName {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<AppName, Invalid> {
        let ok = !s.is_empty()
            && s.len() <= 32
            && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if ok {
            Ok(AppName(s.to_string()))
        } else {
            Err(Invalid::new(
                "app",
                s,
                "must be 1-32 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
            ))
        }
    }
}

impl fmt::Display for AppName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(AppName);

/// A version of an application: 1–64 characters of `[A-Za-z0-9._+-]`, starting with a letter
/// or digit. It ends up in unit names, file names and command lines, so nothing else is allowed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(String);

impl Version {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Version {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Version, Invalid> {
        if s.is_empty() || s.len() > 64 {
            return Err(Invalid::new(
                "version",
                s,
                "must be 1 to 64 characters long",
            ));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "._+-".contains(*c)))
        {
            return Err(Invalid::new(
                "version",
                s,
                format!(
                    "contains {}; allowed: letters, digits, '.', '_', '+' and '-'",
                    describe_char(c)
                ),
            ));
        }
        if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(Invalid::new(
                "version",
                s,
                "must start with a letter or a digit",
            ));
        }
        Ok(Version(s.to_string()))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(Version);

/// One running version of an application, on its own loopback port.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Generation {
    pub version: Version,
    pub port: Port,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_names() {
        for ok in ["1.4.2", "2024-01-01", "v1.0.0-rc.1+build5", "a"] {
            assert!(ok.parse::<Version>().is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1.0 ",
            "../1",
            "1/2",
            "-1",
            ".1",
            "1;rm",
            "$(x)",
            "1\n",
            &"9".repeat(65),
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?}");
        }
        assert!("shop-api_2".parse::<AppName>().is_ok());
        for bad in ["", "Shop", "-a", "a b", "a.b", &"a".repeat(33)] {
            assert!(bad.parse::<AppName>().is_err(), "{bad:?}");
        }
    }
}
