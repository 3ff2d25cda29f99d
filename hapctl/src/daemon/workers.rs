//! The daemon's two workers, each a thread owning its own database connection.
//!
//! - The apply worker coalesces: whatever domain changes are waiting when an apply starts go
//!   into that one apply, and each caller gets the report of the apply that contained its
//!   change. No fixed delay: an idle worker applies at once.
//! - The block worker does the same for blocks on the fast path, so blocks never queue behind a
//!   slow reload. It keeps the key set in memory between changes, and when idle (it wakes every
//!   second) lifts expired blocks and folds the blocked delta map into the base map.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

use tokio::sync::oneshot;

use super::metrics::Metrics;
use crate::apply::ApplyReport;
use crate::blocks::{BlockCache, BlockChange, BlockReport, ChangeResult};
use crate::clock::unix_now;
use crate::edge::{DomainChange, DomainResult, Edge, EdgeError};

/// Why a job handed to the daemon did not come back with its result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JobError {
    /// The edge refused or failed the work (shared: one failed apply answers every change in
    /// it).
    #[error(transparent)]
    Edge(Arc<EdgeError>),
    /// The worker or blocking task is gone (a bug or a shutdown, never the request's fault).
    #[error("{0}")]
    Gone(String),
}

impl From<EdgeError> for JobError {
    fn from(e: EdgeError) -> JobError {
        JobError::Edge(Arc::new(e))
    }
}

/// `None` change: re-render and apply the committed state (`POST /v1/apply`).
pub struct DomainJob {
    pub change: Option<DomainChange>,
    pub reply: oneshot::Sender<Result<(ApplyReport, Option<DomainResult>), JobError>>,
}

pub enum BlockJob {
    Change {
        changes: Vec<BlockChange>,
        reply: oneshot::Sender<Result<(Vec<ChangeResult>, BlockReport), JobError>>,
    },
    /// Rebuild the file and the runtime map from the database.
    Sync {
        reply: oneshot::Sender<Result<(), JobError>>,
    },
}

/// Starts both workers; they stop when every sender is dropped. `reads` is the handlers'
/// connection, whose copy of the state the apply worker drops when it starts an apply;
/// `apply_edge` is the apply worker's own (the one the daemon's startup apply ran on).
pub fn start(
    metrics: Arc<Metrics>,
    reads: Arc<Mutex<Edge>>,
    apply_edge: Edge,
    fleet_applying: Arc<AtomicBool>,
) -> Result<(mpsc::Sender<DomainJob>, mpsc::Sender<BlockJob>), crate::edge::EdgeError> {
    let (domain_tx, domain_rx) = mpsc::channel::<DomainJob>();
    let (block_tx, block_rx) = mpsc::channel::<BlockJob>();
    let block_edge = apply_edge.connection()?;
    let m = metrics.clone();
    std::thread::Builder::new()
        .name("apply-worker".into())
        .spawn(move || apply_worker(apply_edge, domain_rx, m, reads, fleet_applying))
        .expect("spawn the apply worker");
    std::thread::Builder::new()
        .name("block-worker".into())
        .spawn(move || block_worker(block_edge, block_rx, metrics))
        .expect("spawn the block worker");
    Ok((domain_tx, block_tx))
}

/// How long the apply worker waits for more changes before it checks a runtime-changed set.
const CHECK_AFTER_IDLE: Duration = Duration::from_millis(200);

