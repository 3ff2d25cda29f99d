//! A domain's web application firewall policy (docs/waf.md), typed.
//!
//! The whole policy is one map value (`maps/waf.map`), so a change is a runtime change: HAProxy
//! reads the mode and the failure mode from it, and sends it to the agent, which parses it
//! back with [`WafPolicy::from_map_value`] for the rest.

use std::fmt;
use std::str::FromStr;

use super::error::Invalid;
use super::profile::HttpPath;

/// What the WAF does with a domain's requests.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
// Read from a string (`try_from`): serde_json reads an enum from a number as a syntax error.
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum WafMode {
    /// Not inspected (no map line; the agent is never asked).
    #[default]
    Off,
    /// Inspected and logged, never blocked.
    Detect,
    /// Inspected; above the threshold the request gets the 403 page.
    Block,
}

/// What a request gets when the agent is down, slow or answers an error.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum FailMode {
    /// It passes, marked `waf-unavailable` in the access log.
    #[default]
    Open,
    /// It gets a 503.
    Closed,
}

macro_rules! keyword_enum {
    ($t:ty, $field:literal, $($v:ident = $s:literal),+) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),+ }
            }
        }
        impl FromStr for $t {
            type Err = Invalid;
            fn from_str(s: &str) -> Result<Self, Invalid> {
                match s {
                    $($s => Ok(Self::$v),)+
                    _ => Err(Invalid::new($field, s, concat!("must be one of:", $(" ", $s),+))),
                }
            }
        }
        impl TryFrom<String> for $t {
            type Error = Invalid;
            fn try_from(s: String) -> Result<Self, Invalid> {
                s.parse()
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
keyword_enum!(
    WafMode,
    "mode",
    Off = "off",
    Detect = "detect",
    Block = "block"
);
keyword_enum!(FailMode, "fail", Open = "open", Closed = "closed");

/// A CRS rule id: 1 to 999,999,999.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "u64", into = "u32")]
pub struct RuleId(u32);

impl RuleId {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl From<RuleId> for u32 {
    fn from(r: RuleId) -> u32 {
        r.0
    }
}

impl TryFrom<u64> for RuleId {
    type Error = Invalid;
    fn try_from(n: u64) -> Result<RuleId, Invalid> {
        number("rule", &n.to_string(), 1, 999_999_999).map(|n| RuleId(n as u32))
    }
}

impl FromStr for RuleId {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<RuleId, Invalid> {
        number("rule", s, 1, 999_999_999).map(|n| RuleId(n as u32))
    }
}

/// A rule that does not count for a domain: everywhere, or under a path prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exclusion {
    pub rule: RuleId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPath>,
}

impl Exclusion {
    /// Whether it drops `rule` for a request to `path`.
    pub fn covers(&self, rule: u32, path: &str) -> bool {
        self.rule.0 == rule
            && self
                .path
                .as_ref()
                .is_none_or(|p| path.starts_with(p.as_str()))
    }
}

impl FromStr for Exclusion {
    type Err = Invalid;
    /// `942100` or `942100@/search`.
    fn from_str(s: &str) -> Result<Exclusion, Invalid> {
        let (rule, path) = match s.split_once('@') {
            Some((r, p)) => (
                r,
                Some(p.parse::<HttpPath>().map_err(|e| e.in_field("exclusion"))?),
            ),
            None => (s, None),
        };
        Ok(Exclusion {
            rule: rule.parse().map_err(|e: Invalid| e.in_field("exclusion"))?,
            path,
        })
    }
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{}@{p}", self.rule.0),
            None => write!(f, "{}", self.rule.0),
        }
    }
}

pub const MAX_EXCLUSIONS: usize = 32;
pub const MAX_BODY_LIMIT: u32 = 1_048_576;
pub const MAX_WAF_THRESHOLD: u32 = 1_000;

/// A domain's policy. `Default` is off (fail-open, CRS defaults: paranoia 1, threshold 5,
/// 8 KiB of body).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WafPolicy {
    pub mode: WafMode,
    #[serde(default)]
    pub fail: FailMode,
    #[serde(default = "default_paranoia", deserialize_with = "de_paranoia")]
    pub paranoia: u8,
    #[serde(default = "default_threshold", deserialize_with = "de_threshold")]
    pub threshold: u32,
    #[serde(default = "default_body_limit", deserialize_with = "de_body_limit")]
    pub body_limit: u32,
    #[serde(default, deserialize_with = "de_exclusions")]
    pub exclusions: Vec<Exclusion>,
}

fn default_paranoia() -> u8 {
    1
}
fn default_threshold() -> u32 {
    5
}
fn default_body_limit() -> u32 {
    8192
}

impl Default for WafPolicy {
    fn default() -> Self {
        WafPolicy {
            mode: WafMode::Off,
            fail: FailMode::Open,
            paranoia: default_paranoia(),
            threshold: default_threshold(),
            body_limit: default_body_limit(),
            exclusions: Vec::new(),
        }
    }
}

impl WafPolicy {
    /// `MODE:FAIL:PARANOIA:THRESHOLD:BODY:EXCLUSIONS` (exclusions comma-separated, may be
    /// empty); nothing in it is a separator HAProxy's map parser knows.
    pub fn to_map_value(&self) -> String {
        let ex: Vec<String> = self.exclusions.iter().map(|e| e.to_string()).collect();
        format!(
            "{}:{}:{}:{}:{}:{}",
            self.mode,
            self.fail,
            self.paranoia,
            self.threshold,
            self.body_limit,
            ex.join(",")
        )
    }

