//! The fleet key: certificates' private keys are sealed with it (AES-256-GCM) before they
//! enter etcd, so etcd, its backups and whoever reads them never hold a key in clear. One
//! `hapctl fleet key` makes it; the operator copies the file (0600) to every edge.
//!
//! The sealed text names the key that sealed it (`key_id`, a short hash of the key) and is
//! bound to what it seals (the additional data, e.g. `cert/shop.example.com`): a sealed key
//! moved to another certificate's record does not open.

use std::path::Path;

use aws_lc_rs::aead::{Aad, Nonce, RandomizedNonceKey, AES_256_GCM, NONCE_LEN};
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::fsutil;

const KEY_LEN: usize = 32;
/// The file's first word: the format, so a future one can be told apart.
const FILE_TAG: &str = "hapctl-fleet-key-v1";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no fleet key at {0}: make one on one edge with `hapctl fleet key`, copy it (mode 0600) to every edge, then retry")]
    Missing(String),
    #[error("the fleet key {path} cannot be used: {why}")]
    Unusable { path: String, why: String },
    #[error("{what} was sealed with fleet key {sealed_with}, and this edge has {ours}: copy the fleet's key file to this edge")]
    OtherKey {
        what: String,
        sealed_with: String,
        ours: String,
    },
    #[error("{0} does not open with the fleet key: it was damaged or moved from another record")]
    Damaged(String),
}

/// The fleet's secret key. `Debug` shows only its id.
pub struct FleetKey {
    key: RandomizedNonceKey,
    id: String,
}

impl std::fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FleetKey({})", self.id)
    }
}

/// A value sealed with the fleet key, as stored in etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    pub key_id: String,
    /// Base64 of the nonce then the ciphertext and its tag.
    pub data: String,
}

impl FleetKey {
    /// A new random key and the text of its file.
    pub fn generate() -> Result<(FleetKey, String), SealError> {
        let mut bytes = [0u8; KEY_LEN];
        aws_lc_rs::rand::fill(&mut bytes).map_err(|_| SealError::Unusable {
            path: "(new)".into(),
            why: "the system's random source failed".into(),
        })?;
        let text = format!("{FILE_TAG} {}\n", B64.encode(bytes));
        Ok((FleetKey::from_bytes(&bytes), text))
    }

    /// Makes the key file at `path` (0600 in a 0700 folder); refuses to replace one, since
    /// every certificate in etcd is sealed with the key it holds.
    pub fn create(path: &Path) -> Result<FleetKey, SealError> {
        let unusable = |why: String| SealError::Unusable {
            path: path.display().to_string(),
            why,
        };
        if path.exists() {
            return Err(unusable(
                "it exists already; a fleet has one key: copy that file to new edges".into(),
            ));
        }
        let (key, text) = FleetKey::generate()?;
        fsutil::write_secret(path, text.as_bytes()).map_err(|e| unusable(e.to_string()))?;
        Ok(key)
    }

    /// Reads the key file: it must be the owner's alone (0600) and hold one key.
    pub fn load(path: &Path) -> Result<FleetKey, SealError> {
        use std::os::unix::fs::PermissionsExt;
        let unusable = |why: String| SealError::Unusable {
            path: path.display().to_string(),
            why,
        };
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SealError::Missing(path.display().to_string()))
            }
            Err(e) => return Err(unusable(e.to_string())),
        };
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(unusable(format!(
                "its mode is {:o}; it must be 0600 (chmod 600 it)",
                meta.permissions().mode() & 0o777
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| unusable(e.to_string()))?;
        let bytes = text
            .trim()
            .strip_prefix(FILE_TAG)
            .and_then(|rest| B64.decode(rest.trim()).ok())
            .filter(|b| b.len() == KEY_LEN)
            .ok_or_else(|| unusable(format!("it is not a {FILE_TAG} file")))?;
        Ok(FleetKey::from_bytes(&bytes))
    }

    fn from_bytes(bytes: &[u8]) -> FleetKey {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
        let id = digest.as_ref()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        FleetKey {
            key: RandomizedNonceKey::new(&AES_256_GCM, bytes).expect("a 32-byte AES-256 key"),
            id,
        }
    }

    /// What `hapctl fleet key` and the error of an edge with another key show.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Seals `plain`, bound to `context` (the record it belongs to).
    pub fn seal(&self, context: &str, plain: &[u8]) -> Sealed {
        let mut data = plain.to_vec();
        let nonce = self
            .key
            .seal_in_place_append_tag(Aad::from(context.as_bytes()), &mut data)
            .expect("AES-GCM sealing of a small value");
        let mut out = nonce.as_ref().to_vec();
        out.extend_from_slice(&data);
        Sealed {
            key_id: self.id.clone(),
            data: B64.encode(out),
        }
    }

    /// Opens what `seal` made for the same `context`.
    pub fn open(&self, context: &str, sealed: &Sealed) -> Result<Vec<u8>, SealError> {
        if sealed.key_id != self.id {
            return Err(SealError::OtherKey {
                what: context.to_string(),
                sealed_with: sealed.key_id.clone(),
                ours: self.id.clone(),
            });
        }
        let damaged = || SealError::Damaged(context.to_string());
        let mut bytes = B64.decode(&sealed.data).map_err(|_| damaged())?;
        if bytes.len() < NONCE_LEN {
            return Err(damaged());
        }
        let mut data = bytes.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| damaged())?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut data)
            .map_err(|_| damaged())?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_its_context() {
        let (key, _) = FleetKey::generate().unwrap();
        let sealed = key.seal("cert/a", b"-----BEGIN PRIVATE KEY-----");
        assert!(!sealed.data.contains("PRIVATE"));
        assert_eq!(
            key.open("cert/a", &sealed).unwrap(),
            b"-----BEGIN PRIVATE KEY-----"
        );
        assert_eq!(
            key.open("cert/b", &sealed),
            Err(SealError::Damaged("cert/b".into()))
        );
        let (other, _) = FleetKey::generate().unwrap();
        assert!(matches!(
            other.open("cert/a", &sealed),
            Err(SealError::OtherKey { .. })
        ));
        let mut tampered = sealed.clone();
        tampered.data.replace_range(20..24, "AAAA");
        assert!(key.open("cert/a", &tampered).is_err());
    }

    #[test]
    fn the_key_file_is_made_once_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/fleet.key");
        let made = FleetKey::create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let loaded = FleetKey::load(&path).unwrap();
        assert_eq!(loaded.id(), made.id());
        let sealed = made.seal("x", b"secret");
        assert_eq!(loaded.open("x", &sealed).unwrap(), b"secret");
        assert!(
            FleetKey::create(&path).is_err(),
            "a second key would orphan every sealed certificate"
        );
        assert!(!format!("{loaded:?}").contains(&std::fs::read_to_string(&path).unwrap()[20..]));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            FleetKey::load(&path),
            Err(SealError::Unusable { .. })
        ));
        assert!(matches!(
            FleetKey::load(&dir.path().join("none")),
            Err(SealError::Missing(_))
        ));
    }
}
