//! Rate limits in the database: the edge-wide settings, per-domain policies, exemptions.

use rusqlite::{params, Connection};

use super::{corrupt, StoreError, Tx};
use crate::model::{
    check_secs, BlockKey, Domain, LimitPolicy, Limits, MAX_TARPIT_SECS, MAX_WINDOW_SECS,
};

pub(super) const MIGRATION: &str = r#"
CREATE TABLE limit_settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE limit_policies (
    domain TEXT PRIMARY KEY,
    policy TEXT NOT NULL
);
CREATE TABLE limit_exempt (
    net TEXT PRIMARY KEY
);
"#;

/// Reads the limits; a missing setting keeps its default.
pub(super) fn load(conn: &Connection) -> Result<Limits, StoreError> {
    let mut limits = Limits::default();
    let mut stmt = conn.prepare("SELECT key, value FROM limit_settings")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (key, value): (String, String) = (r.get(0)?, r.get(1)?);
        let bad = corrupt("limit_settings", &key);
        let secs = |max| {
            value
                .parse::<u64>()
                .map_err(|_| crate::model::Invalid::new("seconds", &value, "must be a number"))
                .and_then(|n| check_secs("seconds", n, max))
        };
        match key.as_str() {
            "req_window" => limits.windows.req = secs(MAX_WINDOW_SECS).map_err(bad)?,
            "conn_window" => limits.windows.conn = secs(MAX_WINDOW_SECS).map_err(bad)?,
            "err_window" => limits.windows.err = secs(MAX_WINDOW_SECS).map_err(bad)?,
            "tarpit" => limits.tarpit_secs = secs(MAX_TARPIT_SECS).map_err(bad)?,
            "local_exempt" => limits.local_exempt = value == "1",
            "default" => limits.default = LimitPolicy::from_map_value(&value).map_err(bad)?,
            _ => {}
        }
    }
    let mut stmt = conn.prepare("SELECT domain, policy FROM limit_policies")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (domain, policy): (String, String) = (r.get(0)?, r.get(1)?);
        let policy =
            LimitPolicy::from_map_value(&policy).map_err(corrupt("limit_policies", &domain))?;
        let domain: Domain = domain.parse().map_err(corrupt("limit_policies", &domain))?;
        limits.domains.insert(domain, policy);
    }
    let mut stmt = conn.prepare("SELECT net FROM limit_exempt")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let net: String = r.get(0)?;
        let key: BlockKey = net.parse().map_err(corrupt("limit_exempt", &net))?;
        limits.exempt.insert(key);
    }
    Ok(limits)
}

impl Tx<'_> {
    /// Writes the edge-wide part of `limits`: windows, tarpit, local exemption, default policy.
    pub fn set_limit_settings(&self, limits: &Limits) -> Result<(), StoreError> {
        let w = limits.windows;
        let rows = [
            ("req_window", w.req.to_string()),
            ("conn_window", w.conn.to_string()),
            ("err_window", w.err.to_string()),
            ("tarpit", limits.tarpit_secs.to_string()),
            ("local_exempt", u8::from(limits.local_exempt).to_string()),
            ("default", limits.default.map_value()),
        ];
        for (key, value) in rows {
            self.tx.execute(
                "INSERT OR REPLACE INTO limit_settings (key, value) VALUES (?1, ?2)",
                params![key, value],
            )?;
        }
        Ok(())
    }

    /// Sets a domain's own policy, or drops it (`None`: the domain follows the default).
    pub fn set_domain_limits(
        &self,
        domain: &Domain,
        policy: Option<&LimitPolicy>,
    ) -> Result<(), StoreError> {
        self.tx.execute(
            "DELETE FROM limit_policies WHERE domain = ?1",
            [domain.to_string()],
        )?;
        if let Some(policy) = policy {
            self.tx.execute(
                "INSERT INTO limit_policies (domain, policy) VALUES (?1, ?2)",
                params![domain.to_string(), policy.map_value()],
            )?;
        }
        Ok(())
    }

    /// Adds (true) or removes (false) an exempt network; returns false when nothing changed.
    pub fn set_exempt(&self, net: &BlockKey, exempt: bool) -> Result<bool, StoreError> {
        let sql = if exempt {
            "INSERT OR IGNORE INTO limit_exempt (net) VALUES (?1)"
        } else {
            "DELETE FROM limit_exempt WHERE net = ?1"
        };
        Ok(self.tx.execute(sql, [net.to_string()])? > 0)
    }
}
