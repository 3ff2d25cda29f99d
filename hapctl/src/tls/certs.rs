//! The certificate path: a checked bundle becomes served without a reload.
//!
//! Order, so that a crash at any step leaves the old or the new certificate served for each
//! name, never none and never a key that does not match: the PEM (chain and key in one file,
//! so they are replaced together) is written atomically → the crt-list is written atomically
//! → the running worker takes the certificate (`set`/`commit ssl cert`, `add ssl crt-list`)
//! → `show ssl cert` must show the new serial → a real handshake with SNI must see it → the
//! database row is written. A reload at any moment loads the files, which are always whole.
//! If the runtime path fails, the live set is checked and reloaded once, and the report says
//! so. `reconcile` finishes what a killed change left: the files win over the row for a
//! certificate the database knows, and a file the database does not know is removed.

mod fallback;
mod reconcile;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::bundle::{Bundle, BundleError};
use super::crtlist::{self, CrtListEntry};
use super::installed::DamagedFile;
use super::probe;
use super::x509::{self, CertInfo};
use crate::clock::unix_now;
use crate::fault;
use crate::fsutil::{self, LockError, LockFile};
use crate::haproxy::{CliSocket, Master, RuntimeCerts, RuntimeError};
use crate::model::{CertName, CertSource};
use crate::render::{FileId, HEADER};
use crate::settings::Settings;
use crate::store::{CertRecord, Store, StoreError};

const LOCK_TIMEOUT: Duration = Duration::from_secs(120);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Ten years: the default certificate only answers names the edge does not serve.
const DEFAULT_CERT_DAYS: i64 = 3650;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Refused(String),
    #[error("certificate {name} is written to {path}, but HAProxy does not serve it: {message}; check HAProxy (`hapctl status`)")]
    NotServed {
        name: String,
        path: String,
        message: String,
    },
    #[error("{0}")]
    Acme(String),
}

impl From<DamagedFile> for CertError {
    fn from(e: DamagedFile) -> CertError {
        CertError::Refused(e.to_string())
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> CertError {
    let context = context.into();
    move |source| CertError::Io { context, source }
}

/// How the running HAProxy came to serve a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Installed {
    /// Runtime API, read back and seen in a handshake: no reload.
    Runtime,
    /// The runtime path failed; the live set was checked and reloaded once.
    Reload,
    /// HAProxy is not running (or has no HTTPS bind): the files are written, read at start.
    NotRunning,
}

/// The account of one install or removal.
#[derive(Debug, Clone, Serialize)]
pub struct InstallReport {
    pub name: CertName,
    pub serial: Option<String>,
    pub not_after: Option<i64>,
    pub installed: Installed,
    /// Why the runtime path was not enough, when `installed` is `reload`.
    pub runtime_error: Option<String>,
    /// The SNI of the handshake that saw the new certificate (none when no name is served).
    pub handshake_sni: Option<String>,
    pub checks: u32,
    pub reloads: u32,
    pub duration_ms: f64,
}

/// The certificates of one edge.
pub struct Certs<'a> {
    settings: &'a Settings,
}

