//! Reading back a PEM file hapctl wrote: it was checked before it was written, so this only
//! splits it (no date or name checks: an expired certificate must still be readable).

use super::pem::{encode, parse_blocks, Label};
use super::x509::CertInfo;

/// An installed certificate file that cannot be read back (damaged, or without its key):
/// the sentence to show. The certificate path refuses with it (`CertError::Refused`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DamagedFile(String);

/// The leaf's details and the public chain (leaf first) of an installed PEM file.
pub fn read(text: &str) -> Result<(CertInfo, String), DamagedFile> {
    let damaged = |why: String| {
        DamagedFile(format!(
            "an installed certificate file is damaged ({why}); import the certificate again"
        ))
    };
    let blocks = parse_blocks(text.as_bytes()).map_err(|e| damaged(e.to_string()))?;
    let certs: Vec<_> = blocks
        .iter()
        .filter(|b| b.label == Label::Certificate)
        .collect();
    let leaf = certs
        .first()
        .ok_or_else(|| damaged("no certificate".into()))?;
    let info = CertInfo::from_der(&leaf.der).map_err(|e| damaged(e.to_string()))?;
    let chain = certs
        .iter()
        .map(|b| encode("CERTIFICATE", &b.der))
        .collect();
    Ok((info, chain))
}

/// The private key block of an installed PEM file (for the routes made to download it).
pub fn key_pem(text: &str) -> Result<String, DamagedFile> {
    let blocks = parse_blocks(text.as_bytes())
        .map_err(|e| DamagedFile(format!("the certificate file is damaged ({e})")))?;
    blocks
        .iter()
        .find(|b| b.label.is_key())
        .map(|b| encode(b.label.as_str(), &b.der))
        .ok_or_else(|| DamagedFile("the certificate file holds no key".into()))
}
