//! Test material: a throwaway PKI made with `rcgen`, and corpora of bad and good bundles with
//! the outcome each must have. Part of the kit, so the CLI and API integration tests can send
//! exactly the bundles the unit tests check; hapctl's own unit tests (`tls::bundle`,
//! `tls::key`) compile these same files into their test build (they cannot use the kit, which
//! links hapctl), which is why every path into hapctl here is spelled `hapctl::`.
//!
//! Validity dates are days before and after a given `now`: the `*_at` functions take the real
//! clock (for tests of the binary), the others use the fixed [`NOW`] (for unit tests, whose
//! messages then show fixed dates).
//!
//! Nothing here is secret: every key is generated per run, except the few fixed keys of
//! `keys.rs`, which exist only to be refused or accepted (made once with OpenSSL).

mod accepted;
mod hostile;
mod keys;
pub(crate) mod pki;

use hapctl::tls::key::KeyType;
use hapctl::tls::pem::parse_blocks;

pub use accepted::{accepted_corpus, accepted_corpus_at};
pub use hostile::{hostile_corpus, hostile_corpus_at};
#[cfg(test)]
pub use keys::fake_rsa_pkcs1_der;
pub use pki::Pki;

/// The fixed `now` of [`hostile_corpus`] and [`accepted_corpus`]: 2030-01-01T00:00:00Z.
pub const NOW: i64 = 1_893_456_000;

/// A bundle that must be refused.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    pub input: Vec<u8>,
    pub now: i64,
    pub must_cover: Vec<String>,
    /// The expected `BundleError::code()`.
    pub code: &'static str,
    /// A fragment the error message must contain.
    pub fragment: String,
}

/// A bundle that must be accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub name: &'static str,
    pub input: Vec<u8>,
    pub now: i64,
    pub must_cover: Vec<String>,
    /// Expected `CertInfo::names` of the leaf.
    pub names: Vec<String>,
    pub key_type: KeyType,
    /// Certificates in the normalised chain.
    pub served: usize,
}

/// The DER of the first block of `pem`.
pub(super) fn pem_body(pem: &str) -> Vec<u8> {
    parse_blocks(pem.as_bytes())
        .expect("test PEM")
        .remove(0)
        .der
}

/// `pem` with the character at (0-based) `line`, `column` replaced.
pub(super) fn replace_char(pem: &str, line: usize, column: usize, c: char) -> String {
    let mut lines: Vec<String> = pem.lines().map(str::to_owned).collect();
    lines[line].replace_range(column..column + 1, &c.to_string());
    lines.join("\n") + "\n"
}

pub(super) fn cat(parts: &[&str]) -> Vec<u8> {
    parts.concat().into_bytes()
}

pub(super) fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The base64 lines of the private keys in `input`: what no message may contain.
pub fn key_fragments(input: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(input);
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("-----BEGIN") {
            inside = line.contains("PRIVATE KEY");
        } else if line.starts_with("-----END") {
            inside = false;
        } else if inside && line.len() >= 16 && !line.contains(':') {
            out.push(line.to_string());
        }
    }
    out
}
