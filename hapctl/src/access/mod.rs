//! Who may change the edge, and who did (`docs/access.md`): named API tokens with scopes
//! (only their hashes stored), the audit trail of every change, and the slowing down of
//! wrong tokens. The database is `access.db` (`store::AccessStore`).

pub mod audit;
mod secret;
mod throttle;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use secret::{random_hex, Secret, TokenHash};
pub use throttle::Throttle;

use crate::clock::unix_now;
use crate::model::{Scopes, TokenName};
use crate::store::{
    AccessStore, AuditAttempt, AuditFilter, AuditRecord, AuditResult, StoreError, TokenRecord,
};

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("a token named {0} exists; `hapctl token rotate {0}` gives it a new secret")]
    Exists(TokenName),
    #[error("no token named {0}; `hapctl token ls` lists them")]
    NotFound(TokenName),
    #[error("the token `default` is the one in [api] token_file, which the command line uses to reach the daemon; rotate it instead (`hapctl token rotate default`)")]
    KeepDefault,
    #[error("cannot read the API token from {path}: {source}; run `hapctl init` or set [api] token_file")]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the API token file {0} is empty; `hapctl token rotate default` writes a new one")]
    EmptyTokenFile(PathBuf),
    #[error("cannot make a new secret: {0}")]
    Random(std::io::Error),
    #[error("the audit record could not be written ({0}); nothing was changed")]
    AuditUnavailable(String),
}

/// A token as `hapctl token ls` shows it: never its secret or hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenInfo {
    pub name: String,
    pub scopes: Scopes,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub expired: bool,
}

/// Who the audit trail names when no token does: parentheses, which no token name can hold.
pub const WHO_UNKNOWN: &str = "(unknown)";
/// Who acts under `hapctl serve --no-auth`.
pub const WHO_NO_AUTH: &str = "(no-auth)";

/// Who a request's token says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: TokenName,
    pub scopes: Scopes,
}

/// The access database of one state directory, shared by every request of the daemon.
pub struct Access {
    store: Mutex<AccessStore>,
    token_file: PathBuf,
}

impl Access {
    pub fn open(database: &Path, token_file: &Path) -> Result<Access, AccessError> {
        Ok(Access {
            store: Mutex::new(AccessStore::open(database)?),
            token_file: token_file.to_path_buf(),
        })
    }

    fn store(&self) -> std::sync::MutexGuard<'_, AccessStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the token in `[api] token_file` the admin token `default` (how an edge from
    /// before named tokens keeps its one token working): added when missing, its hash
    /// refreshed when the file was replaced.
    pub fn adopt_token_file(&self) -> Result<(), AccessError> {
        let text =
            std::fs::read_to_string(&self.token_file).map_err(|source| AccessError::TokenFile {
                path: self.token_file.clone(),
                source,
            })?;
        if text.trim().is_empty() {
            return Err(AccessError::EmptyTokenFile(self.token_file.clone()));
        }
        let hash = Secret::given(&text).hash();
        let name = TokenName::default_token();
        let store = self.store();
        match store.token(&name)? {
            Some(t) if hash.matches(&t.hash) => {}
            Some(_) => {
                store.set_hash(&name, &hash.0)?;
            }
            None => {
                store.add_token(&TokenRecord {
                    name,
                    hash: hash.0,
                    scopes: Scopes::admin(),
                    created_at: unix_now(),
                    expires_at: None,
                })?;
            }
        }
        Ok(())
    }

    /// The live token whose secret `given` is, if any. Every stored hash is compared, each in
    /// constant time.
    pub fn authenticate(&self, given: &str, now: i64) -> Result<Option<Identity>, AccessError> {
        let hash = Secret::given(given).hash();
        let tokens = self.store().tokens()?;
        let found = tokens
            .into_iter()
            .filter(|t| hash.matches(&t.hash))
            .find(|t| t.expires_at.is_none_or(|at| at > now));
        Ok(found.map(|t| Identity {
            name: t.name,
            scopes: t.scopes,
        }))
    }

