//! Deliveries: each version of an application runs as its own process on its own port, and a
//! cutover rewrites the app's one server line through the safe apply.
//!
//! The retention rule (see the delivery lesson): a delivery removes the generation replaced by
//! the *previous* delivery — never the one it replaces, whose old HAProxy workers may still
//! stream from it, and which is the instant way back.

mod cutover;
mod readiness;
mod runner;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::apply::{ApplyError, ApplyReport};
use crate::fsutil::{LockError, LockFile};
use crate::model::{AppName, Port, Version};
use crate::render::Templates;
use crate::settings::{AppSettings, PortPlan, Settings};
use crate::store::{AppState, DeliveryRecord, Store, StoreError};

pub use readiness::get as probe_get;
pub use runner::{Runner, RunnerError};

/// A delivery waits this long for another one of the same app.
const DELIVERY_LOCK_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error("unknown app {0}; the [[app]] entries of hapctl.toml define: {1}")]
    UnknownApp(String, String),
    #[error("app {app} has no previous generation to roll back to (deliveries so far: current {current})")]
    NoPrevious { app: String, current: String },
    #[error("no port for {app} {version}: {message}")]
    NoPort {
        app: String,
        version: String,
        message: String,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Runner(#[from] RunnerError),
}

impl DeliverError {
    /// True when the request named something that does not exist (exit code 7).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            DeliverError::UnknownApp(..) | DeliverError::NoPrevious { .. }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryOutcome {
    /// The target is live; the old generation kept; the one before removed.
    Delivered,
    /// The target already was the live generation: nothing done.
    AlreadyLive,
    /// The target never became ready: nothing changed, what this delivery started is stopped.
    NotReady,
    /// The apply failed (see `apply`); nothing changed, what this delivery started is stopped.
    ApplyFailed,
}

impl DeliveryOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::AlreadyLive => "already-live",
            DeliveryOutcome::NotReady => "not-ready",
            DeliveryOutcome::ApplyFailed => "apply-failed",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DeliveryStep {
    pub name: String,
    pub detail: String,
    pub ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeliveryReport {
    pub app: AppName,
    /// `deliver` or `rollback`.
    pub kind: &'static str,
    pub from: Option<Version>,
    pub to: Version,
    pub outcome: DeliveryOutcome,
    pub message: String,
    pub steps: Vec<DeliveryStep>,
    pub apply: Option<ApplyReport>,
    pub total_ms: f64,
}

impl DeliveryReport {
    /// Process exit code (documented in `hapctl --help`).
    pub fn exit_code(&self) -> i32 {
        match (self.outcome, &self.apply) {
            (DeliveryOutcome::Delivered | DeliveryOutcome::AlreadyLive, _) => 0,
            (DeliveryOutcome::NotReady, _) => 8,
            (DeliveryOutcome::ApplyFailed, Some(a)) => a.outcome.exit_code(),
            (DeliveryOutcome::ApplyFailed, None) => 1,
        }
    }
}

/// One generation as `hapctl generations` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GenerationStatus {
    pub app: AppName,
    pub version: Version,
    pub port: Port,
    /// `current`, `previous` or `retired`.
    pub role: &'static str,
    pub running: bool,
    pub pid: Option<i32>,
    pub ready: bool,
}

/// Everything a delivery needs.
pub struct Deliveries<'a> {
    pub settings: &'a Settings,
    pub templates: &'a Templates,
}

/// Collects timed steps and tells the caller about each as it ends.
struct Steps<'p> {
    started: Instant,
    last: Instant,
    steps: Vec<DeliveryStep>,
    on_step: &'p mut dyn FnMut(&DeliveryStep),
}

