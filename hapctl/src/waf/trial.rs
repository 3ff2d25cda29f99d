//! A request evaluated against the rules without sending it: `hapctl waf test` and
//! `POST /v1/waf/test` (which runs `hapctl waf test` as a child, so libmodsecurity's memory and
//! any crash of it stay out of the daemon). One parser and one scoring for both.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Domain, Invalid, WafMode, WafPolicy};

use super::engine::{Engine, EngineError};
use super::matches::RuleMatch;
use super::message::Inspect;
use super::verdict::WafVerdict;

/// Bounds on what a trial takes (an edge would refuse larger requests long before the WAF).
pub const MAX_URL: usize = 8192;
pub const MAX_HEADERS: usize = 100;
pub const MAX_HEADER: usize = 8192;
pub const MAX_BODY: usize = 65_536;

/// A request to evaluate, checked field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    pub method: String,
    /// The URL's host (`https://shop.example.com/…`), if it names one.
    pub host: Option<Domain>,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Trial {
    /// `url`: a path and query (`/search?q=1`) or an `http://` / `https://` URL; `headers`:
    /// names and values (see [`header_line`]). A Host header is added from the URL's host when none is given, as
    /// every request through the edge has one.
    pub fn parse(
        url: &str,
        method: &str,
        headers: &[(String, String)],
        body: Option<&str>,
    ) -> Result<Trial, Invalid> {
        if url.len() > MAX_URL || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Invalid::new(
                "url",
                url,
                format!("must be at most {MAX_URL} bytes, with no spaces or control characters (percent-encode them)"),
            ));
        }
        let (host, target) = split_url(url)?;
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if method.is_empty() || method.len() > 32 || !method.bytes().all(is_token) {
            return Err(Invalid::new(
                "method",
                method,
                "must be an HTTP method (GET, POST, …): letters and token characters, at most 32",
            ));
        }
        if headers.len() > MAX_HEADERS {
            return Err(Invalid::new(
                "headers",
                &headers.len().to_string(),
                format!("at most {MAX_HEADERS} headers"),
            ));
        }
        let mut parsed: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| checked_header(n, v))
            .collect::<Result<_, _>>()?;
        if let Some(host) = &host {
            if !parsed.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
                parsed.insert(0, ("Host".into(), host.to_string()));
            }
        }
        let body = body.unwrap_or_default();
        frame_body(&mut parsed, method, body);
        if body.len() > MAX_BODY {
            return Err(Invalid::new(
                "body",
                &format!("{} bytes", body.len()),
                format!("at most {MAX_BODY} bytes (the agent sees at most [waf] body_max of it)"),
            ));
        }
        Ok(Trial {
            method: method.to_string(),
            host,
            path: path.to_string(),
            query: query.to_string(),
            headers: parsed,
            body: body.to_string(),
        })
    }

    /// The policy the edge would score this request under: `given`, else the stored policy of
    /// the URL's host (or `domain`), else the default block policy.
    pub fn policy(
        &self,
        given: Option<WafPolicy>,
        domain: Option<&Domain>,
        stored: &BTreeMap<Domain, WafPolicy>,
    ) -> (WafPolicy, String) {
        if let Some(p) = given {
            return (p, "given".into());
        }
        let block = WafPolicy {
            mode: WafMode::Block,
            ..WafPolicy::default()
        };
        match domain.or(self.host.as_ref()) {
            Some(d) => match stored.get(d) {
                Some(p) => (p.clone(), format!("{d}'s")),
                None => (block, format!("default (no policy stored for {d})")),
            },
            None => (block, "default".into()),
        }
    }

    /// The request as the agent gets it: the body cut to what HAProxy would send
    /// (`body_max`, `[waf] body_max`) and the policy inspects.
    fn inspect(&self, policy: WafPolicy, body_max: u32) -> Inspect {
        let mut body = self.body.clone().into_bytes();
        body.truncate(policy.body_limit.min(body_max) as usize);
        Inspect {
            policy,
            id: "hapctl-waf-test".into(),
            client_ip: "127.0.0.1".into(),
            client_port: 0,
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            version: "1.1".into(),
            headers: self
                .headers
                .iter()
                .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
            body,
            body_cut: false,
        }
    }

    /// Runs the request through `engine` and scores it under `policy`.
    pub fn evaluate(
        &self,
        engine: &Engine,
        policy: WafPolicy,
        body_max: u32,
    ) -> Result<TrialOutcome, EngineError> {
        let req = self.inspect(policy, body_max);
        let uri = req.uri();
        let matches = engine.evaluate(&req.request(&uri), req.policy.paranoia)?;
        let verdict = WafVerdict::score(&matches, &req.policy, &req.path);
        let outcome = match (req.policy.mode, verdict.over) {
            (WafMode::Off, _) => "off",
            (WafMode::Block, true) => "block",
            (WafMode::Detect, true) => "detect",
            (_, false) => "pass",
        };
        Ok(TrialOutcome {
            verdict: outcome,
            score: verdict.score,
            threshold: req.policy.threshold,
            counted: verdict.rules,
            matched: matches.iter().map(Matched::from).collect(),
            policy: req.policy.to_map_value(),
            policy_from: String::new(),
        })
    }

    /// The `hapctl waf test` arguments that make the same trial (the daemon's child).
    pub fn to_args(&self, policy: &WafPolicy) -> Vec<String> {
        let url = match &self.host {
            Some(h) => format!("http://{h}{}", self.target()),
            None => self.target(),
        };
        let mut args = vec![url, "--method".into(), self.method.clone()];
        for (n, v) in &self.headers {
            args.push("--header".into());
            args.push(format!("{n}: {v}"));
        }
        if !self.body.is_empty() {
            args.push("--body".into());
            args.push(self.body.clone());
        }
        args.push("--policy".into());
        args.push(policy.to_map_value());
        args
    }

    fn target(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

/// What a trial found. `verdict`: block, detect (would be logged, not blocked), pass, or off
/// (the policy inspects nothing; the score is what it would be).
#[derive(Debug, Clone, Serialize)]
pub struct TrialOutcome {
    pub verdict: &'static str,
    pub score: u32,
    pub threshold: u32,
    /// The rules that counted toward the score (exclusions dropped), as the log names them.
    pub counted: Vec<u32>,
    pub matched: Vec<Matched>,
    /// The policy scored under, as its map value, and where it came from.
    pub policy: String,
    pub policy_from: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Matched {
    pub id: u32,
    pub severity: Option<u8>,
    pub message: String,
    pub points: u32,
}

impl From<&RuleMatch> for Matched {
    fn from(m: &RuleMatch) -> Matched {
        Matched {
            id: m.id,
            severity: m.severity,
            message: m.message.clone(),
            points: m.anomaly_points(),
        }
    }
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `Name: value` (the CLI's `-H`) as a name and a value, checked by [`Trial::parse`].
pub fn header_line(h: &str) -> Result<(String, String), Invalid> {
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| Invalid::new("header", h, "must be `Name: value`"))?;
    Ok((name.trim().to_string(), value.trim().to_string()))
}

/// The URL's host (none for a path alone) and its target (path and query).
fn split_url(url: &str) -> Result<(Option<Domain>, &str), Invalid> {
    let (host, target) = match url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    {
        Some(rest) => {
            let (authority, target) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
            let name = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
            let host = name
                .parse::<Domain>()
                .map_err(|e| Invalid::new("url", url, format!("its host: {}", e.rule)))?;
            (Some(host), target)
        }
        None => (None, url),
    };
    if !target.starts_with('/') {
        return Err(Invalid::new(
            "url",
            url,
            "must be a path (/search?q=1) or an http:// or https:// URL",
        ));
    }
    Ok((host, target))
}

/// A Content-Length as a client sends it, unless the headers frame the body already: the CRS
/// counts a body without a length (920180).
fn frame_body(headers: &mut Vec<(String, String)>, method: &str, body: &str) {
    let framed = headers.iter().any(|(n, _)| {
        n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
    });
    if !framed && (!body.is_empty() || ["POST", "PUT", "PATCH"].contains(&method)) {
        headers.push(("Content-Length".into(), body.len().to_string()));
    }
}

fn checked_header(name: &str, value: &str) -> Result<(String, String), Invalid> {
    let shown = format!("{name}: {value}");
    let bad = |rule: String| Invalid::new("header", &shown, rule);
    if name.is_empty() || !name.bytes().all(is_token) {
        return Err(bad(
            "its name must be an HTTP token (letters, digits, -)".into()
        ));
    }
    if shown.len() > MAX_HEADER || value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(bad(format!(
            "must be at most {MAX_HEADER} bytes, with no control characters"
        )));
    }
    Ok((name.to_string(), value.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Trial, Invalid> {
        Trial::parse(url, "GET", &[], None)
    }

    #[test]
    fn urls_give_their_host_path_and_query() {
        let t = parse("https://shop.example.com:8443/search?q=1").unwrap();
        assert_eq!(t.host, Some("shop.example.com".parse().unwrap()));
        assert_eq!((t.path.as_str(), t.query.as_str()), ("/search", "q=1"));
        assert_eq!(t.headers, [("Host".into(), "shop.example.com".into())]);
        let t = parse("http://shop.example.com").unwrap();
        assert_eq!(t.path, "/");
        let t = parse("/a?b=c").unwrap();
        assert_eq!((t.host, t.headers.len()), (None, 0));
        // A Host header given wins.
        let t = Trial::parse(
            "http://a.example.com/",
            "GET",
            &[("host".into(), "b.example.com".into())],
            None,
        )
        .unwrap();
        assert_eq!(t.headers, [("host".into(), "b.example.com".into())]);
        // A body gets its length, as a client sends it.
        let t = Trial::parse("/c", "POST", &[], Some("a=b")).unwrap();
        assert_eq!(t.headers, [("Content-Length".into(), "3".into())]);
    }

    #[test]
    fn hostile_input_is_refused_with_the_field() {
        for (url, method, header, body, field) in [
            ("search?q=1", "GET", "A: b", "", "url"),
            ("/a b", "GET", "A: b", "", "url"),
            ("/a\r\nX: y", "GET", "A: b", "", "url"),
            ("http://exa mple.com/", "GET", "A: b", "", "url"),
            ("http://-bad-.com/", "GET", "A: b", "", "url"),
            ("ftp://example.com/", "GET", "A: b", "", "url"),
            ("/", "", "A: b", "", "method"),
            ("/", "GE T", "A: b", "", "method"),
            ("/", "GET", "Bad Name: x", "", "header"),
            ("/", "GET", "A:b: x", "", "header"),
            ("/", "GET", "A: b\r\nInjected: 1", "", "header"),
        ] {
            let body = (!body.is_empty()).then_some(body);
            let (n, v) = header.split_once(": ").unwrap();
            let e = Trial::parse(url, method, &[(n.into(), v.into())], body).unwrap_err();
            assert_eq!(e.field, field, "{url} {method} {header}: {e}");
        }
        let long = "x".repeat(MAX_BODY + 1);
        assert_eq!(
            Trial::parse("/", "POST", &[], Some(&long))
                .unwrap_err()
                .field,
            "body"
        );
        assert_eq!(header_line("no colon").unwrap_err().field, "header");
        let many = vec![("A".to_string(), "b".to_string()); MAX_HEADERS + 1];
        assert_eq!(
            Trial::parse("/", "GET", &many, None).unwrap_err().field,
            "headers"
        );
        assert_eq!(
            parse(&format!("/{}", "a".repeat(MAX_URL)))
                .unwrap_err()
                .field,
            "url"
        );
    }

    #[test]
    fn the_policy_is_the_given_one_then_the_hosts_then_the_default() {
        let shop: Domain = "shop.example.com".parse().unwrap();
        let detect = WafPolicy {
            mode: WafMode::Detect,
            threshold: 9,
            ..WafPolicy::default()
        };
        let stored = BTreeMap::from([(shop.clone(), detect.clone())]);
        let t = parse("https://shop.example.com/").unwrap();
        assert_eq!(t.policy(None, None, &stored).0, detect);
        let given = WafPolicy::default();
        assert_eq!(t.policy(Some(given.clone()), None, &stored).0, given);
        let bare = parse("/").unwrap();
        assert_eq!(bare.policy(None, Some(&shop), &stored).0, detect);
        let (p, from) = bare.policy(None, None, &stored);
        assert_eq!((p.mode, from.as_str()), (WafMode::Block, "default"));
    }

    #[test]
    fn its_arguments_parse_back_to_the_same_trial() {
        let t = Trial::parse(
            "https://shop.example.com/c?x=1",
            "POST",
            &[("Content-Type".into(), "text/plain".into())],
            Some("a=b"),
        )
        .unwrap();
        let p = WafPolicy::default();
        let args = t.to_args(&p);
        let (url, rest) = args.split_first().unwrap();
        let header: Vec<(String, String)> = rest
            .chunks(2)
            .filter(|c| c[0] == "--header")
            .map(|c| header_line(&c[1]).unwrap())
            .collect();
        let again = Trial::parse(url, "POST", &header, Some("a=b")).unwrap();
        assert_eq!(again, t);
        assert_eq!(args.last().unwrap(), &p.to_map_value());
    }
}
