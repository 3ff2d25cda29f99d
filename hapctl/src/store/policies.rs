//! The per-domain policies and trusted proxies in the database (the parts of the desired
//! state beyond domains and servers).

use rusqlite::params;

use super::{corrupt, Store, StoreError, Tx};
use crate::model::{Domain, HttpsPolicy, ProxyNet, ProxyPreset};

impl Store {
    /// Trusted proxies with the preset each came from (`None`: added by hand).
    pub fn trusted_proxies(&self) -> Result<Vec<(ProxyNet, Option<String>)>, StoreError> {
        trusted_proxies(&self.conn)
    }
}

pub(super) fn trusted_proxies(
    conn: &rusqlite::Connection,
) -> Result<Vec<(ProxyNet, Option<String>)>, StoreError> {
    let mut stmt = conn.prepare("SELECT net, preset FROM trusted_proxies ORDER BY net")?;
    let rows: Vec<(String, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(net, preset)| {
            Ok((
                net.parse().map_err(corrupt("trusted_proxies", &net))?,
                preset,
            ))
        })
        .collect()
}

impl Tx<'_> {
    /// Sets a domain's HTTPS policy (the default one removes its row).
    pub fn set_https_policy(
        &self,
        domain: &Domain,
        policy: &HttpsPolicy,
    ) -> Result<(), StoreError> {
        let write = || {
            self.tx.execute(
                "DELETE FROM https_policies WHERE domain = ?1",
                [domain.to_string()],
            )?;
            if !policy.is_default() {
                self.tx.execute(
                    "INSERT INTO https_policies (domain, policy) VALUES (?1, ?2)",
                    params![domain.to_string(), policy.map_value()],
                )?;
            }
            Ok(())
        };
        // Followed by the transaction's copy: the apply's next read needs no parse of every row.
        self.mirror.follow(&self.tx, write, |state| {
            if policy.is_default() {
                state.https.remove(domain);
            } else {
                state.https.insert(domain.clone(), *policy);
            }
        })
    }

    /// Suspends or resumes a domain; returns false when it already was in that state.
    pub fn set_suspended(
        &self,
        domain: &Domain,
        suspended: bool,
        now: i64,
    ) -> Result<bool, StoreError> {
        let write = || {
            let changed = if suspended {
                self.tx.execute(
                    "INSERT OR IGNORE INTO suspended_domains (domain, since) VALUES (?1, ?2)",
                    params![domain.to_string(), now],
                )?
            } else {
                self.tx.execute(
                    "DELETE FROM suspended_domains WHERE domain = ?1",
                    [domain.to_string()],
                )?
            };
            Ok(changed > 0)
        };
        self.mirror.follow(&self.tx, write, |state| {
            if suspended {
                state.suspended.insert(domain.clone());
            } else {
                state.suspended.remove(domain);
            }
        })
    }

    /// Makes the networks tagged with `preset` exactly `nets` (a network already trusted by
    /// hand keeps its row); returns how many were added and removed.
    pub fn set_preset_proxies(
        &self,
        preset: ProxyPreset,
        nets: &[ProxyNet],
    ) -> Result<(usize, usize), StoreError> {
        let keep: std::collections::BTreeSet<String> = nets.iter().map(|n| n.to_string()).collect();
        let mut stmt = self
            .tx
            .prepare("SELECT net FROM trusted_proxies WHERE preset = ?1")?;
        let current: Vec<String> = stmt
            .query_map([preset.as_str()], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut removed = 0;
        for net in current.iter().filter(|n| !keep.contains(*n)) {
            removed += self
                .tx
                .execute("DELETE FROM trusted_proxies WHERE net = ?1", [net])?;
        }
        let mut added = 0;
        for net in &keep {
            added += self.tx.execute(
                "INSERT OR IGNORE INTO trusted_proxies (net, preset) VALUES (?1, ?2)",
                params![net, preset.as_str()],
            )?;
        }
        Ok((added, removed))
    }
}
