//! Orders with an ACME CA (RFC 8555) through `instant-acme`.
//!
//! HTTP-01 tokens are answered by HAProxy from its token map (`challenge`), so issuance works
//! for every name the edge routes, with no listener of our own. DNS-01 (needed for wildcards)
//! runs the operator's hook, or hands the TXT records to the caller (the old manager's
//! two-call flow) and completes when told. The account key is made once per directory and kept
//! 0600 in the 0700 `acme_dir`.
//!
//! Where the tokens are published is the caller's [`TokenBoard`]: this edge's map, or (on an
//! edge of a fleet) etcd, from which every edge's map takes them. The certificate's key is the
//! caller's too, so an order another process began can be finished ([`Acme::resume`]) with the
//! key its CSR used.

use std::future::Future;
use std::ops::AsyncFnMut;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, Order, OrderStatus, RetryPolicy,
};

use super::certs::CertError;
use super::challenge::{Challenges, Token};
use crate::fsutil;
use crate::model::Domain;
use crate::settings::Settings;

/// How the CA is shown that we control the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// HAProxy answers `/.well-known/acme-challenge/` from the token map.
    Http01,
    /// The `[acme] dns_hook` publishes the TXT records.
    Dns01Hook,
    /// The caller publishes the TXT records (`dns_records`) and then calls `complete`.
    Dns01Manual,
}

/// Where an order's HTTP-01 tokens are published for the CA to fetch.
pub trait TokenBoard {
    /// Every token answered, on every edge that may be asked, when this returns.
    fn publish(&self, tokens: &[Token]) -> impl Future<Output = Result<(), CertError>> + Send;
    /// Stops answering them (after the order, whatever its outcome); failures are logged.
    fn withdraw(&self, tokens: &[Token]) -> impl Future<Output = ()> + Send;
}

/// This edge's token map.
pub struct LocalBoard<'a>(pub &'a Settings);

impl TokenBoard for LocalBoard<'_> {
    async fn publish(&self, tokens: &[Token]) -> Result<(), CertError> {
        let challenges = Challenges::new(self.0);
        tokens.iter().try_for_each(|t| challenges.publish(t))
    }

    async fn withdraw(&self, tokens: &[Token]) {
        let challenges = Challenges::new(self.0);
        for token in tokens {
            if let Err(e) = challenges.withdraw(token) {
                tracing::warn!("{e}");
            }
        }
    }
}

/// An order between its creation and its certificate.
pub struct PendingOrder {
    order: Order,
    names: Vec<Domain>,
    method: Method,
    tokens: Vec<Token>,
    /// `(record name, TXT value)` for DNS-01.
    records: Vec<(String, String)>,
}

impl PendingOrder {
    pub fn dns_records(&self) -> &[(String, String)] {
        &self.records
    }

    pub fn names(&self) -> &[Domain] {
        &self.names
    }

    /// The order's URL at the CA: enough to resume it from another process.
    pub fn url(&self) -> &str {
        self.order.url()
    }
}

/// How long each polling round of an order may last; a new round starts at `FIRST_POLL`.
const POLL_ROUND: Duration = Duration::from_secs(4);
const FIRST_POLL: Duration = Duration::from_millis(100);

/// Runs `poll` (an order poll of instant-acme) in rounds until it answers or `deadline`.
/// Why rounds: the crate doubles its delay without a ceiling (0.1, 0.2, … 12.8 s), so a CA
/// that validates in 7 s would be asked again only at 12.7 s; rounds keep every wait under
/// 2 s. A Retry-After beyond the round is slept, not hammered.
async fn poll_in_rounds<T>(
    deadline: Instant,
    mut poll: impl AsyncFnMut(&RetryPolicy) -> Result<T, instant_acme::Error>,
) -> Result<T, instant_acme::Error> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let round = RetryPolicy::new()
            .initial_delay(FIRST_POLL)
            .timeout(left.min(POLL_ROUND));
        match poll(&round).await {
            Err(instant_acme::Error::Timeout(next)) if Instant::now() < deadline => match next {
                Some(at) if at >= deadline => return Err(instant_acme::Error::Timeout(next)),
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => {}
            },
            answer => return answer,
        }
    }
}

