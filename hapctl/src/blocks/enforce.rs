//! Making the running worker hold what the two map files say, through the runtime API, read
//! back; a reload when that cannot be confirmed.
//!
//! Commands go to the worker's admin socket when the master lists exactly one worker and no
//! old one: that worker is then the only process that can answer there, and it answers in
//! ~0.1 ms where the master's `@1` forwarding takes 0.3–1 ms. Otherwise (a reload is
//! draining, or the admin socket fails) they go through the master's `@1`, the newest worker.
//! Either way a reload that started meanwhile (the master's reload count moved) makes the
//! change run again on the new worker, which may have read the files before they changed.

use std::time::{Duration, Instant};

use crate::haproxy::{CliSocket, Lookup, Master, ProcList, RuntimeError, RuntimeMap, Supervisor};
use crate::model::BlockKey;
use crate::render::BLOCKED_VALUE;
use crate::settings::Settings;

use super::files::BlockFiles;
use super::{BlockError, Enforcement};

/// Above this many new keys, they go in bulk payloads, and the read-back checks a sample and
/// the map's entry count instead of every key (pipelined commands cost ~0.2 ms a key).
const PAYLOAD_THRESHOLD: usize = 200;
const SAMPLE: usize = 100;
/// Bound on one command on the admin socket (the master's has its own).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One of the two blocked maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Which {
    Base,
    Delta,
}

/// What the running worker must hold for a key after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    /// Newly blocked (not in the worker before this change): added, then read back.
    Added,
    /// Already blocked, or moved here from the other map: added only if missing.
    Present,
    Removed,
}

/// One runtime operation on one map.
#[derive(Debug, Clone)]
pub(super) enum Step {
    /// Key by key, read back; `total`, the map's entries after, is checked on bulk changes.
    Each {
        map: Which,
        touched: Vec<(BlockKey, Want)>,
        total: usize,
    },
    /// Every entry replaced at once (`prepare`/`commit map`), entry count read back.
    Replace { map: Which, keys: Vec<BlockKey> },
}

/// How a runtime change ended.
pub(super) enum EnforceOutcome {
    Done(Enforcement, Option<String>),
    /// The worker's configuration has no delta map (it predates it): the change must go to
    /// the base map, files first.
    NoDeltaMap,
    /// The change could not be confirmed (the worker answered wrong, or not in time).
    Failed(String),
}

/// The runtime side of the block path of one edge.
pub(super) struct Runtime<'a> {
    pub settings: &'a Settings,
    pub files: &'a BlockFiles,
}

