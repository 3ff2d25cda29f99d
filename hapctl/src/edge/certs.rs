//! The certificate services: import, ACME request, renewal, removal, listing, and each
//! domain's HTTPS policy.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::{Edge, EdgeError};
use crate::clock::unix_now;
use crate::fleet::FleetError;
use crate::model::{CertName, CertSource, Domain};
use crate::store::CertRecord;
use crate::tls::acme::{Acme, LocalBoard, Method, PendingOrder};
use crate::tls::certs::new_record;
use crate::tls::{bundle, renew, BundleCheck, CertError, Certs, InstallReport, KeyType};
use crate::tls::{crtlist, x509};

/// A certificate as `cert ls` shows it: the row plus the names it answers for now.
#[derive(Debug, Clone, Serialize)]
pub struct CertView {
    #[serde(flatten)]
    pub record: CertRecord,
    /// The host names whose handshakes get this certificate (after the exact-beats-wildcard
    /// and one-owner-per-name rules); empty for the default, which answers everything else.
    pub serves: Vec<String>,
}

impl CertView {
    /// Whether the names it was requested for cover `host` (exactly, or by a wildcard).
    pub fn names_cover(&self, host: &str) -> bool {
        let names: Vec<String> = self.record.names.iter().map(Domain::to_string).collect();
        x509::covers(&names, host)
    }

    /// Whether the names it serves cover `host` (exactly, or by a wildcard).
    pub fn serving_covers(&self, host: &str) -> bool {
        x509::covers(&self.serves, host)
    }
}

/// What one renewal attempt did.
#[derive(Debug, Clone, Serialize)]
pub struct RenewOutcome {
    pub name: CertName,
    /// The install, when it renewed.
    pub report: Option<InstallReport>,
    /// Why it failed (the old certificate keeps serving).
    pub error: Option<String>,
}

/// Runs an ACME future from sync code: on the daemon's runtime when there is one (the
/// services run on its blocking threads), else on a small runtime of its own.
fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, EdgeError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => Ok(handle.block_on(f)),
        Err(_) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| EdgeError::Io {
                    context: "cannot start the ACME client's runtime".into(),
                    source,
                })?;
            Ok(rt.block_on(f))
        }
    }
}

