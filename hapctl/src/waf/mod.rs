//! The web application firewall (docs/waf.md): hapctl's own SPOE agent over libmodsecurity v3
//! and the OWASP CRS. `ffi.rs` loads the library, `engine.rs` the rules and evaluates a
//! request, `matches.rs` reads a matched rule, `verdict.rs` scores under a domain's policy,
//! `message.rs` parses HAProxy's SPOE message, `pool.rs` runs the evaluations on the agent's workers, `ruleset.rs` lists the rules, `trial.rs` evaluates a request without sending it, `agent.rs` speaks SPOP, `metrics.rs` counts
//! and keeps the state file, `status.rs` shows the agent and reloads its rules, `supervise.rs` keeps the agent running under `hapctl serve`.
//! The HAProxy side is rendered by `render::waf`.

pub mod agent;
pub mod engine;
pub mod ffi;
pub mod matches;
pub mod message;
pub mod metrics;
pub mod pool;
pub mod ruleset;
pub mod status;
pub mod supervise;
pub mod trial;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::settings::waf::WafSettings;

pub use agent::{Agent, Answer};
pub use engine::{Engine, EngineError};

#[derive(Debug, thiserror::Error)]
pub enum AgentServeError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("waf agent: {0}")]
    Io(#[from] std::io::Error),
}

/// HAProxy connections served at once. HAProxy opens a few per thread (pipelining keeps them
/// few); each holds a read buffer and up to `agent::PER_CONNECTION` requests, so a local
/// process opening more waits in the listen backlog instead of growing the agent.
const MAX_CONNECTIONS: usize = 256;

/// The agent's state file, under the run directory.
pub fn state_file(run_dir: &Path) -> PathBuf {
    run_dir.join("waf.json")
}

/// Runs the agent until `stop` resolves: accepts HAProxy's connections, reloads the rules
/// on SIGHUP (connections stay), writes the state file every second.
pub async fn serve(
    settings: &WafSettings,
    run_dir: &Path,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), AgentServeError> {
    let engine = Engine::load(&settings.crs)?;
    let mut loaded = loaded(&engine, &settings.crs);
    let agent = Arc::new(Agent::new(
        engine,
        settings.workers,
        settings.agent_deadline(),
        settings.body_max,
    )?);
    let listener = TcpListener::bind(settings.listen).await?;
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let state = state_file(run_dir);
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // The rules load on a blocking thread while connections are accepted and served (HAProxy's
    // health checks included) with the old engine.
    let mut reloading: Option<tokio::task::JoinHandle<RulesLoad>> = None;
    let mut again = false;
    let mut writing: Option<tokio::task::JoinHandle<()>> = None;
    tracing::info!(listen = %settings.listen, engine = %loaded.engine, "waf agent ready");
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = accept(&listener, &connections) => {
                let (stream, permit) = accepted?;
                let agent = agent.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    if let Err(e) = agent::serve_connection(agent, stream).await {
                        tracing::debug!(error = %e, "spop connection ended");
                    }
                });
            }
            _ = hup.recv() => {
                // A SIGHUP during a load may follow a later edit: one more load after it.
                match reloading {
                    Some(_) => again = true,
                    None => reloading = Some(load_rules(&settings.crs)),
                }
            }
            outcome = async { reloading.as_mut().expect("guarded by the branch condition").await }, if reloading.is_some() => {
                reloading = if std::mem::take(&mut again) { Some(load_rules(&settings.crs)) } else { None };
                match outcome.map_err(std::io::Error::other)? {
                    Ok((rules, engine)) => {
                        loaded = rules;
                        agent.replace_engine(engine);
                        agent.metrics.reloaded(Ok(()));
                        tracing::info!(rules = loaded.rules, "waf rules reloaded");
                    }
                    Err(e) => {
                        // Named with its loader: what `hapctl waf reload` and the API answer.
                        agent.metrics.reloaded(Err(format!("{}: {e}", settings.crs.display())));
                        tracing::error!(error = %e, "waf rules reload refused; the old rules stay");
                    }
                }
            }
            _ = tick.tick() => {
                // The write syncs to disk, which a busy disk holds for a long time: off the
                // runtime's two threads, which serve HAProxy's connections (held, they left
                // requests queued on them past their deadline). One write at a time.
                if writing.as_ref().is_none_or(|w| w.is_finished()) {
                    writing = Some(write_state(agent.metrics.snapshot(&loaded), state.clone()));
                }
            }
        }
    }
    Ok(())
}

/// Writes the state file on a blocking thread.
fn write_state(snapshot: metrics::CountersSnapshot, path: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        if let Err(e) = snapshot.write(&path) {
            tracing::warn!(error = %e, path = %path.display(), "waf state file not written");
        }
    })
}

type RulesLoad = Result<(metrics::Loaded, Engine), EngineError>;

/// Loads the rules `crs` names on a blocking thread.
fn load_rules(crs: &Path) -> tokio::task::JoinHandle<RulesLoad> {
    let crs = crs.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Engine::load(&crs).map(|engine| (loaded(&engine, &crs), engine))
    })
}

/// What the state file says of the rules `engine` loaded through `crs`. The CRS version is
/// read from the same files (`SecComponentSignature`); a set whose listing fails still serves.
fn loaded(engine: &Engine, crs: &Path) -> metrics::Loaded {
    metrics::Loaded {
        engine: engine.version().to_string(),
        crs: ruleset::RuleSet::read(crs).ok().and_then(|set| set.crs),
        rules: engine.rules_loaded(),
        at: crate::clock::unix_now().max(0) as u64,
    }
}

/// The next connection, once fewer than `connections` allows are served (the permit is the
/// connection's place, given back when it is dropped).
async fn accept(
    listener: &TcpListener,
    connections: &Arc<Semaphore>,
) -> std::io::Result<(TcpStream, OwnedSemaphorePermit)> {
    let permit = connections
        .clone()
        .acquire_owned()
        .await
        .map_err(std::io::Error::other)?;
    let (stream, _) = listener.accept().await?;
    // An ACK is a small write that must leave at once: with Nagle it waits for HAProxy's
    // (delayed) acknowledgement of the previous one whenever answers are pipelined.
    stream.set_nodelay(true)?;
    Ok((stream, permit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_past_the_bound_wait_until_one_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(Semaphore::new(1));
        let _a = TcpStream::connect(addr).await.unwrap();
        let (first, place) = accept(&listener, &connections).await.unwrap();
        assert!(first.nodelay().unwrap(), "answers wait for Nagle");
        let _b = TcpStream::connect(addr).await.unwrap();
        // Full: the second one is not taken, however long it waits (a wait that cannot end
        // early under load, so the short bound proves nothing false).
        let waiting =
            tokio::time::timeout(Duration::from_millis(300), accept(&listener, &connections));
        assert!(waiting.await.is_err(), "accepted past the bound");
        drop(place);
        let next = tokio::time::timeout(Duration::from_secs(10), accept(&listener, &connections));
        assert!(next.await.unwrap().is_ok());
    }
}
