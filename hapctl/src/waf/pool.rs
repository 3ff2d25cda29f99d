//! The agent's workers: `[waf] workers` threads of their own, each evaluating one request at a
//! time from one shared queue, the answer handed back to the connection's task.
//!
//! Why threads of their own rather than tokio's blocking pool: they run at a lower scheduling
//! priority ([`NICE`]). An evaluation is a millisecond of CPU; on an edge whose cores HAProxy
//! shares, a worker at HAProxy's priority preempts HAProxy threads, and one preempted while it
//! holds a lock leaves its sibling spinning on it (seen in `perf` as HAProxy's CPU). At a lower
//! priority an evaluation gives way to HAProxy (and to the agent's own I/O) and uses the CPU
//! they leave. A request whose requester stopped waiting (its deadline passed) is dropped
//! without being evaluated, so a backlog drains instead of burning CPU on answers nobody reads.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::agent::{evaluate, Answer};
use super::engine::Engine;
use super::message::Inspect;

/// The workers' nice value: below HAProxy's and the agent's I/O threads' (0).
pub const NICE: i32 = 10;

struct Job {
    engine: Arc<Engine>,
    req: Inspect,
    reply: oneshot::Sender<Answer>,
}

type Queue = Arc<Mutex<Receiver<Job>>>;

pub struct Pool {
    jobs: SyncSender<Job>,
    queue: Queue,
}

impl Pool {
    /// A queue of `capacity` requests and `workers` threads taking from it. The threads end
    /// when the pool is dropped (after the request each one is on).
    pub fn start(workers: usize, capacity: usize) -> std::io::Result<Pool> {
        let pool = Pool::queue(capacity);
        pool.add_workers(workers.max(1))?;
        Ok(pool)
    }

    /// The queue alone: nothing is evaluated until workers are added.
    pub fn queue(capacity: usize) -> Pool {
        let (jobs, rx) = mpsc::sync_channel(capacity);
        Pool {
            jobs,
            queue: Arc::new(Mutex::new(rx)),
        }
    }

    pub fn add_workers(&self, workers: usize) -> std::io::Result<()> {
        for n in 0..workers {
            let queue = self.queue.clone();
            std::thread::Builder::new()
                .name(format!("waf-worker-{n}"))
                .spawn(move || work(&queue))?;
        }
        Ok(())
    }

    /// Queues `req` for the next free worker; the answer arrives on the receiver (dropped
    /// unanswered only if the queue is full or a worker panicked).
    pub fn submit(&self, engine: Arc<Engine>, req: Inspect) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.jobs.try_send(Job { engine, req, reply })
        {
            tracing::warn!("waf agent: the workers' queue is full");
        }
        answer
    }
}

fn work(queue: &Queue) {
    lower_priority();
    loop {
        // The lock is held only to take a job, never while evaluating.
        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(job) = next else {
            return; // the pool is gone
        };
        if job.reply.is_closed() {
            continue; // its deadline passed while it waited
        }
        let answer = catch_unwind(AssertUnwindSafe(|| evaluate(&job.engine, &job.req)))
            .unwrap_or(Answer::Error("internal"));
        let _ = job.reply.send(answer);
    }
}

/// This thread's nice value to [`NICE`] (Linux sets it per thread).
fn lower_priority() {
    // SAFETY: gettid and setpriority have no memory preconditions.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICE)
    };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "waf worker: priority not lowered");
    }
}
