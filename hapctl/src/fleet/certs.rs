//! Certificates once per fleet (docs/fleet.md): what etcd holds about them, and the lock
//! under which one edge at a time orders a certificate.
//!
//! Keys under the prefix:
//! - `certs/<name>`: the certificate, its chain and its key sealed with the fleet key;
//! - `acme/lock/<name>`: the edge ordering it now, under that edge's lease (a holder that
//!   dies releases it);
//! - `acme/order/<name>`: an order in progress (its URL at the CA and the sealed key of its
//!   CSR), so another edge can finish it without a second certificate; no lease;
//! - `acme/last/<name>`: how the last order went, and when the fleet may try again;
//! - `acme/account/<id>`: the fleet's one ACME account per CA (its credentials sealed), so
//!   an order one edge began is the account's that another edge finishes it with;
//! - `acme/token/<token>` and `acme/ack/<token>/<edge>`: HTTP-01 tokens every edge answers,
//!   and which edges answer them, under the holder's lease;
//! - `installed/<name>/<edge>`: the serial each edge serves.
//!
//! Every value read back is parsed into these types (names and sources through the model's
//! parsers, the chain and key through the bundle checks on install) before anything uses it.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, TxnOp};
use serde::{Deserialize, Serialize};

use super::etcd::Etcd;
use super::lock::LockRecord;
use super::seal::Sealed;
use super::{FleetError, Layout};
use crate::model::{CertName, CertSource, Domain};

/// A certificate of the fleet: every edge installs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetCert {
    pub names: Vec<Domain>,
    pub source: CertSource,
    /// Leaf then intermediates.
    pub chain_pem: String,
    /// The private key's PEM, sealed for `cert/<name>`.
    pub key: Sealed,
    pub serial: String,
    /// The edge that ordered or uploaded it, and when (unix seconds).
    pub by: String,
    pub at: i64,
}

/// An order between its creation at the CA and its certificate in etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRecord {
    pub url: String,
    pub names: Vec<Domain>,
    pub source: CertSource,
    /// The CSR's private key, sealed for `order/<name>`.
    pub key: Sealed,
    pub by: String,
    pub at: i64,
}

/// How the fleet's last order of a certificate went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastOrder {
    pub by: String,
    pub at: i64,
    /// The serial it issued, or why it failed.
    pub serial: Option<String>,
    pub error: Option<String>,
    /// Failures in a row, and no edge orders again before `retry_at`.
    pub failures: u32,
    pub retry_at: Option<i64>,
}

/// The serial an edge serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledRecord {
    pub serial: String,
    pub at: i64,
}

/// What `cert ls` adds per certificate on an edge of a fleet.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetCertStatus {
    /// The serial the fleet holds (absent: not in the fleet).
    pub fleet_serial: Option<String>,
    pub lock: Option<LockRecord>,
    pub last_order: Option<LastOrder>,
    /// Edge → the serial it serves.
    pub installed: BTreeMap<String, String>,
    /// A key of this certificate that did not parse.
    pub refused: Option<String>,
}

/// The sealing context of a certificate's key, and of an order's.
pub fn cert_context(name: &CertName) -> String {
    format!("cert/{name}")
}

pub fn order_context(name: &CertName) -> String {
    format!("order/{name}")
}

impl Layout {
    pub fn certs(&self) -> String {
        format!("{}certs/", self.root())
    }

    pub fn cert(&self, name: &CertName) -> String {
        format!("{}{name}", self.certs())
    }

    pub fn acme_lock(&self, name: &CertName) -> String {
        format!("{}acme/lock/{name}", self.root())
    }

    /// The fleet's ACME account for one CA directory (`tls::acme::account_id`), sealed.
    pub fn acme_account(&self, id: &str) -> String {
        format!("{}acme/account/{id}", self.root())
    }

    pub fn acme_orders(&self) -> String {
        format!("{}acme/order/", self.root())
    }

    pub fn acme_order(&self, name: &CertName) -> String {
        format!("{}{name}", self.acme_orders())
    }

    pub fn acme_last(&self, name: &CertName) -> String {
        format!("{}acme/last/{name}", self.root())
    }

    pub fn acme_tokens(&self) -> String {
        format!("{}acme/token/", self.root())
    }

    pub fn acme_acks(&self, token: &str) -> String {
        format!("{}acme/ack/{token}/", self.root())
    }

    pub fn installed_of(&self, name: &CertName) -> String {
        format!("{}installed/{name}/", self.root())
    }

    pub fn installed(&self, name: &CertName, edge: &str) -> String {
        format!("{}{edge}", self.installed_of(name))
    }
}

/// Parses a value read from etcd; `what` names it in the error.
pub fn parse<T: serde::de::DeserializeOwned>(what: &str, value: &[u8]) -> Result<T, String> {
    serde_json::from_slice(value).map_err(|e| format!("{what} does not parse: {e}"))
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("a fleet record serialises")
}

