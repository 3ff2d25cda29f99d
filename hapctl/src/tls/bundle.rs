//! A certificate bundle: an uploaded PEM file (or an ACME-issued chain with our key) checked
//! the way a TLS client will check it, and normalised into what HAProxy loads.
//!
//! Checks run in a fixed order so that one input always gives the same error: PEM structure,
//! block counts, the key, each certificate, duplicates, the leaf, the chain order and its
//! signatures, the key against the leaf, validity dates, then the names.

use std::fmt;

use rcgen::KeyPair;
use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::GeneralName;
use x509_parser::x509::X509Version;

use super::key::{self, KeyError, KeyType};
use super::pem::{self, bounded, Label, PemBlock, PemError};
use super::x509::{self, covers, rfc3339, CertInfo, CertParseError};

/// More is a mistake: real chains are two or three certificates.
pub const MAX_CERTIFICATES: usize = 10;

/// What the caller requires of the bundle besides internal consistency.
#[derive(Debug, Clone, Copy)]
pub struct BundleCheck<'a> {
    /// Unix seconds to check validity dates against.
    pub now: i64,
    /// Names the leaf must cover (see [`covers`]); empty means no requirement.
    pub must_cover: &'a [String],
}

/// A checked bundle. `Debug` leaves out the PEM that holds the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The leaf certificate.
    pub info: CertInfo,
    /// Leaf, then intermediates, as normalised PEM; a self-signed root at the end of the
    /// input is dropped (clients must have it already, and serving it only costs bytes).
    pub chain_pem: String,
    /// The private key as PEM, in the form it came in: PKCS#8, SEC1 or PKCS#1 (PKCS#8 for a
    /// key hapctl generated). HAProxy loads all three.
    pub key_pem: String,
    /// Exactly what HAProxy loads: `chain_pem` then `key_pem` (LF, final newline).
    pub haproxy_pem: String,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bundle")
            .field("info", &self.info)
            .field("chain_pem", &self.chain_pem)
            .field("key_pem", &"[private key elided]")
            .field("haproxy_pem", &"[chain and private key elided]")
            .finish()
    }
}

/// Why a bundle was refused. Messages name the problem and what to do, are bounded in size,
/// and never contain key material; [`BundleError::code`] is the stable identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("certificate #{position} (the CERTIFICATE block on line {line}): {source}; export it again in PEM form")]
    Certificate {
        position: usize,
        line: usize,
        source: CertParseError,
    },
    #[error("the bundle has no certificate: add the server certificate and its intermediates as -----BEGIN CERTIFICATE----- blocks, the server certificate first")]
    NoCertificate,
    #[error("the bundle has no private key: add the unencrypted private key of the certificate as a -----BEGIN PRIVATE KEY----- block")]
    NoKey,
    #[error("the bundle has {count} private keys (blocks on lines {lines}): keep only the one that belongs to the certificate")]
    TooManyKeys { count: usize, lines: String },
    #[error("the bundle has {count} certificates, more than the {max} allowed: send the server certificate and its intermediates only", max = MAX_CERTIFICATES)]
    TooManyCertificates { count: usize },
    #[error("the issued chain has a {label} block on line {line}: a CA returns certificates only, so this is not an issued chain")]
    KeyInChain { label: &'static str, line: usize },
    #[error("certificate #{position} is a copy of certificate #{first} ({subject}): remove the repeated block")]
    Duplicate {
        position: usize,
        first: usize,
        subject: String,
    },
    #[error("certificate #1 ({subject}) is a CA certificate (basicConstraints CA:TRUE), not a server certificate: put the certificate issued for your domains first")]
    LeafIsCa { subject: String },
    #[error("certificate #1 ({first}) is a CA certificate and certificate #{leaf} ({subject}) is the server certificate: the leaf must come first, then its issuer, then that one's issuer")]
    LeafNotFirst {
        leaf: usize,
        subject: String,
        first: String,
    },
    #[error("certificate #1 ({subject}) is not for TLS servers (its extendedKeyUsage lacks serverAuth): use a server certificate")]
    NotServerCertificate { subject: String },
    #[error("certificate #{position} ({subject}) is not the issuer of certificate #{previous}, which was issued by {issuer}: the chain is out of order; put the leaf first, then each certificate's issuer right after it")]
    Misordered {
        position: usize,
        previous: usize,
        subject: String,
        issuer: String,
    },
    #[error("certificate #{position} ({subject}) is unrelated to the other certificates: it did not issue certificate #{previous}, which was issued by {issuer}; remove it and put that issuer's certificate there")]
    Unrelated {
        position: usize,
        previous: usize,
        subject: String,
        issuer: String,
    },
    #[error("certificate #{position} has the name of the issuer of certificate #{previous} ({issuer}) but its key did not sign it: it is another CA certificate with the same name, so use the intermediate delivered with this certificate")]
    WrongIssuerKey {
        position: usize,
        previous: usize,
        issuer: String,
    },
    #[error("certificate #{previous} is signed with an algorithm hapctl cannot verify ({algorithm}): use a chain signed with ECDSA P-256/P-384 or RSA")]
    UnsupportedSignature { previous: usize, algorithm: String },
    #[error("certificate #{position} ({subject}) signed certificate #{previous} but is not a CA certificate (no basicConstraints CA:TRUE), so clients will refuse the chain: use the CA's real intermediate")]
    IssuerNotCa {
        position: usize,
        previous: usize,
        subject: String,
    },
    #[error("the private key does not belong to the certificate {subject}{types}: use the key the certificate request was made with")]
    KeyMismatch { subject: String, types: String },
    #[error("the certificate {subject} expired on {not_after} (now is {now}): renew it and send the new certificate")]
    LeafExpired {
        subject: String,
        not_after: String,
        now: String,
    },
    #[error("the certificate {subject} is not valid before {not_before} (now is {now}): wait until then, or check this host's clock")]
    LeafNotYetValid {
        subject: String,
        not_before: String,
        now: String,
    },
    #[error("intermediate certificate #{position} ({subject}) expired on {not_after} (now is {now}): get the current intermediate from the CA")]
    ChainExpired {
        position: usize,
        subject: String,
        not_after: String,
        now: String,
    },
    #[error("intermediate certificate #{position} ({subject}) is not valid before {not_before} (now is {now}): use the intermediate the CA currently issues with")]
    ChainNotYetValid {
        position: usize,
        subject: String,
        not_before: String,
        now: String,
    },
    #[error("the certificate does not cover {missing}; it covers {names}: use a certificate issued for all of the domain's names (a wildcard covers one level only, not the bare domain)")]
    NamesNotCovered { missing: String, names: String },
}

