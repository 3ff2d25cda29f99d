//! A server's typed options. Three spellings parse into the same [`ServerOptions`]: the CLI's
//! `key=value` items (`set`), the JSON of the `/v1` API (serde), and the free text of the old
//! manager's `options` field (`parse_text`: `check inter 2s fall 3 ssl verify none`), which is
//! read token by token and never pasted. [`ServerOptions::to_text`] writes the same text form
//! (the store keeps it, and it parses back to the same value).

use std::fmt;
use std::str::FromStr;

use super::error::{serde_via_str, Invalid};
use super::name::DomainName;

/// A health-check interval: 100 ms to 1 h, in HAProxy's time format (`500ms`, `2s`, `1m`; a
/// bare number is milliseconds, as in HAProxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interval(u32);

impl Interval {
    pub fn millis(self) -> u32 {
        self.0
    }
}

impl FromStr for Interval {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Interval, Invalid> {
        let rule = "must be a time from 100ms to 1h, like 500ms, 2s or 1m";
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (num, unit) = s.split_at(digits);
        let factor = match unit {
            "" | "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(Invalid::new("inter", s, rule)),
        };
        num.parse::<u32>()
            .ok()
            .and_then(|n| n.checked_mul(factor))
            .filter(|ms| (100..=3_600_000).contains(ms))
            .map(Interval)
            .ok_or_else(|| Invalid::new("inter", s, rule))
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            ms if ms % 60_000 == 0 => write!(f, "{}m", ms / 60_000),
            ms if ms % 1_000 == 0 => write!(f, "{}s", ms / 1_000),
            ms => write!(f, "{ms}ms"),
        }
    }
}
serde_via_str!(Interval);

/// The PROXY protocol header sent to the server before the request (`v1`, `v2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProxyProtocol {
    V1,
    V2,
}

impl ProxyProtocol {
    fn keyword(self) -> &'static str {
        match self {
            ProxyProtocol::V1 => "send-proxy",
            ProxyProtocol::V2 => "send-proxy-v2",
        }
    }
}

/// How the server's certificate is checked when the edge speaks TLS to it (`none`, `system`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verify {
    /// Not checked (`verify none`): the old manager's usual choice for self-signed backends.
    None,
    /// Checked against the system's CA store (`verify required ca-file @system-ca`).
    System,
}

// Through strings (serde_via_str), so a wrong JSON type is a typed error naming the rule.
impl FromStr for ProxyProtocol {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<ProxyProtocol, Invalid> {
        match s {
            "v1" => Ok(ProxyProtocol::V1),
            "v2" => Ok(ProxyProtocol::V2),
            _ => Err(Invalid::new("send_proxy", s, "must be v1 or v2")),
        }
    }
}

impl fmt::Display for ProxyProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProxyProtocol::V1 => "v1",
            ProxyProtocol::V2 => "v2",
        })
    }
}
serde_via_str!(ProxyProtocol);

impl FromStr for Verify {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Verify, Invalid> {
        match s {
            "none" => Ok(Verify::None),
            "system" => Ok(Verify::System),
            _ => Err(Invalid::new("verify", s, "must be none or system")),
        }
    }
}

impl fmt::Display for Verify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verify::None => "none",
            Verify::System => "system",
        })
    }
}
serde_via_str!(Verify);

/// The SNI the edge sends to the server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sni {
    /// The client's Host header (`sni req.hdr(host)`).
    RequestHost,
    /// A fixed name (`sni str(NAME)`).
    Name(DomainName),
}

impl FromStr for Sni {
    type Err = Invalid;
    /// `host` (or `req.hdr(host)`) for the client's Host, else a host name (or `str(NAME)`).
    fn from_str(s: &str) -> Result<Sni, Invalid> {
        let lower = s.to_ascii_lowercase();
        if matches!(lower.as_str(), "host" | "req.hdr(host)" | "req.hdr(host,1)") {
            return Ok(Sni::RequestHost);
        }
        let name = lower
            .strip_prefix("str(")
            .and_then(|n| n.strip_suffix(')'))
            .unwrap_or(&lower);
        name.parse::<DomainName>().map(Sni::Name).map_err(|_| {
            Invalid::new(
                "sni",
                s,
                "must be req.hdr(host) (the client's Host) or a host name, str(NAME)",
            )
        })
    }
}

