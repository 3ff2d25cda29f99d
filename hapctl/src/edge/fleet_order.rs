//! One certificate order for the fleet, as the holder of its lock runs it: the lock under a
//! lease (a holder that dies releases it), the fleet's one ACME account, the order recorded
//! with its key sealed before anything is published (so another edge can finish it), the
//! HTTP-01 tokens in etcd until every running edge answers them.

use std::time::Duration;

use super::fleet_certs::{checked_bundle, FleetCerts};
use super::EdgeError;
use crate::clock::unix_now;
use crate::fleet::certs::{self as fleet_certs, order_context, FleetCert, LastOrder, OrderRecord};
use crate::fleet::lock::{self, LockRecord};
use crate::fleet::seal::Sealed;
use crate::fleet::FleetError;
use crate::model::{CertName, CertSource, Domain};
use crate::settings::Settings;
use crate::tls::acme::{Acme, LocalBoard, Method, PendingOrder, TokenBoard};
use crate::tls::certs::new_record;
use crate::tls::challenge::Token;
use crate::tls::{renew, CertError, KeyType};

/// How long an order lock outlives an edge that stopped renewing it.
const LOCK_TTL: i64 = 10;
const LOCK_KEEP_EVERY: Duration = Duration::from_secs(3);
/// How long an order waits for every running edge to answer its HTTP-01 tokens.
const ACK_WAIT: Duration = Duration::from_secs(10);
const ACK_POLL: Duration = Duration::from_millis(100);

/// One order, as the lock holder runs it.
pub(super) struct OrderJob<'a> {
    pub fleet: &'a FleetCerts,
    pub name: &'a CertName,
    pub names: &'a [Domain],
    pub source: CertSource,
    pub key_type: KeyType,
    /// Only finish the order a dead edge left: never begin one.
    pub orphan: bool,
}

pub(super) fn method_of(source: CertSource) -> Method {
    if source == CertSource::AcmeDns01 {
        Method::Dns01Hook
    } else {
        Method::Http01
    }
}

/// What an order job ends with.
pub(super) enum Issued {
    /// Issued and stored in etcd (under the lock, so no other edge sees the order unfinished).
    Stored(FleetCert),
    /// The fleet already holds a certificate newer than this edge's (another edge renewed it).
    Already(FleetCert),
    /// The orphaned order was finished by another edge first.
    Nothing,
}

