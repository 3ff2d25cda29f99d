//! `hapctl serve`: the HTTP API daemon (tokio + axum) over the same services as the CLI.
//!
//! Handlers are thin: they parse the request into model types, hand changes to the workers
//! (`workers.rs`: coalesced applies, the block fast path) or read through one shared
//! connection, and shape the answer. Certificate work (`certs.rs`, `compat/certs.rs`) runs on
//! a fresh `Edge` on a blocking thread; the renewal worker (`renewals.rs`) renews on its own.
//! The route table (`routes.rs`) builds both the router and `/openapi.json`, so the
//! documentation cannot drift from what is served.

mod metrics;
mod notify;
pub(crate) mod renewals;
mod supervision;
pub(crate) mod workers;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use tokio::sync::oneshot;

use crate::apply::ApplyReport;
use crate::blocks::{BlockChange, BlockReport, ChangeResult};
use crate::edge::{DomainChange, DomainResult, Edge, EdgeError};
use crate::settings::Settings;

use crate::http::{compat, cutover, routes, ui, ApiError};
pub(crate) use metrics::Metrics;
use workers::{BlockJob, DomainJob};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Edge(#[from] EdgeError),
    #[error("refusing to run without authentication on {0}: --no-auth is only allowed on a loopback address")]
    NoAuthNotLoopback(SocketAddr),
    #[error("cannot read the API token from {path}: {source}; run `hapctl init` or set [api] token_file")]
    Token {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the API token file {0} is empty")]
    EmptyToken(PathBuf),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Server(std::io::Error),
    #[error("HAProxy did not start: {0}")]
    Start(String),
    #[error(transparent)]
    Logs(#[from] crate::logs::LogError),
}

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) state_dir: PathBuf,
    pub(crate) token: Option<String>,
    /// Shared with the apply worker, which drops its copy of the state (see `workers.rs`).
    pub(crate) reads: Arc<Mutex<Edge>>,
    pub(crate) domains: mpsc::Sender<DomainJob>,
    pub(crate) blocks: mpsc::Sender<BlockJob>,
    pub(crate) metrics: Arc<Metrics>,
    /// Bounds the ACME orders in flight, shared with the renewal worker.
    pub(crate) orders: Arc<renewals::OrderGate>,
    /// DNS-01 orders between `/api/ssl/dns-challenge/request` and `verify`.
    pub(crate) dns: compat::PendingDns,
    /// The dashboard's signed-in sessions.
    pub(crate) sessions: ui::Sessions,
    /// The steps of the delivery or rollback in progress.
    pub(crate) cutovers: cutover::Cutovers,
}

impl AppState {
    pub(crate) fn token(&self) -> Option<&str> {
        self.0.token.as_deref()
    }

    pub(crate) fn sessions(&self) -> &ui::Sessions {
        &self.0.sessions
    }

    pub(crate) fn state_dir(&self) -> &std::path::Path {
        &self.0.state_dir
    }

    pub(crate) fn cutovers(&self) -> &cutover::Cutovers {
        &self.0.cutovers
    }

    pub(crate) fn settings(&self) -> Settings {
        self.0
            .reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .settings
            .clone()
    }

    /// Runs `f` on the shared read connection, off the async threads.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let app = self.clone();
        tokio::task::spawn_blocking(move || {
            let edge = app.0.reads.lock().unwrap_or_else(|e| e.into_inner());
            f(&edge)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(ApiError::from)
    }

    /// Runs `f` on a fresh connection (deliveries: long, and they take their own locks).
    pub(crate) async fn with_new_edge<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let dir = self.0.state_dir.clone();
        tokio::task::spawn_blocking(move || Edge::open(&dir).and_then(|mut edge| f(&mut edge)))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(ApiError::from)
    }

    /// [`AppState::with_new_edge`] for work that talks to the ACME CA: it waits for a slot of
    /// the order gate first, on the blocking thread.
    pub(crate) async fn with_acme<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Edge) -> Result<T, EdgeError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let gate = self.0.orders.clone();
        self.with_new_edge(move |edge| {
            let _slot = gate.acquire();
            f(edge)
        })
        .await
    }

    /// Queues a domain change for the apply worker; answers with the apply that contained it.
    pub(crate) async fn domain_job(
        &self,
        change: Option<DomainChange>,
    ) -> Result<(ApplyReport, Option<DomainResult>), ApiError> {
        let (reply, answer) = oneshot::channel();
        self.0
            .domains
            .send(DomainJob { change, reply })
            .map_err(|_| ApiError::internal("the apply worker stopped"))?;
        answer
            .await
            .map_err(|_| ApiError::internal("the apply worker dropped the request"))?
            .map_err(ApiError::internal)
    }

    pub(crate) async fn block_job(
        &self,
        changes: Vec<BlockChange>,
    ) -> Result<(Vec<ChangeResult>, BlockReport), ApiError> {
        let (reply, answer) = oneshot::channel();
        self.send_block_job(BlockJob::Change { changes, reply })?;
        answer
            .await
            .map_err(|_| ApiError::internal("the block worker dropped the request"))?
            .map_err(ApiError::internal)
    }

    pub(crate) async fn block_sync(&self) -> Result<(), ApiError> {
        let (reply, answer) = oneshot::channel();
        self.send_block_job(BlockJob::Sync { reply })?;
        answer
            .await
            .map_err(|_| ApiError::internal("the block worker dropped the request"))?
            .map_err(ApiError::internal)
    }

    pub(crate) fn send_block_job(&self, job: BlockJob) -> Result<(), ApiError> {
        self.0
            .blocks
            .send(job)
            .map_err(|_| ApiError::internal("the block worker stopped"))
    }
}