fn acme_err(what: &str) -> impl FnOnce(instant_acme::Error) -> CertError + '_ {
    move |e| CertError::Acme(format!("{what}: {e}"))
}

/// An account with the configured CA.
pub struct Acme<'a> {
    settings: &'a Settings,
    account: Account,
}

impl<'a> Acme<'a> {
    /// The account for `[acme] directory`, created (and its key stored) on first use.
    pub async fn connect(settings: &'a Settings) -> Result<Acme<'a>, CertError> {
        let path = account_path(settings);
        let stored = fsutil::read_optional(&path).map_err(|source| CertError::Io {
            context: format!("cannot read {}", path.display()),
            source,
        })?;
        if let Some(text) = stored {
            return Acme::from_credentials(settings, &text).await.map_err(|e| match e {
                CertError::Refused(why) => CertError::Acme(format!(
                    "the ACME account file {} is damaged ({why}); move it away to register a new account",
                    path.display()
                )),
                other => other,
            });
        }
        let (acme, credentials) = Acme::register(settings).await?;
        fsutil::write_secret(&path, &credentials).map_err(|source| CertError::Io {
            context: format!("cannot store the ACME account key in {}", path.display()),
            source,
        })?;
        Ok(acme)
    }

    /// The account whose credentials (JSON, with its private key) were stored earlier;
    /// `Refused` when they do not parse.
    pub async fn from_credentials(
        settings: &'a Settings,
        credentials: &[u8],
    ) -> Result<Acme<'a>, CertError> {
        let credentials: AccountCredentials = serde_json::from_slice(credentials)
            .map_err(|e| CertError::Refused(format!("the ACME credentials do not parse: {e}")))?;
        let account = builder(settings)?
            .from_credentials(credentials)
            .await
            .map_err(acme_err("cannot reach the ACME directory"))?;
        Ok(Acme { settings, account })
    }

