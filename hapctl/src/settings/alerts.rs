//! `[alerts]`: where hapctl serve sends an alert when something needs a person
//! (`crate::alerts`, `docs/alerts.md`): webhooks (JSON, or Slack's shape) and e-mail over SMTP,
//! and the thresholds of the conditions it watches.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::model::bounded;

/// A webhook's URL. It may carry a token (Slack's do): shown only as scheme and host.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookUrl(String);

impl WebhookUrl {
    fn parse(s: &str) -> Result<WebhookUrl, String> {
        let rest = s
            .strip_prefix("https://")
            .or_else(|| s.strip_prefix("http://"))
            .ok_or_else(|| "a webhook is an http:// or https:// URL".to_string())?;
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        if host.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a webhook is an http:// or https:// URL with a host and no spaces".into());
        }
        Ok(WebhookUrl(s.to_string()))
    }

    /// The whole URL, for the request only.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// Scheme and host: what logs and messages may show.
    pub fn redacted(&self) -> String {
        let (scheme, rest) = self.0.split_once("://").unwrap_or(("", &self.0));
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = host.rsplit('@').next().unwrap_or(host);
        format!("{scheme}://{host}/…")
    }
}

impl std::fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// The body a webhook gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// hapctl's own JSON (`docs/alerts.md`).
    Json,
    /// `{"text": …}`, what Slack's (and Mattermost's, Rocket.Chat's) incoming webhooks take.
    Slack,
}

/// How the SMTP server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// `smtp://`: plain (a relay on this host or a trusted network).
    Plain,
    /// `smtp+starttls://`: upgraded with STARTTLS.
    StartTls,
    /// `smtps://`: TLS from the first byte.
    Tls,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpSettings {
    pub security: SmtpSecurity,
    pub host: String,
    pub port: u16,
    /// User and the file holding the password (never in hapctl.toml).
    pub auth: Option<(String, PathBuf)>,
    pub from: String,
    pub to: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertSettings {
    pub webhooks: Vec<WebhookUrl>,
    pub webhook_format: WebhookFormat,
    pub smtp: Option<SmtpSettings>,
    /// A certificate expiring within this long is an alert.
    pub cert_expiry: Duration,
    /// A domain whose share of 5xx answers over the last minute is above this is an alert…
    pub error_ratio: f64,
    /// …when it had at least this many requests in that window.
    pub error_min_requests: u64,
    /// This many HAProxy restarts within `restart_window` is a restart loop.
    pub restart_loop: u32,
    pub restart_window: Duration,
    /// A condition is resolved once it has not held for this long (an event: since the last
    /// one); one that comes back sooner stays the same alert.
    pub quiet: Duration,
    /// How often the conditions are looked at.
    pub check_every: Duration,
    /// Bound on one delivery (a webhook call, an SMTP session).
    pub timeout: Duration,
}

/// One URL or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    webhook: Option<OneOrMany>,
    webhook_format: Option<WebhookFormat>,
    smtp: Option<String>,
    smtp_user: Option<String>,
    smtp_password_file: Option<PathBuf>,
    email_from: Option<String>,
    email_to: Option<OneOrMany>,
    cert_expiry: Option<String>,
    error_ratio: Option<f64>,
    error_min_requests: Option<u64>,
    restart_loop: Option<u32>,
    restart_window: Option<String>,
    quiet: Option<String>,
    check_every: Option<String>,
    timeout: Option<String>,
}

type Refused = (String, String);

/// `None` when the section is absent. `path` resolves a relative path against the state
/// directory.
pub(super) fn resolve_alerts(
    raw: Option<RawAlerts>,
    path: impl Fn(PathBuf) -> PathBuf,
) -> Result<Option<AlertSettings>, Refused> {
    let Some(raw) = raw else { return Ok(None) };
    let err = |key: &str, m: String| (format!("alerts.{key}"), m);
    let webhooks = raw
        .webhook
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .iter()
        .map(|u| WebhookUrl::parse(u).map_err(|m| err("webhook", m)))
        .collect::<Result<Vec<_>, _>>()?;
    let smtp = match raw.smtp {
        None => None,
        Some(url) => Some(smtp(
            &url,
            raw.smtp_user,
            raw.smtp_password_file.map(&path),
            raw.email_from,
            raw.email_to.map(OneOrMany::into_vec).unwrap_or_default(),
        )?),
    };
    if webhooks.is_empty() && smtp.is_none() {
        return Err(err(
            "webhook",
            "[alerts] needs a webhook or smtp (with email_to) to send to".into(),
        ));
    }
    let duration = |key: &str, text: Option<&str>, default: u64, range: (u64, u64)| {
        let Some(text) = text else {
            return Ok(Duration::from_secs(default));
        };
        humantime::parse_duration(text)
            .ok()
            .filter(|d| (range.0..=range.1).contains(&d.as_secs()))
            .ok_or_else(|| {
                err(
                    key,
                    format!(
                        "{:?} is not a duration from {} s to {} s",
                        bounded(text),
                        range.0,
                        range.1
                    ),
                )
            })
    };
    let error_ratio = raw.error_ratio.unwrap_or(0.05);
    if !(0.0..=1.0).contains(&error_ratio) || error_ratio == 0.0 {
        return Err(err(
            "error_ratio",
            format!("{error_ratio} is not a share above 0 and at most 1 (0.05: 5 %)"),
        ));
    }
    let restart_loop = raw.restart_loop.unwrap_or(3);
    if !(2..=100).contains(&restart_loop) {
        return Err(err(
            "restart_loop",
            format!("{restart_loop} is not 2 to 100 restarts"),
        ));
    }
    const DAY: u64 = 86_400;
    Ok(Some(AlertSettings {
        webhooks,
        webhook_format: raw.webhook_format.unwrap_or(WebhookFormat::Json),
        smtp,
        cert_expiry: duration(
            "cert_expiry",
            raw.cert_expiry.as_deref(),
            14 * DAY,
            (3600, 365 * DAY),
        )?,
        error_ratio,
        error_min_requests: raw.error_min_requests.unwrap_or(20).max(1),
        restart_loop,
        restart_window: duration(
            "restart_window",
            raw.restart_window.as_deref(),
            600,
            (10, DAY),
        )?,
        quiet: duration("quiet", raw.quiet.as_deref(), 300, (1, DAY))?,
        check_every: duration("check_every", raw.check_every.as_deref(), 10, (1, 3600))?,
        timeout: duration("timeout", raw.timeout.as_deref(), 10, (1, 120))?,
    }))
}

