//! What hapctl needs to know about one certificate, and TLS name matching.

use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use super::key::{spki_key_type, KeyType};

/// The facts of one certificate that hapctl stores, shows and compares with HAProxy's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// DNS names of the subjectAltName extension, lowercased, in certificate order without
    /// repeats; the subject CN only when the certificate has no subjectAltName extension at
    /// all (HAProxy's SNI rule, and RFC 6125's).
    pub names: Vec<String>,
    /// Validity, in unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// Uppercase hex, no colons, of the serial as HAProxy's `show ssl cert` prints it: the
    /// DER integer's bytes without the one 0x00 DER puts before a high bit (OpenSSL's
    /// `ASN1_INTEGER` drops it, and HAProxy dumps those bytes). So a serial encoded
    /// `00 F2 11` is `F211`, and `0A` stays `0A`. Compare with [`serial_matches`], which
    /// ignores leading zeros, case and colons, to be safe against other printers.
    pub serial: String,
    /// X.509 distinguished names as `CN=…, O=…` (x509-parser's form, in DER order).
    pub issuer: String,
    pub subject: String,
    /// `None` for a key type this edge does not support.
    pub key_type: Option<KeyType>,
    /// The authorityKeyIdentifier's keyIdentifier: with `serial_der`, the ACME ARI
    /// certificate identifier (RFC 9773).
    pub aki: Option<Vec<u8>>,
    /// The serial's DER content bytes exactly as encoded, padding byte included (what ARI
    /// wants).
    pub serial_der: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertParseError {
    #[error("it is not a valid X.509 certificate ({reason})")]
    Malformed { reason: String },
    #[error("it has {extra} bytes after the certificate")]
    TrailingData { extra: usize },
}

impl CertInfo {
    pub fn from_der(der: &[u8]) -> Result<CertInfo, CertParseError> {
        CertInfo::from_cert(&parse(der)?)
    }

    pub(crate) fn from_cert(cert: &X509Certificate<'_>) -> Result<CertInfo, CertParseError> {
        let malformed = |e: X509Error| CertParseError::Malformed {
            reason: describe(&e),
        };
        let names = match cert.subject_alternative_name().map_err(malformed)? {
            Some(san) => {
                let mut names: Vec<String> = Vec::new();
                for name in &san.value.general_names {
                    if let GeneralName::DNSName(dns) = name {
                        let dns = dns.to_ascii_lowercase();
                        if !names.contains(&dns) {
                            names.push(dns);
                        }
                    }
                }
                names
            }
            None => cert
                .subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_ascii_lowercase)
                .take(1)
                .collect(),
        };
        let aki = cert
            .extensions()
            .iter()
            .find_map(|ext| match ext.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    aki.key_identifier.as_ref().map(|id| id.0.to_vec())
                }
                _ => None,
            });
        let serial_der = cert.raw_serial().to_vec();
        Ok(CertInfo {
            names,
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            serial: serial_hex(&serial_der),
            issuer: cert.issuer().to_string(),
            subject: cert.subject().to_string(),
            key_type: spki_key_type(cert.public_key()).ok(),
            aki,
            serial_der,
        })
    }
}

/// Parses one DER certificate that must span all of `der`.
pub(crate) fn parse(der: &[u8]) -> Result<X509Certificate<'_>, CertParseError> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Ok(cert),
        Ok((rest, _)) => Err(CertParseError::TrailingData { extra: rest.len() }),
        Err(x509_parser::nom::Err::Incomplete(_)) => Err(CertParseError::Malformed {
            reason: "it is cut short".into(),
        }),
        Err(x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e)) => {
            Err(CertParseError::Malformed {
                reason: describe(&e),
            })
        }
    }
}

/// x509-parser's own words, except for low-level DER errors, which mean nothing to a user.
fn describe(e: &X509Error) -> String {
    match e {
        X509Error::Der(_) | X509Error::NomError(_) => "its DER structure is broken".into(),
        other => super::pem::bounded(&other.to_string(), 100),
    }
}