impl fmt::Display for Sni {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sni::RequestHost => f.write_str("host"),
            Sni::Name(n) => write!(f, "{n}"),
        }
    }
}
serde_via_str!(Sni);

/// TLS from the edge to the server (`ssl`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    #[serde(default = "verify_none")]
    pub verify: Verify,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<Sni>,
}

fn verify_none() -> Verify {
    Verify::None
}

/// The options a server may carry; there is deliberately no free-text option. Values from
/// serde are checked by [`ServerOptions::validate`] before use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerOptions {
    /// 0–256 (HAProxy's range); `None` keeps HAProxy's default of 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u16>,
    /// 1–1,000,000 concurrent connections; `None` is unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxconn: Option<u32>,
    /// Health checks on (default) or off.
    #[serde(default = "check_on")]
    pub check: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter: Option<Interval>,
    /// Failed checks before the server is down, 1–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fall: Option<u8>,
    /// Passed checks before the server is up again, 1–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rise: Option<u8>,
    /// Used only when every non-backup server is down.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backup: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_proxy: Option<ProxyProtocol>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
}

fn check_on() -> bool {
    true
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            weight: None,
            maxconn: None,
            check: true,
            inter: None,
            fall: None,
            rise: None,
            backup: false,
            send_proxy: None,
            tls: None,
        }
    }
}

/// What the free text may hold besides the options themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextContext {
    /// `[resolvers]` is configured: `resolvers NAME` / `init-addr …` are then accepted (hapctl
    /// resolves every host-name server at runtime through its own resolvers, with
    /// `init-addr last,libc,none`, so the tokens add nothing); without it they are refused.
    pub resolvers: bool,
}

const TEXT_RULE: &str = "known options: check, inter T, fall N, rise N, weight N, maxconn N, backup, send-proxy, send-proxy-v2, ssl, verify none|required, sni req.hdr(host)|str(NAME), resolvers NAME, init-addr LIST";

impl ServerOptions {
    pub fn validate(self) -> Result<ServerOptions, Invalid> {
        if let Some(w) = self.weight.filter(|w| *w > 256) {
            return Err(Invalid::new("weight", &w.to_string(), "must be 0 to 256"));
        }
        if let Some(m) = self.maxconn.filter(|m| *m == 0 || *m > 1_000_000) {
            return Err(Invalid::new(
                "maxconn",
                &m.to_string(),
                "must be 1 to 1000000",
            ));
        }
        for (field, v) in [("fall", self.fall), ("rise", self.rise)] {
            if let Some(n) = v.filter(|n| *n == 0 || *n > 100) {
                return Err(Invalid::new(field, &n.to_string(), "must be 1 to 100"));
            }
        }
        Ok(self)
    }

    /// Applies one command-line item: `key=value`, or a flag (`check`, `nocheck`, `backup`,
    /// `send-proxy`, `send-proxy-v2`, `ssl`). `verify=` and `sni=` imply `ssl`.
    pub fn set(&mut self, item: &str) -> Result<(), Invalid> {
        match item.split_once('=') {
            None => match item {
                "check" => self.check = true,
                "nocheck" => self.check = false,
                "backup" => self.backup = true,
                "send-proxy" => self.send_proxy = Some(ProxyProtocol::V1),
                "send-proxy-v2" => self.send_proxy = Some(ProxyProtocol::V2),
                "ssl" => self.tls_mut(),
                _ => return Err(unknown_item(item)),
            },
            Some(("check", v)) => {
                self.check = match v {
                    "on" | "true" | "yes" => true,
                    "off" | "false" | "no" => false,
                    _ => return Err(Invalid::new("check", v, "must be on or off")),
                }
            }
            Some((key, v)) => self.set_value(key, v).map_err(|e| match e {
                Some(e) => e,
                None => unknown_item(item),
            })?,
        }
        *self = self.clone().validate()?;
        Ok(())
    }

