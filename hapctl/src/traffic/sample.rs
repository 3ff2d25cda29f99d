//! One access-log line as traffic counts it (pure): the keys of the log-format in
//! `haproxy.cfg.j2` that say which domain, what answer, how many bytes, how long, and which
//! rule turned the request away.

use std::borrow::Cow;

use serde::Deserialize;

/// What a line says. Borrowed from the line where it has no escapes.
#[derive(Debug, Deserialize)]
struct Line<'a> {
    #[serde(borrow, default)]
    host: Cow<'a, str>,
    #[serde(default)]
    status: i64,
    /// `%B`: bytes sent to the client.
    #[serde(default)]
    bytes: i64,
    /// `%U`: bytes received from the client.
    #[serde(default)]
    bytes_in: i64,
    /// `%Ta`: the request's active time, ms (-1 when it never ended properly).
    #[serde(default)]
    ta: i64,
    #[serde(borrow, default)]
    denied_by: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The request's host, lowercase; empty when HAProxy had none.
    pub host: Cow<'a, str>,
    /// 1..=5 for 1xx..5xx, 0 for no answer or an odd status.
    pub class: usize,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// `None` when the request was turned away or its time is unknown.
    pub time_ms: Option<u32>,
    /// The rule that answered instead of the backend, as [`reason`] names it.
    pub reason: Option<Cow<'a, str>>,
}

/// The sample of an access line; `None` for a line that is not one (an overridden template
/// may drop keys: they count as absent).
pub fn parse(line: &[u8]) -> Option<Sample<'_>> {
    let l: Line = serde_json::from_slice(line).ok()?;
    let reason = reason(&l.denied_by);
    let class = match l.status {
        100..=599 => (l.status / 100) as usize,
        _ => 0,
    };
    let time_ms = match (&reason, u32::try_from(l.ta)) {
        (None, Ok(ms)) => Some(ms),
        _ => None,
    };
    let host = if l.host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(l.host.to_ascii_lowercase())
    } else {
        l.host
    };
    Some(Sample {
        host,
        class,
        bytes_in: u64::try_from(l.bytes_in).unwrap_or(0),
        bytes_out: u64::try_from(l.bytes).unwrap_or(0),
        time_ms,
        reason,
    })
}

/// The reason a request was turned away, from `denied_by`: `blocked`, `suspended`,
/// `unknown-host`, `waf` (whatever rules matched), `waf-unavailable`, `limit:RULE`,
/// `profile:RULE`; `None` for `-` (the backend answered).
fn reason<'a>(denied_by: &Cow<'a, str>) -> Option<Cow<'a, str>> {
    match denied_by.as_ref() {
        "" | "-" => None,
        d if d == "waf" || d.starts_with("waf:") => Some(Cow::Borrowed("waf")),
        _ => Some(denied_by.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_gives_its_domain_answer_bytes_time_and_reason() {
        let line = br#"{"ts":1.5,"host":"Shop.example.com","status":503,"bytes":120,"bytes_in":80,"ta":7,"denied_by":"-"}"#;
        let s = parse(line).unwrap();
        assert_eq!(
            s,
            Sample {
                host: "shop.example.com".into(),
                class: 5,
                bytes_in: 80,
                bytes_out: 120,
                time_ms: Some(7),
                reason: None,
            }
        );
        let waf =
            parse(br#"{"host":"a.test","status":403,"ta":1,"denied_by":"waf:942100,941100"}"#);
        assert_eq!(waf.unwrap().reason.as_deref(), Some("waf"));
        let limited = parse(br#"{"host":"a.test","status":429,"denied_by":"limit:req_rate"}"#);
        let limited = limited.unwrap();
        assert_eq!(limited.reason.as_deref(), Some("limit:req_rate"));
        assert_eq!(
            limited.time_ms, None,
            "a turned-away request has no backend time"
        );
        let aborted = parse(br#"{"host":"a.test","status":-1,"ta":-1,"denied_by":"-"}"#);
        assert_eq!(aborted.unwrap().class, 0);
        assert!(parse(b"Proxy fe_http stopped.").is_none());
    }
}
