//! Per-domain path-protection profiles in the database (one row per domain that has any).

use rusqlite::{params, Connection};

use super::{corrupt, StoreError, Tx};
use crate::model::{Domain, DomainProtections, EdgeState};

pub(super) const MIGRATION: &str = r#"
CREATE TABLE domain_protections (
    domain TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#;

pub(super) fn load(conn: &Connection, state: &mut EdgeState) -> Result<(), StoreError> {
    let mut stmt = conn.prepare("SELECT domain, value FROM domain_protections")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (domain, value): (String, String) = (r.get(0)?, r.get(1)?);
        let p = DomainProtections::from_map_value(&value)
            .map_err(corrupt("domain_protections", &domain))?;
        let domain: Domain = domain
            .parse()
            .map_err(corrupt("domain_protections", &domain))?;
        state.protections.insert(domain, p);
    }
    Ok(())
}

impl Tx<'_> {
    /// Sets a domain's protections; the default (no profile, gate on) drops the row.
    pub fn set_protections(
        &self,
        domain: &Domain,
        p: &DomainProtections,
    ) -> Result<(), StoreError> {
        self.tx.execute(
            "DELETE FROM domain_protections WHERE domain = ?1",
            [domain.to_string()],
        )?;
        if !p.is_default() {
            self.tx.execute(
                "INSERT INTO domain_protections (domain, value) VALUES (?1, ?2)",
                params![domain.to_string(), p.map_value()],
            )?;
        }
        Ok(())
    }
}
