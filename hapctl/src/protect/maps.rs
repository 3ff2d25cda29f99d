//! The limit maps and the template's view of the limits (pure).

use std::fmt::Write;

use serde::Serialize;

use crate::model::{LimitAction, LimitPolicy, Limits, Slot, LOCAL_NETS};

/// The stick table (a backend of its own): `show table st_clients`.
pub const TABLE: &str = "st_clients";
/// The key of the edge-wide default in the limits map: never a host name.
pub const DEFAULT_KEY: &str = "*";
/// How long an idle client stays in the table.
pub const EXPIRE: &str = "10m";
/// Most clients the table tracks; the oldest are dropped beyond.
pub const TABLE_SIZE: &str = "200k";

#[derive(Serialize)]
struct SlotView {
    name: &'static str,
    fetch: &'static str,
    threshold_field: usize,
    action_field: usize,
    /// `Retry-After` of its answer: the counter's window (1 s for streams in flight).
    retry_after: u32,
}

#[derive(Serialize)]
struct ActionView {
    code: String,
    verb: &'static str,
    status: u16,
    /// `Retry-After` is sent with 429 and 503, not with 403.
    retry: bool,
}

/// What the template needs: table definition, slot order, one line per action.
#[derive(Serialize)]
pub struct LimitsView {
    table: &'static str,
    size: &'static str,
    expire: &'static str,
    store: String,
    tarpit: String,
    default_key: &'static str,
    slots: Vec<SlotView>,
    actions: Vec<ActionView>,
}

pub fn view(limits: &Limits) -> LimitsView {
    let w = limits.windows;
    LimitsView {
        table: TABLE,
        size: TABLE_SIZE,
        expire: EXPIRE,
        store: format!(
            "conn_cur,conn_rate({}s),http_req_rate({}s),http_err_rate({}s)",
            w.conn, w.req, w.err
        ),
        tarpit: format!("{}s", limits.tarpit_secs),
        default_key: DEFAULT_KEY,
        slots: Slot::ALL
            .into_iter()
            .map(|s| {
                let (threshold_field, action_field) = LimitPolicy::fields(s);
                SlotView {
                    name: s.name(),
                    fetch: s.fetch(),
                    threshold_field,
                    action_field,
                    retry_after: match s {
                        Slot::ReqRate | Slot::ReqRateSoft => w.req,
                        Slot::ConnRate => w.conn,
                        Slot::ConnCur => 1,
                        Slot::ErrRate => w.err,
                    },
                }
            })
            .collect(),
        actions: LimitAction::enforcing()
            .into_iter()
            .map(|a| {
                let (verb, status) = match a {
                    LimitAction::Deny(s) => ("deny", s.code()),
                    LimitAction::Tarpit(s) => ("tarpit", s.code()),
                    LimitAction::Log => unreachable!("log does not enforce"),
                };
                ActionView {
                    code: a.code(),
                    verb,
                    status,
                    retry: status != 403,
                }
            })
            .collect(),
    }
}

/// `maps/limits.map` (exact names and the default, `*`) or `maps/limits-wildcards.map`
/// (`.base`, longest suffix first, for `map_end`).
pub fn limits_map(out: &mut String, limits: &Limits, wildcards: bool) {
    if !wildcards {
        let _ = writeln!(out, "{DEFAULT_KEY} {}", limits.default.map_value());
    }
    let mut domains: Vec<_> = limits
        .domains
        .iter()
        .filter(|(d, _)| d.is_wildcard() == wildcards)
        .collect();
    domains.sort_by_key(|(d, _)| (std::cmp::Reverse(d.name().as_str().len()), *d));
    for (domain, policy) in domains {
        let key = match wildcards {
            true => format!(".{}", domain.name()),
            false => domain.to_string(),
        };
        let _ = writeln!(out, "{key} {}", policy.map_value());
    }
}

/// `maps/limits-exempt.map` for `map_ip`: trusted networks (`trusted`), then the local ones
/// (`local`) when `local_exempt` is on. Matched with `-m found` and no default value.
pub fn exempt_map(out: &mut String, limits: &Limits) {
    for net in &limits.exempt {
        let _ = writeln!(out, "{net} trusted");
    }
    if limits.local_exempt {
        for net in LOCAL_NETS {
            let _ = writeln!(out, "{net} local");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_first_then_domains() {
        let mut limits = Limits::default();
        limits
            .domains
            .insert("a.example.com".parse().unwrap(), LimitPolicy::off());
        limits
            .domains
            .insert("*.example.com".parse().unwrap(), LimitPolicy::off());
        let mut exact = String::new();
        limits_map(&mut exact, &limits, false);
        assert_eq!(
            exact,
            "* 5000:d429:3000:t429:500:d429:500:d429:100:t403\na.example.com 0:-:0:-:0:-:0:-:0:-\n"
        );
        let mut wild = String::new();
        limits_map(&mut wild, &limits, true);
        assert_eq!(wild, ".example.com 0:-:0:-:0:-:0:-:0:-\n");
    }

    #[test]
    fn local_exemption_is_a_map_entry() {
        let mut limits = Limits::default();
        limits.exempt.insert("203.0.113.0/24".parse().unwrap());
        let mut out = String::new();
        exempt_map(&mut out, &limits);
        assert!(out.starts_with("203.0.113.0/24 trusted\n127.0.0.0/8 local\n"));
        limits.local_exempt = false;
        out.clear();
        exempt_map(&mut out, &limits);
        assert_eq!(out, "203.0.113.0/24 trusted\n");
    }
}