/// Reads one record, `None` when absent.
pub async fn read<T: serde::de::DeserializeOwned>(
    etcd: &Etcd,
    key: &str,
) -> Result<Option<T>, FleetError> {
    match etcd.get(key).await? {
        None => Ok(None),
        Some(v) => parse(key, &v).map(Some).map_err(FleetError::Etcd),
    }
}

/// Stores an issued or uploaded certificate with how its order went, and ends the order.
pub async fn store_cert(
    etcd: &Etcd,
    layout: &Layout,
    name: &CertName,
    cert: &FleetCert,
    last: Option<&LastOrder>,
) -> Result<i64, FleetError> {
    let mut ops = vec![
        TxnOp::put(layout.cert(name), json(cert), None),
        TxnOp::delete(layout.acme_order(name), None),
    ];
    if let Some(last) = last {
        ops.push(TxnOp::put(layout.acme_last(name), json(last), None));
    }
    let revision = etcd.txn(vec![], ops).await?;
    Ok(revision.unwrap_or_default())
}

pub async fn put<T: Serialize>(etcd: &Etcd, key: &str, value: &T) -> Result<i64, FleetError> {
    etcd.put(key, &json(value), None).await
}

/// Writes `value` at `key` unless the key exists: whether it did.
pub async fn create<T: Serialize>(etcd: &Etcd, key: &str, value: &T) -> Result<bool, FleetError> {
    let put = TxnOp::put(key, json(value), None);
    let made = etcd
        .txn(vec![Compare::version(key, CompareOp::Equal, 0)], vec![put])
        .await?;
    Ok(made.is_some())
}

/// Certificates whose last order failed, and the time before which no edge orders them.
pub async fn backoffs(etcd: &Etcd, layout: &Layout) -> Result<BTreeMap<String, i64>, FleetError> {
    let prefix = format!("{}acme/last/", layout.root());
    let mut out = BTreeMap::new();
    for kv in etcd.read_prefix(&prefix).await?.kvs {
        let name = kv.key.trim_start_matches(&prefix).to_string();
        if let Ok(LastOrder {
            retry_at: Some(at), ..
        }) = parse(&kv.key, &kv.value)
        {
            out.insert(name, at);
        }
    }
    Ok(out)
}

/// The fleet's view of every certificate, for `cert ls`.
pub async fn statuses(
    etcd: &Etcd,
    layout: &Layout,
) -> Result<BTreeMap<String, FleetCertStatus>, FleetError> {
    let mut out: BTreeMap<String, FleetCertStatus> = BTreeMap::new();
    for kv in etcd.read_prefix(&layout.certs()).await?.kvs {
        let name = kv.key.trim_start_matches(&layout.certs()).to_string();
        let status = out.entry(name).or_default();
        match parse::<FleetCert>(&kv.key, &kv.value) {
            Ok(cert) => status.fleet_serial = Some(cert.serial),
            Err(why) => status.refused = Some(why),
        }
    }
    let acme = format!("{}acme/", layout.root());
    for kv in etcd.read_prefix(&acme).await?.kvs {
        let rest = kv.key.trim_start_matches(&acme);
        if let Some(name) = rest.strip_prefix("lock/") {
            let entry = out.entry(name.to_string()).or_default();
            entry.lock = parse(&kv.key, &kv.value).ok();
        } else if let Some(name) = rest.strip_prefix("last/") {
            let entry = out.entry(name.to_string()).or_default();
            entry.last_order = parse(&kv.key, &kv.value).ok();
        }
    }
    let installed = format!("{}installed/", layout.root());
    for kv in etcd.read_prefix(&installed).await?.kvs {
        let rest = kv.key.trim_start_matches(&installed);
        let (Some((name, edge)), Ok(record)) = (
            rest.rsplit_once('/'),
            parse::<InstalledRecord>(&kv.key, &kv.value),
        ) else {
            continue;
        };
        let entry = out.entry(name.to_string()).or_default();
        entry.installed.insert(edge.to_string(), record.serial);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::FleetPrefix;

    #[test]
    fn the_keys_of_one_certificate_do_not_cover_another() {
        let layout = Layout::new(&FleetPrefix::parse("/f").unwrap());
        let a: CertName = "a.example.com".parse().unwrap();
        assert_eq!(layout.cert(&a), "/f/certs/a.example.com");
        assert_eq!(layout.installed(&a, "e1"), "/f/installed/a.example.com/e1");
        assert!(!layout
            .installed(&"a.example.com.x".parse().unwrap(), "e1")
            .starts_with(&layout.installed_of(&a)));
        assert_eq!(layout.acme_acks("tok"), "/f/acme/ack/tok/");
    }

    #[test]
    fn a_record_is_parsed_through_the_model() {
        let bad = br#"{"names":["not a name"],"source":"upload","chain_pem":"","key":{"key_id":"x","data":""},"serial":"1","by":"e0","at":0}"#;
        assert!(parse::<FleetCert>("certs/x", bad)
            .unwrap_err()
            .contains("certs/x"));
    }
}
