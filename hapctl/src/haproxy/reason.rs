//! Why HAProxy was reloaded: every reload hapctl makes carries one, in the apply history,
//! the logs and `hapctl_reloads_total{reason}`.

use serde::Serialize;

/// Why HAProxy was reloaded. `kind` is a short, fixed label (the `reason` of
/// `hapctl_reloads_total`); `detail` names the change and why no runtime path could do it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReloadReason {
    pub kind: ReloadKind,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReloadKind {
    /// A file only a reload loads changed (sections of haproxy.cfg, generation.cfg, a page).
    Config,
    /// Only runtime-capable maps changed, but changing them in the worker failed.
    RuntimeFailed,
    /// The running worker had not loaded hapctl's files (adoption).
    StaleWorker,
    /// Back to the known-good set after a failed reload.
    Rollback,
    /// Back to the known-good set after an apply was killed while reloading.
    Recovery,
    /// A certificate could not be installed through the runtime API.
    CertificateFallback,
    /// A block change could not be confirmed through the runtime API.
    BlockFallback,
    /// A change the runtime path could take, but every pre-allocated slot of its kind was in
    /// use: the reload loads it and sizes the spare slots again.
    Capacity,
    /// Asked for by a person or a client (`hapctl haproxy reload`, the old `/api/reload`).
    Requested,
}

impl ReloadKind {
    pub const ALL: [ReloadKind; 9] = [
        ReloadKind::Config,
        ReloadKind::RuntimeFailed,
        ReloadKind::StaleWorker,
        ReloadKind::Rollback,
        ReloadKind::Recovery,
        ReloadKind::CertificateFallback,
        ReloadKind::BlockFallback,
        ReloadKind::Capacity,
        ReloadKind::Requested,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReloadKind::Config => "config",
            ReloadKind::RuntimeFailed => "runtime-failed",
            ReloadKind::StaleWorker => "stale-worker",
            ReloadKind::Rollback => "rollback",
            ReloadKind::Recovery => "recovery",
            ReloadKind::CertificateFallback => "certificate-fallback",
            ReloadKind::BlockFallback => "block-fallback",
            ReloadKind::Capacity => "capacity",
            ReloadKind::Requested => "requested",
        }
    }
}

impl ReloadReason {
    pub fn new(kind: ReloadKind, detail: impl Into<String>) -> ReloadReason {
        ReloadReason {
            kind,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for ReloadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.detail)
    }
}
