//! Per-client rate limits: the typed policy behind the stick table and the limit maps.
//!
//! A policy is five fixed rules, checked in this order, **first match wins** (the first rule
//! whose counter is above its threshold decides, whatever its action, log included):
//!
//! 1. `req_rate`: HTTP requests in the request window (the hard tier);
//! 2. `req_rate_soft`: the same counter, a lower threshold (the soft tier, e.g. a tarpit);
//! 3. `conn_rate`: new tracked streams in the connection window;
//! 4. `conn_cur`: streams in flight;
//! 5. `err_rate`: HTTP errors (4xx answers, limit answers included) in the error window.
//!
//! The thresholds and actions are map values (`LimitPolicy::map_value`), so changing them is a
//! runtime map change; the windows are part of the stick table's definition (`Windows`), so
//! changing one reloads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use super::block::BlockKey;
use super::error::Invalid;
use super::name::Domain;

/// Highest threshold accepted (a count within one window).
pub const MAX_THRESHOLD: u32 = 1_000_000;
/// Longest counter window, in seconds.
pub const MAX_WINDOW_SECS: u32 = 3600;
/// Longest tarpit, in seconds (a tarpit holds a connection: keep it short).
pub const MAX_TARPIT_SECS: u32 = 60;

/// One of the five rules of a policy, in evaluation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    ReqRate,
    ReqRateSoft,
    ConnRate,
    ConnCur,
    ErrRate,
}

impl Slot {
    /// A slot from its name (`req_rate`, …).
    pub fn from_name(name: &str) -> Result<Slot, Invalid> {
        Slot::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                Invalid::new(
                    "limit rule name",
                    name,
                    "must be req_rate, req_rate_soft, conn_rate, conn_cur or err_rate",
                )
            })
    }

    pub const ALL: [Slot; 5] = [
        Slot::ReqRate,
        Slot::ReqRateSoft,
        Slot::ConnRate,
        Slot::ConnCur,
        Slot::ErrRate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Slot::ReqRate => "req_rate",
            Slot::ReqRateSoft => "req_rate_soft",
            Slot::ConnRate => "conn_rate",
            Slot::ConnCur => "conn_cur",
            Slot::ErrRate => "err_rate",
        }
    }

    /// The HAProxy fetch of the tracked counter (track-sc0).
    pub fn fetch(self) -> &'static str {
        match self {
            Slot::ReqRate | Slot::ReqRateSoft => "sc_http_req_rate(0)",
            Slot::ConnRate => "sc_conn_rate(0)",
            Slot::ConnCur => "sc_conn_cur(0)",
            Slot::ErrRate => "sc_http_err_rate(0)",
        }
    }

    fn index(self) -> usize {
        Slot::ALL.iter().position(|s| *s == self).unwrap_or(0)
    }
}

/// The status of a deny or a tarpit: the three the old manager and the pages use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LimitStatus {
    S403,
    S429,
    S503,
}

impl LimitStatus {
    pub const ALL: [LimitStatus; 3] = [LimitStatus::S403, LimitStatus::S429, LimitStatus::S503];

    pub fn code(self) -> u16 {
        match self {
            LimitStatus::S403 => 403,
            LimitStatus::S429 => 429,
            LimitStatus::S503 => 503,
        }
    }

    fn parse(s: &str) -> Option<LimitStatus> {
        LimitStatus::ALL
            .into_iter()
            .find(|l| l.code().to_string() == s)
    }
}

/// What a rule does to a client above its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LimitAction {
    /// Answer at once with the status.
    Deny(LimitStatus),
    /// Hold the request for the tarpit timeout, then answer with the status.
    Tarpit(LimitStatus),
    /// Let it through; `txn.limit_rule` names the rule for the logs.
    Log,
}

impl LimitAction {
    /// Every deny and tarpit, for the template's one line per action.
    pub fn enforcing() -> Vec<LimitAction> {
        LimitStatus::ALL
            .into_iter()
            .flat_map(|s| [LimitAction::Deny(s), LimitAction::Tarpit(s)])
            .collect()
    }

    /// The map code the frontend compares: `d429`, `t403`, `log`.
    pub fn code(self) -> String {
        match self {
            LimitAction::Deny(s) => format!("d{}", s.code()),
            LimitAction::Tarpit(s) => format!("t{}", s.code()),
            LimitAction::Log => "log".to_string(),
        }
    }

    fn from_code(s: &str) -> Option<LimitAction> {
        match s {
            "log" => Some(LimitAction::Log),
            _ => {
                let status = LimitStatus::parse(s.get(1..)?)?;
                match &s[..1] {
                    "d" => Some(LimitAction::Deny(status)),
                    "t" => Some(LimitAction::Tarpit(status)),
                    _ => None,
                }
            }
        }
    }
}