impl<'p> Steps<'p> {
    /// Steps timed from now, each reported to `on_step` as it ends.
    fn start(on_step: &'p mut dyn FnMut(&DeliveryStep)) -> Steps<'p> {
        let now = Instant::now();
        Steps {
            started: now,
            last: now,
            steps: Vec::new(),
            on_step,
        }
    }

    fn done(&mut self, name: &str, detail: String) {
        let now = Instant::now();
        let step = DeliveryStep {
            name: name.to_string(),
            detail,
            ms: (now - self.last).as_secs_f64() * 1000.0,
        };
        (self.on_step)(&step);
        self.steps.push(step);
        self.last = now;
    }
}

impl<'a> Deliveries<'a> {
    pub fn app(&self, name: &AppName) -> Result<&'a AppSettings, DeliverError> {
        self.settings
            .apps
            .iter()
            .find(|a| &a.name == name)
            .ok_or_else(|| {
                let known: Vec<String> = self
                    .settings
                    .apps
                    .iter()
                    .map(|a| a.name.to_string())
                    .collect();
                DeliverError::UnknownApp(
                    name.to_string(),
                    if known.is_empty() {
                        "(none)".into()
                    } else {
                        known.join(", ")
                    },
                )
            })
    }

    /// The only app, when `--app` is not given.
    pub fn default_app(&self) -> Result<AppName, DeliverError> {
        match self.settings.apps.as_slice() {
            [one] => Ok(one.name.clone()),
            apps => Err(DeliverError::UnknownApp(
                "(none given)".into(),
                if apps.is_empty() {
                    "none; add an [[app]] to hapctl.toml".into()
                } else {
                    let names: Vec<String> = apps.iter().map(|a| a.name.to_string()).collect();
                    format!("{}; choose one with --app", names.join(", "))
                },
            )),
        }
    }

    /// `deliver VERSION`: the cutover to `target`.
    pub fn deliver(
        &self,
        store: &mut Store,
        app: &AppName,
        target: &Version,
        on_step: &mut dyn FnMut(&DeliveryStep),
    ) -> Result<DeliveryReport, DeliverError> {
        self.cutover(store, app, Some(target), "deliver", on_step)
    }

    /// `rollback`: the same cutover, to the previous generation.
    pub fn rollback(
        &self,
        store: &mut Store,
        app: &AppName,
        on_step: &mut dyn FnMut(&DeliveryStep),
    ) -> Result<DeliveryReport, DeliverError> {
        self.cutover(store, app, None, "rollback", on_step)
    }

    fn lock(&self, app: &AppName) -> Result<LockFile, DeliverError> {
        let path = self
            .settings
            .paths
            .run_dir
            .join(format!("deliver-{app}.lock"));
        Ok(LockFile::acquire(&path, DELIVERY_LOCK_TIMEOUT)?)
    }

