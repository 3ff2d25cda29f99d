//! Path-protection profiles a domain opts into (`wordpress`, …), typed: the renderer turns each
//! into rules (`crate::protect::profiles`); the per-domain choice is a map value.

use std::collections::BTreeSet;

use super::error::Invalid;

/// One opt-in profile. Adding one is a variant here and a module in `protect::profiles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProtectProfile {
    WordPress,
}

impl ProtectProfile {
    pub const ALL: [ProtectProfile; 1] = [ProtectProfile::WordPress];

    pub fn name(self) -> &'static str {
        match self {
            ProtectProfile::WordPress => "wordpress",
        }
    }
}

impl std::fmt::Display for ProtectProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ProtectProfile {
    type Err = Invalid;

    fn from_str(s: &str) -> Result<Self, Invalid> {
        ProtectProfile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let known: Vec<_> = ProtectProfile::ALL.iter().map(|p| p.name()).collect();
                Invalid::new(
                    "profile",
                    s,
                    format!("unknown profile; known: {}", known.join(", ")),
                )
            })
    }
}

/// Most POSTs a wordpress POST limit may allow per window.
pub const MAX_POST_LIMIT: u32 = 100_000;

/// POSTs one client may send to one wordpress endpoint per window before it is tarpitted
/// (1 to `MAX_POST_LIMIT`). A map value, so a change is a runtime change; the window is part
/// of the counting table's definition and stays fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct PostLimit(u32);

impl PostLimit {
    /// The old manager's 30 login POSTs per 60 s.
    pub const WP_LOGIN: PostLimit = PostLimit(30);
    /// The old manager's 60 xmlrpc POSTs per 60 s.
    pub const WP_XMLRPC: PostLimit = PostLimit(60);

    pub fn new(field: &'static str, n: u64) -> Result<PostLimit, Invalid> {
        match u32::try_from(n) {
            Ok(n) if (1..=MAX_POST_LIMIT).contains(&n) => Ok(PostLimit(n)),
            _ => Err(Self::out_of_range(field, &n.to_string())),
        }
    }

    /// Decimal digits only (no sign, no spaces, no unit).
    pub fn parse(field: &'static str, s: &str) -> Result<PostLimit, Invalid> {
        if s.is_empty() || s.len() > 6 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Self::out_of_range(field, s));
        }
        PostLimit::new(field, s.parse().map_err(|_| Self::out_of_range(field, s))?)
    }

    fn out_of_range(field: &'static str, s: &str) -> Invalid {
        Invalid::new(
            field,
            s,
            format!("must be a whole number of POSTs from 1 to {MAX_POST_LIMIT}"),
        )
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

/// A domain's protections: its profiles, their per-host switches and thresholds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DomainProtections {
    pub profiles: BTreeSet<ProtectProfile>,
    /// The wordpress wp-admin gate (302 to wp-login for anonymous visitors); off for a host
    /// whose admin is reached another way (the old `wpadmin_gate_exempt.list`).
    pub wp_admin_gate: bool,
    /// wordpress: login POSTs per client per window before the tarpit.
    pub wp_login_posts: PostLimit,
    /// wordpress: xmlrpc POSTs per client per window before the tarpit.
    pub wp_xmlrpc_posts: PostLimit,
}

impl Default for DomainProtections {
    fn default() -> Self {
        DomainProtections {
            profiles: BTreeSet::new(),
            wp_admin_gate: true,
            wp_login_posts: PostLimit::WP_LOGIN,
            wp_xmlrpc_posts: PostLimit::WP_XMLRPC,
        }
    }
}

/// The map flag of a host whose wp-admin gate is off.
pub const FLAG_WP_GATE_OFF: &str = "wp-gate-off";
/// Field numbers (`field(N,:)`) of the two POST limits in `map_value`.
pub const FIELD_WP_LOGIN_POSTS: usize = 1;
pub const FIELD_WP_XMLRPC_POSTS: usize = 2;

impl DomainProtections {
    /// Nothing on: the domain has no row and no map line.
    pub fn is_default(&self) -> bool {
        *self == DomainProtections::default()
    }

    /// The map value: `LOGIN:XMLRPC:flag:flag:`, the numbers read with `field(N,:)`, the flags
    /// matched with `-m sub :flag:` (names are `[a-z-]`).
    pub fn map_value(&self) -> String {
        let mut out = format!(
            "{}:{}:",
            self.wp_login_posts.get(),
            self.wp_xmlrpc_posts.get()
        );
        for p in &self.profiles {
            out.push_str(p.name());
            out.push(':');
        }
        if !self.wp_admin_gate {
            out.push_str(FLAG_WP_GATE_OFF);
            out.push(':');
        }
        out
    }

    /// Parses `map_value` back (the database stores the same text); also the older form
    /// without numbers, `:flag:…:` (the default thresholds).
    pub fn from_map_value(s: &str) -> Result<DomainProtections, Invalid> {
        let bad = || Invalid::new("protections", s, "must be LOGIN:XMLRPC:flag:...:");
        let mut fields: Vec<&str> = s.split(':').collect();
        if fields.len() < 2 || fields.pop() != Some("") {
            return Err(bad());
        }
        let mut out = DomainProtections::default();
        let flags = match fields.first() {
            Some(&"") => &fields[1..],
            _ if fields.len() >= 2 => {
                out.wp_login_posts = PostLimit::parse("wp_login_posts", fields[0])?;
                out.wp_xmlrpc_posts = PostLimit::parse("wp_xmlrpc_posts", fields[1])?;
                &fields[2..]
            }
            _ => return Err(bad()),
        };
        for flag in flags {
            match *flag {
                FLAG_WP_GATE_OFF => out.wp_admin_gate = false,
                other => {
                    out.profiles.insert(other.parse()?);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_value_round_trips_and_unknown_names_are_refused() {
        let mut p = DomainProtections::default();
        assert_eq!(p.map_value(), "30:60:");
        p.profiles.insert(ProtectProfile::WordPress);
        p.wp_admin_gate = false;
        p.wp_login_posts = PostLimit::parse("x", "5").unwrap();
        assert_eq!(p.map_value(), "5:60:wordpress:wp-gate-off:");
        assert_eq!(
            DomainProtections::from_map_value(&p.map_value()).unwrap(),
            p
        );
        // The form written before the thresholds existed.
        let old = DomainProtections::from_map_value(":wordpress:").unwrap();
        assert_eq!(old.map_value(), "30:60:wordpress:");
        assert!("drupal".parse::<ProtectProfile>().is_err());
        assert!("wordpress\n".parse::<ProtectProfile>().is_err());
        for bad in [":x y:", "30:60", "0:60:", "30:x:", "30:", ""] {
            assert!(DomainProtections::from_map_value(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn post_limits_are_bounded() {
        assert_eq!(PostLimit::parse("f", "100000").unwrap().get(), 100_000);
        for bad in [
            "0",
            "100001",
            "-1",
            "",
            " 5",
            "5 ",
            "1e3",
            "5\n",
            "999999999999",
        ] {
            let e = PostLimit::parse("wp_login_posts", bad).unwrap_err();
            assert!(e.to_string().contains("wp_login_posts"), "{e}");
        }
        assert!(PostLimit::new("f", 0).is_err());
        assert!(PostLimit::new("f", u64::MAX).is_err());
    }
}
