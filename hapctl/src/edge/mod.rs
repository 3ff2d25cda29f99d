//! The edge's services: what the CLI (and later the API) call. Each mutating service is one
//! change to the desired state, applied at once through the safe path.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::apply::{Applier, ApplyError, ApplyReport, Snapshot};
use crate::blocks::{BlockChange, BlockReport, Blocks};
use crate::clock::unix_now;
use crate::deliver::{DeliverError, Deliveries, DeliveryReport, DeliveryStep, GenerationStatus};
use crate::haproxy::{ConfigVerdict, Supervisor};
use crate::model::{
    AppName, Backend, Block, BlockKey, Domain, EdgeState, Note, ProxyNet, ProxyPreset, Ttl, Version,
};
use crate::render::{self, Templates};
use crate::settings::{Settings, SettingsError};
use crate::store::{ApplyEntry, ApplyRecord, DeliveryRecord, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Quic(#[from] crate::quic::QuicError),
    #[error(transparent)]
    Templates(#[from] render::TemplateError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Deliver(#[from] DeliverError),
    #[error(transparent)]
    Blocks(#[from] crate::blocks::BlockError),
    #[error(transparent)]
    Certs(#[from] crate::tls::CertError),
    #[error(transparent)]
    Supervisor(#[from] crate::haproxy::SupervisorError),
    #[error(transparent)]
    Reload(#[from] crate::haproxy::ReloadError),
    #[error(transparent)]
    Fleet(#[from] crate::fleet::FleetError),
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
    #[error(
        "{path} already holds hapctl state; pass --force to reset it (the database is deleted)"
    )]
    AlreadyInitialised { path: PathBuf },
    /// `hapctl haproxy adopt` refused or stopped; the message says why and what to do.
    #[error("{0}")]
    Adopt(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// Where HAProxy's state refused a request to start or reload it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaproxyConflict {
    /// A start while a master runs (never a second one).
    AlreadyRunning,
    /// A reload while no master runs, or one that died during it.
    NotRunning,
}

impl EdgeError {
    /// The conflict with HAProxy's state this error is, if it is one.
    pub fn haproxy_conflict(&self) -> Option<HaproxyConflict> {
        use crate::haproxy::{ReloadError, SupervisorError};
        match self {
            EdgeError::Supervisor(SupervisorError::AlreadyRunning { .. }) => {
                Some(HaproxyConflict::AlreadyRunning)
            }
            EdgeError::Reload(ReloadError::NotRunning { .. } | ReloadError::MasterDied { .. }) => {
                Some(HaproxyConflict::NotRunning)
            }
            _ => None,
        }
    }
}

mod access;
mod adopt;
mod batch;
mod blocks;
mod certs;
mod domain_change;
mod fleet;
mod fleet_apply;
mod fleet_canary;
mod fleet_certs;
mod fleet_deliver;
mod fleet_join;
mod fleet_order;
mod ids;
mod init;
mod limits;
mod policies;
mod profiles;
mod prove;
mod resolution;
mod scratch;
mod status;
mod supervise;
mod waf;

pub use adopt::Adoption;
pub use batch::StateChange;
pub use domain_change::{DomainChange, DomainResult};
pub use fleet_apply::FleetApplyOutcome;
pub use fleet_deliver::FleetDelivery;
pub use fleet_join::Published;
pub use init::{init, Layout};
pub use profiles::ProtectionsChange;
pub use resolution::after_put;
pub use scratch::ScratchCheck;
pub use status::{Counts, EdgeStatus};
pub use supervise::{Look, Reloaded, Restart, Supervision, SupervisorState, Watched};

/// What [`Edge::stop_haproxy`] did.
pub use crate::haproxy::StopReport;
pub use certs::{CertView, RenewOutcome};

/// What the settings become on the HAProxy in use: HTTP/3 served or not, and the WAF agent's
/// backend on SPOP's multiplexer where HAProxy has one. `haproxy -vv` runs once, and only
/// when one of them needs it.
fn resolve_build(settings: &mut Settings) -> Result<(), crate::quic::QuicError> {
    if settings.waf.is_none() && !crate::quic::wanted(settings) {
        return Ok(());
    }
    let features = crate::haproxy::Validator::from_settings(settings).features();
    if let Some(waf) = settings.waf.as_mut() {
        waf.spop_backend = features.as_ref().is_ok_and(|f| f.spop_mux);
    }
    settings.edge.quic = crate::quic::resolve(settings, features)?;
    Ok(())
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EdgeError {
    let context = context.into();
    move |source| EdgeError::Io { context, source }
}

/// What `apply --dry-run` found.
#[derive(Debug, serde::Serialize)]
pub struct DryRun {
    /// Unified diff from the live files to the rendered ones; empty when nothing would change.
    pub diff: String,
    pub changed_files: Vec<&'static str>,
    /// `valid`, `invalid` or `validator-unavailable`.
    pub verdict: &'static str,
    pub haproxy_messages: Vec<String>,
}

/// An opened state directory.
pub struct Edge {
    pub settings: Settings,
    templates: Templates,
    store: Store,
    /// Runtime-only changes are checked by the caller later ([`Edge::defer_checks`]).
    defer_checks: bool,
    /// What the last applies rendered, reused by the next one.
    renders: std::cell::RefCell<crate::apply::RenderMemo>,
    /// The block path's view on this connection: applies reconcile through it, the fleet's
    /// follower changes blocks through it.
    block_view: std::cell::RefCell<crate::blocks::BlockCache>,
    /// The connection to the fleet's etcd, made on first use (`[fleet]` only).
    fleet: Option<std::sync::Arc<crate::fleet::FleetLink>>,
    /// This connection applies what the fleet's follower read ([`Edge::follow_fleet`]).
    fleet_follower: bool,
}

impl Edge {
    pub fn open(state_dir: &Path) -> Result<Edge, EdgeError> {
        let mut settings = Settings::load(state_dir)?;
        resolve_build(&mut settings)?;
        let templates = Templates::load(settings.render.templates_dir.as_deref())?;
        Edge::with_store(settings, templates)
    }

    /// Another connection to this edge's databases, with its settings and its compiled
    /// templates (shared, not compiled again): each thread of the daemon owns one.
    pub fn connection(&self) -> Result<Edge, EdgeError> {
        let mut edge = Edge::with_store(self.settings.clone(), self.templates.clone())?;
        edge.fleet = self.fleet.clone();
        // On an edge of a fleet two connections write the desired state (the follower
        // applies, a writer computes its change on the state): each would parse the other's
        // commits. Alone, the one writer's own copy stays exact, and a shared one would only
        // cost memory.
        if self.settings.fleet.is_some() {
            edge.store.share_state_with(&self.store);
        }
        Ok(edge)
    }

    fn with_store(settings: Settings, templates: Templates) -> Result<Edge, EdgeError> {
        let paths = &settings.paths;
        std::fs::create_dir_all(&paths.run_dir).map_err(io_err(format!(
            "cannot create {} (paths.run_dir)",
            paths.run_dir.display()
        )))?;
        let store =
            Store::open(&paths.database, &paths.blocks_database).map_err(|e| EdgeError::Io {
                context: format!(
                    "cannot open the databases {} (paths.database) and {} (paths.blocks_database)",
                    paths.database.display(),
                    paths.blocks_database.display()
                ),
                source: std::io::Error::other(e.to_string()),
            })?;
        Ok(Edge {
            settings,
            templates,
            store,
            defer_checks: false,
            renders: Default::default(),
            block_view: Default::default(),
            fleet: None,
            fleet_follower: false,
        })
    }

    pub fn supervisor(&self) -> Supervisor {
        Supervisor::from_settings(&self.settings)
    }

    /// Re-renders the committed state and applies it (after a settings or template change).
    pub fn apply(&mut self, trigger: &str) -> Result<ApplyReport, EdgeError> {
        Ok(self.apply_locally(trigger, |_| Ok(()))?.0)
    }

    /// Moves every domain a runtime add put into a slot backend to a backend of its own and
    /// sizes the spare slots for the domains there are: one check and one reload, nothing
    /// when the placement is already that (see `model::Placement`).
    pub fn compact(&mut self) -> Result<ApplyReport, EdgeError> {
        let report = self.apply_locally("apply --compact", |tx| {
            let state = tx.load_state()?;
            tx.save_placement(&crate::model::Placement::sized_for(&state))?;
            Ok(())
        })?;
        Ok(report.0)
    }

    /// Adds or replaces a domain. The flag is true when the domain is new.
    pub fn put_domain(
        &mut self,
        domain: &Domain,
        backend: &Backend,
    ) -> Result<(ApplyReport, Option<bool>), EdgeError> {
        let change = DomainChange::Put(domain.clone(), backend.clone());
        self.single(change)
            .map(|(r, res)| (r, res.map(|x| x == DomainResult::Created)))
    }

    /// Routes a domain to a delivered application. The flag is true when the domain is new.
    pub fn put_app_domain(
        &mut self,
        domain: &Domain,
        app: &AppName,
    ) -> Result<(ApplyReport, Option<bool>), EdgeError> {
        self.deliveries().app(app)?;
        let change = DomainChange::PutApp(domain.clone(), app.clone());
        self.single(change)
            .map(|(r, res)| (r, res.map(|x| x == DomainResult::Created)))
    }

    pub fn remove_domain(&mut self, domain: &Domain) -> Result<ApplyReport, EdgeError> {
        match self.single(DomainChange::Remove(domain.clone()))? {
            (_, Some(DomainResult::NotFound)) => Err(ApplyError::NotFound(format!(
                "domain {domain} does not exist; `hapctl domain ls` lists them"
            ))
            .into()),
            (report, _) => Ok(report),
        }
    }

    fn single(
        &mut self,
        change: DomainChange,
    ) -> Result<(ApplyReport, Option<DomainResult>), EdgeError> {
        let mut out = self.apply_domain_changes(std::slice::from_ref(&change))?;
        let (report, result) = out.pop().expect("one result per change");
        Ok((report, result))
    }

    /// Applies several domain changes in one apply (the API coalesces concurrent requests this
    /// way). Each change gets the report of the apply that contained it, and its own result
    /// when that apply succeeded. If a batch of several fails, each change is retried alone, so
    /// one bad change cannot sink the others.
    pub fn apply_domain_changes(
        &mut self,
        changes: &[DomainChange],
    ) -> Result<Vec<(ApplyReport, Option<DomainResult>)>, EdgeError> {
        let trigger = match changes {
            [one] => one.describe(),
            many => format!(
                "{} domain changes: {}",
                many.len(),
                many.iter()
                    .map(DomainChange::describe)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let (report, results) = self.applier_run(&trigger, |tx| {
            changes
                .iter()
                .map(|c| c.apply(tx))
                .collect::<Result<Vec<_>, _>>()
        })?;
        match results {
            Some(results) => Ok(results
                .into_iter()
                .map(|r| (report.clone(), Some(r)))
                .collect()),
            None if changes.len() > 1 => {
                let mut out = Vec::with_capacity(changes.len());
                for change in changes {
                    out.extend(self.apply_domain_changes(std::slice::from_ref(change))?);
                }
                Ok(out)
            }
            None => Ok(vec![(report, None)]),
        }
    }

    /// Blocks keys (or refreshes their reason and expiry) and unblocks others, through the
    /// fast path: no `haproxy -c`, no reload unless the runtime change cannot be confirmed.
    pub fn change_blocks(&mut self, changes: &[BlockChange]) -> Result<BlockReport, EdgeError> {
        if self.publishes() && !changes.is_empty() {
            return self.publish_blocks(changes);
        }
        Ok(Blocks::new(&self.settings).change(&mut self.store, changes)?)
    }

    /// Rebuilds the blocked map file and the running worker's map from the database, whole
    /// and atomically (`prepare map` / `commit map`).
    pub fn sync_blocks(&mut self) -> Result<(), EdgeError> {
        Ok(Blocks::new(&self.settings).sync(|| self.store.block_keys(unix_now()))?)
    }

    pub fn block_count(&self) -> Result<usize, EdgeError> {
        Ok(self.store.block_count()?)
    }

    pub fn has_expired_blocks(&self, now: i64) -> Result<bool, EdgeError> {
        Ok(self.store.has_expired_blocks(now)?)
    }

    /// A block entry made now, expiring after `ttl`.
    pub fn new_block(key: BlockKey, reason: Note, author: Note, ttl: Option<Ttl>) -> Block {
        let now = unix_now();
        Block {
            key,
            reason,
            author,
            created_at: now,
            expires_at: ttl.map(|t| now + t.duration().as_secs() as i64),
        }
    }

    /// Trusts forwarding headers from `net`. The flag is true when it was not trusted yet.
    pub fn trust_proxy(
        &mut self,
        net: &ProxyNet,
    ) -> Result<(ApplyReport, Option<bool>), EdgeError> {
        self.applier_run(&format!("proxy add {net}"), |tx| {
            Ok(tx.add_trusted_proxy(net)?)
        })
    }

    /// Trusts a preset's ranges: the shipped list, or `nets` (a newer list the operator
    /// fetched). Ranges the preset no longer has are distrusted. Empty `nets` with `remove`
    /// distrusts the whole preset.
    pub fn trust_preset(
        &mut self,
        preset: ProxyPreset,
        nets: Option<Vec<ProxyNet>>,
    ) -> Result<(ApplyReport, Option<(usize, usize)>), EdgeError> {
        let nets = nets.unwrap_or_else(|| preset.shipped());
        self.applier_run(&format!("proxy add --preset {preset}"), |tx| {
            Ok(tx.set_preset_proxies(preset, &nets)?)
        })
    }

    pub fn distrust_preset(&mut self, preset: ProxyPreset) -> Result<ApplyReport, EdgeError> {
        let (report, _) = self.applier_run(&format!("proxy rm --preset {preset}"), |tx| {
            Ok(tx.set_preset_proxies(preset, &[])?)
        })?;
        Ok(report)
    }

    pub fn trusted_proxies(&self) -> Result<Vec<(ProxyNet, Option<String>)>, EdgeError> {
        Ok(self.store.trusted_proxies()?)
    }

    pub fn distrust_proxy(&mut self, net: &ProxyNet) -> Result<ApplyReport, EdgeError> {
        let (report, _) = self.applier_run(&format!("proxy rm {net}"), |tx| {
            if tx.remove_trusted_proxy(net)? {
                Ok(())
            } else {
                Err(ApplyError::NotFound(format!(
                    "{net} is not a trusted proxy; `hapctl proxy ls` lists them"
                )))
            }
        })?;
        Ok(report)
    }

    fn deliveries(&self) -> Deliveries<'_> {
        Deliveries {
            settings: &self.settings,
            templates: &self.templates,
        }
    }

    /// The app named, or the only one when none is named.
    pub fn resolve_app(&self, app: Option<AppName>) -> Result<AppName, EdgeError> {
        match app {
            Some(a) => Ok(self.deliveries().app(&a)?.name.clone()),
            None => Ok(self.deliveries().default_app()?),
        }
    }

    pub fn deliver(
        &mut self,
        app: &AppName,
        version: &Version,
        on_step: &mut dyn FnMut(&DeliveryStep),
    ) -> Result<DeliveryReport, EdgeError> {
        let d = Deliveries {
            settings: &self.settings,
            templates: &self.templates,
        };
        Ok(d.deliver(&mut self.store, app, version, on_step)?)
    }

    pub fn rollback(
        &mut self,
        app: &AppName,
        on_step: &mut dyn FnMut(&DeliveryStep),
    ) -> Result<DeliveryReport, EdgeError> {
        let d = Deliveries {
            settings: &self.settings,
            templates: &self.templates,
        };
        Ok(d.rollback(&mut self.store, app, on_step)?)
    }

    /// After a reboot: start each app's generation in service, then HAProxy if it is not
    /// running. Returns the problems found (empty when everything designated is up).
    pub fn boot(
        &mut self,
        on_step: &mut dyn FnMut(&DeliveryStep),
    ) -> Result<Vec<String>, EdgeError> {
        let d = Deliveries {
            settings: &self.settings,
            templates: &self.templates,
        };
        let mut problems = d.boot(&mut self.store, on_step)?;
        let supervisor = self.supervisor();
        if supervisor.status().procs.is_none() {
            let report = self.apply("boot")?;
            if !report.outcome.is_success() {
                problems.push(format!(
                    "the apply before starting HAProxy failed: {}: {}",
                    report.outcome.as_str(),
                    report.message
                ));
                return Ok(problems);
            }
            match self.start_haproxy() {
                Ok(s) => on_step(&DeliveryStep {
                    name: "haproxy".into(),
                    detail: format!("started, master PID {}", s.master_pid),
                    ms: 0.0,
                }),
                Err(e) => problems.push(format!("HAProxy did not start: {e}")),
            }
        } else {
            on_step(&DeliveryStep {
                name: "haproxy".into(),
                detail: "already running".into(),
                ms: 0.0,
            });
        }
        Ok(problems)
    }

    pub fn generations(&self) -> Result<Vec<GenerationStatus>, EdgeError> {
        Ok(self.deliveries().generations(&self.store)?)
    }

    pub fn delivery_history(&self, limit: usize) -> Result<Vec<DeliveryRecord>, EdgeError> {
        Ok(self.store.deliveries(limit)?)
    }

    /// One change of the desired state: applied here, or on an edge of a fleet published
    /// for every edge to apply (`fleet.rs`).
    fn applier_run<T>(
        &mut self,
        trigger: &str,
        change: impl FnOnce(&crate::store::Tx) -> Result<T, ApplyError>,
    ) -> Result<(ApplyReport, Option<T>), EdgeError> {
        if self.publishes() {
            return self.publish_run(trigger, change);
        }
        self.apply_locally(trigger, change)
    }

    /// The safe apply of `change` on this edge alone.
    fn apply_locally<T>(
        &mut self,
        trigger: &str,
        change: impl FnOnce(&crate::store::Tx) -> Result<T, ApplyError>,
    ) -> Result<(ApplyReport, Option<T>), EdgeError> {
        let applier = Applier::new(&self.settings, &self.templates)
            .with_memo(&self.renders)
            .with_block_view(&self.block_view);
        let result = applier.apply(&mut self.store, trigger, change)?;
        // A runtime-only change is checked right after it is in effect, unless the daemon
        // coalesces those checks in the background.
        if !self.defer_checks {
            applier.validate_pending(&|| false)?;
        }
        Ok(result)
    }

    /// Checks and promotes a set changed at runtime, if one waits (the daemon's background
    /// check; see `apply::PendingCheck`), giving way when `give_way` says a change waits.
    pub fn validate_pending(
        &self,
        give_way: &dyn Fn() -> bool,
    ) -> Result<crate::apply::PendingCheck, EdgeError> {
        Ok(Applier::new(&self.settings, &self.templates).validate_pending(give_way)?)
    }

    /// Leaves the checks of runtime-only changes to [`Edge::validate_pending`] (the daemon).
    pub fn defer_checks(&mut self) {
        self.defer_checks = true;
    }

    /// The committed desired state (expired blocks left out).
    pub fn state(&self) -> Result<EdgeState, EdgeError> {
        Ok(self.store.load_state()?)
    }

    /// [`Edge::state`] lent to `f` instead of copied (see [`Store::with_state`]).
    pub fn with_state<T>(&self, f: impl FnOnce(&EdgeState) -> T) -> Result<T, EdgeError> {
        Ok(self.store.with_state(f)?)
    }

    /// Whether the domain exists (servers or an app), without reading the state.
    pub fn has_domain(&self, domain: &Domain) -> Result<bool, EdgeError> {
        Ok(self.store.has_domain(domain)?)
    }

    /// Drops the copy of the state this connection keeps between reads.
    pub fn forget_state(&self) {
        self.store.forget_state();
    }

    pub fn blocks(&self) -> Result<Vec<Block>, EdgeError> {
        let now = unix_now();
        Ok(self
            .store
            .blocks()?
            .into_iter()
            .filter(|b| !b.is_expired(now))
            .collect())
    }

    pub fn history(&self, limit: usize) -> Result<Vec<ApplyRecord>, EdgeError> {
        Ok(self.store.applies(limit)?)
    }

    /// The history with the size of each apply's diff; one apply with its diff.
    pub fn apply_entries(&self, limit: usize) -> Result<Vec<ApplyEntry>, EdgeError> {
        Ok(self.store.apply_entries(limit)?)
    }

    pub fn apply_entry(&self, id: i64) -> Result<Option<ApplyEntry>, EdgeError> {
        Ok(self.store.apply_entry(id)?)
    }

    /// What an apply would change, and whether HAProxy would accept it. Writes nothing that
    /// HAProxy reads: the candidate set is validated from a scratch folder.
    pub fn dry_run(&self) -> Result<DryRun, EdgeError> {
        let state = self.state()?;
        let new = Snapshot::from_set(
            render::render(&state, &self.settings, &self.templates).map_err(ApplyError::from)?,
        );
        let live = Snapshot::read_live(&self.settings.paths)
            .map_err(io_err("cannot read the live files"))?;
        let changed = new.differing(&live);
        let labels = ("live", "rendered");
        let diff = crate::apply::diff_files(
            &live,
            &new,
            &changed,
            &self.settings.paths,
            labels,
            usize::MAX,
        );

        let (verdict, haproxy_messages) = match self.check_scratch(&state)?.verdict {
            ConfigVerdict::Valid => ("valid", vec![]),
            ConfigVerdict::Invalid { messages } => ("invalid", messages),
            ConfigVerdict::Unavailable { reason } => ("validator-unavailable", vec![reason]),
        };
        Ok(DryRun {
            diff,
            changed_files: changed.iter().map(|id| id.name()).collect(),
            verdict,
            haproxy_messages,
        })
    }

    /// Whether a set changed at runtime waits for its check, or failed it (a defect alarm).
    pub fn runtime_check(&self) -> crate::apply::RuntimeCheck {
        crate::apply::RuntimeCheck::read(&self.settings.paths)
    }

    /// Whether the live files equal the known-good snapshot.
    pub fn live_is_known_good(&self) -> Result<bool, EdgeError> {
        let live = Snapshot::read_live(&self.settings.paths)
            .map_err(io_err("cannot read the live files"))?;
        let known = crate::apply::KnownGood::new(&self.settings.paths)
            .load()
            .map_err(io_err("cannot read the known-good snapshot"))?;
        Ok(known.as_ref() == Some(&live))
    }
}

/// Default wait for HAProxy to stop.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);