    /// A valued option shared by both spellings; `Err(None)` for an unknown key.
    fn set_value(&mut self, key: &str, v: &str) -> Result<(), Option<Invalid>> {
        let number = |field: &'static str| {
            v.parse::<u32>()
                .map_err(|_| Invalid::new(field, v, "must be a whole number"))
        };
        let small = |field: &'static str| {
            number(field).and_then(|n| {
                u8::try_from(n).map_err(|_| Invalid::new(field, v, "must be 1 to 100"))
            })
        };
        match key {
            "weight" => {
                let w = number("weight")?;
                self.weight = Some(
                    u16::try_from(w).map_err(|_| Invalid::new("weight", v, "must be 0 to 256"))?,
                );
            }
            "maxconn" => self.maxconn = Some(number("maxconn")?),
            "inter" => self.inter = Some(v.parse()?),
            "fall" => self.fall = Some(small("fall")?),
            "rise" => self.rise = Some(small("rise")?),
            "verify" => {
                let verify = match v {
                    "none" => Verify::None,
                    "required" | "system" => Verify::System,
                    _ => return Err(Some(Invalid::new("verify", v, "must be none or required"))),
                };
                self.tls_mut();
                if let Some(tls) = &mut self.tls {
                    tls.verify = verify;
                }
            }
            "sni" => {
                let sni: Sni = v.parse()?;
                self.tls_mut();
                if let Some(tls) = &mut self.tls {
                    tls.sni = Some(sni);
                }
            }
            _ => return Err(None),
        }
        Ok(())
    }

    /// TLS on, keeping what was set (`verify none` by default, as the old manager's servers).
    fn tls_mut(&mut self) {
        self.tls.get_or_insert(ServerTls {
            verify: Verify::None,
            sni: None,
        });
    }

    /// Parses the old manager's free-text `options` (`check inter 2s fall 3 backup`): every
    /// token must be a known option, with its value; no `check` means no health checks, as in
    /// a pasted server line. `verify` and `sni` need `ssl` before them.
    pub fn parse_text(text: &str, context: TextContext) -> Result<ServerOptions, Invalid> {
        let mut options = ServerOptions {
            check: false,
            ..ServerOptions::default()
        };
        let mut tokens = text.split_whitespace();
        while let Some(token) = tokens.next() {
            let mut value = |key: &str| {
                tokens.next().ok_or_else(|| {
                    Invalid::new("options", text, format!("`{key}` needs a value after it"))
                })
            };
            match token {
                "check" => options.check = true,
                "no-check" => options.check = false,
                "backup" => options.backup = true,
                "send-proxy" => options.send_proxy = Some(ProxyProtocol::V1),
                "send-proxy-v2" => options.send_proxy = Some(ProxyProtocol::V2),
                "ssl" => options.tls_mut(),
                "ca-file" => {
                    if value(token)? != "@system-ca" {
                        return Err(Invalid::new(
                            "options",
                            text,
                            "`ca-file` can only be @system-ca (the system's CA store)",
                        ));
                    }
                }
                "resolvers" | "init-addr" if context.resolvers => {
                    value(token)?;
                }
                "resolvers" | "init-addr" => {
                    return Err(Invalid::new(
                        "options",
                        text,
                        format!("`{token}` needs a [resolvers] section in hapctl.toml (the nameservers that resolve the servers' names at runtime)"),
                    ))
                }
                "verify" | "sni" if options.tls.is_none() => {
                    return Err(Invalid::new(
                        "options",
                        text,
                        format!("`{token}` needs `ssl` before it"),
                    ))
                }
                "weight" | "maxconn" | "inter" | "fall" | "rise" | "verify" | "sni" => {
                    let v = value(token)?;
                    options
                        .set_value(token, v)
                        .map_err(|e| e.unwrap_or_else(|| unknown_token(text, token)))?;
                }
                _ => return Err(unknown_token(text, token)),
            }
        }
        options.validate()
    }

    /// The text form `parse_text` reads back to the same options (with
    /// `resolvers: false`), also the option part of the rendered server line after `check`.
    pub fn to_text(&self) -> String {
        let mut words: Vec<String> = Vec::new();
        if self.check {
            words.push("check".into());
        }
        if let Some(i) = self.inter {
            words.push(format!("inter {i}"));
        }
        if let Some(n) = self.fall {
            words.push(format!("fall {n}"));
        }
        if let Some(n) = self.rise {
            words.push(format!("rise {n}"));
        }
        if let Some(w) = self.weight {
            words.push(format!("weight {w}"));
        }
        if let Some(m) = self.maxconn {
            words.push(format!("maxconn {m}"));
        }
        if self.backup {
            words.push("backup".into());
        }
        if let Some(p) = self.send_proxy {
            words.push(p.keyword().into());
        }
        if let Some(tls) = &self.tls {
            words.push(match tls.verify {
                Verify::None => "ssl verify none".into(),
                Verify::System => "ssl verify required ca-file @system-ca".into(),
            });
            match &tls.sni {
                Some(Sni::RequestHost) => words.push("sni req.hdr(host)".into()),
                Some(Sni::Name(n)) => words.push(format!("sni str({n})")),
                None => {}
            }
        }
        words.join(" ")
    }

    /// The options beyond weight, maxconn and check (the store keeps those in columns of
    /// their own), in the text form.
    pub fn extra_text(&self) -> String {
        ServerOptions {
            weight: None,
            maxconn: None,
            check: false,
            ..self.clone()
        }
        .to_text()
    }
}