    /// A new token; its secret is returned to be shown once.
    pub fn add(
        &self,
        name: TokenName,
        scopes: Scopes,
        expires_at: Option<i64>,
    ) -> Result<Secret, AccessError> {
        let secret = Secret::generate().map_err(AccessError::Random)?;
        let record = TokenRecord {
            name: name.clone(),
            hash: secret.hash().0,
            scopes,
            created_at: unix_now(),
            expires_at,
        };
        if !self.store().add_token(&record)? {
            return Err(AccessError::Exists(name));
        }
        Ok(secret)
    }

    /// A new secret for `name`; the old one stops working at once. For `default`, the token
    /// file is rewritten (0600) first.
    pub fn rotate(&self, name: &TokenName) -> Result<Secret, AccessError> {
        if self.store().token(name)?.is_none() {
            return Err(AccessError::NotFound(name.clone()));
        }
        let secret = Secret::generate().map_err(AccessError::Random)?;
        if name.is_default() {
            crate::fsutil::write_secret(
                &self.token_file,
                format!("{}\n", secret.reveal()).as_bytes(),
            )
            .map_err(|source| AccessError::TokenFile {
                path: self.token_file.clone(),
                source,
            })?;
        }
        self.store().set_hash(name, &secret.hash().0)?;
        Ok(secret)
    }

    pub fn remove(&self, name: &TokenName) -> Result<(), AccessError> {
        if name.is_default() {
            return Err(AccessError::KeepDefault);
        }
        match self.store().remove_token(name)? {
            true => Ok(()),
            false => Err(AccessError::NotFound(name.clone())),
        }
    }

    pub fn list(&self, now: i64) -> Result<Vec<TokenInfo>, AccessError> {
        Ok(self
            .store()
            .tokens()?
            .into_iter()
            .map(|t| TokenInfo {
                name: t.name.to_string(),
                scopes: t.scopes,
                created_at: t.created_at,
                expires_at: t.expires_at,
                expired: t.expires_at.is_some_and(|at| at <= now),
            })
            .collect())
    }

    /// Writes the attempt of a change before it is made; an error means the change must not
    /// be made.
    pub fn begin(&self, attempt: &AuditAttempt) -> Result<i64, AccessError> {
        if crate::fault::fails("audit-write") {
            return Err(AccessError::AuditUnavailable("fault injected".into()));
        }
        self.store()
            .begin_audit(attempt)
            .map_err(|e| AccessError::AuditUnavailable(e.to_string()))
    }

    pub fn finish(&self, id: i64, result: &AuditResult) -> Result<(), AccessError> {
        Ok(self.store().finish_audit(id, result)?)
    }

    /// A record made in one go, attempt and result (a refused request, a sign-in).
    pub fn event(&self, attempt: &AuditAttempt, status: u16) -> Result<(), AccessError> {
        let result = AuditResult {
            at_ms: attempt.at_ms,
            status,
            outcome: None,
        };
        Ok(self.store().audit_event(attempt, &result)?)
    }

    pub fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, AccessError> {
        Ok(self.store().audit(filter)?)
    }