impl Runtime<'_> {
    /// The master's processes, waiting (bounded) while it re-executes; `None` when no master
    /// runs. Read before the files change: a reload that starts later reads the new files.
    pub fn procs(&self) -> Option<ProcList> {
        Supervisor::from_settings(self.settings)
            .procs_when_answering(self.settings.haproxy.reload_timeout)
    }

    /// Runs `steps` on the current worker (again after each reload that raced with them).
    /// Called once the files are in place: a reload the master has not counted yet when it
    /// answers the check beside the steps reads the new files.
    pub fn enforce(
        &self,
        steps: &[Step],
        before: Option<ProcList>,
    ) -> Result<EnforceOutcome, BlockError> {
        let Some(mut seen) = before else {
            return Ok(EnforceOutcome::Done(Enforcement::NotRunning, None));
        };
        let deadline = Instant::now() + self.settings.haproxy.reload_timeout;
        let supervisor = Supervisor::from_settings(self.settings);
        let gone = || supervisor.master_gone();
        let mut first = true;
        loop {
            // The check for a racing reload needs only the files in place, not the steps done:
            // it runs beside them.
            let (result, now) = std::thread::scope(|s| {
                let now = s.spawn(|| self.procs());
                let result = retry_transient(deadline, gone, || self.run(&seen, steps, first));
                let now = now.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                (result, now)
            });
            match result {
                Ok(()) => {}
                // Reloading would not help: the files it would read do not declare the map.
                Err(Failure::NotLoaded(why)) => {
                    return Ok(EnforceOutcome::Done(Enforcement::NotLoaded, Some(why)))
                }
                Err(Failure::NoDeltaMap) => return Ok(EnforceOutcome::NoDeltaMap),
                // Killed meanwhile: the next master loads the files, already in place.
                Err(Failure::Transient(_)) if gone() => {
                    return Ok(EnforceOutcome::Done(Enforcement::NotRunning, None))
                }
                Err(Failure::Transient(e) | Failure::Final(e)) => {
                    return Ok(EnforceOutcome::Failed(e))
                }
            }
            first = false;
            match now {
                Some(now)
                    if now.master.reloads != seen.master.reloads && Instant::now() < deadline =>
                {
                    seen = now
                }
                _ => return Ok(EnforceOutcome::Done(Enforcement::Runtime, None)),
            }
        }
    }

    /// The steps on the admin socket when only one worker exists, else (or if that fails)
    /// through the master.
    fn run(&self, procs: &ProcList, steps: &[Step], first: bool) -> Result<(), Failure> {
        if procs.workers.len() == 1 && procs.old_workers.is_empty() {
            let admin = CliSocket::new(&self.settings.paths.admin_socket, ADMIN_TIMEOUT);
            match self.run_on(
                &|map| RuntimeMap::on_worker(admin.clone(), map),
                steps,
                first,
            ) {
                Ok(()) => return Ok(()),
                Err(e) => tracing::debug!(
                    "block change on the admin socket failed ({e:?}); through the master"
                ),
            }
        }
        let master = Master::from_settings(self.settings).socket().clone();
        // Through the master, an `Added` key goes out of the worker before it goes in: the
        // admin attempt may have added it already.
        self.run_on(&|map| RuntimeMap::new(master.clone(), map), steps, false)
    }

    fn run_on(
        &self,
        open: &dyn Fn(String) -> RuntimeMap,
        steps: &[Step],
        first: bool,
    ) -> Result<(), Failure> {
        for step in steps {
            let which = match step {
                Step::Each { map, .. } | Step::Replace { map, .. } => *map,
            };
            let path = match which {
                Which::Base => &self.files.base,
                Which::Delta => &self.files.delta,
            };
            let map = open(path.display().to_string());
            let done = match step {
                Step::Each { touched, total, .. } => apply_each(&map, touched, *total, first),
                Step::Replace { keys, .. } => replace_whole(&map, keys),
            };
            match done {
                Err(Failure::NotLoaded(_)) if which == Which::Delta => {
                    // Nothing to empty in a worker without the delta map; anything else must go
                    // to the base map.
                    if !matches!(step, Step::Replace { keys, .. } if keys.is_empty()) {
                        return Err(Failure::NoDeltaMap);
                    }
                }
                other => other?,
            }
        }
        Ok(())
    }

    /// The runtime change failed: reload, so the worker reads the (already written) files.
    pub fn reload_instead(
        &self,
        runtime_error: String,
    ) -> Result<(Enforcement, Option<String>), BlockError> {
        tracing::warn!("runtime map change not confirmed ({runtime_error}); reloading");
        let master = Master::from_settings(self.settings);
        match master.reload(self.settings.haproxy.reload_timeout) {
            Ok(_) => Ok((Enforcement::Reload, Some(runtime_error))),
            Err(e) => Err(BlockError::NotEnforced {
                path: self.files.base.display().to_string(),
                runtime: runtime_error,
                reload: e.to_string(),
            }),
        }
    }
}