fn smtp(
    url: &str,
    user: Option<String>,
    password_file: Option<PathBuf>,
    from: Option<String>,
    to: Vec<String>,
) -> Result<SmtpSettings, Refused> {
    let err = |key: &str, m: String| (format!("alerts.{key}"), m);
    let (security, rest, default_port) = if let Some(r) = url.strip_prefix("smtps://") {
        (SmtpSecurity::Tls, r, 465)
    } else if let Some(r) = url.strip_prefix("smtp+starttls://") {
        (SmtpSecurity::StartTls, r, 587)
    } else if let Some(r) = url.strip_prefix("smtp://") {
        (SmtpSecurity::Plain, r, 25)
    } else {
        return Err(err(
            "smtp",
            format!(
                "{:?} is not smtp://HOST[:PORT], smtp+starttls://… or smtps://…",
                bounded(url)
            ),
        ));
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || rest.starts_with('[') => (
            h,
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| err("smtp", format!("{:?} is not a port", bounded(p))))?,
        ),
        _ => (rest, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c))
    {
        return Err(err("smtp", format!("{:?} is not a host", bounded(host))));
    }
    let mailbox = |key: &str, m: &str| {
        let ok = m.len() <= 254
            && m.split_once('@')
                .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty())
            && !m
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || "<>,;\"".contains(c));
        if ok {
            Ok(m.to_string())
        } else {
            Err(err(
                key,
                format!("{:?} is not an e-mail address", bounded(m)),
            ))
        }
    };
    if to.is_empty() {
        return Err(err(
            "email_to",
            "smtp needs email_to: who gets the alerts".into(),
        ));
    }
    let to = to
        .iter()
        .map(|m| mailbox("email_to", m))
        .collect::<Result<_, _>>()?;
    let from = mailbox("email_from", from.as_deref().unwrap_or("hapctl@localhost"))?;
    let auth = match (user, password_file) {
        (Some(u), Some(p)) => Some((u, p)),
        (None, None) => None,
        _ => {
            return Err(err(
                "smtp_user",
                "smtp_user and smtp_password_file go together".into(),
            ))
        }
    };
    Ok(SmtpSettings {
        security,
        host: host.to_string(),
        port,
        auth,
        from,
        to,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(toml_text: &str) -> Option<RawAlerts> {
        Some(toml::from_str(toml_text).unwrap())
    }

    #[test]
    fn webhooks_smtp_and_thresholds_parse_or_name_their_key() {
        let a = resolve_alerts(
            raw(r#"webhook = "https://hooks.example.com/T000/secret-token"
                   smtp = "smtp://127.0.0.1:2525"
                   email_to = "ops@example.com"
                   quiet = "2s""#),
            |p| p,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.webhooks[0].redacted(), "https://hooks.example.com/…");
        assert!(!format!("{a:?}").contains("secret-token"));
        let smtp = a.smtp.unwrap();
        assert_eq!(
            (smtp.host.as_str(), smtp.port, smtp.security),
            ("127.0.0.1", 2525, SmtpSecurity::Plain)
        );
        assert_eq!(a.quiet, Duration::from_secs(2));
        for (text, key) in [
            ("", "alerts.webhook"),
            (r#"webhook = "ftp://x""#, "alerts.webhook"),
            (r#"smtp = "smtp://h""#, "alerts.email_to"),
            (r#"smtp = "imap://h""#, "alerts.smtp"),
            (
                r#"webhook = "http://h"
                error_ratio = 2.0"#,
                "alerts.error_ratio",
            ),
            (
                r#"webhook = "http://h"
                quiet = "0s""#,
                "alerts.quiet",
            ),
        ] {
            assert_eq!(
                resolve_alerts(raw(text), |p| p).unwrap_err().0,
                key,
                "{text}"
            );
        }
        assert!(resolve_alerts(None, |p| p).unwrap().is_none());
    }
}
