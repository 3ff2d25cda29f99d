//! Reading back a PEM file hapctl wrote: it was checked before it was written, so this only
//! splits it (no date or name checks: an expired certificate must still be readable).

use super::certs::CertError;
use super::pem::{encode, parse_blocks, Label};
use super::x509::CertInfo;

/// The leaf's details and the public chain (leaf first) of an installed PEM file.
pub fn read(text: &str) -> Result<(CertInfo, String), CertError> {
    let damaged = |why: String| {
        CertError::Refused(format!(
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
pub fn key_pem(text: &str) -> Result<String, CertError> {
    let blocks = parse_blocks(text.as_bytes())
        .map_err(|e| CertError::Refused(format!("the certificate file is damaged ({e})")))?;
    blocks
        .iter()
        .find(|b| b.label.is_key())
        .map(|b| encode(b.label.as_str(), &b.der))
        .ok_or_else(|| CertError::Refused("the certificate file holds no key".into()))
}