impl OrderJob<'_> {
    /// Under the lock: the fleet's newer certificate if another edge renewed it meanwhile,
    /// else the order (resumed when one is recorded) through to its certificate in etcd.
    pub(super) async fn run(
        &self,
        settings: &Settings,
        served: Option<String>,
    ) -> Result<Issued, EdgeError> {
        let etcd = self.fleet.etcd();
        let lease = etcd.lease(LOCK_TTL).await?;
        let keeper =
            self.fleet
                .link
                .handle()
                .spawn(lock::keep(etcd.clone(), lease, LOCK_KEEP_EVERY));
        let outcome = self.locked(settings, served, lease).await;
        keeper.abort();
        // The lock, the tokens and their acknowledgements go with the lease.
        if let Err(e) = etcd.revoke(lease).await {
            tracing::warn!(certificate = %self.name, "cannot release the order lock (it expires in {LOCK_TTL} s): {e}");
        }
        outcome
    }

    async fn locked(
        &self,
        settings: &Settings,
        served: Option<String>,
        lease: i64,
    ) -> Result<Issued, EdgeError> {
        let (etcd, layout) = (self.fleet.etcd(), self.fleet.layout());
        let me = LockRecord {
            edge: self.fleet.me.clone(),
            since: unix_now(),
        };
        if let Err(holder) = lock::take(etcd, &layout.acme_lock(self.name), &me, lease).await? {
            let holder = holder.unwrap_or(LockRecord {
                edge: "?".into(),
                since: 0,
            });
            return Err(FleetError::Busy {
                what: format!("the order of certificate {}", self.name),
                edge: holder.edge,
                since: holder.since,
                then: "every edge installs the certificate once it is issued; `hapctl cert ls` shows where it stands",
            }
            .into());
        }
        let order: Option<OrderRecord> =
            fleet_certs::read(etcd, &layout.acme_order(self.name)).await?;
        if order.is_none() {
            if self.orphan {
                return Ok(Issued::Nothing);
            }
            if let Some(cert) = self.newer_in_fleet(served).await? {
                return Ok(Issued::Already(cert));
            }
        }
        let acme = self.account(settings).await?;
        let (pending, key) = match order {
            Some(order) => self.resume(&acme, &order).await?,
            None => self.begin(&acme).await?,
        };
        let board = FleetBoard {
            fleet: self.fleet,
            settings,
            lease,
        };
        let chain_pem = acme.complete(pending, &key, &board).await?;
        let key_pem = key.serialize_pem();
        let bundle = checked_bundle(&chain_pem, key_pem.as_bytes(), self.names)?;
        let record = new_record(self.name.clone(), self.source, self.names.to_vec());
        let cert = self.fleet.sealed(
            &record,
            &bundle.chain_pem,
            &bundle.key_pem,
            &bundle.info.serial,
        );
        let last = self.succeeded(&cert.serial);
        fleet_certs::store_cert(etcd, layout, self.name, &cert, Some(&last)).await?;
        Ok(Issued::Stored(cert))
    }

    /// The fleet's one ACME account (sealed in etcd): an order belongs to the account that
    /// made it, and another edge may have to finish it.
    async fn account<'s>(&self, settings: &'s Settings) -> Result<Acme<'s>, EdgeError> {
        let id = crate::tls::acme::account_id(settings);
        let (etcd, key) = (self.fleet.etcd(), self.fleet.layout().acme_account(&id));
        let context = format!("acme-account/{id}");
        let stored: Option<Sealed> = fleet_certs::read(etcd, &key).await?;
        let sealed = match stored {
            Some(sealed) => sealed,
            None => {
                let (acme, credentials) = Acme::register(settings).await?;
                let sealed = self.fleet.key.seal(&context, &credentials);
                if fleet_certs::create(etcd, &key, &sealed).await? {
                    return Ok(acme);
                }
                // Another edge registered at the same moment: the fleet keeps its account.
                fleet_certs::read(etcd, &key)
                    .await?
                    .ok_or_else(|| FleetError::Etcd(format!("{key} vanished")))?
            }
        };
        let credentials = self
            .fleet
            .key
            .open(&context, &sealed)
            .map_err(FleetError::from)?;
        Ok(Acme::from_credentials(settings, &credentials).await?)
    }

    /// The fleet's certificate, when it is not the one this edge serves.
    async fn newer_in_fleet(&self, served: Option<String>) -> Result<Option<FleetCert>, EdgeError> {
        let layout = self.fleet.layout();
        let cert: Option<FleetCert> =
            fleet_certs::read(self.fleet.etcd(), &layout.cert(self.name)).await?;
        Ok(cert.filter(|c| {
            served
                .as_deref()
                .is_some_and(|s| !crate::tls::x509::serial_matches(s, &c.serial))
        }))
    }

    /// A new order, recorded (with its key, sealed) before anything is published.
    async fn begin(&self, acme: &Acme<'_>) -> Result<(PendingOrder, rcgen::KeyPair), EdgeError> {
        let pending = acme.begin(self.names, method_of(self.source)).await?;
        let key = self
            .key_type
            .generate()
            .map_err(|e| CertError::Acme(format!("cannot make the certificate key: {e}")))?;
        let key_pem = key.serialize_pem();
        let record = OrderRecord {
            url: pending.url().to_string(),
            names: self.names.to_vec(),
            source: self.source,
            key: self
                .fleet
                .key
                .seal(&order_context(self.name), key_pem.as_bytes()),
            by: self.fleet.me.clone(),
            at: unix_now(),
        };
        let key_path = self.fleet.layout().acme_order(self.name);
        fleet_certs::put(self.fleet.etcd(), &key_path, &record).await?;
        crate::fault::point("acme:after-order-record");
        Ok((pending, key))
    }

    /// The order another edge recorded, with its key.
    async fn resume(
        &self,
        acme: &Acme<'_>,
        order: &OrderRecord,
    ) -> Result<(PendingOrder, rcgen::KeyPair), EdgeError> {
        let pem = self
            .fleet
            .key
            .open(&order_context(self.name), &order.key)
            .map_err(FleetError::from)?;
        let key = std::str::from_utf8(&pem)
            .ok()
            .and_then(|pem| rcgen::KeyPair::from_pem(pem).ok())
            .ok_or_else(|| CertError::Acme("the recorded order's key does not parse".into()))?;
        let pending = acme
            .resume(&order.url, &order.names, method_of(order.source))
            .await?;
        Ok((pending, key))
    }

    fn succeeded(&self, serial: &str) -> LastOrder {
        LastOrder {
            by: self.fleet.me.clone(),
            at: unix_now(),
            serial: Some(serial.to_string()),
            error: None,
            failures: 0,
            retry_at: None,
        }
    }

    /// Records a failure for the fleet (every edge backs off) and drops the order, unless
    /// another edge holds it or etcd is away (then nothing can be recorded).
    pub(super) fn failed(&self, error: &EdgeError) {
        if matches!(
            error,
            EdgeError::Fleet(FleetError::Busy { .. } | FleetError::Unreachable(_))
        ) {
            return;
        }
        let (etcd, layout) = (self.fleet.etcd(), self.fleet.layout());
        let record = self.fleet.link.block_on(async {
            let key = layout.acme_last(self.name);
            let last: Option<LastOrder> = fleet_certs::read(etcd, &key).await.ok().flatten();
            let failures = last.map_or(0, |l| l.failures) + 1;
            let now = unix_now();
            let record = LastOrder {
                by: self.fleet.me.clone(),
                at: now,
                serial: None,
                error: Some(error.to_string()),
                failures,
                retry_at: Some(renew::retry_at(failures, now)),
            };
            fleet_certs::put(etcd, &key, &record).await?;
            etcd.delete(&layout.acme_order(self.name)).await
        });
        if let Err(e) = record {
            tracing::warn!(certificate = %self.name, "cannot record the failed order in etcd: {e}");
        }
    }
}