impl Edge {
    fn certs(&self) -> Certs<'_> {
        Certs::new(&self.settings)
    }

    pub fn certificates(&self) -> Result<Vec<CertView>, EdgeError> {
        let records = self.store.certificates()?;
        // By name: a scan per record is a million comparisons at 1,000 certificates.
        let mut served: BTreeMap<CertName, Vec<String>> =
            crtlist::assign(&crtlist::candidates(&records))
                .into_iter()
                .map(|s| (s.cert, s.filters))
                .collect();
        Ok(records
            .into_iter()
            .map(|record| CertView {
                serves: served.remove(&record.name).unwrap_or_default(),
                record,
            })
            .collect())
    }

    /// Whether a certificate of that name is installed (one row read, not the list).
    pub fn has_certificate(&self, name: &CertName) -> Result<bool, EdgeError> {
        Ok(self.store.certificate(name)?.is_some())
    }

    pub fn certificate(&self, name: &CertName) -> Result<CertView, EdgeError> {
        self.certificates()?
            .into_iter()
            .find(|c| &c.record.name == name)
            .ok_or_else(|| not_found(name))
    }

    /// Installs an uploaded PEM bundle (leaf, chain, key) as `name`. It must cover `names`, or
    /// `name` itself when it is a host name and no names are given.
    pub fn import_certificate(
        &mut self,
        name: &CertName,
        pem: &[u8],
        names: &[Domain],
    ) -> Result<InstallReport, EdgeError> {
        let must_cover: Vec<String> = if !names.is_empty() {
            names.iter().map(Domain::to_string).collect()
        } else if name.is_default() {
            vec![]
        } else {
            host_of(name)
                .map(|d| vec![d.to_string()])
                .unwrap_or_default()
        };
        let bundle = bundle::parse_bundle(
            pem,
            &BundleCheck {
                now: unix_now(),
                must_cover: &must_cover,
            },
        )
        .map_err(CertError::from)?;
        // It answers for every host name it carries, not only those asked for.
        let sans: Vec<Domain> = bundle
            .info
            .names
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        let record = new_record(
            name.clone(),
            CertSource::Upload,
            if name.is_default() { vec![] } else { sans },
        );
        let fleet = self.fleet_certs_for(name)?;
        match fleet {
            Some(fleet) => self.publish_certificate(&fleet, record, &bundle, None),
            None => Ok(Certs::new(&self.settings).install(&mut self.store, record, &bundle)?),
        }
    }

    /// Orders a certificate for `names` (default: the host `name` stands for) from the ACME CA
    /// and installs it.
    pub fn request_certificate(
        &mut self,
        name: &CertName,
        names: &[Domain],
        dns01: bool,
    ) -> Result<InstallReport, EdgeError> {
        let names = requested_names(name, names)?;
        let method = if dns01 {
            Method::Dns01Hook
        } else {
            Method::Http01
        };
        let source = if dns01 {
            CertSource::AcmeDns01
        } else {
            CertSource::AcmeHttp01
        };
        self.order_and_install(name, &names, method, source)
    }

    pub(super) fn key_type(&self) -> Result<KeyType, EdgeError> {
        Ok(self
            .settings
            .acme
            .key_type
            .parse::<KeyType>()
            .map_err(|e| CertError::Acme(e.to_string()))?)
    }

    fn order_and_install(
        &mut self,
        name: &CertName,
        names: &[Domain],
        method: Method,
        source: CertSource,
    ) -> Result<InstallReport, EdgeError> {
        if let Some(fleet) = self.fleet_certs()? {
            return self.order_for_fleet(&fleet, name, names, source);
        }
        let key = self.new_certificate_key()?;
        let settings = self.settings.clone();
        let (chain_pem, acme) = block_on(async {
            let acme = Acme::connect(&settings).await?;
            let pending = acme.begin(names, method).await?;
            let chain_pem = acme.complete(pending, &key, &LocalBoard(&settings)).await?;
            Ok::<_, CertError>((chain_pem, acme))
        })??;
        let report = self.install_issued(name, names, source, &chain_pem, &key)?;
        self.follow_ari(&acme, name)?;
        Ok(report)
    }

    fn new_certificate_key(&self) -> Result<rcgen::KeyPair, EdgeError> {
        Ok(self
            .key_type()?
            .generate()
            .map_err(|e| CertError::Acme(format!("cannot make the certificate key: {e}")))?)
    }

    /// When the CA suggests a renewal window (RFC 9773 ARI), renew at a random point in it
    /// instead of at the two-thirds mark.
    fn follow_ari(&mut self, acme: &Acme<'_>, name: &CertName) -> Result<(), EdgeError> {
        let Some(mut record) = self.store.certificate(name)? else {
            return Ok(());
        };
        let Ok((info, _)) = crate::tls::installed_info(&record.chain_pem) else {
            return Ok(());
        };
        let Some(aki) = info.aki.as_deref() else {
            return Ok(());
        };
        if let Some((start, end)) = block_on(acme.suggested_window(aki, &info.serial_der))? {
            record.next_renewal = Some(renew::within(start, end));
            self.store.put_certificate(&record)?;
        }
        Ok(())
    }

    fn install_issued(
        &mut self,
        name: &CertName,
        names: &[Domain],
        source: CertSource,
        chain_pem: &str,
        key: &rcgen::KeyPair,
    ) -> Result<InstallReport, EdgeError> {
        let must_cover: Vec<String> = names.iter().map(Domain::to_string).collect();
        let bundle = bundle::from_issued(
            chain_pem,
            key,
            &BundleCheck {
                now: unix_now(),
                must_cover: &must_cover,
            },
        )
        .map_err(CertError::from)?;
        let record = new_record(name.clone(), source, names.to_vec());
        match self.fleet_certs()? {
            Some(fleet) => self.publish_certificate(&fleet, record, &bundle, None),
            None => Ok(Certs::new(&self.settings).install(&mut self.store, record, &bundle)?),
        }
    }

    /// The first half of the two-call DNS-01 flow: the order and the TXT records the caller
    /// must publish before `finish_dns_order`.
    pub fn begin_dns_order(&self, names: &[Domain]) -> Result<PendingOrder, EdgeError> {
        let settings = self.settings.clone();
        Ok(block_on(async {
            let acme = Acme::connect(&settings).await?;
            acme.begin(names, Method::Dns01Manual).await
        })??)
    }

    /// The second half: the CA checks the records, the certificate is installed.
    pub fn finish_dns_order(
        &mut self,
        name: &CertName,
        pending: PendingOrder,
    ) -> Result<InstallReport, EdgeError> {
        let key = self.new_certificate_key()?;
        let names = pending.names().to_vec();
        let settings = self.settings.clone();
        let chain_pem = block_on(async {
            let acme = Acme::connect(&settings).await?;
            acme.complete(pending, &key, &LocalBoard(&settings)).await
        })??;
        self.install_issued(name, &names, CertSource::AcmeDns01, &chain_pem, &key)
    }

    /// Renews `name` now (ACME certificates only). A failure is recorded on the row and the
    /// current certificate keeps serving.
    pub fn renew_certificate(&mut self, name: &CertName) -> Result<RenewOutcome, EdgeError> {
        let record = self
            .store
            .certificate(name)?
            .ok_or_else(|| not_found(name))?;
        let method = match record.source {
            CertSource::AcmeHttp01 => Method::Http01,
            CertSource::AcmeDns01 => Method::Dns01Hook,
            other => {
                return Err(CertError::Refused(format!(
                    "certificate {name} is {other}, not from ACME: import its replacement instead"
                ))
                .into())
            }
        };
        match self.order_and_install(name, &record.names, method, record.source) {
            Ok(report) => Ok(RenewOutcome {
                name: name.clone(),
                report: Some(report),
                error: None,
            }),
            // Another edge of the fleet renews it now; this one installs the result.
            Err(EdgeError::Fleet(FleetError::Busy { .. })) => Ok(RenewOutcome {
                name: name.clone(),
                report: None,
                error: None,
            }),
            Err(e) => {
                let now = unix_now();
                let message = e.to_string();
                let retry = renew::retry_at(record.failures + 1, now);
                self.store.certificate_failed(name, &message, retry, now)?;
                tracing::warn!(certificate = %name, error = %message, "renewal failed; the current certificate keeps serving");
                Ok(RenewOutcome {
                    name: name.clone(),
                    report: None,
                    error: Some(message),
                })
            }
        }
    }

    /// Renews `name` if it is due (or `force`); `None` when it was not due.
    pub fn renew_if_due(
        &mut self,
        name: &CertName,
        force: bool,
    ) -> Result<Option<RenewOutcome>, EdgeError> {
        let record = self
            .store
            .certificate(name)?
            .ok_or_else(|| not_found(name))?;
        let due = renew::due(std::slice::from_ref(&record), unix_now()).len() == 1;
        if force || due || !record.source.is_acme() {
            return self.renew_certificate(name).map(Some);
        }
        tracing::info!(certificate = %name, next_renewal = ?record.next_renewal, "not due; --force renews now");
        Ok(None)
    }

    /// Renews every ACME certificate that is due (all of them with `force`), one order at a
    /// time.
    pub fn renew_due(&mut self, force: bool) -> Result<Vec<RenewOutcome>, EdgeError> {
        let records = self.store.certificates()?;
        let now = unix_now();
        let names: Vec<CertName> = if force {
            records
                .iter()
                .filter(|r| r.source.is_acme())
                .map(|r| r.name.clone())
                .collect()
        } else {
            // On an edge of a fleet, a certificate whose last order failed on any edge waits
            // for the fleet's retry time.
            let backoffs = self.fleet_backoffs()?;
            renew::due(&records, now)
                .into_iter()
                .filter(|r| backoffs.get(r.name.as_str()).is_none_or(|&at| at <= now))
                .map(|r| r.name.clone())
                .collect()
        };
        names.iter().map(|n| self.renew_certificate(n)).collect()
    }

    pub fn remove_certificate(&mut self, name: &CertName) -> Result<InstallReport, EdgeError> {
        let fleet = self.fleet_certs_for(name)?;
        match fleet {
            Some(fleet) => self.remove_from_fleet(&fleet, name),
            None => Ok(Certs::new(&self.settings).remove(&mut self.store, name)?),
        }
    }

    /// Finishes an interrupted certificate change and aligns the worker with the files.
    pub fn reconcile_certificates(&mut self) -> Result<Vec<String>, EdgeError> {
        Ok(Certs::new(&self.settings).reconcile(&mut self.store)?)
    }

    /// The PEM file (chain and key) HAProxy loads for `name`.
    pub fn certificate_path(&self, name: &CertName) -> PathBuf {
        crtlist::pem_path(&self.settings.paths.certs_dir, name)
    }

    /// The private key of `name` (for the download routes made for it).
    pub fn certificate_key(&self, name: &CertName) -> Result<String, EdgeError> {
        self.store
            .certificate(name)?
            .ok_or_else(|| not_found(name))?;
        Ok(self.certs().key_pem(name)?)
    }
}

fn not_found(name: &CertName) -> EdgeError {
    CertError::NotFound(format!(
        "certificate {name} does not exist; `hapctl cert ls` lists them"
    ))
    .into()
}

/// The host a certificate name stands for: `shop.example.com`, or `*.example.com` for
/// `wildcard.example.com`.
fn host_of(name: &CertName) -> Option<Domain> {
    match name.as_str().strip_prefix("wildcard.") {
        Some(base) => format!("*.{base}").parse().ok(),
        None => name.as_str().parse().ok(),
    }
}

fn requested_names(name: &CertName, names: &[Domain]) -> Result<Vec<Domain>, EdgeError> {
    if !names.is_empty() {
        return Ok(names.to_vec());
    }
    host_of(name).map(|d| vec![d]).ok_or_else(|| {
        CertError::Refused(format!(
            "certificate {name} is not named after a host: give the names with --name"
        ))
        .into()
    })
}
