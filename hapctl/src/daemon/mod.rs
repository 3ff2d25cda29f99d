//! `hapctl serve`: the daemon. It brings HAProxy to the committed state, starts the workers
//! (`workers.rs`: coalesced applies, the block fast path), the supervision loop, the renewal
//! worker and systemd's notifications, then serves the router it is given (`crate::http`) on
//! TCP and on the CLI's unix socket until SIGTERM or SIGINT.
//!
//! What the front ends call is [`Services`] (`services.rs`): the shared read connection, the
//! workers' queues, fresh connections for long work, and the metrics.

mod access_log;
mod alerts;
mod events;
mod fleet;
mod fleet_certs;
mod fleet_deliveries;
mod metrics;
mod notify;
mod renewals;
mod services;
mod supervision;
mod tls;
mod traffic;
mod waf;
mod workers;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::access::Access;
use crate::edge::{Edge, EdgeError};
use crate::settings::{LogTarget, Mode, Settings};
use crate::traffic::Traffic;

pub use events::EdgeEvent;
pub use metrics::Metrics;
use notify::Notifier;
use services::Parts;
pub use services::Services;
use supervision::SupervisionLoop;
pub use traffic::NOT_COLLECTED;
pub use waf::WafRunError;
pub use workers::JobError;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Edge(#[from] EdgeError),
    #[error("refusing to run without authentication on {0}: --no-auth is only allowed on a loopback address")]
    NoAuthNotLoopback(SocketAddr),
    #[error(transparent)]
    PlainHttp(#[from] crate::settings::PlainHttpRefused),
    #[error(transparent)]
    Tls(#[from] tls::TlsSettingsError),
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
    #[error(transparent)]
    Fleet(#[from] crate::fleet::FleetError),
}

/// Options of `hapctl serve`.
pub struct ServeOptions {
    pub listen: Option<SocketAddr>,
    pub no_auth: bool,
}

/// How the API knows who calls it: the tokens and audit trail, and whether a token is
/// required at all (`false`: `--no-auth`, on a loopback address only).
#[derive(Clone)]
pub struct ApiAuth {
    pub access: Arc<Access>,
    pub required: bool,
}

/// How often the audit records past their retention are deleted.
const AUDIT_PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs the daemon until SIGTERM or SIGINT, serving what `router` builds over its services.
/// HAProxy is started if it is not running, and left running when the daemon stops.
pub fn serve(
    state_dir: &Path,
    options: ServeOptions,
    router: impl FnOnce(Services, ApiAuth) -> axum::Router,
) -> Result<(), ServeError> {
    tune_allocator();
    // Read (and removed from the environment) before any thread exists.
    let notifier = Arc::new(Notifier::from_env());
    notifier.status("starting: bringing HAProxy to the committed state");
    let mut edge = Edge::open(state_dir)?;
    let listen = options.listen.unwrap_or(edge.settings.api.listen);
    let auth = api_auth(&edge, listen, options.no_auth)?;
    let tls = edge
        .settings
        .api
        .tls
        .as_ref()
        .map(tls::server_config)
        .transpose()?;
    let traffic = traffic_book(&edge.settings);
    let _companions = Companions::start(state_dir, &edge.settings, traffic.clone())?;
    bring_up_haproxy(&mut edge)?;
    // The follower's applies make the apply worker's background check give way.
    let fleet_applying = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _fleet = join_fleet(&mut edge, fleet_applying.clone())?;
    let (services, _supervision) = start_workers(state_dir, edge, fleet_applying, traffic)?;
    let socket = services.settings().paths.api_socket();
    let router = router(services.clone(), auth);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ServeError::Server)?;
    runtime.block_on(listen_and_serve(
        Listeners {
            tcp: listen,
            socket,
            tls,
        },
        router,
        services,
        notifier,
    ))
}

/// glibc gives each thread that ever allocated a lot its own arena and keeps it: with a dozen
/// threads, one large request each would multiply the daemon's memory. Blocks of 128 KiB and
/// more (rendered files, answer bodies, key lists: megabytes at 10,000 domains) get their own
/// mapping, returned to the system when freed. glibc's default raises that bound to the
/// largest block freed so far, after which such blocks come from the heap and their pages stay
/// with the process until a trim.
fn tune_allocator() {
    // SAFETY: mallopt only tunes the allocator; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// The access database, its `default` token taken from `[api] token_file` (unless `--no-auth`,
/// allowed on a loopback address only), and its old audit records deleted now and hourly.
/// Plain HTTP off loopback is refused here, before anything starts.
fn api_auth(edge: &Edge, listen: SocketAddr, no_auth: bool) -> Result<ApiAuth, ServeError> {
    if no_auth && !listen.ip().is_loopback() {
        return Err(ServeError::NoAuthNotLoopback(listen));
    }
    edge.settings.api.check_listen(listen)?;
    let access = Arc::new(edge.access(!no_auth)?);
    let retention = edge.settings.api.audit_retention;
    let pruning = access.clone();
    std::thread::spawn(move || loop {
        if let Err(e) = pruning.prune(crate::clock::unix_millis(), retention) {
            tracing::warn!("cannot delete the old audit records: {e}");
        }
        std::thread::sleep(AUDIT_PRUNE_EVERY);
    });
    Ok(ApiAuth {
        access,
        required: !no_auth,
    })
}

/// The traffic counts (`[traffic] collect`), fed by the access log's receiver: `None` when
/// off or when the log goes elsewhere (syslog, journald), as nothing reaches this daemon.
fn traffic_book(settings: &Settings) -> Option<Arc<Traffic>> {
    let on = settings.traffic.collect && settings.logs.target == LogTarget::File;
    on.then(|| {
        Arc::new(Traffic::new(
            crate::clock::unix_now().max(0) as u64,
            settings.traffic.max_domains.get(),
        ))
    })
}

/// What runs beside HAProxy for as long as the daemon does (stopped on drop).
struct Companions {
    _access_log: Option<crate::logs::Receiver>,
    _waf_agent: Option<crate::waf::supervise::AgentSupervision>,
}

impl Companions {
    /// The access log is read before HAProxy may start, so its first lines are kept; hapctl's
    /// WAF agent (direct mode) is up before HAProxy may send it requests (docs/waf.md).
    fn start(
        state_dir: &Path,
        settings: &Settings,
        traffic: Option<Arc<Traffic>>,
    ) -> Result<Companions, ServeError> {
        let tap = traffic.and_then(traffic::tap);
        let access_log = match settings.logs.target {
            LogTarget::File => Some(crate::logs::Receiver::start(
                &settings.logs,
                settings.haproxy.privileges.worker_user(),
                tap,
            )?),
            _ => None,
        };
        let waf_agent = match (&settings.waf, settings.haproxy.mode) {
            (Some(_), Mode::Direct) => Some(
                crate::waf::supervise::start(
                    state_dir,
                    settings.paths.haproxy_log.with_file_name("waf-agent.log"),
                )
                .map_err(ServeError::Server)?,
            ),
            _ => None,
        };
        Ok(Companions {
            _access_log: access_log,
            _waf_agent: waf_agent,
        })
    }
}

/// Brings the edge to the committed state (this also finishes an interrupted apply), starts
/// HAProxy if needed (unless it was stopped on purpose), and rebuilds what lives only in the
/// worker: runtime entries of a daemon that was killed may be missing. From then on the
/// supervision loop keeps it running.
fn bring_up_haproxy(edge: &mut Edge) -> Result<(), ServeError> {
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
    Ok(())
}

/// On an edge of a fleet (`[fleet]`): the connection to etcd every connection of the daemon
/// shares, the follower and the status key. The edge already serves its last applied state;
/// etcd being down is not an error here.
fn join_fleet(
    edge: &mut Edge,
    applying: Arc<std::sync::atomic::AtomicBool>,
) -> Result<Option<Arc<crate::fleet::FleetLink>>, ServeError> {
    let Some(settings) = &edge.settings.fleet else {
        return Ok(None);
    };
    let link = crate::fleet::FleetLink::connect(settings)?;
    edge.join_fleet(link.clone());
    fleet::start(
        link.clone(),
        edge.connection()?,
        edge.connection()?,
        applying,
    );
    fleet_certs::start(link.clone(), edge.connection()?);
    fleet_deliveries::start(link.clone(), edge.connection()?);
    Ok(Some(link))
}

/// Starts supervision, renewals and the two workers. `edge` is the connection the startup
/// apply ran on: the apply worker keeps it, since what an apply leaves for the next one (the
/// committed state, the rendered backend sections: 11 MiB at 10,000 domains) serves its next
/// apply. The handlers read through a connection of their own, which never applies.
fn start_workers(
    state_dir: &Path,
    edge: Edge,
    fleet_applying: Arc<std::sync::atomic::AtomicBool>,
    traffic: Option<Arc<Traffic>>,
) -> Result<(Services, SupervisionLoop), ServeError> {
    let metrics = Arc::new(Metrics::default());
    let supervision = supervision::start(edge.connection()?, metrics.clone());
    let orders = Arc::new(renewals::OrderGate::default());
    renewals::start(edge.connection()?, metrics.clone(), orders.clone());
    let reads = Arc::new(Mutex::new(edge.connection()?));
    let (domains, blocks) = workers::start(metrics.clone(), reads.clone(), edge, fleet_applying)?;
    let services = Services::new(Parts {
        state_dir: state_dir.to_path_buf(),
        reads,
        domains,
        blocks,
        metrics: metrics.clone(),
        orders,
        traffic,
    });
    alerts::start(services.clone(), metrics);
    events::start(services.clone());
    Ok((services, supervision))
}

/// Where the router is served: the TCP address (over TLS with a configuration), and the
/// CLI's unix socket.
struct Listeners {
    tcp: SocketAddr,
    socket: PathBuf,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// Serves `router` on both listeners until a signal; the unix socket stops with the TCP one.
async fn listen_and_serve(
    at: Listeners,
    router: axum::Router,
    services: Services,
    notifier: Arc<Notifier>,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(at.tcp)
        .await
        .map_err(|source| ServeError::Listen {
            addr: at.tcp,
            source,
        })?;
    // The same routes for the CLI of this host (`cli/forward.rs`); bound after the TCP port,
    // which a second daemon of the state dir cannot take, so a socket in the way is a dead
    // daemon's.
    let local = bind_socket(&at.socket).map_err(ServeError::Server)?;
    tracing::info!(
        "hapctl API listening on {} and {}",
        at.tcp,
        at.socket.display()
    );
    let scheme = if at.tls.is_some() { "https" } else { "http" };
    eprintln!("hapctl API listening on {scheme}://{}", at.tcp);
    notify::announce_ready(&notifier, &services, at.tcp);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let cli = tokio::spawn(std::future::IntoFuture::into_future(
        axum::serve(local, router.clone()).with_graceful_shutdown(async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|s| *s).await;
        }),
    ));
    let stopping = async move {
        shutdown_signal().await;
        notifier.stopping();
        let _ = stop.send(true);
    };
    // The peer's address is what the audit trail and the slowing down of wrong tokens read.
    let app = router.into_make_service_with_connect_info::<SocketAddr>();
    let served = match at.tls {
        Some(config) => {
            use axum::serve::ListenerExt;
            // `tap_io` only so the peer's address reaches the handlers as for plain TCP.
            let tls = tls::TlsListener::new(listener, config)
                .map_err(ServeError::Server)?
                .tap_io(|_| {});
            axum::serve(tls, app).with_graceful_shutdown(stopping).await
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(stopping)
                .await
        }
    };
    let _ = cli.await;
    let _ = std::fs::remove_file(&at.socket);
    served.map_err(ServeError::Server)
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
fn trim_heap() {
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
