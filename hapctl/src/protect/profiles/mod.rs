//! Path-protection profiles as typed rules, rendered by code into the frontend (pure).
//!
//! A profile is one module returning `Rules`: named ACLs, counting tables and ordered rules.
//! The template only places the rendered block; the per-domain switch is the profiles map
//! (`maps/profiles.map`, a runtime change), read once into `txn.profiles`. Every rule of a
//! profile runs only when the host's value holds the profile's flag, and never for a client
//! of the rate-limit exemption map (`txn.limit_exempt`). A profile's thresholds are numbers in
//! that map value, read into variables like the rate limits' (`field(N,:)`, compared with
//! `sub`), so changing one is a runtime change too. A deny answers with a themed page.

pub mod wordpress;

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::model::{Domain, DomainProtections, ProtectProfile};

/// An ACL line: `acl NAME CRITERION`. Lines with one name are OR-ed by HAProxy.
pub struct Acl {
    pub name: &'static str,
    pub criterion: &'static str,
}

/// A counting table: its own backend section with one `http_req_rate` window.
pub struct Table {
    pub name: &'static str,
    pub window_secs: u32,
}

/// What a rule does when its condition holds.
pub enum Action {
    /// `track-scN` the client in a table (before the rules that read `sc_*(N)`).
    Track { counter: u8, table: &'static str },
    /// Set a transaction variable to `true` (a later rule or the response reads it).
    Flag(&'static str),
    /// Set a transaction variable to field `field` of the host's map value (a threshold).
    Threshold { var: &'static str, field: usize },
    /// Deny with a status and a page; `tarpit` holds the connection for `timeout tarpit` first.
    Deny {
        status: u16,
        tarpit: bool,
        page: Page,
    },
    /// Redirect (a log-format location).
    Redirect { code: u16, location: &'static str },
    /// A response header added when the request set the flag.
    ResponseHeader {
        flag: &'static str,
        name: &'static str,
        value: &'static str,
    },
}

/// The themed page a deny answers with.
#[derive(Clone, Copy)]
pub enum Page {
    /// `pages/denied.html`: a rule refused the request.
    Denied,
    /// `pages/limited.html` with `Retry-After`: a rate limit.
    Limited { retry_after: u32 },
}

/// Where the rendered pages are (`http-request deny ... lf-file PATH`).
pub struct PagePaths {
    pub denied: String,
    pub limited: String,
}

/// The content type of every page HAProxy answers itself.
pub const PAGE_TYPE: &str = "\"text/html; charset=utf-8\"";

/// One rule: an action, its condition (ACL names and `{ anonymous }` terms, AND-ed) and,
/// for a deny or a redirect, the name logged in `txn.denied_by` (`profile:rule`).
pub struct Rule {
    pub name: &'static str,
    pub action: Action,
    pub cond: &'static str,
}

#[derive(Default)]
pub struct Rules {
    pub acls: Vec<Acl>,
    pub tables: Vec<Table>,
    pub rules: Vec<Rule>,
}

/// A profile's rules (the one place that knows every profile).
fn rules(profile: ProtectProfile) -> Rules {
    match profile {
        ProtectProfile::WordPress => wordpress::rules(),
    }
}

/// The map flag of a profile, matched with `-m sub`.
fn flag_acl(profile: ProtectProfile) -> String {
    format!("prof_{0} var(txn.profiles) -m sub :{0}:", profile.name())
}

/// `deny_status N content-type T lf-file PAGE [hdr Retry-After S]`: the arguments of a
/// themed deny or tarpit.
pub fn deny_args(status: u16, page: Page, pages: &PagePaths) -> String {
    match page {
        Page::Denied => format!(
            "deny_status {status} content-type {PAGE_TYPE} lf-file {}",
            pages.denied
        ),
        Page::Limited { retry_after } => format!(
            "deny_status {status} content-type {PAGE_TYPE} lf-file {} hdr Retry-After {retry_after}",
            pages.limited
        ),
    }
}

/// The frontend block of every profile, in `ProtectProfile::ALL` order.
pub fn frontend(pages: &PagePaths) -> String {
    let mut out = String::new();
    for profile in ProtectProfile::ALL {
        let r = rules(profile);
        let name = profile.name();
        let _ = writeln!(
            out,
            "    # Profile {name} (hapctl domain profile NAME --add {name})."
        );
        let _ = writeln!(out, "    acl {}", flag_acl(profile));
        for acl in &r.acls {
            let _ = writeln!(out, "    acl {} {}", acl.name, acl.criterion);
        }
        let on = format!("prof_{name} !{{ var(txn.limit_exempt) -m found }}");
        for rule in &r.rules {
            let by = format!("{name}:{}", rule.name);
            let cond = format!("{on} {}", rule.cond);
            match &rule.action {
                Action::Track { counter, table } => {
                    let _ = writeln!(
                        out,
                        "    http-request track-sc{counter} var(txn.client_ip) table {table} if {cond}"
                    );
                }
                Action::Threshold { var, field } => {
                    let _ = writeln!(
                        out,
                        "    http-request set-var(txn.{var}) var(txn.profiles),field({field},:) if {cond}"
                    );
                }
                Action::Flag(var) => {
                    let _ = writeln!(
                        out,
                        "    http-request set-var(txn.{var}) bool(true) if {cond}"
                    );
                }
                Action::ResponseHeader { flag, name, value } => {
                    let _ = writeln!(
                        out,
                        "    http-after-response add-header {name} \"{value}\" if {{ var(txn.{flag}) -m bool }}"
                    );
                }
                Action::Deny { .. } | Action::Redirect { .. } => {
                    // The first deciding rule wins; the access log names it.
                    let _ = writeln!(
                        out,
                        "    http-request set-var(txn.denied_by) str({by}) if !{{ var(txn.denied_by) -m found }} {cond}"
                    );
                    let decided = format!("{{ var(txn.denied_by) -m str {by} }}");
                    let _ = match rule.action {
                        Action::Deny {
                            status,
                            tarpit,
                            page,
                        } => writeln!(
                            out,
                            "    http-request {} {} if {decided}",
                            if tarpit { "tarpit" } else { "deny" },
                            deny_args(status, page, pages)
                        ),
                        Action::Redirect { code, location } => writeln!(
                            out,
                            "    http-request redirect location {location} code {code} if {decided}"
                        ),
                        _ => unreachable!(),
                    };
                }
            }
        }
    }
    out
}

/// The counting tables' backend sections, after the frontend.
pub fn tables() -> String {
    let mut out = String::new();
    for profile in ProtectProfile::ALL {
        for t in rules(profile).tables {
            let _ = write!(
                out,
                "# Counts for profile {}.\nbackend {}\n    stick-table type ipv6 size 100k expire 30m store http_req_rate({}s)\n",
                profile.name(),
                t.name,
                t.window_secs
            );
        }
    }
    out
}

/// `maps/profiles.map` (exact names) or `maps/profiles-wildcards.map` (`.base`, longest
/// suffix first, for `map_end`): host → `:flag:…:`.
pub fn map(out: &mut String, protections: &BTreeMap<Domain, DomainProtections>, wildcards: bool) {
    let mut domains: Vec<_> = protections
        .iter()
        .filter(|(d, p)| d.is_wildcard() == wildcards && !p.is_default())
        .collect();
    domains.sort_by_key(|(d, _)| (std::cmp::Reverse(d.name().as_str().len()), *d));
    for (domain, p) in domains {
        let _ = match wildcards {
            true => writeln!(out, ".{} {}", domain.name(), p.map_value()),
            false => writeln!(out, "{domain} {}", p.map_value()),
        };
    }
}