    /// The port `version` runs on: remembered, from the table, or allocated from the range.
    fn port_for(
        &self,
        store: &Store,
        app: &AppSettings,
        state: &AppState,
        version: &Version,
    ) -> Result<Port, DeliverError> {
        let no_port = |message: String| DeliverError::NoPort {
            app: app.name.to_string(),
            version: version.to_string(),
            message,
        };
        let known = store.generations(&app.name)?;
        match &app.ports {
            PortPlan::Table(table) => table.get(version).copied().ok_or_else(|| {
                no_port(format!(
                    "it is not in the app's `ports` table ({}); add it there",
                    table
                        .keys()
                        .map(Version::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }),
            PortPlan::Range { first, last } => {
                // Ports of the generations that may run: never hand them to another version.
                let in_use: Vec<u16> = known
                    .iter()
                    .filter(|g| {
                        Some(&g.version) == state.current.as_ref()
                            || Some(&g.version) == state.previous.as_ref()
                    })
                    .map(|g| g.port.get())
                    .collect();
                if let Some(g) = known.iter().find(|g| &g.version == version) {
                    if !in_use.contains(&g.port.get()) || state.previous.as_ref() == Some(version) {
                        return Ok(g.port);
                    }
                }
                let remembered: Vec<u16> = known.iter().map(|g| g.port.get()).collect();
                let free = |p: &u16| {
                    !in_use.contains(p)
                        && ensure_port_free(Port::try_from(*p).expect("range ports are valid"))
                            .is_ok()
                };
                (*first..=*last)
                    .filter(|p| !remembered.contains(p))
                    .find(free)
                    .or_else(|| (*first..=*last).find(free))
                    .map(|p| Port::try_from(p).expect("range ports are valid"))
                    .ok_or_else(|| {
                        no_port(format!(
                            "every port of {first}-{last} is in use; widen port_range"
                        ))
                    })
            }
        }
    }

    /// `boot`: start what the configuration designates — HAProxy and each app's generation in
    /// service — and nothing else. Idempotent.
    pub fn boot(
        &self,
        store: &mut Store,
        on_step: &mut dyn FnMut(&DeliveryStep),
    ) -> Result<Vec<String>, DeliverError> {
        let mut steps = Steps::start(on_step);
        let mut problems = Vec::new();
        let state = store.load_state()?;
        for app in &self.settings.apps {
            let Some(generation) = state.live_generations.get(&app.name) else {
                steps.done("app", format!("{}: no generation delivered yet", app.name));
                continue;
            };
            let _lock = self.lock(&app.name)?;
            let runner = Runner::new(self.settings, app);
            let version = &generation.version;
            if runner.is_running(version) {
                steps.done("app", format!("{} {version} already runs", app.name));
            } else {
                runner.start(generation)?;
                steps.done(
                    "start",
                    format!(
                        "{} {version} started on 127.0.0.1:{}",
                        app.name, generation.port
                    ),
                );
            }
            let readiness = readiness::Readiness::of(app, generation);
            match readiness.wait(|| runner.is_running(version)) {
                Ok(_) => steps.done("ready", format!("{} {version} ready", app.name)),
                Err(why) => {
                    steps.done("ready", format!("{} {version} NOT ready: {why}", app.name));
                    problems.push(format!("{} {version} is not ready: {why}", app.name));
                }
            }
        }
        Ok(problems)
    }

    /// Every generation hapctl knows of, with what runs.
    pub fn generations(&self, store: &Store) -> Result<Vec<GenerationStatus>, DeliverError> {
        let mut out = Vec::new();
        for app in &self.settings.apps {
            let state = store.app_state(&app.name)?;
            let runner = Runner::new(self.settings, app);
            for g in store.generations(&app.name)? {
                let role = if Some(&g.version) == state.current.as_ref() {
                    "current"
                } else if Some(&g.version) == state.previous.as_ref() {
                    "previous"
                } else {
                    "retired"
                };
                let running = runner.is_running(&g.version);
                let ready = running
                    && matches!(
                        readiness::get(g.port.get(), app.readiness_path.as_str()),
                        Ok((200, _))
                    );
                out.push(GenerationStatus {
                    app: app.name.clone(),
                    pid: runner.pid(&g.version),
                    version: g.version,
                    port: g.port,
                    role,
                    running,
                    ready,
                });
            }
        }
        Ok(out)
    }
}

fn record(r: &DeliveryReport, started_at_ms: i64) -> DeliveryRecord {
    DeliveryRecord {
        id: 0,
        app: r.app.to_string(),
        kind: r.kind.to_string(),
        from_version: r.from.as_ref().map(Version::to_string),
        to_version: r.to.to_string(),
        outcome: match (&r.apply, r.outcome) {
            (Some(a), DeliveryOutcome::ApplyFailed) => a.outcome.as_str().to_string(),
            (_, o) => o.as_str().to_string(),
        },
        message: r.message.clone(),
        started_at_ms,
        duration_ms: r.total_ms as i64,
        steps: serde_json::to_string(&r.steps).unwrap_or_default(),
    }
}

/// A port a new generation may bind: nothing listens on it now.
fn ensure_port_free(port: Port) -> Result<(), String> {
    TcpListener::bind(("127.0.0.1", port.get()))
        .map(drop)
        .map_err(|e| format!("127.0.0.1:{port} is busy ({e}); another process listens there"))
}