fn unknown_item(item: &str) -> Invalid {
    Invalid::new(
        "server option",
        item,
        "known options are weight=N, maxconn=N, check=on|off (or check / nocheck), inter=T, fall=N, rise=N, backup, send-proxy, send-proxy-v2, ssl, verify=none|required, sni=host|NAME",
    )
}

fn unknown_token(text: &str, token: &str) -> Invalid {
    Invalid::new(
        "options",
        text,
        format!(
            "`{}` is not a server option hapctl knows; {TEXT_RULE}",
            super::bounded(token)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: TextContext = TextContext { resolvers: false };

    fn text(s: &str) -> Result<String, String> {
        ServerOptions::parse_text(s, PLAIN)
            .map(|o| o.to_text())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_old_managers_options_become_typed() {
        assert_eq!(text("").unwrap(), "");
        assert_eq!(text("check").unwrap(), "check");
        assert_eq!(
            text("check inter 2s fall 3 rise 2 weight 10 maxconn 50 backup").unwrap(),
            "check inter 2s fall 3 rise 2 weight 10 maxconn 50 backup"
        );
        assert_eq!(text("inter 2000 check").unwrap(), "check inter 2s");
        assert_eq!(text("send-proxy-v2").unwrap(), "send-proxy-v2");
        assert_eq!(text("ssl verify none").unwrap(), "ssl verify none");
        assert_eq!(
            text("check ssl verify required ca-file @system-ca sni req.hdr(Host)").unwrap(),
            "check ssl verify required ca-file @system-ca sni req.hdr(host)"
        );
        assert_eq!(
            text("ssl sni str(api.example.com)").unwrap(),
            "ssl verify none sni str(api.example.com)"
        );
        let with_dns = TextContext { resolvers: true };
        let o = ServerOptions::parse_text(
            "check resolvers docker_dns init-addr last,libc,none",
            with_dns,
        )
        .unwrap();
        assert_eq!(o.to_text(), "check");
    }

    #[test]
    fn anything_else_is_refused_with_the_token_named() {
        for (input, needle) in [
            ("check redir http://evil", "`redir`"),
            ("check\nbackend x", "`backend`"),
            ("weight", "needs a value"),
            ("weight 300", "0 to 256"),
            ("fall 0", "1 to 100"),
            ("inter 10ms", "100ms to 1h"),
            ("inter 2x", "100ms to 1h"),
            ("verify none", "needs `ssl`"),
            ("ssl verify maybe", "none or required"),
            ("ssl sni %[src]", "sni"),
            ("ssl ca-file /etc/passwd", "@system-ca"),
            ("resolvers docker_dns", "[resolvers]"),
            ("None", "`None`"),
        ] {
            let e = text(input).unwrap_err();
            assert!(e.contains(needle), "{input:?}: {e}");
        }
    }

    #[test]
    fn command_line_items_and_intervals() {
        let mut o = ServerOptions::default();
        for item in [
            "inter=500ms",
            "fall=2",
            "backup",
            "send-proxy",
            "sni=host",
            "verify=required",
        ] {
            o.set(item).unwrap();
        }
        assert_eq!(
            o.to_text(),
            "check inter 500ms fall 2 backup send-proxy ssl verify required ca-file @system-ca sni req.hdr(host)"
        );
        assert!(o.clone().set("inter=0").is_err());
        assert_eq!("1m".parse::<Interval>().unwrap().to_string(), "1m");
        assert_eq!("90s".parse::<Interval>().unwrap().to_string(), "90s");
        assert_eq!("1500".parse::<Interval>().unwrap().to_string(), "1500ms");
        assert!("2h".parse::<Interval>().is_err());
    }
}
