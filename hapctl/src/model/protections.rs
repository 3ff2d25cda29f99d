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

/// A domain's protections: its profiles and their per-host switches.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DomainProtections {
    pub profiles: BTreeSet<ProtectProfile>,
    /// The wordpress wp-admin gate (302 to wp-login for anonymous visitors); off for a host
    /// whose admin is reached another way (the old `wpadmin_gate_exempt.list`).
    pub wp_admin_gate: bool,
}

impl Default for DomainProtections {
    fn default() -> Self {
        DomainProtections {
            profiles: BTreeSet::new(),
            wp_admin_gate: true,
        }
    }
}

/// The map flag of a host whose wp-admin gate is off.
pub const FLAG_WP_GATE_OFF: &str = "wp-gate-off";

impl DomainProtections {
    /// Nothing on: the domain has no row and no map line.
    pub fn is_default(&self) -> bool {
        *self == DomainProtections::default()
    }

    /// The map value: `:flag:flag:`, matched with `-m sub :flag:` (names are `[a-z-]`).
    pub fn map_value(&self) -> String {
        let mut flags: Vec<&str> = self.profiles.iter().map(|p| p.name()).collect();
        if !self.wp_admin_gate {
            flags.push(FLAG_WP_GATE_OFF);
        }
        format!(":{}:", flags.join(":"))
    }

    /// Parses `map_value` back (the database stores the same text).
    pub fn from_map_value(s: &str) -> Result<DomainProtections, Invalid> {
        let inner = s
            .strip_prefix(':')
            .and_then(|s| s.strip_suffix(':'))
            .ok_or_else(|| Invalid::new("protections", s, "must be :flag:...:"))?;
        let mut out = DomainProtections::default();
        for flag in inner.split(':').filter(|f| !f.is_empty()) {
            match flag {
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
        assert_eq!(p.map_value(), "::");
        p.profiles.insert(ProtectProfile::WordPress);
        p.wp_admin_gate = false;
        assert_eq!(p.map_value(), ":wordpress:wp-gate-off:");
        assert_eq!(
            DomainProtections::from_map_value(&p.map_value()).unwrap(),
            p
        );
        assert!("drupal".parse::<ProtectProfile>().is_err());
        assert!("wordpress\n".parse::<ProtectProfile>().is_err());
        assert!(DomainProtections::from_map_value(":x y:").is_err());
    }
}
