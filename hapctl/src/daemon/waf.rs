//! The WAF agent beside the daemon, as the API asks about it: its health and counters, its
//! rules reload, the rule list and a request evaluated without sending it, through the same
//! code as `hapctl waf status`, `reload`, `rules` and `test` (`waf::status`, `waf::trial`).
//! The rule list and the trial run `hapctl waf rules|test --json` as a child: loading the CRS
//! takes libmodsecurity ~40 MiB that the daemon would keep, and a crash of the C library
//! stays in the child.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::{JobError, Services};
use crate::contract::WafTest;
use crate::waf::metrics::Health;
use crate::waf::status::{self, RulesReloadError, RulesReloaded, WafStatus};

/// One rule load at a time in children of the daemon; each is bounded.
static OFFLINE: Semaphore = Semaphore::const_new(1);
const OFFLINE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why `hapctl waf rules|test` gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum WafRunError {
    /// It refused its arguments (exit code 2).
    #[error("{0}")]
    Invalid(String),
    /// libmodsecurity refused the rule set.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Job(#[from] JobError),
}

impl Services {
    /// The agent's health and counters (`hapctl waf status`).
    pub fn waf_status(&self) -> WafStatus {
        status::status(&self.settings())
    }

    /// Reloads the agent's rules and waits for the outcome (up to a minute): call it off the
    /// async threads.
    pub fn reload_waf(&self) -> Result<RulesReloaded, RulesReloadError> {
        status::reload(&self.settings().paths.run_dir)
    }

    /// The rule set the agent loads (`hapctl waf rules --json`).
    pub async fn waf_rules(&self) -> Result<Value, WafRunError> {
        self.run_waf(vec!["rules".into(), "--json".into()]).await
    }

    /// The trial evaluated against the rules (`hapctl waf test --json`), scored under the
    /// policy given, else the stored policy of its domain or of the URL's host, else block at
    /// the CRS defaults; the answer says which in `policy_from`.
    pub async fn waf_test(&self, test: WafTest) -> Result<Value, WafRunError> {
        let stored = self.read(|edge| Ok(edge.state()?.waf)).await?;
        let (policy, from) = test
            .trial
            .policy(test.policy, test.domain.as_ref(), &stored);
        let mut args = vec!["test".to_string(), "--json".into()];
        args.extend(test.trial.to_args(&policy));
        let mut outcome = self.run_waf(args).await?;
        outcome["policy_from"] = json!(from);
        Ok(outcome)
    }

    /// The agent's own counters in Prometheus text, from the state file it rewrites every
    /// second; empty without `[waf]`.
    pub fn waf_metrics(&self) -> String {
        let settings = self.settings();
        if settings.waf.is_none() {
            return String::new();
        }
        Health::read(&crate::waf::state_file(&settings.paths.run_dir)).prometheus()
    }

    /// `hapctl waf ARGS` for this state directory, as a bounded child; its JSON answer.
    async fn run_waf(&self, args: Vec<String>) -> Result<Value, WafRunError> {
        let failed = WafRunError::Failed;
        let _one = OFFLINE.acquire().await.map_err(|e| failed(e.to_string()))?;
        let dir = self.state_dir().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(std::env::current_exe()?);
            cmd.arg("--state-dir").arg(dir).arg("waf").args(args);
            crate::process::run_with_timeout(&mut cmd, OFFLINE_TIMEOUT)
                .map_err(std::io::Error::other)
        })
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| failed(format!("hapctl waf: {e}")))?;
        if out.status.success() {
            return serde_json::from_slice(&out.stdout)
                .map_err(|e| failed(format!("hapctl waf answered no JSON: {e}")));
        }
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(match out.status.code() {
            Some(2) => WafRunError::Invalid(err),
            _ if err.contains("refused") => WafRunError::Refused(err),
            _ => WafRunError::Failed(err),
        })
    }
}