fn serial_hex(raw: &[u8]) -> String {
    let magnitude = match raw {
        [0, next, ..] if next & 0x80 != 0 => &raw[1..],
        _ => raw,
    };
    magnitude.iter().map(|b| format!("{b:02X}")).collect()
}

/// Whether two printed serials are the same number: leading zeros, case, colons and
/// whitespace are ignored (`0A:1B` matches `a1b`).
pub fn serial_matches(a: &str, b: &str) -> bool {
    fn digits(s: &str) -> Option<String> {
        let hex: String = s
            .chars()
            .filter(|c| *c != ':' && !c.is_whitespace())
            .map(|c| c.to_ascii_uppercase())
            .collect();
        if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        Some(hex.trim_start_matches('0').to_string())
    }
    matches!((digits(a), digits(b)), (Some(a), Some(b)) if a == b)
}

/// Whether a certificate with `names` serves `host`, with TLS wildcard rules: `*.example.com`
/// covers `a.example.com` but neither `example.com` nor `a.b.example.com`; only a whole
/// leftmost `*` label is a wildcard, and not directly above a top-level domain (`*.com`).
/// Case and a final dot are ignored. A wildcard `host` is covered only by the same wildcard.
pub fn covers(names: &[String], host: &str) -> bool {
    let host = normal(host);
    !host.is_empty() && names.iter().any(|name| name_covers(&normal(name), &host))
}

