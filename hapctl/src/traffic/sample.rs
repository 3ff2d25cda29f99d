//! One access-log line as traffic counts it (pure): the keys of the log-format in
//! `haproxy.cfg.j2` that say which domain, what answer, how many bytes, how long, and which
//! rule turned the request away.
//!
//! A line carries some 25 keys and six are counted. Each of the six is found with `memmem`
//! and read where it stands, rather than the whole line being parsed: that is most of what
//! counting costs the daemon per request. A line where either string value holds an escape is
//! parsed whole with serde_json, which also says what the quick read would have said for any
//! line (the tests compare them).

use std::borrow::Cow;
use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde::Deserialize;

/// What a line says, as serde_json reads it. Borrowed from the line where it has no escapes.
#[derive(Debug, Default, Deserialize)]
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
    if line.first() != Some(&b'{') || line.last() != Some(&b'}') {
        return None;
    }
    let l = match quick(line) {
        Some(l) => l,
        None => serde_json::from_slice(line).ok()?,
    };
    Some(sample(l))
}

/// The keys counted, each with its quote and colon: inside a JSON string a quote is always
/// escaped, so these are found only as keys.
static KEYS: LazyLock<[Finder<'static>; 6]> = LazyLock::new(|| {
    [
        "\"host\":",
        "\"status\":",
        "\"bytes\":",
        "\"bytes_in\":",
        "\"ta\":",
        "\"denied_by\":",
    ]
    .map(|k| Finder::new(k.as_bytes()).into_owned())
});

/// The six keys read where they stand; `None` when a string holds an escape, a value is not
/// what the template writes there, or neither host nor status is there (then serde_json
/// reads the line).
fn quick(line: &[u8]) -> Option<Line<'_>> {
    let [host, status, bytes, bytes_in, ta, denied_by] = &*KEYS;
    let value = |key: &Finder| key.find(line).map(|at| &line[at + key.needle().len()..]);
    // Without either, it is not the template's line: serde_json says whether it is JSON.
    value(host).or(value(status))?;
    Some(Line {
        host: value(host).map_or(Some(Cow::Borrowed("")), plain_string)?,
        status: value(status).map_or(Some(0), integer)?,
        bytes: value(bytes).map_or(Some(0), integer)?,
        bytes_in: value(bytes_in).map_or(Some(0), integer)?,
        ta: value(ta).map_or(Some(0), integer)?,
        denied_by: value(denied_by).map_or(Some(Cow::Borrowed("")), plain_string)?,
    })
}

/// A string value without escapes at the start of `rest`.
fn plain_string(rest: &[u8]) -> Option<Cow<'_, str>> {
    let body = rest.strip_prefix(b"\"")?;
    let end = memchr::memchr2(b'"', b'\\', body)?;
    (body[end] == b'"')
        .then(|| std::str::from_utf8(&body[..end]).ok())
        .flatten()
        .map(Cow::Borrowed)
}

/// An integer value at the start of `rest`, ended by `,` or `}`.
fn integer(rest: &[u8]) -> Option<i64> {
    let end = memchr::memchr2(b',', b'}', rest)?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

fn sample(l: Line<'_>) -> Sample<'_> {
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
    Sample {
        host,
        class,
        bytes_in: u64::try_from(l.bytes_in).unwrap_or(0),
        bytes_out: u64::try_from(l.bytes).unwrap_or(0),
        time_ms,
        reason,
    }
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

    /// What serde_json alone makes of a line.
    fn parsed_whole(line: &[u8]) -> Option<Sample<'_>> {
        if line.first() != Some(&b'{') || line.last() != Some(&b'}') {
            return None;
        }
        serde_json::from_slice::<Line>(line).ok().map(sample)
    }

    #[test]
    fn the_quick_read_says_what_serde_json_says() {
        let full = |host: &str, status: &str, ta: &str, denied: &str| {
            format!(
                r#"{{"ts":1765065600.123,"id":"0A1B:12_34","client":"127.0.0.1","peer":"127.0.0.1","host":"{host}","method":"GET","path":"/a\"status\":9,\"host\":\"x","status":{status},"bytes":130,"bytes_in":80,"tq":0,"tw":0,"tc":0,"tr":0,"ta":{ta},"term":"----","backend":"be_x","proto":"HTTP/1.1","tls":"","sni":"","denied_by":"{denied}","waf":"","waf_rules":"","waf_error":"","waf_ms":""}}"#
            )
        };
        let lines = [
            full("shop.example.com", "200", "7", "-"),
            full("Shop.Example.COM", "503", "12000", "-"),
            full("a.test", "-1", "-1", "-"),
            full("a.test", "429", "0", "limit:req_rate"),
            full("a.test", "403", "1", "waf:942100,941100"),
            full("", "400", "0", "unknown-host"),
            // Escapes: serde_json reads these.
            full(r"caf\u00e9.test", "200", "1", "-"),
            full(r#"a\"b.test"#, "200", "1", "-"),
            // Keys dropped, reordered, spaced, or odd values, as an overridden template may.
            r#"{"status":204,"host":"b.test"}"#.to_string(),
            r#"{"host": "b.test", "status": 200, "ta": 3}"#.to_string(),
            r#"{"ta":5,"denied_by":"blocked","bytes_in":1,"bytes":2,"status":403,"host":"c.test"}"#
                .to_string(),
            r#"{"host":"d.test","status":null}"#.to_string(),
            r#"{"host":7,"status":200}"#.to_string(),
            r#"{"vhost":"e.test","status":200}"#.to_string(),
            "{}".to_string(),
            "{not json}".to_string(),
            "Proxy fe_http stopped.".to_string(),
        ];
        for line in &lines {
            assert_eq!(
                parse(line.as_bytes()),
                parsed_whole(line.as_bytes()),
                "{line}"
            );
        }
        // The template's own lines take the quick read.
        assert!(quick(lines[0].as_bytes()).is_some());
        assert!(
            quick(lines[6].as_bytes()).is_none(),
            "an escape is serde_json's"
        );
    }
}