impl BundleError {
    /// A stable machine-readable code (for API error bodies and tests).
    pub fn code(&self) -> &'static str {
        match self {
            BundleError::Pem(e) => e.code(),
            BundleError::Key(e) => e.code(),
            BundleError::Certificate { .. } => "cert_malformed",
            BundleError::NoCertificate => "bundle_no_certificate",
            BundleError::NoKey => "bundle_no_key",
            BundleError::TooManyKeys { .. } => "bundle_too_many_keys",
            BundleError::TooManyCertificates { .. } => "bundle_too_many_certificates",
            BundleError::KeyInChain { .. } => "bundle_key_in_chain",
            BundleError::Duplicate { .. } => "chain_duplicate",
            BundleError::LeafIsCa { .. } => "leaf_is_ca",
            BundleError::LeafNotFirst { .. } => "chain_leaf_not_first",
            BundleError::NotServerCertificate { .. } => "leaf_not_server",
            BundleError::Misordered { .. } => "chain_misordered",
            BundleError::Unrelated { .. } => "chain_unrelated",
            BundleError::WrongIssuerKey { .. } => "chain_wrong_issuer_key",
            BundleError::UnsupportedSignature { .. } => "chain_unsupported_signature",
            BundleError::IssuerNotCa { .. } => "chain_issuer_not_ca",
            BundleError::KeyMismatch { .. } => "key_mismatch",
            BundleError::LeafExpired { .. } => "leaf_expired",
            BundleError::LeafNotYetValid { .. } => "leaf_not_yet_valid",
            BundleError::ChainExpired { .. } => "chain_expired",
            BundleError::ChainNotYetValid { .. } => "chain_not_yet_valid",
            BundleError::NamesNotCovered { .. } => "names_not_covered",
        }
    }
}

/// Checks an uploaded bundle: certificates (leaf first, then each one's issuer) and exactly
/// one private key, in any position.
pub fn parse_bundle(input: &[u8], check: &BundleCheck<'_>) -> Result<Bundle, BundleError> {
    let blocks = pem::parse_blocks(input)?;
    let certs = certificates(&blocks)?;
    let keys: Vec<&PemBlock> = blocks.iter().filter(|b| b.label.is_key()).collect();
    let key_block = match keys.as_slice() {
        [] => return Err(BundleError::NoKey),
        [one] => one,
        many => {
            let lines: Vec<String> = many.iter().map(|b| b.line.to_string()).collect();
            return Err(BundleError::TooManyKeys {
                count: many.len(),
                lines: lines.join(", "),
            });
        }
    };
    let (key, _) = key::parse_private_key(key_block)?;
    validate(&certs, &key, check)
}

