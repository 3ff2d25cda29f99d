//! HTTP-01 tokens, answered by HAProxy itself from a map: no extra listener, no reload, on
//! every host and both binds.
//!
//! A token is written to the map file atomically (so a reload during an order keeps it), then
//! added to the running worker and read back. The map belongs to this module: nothing else
//! writes it.

use std::time::Duration;

use super::certs::CertError;
use crate::fsutil::{self, LockFile};
use crate::haproxy::{Lookup, Master, RuntimeMap};
use crate::render::{FileId, HEADER};
use crate::settings::Settings;

const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// A challenge token and its key authorization, checked to be base64url (what RFC 8555 allows),
/// so nothing else reaches the map file or the runtime API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    token: String,
    key_authorization: String,
}

fn is_base64url(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Token {
    pub fn new(token: &str, key_authorization: &str) -> Result<Token, CertError> {
        let ok = is_base64url(token)
            && key_authorization
                .split_once('.')
                .is_some_and(|(t, thumb)| t == token && is_base64url(thumb));
        if ok {
            Ok(Token {
                token: token.to_string(),
                key_authorization: key_authorization.to_string(),
            })
        } else {
            Err(CertError::Acme(format!(
                "the CA sent a challenge token that is not base64url: {:?}",
                crate::model::bounded(token)
            )))
        }
    }

    /// The token: the last segment of the path the CA fetches.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// What HAProxy answers for it.
    pub fn key_authorization(&self) -> &str {
        &self.key_authorization
    }
}

/// The token map of one edge.
pub struct Challenges<'a> {
    settings: &'a Settings,
}

impl<'a> Challenges<'a> {
    pub fn new(settings: &'a Settings) -> Challenges<'a> {
        Challenges { settings }
    }

    fn path(&self) -> std::path::PathBuf {
        FileId::AcmeMap.path(&self.settings.paths)
    }

    fn runtime(&self) -> RuntimeMap {
        RuntimeMap::new(
            Master::from_settings(self.settings).socket().clone(),
            self.path().display().to_string(),
        )
    }

    /// Rewrites the file with `change` applied to its entries; returns them.
    fn rewrite(&self, change: impl FnOnce(&mut Vec<(String, String)>)) -> Result<(), CertError> {
        let path = self.path();
        let io = |source| CertError::Io {
            context: format!("cannot update {}", path.display()),
            source,
        };
        let text = fsutil::read_optional(&path)
            .map_err(io)?
            .unwrap_or_default();
        let mut entries: Vec<(String, String)> = String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        change(&mut entries);
        let mut out = format!("# {HEADER}\n");
        for (k, v) in &entries {
            out.push_str(&format!("{k} {v}\n"));
        }
        fsutil::write_atomic(&path, out.as_bytes(), fsutil::DEFAULT_MODE).map_err(io)
    }

    /// Makes HAProxy answer `/.well-known/acme-challenge/<token>`. When HAProxy runs, the
    /// running worker must answer it before this returns.
    pub fn publish(&self, token: &Token) -> Result<(), CertError> {
        let _lock = self.lock()?;
        self.rewrite(|entries| {
            entries.retain(|(k, _)| *k != token.token);
            entries.push((token.token.clone(), token.key_authorization.clone()));
        })?;
        if Master::from_settings(self.settings).show_proc().is_err() {
            return Ok(());
        }
        let map = self.runtime();
        let refused = |e: crate::haproxy::RuntimeError| {
            CertError::Acme(format!("HAProxy did not take the HTTP-01 token: {e}"))
        };
        map.remove(&token.token).map_err(refused)?;
        map.add(&token.token, &token.key_authorization)
            .map_err(refused)?;
        match map.lookup(&token.token).map_err(refused)? {
            Lookup::Found(_) => Ok(()),
            Lookup::NotFound => Err(CertError::Acme(
                "HAProxy accepted the HTTP-01 token but does not have it".into(),
            )),
        }
    }

    /// Stops answering a token (after its order, success or not).
    pub fn withdraw(&self, token: &Token) -> Result<(), CertError> {
        let _lock = self.lock()?;
        self.rewrite(|entries| entries.retain(|(k, _)| *k != token.token))?;
        if Master::from_settings(self.settings).show_proc().is_ok() {
            self.runtime()
                .remove(&token.token)
                .map_err(|e| CertError::Acme(format!("cannot withdraw the HTTP-01 token: {e}")))?;
        }
        Ok(())
    }

    fn lock(&self) -> Result<LockFile, CertError> {
        Ok(LockFile::acquire(
            &self.settings.paths.run_dir.join("acme-map.lock"),
            LOCK_TIMEOUT,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_base64url_tokens_reach_the_map() {
        assert!(Token::new("abc_-1", "abc_-1.thumb").is_ok());
        for (t, k) in [
            ("", "."),
            ("a b", "a b.t"),
            ("a\n", "a\n.t"),
            ("abc", "abd.t"),
            ("abc", "abc"),
            ("abc", "abc.t t"),
        ] {
            assert!(Token::new(t, k).is_err(), "{t:?} {k:?}");
        }
    }
}