    /// Forgets the records older than `retention` before `now_ms`.
    pub fn prune(&self, now_ms: i64, retention: std::time::Duration) -> Result<usize, AccessError> {
        let horizon = now_ms.saturating_sub(retention.as_millis() as i64);
        Ok(self.store().prune_audit(horizon)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Scope;

    fn access(dir: &Path) -> Access {
        std::fs::write(dir.join("api-token"), "initial-secret\n").unwrap();
        let a = Access::open(&dir.join("access.db"), &dir.join("api-token")).unwrap();
        a.adopt_token_file().unwrap();
        a
    }

    #[test]
    fn the_token_file_is_the_admin_token_default_and_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = access(dir.path());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("access.db"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "access.db mode {mode:o}");
        let id = a.authenticate("initial-secret", 0).unwrap().unwrap();
        assert!(id.name.is_default() && id.scopes.covers(Scope::Admin));
        std::fs::write(dir.path().join("api-token"), "replaced\n").unwrap();
        a.adopt_token_file().unwrap();
        assert!(a.authenticate("initial-secret", 0).unwrap().is_none());
        assert!(a.authenticate("replaced", 0).unwrap().is_some());
        let rotated = a.rotate(&TokenName::default_token()).unwrap();
        let file = std::fs::read_to_string(dir.path().join("api-token")).unwrap();
        assert_eq!(file.trim(), rotated.reveal());
        assert!(a.authenticate(rotated.reveal(), 0).unwrap().is_some());
        assert!(matches!(
            a.remove(&TokenName::default_token()),
            Err(AccessError::KeepDefault)
        ));
    }

    #[test]
    fn tokens_are_added_rotated_expired_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let a = access(dir.path());
        let name: TokenName = "blocker".parse().unwrap();
        let secret = a
            .add(name.clone(), "blocks".parse().unwrap(), Some(100))
            .unwrap();
        let id = a.authenticate(secret.reveal(), 99).unwrap().unwrap();
        assert_eq!(id.name, name);
        assert!(id.scopes.covers(Scope::Blocks) && !id.scopes.covers(Scope::Domains));
        assert!(
            a.authenticate(secret.reveal(), 100).unwrap().is_none(),
            "expired"
        );
        assert!(matches!(
            a.add(name.clone(), Scopes::admin(), None),
            Err(AccessError::Exists(_))
        ));
        let listed = a.list(100).unwrap();
        assert!(listed.iter().any(|t| t.name == "blocker" && t.expired));
        let new = a.rotate(&name).unwrap();
        assert!(a.authenticate(secret.reveal(), 0).unwrap().is_none());
        assert!(a.authenticate(new.reveal(), 0).unwrap().is_some());
        a.remove(&name).unwrap();
        assert!(a.authenticate(new.reveal(), 0).unwrap().is_none());
        assert!(matches!(a.remove(&name), Err(AccessError::NotFound(_))));
        // Nothing in the database is a secret.
        let db = std::fs::read(dir.path().join("access.db")).unwrap();
        for s in [&secret, &new] {
            assert!(!db.windows(64).any(|w| w == s.reveal().as_bytes()));
        }
    }

    #[test]
    fn the_trail_is_append_only_but_for_retention() {
        let dir = tempfile::tempdir().unwrap();
        let a = access(dir.path());
        let attempt = |at_ms| AuditAttempt {
            at_ms,
            who: "blocker".into(),
            via: "api".into(),
            peer: "127.0.0.1:1".into(),
            forwarded: None,
            action: "POST /v1/blocked-ips".into(),
            objects: vec!["192.0.2.1".into()],
            summary: "ip=192.0.2.1".into(),
        };
        let old = a.begin(&attempt(1_000)).unwrap();
        let new = a.begin(&attempt(5_000)).unwrap();
        let done = AuditResult {
            at_ms: 5_001,
            status: 200,
            outcome: Some("applied".into()),
        };
        a.finish(new, &done).unwrap();
        let conn = rusqlite::Connection::open(dir.path().join("access.db")).unwrap();
        assert!(conn.execute("UPDATE audit SET who = 'x'", []).is_err());
        assert!(conn.execute("DELETE FROM audit", []).is_err());
        assert!(conn
            .execute("UPDATE audit_horizon SET horizon_ms = -1", [])
            .is_err());
        assert_eq!(
            a.prune(3_000, std::time::Duration::from_millis(1_000))
                .unwrap(),
            1
        );
        let all = a
            .audit(&AuditFilter {
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].id, new);
        assert_ne!(all[0].id, old);
        assert_eq!(all[0].result, Some(done));
        let by_object = AuditFilter {
            object: Some("192.0.2".into()),
            who: Some("blocker".into()),
            limit: 10,
            ..Default::default()
        };
        assert_eq!(a.audit(&by_object).unwrap().len(), 1);
    }
}
