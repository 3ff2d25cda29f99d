//! What the running daemon offers its front ends (the HTTP API, the watchdog): the shared read
//! connection, the workers' queues, fresh connections for long work, and the metrics.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use tokio::sync::oneshot;

use super::events::{EdgeEvent, Events};
use super::metrics::Metrics;
use super::renewals::{self, OrderGate};
use super::workers::{BlockJob, DomainJob, JobError};
use crate::apply::ApplyReport;
use crate::blocks::{BlockChange, BlockReport, ChangeResult};
use crate::edge::{DomainChange, DomainResult, Edge, EdgeError, RenewOutcome};
use crate::settings::Settings;
use crate::traffic::Traffic;

/// A cheap handle on the daemon's services, shared by every request.
#[derive(Clone)]
pub struct Services(Arc<Shared>);

struct Shared {
    state_dir: PathBuf,
    /// Shared with the apply worker, which drops its copy of the state (see `workers.rs`).
    reads: Arc<Mutex<Edge>>,
    domains: mpsc::Sender<DomainJob>,
    blocks: mpsc::Sender<BlockJob>,
    metrics: Arc<Metrics>,
    /// Bounds the ACME orders in flight, shared with the renewal worker.
    orders: Arc<OrderGate>,
    /// The traffic counts, `None` when not collected (`[traffic] collect`, `[logs] target`).
    traffic: Option<Arc<Traffic>>,
    /// Events no history table keeps (the WAF agent's), for the dashboard's timeline.
    events: Arc<Events>,
}

/// The parts [`Services`] is made of, as the bootstrap started them.
pub(super) struct Parts {
    pub state_dir: PathBuf,
    pub reads: Arc<Mutex<Edge>>,
    pub domains: mpsc::Sender<DomainJob>,
    pub blocks: mpsc::Sender<BlockJob>,
    pub metrics: Arc<Metrics>,
    pub orders: Arc<OrderGate>,
    pub traffic: Option<Arc<Traffic>>,
}

impl Services {
    pub(super) fn new(p: Parts) -> Services {
        Services(Arc::new(Shared {
            state_dir: p.state_dir,
            reads: p.reads,
            domains: p.domains,
            blocks: p.blocks,
            metrics: p.metrics,
            orders: p.orders,
            traffic: p.traffic,
            events: Arc::default(),
        }))
    }

    pub fn state_dir(&self) -> &Path {
        &self.0.state_dir
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The traffic counts, `None` when this daemon does not collect them.
    pub fn traffic(&self) -> Option<&Arc<Traffic>> {
        self.0.traffic.as_ref()
    }

    /// Events no history table keeps, oldest first.
    pub fn edge_events(&self) -> Vec<EdgeEvent> {
        self.0.events.all()
    }

    pub(super) fn events(&self) -> &Arc<Events> {
        &self.0.events
    }

    /// Counts and logs renewals run outside the renewal worker (the renew routes).
    pub fn record_renewals(&self, outcomes: &[RenewOutcome]) {
        renewals::record(&self.0.metrics, outcomes);
    }

    pub fn settings(&self) -> Settings {
        self.0
            .reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .settings
            .clone()
    }

    /// Runs `f` on the shared read connection, on this thread (a worker's, not an async one).
    pub(super) fn read_now<T>(&self, f: impl FnOnce(&Edge) -> T) -> T {
        f(&self.0.reads.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs `f` on the shared read connection, off the async threads.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, JobError> {
        let reads = self.0.reads.clone();
        blocking(move || f(&reads.lock().unwrap_or_else(|e| e.into_inner()))).await
    }

    /// Every edge of the fleet (`GET /v1/fleet`), read on the fleet's runtime: the read
    /// connection is not held while etcd answers.
    pub async fn fleet_view(&self) -> Result<crate::fleet::status::FleetView, JobError> {
        let link = self.read(|edge| edge.link()).await?;
        let on = link.clone();
        on.handle()
            .spawn(async move { crate::fleet::status::read_view(link.etcd(), link.layout()).await })
            .await
            .map_err(|e| JobError::Gone(e.to_string()))?
            .map_err(|e| JobError::from(EdgeError::from(e)))
    }

    /// Runs `f` on a fresh connection (deliveries: long, and they take their own locks).
    pub async fn with_new_edge<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, JobError> {
        let dir = self.0.state_dir.clone();
        // The daemon's connection to the fleet's etcd, shared rather than made per request.
        let fleet = self
            .0
            .reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shared_fleet();
        blocking(move || {
            let mut edge = Edge::open(&dir)?;
            if let Some(link) = fleet {
                edge.join_fleet(link);
            }
            f(&mut edge)
        })
        .await
    }

    /// [`Services::with_new_edge`] for work that talks to the ACME CA: it waits for a slot of
    /// the order gate first, on the blocking thread.
    pub async fn with_acme<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, JobError> {
        let gate = self.0.orders.clone();
        self.with_new_edge(move |edge| {
            let _slot = gate.acquire();
            f(edge)
        })
        .await
    }

    /// Queues a domain change for the apply worker (`None`: apply the committed state);
    /// answers with the apply that contained it.
    pub async fn domain_job(
        &self,
        change: Option<DomainChange>,
    ) -> Result<(ApplyReport, Option<DomainResult>), JobError> {
        let (reply, answer) = oneshot::channel();
        send(
            &self.0.domains,
            DomainJob { change, reply },
            "the apply worker",
        )?;
        receive(answer, "the apply worker").await
    }

    pub async fn block_job(
        &self,
        changes: Vec<BlockChange>,
    ) -> Result<(Vec<ChangeResult>, BlockReport), JobError> {
        let (reply, answer) = oneshot::channel();
        send(
            &self.0.blocks,
            BlockJob::Change { changes, reply },
            "the block worker",
        )?;
        receive(answer, "the block worker").await
    }

    /// Rebuilds the blocked map's file and runtime map from the database.
    pub async fn block_sync(&self) -> Result<(), JobError> {
        let (reply, answer) = oneshot::channel();
        send(&self.0.blocks, BlockJob::Sync { reply }, "the block worker")?;
        receive(answer, "the block worker").await
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EdgeError> + Send + 'static,
) -> Result<T, JobError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| JobError::Gone(e.to_string()))?
        .map_err(JobError::from)
}

fn send<J>(queue: &mpsc::Sender<J>, job: J, worker: &str) -> Result<(), JobError> {
    queue
        .send(job)
        .map_err(|_| JobError::Gone(format!("{worker} stopped")))
}

async fn receive<T>(
    answer: oneshot::Receiver<Result<T, JobError>>,
    worker: &str,
) -> Result<T, JobError> {
    answer
        .await
        .map_err(|_| JobError::Gone(format!("{worker} dropped the request")))?
}
