//! The `backend_name` each domain was given through the old manager's API (`BackendLabel`).
//! A table of its own keyed by domain, not a column of `domains`: a put replaces the domain's
//! row, and the label must outlive a later put through `/v1` or the CLI. A removal, or a
//! route to an app, clears it.

use std::collections::HashMap;

use rusqlite::params;

use super::{corrupt, Store, StoreError, Tx};
use crate::model::{BackendLabel, Domain};

pub(super) const MIGRATION: &str =
    "CREATE TABLE backend_labels (domain TEXT PRIMARY KEY, label TEXT NOT NULL);";

impl Store {
    /// Every domain's label, by stored name (`*.example.com` for a wildcard).
    pub fn backend_labels(&self) -> Result<HashMap<String, BackendLabel>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT domain, label FROM backend_labels")?;
        let rows: Vec<(String, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        rows.into_iter()
            .map(|(domain, label)| {
                let label = label.parse().map_err(corrupt("backend_labels", &domain))?;
                Ok((domain, label))
            })
            .collect()
    }
}

impl Tx<'_> {
    /// Sets (or, with `None`, clears) a domain's label. Not part of the rendered state.
    pub fn set_backend_label(
        &self,
        domain: &Domain,
        label: Option<&BackendLabel>,
    ) -> Result<(), StoreError> {
        let name = domain.to_string();
        let write = || {
            match label {
                Some(l) => self.tx.execute(
                    "INSERT OR REPLACE INTO backend_labels (domain, label) VALUES (?1, ?2)",
                    params![name, l.as_str()],
                )?,
                None => self
                    .tx
                    .execute("DELETE FROM backend_labels WHERE domain = ?1", [&name])?,
            };
            Ok(())
        };
        // The state does not hold labels: the transaction's copy of it stays exact.
        self.mirror.follow(&self.tx, write, |_| {})
    }
}
