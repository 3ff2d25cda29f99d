//! TLS certificates: parsed and checked before HAProxy sees them, issued by ACME or uploaded,
//! installed and renewed through the runtime API (no reload), files written first.
//!
//! - `pem`, `key`, `x509`, `bundle`: pure parsing and validation of PEM bundles.
//! - `crtlist`: which certificate serves which name, and the crt-list file (pure).
//! - `certs`: the certificate path: files, runtime install with read-back and a handshake,
//!   the fallback to a checked reload, removal, and reconciliation after a crash.
//! - `challenge`: the HTTP-01 token map HAProxy answers from.
//! - `acme`: orders with the CA (HTTP-01, DNS-01 through a hook).
//! - `renew`: when each certificate is due, and the renewal runs.
//! - `probe`: a real handshake with SNI to see what the edge serves.

pub mod acme;
pub mod bundle;
pub mod certs;
pub mod challenge;
// Test material, kept in the test kit: not part of the library.
#[cfg(test)]
#[path = "../../../testkit/src/tls_corpus/mod.rs"]
mod corpus;
pub mod crtlist;
mod installed;
pub mod key;
pub mod pem;
pub mod probe;
pub mod renew;
pub mod x509;

pub use bundle::{Bundle, BundleCheck, BundleError};

/// Runs `openssl ARGS` with `input` on its standard input (tests only). The test command
/// installs openssl, so a missing one fails the test instead of skipping it.
#[cfg(test)]
pub(crate) fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl runs (scripts/test.sh installs it)");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl {args:?} failed");
    out.stdout
}
pub use certs::{CertError, Certs, InstallReport, Installed};
pub use installed::read as installed_info;
pub use key::KeyType;
pub use x509::CertInfo;