    /// A new account with the CA, and its credentials to store (a secret: the account key).
    pub async fn register(settings: &'a Settings) -> Result<(Acme<'a>, Vec<u8>), CertError> {
        let acme = &settings.acme;
        let contact: Vec<&str> = acme.contact.iter().map(String::as_str).collect();
        let (account, credentials) = builder(settings)?
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                acme.directory.clone(),
                None,
            )
            .await
            .map_err(acme_err("cannot register an ACME account"))?;
        let json = serde_json::to_vec(&credentials).expect("credentials serialise");
        Ok((Acme { settings, account }, json))
    }

    /// Orders a certificate for `names` and collects its challenges (nothing published yet).
    pub async fn begin(&self, names: &[Domain], method: Method) -> Result<PendingOrder, CertError> {
        let identifiers: Vec<Identifier> = names
            .iter()
            .map(|n| Identifier::Dns(n.to_string()))
            .collect();
        let order = self
            .account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .map_err(acme_err("the CA refused the order"))?;
        collect(order, names, method).await
    }

    /// An order begun earlier (by this edge or another), from its URL, with whatever
    /// challenges it still needs.
    pub async fn resume(
        &self,
        url: &str,
        names: &[Domain],
        method: Method,
    ) -> Result<PendingOrder, CertError> {
        let order = self
            .account
            .order(url.to_string())
            .await
            .map_err(acme_err("cannot read the order at the CA"))?;
        collect(order, names, method).await
    }

    /// Publishes the challenges (`board`, or the DNS hook), tells the CA to look, and
    /// downloads the certificate for `key`. Every published token or record is withdrawn,
    /// whatever happens. A resumed order already finalized goes straight to the download.
    pub async fn complete(
        &self,
        mut pending: PendingOrder,
        key: &rcgen::KeyPair,
        board: &impl TokenBoard,
    ) -> Result<String, CertError> {
        let timeout = self.settings.acme.order_timeout;
        let result = match self.present(&pending, board).await {
            Ok(()) => tokio::time::timeout(timeout, self.finish(&mut pending, key))
                .await
                .unwrap_or_else(|_| {
                    Err(CertError::Acme(format!(
                        "the order did not complete within {timeout:?} ([acme] order_timeout)"
                    )))
                }),
            Err(e) => Err(e),
        };
        self.withdraw(&pending, board).await;
        result
    }

    async fn present(
        &self,
        pending: &PendingOrder,
        board: &impl TokenBoard,
    ) -> Result<(), CertError> {
        if !pending.tokens.is_empty() {
            board.publish(&pending.tokens).await?;
        }
        if pending.method == Method::Dns01Hook && !pending.records.is_empty() {
            for (record, value) in &pending.records {
                self.hook("set", record, value)?;
            }
            tokio::time::sleep(self.settings.acme.dns_propagation).await;
        }
        Ok(())
    }

    async fn withdraw(&self, pending: &PendingOrder, board: &impl TokenBoard) {
        if !pending.tokens.is_empty() {
            board.withdraw(&pending.tokens).await;
        }
        if pending.method == Method::Dns01Hook {
            for (record, value) in &pending.records {
                if let Err(e) = self.hook("clear", record, value) {
                    tracing::warn!("{e}");
                }
            }
        }
    }

    async fn finish(
        &self,
        pending: &mut PendingOrder,
        key: &rcgen::KeyPair,
    ) -> Result<String, CertError> {
        let deadline = Instant::now() + self.settings.acme.order_timeout;
        if pending.order.state().status == OrderStatus::Pending {
            self.validate(pending, deadline).await?;
        }
        if pending.order.state().status == OrderStatus::Ready {
            let csr = csr(&pending.names, key)?;
            pending
                .order
                .finalize_csr(&csr)
                .await
                .map_err(acme_err("the CA refused to finalize the order"))?;
            crate::fault::point("acme:after-finalize");
        }
        let order = &mut pending.order;
        poll_in_rounds(deadline, async |round| order.poll_certificate(round).await)
            .await
            .map_err(acme_err("the CA did not deliver the certificate"))
    }

    /// Tells the CA the challenges are ready and waits until it validated them.
    async fn validate(
        &self,
        pending: &mut PendingOrder,
        deadline: Instant,
    ) -> Result<(), CertError> {
        let kind = match pending.method {
            Method::Http01 => ChallengeType::Http01,
            _ => ChallengeType::Dns01,
        };
        let order = &mut pending.order;
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz.map_err(acme_err("cannot read an authorization"))?;
            if authz.status != AuthorizationStatus::Pending {
                continue;
            }
            if let Some(mut challenge) = authz.challenge(kind.clone()) {
                challenge
                    .set_ready()
                    .await
                    .map_err(acme_err("the CA refused the challenge"))?;
            }
        }
        let status = poll_in_rounds(deadline, async |round| order.poll_ready(round).await)
            .await
            .map_err(acme_err("the CA did not validate the challenges"))?;
        if status != OrderStatus::Ready {
            return Err(CertError::Acme(format!(
                "the CA did not validate the challenges (order {status:?}); check that the names resolve to this edge (HTTP-01) or the hook's records (DNS-01)"
            )));
        }
        Ok(())
    }

    /// The renewal window the CA suggests for `leaf` (RFC 9773), when it offers one.
    pub async fn suggested_window(&self, aki: &[u8], serial: &[u8]) -> Option<(i64, i64)> {
        use rustls::pki_types::Der;
        let id =
            instant_acme::CertificateIdentifier::new(Der::from_slice(aki), Der::from_slice(serial));
        let (info, _) = self.account.renewal_info(&id).await.ok()?;
        let window = info.suggested_window;
        Some((window.start.unix_timestamp(), window.end.unix_timestamp()))
    }

    /// Runs the DNS hook: `HOOK set|clear RECORD VALUE`, bounded by `[acme] hook_timeout`.
    fn hook(&self, verb: &str, record: &str, value: &str) -> Result<(), CertError> {
        let Some(argv) = &self.settings.acme.dns_hook else {
            return Err(CertError::Acme(
                "DNS-01 needs a hook: set [acme] dns_hook (called as HOOK set|clear RECORD VALUE)"
                    .into(),
            ));
        };
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).args([verb, record, value]);
        let out = crate::process::run_with_timeout(&mut cmd, self.settings.acme.hook_timeout)
            .map_err(|e| CertError::Acme(format!("the DNS hook {} failed: {e}", argv[0])))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(CertError::Acme(format!(
                "the DNS hook `{} {verb} {record}` exited with {}: {}",
                argv[0],
                out.status,
                crate::model::bounded(String::from_utf8_lossy(&out.stderr).trim())
            )))
        }
    }
}

