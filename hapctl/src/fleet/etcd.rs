//! The fleet's etcd calls: every call bounded in time, and moved to the next endpoint when
//! the one in use fails (the client library balances, but does not fail over by itself).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, ConnectOptions, GetOptions, Identity, TlsOptions, Txn, TxnOp,
    WatchOptions, WatchStream,
};

use super::FleetError;
use crate::settings::FleetSettings;

/// Keys read per range request of a full read: far below gRPC's message limit at the
/// largest values hapctl writes.
const PAGE: i64 = 2_000;
/// Keys per range request of a listing without values. etcd walks the whole range of its
/// index for every page (to count it), so a listing takes few, large pages.
const KEYS_PAGE: i64 = 50_000;
/// What a listing's answer may weigh: 50,000 of the longest keys hapctl writes fit.
const LISTING_MAX_BYTES: usize = 64 << 20;

/// The pause after every endpoint failed once, before the next round.
const ROUND_PAUSE: Duration = Duration::from_millis(100);

/// A connection to each endpoint, the one in use first.
#[derive(Clone)]
pub struct Etcd {
    clients: Arc<RwLock<Vec<(String, Client)>>>,
    options: ConnectOptions,
    current: Arc<AtomicUsize>,
    timeout: Duration,
}

/// One key as read: its text, value and the revision that last changed it.
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    /// The lease it was written under (0: none).
    pub lease: i64,
}

impl Kv {
    fn of(kv: &etcd_client::KeyValue) -> Kv {
        Kv {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        }
    }
}

/// Every key under a prefix at one revision.
pub struct Snapshot {
    pub revision: i64,
    pub kvs: Vec<Kv>,
}

impl Etcd {
    /// Connections to every endpoint. They are lazy: an endpoint that is down now is tried
    /// again when its turn comes.
    pub async fn connect(settings: &FleetSettings) -> Result<Etcd, FleetError> {
        let options = connect_options(settings)?;
        let clients = clients(&settings.endpoints, &options).await?;
        Ok(Etcd {
            clients: Arc::new(RwLock::new(clients)),
            options,
            current: Arc::new(AtomicUsize::new(0)),
            timeout: settings.timeout,
        })
    }

    /// Fresh connections after every endpoint failed: a connection to an endpoint that was
    /// down waits out its own back-off before it tries again, which once etcd is back would
    /// cost every edge seconds of refused writes.
    async fn reconnect(&self) {
        let endpoints: Vec<String> = self.snapshot().into_iter().map(|(e, _)| e).collect();
        match clients(&endpoints, &self.options).await {
            Ok(fresh) => *self.clients.write().unwrap_or_else(|e| e.into_inner()) = fresh,
            Err(e) => tracing::debug!("cannot make fresh etcd connections: {e}"),
        }
    }

    fn snapshot(&self) -> Vec<(String, Client)> {
        self.clients
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs `call` on the endpoint in use, then on each other one while the failure is the
    /// endpoint's (unreachable, no leader, too slow), round after round until the timeout:
    /// an election after a leader died takes a moment. Other errors are returned at once.
    pub async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, FleetError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut clients = self.snapshot();
        let n = clients.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut last = String::new();
        for attempt in 0.. {
            let at = first + attempt;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if attempt > 0 && attempt % n == 0 {
                tokio::time::sleep(ROUND_PAUSE.min(left)).await;
                self.reconnect().await;
                clients = self.snapshot();
            }
            let (endpoint, client) = &clients[at % n];
            // A member that hangs gets a share of the time, not all of it.
            let share = left.min((self.timeout / 3).max(Duration::from_millis(300)));
            match tokio::time::timeout(share, call(client.clone())).await {
                Ok(Ok(value)) => {
                    self.current.store(at % n, Ordering::Relaxed);
                    return Ok(value);
                }
                Ok(Err(e)) if !is_endpoint_failure(&e) => {
                    return Err(FleetError::Etcd(format!("{what}: {e}")))
                }
                Ok(Err(e)) => last = format!("{endpoint}: {e}"),
                Err(_) => last = format!("{endpoint}: no answer within {share:?}"),
            }
        }
        Err(FleetError::Unreachable(format!("{what}: {last}")))
    }

    /// Every key under `prefix` at one revision, read page by page at that revision.
    pub async fn read_prefix(&self, prefix: &str) -> Result<Snapshot, FleetError> {
        self.read_pages(prefix, 0, false).await
    }

    /// Every key under `prefix` without its value (`mod_revision` says which changed), at
    /// `revision` (0: now).
    pub async fn list_prefix(&self, prefix: &str, revision: i64) -> Result<Snapshot, FleetError> {
        self.read_pages(prefix, revision, true).await
    }

    /// [`Etcd::read_prefix`] at `revision`.
    pub async fn read_prefix_at(
        &self,
        prefix: &str,
        revision: i64,
    ) -> Result<Snapshot, FleetError> {
        self.read_pages(prefix, revision, false).await
    }

    /// The keys under `prefix` changed after revision `since`, as they were at `revision`, in
    /// one request (the caller knows from a listing that they are few).
    pub async fn read_changed(
        &self,
        prefix: &str,
        since: i64,
        revision: i64,
    ) -> Result<Snapshot, FleetError> {
        let options = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_min_mod_revision(since + 1)
            .with_revision(revision);
        let answer = self
            .call("read the fleet's changed keys", |mut c| {
                let options = options.clone();
                async move { c.get(prefix, Some(options)).await }
            })
            .await?;
        Ok(Snapshot {
            revision,
            kvs: answer.kvs().iter().map(Kv::of).collect(),
        })
    }