/// Checks what an ACME CA returned (a PEM chain, leaf first) with the key we generated for
/// the order, exactly as an upload is checked.
pub fn from_issued(
    chain_pem: &str,
    key: &KeyPair,
    check: &BundleCheck<'_>,
) -> Result<Bundle, BundleError> {
    let blocks = pem::parse_blocks(chain_pem.as_bytes())?;
    if let Some(block) = blocks.iter().find(|b| b.label.is_key()) {
        return Err(BundleError::KeyInChain {
            label: block.label.as_str(),
            line: block.line,
        });
    }
    validate(&certificates(&blocks)?, key, check)
}

fn certificates(blocks: &[PemBlock]) -> Result<Vec<&PemBlock>, BundleError> {
    let certs: Vec<&PemBlock> = blocks
        .iter()
        .filter(|b| b.label == Label::Certificate)
        .collect();
    if certs.is_empty() {
        return Err(BundleError::NoCertificate);
    }
    if certs.len() > MAX_CERTIFICATES {
        return Err(BundleError::TooManyCertificates { count: certs.len() });
    }
    Ok(certs)
}

/// A parsed certificate with what messages need.
struct Parsed<'a> {
    x509: X509Certificate<'a>,
    der: &'a [u8],
    /// Bounded for messages.
    subject: String,
}

fn validate(
    blocks: &[&PemBlock],
    key: &KeyPair,
    check: &BundleCheck<'_>,
) -> Result<Bundle, BundleError> {
    let mut certs = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let cert_error = |source| BundleError::Certificate {
            position: i + 1,
            line: block.line,
            source,
        };
        let x509 = x509::parse(&block.der).map_err(cert_error)?;
        let subject = shown_name(&x509);
        certs.push(Parsed {
            x509,
            der: &block.der,
            subject,
        });
    }
    for (i, cert) in certs.iter().enumerate() {
        if let Some(first) = certs[..i].iter().position(|c| c.der == cert.der) {
            return Err(BundleError::Duplicate {
                position: i + 1,
                first: first + 1,
                subject: cert.subject.clone(),
            });
        }
    }
    check_leaf(&certs)?;
    check_order(&certs)?;
    let leaf = &certs[0];
    let info = CertInfo::from_cert(&leaf.x509).map_err(|source| BundleError::Certificate {
        position: 1,
        line: blocks[0].line,
        source,
    })?;
    check_key(leaf, &info, key)?;

    // A self-signed root at the end is accepted and dropped (see `Bundle::chain_pem`).
    let served = match certs.split_last() {
        Some((last, rest)) if !rest.is_empty() && is_self_signed(&last.x509) => rest,
        _ => &certs[..],
    };
    check_dates(served, &info, check.now)?;
    check_names(&info, check.must_cover)?;

    let chain_pem: String = served
        .iter()
        .map(|c| pem::encode("CERTIFICATE", c.der))
        .collect();
    let key_pem = key::private_key_pem(key)?;
    Ok(Bundle {
        info,
        haproxy_pem: format!("{chain_pem}{key_pem}"),
        chain_pem,
        key_pem,
    })
}