/// Runs `op` again while it fails on a socket hiccup of a re-executing master, until
/// `deadline` or until the master is `gone` (a dead one refuses connections the same way).
/// Every runtime operation here is idempotent.
fn retry_transient<T>(
    deadline: Instant,
    gone: impl Fn() -> bool,
    mut op: impl FnMut() -> Result<T, Failure>,
) -> Result<T, Failure> {
    loop {
        match op() {
            Err(Failure::Transient(_)) if Instant::now() < deadline && !gone() => {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => return other,
        }
    }
}

/// A runtime operation's failure: a socket hiccup worth retrying, a worker whose configuration
/// lacks a blocked map, or a real answer.
#[derive(Debug)]
enum Failure {
    Transient(String),
    NotLoaded(String),
    NoDeltaMap,
    Final(String),
}

impl From<RuntimeError> for Failure {
    fn from(e: RuntimeError) -> Failure {
        match &e {
            RuntimeError::Socket(s) if s.is_transient() => Failure::Transient(e.to_string()),
            RuntimeError::NoAnswer { .. } => Failure::Transient(e.to_string()),
            RuntimeError::UnknownMap { .. } => Failure::NotLoaded(e.to_string()),
            _ => Failure::Final(e.to_string()),
        }
    }
}

/// Makes each key's entry right in `runtime`, and reads it back: an address of the key must
/// then match (blocked) or not match this key (removed; a wider block may still cover it,
/// which is right). Commands are pipelined, so a batch costs a few round trips, not two per
/// key.
///
/// On the `first` attempt an `Added` key goes in at once: no worker has it, since none read
/// the files after they changed (a reload since would make the caller run again). On a later
/// attempt it may be there already (from the new files, or the attempt before): it is looked
/// up first, so the map never holds it twice.
fn apply_each(
    runtime: &RuntimeMap,
    touched: &[(BlockKey, Want)],
    total: usize,
    first: bool,
) -> Result<(), Failure> {
    let err = Failure::from;
    let probe = |k: &BlockKey| k.net().network().to_string();
    let is_key = |found: &Lookup, key: &BlockKey| matches!(found, Lookup::Found(f) if f.parse::<BlockKey>().ok() == Some(*key));
    let of = |pick: &dyn Fn(Want) -> bool| -> Vec<BlockKey> {
        touched
            .iter()
            .filter(|(_, w)| pick(*w))
            .map(|(k, _)| *k)
            .collect()
    };
    let blind = of(&|w| first && w == Want::Added);
    let checked = of(&|w| w == Want::Present || (!first && w == Want::Added));
    let removed = of(&|w| w == Want::Removed);

    let found = runtime
        .lookup_many(&checked.iter().map(probe).collect::<Vec<_>>())
        .map_err(err)?;
    let to_add: Vec<String> = blind
        .iter()
        .map(BlockKey::to_string)
        .chain(
            checked
                .iter()
                .zip(&found)
                .filter(|(k, f)| !is_key(f, k))
                .map(|(k, _)| k.to_string()),
        )
        .collect();
    let bulk = to_add.len() > PAYLOAD_THRESHOLD;
    if bulk {
        runtime
            .add_bulk(to_add.iter().map(|k| (k.as_str(), BLOCKED_VALUE)))
            .map_err(err)?;
    } else {
        runtime.add_many(&to_add, BLOCKED_VALUE).map_err(err)?;
    }
    runtime
        .remove_many(&removed.iter().map(BlockKey::to_string).collect::<Vec<_>>())
        .map_err(err)?;

    // A bulk change is read back on a spread sample, plus the map's entry count.
    let all: Vec<(BlockKey, Want)> = if bulk {
        let held = runtime.keys().map_err(err)?.len();
        if held != total {
            return Err(Failure::Final(format!(
                "the worker holds {held} entries after the change, expected {total}"
            )));
        }
        touched
            .iter()
            .step_by(touched.len().div_ceil(SAMPLE))
            .copied()
            .collect()
    } else {
        touched.to_vec()
    };
    let seen = runtime
        .lookup_many(&all.iter().map(|(k, _)| probe(k)).collect::<Vec<_>>())
        .map_err(err)?;
    for ((key, want), found) in all.iter().zip(&seen) {
        let right = match want {
            Want::Added | Want::Present => matches!(found, Lookup::Found(_)),
            Want::Removed => !is_key(found, key),
        };
        if !right {
            return Err(Failure::Final(format!("read back of {key} gave {found:?}")));
        }
    }
    Ok(())
}

fn replace_whole(runtime: &RuntimeMap, all: &[BlockKey]) -> Result<(), Failure> {
    let keys: Vec<String> = all.iter().map(BlockKey::to_string).collect();
    runtime
        .replace_all(keys.iter().map(|k| (k.as_str(), BLOCKED_VALUE)))
        .map_err(Failure::from)?;
    let held = runtime.keys().map_err(Failure::from)?;
    if held.len() == keys.len() {
        Ok(())
    } else {
        Err(Failure::Final(format!(
            "the worker holds {} entries after the replacement, expected {}",
            held.len(),
            keys.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn always_refused(calls: &Cell<u32>) -> Result<(), Failure> {
        calls.set(calls.get() + 1);
        Err(Failure::Transient("connection refused".into()))
    }

    #[test]
    fn a_refusing_socket_is_retried_while_the_master_lives_and_not_once_it_is_gone() {
        let far = Instant::now() + Duration::from_secs(3600);
        let calls = Cell::new(0);
        let alive_for_three = || calls.get() >= 3;
        let result = retry_transient(far, alive_for_three, || always_refused(&calls));
        assert!(matches!(result, Err(Failure::Transient(_))), "{result:?}");
        assert_eq!(calls.get(), 3);

        let calls = Cell::new(0);
        let result = retry_transient(far, || true, || always_refused(&calls));
        assert!(matches!(result, Err(Failure::Transient(_))), "{result:?}");
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn an_answer_is_not_retried() {
        let far = Instant::now() + Duration::from_secs(3600);
        let calls = Cell::new(0);
        let result: Result<(), Failure> = retry_transient(
            far,
            || false,
            || {
                calls.set(calls.get() + 1);
                Err(Failure::Final("unknown command".into()))
            },
        );
        assert!(matches!(result, Err(Failure::Final(_))), "{result:?}");
        assert_eq!(calls.get(), 1);
    }
}
