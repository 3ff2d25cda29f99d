//! The words of a notice (pure): a webhook's body and an e-mail's subject and text.

use serde_json::json;

use super::{Notice, State};
use crate::settings::WebhookFormat;

/// One line: `[FIRING] edge-a: certificate-expiring shop: expires in 3 days`.
fn line(n: &Notice) -> String {
    let state = match n.state {
        State::Firing => "FIRING",
        State::Resolved => "RESOLVED",
    };
    let subject = if n.alert.subject.is_empty() {
        String::new()
    } else {
        format!(" {}", n.alert.subject)
    };
    format!(
        "[{state}] {}: {}{subject}: {}",
        n.edge,
        n.alert.kind.as_str(),
        n.alert.summary
    )
}

/// hapctl's JSON (`{state, kind, subject, summary, edge, at}`), or Slack's `{text}`.
pub fn webhook_body(n: &Notice, format: WebhookFormat) -> Vec<u8> {
    let value = match format {
        WebhookFormat::Json => serde_json::to_value(n).unwrap_or_default(),
        WebhookFormat::Slack => json!({ "text": line(n) }),
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

pub fn email_subject(n: &Notice) -> String {
    line(n).chars().take(200).collect()
}

pub fn email_text(n: &Notice) -> String {
    format!(
        "{}\n\nedge: {}\nkind: {}\nsubject: {}\nstate: {}\nat: {} (Unix seconds)\n\n-- \nhapctl serve ([alerts] in hapctl.toml; docs/alerts.md)\n",
        n.alert.summary,
        n.edge,
        n.alert.kind.as_str(),
        n.alert.subject,
        match n.state {
            State::Firing => "firing",
            State::Resolved => "resolved",
        },
        n.at
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::{Alert, Kind};

    #[test]
    fn json_and_slack_shapes() {
        let n = Notice {
            state: State::Resolved,
            alert: Alert::new(Kind::DomainErrors, "shop.test", "12 % 5xx"),
            edge: "edge-a".into(),
            at: 5,
        };
        let v: serde_json::Value =
            serde_json::from_slice(&webhook_body(&n, WebhookFormat::Json)).unwrap();
        assert_eq!(v["state"], "resolved");
        assert_eq!(v["kind"], "domain-errors");
        assert_eq!(v["subject"], "shop.test");
        let s: serde_json::Value =
            serde_json::from_slice(&webhook_body(&n, WebhookFormat::Slack)).unwrap();
        assert_eq!(
            s["text"],
            "[RESOLVED] edge-a: domain-errors shop.test: 12 % 5xx"
        );
        assert!(email_text(&n).contains("12 % 5xx"));
    }
}
