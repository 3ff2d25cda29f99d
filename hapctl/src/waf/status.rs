//! The agent as an operator asks about it, and its rules reload: one view and one reload for
//! `hapctl waf status|reload`, `hapctl status`, `GET /v1/waf` and `POST /v1/waf/reload`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::metrics::{CountersSnapshot, Health};
use crate::settings::Settings;

/// The agent's health and counters. It leaves out the state file's heartbeat (rewritten
/// every second), so a page polling it with ETags gets a 304 while nothing an operator sees
/// changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WafStatus {
    /// `[waf]` is set in hapctl.toml; without it nothing else is shown.
    pub configured: bool,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgentStatus {
    pub up: bool,
    /// Why it is DOWN (null while up).
    pub down_reason: Option<String>,
    /// The last agent's, from its state file (kept while it is down).
    pub pid: Option<u32>,
    pub engine: Option<String>,
    pub crs: Option<String>,
    /// libmodsecurity's count of the rules it loaded, and when (Unix time).
    pub rules: Option<usize>,
    pub rules_loaded_at: Option<u64>,
    pub inspected: u64,
    pub blocked: u64,
    pub detected: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub reloads: u64,
    pub reload_failures: u64,
    /// Why the last reload was refused, until one serves.
    pub reload_error: Option<String>,
    /// Requests over the threshold per rule id that counted.
    pub by_rule: BTreeMap<u32, u64>,
}

impl From<Health> for AgentStatus {
    fn from(h: Health) -> AgentStatus {
        let s = h.agent.unwrap_or_default();
        let known = s.pid != 0;
        AgentStatus {
            up: h.up,
            down_reason: h.down_reason,
            pid: known.then_some(s.pid),
            engine: known.then_some(s.engine),
            crs: s.crs,
            rules: (s.rules > 0).then_some(s.rules),
            rules_loaded_at: known.then_some(s.rules_loaded_at),
            inspected: s.inspected,
            blocked: s.blocked,
            detected: s.detected,
            errors: s.errors,
            timeouts: s.timeouts,
            reloads: s.reloads,
            reload_failures: s.reload_failures,
            reload_error: s.reload_error,
            by_rule: s.by_rule,
        }
    }
}

/// The agent of this edge, as its state file under `run/` shows it.
pub fn status(settings: &Settings) -> WafStatus {
    WafStatus {
        configured: settings.waf.is_some(),
        agent: settings
            .waf
            .as_ref()
            .map(|_| Health::read(&super::state_file(&settings.paths.run_dir)).into()),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RulesReloadError {
    #[error("the WAF agent is not running: {0}")]
    NotRunning(String),
    #[error("the agent refused the new rules and keeps serving the old ones: {0}")]
    Refused(String),
    #[error("the agent (pid {0}) did not report the reload within {RELOAD_WAIT:?}; its log (waf-agent.log, or journalctl -u hapctl-waf) says why")]
    NoOutcome(u32),
    #[error("cannot signal the agent (pid {pid}): {source}; run the reload as the agent's user")]
    Signal { pid: u32, source: std::io::Error },
}

/// What a reload that serves answers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RulesReloaded {
    pub pid: u32,
    pub crs: Option<String>,
    pub rules: usize,
    pub rules_loaded_at: u64,
}

/// Loading the CRS takes a few seconds (longer on a busy machine).
const RELOAD_WAIT: Duration = Duration::from_secs(60);

/// One reload at a time from this process: two at once would each see the other's outcome.
static RELOADING: Mutex<()> = Mutex::new(());

/// Sends the running agent SIGHUP (HAProxy's connections stay) and waits until its state
/// file says whether the new rules serve; a refused set keeps the old rules and is answered
/// with the loader and libmodsecurity's reason. Blocks for up to a minute.
pub fn reload(run_dir: &Path) -> Result<RulesReloaded, RulesReloadError> {
    let _one = RELOADING.lock().unwrap_or_else(|e| e.into_inner());
    let path = super::state_file(run_dir);
    let health = Health::read(&path);
    let before = match (health.up, health.agent) {
        (true, Some(s)) => s,
        _ => {
            return Err(RulesReloadError::NotRunning(
                health.down_reason.unwrap_or_default(),
            ))
        }
    };
    crate::process::send_signal(before.pid as i32, libc::SIGHUP).map_err(|source| {
        RulesReloadError::Signal {
            pid: before.pid,
            source,
        }
    })?;
    let deadline = Instant::now() + RELOAD_WAIT;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        // Not rewritten while the rules load: only the outcome's counters are read here.
        if let Some(s) = CountersSnapshot::read(&path).filter(|s| s.pid == before.pid) {
            if s.reloads > before.reloads {
                return Ok(RulesReloaded {
                    pid: s.pid,
                    crs: s.crs,
                    rules: s.rules,
                    rules_loaded_at: s.rules_loaded_at,
                });
            }
            if s.reload_failures > before.reload_failures {
                return Err(RulesReloadError::Refused(s.reload_error.unwrap_or_else(
                    || {
                        "the agent's log (waf-agent.log, or journalctl -u hapctl-waf) says why"
                            .into()
                    },
                )));
            }
        }
        if !crate::process::pid_alive(before.pid as i32) {
            return Err(RulesReloadError::NotRunning(format!(
                "its process (pid {}) ended during the reload",
                before.pid
            )));
        }
    }
    Err(RulesReloadError::NoOutcome(before.pid))
}
