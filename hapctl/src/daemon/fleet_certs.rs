//! `hapctl serve` on an edge of a fleet: the fleet's certificates and HTTP-01 tokens, followed
//! from etcd. A certificate put in the fleet is installed here through the runtime API (checked
//! by serial and handshake, as every install is); one removed is removed; a token is put in
//! this edge's map and acknowledged, so an order on another edge knows the CA may ask here.
//!
//! At start and whenever a watch breaks: one read of every certificate and token, then watches
//! from the revision after it. With etcd down it tries again every quarter second.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::EventType;

use crate::clock::unix_now;
use crate::edge::Edge;
use crate::fleet::certs::{self, FleetCert, InstalledRecord};
use crate::fleet::{FleetError, FleetLink, Layout};
use crate::model::CertName;
use crate::tls::challenge::{Challenges, Token};

const RETRY: Duration = Duration::from_millis(250);
/// How often a certificate this edge could not install is tried again (its cause, such as
/// a fleet key not yet copied here, is fixed outside hapctl).
const INSTALL_RETRY: Duration = Duration::from_secs(5);

/// Starts the loop on `link`'s runtime; `edge` is a connection of its own.
pub fn start(link: Arc<FleetLink>, edge: Edge) {
    let edge = Arc::new(Mutex::new(edge));
    let handle = link.handle().clone();
    handle.spawn(async move {
        let mut follower = CertFollower {
            link,
            edge,
            tokens: BTreeMap::new(),
            not_installed: BTreeMap::new(),
        };
        // An outage is logged once, not at every try.
        let mut failing = None;
        loop {
            if let Err(e) = follower.run(&mut failing).await {
                let e = e.to_string();
                if failing.as_ref() != Some(&e) {
                    tracing::warn!("the fleet's certificates: {e}; reading them again");
                }
                failing = Some(e);
                tokio::time::sleep(RETRY).await;
            }
        }
    });
}

struct CertFollower {
    link: Arc<FleetLink>,
    edge: Arc<Mutex<Edge>>,
    /// The tokens this edge answers, by their key in etcd (a deletion carries no value).
    tokens: BTreeMap<String, Token>,
    /// The fleet's certificates this edge could not install, by key: tried again.
    not_installed: BTreeMap<String, Vec<u8>>,
}

impl CertFollower {
    fn layout(&self) -> &Layout {
        self.link.layout()
    }

    /// One read of everything, then the watches until one breaks.
    /// `failing` (the last error) is cleared once etcd answered.
    async fn run(&mut self, failing: &mut Option<String>) -> Result<(), FleetError> {
        let etcd = self.link.etcd().clone();
        let certs = etcd.read_prefix(&self.layout().certs()).await?;
        let installed = etcd
            .read_prefix(&format!("{}installed/", self.layout().root()))
            .await?;
        let tokens = etcd.read_prefix(&self.layout().acme_tokens()).await?;
        *failing = None;
        let mut in_fleet = std::collections::BTreeSet::new();
        for kv in &certs.kvs {
            in_fleet.insert(kv.key.clone());
            self.cert_put(&kv.key, &kv.value).await;
        }
        // What this edge installed from the fleet and the fleet no longer has.
        let installed_root = format!("{}installed/", self.layout().root());
        let me = self.link.settings().name.as_str();
        for kv in &installed.kvs {
            let rest = kv.key.trim_start_matches(&installed_root);
            let Some((name, edge)) = rest.rsplit_once('/') else {
                continue;
            };
            let cert_key = format!("{}{name}", self.layout().certs());
            if edge == me && !in_fleet.contains(&cert_key) {
                self.cert_deleted(&cert_key).await;
            }
        }
        let live: std::collections::BTreeSet<&String> =
            tokens.kvs.iter().map(|kv| &kv.key).collect();
        let gone: Vec<String> = self
            .tokens
            .keys()
            .filter(|k| !live.contains(k))
            .cloned()
            .collect();
        for key in gone {
            self.token_deleted(&key).await;
        }
        for kv in &tokens.kvs {
            self.token_put(&kv.key, &kv.value, kv.lease).await;
        }
        // Each watch from the revision after its own read: nothing between is missed (what is
        // seen twice is installed or answered once).
        let mut cert_watch = etcd
            .watch(&self.layout().certs(), certs.revision + 1)
            .await?;
        let tokens_from = tokens.revision + 1;
        let mut token_watch = etcd
            .watch(&self.layout().acme_tokens(), tokens_from)
            .await?;
        let mut retry = tokio::time::interval(INSTALL_RETRY);
        loop {
            tokio::select! {
                answer = cert_watch.message() => self.on_events(answer, false).await?,
                answer = token_watch.message() => self.on_events(answer, true).await?,
                _ = retry.tick() => self.retry_installs().await,
            }
        }
    }

    async fn retry_installs(&mut self) {
        for (key, value) in std::mem::take(&mut self.not_installed) {
            self.cert_put(&key, &value).await;
        }
    }

    /// A watch answer of the certificates (`tokens` false) or the tokens.
    async fn on_events(
        &mut self,
        answer: Result<Option<etcd_client::WatchResponse>, etcd_client::Error>,
        tokens: bool,
    ) -> Result<(), FleetError> {
        for event in events(answer)? {
            let Some(kv) = event.kv() else { continue };
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            match (event.event_type(), tokens) {
                (EventType::Put, false) => self.cert_put(&key, kv.value()).await,
                (EventType::Delete, false) => self.cert_deleted(&key).await,
                (EventType::Put, true) => self.token_put(&key, kv.value(), kv.lease()).await,
                (EventType::Delete, true) => self.token_deleted(&key).await,
            }
        }
        Ok(())
    }