fn apply_worker(
    mut edge: Edge,
    rx: mpsc::Receiver<DomainJob>,
    metrics: Arc<Metrics>,
    reads: Arc<Mutex<Edge>>,
    fleet_applying: Arc<AtomicBool>,
) {
    edge.defer_checks();
    loop {
        let first = match rx.recv_timeout(CHECK_AFTER_IDLE) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                // One check for every runtime change made since the last one. A change that
                // arrives meanwhile stops it and goes first; the next idle check covers both.
                let arrived = std::cell::RefCell::new(None);
                let give_way = || {
                    if arrived.borrow().is_none() {
                        *arrived.borrow_mut() = rx.try_recv().ok();
                    }
                    // An apply of the fleet's changes goes first too (the next idle check
                    // covers it).
                    arrived.borrow().is_some() || fleet_applying.load(Ordering::Relaxed)
                };
                match edge.validate_pending(&give_way) {
                    Ok(crate::apply::PendingCheck::Refused(_)) => metrics.runtime_checked(true),
                    Ok(crate::apply::PendingCheck::Promoted) => metrics.runtime_checked(false),
                    Ok(crate::apply::PendingCheck::GaveWay) => metrics.runtime_check_gave_way(),
                    Ok(crate::apply::PendingCheck::Nothing) => {}
                    Err(e) => tracing::error!("the pending check of runtime changes failed: {e}"),
                }
                match arrived.into_inner() {
                    Some(job) => job,
                    None => continue,
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        let changes: Vec<DomainChange> = jobs.iter().filter_map(|j| j.change.clone()).collect();
        metrics.batch(jobs.len());
        forget_read_copy(&reads);
        let result = if changes.is_empty() {
            edge.apply("api apply").map(|r| vec![(r, None)])
        } else {
            edge.apply_domain_changes(&changes)
        };
        match result {
            Ok(results) => {
                // Applies seen once each, even when several changes share one.
                let mut seen = Vec::new();
                for (report, _) in &results {
                    if !seen.contains(&report.started_at_ms) {
                        seen.push(report.started_at_ms);
                        metrics.apply(report);
                    }
                }
                let shared = results.first().map(|(r, _)| r.clone());
                let mut per_change = results.into_iter();
                for job in jobs {
                    let answer = match job.change {
                        Some(_) => per_change.next(),
                        None => shared.clone().map(|r| (r, None)),
                    };
                    let _ = job.reply.send(
                        answer.ok_or_else(|| JobError::Gone("no result for this change".into())),
                    );
                }
            }
            Err(e) => {
                let error = JobError::from(e);
                for job in jobs {
                    let _ = job.reply.send(Err(error.clone()));
                }
            }
        }
        // An apply at 10,000 domains frees tens of MB (states, file sets, the diff); the block
        // worker's idle trim may be a second away or never come while blocks keep arriving.
        super::trim_heap();
    }
}

/// The handlers' connection keeps the state it last read (a full copy: 4 MiB at 10,000
/// domains). This apply's commit makes it stale, and the apply holds three copies of its own
/// while it renders, so the read copy is dropped now, not after the apply's peak
/// (BENCHMARKS.md, daemon memory); a read during the apply parses the rows. A read in progress
/// holds the lock: it is left alone rather than waited for.
fn forget_read_copy(reads: &Mutex<Edge>) {
    match reads.try_lock() {
        Ok(edge) => edge.forget_state(),
        Err(TryLockError::Poisoned(e)) => e.into_inner().forget_state(),
        Err(TryLockError::WouldBlock) => {}
    }
}

fn block_worker(mut edge: Edge, rx: mpsc::Receiver<BlockJob>, metrics: Arc<Metrics>) {
    // The key set and which map holds which key, kept between changes (checked against the
    // database and the files at each change, so other writers are seen).
    let mut cache = BlockCache::default();
    loop {
        let first = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                idle(&mut edge, &mut cache);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut syncs = Vec::new();
        let mut batch = Vec::new();
        for job in std::iter::once(first).chain(rx.try_iter()) {
            match job {
                BlockJob::Change { changes, reply } => batch.push((changes, reply)),
                BlockJob::Sync { reply } => syncs.push(reply),
            }
        }
        if !batch.is_empty() {
            let all: Vec<BlockChange> = batch.iter().flat_map(|(c, _)| c.clone()).collect();
            metrics.block_batch(all.len());
            match edge.change_blocks_with(&mut cache, &all) {
                Ok(report) => {
                    let mut results = report.results.clone().into_iter();
                    for (changes, reply) in batch {
                        let mine: Vec<ChangeResult> =
                            results.by_ref().take(changes.len()).collect();
                        let _ = reply.send(Ok((mine, report.clone())));
                    }
                }
                Err(e) => {
                    let error = JobError::from(e);
                    for (_, reply) in batch {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
            }
        }
        for reply in syncs {
            let _ = reply.send(edge.sync_blocks().map_err(JobError::from));
        }
    }
}

/// A second without jobs: lift expired blocks, fold the delta map into the base map, and hand
/// memory freed by large requests back to the system.
fn idle(edge: &mut Edge, cache: &mut BlockCache) {
    match edge.has_expired_blocks(unix_now()) {
        Ok(true) => {
            if let Err(e) = edge.change_blocks_with(cache, &[]) {
                tracing::error!("lifting expired blocks failed: {e}");
            }
        }
        Ok(false) => {}
        Err(e) => tracing::error!("cannot look for expired blocks: {e}"),
    }
    if let Err(e) = edge.fold_blocks(cache) {
        tracing::error!("folding the blocked delta map into the base map failed: {e}");
    }
    super::trim_heap();
}
