//! Certificates on an edge of a fleet (docs/fleet.md): a certificate is ordered once for the
//! fleet, by one edge at a time under an etcd lock, its HTTP-01 tokens answered by every edge;
//! issued or uploaded, it is stored in etcd with its key sealed by the fleet key, and every
//! edge installs it through its runtime API (the daemon's loop, `daemon/fleet_certs.rs`).

use std::sync::Arc;

use super::fleet_order::{Issued, OrderJob};
use super::{Edge, EdgeError};
use crate::clock::unix_now;
use crate::fleet::certs::{
    self as fleet_certs, cert_context, FleetCert, FleetCertStatus, InstalledRecord, LastOrder,
    OrderRecord,
};
use crate::fleet::etcd::Etcd;
use crate::fleet::seal::FleetKey;
use crate::fleet::{FleetError, FleetLink, Layout};
use crate::model::{CertName, CertSource, Domain};
use crate::tls::certs::new_record;
use crate::tls::{bundle, Bundle, BundleCheck, CertError, Certs, InstallReport};

/// What a certificate change on an edge of a fleet needs: etcd, and the fleet key.
pub(super) struct FleetCerts {
    pub link: Arc<FleetLink>,
    pub key: FleetKey,
    /// This edge's name in the fleet.
    pub me: String,
}

impl Edge {
    /// On an edge of a fleet, the link and the fleet key; `None` on a lone edge.
    pub(super) fn fleet_certs(&self) -> Result<Option<FleetCerts>, EdgeError> {
        let Some(settings) = &self.settings.fleet else {
            return Ok(None);
        };
        let key = FleetKey::load(&settings.key_file).map_err(FleetError::from)?;
        Ok(Some(FleetCerts {
            link: self.link()?,
            key,
            me: settings.name.to_string(),
        }))
    }

    /// [`Edge::fleet_certs`] for a change of `name`: none for the default certificate, which
    /// answers unknown names on each edge and stays its own (no fleet key needed).
    pub(super) fn fleet_certs_for(&self, name: &CertName) -> Result<Option<FleetCerts>, EdgeError> {
        if name.is_default() {
            return Ok(None);
        }
        self.fleet_certs()
    }

    /// Puts a checked bundle in the fleet (every edge installs it), then installs it here.
    pub(super) fn publish_certificate(
        &mut self,
        fleet: &FleetCerts,
        record: crate::store::CertRecord,
        bundle: &Bundle,
        last: Option<&LastOrder>,
    ) -> Result<InstallReport, EdgeError> {
        let name = record.name.clone();
        let cert = fleet.sealed(
            &record,
            &bundle.chain_pem,
            &bundle.key_pem,
            &bundle.info.serial,
        );
        let (etcd, layout) = (fleet.link.etcd(), fleet.link.layout());
        fleet
            .link
            .block_on(fleet_certs::store_cert(etcd, layout, &name, &cert, last))?;
        let report = Certs::new(&self.settings).install(&mut self.store, record, bundle)?;
        fleet.note_installed(&name, &cert.serial);
        Ok(report)
    }

    /// Installs the fleet's `cert` here unless this edge already serves that serial.
    pub fn install_fleet_certificate(
        &mut self,
        name: &CertName,
        cert: &FleetCert,
    ) -> Result<Option<InstallReport>, EdgeError> {
        if let Some(local) = self.store.certificate(name)? {
            if crate::tls::x509::serial_matches(&local.serial, &cert.serial) {
                return Ok(None);
            }
        }
        let Some(fleet) = self.fleet_certs()? else {
            return Err(FleetError::NoFleet.into());
        };
        self.install_sealed(&fleet, name, cert).map(Some)
    }

    /// Opens the fleet's `cert` with the fleet key, checks it as an upload, installs it here
    /// and says so in etcd.
    fn install_sealed(
        &mut self,
        fleet: &FleetCerts,
        name: &CertName,
        cert: &FleetCert,
    ) -> Result<InstallReport, EdgeError> {
        let key = fleet
            .key
            .open(&cert_context(name), &cert.key)
            .map_err(FleetError::from)?;
        let bundle = checked_bundle(&cert.chain_pem, &key, &cert.names)?;
        let record = new_record(name.clone(), cert.source, cert.names.clone());
        let report = Certs::new(&self.settings).install(&mut self.store, record, &bundle)?;
        fleet.note_installed(name, &cert.serial);
        Ok(report)
    }

