//! The agent's workers: `[waf] workers` threads of its own, each evaluating one request at a
//! time from one shared queue, the answer handed back to the connection's task.
//!
//! Why threads of its own rather than tokio's blocking pool behind a semaphore: a worker that
//! finishes takes the next waiting request itself, where a freed permit woke the waiting
//! task, which then woke a blocking thread; and a request whose requester stopped waiting
//! (its deadline passed) is dropped without being evaluated, so a backlog drains instead of
//! burning CPU on answers nobody reads. One queue under a mutex, one condition variable: a
//! request wakes one idle worker and no other.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::agent::{evaluate, Answer};
use super::engine::Engine;
use super::message::Inspect;

struct Job {
    engine: Arc<Engine>,
    req: Inspect,
    reply: oneshot::Sender<Answer>,
}

/// The waiting requests, and whether the pool is gone.
#[derive(Default)]
struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, (VecDeque<Job>, bool)> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct Pool {
    queue: Arc<Queue>,
    /// Past this many waiting requests, those nobody waits for any more are dropped: the
    /// live ones are bounded by the agent's permits, and the dead ones so too, whatever the
    /// workers are stuck on.
    capacity: usize,
}

impl Pool {
    /// `workers` threads taking requests from one queue; they end when the pool is dropped
    /// (after the request each one is on).
    pub fn start(workers: usize, capacity: usize) -> std::io::Result<Pool> {
        let pool = Pool::idle(capacity);
        pool.add_workers(workers.max(1))?;
        Ok(pool)
    }

    /// The queue alone: nothing is evaluated until workers are added.
    pub fn idle(capacity: usize) -> Pool {
        Pool {
            queue: Arc::default(),
            capacity,
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
    /// unanswered only if a worker panicked past its guard).
    pub fn submit(&self, engine: Arc<Engine>, req: Inspect) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        let mut q = self.queue.lock();
        if q.0.len() >= self.capacity {
            q.0.retain(|job| !job.reply.is_closed());
        }
        q.0.push_back(Job { engine, req, reply });
        drop(q);
        self.queue.ready.notify_one();
        answer
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.queue.lock().1 = true;
        self.queue.ready.notify_all();
    }
}

fn work(queue: &Queue) {
    loop {
        let job = {
            let mut q = queue.lock();
            loop {
                match q.0.pop_front() {
                    // Its deadline passed while it waited: nobody reads the answer.
                    Some(job) if job.reply.is_closed() => continue,
                    Some(job) => break job,
                    None if q.1 => return,
                    None => q = queue.ready.wait(q).unwrap_or_else(|e| e.into_inner()),
                }
            }
        };
        let answer = catch_unwind(AssertUnwindSafe(|| evaluate(&job.engine, &job.req)))
            .unwrap_or(Answer::Error("internal"));
        let _ = job.reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real libmodsecurity, no rules.
    fn engine() -> Arc<Engine> {
        let engine = Engine::from_rules("SecRuleEngine DetectionOnly").unwrap_or_else(|e| {
            panic!("{e} (scripts/ensure-test-tools.sh installs libmodsecurity3)")
        });
        Arc::new(engine)
    }

    fn request() -> Inspect {
        Inspect {
            policy: Default::default(),
            id: "pool-test".into(),
            client_ip: "127.0.0.1".into(),
            client_port: 1,
            method: "GET".into(),
            path: "/".into(),
            query: String::new(),
            version: "1.1".into(),
            headers: Vec::new(),
            body: Vec::new(),
            body_cut: false,
        }
    }

    #[test]
    fn requests_queued_before_a_worker_are_answered_when_one_comes() {
        let engine = engine();
        let pool = Pool::idle(2);
        drop(pool.submit(engine.clone(), request()));
        let answer = pool.submit(engine, request());
        pool.add_workers(1).unwrap();
        let answer = answer.blocking_recv().unwrap();
        assert!(matches!(answer, Answer::Pass(_)), "{answer:?}");
        assert!(pool.queue.lock().0.is_empty());
    }

    #[test]
    fn requests_nobody_waits_for_do_not_pile_up_past_the_capacity() {
        let engine = engine();
        // No worker: every request stays queued, and each one's requester gives up.
        let pool = Pool::idle(4);
        for _ in 0..100 {
            drop(pool.submit(engine.clone(), request()));
            assert!(pool.queue.lock().0.len() <= 4);
        }
        let waiting: Vec<_> = (0..10)
            .map(|_| pool.submit(engine.clone(), request()))
            .collect();
        assert_eq!(
            pool.queue.lock().0.len(),
            10,
            "the live ones stay, the dead ones go"
        );
        drop(waiting);
    }
}
