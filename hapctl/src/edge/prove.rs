//! A cutover proved from outside (`POST /v1/proofs`): the measurement is `prove`'s; this
//! names the host it measures and keeps its journal.

use super::{Edge, EdgeError};
use crate::model::AppName;
use crate::prove::{self, Options, ProveError, Report, Subject};

impl Edge {
    /// The `Host` to measure for `app`: a domain routed to it (or to any app), else any
    /// domain, else the bind's address.
    pub fn prove_host(&self, app: &AppName) -> Result<String, EdgeError> {
        Ok(prove::default_host(
            &self.settings,
            &self.state()?,
            Some(app),
        ))
    }

    /// Measures `subject` through the public bind (`progress` hears each line) and writes
    /// its journal where `GET /v1/proofs` reads it (`journal` is `None` when it could not
    /// be written).
    pub fn prove(
        &self,
        options: &Options,
        subject: &Subject,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Report, ProveError> {
        let mut report = prove::run(&self.settings, options, subject, progress)?;
        report.journal = prove::journal::write(&self.settings.paths.journal_dir, &report).ok();
        Ok(report)
    }
}