    async fn read_pages(
        &self,
        prefix: &str,
        mut revision: i64,
        keys_only: bool,
    ) -> Result<Snapshot, FleetError> {
        let end = prefix_end(prefix);
        let mut kvs = Vec::new();
        let mut from = prefix.as_bytes().to_vec();
        loop {
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(if keys_only { KEYS_PAGE } else { PAGE })
                .with_revision(revision);
            if keys_only {
                options = options.with_keys_only();
            }
            let key = from.clone();
            let answer = self
                .call("read the fleet's state", |c| {
                    let (key, options) = (key.clone(), options.clone());
                    let mut kv = c.kv_client().max_decoding_message_size(LISTING_MAX_BYTES);
                    async move { kv.get(key, Some(options)).await }
                })
                .await?;
            if revision == 0 {
                revision = answer.header().map_or(0, |h| h.revision());
            }
            kvs.extend(answer.kvs().iter().map(Kv::of));
            match answer.kvs().last() {
                Some(last) if answer.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(Snapshot { revision, kvs }),
            }
        }
    }

    /// The value of one key, if it exists.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, FleetError> {
        let answer = self
            .call("read a key", |mut c| async move { c.get(key, None).await })
            .await?;
        Ok(answer.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Writes one key, under `lease` when given.
    pub async fn put(&self, key: &str, value: &str, lease: Option<i64>) -> Result<i64, FleetError> {
        let options = lease.map(|id| etcd_client::PutOptions::new().with_lease(id));
        let answer = self
            .call("write a key", |mut c| {
                let options = options.clone();
                async move { c.put(key, value, options).await }
            })
            .await?;
        Ok(answer.header().map_or(0, |h| h.revision()))
    }

    pub async fn delete(&self, key: &str) -> Result<(), FleetError> {
        self.call(
            "delete a key",
            |mut c| async move { c.delete(key, None).await },
        )
        .await
        .map(|_| ())
    }

    /// The cluster's current revision.
    pub async fn revision(&self, key: &str) -> Result<i64, FleetError> {
        let options = GetOptions::new().with_count_only();
        let answer = self
            .call("read the fleet's revision", |mut c| {
                let options = options.clone();
                async move { c.get(key, Some(options)).await }
            })
            .await?;
        Ok(answer.header().map_or(0, |h| h.revision()))
    }

    /// Runs `ops` if every compare holds: the revision it made, or `None` when a compare
    /// failed (another writer got there first).
    pub async fn txn(
        &self,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<Option<i64>, FleetError> {
        let answer = self
            .call("write to the fleet", |mut c| {
                let txn = Txn::new().when(compares.clone()).and_then(ops.clone());
                async move { c.txn(txn).await }
            })
            .await?;
        let revision = answer.header().map_or(0, |h| h.revision());
        Ok(answer.succeeded().then_some(revision))
    }

    /// A watch of every key under `prefix` from `from` on, with progress notices.
    pub async fn watch(&self, prefix: &str, from: i64) -> Result<WatchStream, FleetError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_progress_notify();
        self.call("watch the fleet's state", |mut c| {
            let options = options.clone();
            async move { c.watch(prefix, Some(options)).await }
        })
        .await
    }

    /// A lease of `ttl` seconds (keys written under it vanish when it is not kept alive).
    pub async fn lease(&self, ttl: i64) -> Result<i64, FleetError> {
        let answer = self
            .call("grant a lease", |mut c| async move {
                c.lease_grant(ttl, None).await
            })
            .await?;
        Ok(answer.id())
    }

    /// Ends `lease` now: every key written under it is deleted.
    pub async fn revoke(&self, lease: i64) -> Result<(), FleetError> {
        self.call("revoke a lease", |mut c| async move {
            c.lease_revoke(lease).await
        })
        .await
        .map(|_| ())
    }

    /// Renews `lease` once; false when etcd no longer knows it.
    pub async fn keep_alive(&self, lease: i64) -> Result<bool, FleetError> {
        self.call("renew a lease", |mut c| async move {
            let (mut keeper, mut answers) = c.lease_keep_alive(lease).await?;
            keeper.keep_alive().await?;
            Ok(answers.message().await?.is_some_and(|a| a.ttl() > 0))
        })
        .await
    }
}

/// A lazy connection to each endpoint.
async fn clients(
    endpoints: &[String],
    options: &ConnectOptions,
) -> Result<Vec<(String, Client)>, FleetError> {
    let mut out = Vec::new();
    for endpoint in endpoints {
        let client = Client::connect([endpoint.as_str()], Some(options.clone()))
            .await
            .map_err(|e| FleetError::unreachable(endpoint, e))?;
        out.push((endpoint.clone(), client));
    }
    Ok(out)
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Failures that another endpoint may not have.
fn is_endpoint_failure(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
        ),
        _ => false,
    }
}

fn connect_options(settings: &FleetSettings) -> Result<ConnectOptions, FleetError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(settings.timeout)
        .with_timeout(settings.timeout)
        .with_keep_alive(Duration::from_secs(5), settings.timeout)
        .with_require_leader(true);
    if let Some(tls) = &settings.tls {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| FleetError::Setup(format!("cannot read {}: {e}", p.display())))
        };
        let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
        if let Some((cert, key)) = &tls.identity {
            t = t.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        options = options.with_tls(t);
    }
    if let Some((user, file)) = &settings.auth {
        let password = std::fs::read_to_string(file).map_err(|e| {
            FleetError::Setup(format!(
                "cannot read the etcd password from {}: {e}",
                file.display()
            ))
        })?;
        options = options.with_user(user.clone(), password.trim().to_string());
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_ends_after_its_last_key() {
        assert_eq!(super::prefix_end("/hapctl/"), b"/hapctl0".to_vec());
        assert_eq!(super::prefix_end("ab"), b"ac".to_vec());
    }
}