    /// The agent's side of [`WafPolicy::to_map_value`].
    pub fn from_map_value(s: &str) -> Result<WafPolicy, Invalid> {
        let parts: Vec<&str> = s.split(':').collect();
        let [mode, fail, pl, threshold, body, ex] = parts[..] else {
            return Err(Invalid::new(
                "policy",
                s,
                "must be MODE:FAIL:PARANOIA:THRESHOLD:BODY:EXCLUSIONS",
            ));
        };
        let exclusions = if ex.is_empty() {
            Vec::new()
        } else {
            ex.split(',').map(str::parse).collect::<Result<_, _>>()?
        };
        WafPolicy {
            mode: mode.parse()?,
            fail: fail.parse()?,
            paranoia: number("paranoia", pl, 1, 4)? as u8,
            threshold: number("threshold", threshold, 1, MAX_WAF_THRESHOLD.into())? as u32,
            body_limit: number("body_limit", body, 0, MAX_BODY_LIMIT.into())? as u32,
            exclusions,
        }
        .checked()
    }

    /// The rules every constructor applies (serde's fields are checked one by one).
    pub fn checked(self) -> Result<WafPolicy, Invalid> {
        if self.exclusions.len() > MAX_EXCLUSIONS {
            return Err(Invalid::new(
                "exclusions",
                &self.exclusions.len().to_string(),
                format!("at most {MAX_EXCLUSIONS} exclusions per domain"),
            ));
        }
        Ok(self)
    }
}

/// Decimal digits only, within `min..=max`.
fn number(field: &'static str, s: &str, min: u64, max: u64) -> Result<u64, Invalid> {
    let rule = || {
        Invalid::new(
            field,
            s,
            format!("must be a whole number from {min} to {max}"),
        )
    };
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(rule());
    }
    match s.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(rule()),
    }
}

fn de_bounded<'de, D: serde::Deserializer<'de>>(
    d: D,
    field: &'static str,
    min: u64,
    max: u64,
) -> Result<u64, D::Error> {
    let n = <u64 as serde::Deserialize>::deserialize(d)?;
    number(field, &n.to_string(), min, max).map_err(serde::de::Error::custom)
}
fn de_paranoia<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    de_bounded(d, "paranoia", 1, 4).map(|n| n as u8)
}
fn de_threshold<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_bounded(d, "threshold", 1, MAX_WAF_THRESHOLD.into()).map(|n| n as u32)
}
fn de_body_limit<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_bounded(d, "body_limit", 0, MAX_BODY_LIMIT.into()).map(|n| n as u32)
}
fn de_exclusions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Exclusion>, D::Error> {
    let v = <Vec<Exclusion> as serde::Deserialize>::deserialize(d)?;
    if v.len() > MAX_EXCLUSIONS {
        return Err(serde::de::Error::custom(format!(
            "at most {MAX_EXCLUSIONS} exclusions per domain"
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_value_round_trips() {
        let p = WafPolicy {
            mode: WafMode::Block,
            fail: FailMode::Closed,
            paranoia: 2,
            threshold: 7,
            body_limit: 4096,
            exclusions: vec!["942100@/search".parse().unwrap(), "920350".parse().unwrap()],
        };
        let v = p.to_map_value();
        assert_eq!(v, "block:closed:2:7:4096:942100@/search,920350");
        assert_eq!(WafPolicy::from_map_value(&v).unwrap(), p);
        let d = WafPolicy::default().to_map_value();
        assert_eq!(WafPolicy::from_map_value(&d).unwrap(), WafPolicy::default());
    }

    #[test]
    fn hostile_values_are_refused_with_the_field() {
        for (v, field) in [
            ("block:open:5:5:8192:", "paranoia"),
            ("block:open:0:5:8192:", "paranoia"),
            ("block:open:1:0:8192:", "threshold"),
            ("block:open:1:5:99999999:", "body_limit"),
            ("block:open:1:-5:8192:", "threshold"),
            ("deny:open:1:5:8192:", "mode"),
            ("block:maybe:1:5:8192:", "fail"),
            ("block:open:1:5:8192:0", "exclusion"),
            ("block:open:1:5:8192:942100@search", "exclusion"),
            ("block:open:1:5:8192:942100@/a b", "exclusion"),
            ("block:open:1:5:8192", "policy"),
        ] {
            let e = WafPolicy::from_map_value(v).unwrap_err();
            assert_eq!(e.field, field, "{v}: {e:?}");
        }
        let many = vec!["1"; MAX_EXCLUSIONS + 1].join(",");
        let e = WafPolicy::from_map_value(&format!("block:open:1:5:8192:{many}")).unwrap_err();
        assert_eq!(e.field, "exclusions");
    }

    #[test]
    fn json_is_checked_field_by_field() {
        let p: WafPolicy =
            serde_json::from_str(r#"{"mode":"detect","exclusions":[{"rule":942100,"path":"/x"}]}"#)
                .unwrap();
        assert_eq!(p.mode, WafMode::Detect);
        assert_eq!(p.paranoia, 1);
        assert!(p.exclusions[0].covers(942100, "/x/y"));
        assert!(!p.exclusions[0].covers(942100, "/y"));
        for bad in [
            r#"{"mode":"detect","paranoia":9}"#,
            r#"{"mode":"detect","threshold":0}"#,
            r#"{"mode":"detect","exclusions":[{"rule":0}]}"#,
            r#"{"mode":"detect","exclusions":[{"rule":1,"path":"x"}]}"#,
            r#"{"mode":"nope"}"#,
            r#"{"mode":"block","extra":1}"#,
            r#"{"mode":"block","exclusions":[{"rule":1,"extra":1}]}"#,
        ] {
            assert!(serde_json::from_str::<WafPolicy>(bad).is_err(), "{bad}");
        }
    }
}
