//! Who may change the edge: API token names and their scopes (`docs/access.md`).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::Invalid;

/// The name of an API token: what the audit trail says did a change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenName(String);

/// The token `hapctl init` wrote to `[api] token_file`, an admin token.
pub const DEFAULT_TOKEN: &str = "default";

const MAX_TOKEN_NAME: usize = 64;

impl FromStr for TokenName {
    type Err = Invalid;

    fn from_str(s: &str) -> Result<TokenName, Invalid> {
        let rule = "1 to 64 characters: letters, digits, '-', '_' and '.', starting with a letter or digit";
        let ok = !s.is_empty()
            && s.len() <= MAX_TOKEN_NAME
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if ok {
            Ok(TokenName(s.to_string()))
        } else {
            Err(Invalid::new("name", s, rule))
        }
    }
}

impl TokenName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        self.0 == DEFAULT_TOKEN
    }

    pub fn default_token() -> TokenName {
        TokenName(DEFAULT_TOKEN.to_string())
    }
}

impl fmt::Display for TokenName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a token may do. Each route of the API needs exactly one; `admin` covers all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Every read that holds no secret.
    Read,
    /// Blocks and block lists.
    Blocks,
    /// Domains, servers, policies, profiles, limits, trusted proxies, applies.
    Domains,
    /// Certificates, their orders and private keys.
    Certs,
    /// Deliveries, rollbacks, proofs.
    Deliver,
    /// Everything: HAProxy's master, the WAF agent, the audit trail, tokens.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 6] = [
        Scope::Read,
        Scope::Blocks,
        Scope::Domains,
        Scope::Certs,
        Scope::Deliver,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Blocks => "blocks",
            Scope::Domains => "domains",
            Scope::Certs => "certs",
            Scope::Deliver => "deliver",
            Scope::Admin => "admin",
        }
    }
}

impl FromStr for Scope {
    type Err = Invalid;

    fn from_str(s: &str) -> Result<Scope, Invalid> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s.trim())
            .ok_or_else(|| {
                Invalid::new(
                    "scope",
                    s,
                    "one of read, blocks, domains, certs, deliver, admin",
                )
            })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The scopes of one token: never empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scopes(BTreeSet<Scope>);

impl Scopes {
    pub fn admin() -> Scopes {
        Scopes(BTreeSet::from([Scope::Admin]))
    }

    /// Whether a request needing `need` is allowed.
    pub fn covers(&self, need: Scope) -> bool {
        self.0.contains(&Scope::Admin) || self.0.contains(&need)
    }

    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }
}

/// `read,blocks`: a comma-separated list, at least one.
impl FromStr for Scopes {
    type Err = Invalid;

    fn from_str(s: &str) -> Result<Scopes, Invalid> {
        let set = s
            .split(',')
            .filter(|part| !part.trim().is_empty())
            .map(Scope::from_str)
            .collect::<Result<BTreeSet<_>, _>>()?;
        if set.is_empty() {
            return Err(Invalid::new(
                "scope",
                s,
                "at least one of read, blocks, domains, certs, deliver, admin",
            ));
        }
        Ok(Scopes(set))
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|s| s.as_str()).collect();
        f.write_str(&names.join(","))
    }
}

impl serde::Serialize for Scopes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_names_are_short_and_plain() {
        assert!("blocker".parse::<TokenName>().is_ok());
        assert!("ci.deploy-2_a".parse::<TokenName>().is_ok());
        for bad in ["", "-x", "a b", "a/b", "é", &"a".repeat(65)] {
            let e = bad.parse::<TokenName>().unwrap_err();
            assert_eq!(e.field, "name", "{bad}");
        }
    }

    #[test]
    fn scopes_parse_as_a_list_and_admin_covers_everything() {
        let s: Scopes = "blocks, read".parse().unwrap();
        assert_eq!(s.to_string(), "read,blocks");
        assert!(s.covers(Scope::Blocks) && s.covers(Scope::Read));
        assert!(!s.covers(Scope::Domains) && !s.covers(Scope::Admin));
        assert!(Scope::ALL.iter().all(|&n| Scopes::admin().covers(n)));
        assert_eq!("".parse::<Scopes>().unwrap_err().field, "scope");
        let e = "blocks,root".parse::<Scopes>().unwrap_err();
        assert_eq!(e.value, "root");
    }
}
