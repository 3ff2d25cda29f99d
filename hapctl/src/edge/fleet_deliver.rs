//! Deliveries edge by edge (`hapctl deliver V --fleet`, docs/fleet.md). The edge that runs the
//! command takes the fleet's delivery lock and asks the running edges in turn (`--parallel`
//! at a time) through etcd; each edge's daemon delivers locally under `hapctl prove`
//! (`fleet_delivery_part`). The first part that fails stops the delivery, and the edges
//! already cut over are rolled back the same way, each proved.

use std::time::Duration;

use super::{Edge, EdgeError};
use crate::clock::unix_now;
use crate::fleet::certs::{parse, put};
use crate::fleet::deliveries::{Kind, Outcome, Request, State, Summary};
use crate::fleet::lock::{self, LockRecord};
use crate::fleet::{FleetError, FleetLink};
use crate::model::{AppName, Version};
use crate::prove::{CheckStatus, Options, Subject};
use crate::store::AppState;

/// How long a fleet delivery's lock outlives an edge that stopped renewing it.
const LOCK_TTL: i64 = 10;
const LOCK_KEEP_EVERY: Duration = Duration::from_secs(3);
/// Bound on one edge's part: its readiness wait and its proof (held streams, settle).
const PART_TIMEOUT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(200);

/// What a fleet delivery is asked to do.
pub struct FleetDelivery<'a> {
    pub app: Option<AppName>,
    pub kind: Kind,
    pub version: Option<Version>,
    /// Edges delivering at once.
    pub parallel: usize,
    /// Hears each edge's outcome as it arrives.
    pub progress: &'a mut dyn FnMut(&str, &Outcome),
}

impl Edge {
    /// This edge's part of a fleet delivery: delivered (or rolled back) here under `hapctl
    /// prove`'s measurement. Never an error: a failure is the outcome's.
    pub fn fleet_delivery_part(&self, request: &Request) -> Outcome {
        let mut outcome = Outcome {
            id: request.id.clone(),
            state: State::Failed,
            from: None,
            to: None,
            message: String::new(),
            journal: None,
            at: unix_now(),
        };
        if let Err(e) = self.prove_part(request, &mut outcome) {
            outcome.state = State::Failed;
            outcome.message = e;
        }
        outcome.at = unix_now();
        outcome
    }

    fn prove_part(&self, request: &Request, outcome: &mut Outcome) -> Result<(), String> {
        let app = self
            .resolve_app(Some(request.app.clone()))
            .map_err(|e| e.to_string())?;
        let before = self.app_versions(&app)?;
        outcome.from = before.current.as_ref().map(Version::to_string);
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the hapctl binary: {e}"))?
            .display()
            .to_string();
        let (argv, expect) = match (request.kind, &request.version) {
            (Kind::Deliver, Some(v)) => (
                vec![
                    exe,
                    "deliver".into(),
                    v.to_string(),
                    "--app".into(),
                    app.to_string(),
                ],
                Some(v.to_string()),
            ),
            (Kind::Rollback, _) => (
                vec![exe, "rollback".into(), "--app".into(), app.to_string()],
                before.previous.as_ref().map(Version::to_string),
            ),
            (Kind::Deliver, None) => return Err("a delivery names its version".into()),
        };
        let host = self.prove_host(&app).map_err(|e| e.to_string())?;
        let options = Options::for_delivery(host, expect);
        let report = self
            .prove(&options, &Subject::Command(argv), &mut |_| {})
            .map_err(|e| e.to_string())?;
        outcome.to = self.app_versions(&app)?.current.map(|v| v.to_string());
        outcome.journal = report.journal.as_ref().map(|p| p.display().to_string());
        let failed: Vec<String> = report
            .proofs
            .iter()
            .flat_map(|p| &p.checks)
            .filter(|c| c.status == CheckStatus::Fail)
            .map(|c| format!("{}: {} (expected {})", c.name, c.measured, c.expected))
            .collect();
        outcome.state = if report.passed {
            State::Proved
        } else {
            State::Failed
        };
        outcome.message = if failed.is_empty() {
            "every check passed".into()
        } else {
            failed.join("; ")
        };
        Ok(())
    }

    /// Each app's live generation (what this edge's status key says).
    pub fn live_generations(&self) -> std::collections::BTreeMap<String, String> {
        self.settings
            .apps
            .iter()
            .filter_map(|app| {
                let current = self.store.app_state(&app.name).ok()?.current?;
                Some((app.name.to_string(), current.to_string()))
            })
            .collect()
    }

    fn app_versions(&self, app: &AppName) -> Result<AppState, String> {
        self.store.app_state(app).map_err(|e| e.to_string())
    }

    /// Runs a delivery (or a rollback) edge by edge across the fleet.
    pub fn deliver_fleet(&self, job: FleetDelivery<'_>) -> Result<Summary, EdgeError> {
        let link = self.link()?;
        let app = self.resolve_app(job.app.clone())?;
        let me = link.settings().name.to_string();
        let runner = Rollout {
            link: &link,
            summary: Summary {
                asked: Request {
                    id: format!("{me}-{}", crate::clock::unix_millis()),
                    app,
                    kind: job.kind,
                    version: job.version.clone(),
                    by: me,
                    at: unix_now(),
                },
                state: "running".into(),
                edges: Vec::new(),
            },
        };
        link.block_on(runner.run(job.parallel.max(1), job.progress))
    }
}

/// One fleet delivery as the orchestrating edge runs it.
struct Rollout<'a> {
    link: &'a FleetLink,
    summary: Summary,
}

