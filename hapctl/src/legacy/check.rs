//! The rows HAProxy itself refuses. The model admits no server HAProxy 2.6 or 3.0 refuses
//! (a name that does not resolve only waits in maintenance), so this is the net under it: the
//! set the import makes is checked on a scratch copy (`haproxy -c`), each ALERT is traced to
//! the new domain whose backend section holds its line (or that it names), that row is refused
//! with HAProxy's reason, and the rest is checked again, at most [`MAX_ROUNDS`] times. An ALERT
//! no row explains leaves the set refused, as a whole.

use std::collections::BTreeMap;

use serde::Serialize;

use super::changes::state_changes;
use super::{ItemStatus, LegacyError, Plan};
use crate::edge::{Edge, ScratchCheck};
use crate::haproxy::ConfigVerdict;
use crate::model::Domain;

/// Checks of a scratch copy one import may run.
pub const MAX_ROUNDS: usize = 3;
/// HAProxy's reason, as much of it as a refusal shows (2.6 lists every keyword it knows after
/// an unknown one).
const MAX_REASON_CHARS: usize = 240;

/// What `haproxy -c` says of the set the import makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum HaproxyCheck {
    /// HAProxy accepts it (the rows it refused left out).
    Valid,
    /// HAProxy refuses it for reasons no row explains: its ALERT lines.
    Invalid { messages: Vec<String> },
    /// `haproxy -c` could not run: nothing is known.
    Unavailable { reason: String },
}

/// Checks what importing `plan` makes, refusing in `plan` each row HAProxy refuses; `None`
/// when the plan changes nothing `haproxy -c` looks at.
pub fn check(edge: &mut Edge, plan: &mut Plan) -> Result<Option<HaproxyCheck>, LegacyError> {
    for round in 1..=MAX_ROUNDS {
        let (todo, _) = state_changes(edge, plan)?;
        if todo.is_empty() {
            // Every row left out, or nothing of the desired state to import in the first place.
            return Ok((round > 1).then_some(HaproxyCheck::Valid));
        }
        let state = edge.preview_state(&todo)?;
        let scratch = edge.check_scratch(&state)?;
        let messages = match &scratch.verdict {
            ConfigVerdict::Valid => return Ok(Some(HaproxyCheck::Valid)),
            ConfigVerdict::Unavailable { reason } => {
                let reason = reason.clone();
                return Ok(Some(HaproxyCheck::Unavailable { reason }));
            }
            ConfigVerdict::Invalid { messages } => messages,
        };
        let blamed = blame(messages, &scratch, plan);
        if blamed.is_empty() || round == MAX_ROUNDS {
            let messages = alerts(messages).map(String::from).collect();
            return Ok(Some(HaproxyCheck::Invalid { messages }));
        }
        for (domain, reasons) in blamed {
            let reason = format!("HAProxy refuses its backend: {}", reasons.join(" | "));
            plan.refuse_domain(&domain, &reason);
        }
    }
    unreachable!("the last round returns")
}

fn alerts(messages: &[String]) -> impl Iterator<Item = &str> {
    messages
        .iter()
        .map(String::as_str)
        .filter(|m| m.starts_with("[ALERT]"))
}

/// The new domains HAProxy's ALERT lines point at, each with HAProxy's reasons.
fn blame(
    messages: &[String],
    scratch: &ScratchCheck,
    plan: &Plan,
) -> BTreeMap<Domain, Vec<String>> {
    let mut backends: BTreeMap<String, &Domain> = BTreeMap::new();
    for item in plan.domains.iter().filter(|i| i.status == ItemStatus::New) {
        let d = &item.value.domain;
        backends.insert(d.backend_name(), d);
        backends.insert(d.sse_twin_name(), d);
    }
    let path = scratch.config_path.display().to_string();
    let mut out: BTreeMap<Domain, Vec<String>> = BTreeMap::new();
    for message in alerts(messages) {
        let at = position(message, &path);
        let backend = match at {
            Some((line, _)) => section_at(&scratch.config, line),
            None => named_backend(message, &backends),
        };
        let Some(domain) = backend.and_then(|b| backends.get(b)) else {
            continue;
        };
        let reason = at.map_or(message, |(_, rest)| rest);
        out.entry((*domain).clone())
            .or_default()
            .push(crate::model::bounded_to(reason, MAX_REASON_CHARS));
    }
    out
}

/// The line of `path` a message names (`[PATH:LINE]`, after `parsing ` on 2.6), and the
/// message after it.
fn position<'m>(message: &'m str, path: &str) -> Option<(usize, &'m str)> {
    let start = message.find(&format!("[{path}:"))? + path.len() + 2;
    let (line, rest) = message[start..].split_once(']')?;
    let rest = rest.trim_start_matches([' ', ':']);
    Some((line.parse().ok()?, rest))
}

/// The backend whose section holds line `line` (1-based) of `config`: hapctl writes section
/// headers unindented, their lines indented.
fn section_at(config: &str, line: usize) -> Option<&str> {
    let header = config
        .lines()
        .take(line)
        .filter(|l| !l.is_empty() && !l.starts_with([' ', '\t', '#']))
        .last()?;
    header.strip_prefix("backend ").map(str::trim)
}

/// A new domain's backend the message names in quotes (`'d_x'`, `'d_x/s1'`).
fn named_backend<'m>(message: &'m str, backends: &BTreeMap<String, &Domain>) -> Option<&'m str> {
    message
        .split('\'')
        .skip(1)
        .step_by(2)
        .map(|quoted| quoted.split('/').next().unwrap_or(quoted))
        .find(|name| backends.contains_key(*name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_is_traced_to_the_backend_section_holding_its_line() {
        let config = "global\n    daemon\n\n# a comment\nbackend d_a.test\n    # a.test (default)\n    balance roundrobin\n    server s1 127.0.0.1:80 nope\n\nbackend d_b.test\n    server s1 127.0.0.1:81\n";
        assert_eq!(section_at(config, 8), Some("d_a.test"));
        assert_eq!(section_at(config, 11), Some("d_b.test"));
        assert_eq!(section_at(config, 2), None, "global");
        // HAProxy 2.6 and 3.0 name the position with and without `parsing`.
        let path = "/srv/run/dry-run.1.2/haproxy.cfg";
        for m in [
            format!("[ALERT] config : parsing [{path}:8] : 'server d_a.test/s1' unknown keyword 'nope'."),
            format!("[ALERT] config : [{path}:8] : 'server d_a.test/s1' unknown keyword 'nope'."),
        ] {
            assert_eq!(
                position(&m, path),
                Some((8, "'server d_a.test/s1' unknown keyword 'nope'."))
            );
        }
        assert_eq!(
            position(
                "[ALERT] config : Fatal errors found in configuration.",
                path
            ),
            None
        );
        let a: Domain = "a.test".parse().unwrap();
        let backends = BTreeMap::from([("d_a.test".to_string(), &a)]);
        let m = "[ALERT] config : Proxy 'd_a.test': unable to find required use_backend: 'x'.";
        assert_eq!(named_backend(m, &backends), Some("d_a.test"));
        assert_eq!(
            named_backend("[ALERT] config : 'global' nope", &backends),
            None
        );
    }
}
