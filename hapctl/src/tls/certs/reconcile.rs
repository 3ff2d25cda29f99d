//! `Certs::reconcile`: what a killed certificate change left is finished, and the worker is
//! made to match the files (the files win over the database row).

use std::path::PathBuf;

use super::{fill_from, io_err, CertError, Certs};
use crate::fsutil;
use crate::model::CertName;
use crate::store::Store;
use crate::tls::x509;

impl Certs<'_> {
    /// Finishes what a killed change left, and makes the worker match the files: rows whose
    /// file holds another certificate take the file's, files without a row are removed, the
    /// crt-list is rewritten, and the worker gets every certificate it lacks or holds an older
    /// serial of. Returns what it fixed.
    pub fn reconcile(&self, store: &mut Store) -> Result<Vec<String>, CertError> {
        let _lock = self.lock()?;
        let fixed = self.reconcile_locked(store)?;
        self.clear_marker()?;
        Ok(fixed)
    }

    pub(super) fn reconcile_locked(&self, store: &mut Store) -> Result<Vec<String>, CertError> {
        fsutil::sweep_temp_files(&self.settings.paths.certs_dir)
            .map_err(io_err("cannot remove leftover temp files"))?;
        // The crt-list is written below, once the rows are fixed.
        self.ensure_default_and_map_locked(store)?;
        let mut fixed = Vec::new();
        let mut records = store.certificates()?;
        for record in &mut records {
            let path = self.pem_path(&record.name);
            let Some(text) = fsutil::read_optional(&path)
                .map_err(io_err(format!("cannot read {}", path.display())))?
            else {
                fixed.push(format!(
                    "{}: its file {} is missing; it is not served",
                    record.name,
                    path.display()
                ));
                continue;
            };
            let (info, chain) = super::super::installed::read(&String::from_utf8_lossy(&text))?;
            if !x509::serial_matches(&info.serial, &record.serial) {
                fill_from(record, &info, &chain);
                store.put_certificate(record)?;
                fixed.push(format!(
                    "{}: took serial {} from its file (a change was interrupted)",
                    record.name, info.serial
                ));
            }
        }
        let known: Vec<PathBuf> = records.iter().map(|r| self.pem_path(&r.name)).collect();
        let dir = &self.settings.paths.certs_dir;
        let entries =
            std::fs::read_dir(dir).map_err(io_err(format!("cannot list {}", dir.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let orphan = path.extension().is_some_and(|e| e == "pem")
                && path != self.pem_path(&CertName::default_cert())
                && !known.contains(&path);
            if orphan {
                fsutil::remove_durable(&path)
                    .map_err(io_err(format!("cannot remove {}", path.display())))?;
                fixed.push(format!(
                    "removed {} (no certificate of that name)",
                    path.display()
                ));
            }
        }
        let served = self.served(&records)?;
        if self.write_crt_list(&served)? {
            fixed.push("rewrote the crt-list".into());
        }
        if self.running() {
            let runtime = self.runtime();
            self.align_lines(&runtime, &served)
                .map_err(|e| CertError::Refused(e.to_string()))?;
            let list = self.crt_list().display().to_string();
            for record in &records {
                let file = self.pem_path(&record.name).display().to_string();
                let stale = runtime
                    .show(&file)
                    .map_err(|e| CertError::Refused(e.to_string()))?
                    .is_some_and(|l| !x509::serial_matches(&l.serial, &record.serial));
                if stale {
                    let pem = std::fs::read_to_string(self.pem_path(&record.name))
                        .map_err(io_err(format!("cannot read {file}")))?;
                    runtime
                        .install(&file, &pem, &list, &[])
                        .map_err(|e| CertError::Refused(e.to_string()))?;
                    fixed.push(format!(
                        "{}: the worker held an older serial; replaced",
                        record.name
                    ));
                }
            }
        }
        Ok(fixed)
    }
}
