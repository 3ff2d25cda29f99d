//! Per-domain web application firewall policies (one row per domain whose WAF is not off).

use rusqlite::{params, Connection};

use super::{corrupt, StoreError, Tx};
use crate::model::{Domain, EdgeState, WafMode, WafPolicy};

pub(super) const MIGRATION: &str = r#"
CREATE TABLE domain_waf (
    domain TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#;

pub(super) fn load(conn: &Connection, state: &mut EdgeState) -> Result<(), StoreError> {
    let mut stmt = conn.prepare("SELECT domain, value FROM domain_waf")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (domain, value): (String, String) = (r.get(0)?, r.get(1)?);
        let p = WafPolicy::from_map_value(&value).map_err(corrupt("domain_waf", &domain))?;
        let domain: Domain = domain.parse().map_err(corrupt("domain_waf", &domain))?;
        state.waf.insert(domain, p);
    }
    Ok(())
}

impl Tx<'_> {
    /// Sets a domain's WAF policy; `off` drops the row.
    pub fn set_waf_policy(&self, domain: &Domain, p: &WafPolicy) -> Result<(), StoreError> {
        self.tx.execute(
            "DELETE FROM domain_waf WHERE domain = ?1",
            [domain.to_string()],
        )?;
        if p.mode != WafMode::Off {
            self.tx.execute(
                "INSERT INTO domain_waf (domain, value) VALUES (?1, ?2)",
                params![domain.to_string(), p.to_map_value()],
            )?;
        }
        Ok(())
    }
}