impl Rollout<'_> {
    async fn run(
        mut self,
        parallel: usize,
        progress: &mut dyn FnMut(&str, &Outcome),
    ) -> Result<Summary, EdgeError> {
        let etcd = self.link.etcd();
        let layout = self.link.layout();
        let lease = etcd.lease(LOCK_TTL).await?;
        let keeper = self
            .link
            .handle()
            .spawn(lock::keep(etcd.clone(), lease, LOCK_KEEP_EVERY));
        let me = LockRecord {
            edge: self.summary.asked.by.clone(),
            since: unix_now(),
        };
        let outcome = match lock::take(etcd, &layout.delivery_lock(), &me, lease).await? {
            Ok(()) => self.locked(parallel, progress).await,
            Err(holder) => Err(FleetError::Busy {
                what: "a fleet delivery".into(),
                edge: holder.as_ref().map_or("?".into(), |h| h.edge.clone()),
                since: holder.map_or(0, |h| h.since),
                then: "one runs at a time; `hapctl fleet status` shows where it stands",
            }
            .into()),
        };
        keeper.abort();
        let _ = etcd.revoke(lease).await;
        outcome
    }

    async fn locked(
        &mut self,
        parallel: usize,
        progress: &mut dyn FnMut(&str, &Outcome),
    ) -> Result<Summary, EdgeError> {
        let edges = self.running_edges().await?;
        self.summary.edges = edges
            .iter()
            .map(|e| (e.clone(), "waiting".into()))
            .collect();
        self.publish_summary().await?;
        let mut cut_over = Vec::new();
        let mut stopped = None;
        for chunk in edges.chunks(parallel) {
            let request = self.request(self.summary.asked.kind, &self.summary.asked.id);
            let outcomes = self.ask(chunk, &request).await?;
            for (edge, outcome) in outcomes {
                progress(&edge, &outcome);
                self.note(&edge, &format!("{:?} {}", outcome.state, outcome.message));
                if outcome.changed() {
                    cut_over.push(edge.clone());
                }
                if outcome.state != State::Proved && stopped.is_none() {
                    stopped = Some(format!("stopped at {edge}: {}", outcome.message));
                }
            }
            if stopped.is_some() {
                break;
            }
        }
        match stopped {
            None => self.summary.state = "delivered".into(),
            Some(why) => {
                self.summary.state = why;
                self.roll_back(&cut_over, progress).await?;
            }
        }
        self.publish_summary().await?;
        Ok(self.summary.clone())
    }

    /// Puts the edges a stopped delivery cut over back on their previous generation, one at
    /// a time, each proved.
    async fn roll_back(
        &mut self,
        edges: &[String],
        progress: &mut dyn FnMut(&str, &Outcome),
    ) -> Result<(), EdgeError> {
        let id = format!("{}-back", self.summary.asked.id);
        let request = self.request(Kind::Rollback, &id);
        for edge in edges {
            for (edge, outcome) in self.ask(std::slice::from_ref(edge), &request).await? {
                progress(&edge, &outcome);
                let state = match outcome.state {
                    State::Proved => "rolled back".to_string(),
                    _ => format!("ROLLBACK FAILED: {}", outcome.message),
                };
                self.note(&edge, &state);
            }
        }
        Ok(())
    }

    fn request(&self, kind: Kind, id: &str) -> Request {
        Request {
            id: id.to_string(),
            kind,
            at: unix_now(),
            ..self.summary.asked.clone()
        }
    }

    fn note(&mut self, edge: &str, state: &str) {
        if let Some(entry) = self.summary.edges.iter_mut().find(|(e, _)| e == edge) {
            entry.1 = state.to_string();
        }
    }

    async fn publish_summary(&self) -> Result<(), EdgeError> {
        let key = self.link.layout().delivery_last();
        put(self.link.etcd(), &key, &self.summary).await?;
        Ok(())
    }

    /// The edges with a status key (running), by name.
    async fn running_edges(&self) -> Result<Vec<String>, EdgeError> {
        let prefix = self.link.layout().edges();
        let listed = self.link.etcd().read_prefix(&prefix).await?;
        let mut edges: Vec<String> = listed
            .kvs
            .iter()
            .map(|kv| kv.key.trim_start_matches(&prefix).to_string())
            .collect();
        edges.sort();
        Ok(edges)
    }

    /// Asks `edges` to run `request` and waits for each one's outcome (failed when it does
    /// not answer in time).
    async fn ask(
        &self,
        edges: &[String],
        request: &Request,
    ) -> Result<Vec<(String, Outcome)>, EdgeError> {
        let (etcd, layout) = (self.link.etcd(), self.link.layout());
        for edge in edges {
            put(etcd, &layout.delivery_request(edge), request).await?;
        }
        let deadline = tokio::time::Instant::now() + PART_TIMEOUT;
        let mut out = Vec::new();
        for edge in edges {
            let outcome = loop {
                let answer = etcd.get(&layout.delivery_result(edge)).await?;
                let parsed = answer.and_then(|v| parse::<Outcome>("a delivery result", &v).ok());
                match parsed {
                    Some(o) if o.id == request.id && o.state != State::Running => break o,
                    _ if tokio::time::Instant::now() >= deadline => {
                        break Outcome {
                            id: request.id.clone(),
                            state: State::Failed,
                            from: None,
                            to: None,
                            message: format!(
                                "no answer within {PART_TIMEOUT:?}: is its hapctl serve running?"
                            ),
                            journal: None,
                            at: unix_now(),
                        }
                    }
                    _ => tokio::time::sleep(POLL).await,
                }
            };
            out.push((edge.clone(), outcome));
        }
        Ok(out)
    }
}
