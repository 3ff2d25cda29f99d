//! Certificates in the database: what each one is for and what was last installed.
//!
//! The private key is not here: it lives only in the certificate's PEM file (mode 0600 in a
//! 0700 folder), written before this row, so the database never holds a secret.

use rusqlite::{params, OptionalExtension, Row};

use super::{corrupt, Store, StoreError};
use crate::model::{CertName, CertSource, Domain, Invalid};

/// One certificate as the database knows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CertRecord {
    pub name: CertName,
    pub source: CertSource,
    /// The host names it was requested or uploaded for (what it must cover).
    pub names: Vec<Domain>,
    /// Leaf then intermediates: public.
    #[serde(skip)]
    pub chain_pem: String,
    pub not_before: i64,
    pub not_after: i64,
    /// Uppercase hex, as HAProxy's `show ssl cert` prints it.
    pub serial: String,
    pub issuer: String,
    /// When the renewal is due (ACME certificates only).
    pub next_renewal: Option<i64>,
    /// Why the last renewal failed, until one succeeds.
    pub last_error: Option<String>,
    /// Renewal failures in a row.
    pub failures: u32,
    /// No renewal attempt before this (backoff after a failure).
    pub retry_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

const COLUMNS: &str = "name, source, names, chain_pem, not_before, not_after, serial, issuer, \
     next_renewal, last_error, failures, retry_at, created_at, updated_at";

fn from_row(r: &Row<'_>) -> Result<CertRecord, StoreError> {
    let name: String = r.get(0)?;
    let key = name.clone();
    let source: String = r.get(1)?;
    let names: String = r.get(2)?;
    let names: Vec<String> = serde_json::from_str(&names).map_err(|_| {
        corrupt("certificates", &key)(Invalid::new(
            "names",
            &names,
            "must be a JSON array of names",
        ))
    })?;
    Ok(CertRecord {
        name: name.parse().map_err(corrupt("certificates", &key))?,
        source: source.parse().map_err(corrupt("certificates", &key))?,
        names: names
            .iter()
            .map(|n| n.parse())
            .collect::<Result<_, _>>()
            .map_err(corrupt("certificates", &key))?,
        chain_pem: r.get(3)?,
        not_before: r.get(4)?,
        not_after: r.get(5)?,
        serial: r.get(6)?,
        issuer: r.get(7)?,
        next_renewal: r.get(8)?,
        last_error: r.get(9)?,
        failures: r.get(10)?,
        retry_at: r.get(11)?,
        created_at: r.get(12)?,
        updated_at: r.get(13)?,
    })
}

impl Store {
    /// Every certificate, by name.
    pub fn certificates(&self) -> Result<Vec<CertRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {COLUMNS} FROM certificates ORDER BY name"))?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(from_row(r)?);
        }
        Ok(out)
    }

    pub fn certificate(&self, name: &CertName) -> Result<Option<CertRecord>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM certificates WHERE name = ?1"
        ))?;
        let mut rows = stmt.query([name.as_str()])?;
        match rows.next()? {
            Some(r) => Ok(Some(from_row(r)?)),
            None => Ok(None),
        }
    }

    /// Creates or replaces a certificate's row (its PEM file is already written).
    pub fn put_certificate(&mut self, c: &CertRecord) -> Result<(), StoreError> {
        let names: Vec<String> = c.names.iter().map(Domain::to_string).collect();
        let created_at: Option<i64> = self
            .conn
            .query_row(
                "SELECT created_at FROM certificates WHERE name = ?1",
                [c.name.as_str()],
                |r| r.get(0),
            )
            .optional()?;
        self.conn.execute(
            &format!(
                "INSERT OR REPLACE INTO certificates ({COLUMNS}) VALUES \
                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
            ),
            params![
                c.name.as_str(),
                c.source.as_str(),
                serde_json::to_string(&names).expect("strings serialise"),
                c.chain_pem,
                c.not_before,
                c.not_after,
                c.serial,
                c.issuer,
                c.next_renewal,
                c.last_error,
                c.failures,
                c.retry_at,
                created_at.unwrap_or(c.created_at),
                c.updated_at
            ],
        )?;
        Ok(())
    }

    /// Records a failed renewal: the certificate itself is unchanged.
    pub fn certificate_failed(
        &mut self,
        name: &CertName,
        error: &str,
        retry_at: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE certificates SET last_error = ?2, failures = failures + 1, retry_at = ?3, \
             updated_at = ?4 WHERE name = ?1",
            params![name.as_str(), error, retry_at, now],
        )?;
        Ok(())
    }

    /// Returns false when there was no such certificate.
    pub fn remove_certificate(&mut self, name: &CertName) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM certificates WHERE name = ?1", [name.as_str()])?
            > 0)
    }
}