impl<'a> Certs<'a> {
    pub fn new(settings: &'a Settings) -> Certs<'a> {
        Certs { settings }
    }

    pub fn pem_path(&self, name: &CertName) -> PathBuf {
        crtlist::pem_path(&self.settings.paths.certs_dir, name)
    }

    fn crt_list(&self) -> PathBuf {
        FileId::CrtList.path(&self.settings.paths)
    }

    fn lock(&self) -> Result<LockFile, CertError> {
        Ok(LockFile::acquire(
            &self.settings.paths.run_dir.join("certs.lock"),
            LOCK_TIMEOUT,
        )?)
    }

    /// Present while a change may have left files, worker and database apart.
    fn marker(&self) -> PathBuf {
        self.settings.paths.run_dir.join("certs.pending")
    }

    fn set_marker(&self) -> Result<(), CertError> {
        let path = self.marker();
        fsutil::write_atomic(&path, b"pending\n", 0o600)
            .map_err(io_err(format!("cannot write {}", path.display())))
    }

    fn clear_marker(&self) -> Result<(), CertError> {
        let path = self.marker();
        fsutil::remove_durable(&path).map_err(io_err(format!("cannot remove {}", path.display())))
    }

    /// Finishes a change a crash interrupted, if the marker says there was one.
    fn recover_locked(&self, store: &mut Store) -> Result<(), CertError> {
        if self.marker().exists() {
            for fixed in self.reconcile_locked(store)? {
                tracing::warn!("certificate recovery: {fixed}");
            }
            self.clear_marker()?;
        }
        Ok(())
    }

    fn runtime(&self) -> RuntimeCerts {
        RuntimeCerts::new(CliSocket::new(
            self.settings.paths.admin_socket.clone(),
            Duration::from_secs(5),
        ))
    }

    fn running(&self) -> bool {
        self.settings.edge.https_bind.is_some()
            && Master::from_settings(self.settings).show_proc().is_ok()
    }

    /// The files the HTTPS bind needs before any `haproxy -c`: the default certificate (made
    /// if missing) and a crt-list matching the database. Returns true if it wrote anything.
    pub fn ensure_files(&self, store: &mut Store) -> Result<bool, CertError> {
        let _lock = self.lock()?;
        self.recover_locked(store)?;
        let mut wrote = self.ensure_default_and_map_locked(store)?;
        let served = self.served(&store.certificates()?)?;
        wrote |= self.write_crt_list(&served)?;
        Ok(wrote)
    }

    /// The default certificate (made if missing) and the ACME token map; true if it wrote.
    fn ensure_default_and_map_locked(&self, store: &mut Store) -> Result<bool, CertError> {
        let mut wrote = false;
        let name = CertName::default_cert();
        let default = self.pem_path(&name);
        let row = store.certificate(&name)?;
        let text = fsutil::read_optional(&default)
            .map_err(io_err(format!("cannot read {}", default.display())))?;
        match (text, row) {
            (Some(_), Some(_)) => {}
            (Some(text), None) => {
                let (info, chain) = super::installed::read(&String::from_utf8_lossy(&text))?;
                let mut record = new_record(name, CertSource::SelfSigned, vec![]);
                fill_from(&mut record, &info, &chain);
                store.put_certificate(&record)?;
            }
            (None, _) => {
                let pem = make_self_signed()?;
                let (info, chain) = super::installed::read(&pem)?;
                fsutil::write_secret(&default, pem.as_bytes())
                    .map_err(io_err(format!("cannot write {}", default.display())))?;
                let mut record = new_record(name, CertSource::SelfSigned, vec![]);
                fill_from(&mut record, &info, &chain);
                store.put_certificate(&record)?;
                wrote = true;
            }
        }
        let acme_map = FileId::AcmeMap.path(&self.settings.paths);
        if !acme_map.exists() {
            fsutil::write_atomic(
                &acme_map,
                format!("# {HEADER}\n").as_bytes(),
                fsutil::DEFAULT_MODE,
            )
            .map_err(io_err(format!("cannot write {}", acme_map.display())))?;
            wrote = true;
        }
        Ok(wrote)
    }

    /// The names each certificate serves, over the certificates whose file is there. One
    /// listing of the folder, not a `stat` per certificate (1,000 of them per install).
    fn served(&self, records: &[CertRecord]) -> Result<Vec<CrtListEntry>, CertError> {
        let dir = &self.settings.paths.certs_dir;
        let files: HashSet<std::ffi::OsString> = std::fs::read_dir(dir)
            .map_err(io_err(format!("cannot list {}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        let present = records.iter().filter(|r| {
            self.pem_path(&r.name)
                .file_name()
                .is_some_and(|f| files.contains(f))
        });
        Ok(crtlist::assign(&crtlist::candidates(present)))
    }

    /// Writes the crt-list if it differs; true when it did.
    fn write_crt_list(&self, served: &[CrtListEntry]) -> Result<bool, CertError> {
        let path = self.crt_list();
        let bytes = crtlist::render(&self.settings.paths.certs_dir, served);
        let current = fsutil::read_optional(&path)
            .map_err(io_err(format!("cannot read {}", path.display())))?;
        if current.as_deref() == Some(&bytes[..]) {
            return Ok(false);
        }
        fsutil::write_secret(&path, &bytes)
            .map_err(io_err(format!("cannot write {}", path.display())))?;
        Ok(true)
    }

    /// Installs (or replaces) `record`'s certificate from a checked bundle and makes the
    /// running worker serve it without a reload. The row is written last.
    pub fn install(
        &self,
        store: &mut Store,
        mut record: CertRecord,
        bundle: &Bundle,
    ) -> Result<InstallReport, CertError> {
        let started = Instant::now();
        let lock = self.lock()?;
        self.recover_locked(store)?;
        // Not the whole ensure_files: the crt-list written below replaces the database's.
        self.ensure_default_and_map_locked(store)?;
        self.set_marker()?;
        let path = self.pem_path(&record.name);
        fsutil::write_secret(&path, bundle.haproxy_pem.as_bytes())
            .map_err(io_err(format!("cannot write {}", path.display())))?;
        fault::point("cert:after-pem");
        fill_from(&mut record, &bundle.info, &bundle.chain_pem);

        let mut records: Vec<CertRecord> = store
            .certificates()?
            .into_iter()
            .filter(|r| r.name != record.name)
            .collect();
        records.push(record.clone());
        let served = self.served(&records)?;
        self.write_crt_list(&served)?;
        fault::point("cert:after-crt-list");

        let mut report = InstallReport {
            name: record.name.clone(),
            serial: Some(record.serial.clone()),
            not_after: Some(record.not_after),
            installed: Installed::NotRunning,
            runtime_error: None,
            handshake_sni: None,
            checks: 0,
            reloads: 0,
            duration_ms: 0.0,
        };
        if self.running() {
            let pushed = self
                .push(&record.name, &bundle.haproxy_pem, &served)
                .and_then(|()| self.confirm(&record, &served));
            fault::point("cert:after-runtime");
            match pushed {
                Ok(sni) => {
                    report.installed = Installed::Runtime;
                    report.handshake_sni = sni;
                }
                Err(e) => {
                    report.runtime_error = Some(e.clone());
                    report.installed = Installed::Reload;
                    self.checked_reload(
                        lock,
                        store,
                        &format!("certificate {}", record.name),
                        &e,
                        &mut report,
                    )?;
                    report.handshake_sni =
                        self.confirm(&record, &served)
                            .map_err(|message| CertError::NotServed {
                                name: record.name.to_string(),
                                path: path.display().to_string(),
                                message,
                            })?;
                }
            }
        }
        fault::point("cert:before-db");
        store.put_certificate(&record)?;
        self.clear_marker()?;
        report.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        Ok(report)
    }

    /// Loads the certificate into the worker and brings every crt-list line in line.
    fn push(&self, name: &CertName, pem: &str, served: &[CrtListEntry]) -> Result<(), String> {
        let runtime = self.runtime();
        let file = self.pem_path(name).display().to_string();
        let list = self.crt_list().display().to_string();
        let filters = served
            .iter()
            .find(|s| &s.cert == name)
            .map(|s| s.filters.clone())
            .unwrap_or_default();
        if name.is_default() || !filters.is_empty() {
            runtime
                .install(&file, pem, &list, &filters)
                .map_err(|e| e.to_string())?;
        }
        self.align_lines(&runtime, served)
            .map_err(|e| e.to_string())
    }

    /// Makes the worker's crt-list lines equal to `served`: new and changed lines are added
    /// before stale ones go, so a name moving between certificates is always served.
    fn align_lines(
        &self,
        runtime: &RuntimeCerts,
        served: &[CrtListEntry],
    ) -> Result<(), RuntimeError> {
        let list = self.crt_list().display().to_string();
        let current = runtime.lines(&list)?;
        // Indexed once: with 1,000 certificates a scan per line is a million comparisons.
        let now: std::collections::HashMap<&str, &Vec<String>> = current
            .iter()
            .map(|(f, filters)| (f.as_str(), filters))
            .collect();
        let mut wanted: std::collections::HashSet<String> = served
            .iter()
            .map(|s| self.pem_path(&s.cert).display().to_string())
            .collect();
        wanted.insert(
            self.pem_path(&CertName::default_cert())
                .display()
                .to_string(),
        );
        for s in served {
            let file = self.pem_path(&s.cert).display().to_string();
            let listed = now.get(file.as_str());
            if listed.is_some_and(|filters| **filters == s.filters) {
                continue;
            }
            if listed.is_some() {
                runtime.remove_line(&list, &file)?;
            }
            if runtime.show(&file)?.is_none() {
                // Known to the files but not to this worker (a killed change): load it first.
                let pem = std::fs::read_to_string(self.pem_path(&s.cert)).map_err(|e| {
                    RuntimeError::Refused {
                        command: format!("read {file}"),
                        answer: e.to_string(),
                    }
                })?;
                runtime.install(&file, &pem, &list, &s.filters)?;
            } else {
                runtime.add_line(&list, &file, &s.filters)?;
            }
        }
        for (file, _) in current.iter().filter(|(f, _)| !wanted.contains(f)) {
            runtime.remove(&list, file)?;
        }
        Ok(())
    }

    /// `show ssl cert` must show the record's serial, and a handshake must present it. Returns
    /// the SNI used (none when the certificate serves no name).
    fn confirm(
        &self,
        record: &CertRecord,
        served: &[CrtListEntry],
    ) -> Result<Option<String>, String> {
        let file = self.pem_path(&record.name).display().to_string();
        match self.runtime().show(&file).map_err(|e| e.to_string())? {
            Some(loaded) if x509::serial_matches(&loaded.serial, &record.serial) => {}
            Some(loaded) => {
                return Err(format!(
                    "the worker still holds serial {} for {file}, not {}",
                    loaded.serial, record.serial
                ))
            }
            None if !record.name.is_default() && !served.iter().any(|s| s.cert == record.name) => {
                return Ok(None)
            }
            None => return Err(format!("the worker does not know {file}")),
        }
        let sni = if record.name.is_default() {
            // A name no certificate claims: the default answers it.
            Some("hapctl-default-check.invalid".to_string())
        } else {
            served
                .iter()
                .find(|s| s.cert == record.name)
                .and_then(|s| s.filters.first())
                .map(|f| match f.strip_prefix("*.") {
                    Some(base) => format!("hapctl-check.{base}"),
                    None => f.clone(),
                })
        };
        let Some(sni) = sni else { return Ok(None) };
        let bind = self
            .settings
            .edge
            .https_bind
            .ok_or("the HTTPS bind is disabled")?;
        let served = probe::handshake(probe::local_addr(bind), &sni, HANDSHAKE_TIMEOUT)
            .map_err(|e| e.to_string())?;
        let leaf = served
            .chain
            .first()
            .ok_or("the handshake showed no certificate")?;
        let seen = CertInfo::from_der(leaf).map_err(|e| e.to_string())?;
        if x509::serial_matches(&seen.serial, &record.serial) {
            Ok(Some(sni))
        } else {
            Err(format!(
                "a handshake with SNI {sni} saw serial {}, not {}",
                seen.serial, record.serial
            ))
        }
    }

    /// Stops serving a certificate and deletes it. The default certificate cannot be removed
    /// (replace it instead).
    pub fn remove(&self, store: &mut Store, name: &CertName) -> Result<InstallReport, CertError> {
        let started = Instant::now();
        if name.is_default() {
            return Err(CertError::Refused(
                "the default certificate answers unknown names and cannot be removed; replace it with `hapctl cert import default --pem FILE`".into(),
            ));
        }
        let _lock = self.lock()?;
        self.recover_locked(store)?;
        if store.certificate(name)?.is_none() {
            return Err(CertError::NotFound(format!(
                "certificate {name} does not exist; `hapctl cert ls` lists them"
            )));
        }
        self.set_marker()?;
        if !store.remove_certificate(name)? {
            return Err(CertError::NotFound(format!(
                "certificate {name} does not exist; `hapctl cert ls` lists them"
            )));
        }
        fault::point("cert:after-db-remove");
        let served = self.served(&store.certificates()?)?;
        self.write_crt_list(&served)?;
        let mut installed = Installed::NotRunning;
        let mut runtime_error = None;
        if self.running() {
            match self.align_lines(&self.runtime(), &served) {
                Ok(()) => installed = Installed::Runtime,
                // The crt-list no longer names it: the next reload drops it.
                Err(e) => runtime_error = Some(e.to_string()),
            }
        }
        let path = self.pem_path(name);
        fsutil::remove_durable(&path)
            .map_err(io_err(format!("cannot remove {}", path.display())))?;
        self.clear_marker()?;
        Ok(InstallReport {
            name: name.clone(),
            serial: None,
            not_after: None,
            installed,
            runtime_error,
            handshake_sni: None,
            checks: 0,
            reloads: 0,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// The private key of a certificate, for the download routes made for it.
    pub fn key_pem(&self, name: &CertName) -> Result<String, CertError> {
        let path = self.pem_path(name);
        let text = std::fs::read_to_string(&path)
            .map_err(|_| CertError::NotFound(format!("certificate {name} has no file")))?;
        Ok(super::installed::key_pem(&text)?)
    }
}

/// Copies what the certificate itself says into its row.
fn fill_from(record: &mut CertRecord, info: &CertInfo, chain_pem: &str) {
    record.chain_pem = chain_pem.to_string();
    record.not_before = info.not_before;
    record.not_after = info.not_after;
    record.serial = info.serial.clone();
    record.issuer = info.issuer.clone();
    record.updated_at = unix_now();
    // Jittered by up to 2 % of the lifetime, so certificates issued together spread out.
    let due = super::renew::due_at(info.not_before, info.not_after);
    let spread = (info.not_after - info.not_before).max(0) / 50;
    record.next_renewal = record
        .source
        .is_acme()
        .then(|| super::renew::within(due, due + spread));
}

/// The self-signed certificate that answers names no certificate covers.
fn make_self_signed() -> Result<String, CertError> {
    let fail =
        |e: rcgen::Error| CertError::Refused(format!("cannot make the default certificate: {e}"));
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let mut params =
        rcgen::CertificateParams::new(vec!["hapctl-default.invalid".to_string()]).map_err(fail)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "hapctl default certificate");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(DEFAULT_CERT_DAYS);
    let cert = params.self_signed(&key).map_err(fail)?;
    Ok(format!("{}{}", cert.pem(), key.serialize_pem()))
}

/// A record for a certificate about to be installed (its dates and serial are filled in from
/// the bundle by `install`).
pub fn new_record(
    name: CertName,
    source: CertSource,
    names: Vec<crate::model::Domain>,
) -> CertRecord {
    let now = unix_now();
    CertRecord {
        name,
        source,
        names,
        chain_pem: String::new(),
        not_before: 0,
        not_after: 0,
        serial: String::new(),
        issuer: String::new(),
        next_renewal: None,
        last_error: None,
        failures: 0,
        retry_at: None,
        created_at: now,
        updated_at: now,
    }
}
