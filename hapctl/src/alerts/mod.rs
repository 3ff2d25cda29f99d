//! Alerts (`docs/alerts.md`): what needs a person, said once per condition until it has not
//! held for `[alerts] quiet`, then "resolved". `tracker.rs` (pure) turns what the daemon sees
//! at each look into those notices; `rules.rs` (pure) computes conditions from figures;
//! `message.rs` (pure) writes them for a webhook (JSON or Slack's shape) and an e-mail;
//! `send.rs` delivers them, every call bounded by `[alerts] timeout`. The looking is the
//! daemon's (`daemon/alerts.rs`).

mod message;
mod rules;
mod send;
mod tracker;

use serde::Serialize;

pub use message::{email_subject, email_text, webhook_body};
pub use rules::domain_errors;
pub use send::{Delivery, SendError, Sender};
pub use tracker::Tracker;

/// The kinds of alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    CertificateExpiring,
    RenewalFailing,
    HaproxyRestarted,
    HaproxyRestartLoop,
    DefectAlarm,
    RollbackFailed,
    WafAgentDown,
    FleetEdgeLagging,
    FleetEdgeGone,
    DomainErrors,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::CertificateExpiring,
        Kind::RenewalFailing,
        Kind::HaproxyRestarted,
        Kind::HaproxyRestartLoop,
        Kind::DefectAlarm,
        Kind::RollbackFailed,
        Kind::WafAgentDown,
        Kind::FleetEdgeLagging,
        Kind::FleetEdgeGone,
        Kind::DomainErrors,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::CertificateExpiring => "certificate-expiring",
            Kind::RenewalFailing => "renewal-failing",
            Kind::HaproxyRestarted => "haproxy-restarted",
            Kind::HaproxyRestartLoop => "haproxy-restart-loop",
            Kind::DefectAlarm => "defect-alarm",
            Kind::RollbackFailed => "rollback-failed",
            Kind::WafAgentDown => "waf-agent-down",
            Kind::FleetEdgeLagging => "fleet-edge-lagging",
            Kind::FleetEdgeGone => "fleet-edge-gone",
            Kind::DomainErrors => "domain-errors",
        }
    }
}

/// A condition that holds now: its kind, what it is about (a certificate, a domain, an edge;
/// empty for the edge itself) and what to tell a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    pub kind: Kind,
    pub subject: String,
    pub summary: String,
}

impl Alert {
    pub fn new(kind: Kind, subject: impl Into<String>, summary: impl Into<String>) -> Alert {
        Alert {
            kind,
            subject: subject.into(),
            summary: summary.into(),
        }
    }

    /// What makes two alerts the same condition.
    pub fn key(&self) -> (Kind, String) {
        (self.kind, self.subject.clone())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Firing,
    Resolved,
}

/// What is sent: a condition that began, or one that ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notice {
    pub state: State,
    #[serde(flatten)]
    pub alert: Alert,
    /// The edge's name (the host name, or `[fleet] name`).
    pub edge: String,
    /// Unix seconds.
    pub at: i64,
}

/// The name alerts give this edge: `[fleet] name`, else the host's name.
pub fn edge_name(settings: &crate::settings::Settings) -> String {
    match &settings.fleet {
        Some(f) => f.name.to_string(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "edge".into()),
    }
}

/// One alert of each kind, as `hapctl alerts test` sends them.
pub fn samples() -> Vec<Alert> {
    Kind::ALL
        .into_iter()
        .map(|k| {
            Alert::new(
                k,
                "test",
                format!(
                    "a test of the {} alert (hapctl alerts test): nothing is wrong",
                    k.as_str()
                ),
            )
        })
        .collect()
}