/// The order's challenges still to answer, by `method`.
async fn collect(
    mut order: Order,
    names: &[Domain],
    method: Method,
) -> Result<PendingOrder, CertError> {
    let kind = match method {
        Method::Http01 => ChallengeType::Http01,
        Method::Dns01Hook | Method::Dns01Manual => ChallengeType::Dns01,
    };
    let (mut tokens, mut records) = (Vec::new(), Vec::new());
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.map_err(acme_err("cannot read an authorization"))?;
        // Authorizations are reused: a name proven recently needs nothing now.
        if authz.status != AuthorizationStatus::Pending {
            continue;
        }
        let host = authz.identifier().to_string();
        let Some(challenge) = authz.challenge(kind.clone()) else {
            return Err(CertError::Acme(format!(
                "the CA offers no {kind:?} challenge for {host}{}",
                if kind == ChallengeType::Http01 && host.starts_with("*.") {
                    " (wildcards need DNS-01: pass --dns-01)"
                } else {
                    ""
                }
            )));
        };
        let key_auth = challenge.key_authorization();
        match kind {
            ChallengeType::Http01 => tokens.push(Token::new(&challenge.token, key_auth.as_str())?),
            _ => {
                let base = host.strip_prefix("*.").unwrap_or(&host);
                records.push((format!("_acme-challenge.{base}"), key_auth.dns_value()));
            }
        }
    }
    Ok(PendingOrder {
        order,
        names: names.to_vec(),
        method,
        tokens,
        records,
    })
}

/// A CSR for `names` signed by `key`, with an empty subject (the names are its SANs).
fn csr(names: &[Domain], key: &rcgen::KeyPair) -> Result<Vec<u8>, CertError> {
    let fail = |e: rcgen::Error| CertError::Acme(format!("cannot make the CSR: {e}"));
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(Domain::to_string).collect::<Vec<_>>())
            .map_err(fail)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    Ok(params.serialize_request(key).map_err(fail)?.der().to_vec())
}

/// The client for `[acme]`: the CA's directory, trusted through `ca_root` when set.
fn builder(settings: &Settings) -> Result<instant_acme::AccountBuilder, CertError> {
    let acme = &settings.acme;
    if let Some(root) = acme.ca_root.as_ref().filter(|r| !r.exists()) {
        return Err(CertError::Acme(format!(
            "[acme] ca_root {} does not exist; point it at the PEM root of the CA's directory",
            root.display()
        )));
    }
    match &acme.ca_root {
        Some(root) => Account::builder_with_root(root),
        None => Account::builder(),
    }
    .map_err(acme_err("cannot set up the ACME client"))
}

/// One account per directory: changing `[acme] directory` registers a new one. The id names
/// it in `acme_dir`, and in the fleet's etcd.
pub fn account_id(settings: &Settings) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in settings.acme.directory.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn account_path(settings: &Settings) -> PathBuf {
    let id = account_id(settings);
    settings.paths.acme_dir.join(format!("account-{id}.json"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use instant_acme::Error::Timeout;

    #[tokio::test]
    async fn polling_goes_on_round_after_round_until_the_answer() {
        let mut calls = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        let answer = poll_in_rounds(deadline, async |_| {
            calls += 1;
            if calls < 3 {
                Err(Timeout(None))
            } else {
                Ok(calls)
            }
        })
        .await;
        assert_eq!(answer.unwrap(), 3);
    }

    #[tokio::test]
    async fn polling_stops_at_the_deadline_and_at_a_retry_after_past_it() {
        let deadline = Instant::now() + Duration::from_millis(60);
        let answer = poll_in_rounds(deadline, async |_| {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err::<(), _>(Timeout(None))
        })
        .await;
        assert!(matches!(answer, Err(Timeout(None))));

        let mut calls = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        let later = deadline + Duration::from_secs(1);
        let answer = poll_in_rounds(deadline, async |_| {
            calls += 1;
            Err::<(), _>(Timeout(Some(later)))
        })
        .await;
        assert!(matches!(answer, Err(Timeout(Some(_)))));
        assert_eq!(calls, 1, "a Retry-After past the deadline ends the polling");
    }
}