    fn name_of(&self, key: &str) -> Option<CertName> {
        let name = key.strip_prefix(&self.layout().certs())?;
        name.parse()
            .map_err(|e| tracing::error!("fleet key {key} refused: {e}"))
            .ok()
    }

    async fn cert_put(&mut self, key: &str, value: &[u8]) {
        let retried = self.not_installed.remove(key).is_some();
        let Some(name) = self.name_of(key) else {
            return;
        };
        let cert: FleetCert = match certs::parse(key, value) {
            Ok(cert) => cert,
            Err(why) => return tracing::error!("{why}; this edge keeps what it serves"),
        };
        let edge = self.edge.clone();
        let (n, c) = (name.clone(), cert.clone());
        let installed =
            tokio::task::spawn_blocking(move || lock(&edge).install_fleet_certificate(&n, &c))
                .await;
        match installed {
            Ok(Ok(report)) => {
                if let Some(report) = report {
                    tracing::info!(certificate = %name, serial = %cert.serial, installed = ?report.installed, reloads = report.reloads, "installed the fleet's certificate");
                }
                self.note(&name, Some(&cert.serial)).await;
            }
            Ok(Err(e)) => {
                self.not_installed.insert(key.to_string(), value.to_vec());
                if retried {
                    tracing::debug!(certificate = %name, "still not installed: {e}")
                } else {
                    tracing::error!(certificate = %name, "the fleet's certificate cannot be installed here (tried again every {INSTALL_RETRY:?}): {e}")
                }
            }
            Err(e) => {
                tracing::error!(certificate = %name, "installing the fleet's certificate failed: {e}")
            }
        }
    }

    async fn cert_deleted(&self, key: &str) {
        let Some(name) = self.name_of(key) else {
            return;
        };
        let edge = self.edge.clone();
        let n = name.clone();
        let removed =
            tokio::task::spawn_blocking(move || lock(&edge).remove_fleet_certificate(&n)).await;
        match removed {
            Ok(Ok(Some(_))) => tracing::info!(certificate = %name, "removed: the fleet removed it"),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                tracing::error!(certificate = %name, "cannot remove the certificate the fleet removed: {e}")
            }
            Err(e) => tracing::error!(certificate = %name, "removing the certificate failed: {e}"),
        }
        self.note(&name, None).await;
    }

    /// Says in etcd which serial this edge serves, or that it serves none.
    async fn note(&self, name: &CertName, serial: Option<&str>) {
        let key = self
            .layout()
            .installed(name, self.link.settings().name.as_str());
        let written = match serial {
            Some(serial) => {
                let record = InstalledRecord {
                    serial: serial.to_string(),
                    at: unix_now(),
                };
                certs::put(self.link.etcd(), &key, &record)
                    .await
                    .map(|_| ())
            }
            None => self.link.etcd().delete(&key).await,
        };
        if let Err(e) = written {
            tracing::warn!(certificate = %name, "cannot record the installation in etcd: {e}");
        }
    }

    /// Answers the token here, then says so under the order's lease.
    async fn token_put(&mut self, key: &str, value: &[u8], lease: i64) {
        let token_text = key.trim_start_matches(&self.layout().acme_tokens());
        let token = match Token::new(token_text, &String::from_utf8_lossy(value)) {
            Ok(token) => token,
            Err(e) => return tracing::error!("fleet key {key} refused: {e}"),
        };
        let settings = lock(&self.edge).settings.clone();
        let t = token.clone();
        let published =
            tokio::task::spawn_blocking(move || Challenges::new(&settings).publish(&t)).await;
        match published {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return tracing::error!("cannot answer the fleet's HTTP-01 token: {e}"),
            Err(e) => return tracing::error!("cannot answer the fleet's HTTP-01 token: {e}"),
        }
        self.tokens.insert(key.to_string(), token);
        let ack = format!(
            "{}{}",
            self.layout().acme_acks(token_text),
            self.link.settings().name
        );
        let lease = (lease != 0).then_some(lease);
        if let Err(e) = self.link.etcd().put(&ack, "", lease).await {
            tracing::warn!("cannot acknowledge the fleet's HTTP-01 token: {e}");
        }
    }

    async fn token_deleted(&mut self, key: &str) {
        let Some(token) = self.tokens.remove(key) else {
            return;
        };
        let settings = lock(&self.edge).settings.clone();
        let withdrawn =
            tokio::task::spawn_blocking(move || Challenges::new(&settings).withdraw(&token)).await;
        if let Ok(Err(e)) = withdrawn {
            tracing::warn!("cannot withdraw the fleet's HTTP-01 token: {e}");
        }
    }
}

/// The events of a watch answer; an error when the watch broke, was cancelled or compacted.
fn events(
    answer: Result<Option<etcd_client::WatchResponse>, etcd_client::Error>,
) -> Result<Vec<etcd_client::Event>, FleetError> {
    match answer {
        Ok(Some(r)) if !r.canceled() && r.compact_revision() == 0 => Ok(r.events().to_vec()),
        Ok(Some(_)) => Err(FleetError::Etcd(
            "the watch was cancelled or compacted".into(),
        )),
        Ok(None) => Err(FleetError::Etcd("the watch ended".into())),
        Err(e) => Err(FleetError::Etcd(format!("the watch failed: {e}"))),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