/// The first certificate must be a server certificate.
fn check_leaf(certs: &[Parsed<'_>]) -> Result<(), BundleError> {
    let leaf = &certs[0];
    if leaf.x509.is_ca() {
        return Err(match certs.iter().position(|c| !c.x509.is_ca()) {
            Some(k) => BundleError::LeafNotFirst {
                leaf: k + 1,
                subject: certs[k].subject.clone(),
                first: leaf.subject.clone(),
            },
            None => BundleError::LeafIsCa {
                subject: leaf.subject.clone(),
            },
        });
    }
    if let Ok(Some(eku)) = leaf.x509.extended_key_usage() {
        if !eku.value.server_auth && !eku.value.any {
            return Err(BundleError::NotServerCertificate {
                subject: leaf.subject.clone(),
            });
        }
    }
    Ok(())
}

/// Each certificate after the first must be the issuer of the one before it: its subject is
/// that one's issuer name, and its key verifies that one's signature.
fn check_order(certs: &[Parsed<'_>]) -> Result<(), BundleError> {
    for i in 1..certs.len() {
        let (child, parent) = (&certs[i - 1].x509, &certs[i].x509);
        let (position, previous) = (i + 1, i);
        let issuer = || bounded(&child.issuer().to_string(), 120);
        if child.issuer().as_raw() != parent.subject().as_raw() {
            // Misordered if it belongs with the others (it issued, or was issued by, one of
            // them), unrelated otherwise.
            let names = |a: &X509Certificate<'_>, b: &X509Certificate<'_>| {
                a.subject().as_raw() == b.issuer().as_raw()
            };
            let related = certs
                .iter()
                .enumerate()
                .any(|(j, c)| j != i && (names(parent, &c.x509) || names(&c.x509, parent)));
            let subject = certs[i].subject.clone();
            return Err(if related {
                BundleError::Misordered {
                    position,
                    previous,
                    subject,
                    issuer: issuer(),
                }
            } else {
                BundleError::Unrelated {
                    position,
                    previous,
                    subject,
                    issuer: issuer(),
                }
            });
        }
        match child.verify_signature(Some(parent.public_key())) {
            Ok(()) => {}
            Err(X509Error::SignatureUnsupportedAlgorithm) => {
                return Err(BundleError::UnsupportedSignature {
                    previous,
                    algorithm: bounded(&child.signature_algorithm.algorithm.to_id_string(), 60),
                })
            }
            Err(_) => {
                return Err(BundleError::WrongIssuerKey {
                    position,
                    previous,
                    issuer: issuer(),
                })
            }
        }
        // OpenSSL takes a self-signed X.509 v1 certificate (old roots) for a CA too.
        let v1_root = parent.version() == X509Version::V1 && is_self_signed(parent);
        if !parent.is_ca() && !v1_root {
            return Err(BundleError::IssuerNotCa {
                position,
                previous,
                subject: certs[i].subject.clone(),
            });
        }
    }
    Ok(())
}

/// The key's public key must be the one in the leaf's SubjectPublicKeyInfo.
fn check_key(leaf: &Parsed<'_>, info: &CertInfo, key: &KeyPair) -> Result<(), BundleError> {
    let key_type = KeyType::of(key)?;
    if info.key_type == Some(key_type)
        && leaf.x509.public_key().subject_public_key.data.as_ref() == key.public_key_raw()
    {
        return Ok(());
    }
    let types = match info.key_type {
        Some(cert_type) if cert_type != key_type => {
            format!(" (the key is {key_type}, the certificate's is {cert_type})")
        }
        _ => String::new(),
    };
    Err(BundleError::KeyMismatch {
        subject: leaf.subject.clone(),
        types,
    })
}

/// How messages name a certificate: its subject, or its first DNS name when the subject is
/// empty (as in some ACME certificates, which carry their names in the SAN only).
fn shown_name(cert: &X509Certificate<'_>) -> String {
    let subject = cert.subject().to_string();
    if !subject.is_empty() {
        return bounded(&subject, 120);
    }
    let first_dns = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .and_then(|san| {
            san.value.general_names.iter().find_map(|name| match name {
                GeneralName::DNSName(dns) => Some(bounded(dns, 100)),
                _ => None,
            })
        });
    match first_dns {
        Some(dns) => format!("DNS:{dns}"),
        None => "with an empty subject".into(),
    }
}

fn is_self_signed(cert: &X509Certificate<'_>) -> bool {
    cert.subject().as_raw() == cert.issuer().as_raw() && cert.verify_signature(None).is_ok()
}

fn check_dates(served: &[Parsed<'_>], info: &CertInfo, now: i64) -> Result<(), BundleError> {
    let leaf = &served[0];
    if now > info.not_after {
        return Err(BundleError::LeafExpired {
            subject: leaf.subject.clone(),
            not_after: rfc3339(info.not_after),
            now: rfc3339(now),
        });
    }
    if now < info.not_before {
        return Err(BundleError::LeafNotYetValid {
            subject: leaf.subject.clone(),
            not_before: rfc3339(info.not_before),
            now: rfc3339(now),
        });
    }
    for (i, cert) in served.iter().enumerate().skip(1) {
        let validity = cert.x509.validity();
        let (not_before, not_after) = (
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
        );
        if now > not_after {
            return Err(BundleError::ChainExpired {
                position: i + 1,
                subject: cert.subject.clone(),
                not_after: rfc3339(not_after),
                now: rfc3339(now),
            });
        }
        if now < not_before {
            return Err(BundleError::ChainNotYetValid {
                position: i + 1,
                subject: cert.subject.clone(),
                not_before: rfc3339(not_before),
                now: rfc3339(now),
            });
        }
    }
    Ok(())
}

fn check_names(info: &CertInfo, must_cover: &[String]) -> Result<(), BundleError> {
    let missing: Vec<&String> = must_cover
        .iter()
        .filter(|host| !covers(&info.names, host))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(BundleError::NamesNotCovered {
        missing: list(&missing),
        names: if info.names.is_empty() {
            "no DNS name".into()
        } else {
            list(&info.names.iter().collect::<Vec<_>>())
        },
    })
}

/// At most ten names, each cut short, for a message.
fn list(names: &[&String]) -> String {
    const SHOWN: usize = 10;
    let mut out: Vec<String> = names.iter().take(SHOWN).map(|n| bounded(n, 100)).collect();
    if names.len() > SHOWN {
        out.push(format!("and {} more", names.len() - SHOWN));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests;
