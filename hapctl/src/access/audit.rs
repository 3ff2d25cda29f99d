//! What an audit record says about a request: the objects it names and a short summary of
//! what it asked, with secrets left out. Pure.

use serde_json::Value;

/// Body fields whose values name the objects a change touches.
const OBJECT_FIELDS: &[&str] = &[
    "domain",
    "name",
    "ip",
    "ip_address",
    "key",
    "net",
    "nets",
    "app",
    "version",
    "primary",
    "domains",
    "keys",
    "client",
];

/// Field names whose values are never written to the trail.
const SECRET_WORDS: &[&str] = &[
    "pem", "token", "password", "secret", "private", "bundle", "chain",
];

/// Longest value quoted in a summary.
const MAX_VALUE: usize = 80;
/// Longest summary.
const MAX_SUMMARY: usize = 400;

/// The objects and summary of a request: `params` are its path parameters (already
/// decoded), `body` its JSON body, if it had one that parses.
pub fn describe(params: &[String], body: Option<&Value>) -> (Vec<String>, String) {
    let mut objects: Vec<String> = params.to_vec();
    let mut summary = Vec::new();
    match body {
        Some(Value::Object(map)) => describe_object(map, &mut objects, &mut summary),
        Some(Value::Array(items)) => {
            summary.push(format!("{} items", items.len()));
            for item in items {
                if let Value::Object(map) = item {
                    describe_object(map, &mut objects, &mut Vec::new());
                }
            }
        }
        _ => {}
    }
    objects.dedup();
    let mut text = summary.join(" ");
    if text.len() > MAX_SUMMARY {
        text.truncate(floor_char(&text, MAX_SUMMARY));
        text.push('…');
    }
    (objects, text)
}

fn describe_object(
    map: &serde_json::Map<String, Value>,
    objects: &mut Vec<String>,
    summary: &mut Vec<String>,
) {
    for (field, value) in map {
        if is_secret(field) {
            summary.push(format!("{field}=(secret)"));
            continue;
        }
        let shown = shown(value);
        if OBJECT_FIELDS.contains(&field.as_str()) {
            match value {
                Value::Array(items) => objects.extend(items.iter().filter_map(scalar)),
                v => objects.extend(scalar(v)),
            }
        }
        summary.push(format!("{field}={shown}"));
    }
}

fn is_secret(field: &str) -> bool {
    let f = field.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| f.contains(w))
}

/// A value as the summary shows it: scalars quoted (PEM never), collections by size.
fn shown(value: &Value) -> String {
    match value {
        Value::Array(items) => format!("[{}]", items.len()),
        Value::Object(map) => format!("{{{}}}", map.len()),
        v => match scalar(v) {
            Some(s) if s.contains("-----BEGIN") => "(secret)".into(),
            Some(mut s) => {
                if s.len() > MAX_VALUE {
                    s.truncate(floor_char(&s, MAX_VALUE));
                    s.push('…');
                }
                s
            }
            None => "null".into(),
        },
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.contains("-----BEGIN") => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn floor_char(s: &str, at: usize) -> usize {
    (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_come_from_the_path_and_the_naming_fields() {
        let body = json!({"ip": "192.0.2.1", "reason": "scan", "ttl": "1h"});
        let (objects, summary) = describe(&[], Some(&body));
        assert_eq!(objects, ["192.0.2.1"]);
        assert_eq!(summary, "ip=192.0.2.1 reason=scan ttl=1h");
        let list = json!([{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}]);
        let (objects, summary) = describe(&["x".into()], Some(&list));
        assert_eq!(objects, ["x", "192.0.2.1", "192.0.2.2"]);
        assert_eq!(summary, "2 items");
    }

    #[test]
    fn secrets_never_reach_the_summary() {
        let body = json!({
            "pem": "-----BEGIN PRIVATE KEY-----\nabc",
            "token": "s3cret",
            "note": "-----BEGIN CERTIFICATE-----",
            "servers": [{"addr": "10.0.0.1:80"}],
        });
        let (objects, summary) = describe(&["shop.example".into()], Some(&body));
        assert_eq!(objects, ["shop.example"]);
        assert!(
            !summary.contains("s3cret") && !summary.contains("BEGIN"),
            "{summary}"
        );
        assert!(summary.contains("servers=[1]"), "{summary}");
    }

    #[test]
    fn long_values_are_cut() {
        let body = json!({"reason": "é".repeat(200)});
        let (_, summary) = describe(&[], Some(&body));
        assert!(summary.len() < 200, "{summary}");
    }
}