    /// Puts this edge's certificates (all but its default) in the fleet, when it publishes its
    /// state as the fleet's and has the fleet key; how many.
    pub(super) fn publish_local_certificates(&self) -> Result<usize, EdgeError> {
        let fleet = match self.fleet_certs() {
            Ok(Some(fleet)) => fleet,
            Ok(None) | Err(EdgeError::Fleet(FleetError::Seal(_))) => return Ok(0),
            Err(e) => return Err(e),
        };
        let records = self.store.certificates()?;
        let mut published = 0;
        for record in records.iter().filter(|r| !r.name.is_default()) {
            let key_pem = Certs::new(&self.settings).key_pem(&record.name)?;
            let cert = fleet.sealed(record, &record.chain_pem, &key_pem, &record.serial);
            let (etcd, layout) = (fleet.etcd(), fleet.layout());
            fleet.link.block_on(fleet_certs::store_cert(
                etcd,
                layout,
                &record.name,
                &cert,
                None,
            ))?;
            fleet.note_installed(&record.name, &record.serial);
            published += 1;
        }
        Ok(published)
    }

    /// Stops serving a certificate the fleet removed (absent here: nothing to do).
    pub fn remove_fleet_certificate(
        &mut self,
        name: &CertName,
    ) -> Result<Option<InstallReport>, EdgeError> {
        if self.store.certificate(name)?.is_none() {
            return Ok(None);
        }
        Ok(Some(
            Certs::new(&self.settings).remove(&mut self.store, name)?,
        ))
    }

    /// Removes a certificate from the fleet, then here.
    pub(super) fn remove_from_fleet(
        &mut self,
        fleet: &FleetCerts,
        name: &CertName,
    ) -> Result<InstallReport, EdgeError> {
        let started = std::time::Instant::now();
        let (etcd, key) = (fleet.etcd(), fleet.layout().cert(name));
        let in_fleet = fleet.link.block_on(etcd.get(&key))?.is_some();
        if in_fleet {
            fleet.link.block_on(etcd.delete(&key))?;
        }
        let report = match Certs::new(&self.settings).remove(&mut self.store, name) {
            Ok(report) => report,
            // This edge's daemon followed the fleet's deletion first: removed all the same.
            Err(CertError::NotFound(_)) if in_fleet => InstallReport {
                name: name.clone(),
                serial: None,
                not_after: None,
                installed: crate::tls::Installed::Runtime,
                runtime_error: None,
                handshake_sni: None,
                checks: 0,
                reloads: 0,
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            },
            Err(e) => return Err(e.into()),
        };
        fleet.forget_installed(name);
        Ok(report)
    }

    /// Orders `names` for the fleet under `name`'s lock (or finishes the order another edge
    /// began); the certificate is in etcd for every edge, and installed here.
    pub(super) fn order_for_fleet(
        &mut self,
        fleet: &FleetCerts,
        name: &CertName,
        names: &[Domain],
        source: CertSource,
    ) -> Result<InstallReport, EdgeError> {
        match self.run_order(fleet, name, names, source, false)? {
            Issued::Stored(cert) | Issued::Already(cert) => self.install_sealed(fleet, name, &cert),
            Issued::Nothing => {
                Err(FleetError::Etcd(format!("the order of {name} vanished")).into())
            }
        }
    }

    fn run_order(
        &mut self,
        fleet: &FleetCerts,
        name: &CertName,
        names: &[Domain],
        source: CertSource,
        orphan: bool,
    ) -> Result<Issued, EdgeError> {
        let job = OrderJob {
            fleet,
            name,
            names,
            source,
            key_type: self.key_type()?,
            orphan,
        };
        let settings = self.settings.clone();
        let issued = fleet
            .link
            .block_on(job.run(&settings, self.served_serial(name)?));
        if let Err(e) = &issued {
            job.failed(e);
        }
        issued
    }

    fn served_serial(&self, name: &CertName) -> Result<Option<String>, EdgeError> {
        Ok(self.store.certificate(name)?.map(|r| r.serial))
    }

