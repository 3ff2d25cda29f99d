//! A lock of the fleet: a key written only where none exists, under the holder's lease, so an
//! edge that dies releases it when its lease ends. A certificate's order and a fleet delivery
//! take one.

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp};
use serde::{Deserialize, Serialize};

use super::etcd::Etcd;
use super::FleetError;

/// Who holds a lock, since when (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    pub edge: String,
    pub since: i64,
}

/// Takes the lock at `key` for `record` under `lease`: `Err(holder)` when another has it
/// (`None` when its record does not parse).
pub async fn take(
    etcd: &Etcd,
    key: &str,
    record: &LockRecord,
    lease: i64,
) -> Result<Result<(), Option<LockRecord>>, FleetError> {
    let value = serde_json::to_string(record).expect("a lock record serialises");
    let put = TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)));
    let taken = etcd
        .txn(vec![Compare::version(key, CompareOp::Equal, 0)], vec![put])
        .await?;
    if taken.is_some() {
        return Ok(Ok(()));
    }
    let holder = etcd.get(key).await?;
    Ok(Err(holder.and_then(|v| serde_json::from_slice(&v).ok())))
}

/// Renews `lease` every `every` until the task is aborted or the lease is lost.
pub async fn keep(etcd: Etcd, lease: i64, every: std::time::Duration) {
    loop {
        tokio::time::sleep(every).await;
        if !etcd.keep_alive(lease).await.unwrap_or(false) {
            tracing::warn!("a fleet lock's lease was lost: another edge may take over");
            return;
        }
    }
}