/// `deny`, `deny-403`, `tarpit`, `tarpit-503`, `log` (the status defaults to 429).
impl FromStr for LimitAction {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<LimitAction, Invalid> {
        let bad = || {
            Invalid::new(
                "limit action",
                s,
                "must be log, deny or tarpit, optionally with -403, -429 or -503 (deny-403)",
            )
        };
        let (kind, status) = match s.split_once('-') {
            Some((k, st)) => (k, LimitStatus::parse(st).ok_or_else(bad)?),
            None => (s, LimitStatus::S429),
        };
        match kind {
            "deny" => Ok(LimitAction::Deny(status)),
            "tarpit" => Ok(LimitAction::Tarpit(status)),
            "log" if !s.contains('-') => Ok(LimitAction::Log),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for LimitAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitAction::Deny(s) => write!(f, "deny-{}", s.code()),
            LimitAction::Tarpit(s) => write!(f, "tarpit-{}", s.code()),
            LimitAction::Log => f.write_str("log"),
        }
    }
}

/// A threshold (1..=`MAX_THRESHOLD`) and what happens above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LimitRule {
    threshold: u32,
    pub action: LimitAction,
}

impl LimitRule {
    pub fn new(threshold: u64, action: LimitAction) -> Result<LimitRule, Invalid> {
        if threshold == 0 || threshold > u64::from(MAX_THRESHOLD) {
            return Err(Invalid::new(
                "limit threshold",
                &threshold.to_string(),
                format!("must be 1 to {MAX_THRESHOLD} (use off to disable the rule)"),
            ));
        }
        Ok(LimitRule {
            threshold: threshold as u32,
            action,
        })
    }

    pub fn threshold(self) -> u32 {
        self.threshold
    }

    /// `off` or `THRESHOLD:ACTION` (`5000:deny`, `100:tarpit-403`).
    pub fn parse_spec(s: &str) -> Result<Option<LimitRule>, Invalid> {
        if s == "off" {
            return Ok(None);
        }
        let bad = || {
            Invalid::new(
                "limit rule",
                s,
                "must be off or THRESHOLD:ACTION (5000:deny)",
            )
        };
        let (t, a) = s.split_once(':').ok_or_else(bad)?;
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) || t.len() > 10 {
            return Err(bad());
        }
        LimitRule::new(t.parse().map_err(|_| bad())?, a.parse()?).map(Some)
    }
}

/// The five rules, `None` where a rule is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LimitPolicy {
    rules: [Option<LimitRule>; 5],
}

impl Default for LimitPolicy {
    fn default() -> LimitPolicy {
        LimitPolicy::standard()
    }
}

impl LimitPolicy {
    /// The old manager's five generic rules and thresholds (PEER-API §2.6).
    pub fn standard() -> LimitPolicy {
        let r = |t, a| {
            Some(LimitRule {
                threshold: t,
                action: a,
            })
        };
        LimitPolicy {
            rules: [
                r(5000, LimitAction::Deny(LimitStatus::S429)),
                r(3000, LimitAction::Tarpit(LimitStatus::S429)),
                r(500, LimitAction::Deny(LimitStatus::S429)),
                r(500, LimitAction::Deny(LimitStatus::S429)),
                r(100, LimitAction::Tarpit(LimitStatus::S403)),
            ],
        }
    }

    pub fn off() -> LimitPolicy {
        LimitPolicy { rules: [None; 5] }
    }

    /// A named preset: `standard` or `off`.
    pub fn preset(name: &str) -> Result<LimitPolicy, Invalid> {
        match name {
            "standard" => Ok(LimitPolicy::standard()),
            "off" | "custom" => Ok(LimitPolicy::off()),
            _ => Err(Invalid::new(
                "limits preset",
                name,
                "must be standard, off or custom",
            )),
        }
    }

    pub fn rule(&self, slot: Slot) -> Option<LimitRule> {
        self.rules[slot.index()]
    }

    /// This policy with one rule replaced (call `check` once every rule is set).
    pub fn with(mut self, slot: Slot, rule: Option<LimitRule>) -> LimitPolicy {
        self.rules[slot.index()] = rule;
        self
    }

    /// Refuses a policy whose soft request tier could never match.
    pub fn check(self) -> Result<LimitPolicy, Invalid> {
        if let (Some(hard), Some(soft)) = (self.rule(Slot::ReqRate), self.rule(Slot::ReqRateSoft)) {
            if soft.threshold >= hard.threshold {
                return Err(Invalid::new(
                    "req_rate_soft",
                    &soft.threshold.to_string(),
                    format!(
                        "must be below req_rate ({}): the hard tier is checked first, so a higher soft tier never matches",
                        hard.threshold
                    ),
                ));
            }
        }
        Ok(self)
    }

    /// The map value the frontend splits with `field(N,:)`: `T:ACTION` per rule in order,
    /// `0:-` for a rule that is off.
    pub fn map_value(&self) -> String {
        let parts: Vec<String> = self
            .rules
            .iter()
            .map(|r| match r {
                Some(r) => format!("{}:{}", r.threshold, r.action.code()),
                None => "0:-".to_string(),
            })
            .collect();
        parts.join(":")
    }