    /// Finishes the orders whose edge died mid-way (an order record, no lock holder).
    pub fn finish_orphaned_orders(&mut self) -> Result<Vec<CertName>, EdgeError> {
        let fleet = match self.fleet_certs() {
            Ok(Some(fleet)) => fleet,
            // Without the fleet key this edge cannot open an order's key: another one will.
            Ok(None) | Err(EdgeError::Fleet(FleetError::Seal(_))) => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let orphans = fleet.link.block_on(fleet.orphans())?;
        let mut finished = Vec::new();
        for (name, order) in orphans {
            tracing::info!(certificate = %name, began_on = %order.by, "finishing an order whose edge stopped");
            let finished_here = self
                .run_order(&fleet, &name, &order.names, order.source, true)
                .and_then(|issued| match issued {
                    Issued::Stored(cert) => self.install_sealed(&fleet, &name, &cert).map(Some),
                    Issued::Already(_) | Issued::Nothing => Ok(None),
                });
            match finished_here {
                Ok(Some(_)) => finished.push(name),
                Ok(None) | Err(EdgeError::Fleet(FleetError::Busy { .. })) => {}
                Err(e) => tracing::warn!(certificate = %name, "cannot finish the order: {e}"),
            }
        }
        Ok(finished)
    }

    /// On an edge of a fleet, the certificates no edge renews before a time (their last order
    /// failed): name → unix seconds. Empty on a lone edge.
    pub(super) fn fleet_backoffs(
        &self,
    ) -> Result<std::collections::BTreeMap<String, i64>, EdgeError> {
        if self.settings.fleet.is_none() {
            return Ok(Default::default());
        }
        let link = self.link()?;
        Ok(link.block_on(fleet_certs::backoffs(link.etcd(), link.layout()))?)
    }

    /// What the fleet says of each certificate (`cert ls` on an edge of a fleet).
    pub fn fleet_certificate_statuses(
        &self,
    ) -> Result<Option<std::collections::BTreeMap<String, FleetCertStatus>>, EdgeError> {
        if self.settings.fleet.is_none() {
            return Ok(None);
        }
        let link = self.link()?;
        Ok(Some(link.block_on(fleet_certs::statuses(
            link.etcd(),
            link.layout(),
        ))?))
    }
}

/// A chain and its key, checked as an upload is, covering `names`.
pub(super) fn checked_bundle(
    chain_pem: &str,
    key_pem: &[u8],
    names: &[Domain],
) -> Result<Bundle, EdgeError> {
    let mut pem = chain_pem.as_bytes().to_vec();
    pem.extend_from_slice(key_pem);
    let must_cover: Vec<String> = names.iter().map(Domain::to_string).collect();
    let check = BundleCheck {
        now: unix_now(),
        must_cover: &must_cover,
    };
    Ok(bundle::parse_bundle(&pem, &check).map_err(CertError::from)?)
}

impl FleetCerts {
    pub(super) fn etcd(&self) -> &Etcd {
        self.link.etcd()
    }

    pub(super) fn layout(&self) -> &Layout {
        self.link.layout()
    }

    /// The fleet's record of a certificate, its key sealed.
    pub(super) fn sealed(
        &self,
        record: &crate::store::CertRecord,
        chain_pem: &str,
        key_pem: &str,
        serial: &str,
    ) -> FleetCert {
        FleetCert {
            names: record.names.clone(),
            source: record.source,
            chain_pem: chain_pem.to_string(),
            key: self
                .key
                .seal(&cert_context(&record.name), key_pem.as_bytes()),
            serial: serial.to_string(),
            by: self.me.clone(),
            at: unix_now(),
        }
    }

    /// Says in etcd which serial this edge serves (best effort: `cert ls` shows it).
    fn note_installed(&self, name: &CertName, serial: &str) {
        let record = InstalledRecord {
            serial: serial.to_string(),
            at: unix_now(),
        };
        let key = self.layout().installed(name, &self.me);
        if let Err(e) = self
            .link
            .block_on(fleet_certs::put(self.etcd(), &key, &record))
        {
            tracing::warn!(certificate = %name, "cannot record the installation in etcd: {e}");
        }
    }

    fn forget_installed(&self, name: &CertName) {
        let key = self.layout().installed(name, &self.me);
        if let Err(e) = self.link.block_on(self.etcd().delete(&key)) {
            tracing::warn!(certificate = %name, "cannot record the removal in etcd: {e}");
        }
    }

    /// Order records with no lock holder.
    async fn orphans(&self) -> Result<Vec<(CertName, OrderRecord)>, FleetError> {
        let listed = self
            .etcd()
            .read_prefix(&self.layout().acme_orders())
            .await?;
        let mut out = Vec::new();
        for kv in listed.kvs {
            let rest = kv.key.trim_start_matches(&self.layout().acme_orders());
            let (Ok(name), Ok(order)) = (
                rest.parse::<CertName>(),
                fleet_certs::parse::<OrderRecord>(&kv.key, &kv.value),
            ) else {
                tracing::warn!("fleet key {} does not parse: ignored", kv.key);
                continue;
            };
            if self
                .etcd()
                .get(&self.layout().acme_lock(&name))
                .await?
                .is_none()
            {
                out.push((name, order));
            }
        }
        Ok(out)
    }
}
