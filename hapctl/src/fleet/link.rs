//! The fleet as the edge's services see it: a connection to etcd with its own small runtime,
//! called from the worker threads (which are not async).

use std::sync::Arc;

use super::etcd::Etcd;
use super::object::Change;
use super::{publish, FleetError, Layout};
use crate::settings::FleetSettings;

pub struct FleetLink {
    runtime: tokio::runtime::Runtime,
    etcd: Etcd,
    layout: Layout,
    settings: FleetSettings,
}

impl FleetLink {
    /// A runtime of one thread and the connections to etcd (made lazily: an etcd that is down
    /// now is not an error yet).
    pub fn connect(settings: &FleetSettings) -> Result<Arc<FleetLink>, FleetError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fleet")
            .enable_all()
            .build()
            .map_err(|e| FleetError::Setup(format!("cannot start the fleet's runtime: {e}")))?;
        let etcd = runtime.block_on(Etcd::connect(settings))?;
        Ok(Arc::new(FleetLink {
            runtime,
            etcd,
            layout: Layout::new(&settings.prefix),
            settings: settings.clone(),
        }))
    }

    /// Publishes `changes`, computed from the state at revision `basis`: the revision made.
    pub fn publish(&self, basis: i64, changes: &[Change], now: i64) -> Result<i64, FleetError> {
        self.block_on(publish::publish(
            &self.etcd,
            &self.layout,
            basis,
            changes,
            now,
            publish::Guard::Published,
        ))
    }

    /// Whether `changes` computed at `basis` would be taken now (nothing written).
    pub fn precheck(&self, basis: i64, changes: &[Change], now: i64) -> Result<(), FleetError> {
        self.block_on(publish::precheck(
            &self.etcd,
            &self.layout,
            basis,
            changes,
            now,
        ))
    }

    /// Runs `f` on the fleet's runtime from a thread that is not async.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn settings(&self) -> &FleetSettings {
        &self.settings
    }
}