/// Options of `hapctl serve`.
pub struct ServeOptions {
    pub listen: Option<SocketAddr>,
    pub no_auth: bool,
}

/// Runs the daemon until SIGTERM or SIGINT. HAProxy is started if it is not running, and left
/// running when the daemon stops.
pub fn serve(state_dir: &Path, options: ServeOptions) -> Result<(), ServeError> {
    // glibc gives each thread that ever allocated a lot its own arena and keeps it: with a
    // dozen threads, one large request each would multiply the daemon's memory.
    // Blocks of 128 KiB and more (rendered files, answer bodies, key lists: megabytes at
    // 10,000 domains) get their own mapping, returned to the system when freed. glibc's default
    // raises that bound to the largest block freed so far, after which such blocks come from
    // the heap and their pages stay with the process until a trim.
    // SAFETY: mallopt only tunes the allocator; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
    // Read (and removed from the environment) before any thread exists.
    let notifier = Arc::new(notify::Notifier::from_env());
    notifier.status("starting: bringing HAProxy to the committed state");
    let mut edge = Edge::open(state_dir)?;
    let listen = options.listen.unwrap_or(edge.settings.api.listen);
    let token = if options.no_auth {
        if !listen.ip().is_loopback() {
            return Err(ServeError::NoAuthNotLoopback(listen));
        }
        None
    } else {
        let path = edge.settings.api.token_file.clone();
        let token = std::fs::read_to_string(&path).map_err(|source| ServeError::Token {
            path: path.clone(),
            source,
        })?;
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(ServeError::EmptyToken(path));
        }
        Some(token)
    };

    // The access log is read before HAProxy may start, so its first lines are kept.
    let _access_log = match edge.settings.logs.target {
        crate::settings::LogTarget::File => Some(crate::logs::Receiver::start(
            &edge.settings.logs,
            edge.settings.haproxy.privileges.worker_user(),
        )?),
        _ => None,
    };
    // hapctl's WAF agent (direct mode), up before HAProxy may send it requests (docs/waf.md).
    let _waf_agent = match (&edge.settings.waf, edge.settings.haproxy.mode) {
        (Some(_), crate::settings::Mode::Direct) => Some(
            crate::waf::supervise::start(
                state_dir,
                edge.settings
                    .paths
                    .haproxy_log
                    .with_file_name("waf-agent.log"),
            )
            .map_err(ServeError::Server)?,
        ),
        _ => None,
    };

    // Bring the edge to the committed state (this also finishes an interrupted apply), start
    // HAProxy if needed (unless it was stopped on purpose), and rebuild what lives only in the
    // worker: runtime entries of a daemon that was killed may be missing. From then on the
    // supervision loop keeps it running.
    let report = edge.apply("serve: startup")?;
    if !report.outcome.is_success() {
        return Err(ServeError::Start(format!(
            "{}: {}",
            report.outcome.as_str(),
            report.message
        )));
    }
    if edge.supervisor().status().procs.is_none() {
        if edge.stop_requested() {
            tracing::warn!("HAProxy stays stopped, as `hapctl haproxy stop` asked; `hapctl haproxy start` starts it");
        } else {
            edge.start_haproxy()
                .map_err(|e| ServeError::Start(e.to_string()))?;
        }
    }
    edge.after_haproxy_started()?;
    // The startup apply freed two parsed states and rendered file sets; hand their pages back
    // before the workers (other threads, maybe another arena) allocate their own.
    trim_heap();

    let metrics = Arc::new(Metrics::default());
    let _supervision = supervision::start(edge.connection()?, metrics.clone());
    let orders = Arc::new(renewals::OrderGate::default());
    renewals::start(edge.connection()?, metrics.clone(), orders.clone());
    // The startup apply ran on the connection the apply worker keeps: what an apply leaves
    // for the next one (the committed state, the rendered backend sections: 11 MiB at 10,000
    // domains) serves its next apply. The handlers read through a connection of their own,
    // which never applies.
    let reads = Arc::new(Mutex::new(edge.connection()?));
    let (domains, blocks) = workers::start(metrics.clone(), reads.clone(), edge)?;
    let app = AppState(Arc::new(Inner {
        state_dir: state_dir.to_path_buf(),
        token,
        reads,
        domains,
        blocks,
        metrics,
        orders,
        dns: compat::PendingDns::default(),
        sessions: ui::Sessions::default(),
        cutovers: cutover::Cutovers::default(),
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ServeError::Server)?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| ServeError::Listen {
                addr: listen,
                source,
            })?;
        // The same routes for the CLI of this host (`cli/forward.rs`); bound after the TCP
        // port, which a second daemon of the state dir cannot take, so a socket in the way is
        // a dead daemon's.
        let socket = app.settings().paths.api_socket();
        let local = bind_socket(&socket).map_err(ServeError::Server)?;
        tracing::info!("hapctl API listening on {listen} and {}", socket.display());
        eprintln!("hapctl API listening on http://{listen}");
        notify::announce_ready(&notifier, &app, listen);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let router = routes::router(app);
        let cli = tokio::spawn(std::future::IntoFuture::into_future(
            axum::serve(local, router.clone())
                .with_graceful_shutdown(until_stopped(stopped.clone())),
        ));
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                shutdown_signal().await;
                notifier.stopping();
                let _ = stop.send(true);
            })
            .await;
        let _ = cli.await;
        let _ = std::fs::remove_file(&socket);
        served.map_err(ServeError::Server)
    })
}

/// Listens on `path` (0600: the CLI of the daemon's user), replacing a stale socket.
fn bind_socket(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Returns the heap's free pages to the system (after the large transient work of an apply).
pub(crate) fn trim_heap() {
    // SAFETY: malloc_trim only releases free heap pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping the API; HAProxy keeps running");
}
