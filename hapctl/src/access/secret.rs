//! Token secrets: 256 random bits in hex, stored only as their SHA-256 (the secret has too
//! much entropy for a slow hash to add anything) and compared in constant time.

use std::fmt;

/// A token's secret, as given once to the operator. Its `Debug` never shows it.
pub struct Secret(String);

impl Secret {
    pub fn generate() -> std::io::Result<Secret> {
        random_hex().map(Secret)
    }

    /// What a client sent (surrounding whitespace is not part of it).
    pub fn given(text: &str) -> Secret {
        Secret(text.trim().to_string())
    }

    /// The only way to see the secret: to print it once or write it to its 0600 file.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    pub fn hash(&self) -> TokenHash {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, self.0.as_bytes());
        TokenHash(d.as_ref().to_vec())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// The SHA-256 of a secret: what the database keeps.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHash(pub Vec<u8>);

impl TokenHash {
    /// Equal in time independent of where they differ.
    pub fn matches(&self, stored: &[u8]) -> bool {
        aws_lc_rs::constant_time::verify_slices_are_equal(&self.0, stored).is_ok()
    }
}

/// 256 random bits in hex (secrets, session ids, CSRF tokens).
pub fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    aws_lc_rs::rand::fill(&mut bytes)
        .map_err(|_| std::io::Error::other("the system gave no random numbers"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_matches_its_hash_only() {
        let a = Secret::generate().unwrap();
        let b = Secret::generate().unwrap();
        assert_eq!(a.reveal().len(), 64);
        assert_ne!(a.reveal(), b.reveal());
        assert!(a.hash().matches(&a.hash().0));
        assert!(!a.hash().matches(&b.hash().0));
        assert!(Secret::given(&format!(" {}\n", a.reveal()))
            .hash()
            .matches(&a.hash().0));
        assert!(!format!("{a:?}").contains(a.reveal()));
    }
}