fn normal(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

fn name_covers(name: &str, host: &str) -> bool {
    if name == host {
        return true;
    }
    let Some(suffix) = name.strip_prefix("*.") else {
        return false;
    };
    match host.split_once('.') {
        Some((first, rest)) => {
            !first.is_empty() && first != "*" && rest == suffix && suffix.contains('.')
        }
        None => false,
    }
}

/// RFC 3339 UTC, e.g. `2025-03-01T12:00:00Z`, for messages.
pub fn rfc3339(unix: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType, SerialNumber};

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn wildcard_semantics() {
        let n = names(&["*.example.com", "Example.ORG"]);
        assert!(covers(&n, "a.example.com"));
        assert!(covers(&n, "A.Example.Com."));
        assert!(!covers(&n, "example.com"));
        assert!(!covers(&n, "a.b.example.com"));
        assert!(!covers(&n, ".example.com"));
        assert!(covers(&n, "example.org"));
        assert!(!covers(&n, "www.example.org"));
        assert!(covers(&n, "*.example.com"));
        assert!(!covers(&n, "*.b.example.com"));
        assert!(!covers(&n, ""));
        assert!(!covers(&names(&["*.com"]), "example.com"));
        assert!(!covers(&names(&["a*.example.com"]), "ab.example.com"));
        assert!(!covers(&names(&["*.example.com"]), "a.example.com.evil"));
        assert!(!covers(&[], "example.com"));
    }

    #[test]
    fn serial_formatting_and_matching() {
        assert_eq!(serial_hex(&[0x00, 0xF2, 0x11]), "F211");
        assert_eq!(serial_hex(&[0x0A]), "0A");
        assert_eq!(serial_hex(&[0x00]), "00");
        assert_eq!(
            serial_hex(&[0x00, 0x01]),
            "0001",
            "non-minimal DER is kept as encoded"
        );
        assert!(serial_matches("0A:1B", "a1b"));
        assert!(serial_matches("00F211", "F211"));
        assert!(serial_matches("00", "0"));
        assert!(!serial_matches("F211", "F212"));
        assert!(!serial_matches("", ""));
        assert!(!serial_matches("xyz", "xyz"));
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(rfc3339(253_402_300_799), "9999-12-31T23:59:59Z");
        // Before 1970 (no certificate of ours) is shown as the epoch.
        assert_eq!(rfc3339(-1), "1970-01-01T00:00:00Z");
    }

    fn self_signed(params: &CertificateParams) -> (Vec<u8>, KeyPair) {
        let key = KeyPair::generate().unwrap();
        (params.self_signed(&key).unwrap().der().to_vec(), key)
    }

    #[test]
    fn fields_of_a_certificate() {
        let mut params = CertificateParams::new(names(&[
            "WWW.Example.com",
            "*.example.com",
            "www.example.com",
        ]))
        .unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        params
            .distinguished_name
            .push(DnType::CommonName, "ignored.example.net");
        params.not_before = rcgen::date_time_ymd(2025, 1, 2);
        params.not_after = rcgen::date_time_ymd(2025, 4, 2);
        params.serial_number = Some(SerialNumber::from_slice(&[0xF2, 0x11, 0x00]));
        params.use_authority_key_identifier_extension = true;
        let (der, key) = self_signed(&params);
        let info = CertInfo::from_der(&der).unwrap();
        assert_eq!(info.names, names(&["www.example.com", "*.example.com"]));
        assert_eq!(rfc3339(info.not_before), "2025-01-02T00:00:00Z");
        assert_eq!(rfc3339(info.not_after), "2025-04-02T00:00:00Z");
        assert_eq!(info.serial_der, vec![0x00, 0xF2, 0x11, 0x00]);
        assert_eq!(info.serial, "F21100");
        assert_eq!(info.subject, "CN=ignored.example.net");
        assert_eq!(info.issuer, info.subject);
        assert_eq!(info.key_type, Some(KeyType::EcdsaP256));
        assert_eq!(info.aki, Some(params.key_identifier(&key)));
    }

    #[test]
    fn common_name_only_without_san() {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "Legacy.Example.com");
        let (der, _) = self_signed(&params);
        let info = CertInfo::from_der(&der).unwrap();
        assert_eq!(info.names, names(&["legacy.example.com"]));
        assert_eq!(info.aki, None);
        // A SAN with no DNS name: the CN is still not used.
        params.subject_alt_names = vec![SanType::IpAddress([10, 0, 0, 1].into())];
        let (der, _) = self_signed(&params);
        assert!(CertInfo::from_der(&der).unwrap().names.is_empty());
    }

    #[test]
    fn unsupported_key_types_are_none() {
        let params = CertificateParams::new(names(&["a.example.com"])).unwrap();
        for alg in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P521_SHA512] {
            let key = KeyPair::generate_for(alg).unwrap();
            let der = params.self_signed(&key).unwrap().der().to_vec();
            assert_eq!(CertInfo::from_der(&der).unwrap().key_type, None);
        }
        let key = KeyType::Rsa2048.generate().unwrap();
        let der = params.self_signed(&key).unwrap().der().to_vec();
        assert_eq!(
            CertInfo::from_der(&der).unwrap().key_type,
            Some(KeyType::Rsa2048)
        );
    }

    #[test]
    fn refuses_garbage_and_trailing_bytes() {
        let (der, _) = self_signed(&CertificateParams::new(names(&["a.example.com"])).unwrap());
        let mut long = der.clone();
        long.extend_from_slice(&[0, 0, 0]);
        assert_eq!(
            CertInfo::from_der(&long),
            Err(CertParseError::TrailingData { extra: 3 })
        );
        assert!(matches!(
            CertInfo::from_der(&der[..der.len() - 1]),
            Err(CertParseError::Malformed { .. })
        ));
        assert!(matches!(
            CertInfo::from_der(b"hello"),
            Err(CertParseError::Malformed { .. })
        ));
        assert!(matches!(
            CertInfo::from_der(&[]),
            Err(CertParseError::Malformed { .. })
        ));
    }

    /// Our serial is what OpenSSL prints (HAProxy prints the same `ASN1_INTEGER` bytes).
    #[test]
    fn serial_agrees_with_openssl() {
        for serial in [
            &[0x80u8, 0x01][..],
            &[0x01, 0x02],
            &[0xFF; 20],
            &[0x00, 0x00, 0x7F],
        ] {
            let mut params = CertificateParams::new(names(&["a.example.com"])).unwrap();
            params.serial_number = Some(SerialNumber::from_slice(serial));
            let key = KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            let info = CertInfo::from_der(cert.der()).unwrap();
            let out = super::super::openssl(&["x509", "-noout", "-serial"], cert.pem().as_bytes());
            let out = String::from_utf8(out).unwrap();
            assert_eq!(out.trim(), format!("serial={}", info.serial), "{serial:?}");
        }
    }
}