    /// Parses `map_value`'s form back (how the database stores it).
    pub fn from_map_value(s: &str) -> Result<LimitPolicy, Invalid> {
        let bad = || Invalid::new("limit policy", s, "must be five THRESHOLD:ACTION pairs");
        let fields: Vec<&str> = s.split(':').collect();
        if fields.len() != 10 {
            return Err(bad());
        }
        let mut policy = LimitPolicy::off();
        for (i, pair) in fields.chunks(2).enumerate() {
            policy.rules[i] = match (pair[0], pair[1]) {
                ("0", "-") => None,
                (t, a) => Some(LimitRule::new(
                    t.parse().map_err(|_| bad())?,
                    LimitAction::from_code(a).ok_or_else(bad)?,
                )?),
            };
        }
        policy.check()
    }

    /// Field numbers (1-based) of a slot's threshold and action in `map_value`.
    pub fn fields(slot: Slot) -> (usize, usize) {
        let i = slot.index() * 2 + 1;
        (i, i + 1)
    }
}

impl serde::Serialize for LimitPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(Slot::ALL.len()))?;
        for slot in Slot::ALL {
            let spec = match self.rule(slot) {
                Some(r) => format!("{}:{}", r.threshold, r.action),
                None => "off".to_string(),
            };
            map.serialize_entry(slot.name(), &spec)?;
        }
        map.end()
    }
}

/// The stick table's counter windows, in seconds. Part of the table definition: a change
/// reloads (and the new table starts empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Windows {
    pub req: u32,
    pub conn: u32,
    pub err: u32,
}

impl Default for Windows {
    fn default() -> Windows {
        Windows {
            req: 10,
            conn: 10,
            err: 30,
        }
    }
}

/// A window or tarpit length: whole seconds, `10` or `10s`, within `1..=max`.
pub fn parse_secs(field: &'static str, s: &str, max: u32) -> Result<u32, Invalid> {
    let digits = s.strip_suffix('s').unwrap_or(s);
    let bad = || Invalid::new(field, s, format!("must be 1 to {max} seconds (10 or 10s)"));
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match digits.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(bad()),
    }
}

/// Checks a number of seconds from JSON against the same rule.
pub fn check_secs(field: &'static str, n: u64, max: u32) -> Result<u32, Invalid> {
    parse_secs(field, &n.to_string(), max)
}

/// Addresses counted as local when `local_exempt` is on.
pub const LOCAL_NETS: [&str; 7] = [
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
];

/// The edge's whole rate-limit configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    pub windows: Windows,
    /// `timeout tarpit`, seconds (a reload when changed).
    pub tarpit_secs: u32,
    /// Clients in `LOCAL_NETS` skip every rule (a map entry: runtime).
    pub local_exempt: bool,
    /// The policy of every domain without its own.
    pub default: LimitPolicy,
    pub domains: BTreeMap<Domain, LimitPolicy>,
    /// Trusted clients that skip every rule (still counted in the table).
    pub exempt: BTreeSet<BlockKey>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            windows: Windows::default(),
            tarpit_secs: 10,
            local_exempt: true,
            default: LimitPolicy::standard(),
            domains: BTreeMap::new(),
            exempt: BTreeSet::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_round_trips_through_the_map_value() {
        let p = LimitPolicy::standard();
        assert_eq!(
            p.map_value(),
            "5000:d429:3000:t429:500:d429:500:d429:100:t403"
        );
        assert_eq!(LimitPolicy::from_map_value(&p.map_value()).unwrap(), p);
        let off = LimitPolicy::off();
        assert_eq!(LimitPolicy::from_map_value(&off.map_value()).unwrap(), off);
    }

    #[test]
    fn rules_and_actions_parse_and_refuse() {
        let r = LimitRule::parse_spec("100:tarpit-403").unwrap().unwrap();
        assert_eq!(
            (r.threshold(), r.action),
            (100, LimitAction::Tarpit(LimitStatus::S403))
        );
        assert_eq!(LimitRule::parse_spec("off").unwrap(), None);
        for bad in [
            "0:deny",
            "1000001:deny",
            "-1:deny",
            "5:deny-200",
            "5:drop",
            "5",
            "5:log-429",
            "5:deny\nx",
            "9999999999999:deny",
            " 5:deny",
            "5:deny 403",
        ] {
            assert!(LimitRule::parse_spec(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_soft_tier_above_the_hard_one_is_refused() {
        let rule = LimitRule::parse_spec("6000:tarpit").unwrap();
        assert!(LimitPolicy::standard()
            .with(Slot::ReqRateSoft, rule)
            .check()
            .is_err());
        assert!(LimitPolicy::from_map_value("10:d429:10:t429:0:-:0:-:0:-").is_err());
        assert!(LimitPolicy::preset("strict").is_err());
    }

    #[test]
    fn windows_are_bounded() {
        assert_eq!(parse_secs("window", "10s", MAX_WINDOW_SECS).unwrap(), 10);
        for bad in ["0", "0s", "3601", "", "s", "1m", "10 s", "1e3"] {
            assert!(
                parse_secs("window", bad, MAX_WINDOW_SECS).is_err(),
                "{bad:?}"
            );
        }
    }
}