/// HTTP-01 tokens in etcd: every edge's daemon puts them in its map and says so; the order
/// waits for every running edge.
struct FleetBoard<'a> {
    fleet: &'a FleetCerts,
    settings: &'a Settings,
    lease: i64,
}

impl FleetBoard<'_> {
    async fn acknowledge_here(&self, tokens: &[Token]) -> Result<(), CertError> {
        LocalBoard(self.settings).publish(tokens).await?;
        let layout = self.fleet.layout();
        for token in tokens {
            let key = format!("{}{}", layout.acme_acks(token.token()), self.fleet.me);
            self.fleet
                .etcd()
                .put(&key, "", Some(self.lease))
                .await
                .map_err(|e| CertError::Acme(format!("cannot publish the HTTP-01 token: {e}")))?;
        }
        Ok(())
    }

    /// The running edges (status keys) that have not acknowledged every token.
    async fn missing(&self, tokens: &[Token]) -> Result<Vec<String>, FleetError> {
        let (etcd, layout) = (self.fleet.etcd(), self.fleet.layout());
        let edges = etcd.read_prefix(&layout.edges()).await?;
        let mut missing = Vec::new();
        for kv in edges.kvs {
            let edge = kv.key.trim_start_matches(&layout.edges()).to_string();
            for token in tokens {
                let ack = format!("{}{edge}", layout.acme_acks(token.token()));
                if etcd.get(&ack).await?.is_none() {
                    missing.push(edge);
                    break;
                }
            }
        }
        Ok(missing)
    }
}

impl TokenBoard for FleetBoard<'_> {
    async fn publish(&self, tokens: &[Token]) -> Result<(), CertError> {
        let etcd = self.fleet.etcd();
        for token in tokens {
            let key = format!("{}{}", self.fleet.layout().acme_tokens(), token.token());
            etcd.put(&key, token.key_authorization(), Some(self.lease))
                .await
                .map_err(|e| CertError::Acme(format!("cannot publish the HTTP-01 token: {e}")))?;
        }
        self.acknowledge_here(tokens).await?;
        let deadline = tokio::time::Instant::now() + ACK_WAIT;
        loop {
            let missing = self.missing(tokens).await.map_err(|e| {
                CertError::Acme(format!("cannot read the edges' acknowledgements: {e}"))
            })?;
            if missing.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(edges = ?missing, "these edges did not confirm the HTTP-01 tokens within {ACK_WAIT:?}; the CA may fail if it asks them");
                return Ok(());
            }
            tokio::time::sleep(ACK_POLL).await;
        }
    }

    async fn withdraw(&self, tokens: &[Token]) {
        LocalBoard(self.settings).withdraw(tokens).await;
        for token in tokens {
            let key = format!("{}{}", self.fleet.layout().acme_tokens(), token.token());
            if let Err(e) = self.fleet.etcd().delete(&key).await {
                tracing::warn!("cannot withdraw the HTTP-01 token from etcd (it goes with the order's lease): {e}");
            }
        }
    }
}
