//! Private keys: the supported types, generation, and reading an uploaded key.
//!
//! The type and size are read from the DER ourselves before any crypto library sees the key,
//! so that a refused key (Ed25519, P-521, RSA 1024, …) is named precisely instead of failing
//! as "could not parse". Every accepted key is turned into PKCS#8, the one form we store.

use std::fmt;
use std::str::FromStr;

use rcgen::{KeyPair, PublicKeyData, RsaKeySize};

use super::pem::{Block, Label};

/// The key types a certificate of this edge may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    EcdsaP256,
    EcdsaP384,
    Rsa2048,
    Rsa3072,
    Rsa4096,
}

/// The accepted spellings, for messages.
pub const ALLOWED_KEY_TYPES: &str = "ecdsa-p256, ecdsa-p384, rsa2048, rsa3072, rsa4096";

impl KeyType {
    pub const ALL: [KeyType; 5] = [
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::Rsa2048,
        KeyType::Rsa3072,
        KeyType::Rsa4096,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ecdsa-p256",
            KeyType::EcdsaP384 => "ecdsa-p384",
            KeyType::Rsa2048 => "rsa2048",
            KeyType::Rsa3072 => "rsa3072",
            KeyType::Rsa4096 => "rsa4096",
        }
    }

    /// A fresh key pair of this type (aws-lc-rs generates RSA too).
    pub fn generate(self) -> Result<KeyPair, KeyError> {
        let size = match self {
            KeyType::EcdsaP256 => {
                return generated(self, KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256))
            }
            KeyType::EcdsaP384 => {
                return generated(self, KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384))
            }
            KeyType::Rsa2048 => RsaKeySize::_2048,
            KeyType::Rsa3072 => RsaKeySize::_3072,
            KeyType::Rsa4096 => RsaKeySize::_4096,
        };
        generated(
            self,
            KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, size),
        )
    }

    /// The type of a key pair already in memory (one we generated, or one from `rcgen`).
    pub fn of(key: &KeyPair) -> Result<KeyType, KeyError> {
        spki_key_type(&key.subject_public_key_info()).map_err(|found| KeyError::Unsupported {
            found,
            at: "the key pair".into(),
        })
    }

    fn from_rsa_bits(bits: usize) -> Result<KeyType, String> {
        match bits {
            2048 => Ok(KeyType::Rsa2048),
            3072 => Ok(KeyType::Rsa3072),
            4096 => Ok(KeyType::Rsa4096),
            _ => Err(format!("a {bits}-bit RSA key")),
        }
    }

    fn from_curve(curve: &[u8]) -> Result<KeyType, String> {
        match curve {
            oid::P256 => Ok(KeyType::EcdsaP256),
            oid::P384 => Ok(KeyType::EcdsaP384),
            oid::P521 => Err("an ECDSA P-521 key".into()),
            oid::SECP256K1 => Err("an ECDSA secp256k1 key".into()),
            other => Err(format!("an EC key on curve {}", oid::dotted(other))),
        }
    }
}

fn generated(
    key_type: KeyType,
    result: Result<KeyPair, rcgen::Error>,
) -> Result<KeyPair, KeyError> {
    result.map_err(|e| KeyError::Generate {
        key_type,
        reason: e.to_string(),
    })
}

impl FromStr for KeyType {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<KeyType, KeyError> {
        KeyType::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| KeyError::UnknownKeyType {
                given: super::pem::bounded(s, 32),
            })
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong with a key. Messages name the block and the type found, never key bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("unknown key type `{given}`: use one of {ALLOWED_KEY_TYPES}")]
    UnknownKeyType { given: String },
    #[error("the private key ({at}) is encrypted: hapctl needs it unencrypted, so decrypt it first, e.g. `openssl pkey -in key.pem -out plain.pem` (and keep plain.pem private)")]
    Encrypted { at: String },
    #[error("the private key ({at}) is {found}, which is not supported: use a key of type {ALLOWED_KEY_TYPES}")]
    Unsupported { found: String, at: String },
    #[error("the private key ({at}) is not a valid {format} key: {reason}; export it again, e.g. with `openssl pkey -in key.pem -out plain.pem`")]
    Malformed {
        at: String,
        format: &'static str,
        reason: &'static str,
    },
    #[error("could not generate a {key_type} key: {reason}")]
    Generate { key_type: KeyType, reason: String },
}

impl KeyError {
    /// A stable machine-readable code (for API error bodies and tests).
    pub fn code(&self) -> &'static str {
        match self {
            KeyError::UnknownKeyType { .. } => "key_unknown_type",
            KeyError::Encrypted { .. } => "key_encrypted",
            KeyError::Unsupported { .. } => "key_unsupported",
            KeyError::Malformed { .. } => "key_malformed",
            KeyError::Generate { .. } => "key_generate",
        }
    }
}

/// Reads an unencrypted private key block: PKCS#8 `PRIVATE KEY`, SEC1 `EC PRIVATE KEY` or
/// PKCS#1 `RSA PRIVATE KEY`. The returned key pair always holds PKCS#8 (see [`pkcs8_pem`]).
pub fn parse_private_key(block: &Block) -> Result<(KeyPair, KeyType), KeyError> {
    let at = format!("the {} block on line {}", block.label, block.line);
    if block.encrypted || block.label == Label::EncryptedPrivateKey {
        return Err(KeyError::Encrypted { at });
    }
    let malformed = |format, reason| KeyError::Malformed {
        at: at.clone(),
        format,
        reason,
    };
    let (key_type, pkcs8) = match block.label {
        Label::PrivateKey => {
            let key_type = pkcs8_key_type(&block.der).map_err(|e| match e {
                Pkcs8Error::Encrypted => KeyError::Encrypted { at: at.clone() },
                Pkcs8Error::Malformed(reason) => malformed("PKCS#8", reason),
                Pkcs8Error::Unsupported(found) => KeyError::Unsupported {
                    found,
                    at: at.clone(),
                },
            })?;
            (key_type, block.der.clone())
        }
        Label::EcPrivateKey => {
            let curve = sec1_curve(&block.der).map_err(|reason| malformed("SEC1 EC", reason))?;
            let key_type = KeyType::from_curve(curve).map_err(|found| KeyError::Unsupported {
                found,
                at: at.clone(),
            })?;
            (key_type, wrap_pkcs8(key_type, &block.der))
        }
        Label::RsaPrivateKey => {
            let bits = pkcs1_bits(&block.der).map_err(|reason| malformed("PKCS#1 RSA", reason))?;
            let key_type = KeyType::from_rsa_bits(bits).map_err(|found| KeyError::Unsupported {
                found,
                at: at.clone(),
            })?;
            (key_type, wrap_pkcs8(key_type, &block.der))
        }
        Label::Certificate | Label::EncryptedPrivateKey => {
            return Err(malformed("private", "this block is not a private key"));
        }
    };
    // aws-lc-rs checks the numbers themselves (the point is on the curve, the RSA primes
    // multiply to the modulus).
    let key = KeyPair::try_from(pkcs8.as_slice())
        .map_err(|_| malformed("PKCS#8", "the key's values are inconsistent"))?;
    if KeyType::of(&key).ok() != Some(key_type) {
        return Err(malformed(
            "PKCS#8",
            "its public key does not match its declared type",
        ));
    }
    Ok((key, key_type))
}

/// The key as PKCS#8 PEM, the form we store and hand to HAProxy. A key pair built by `rcgen`
/// from SEC1 or PKCS#1 DER keeps that DER, and `serialize_pem` would then label it wrongly,
/// so we wrap it here.
pub fn pkcs8_pem(key: &KeyPair) -> Result<String, KeyError> {
    let key_type = KeyType::of(key)?;
    let der = key.serialized_der();
    let second_tag = der::read(der)
        .and_then(|(tag, body, _)| (tag == der::SEQUENCE).then_some(body))
        .and_then(|body| der::read(body))
        .and_then(|(_, _, rest)| der::read(rest))
        .map(|(tag, _, _)| tag);
    let pkcs8 = match second_tag {
        // PrivateKeyInfo: version, AlgorithmIdentifier, …
        Some(der::SEQUENCE) => der.to_vec(),
        // ECPrivateKey: version, privateKey OCTET STRING; RSAPrivateKey: version, modulus.
        Some(der::OCTET_STRING) | Some(der::INTEGER) => wrap_pkcs8(key_type, der),
        _ => {
            return Err(KeyError::Malformed {
                at: "the key pair".into(),
                format: "PKCS#8",
                reason: "its DER form is not recognised",
            })
        }
    };
    Ok(super::pem::encode("PRIVATE KEY", &pkcs8))
}

/// The key type named by a DER SubjectPublicKeyInfo (a certificate's, or our key's), or a
/// description of the unsupported key found.
pub(crate) fn spki_key_type(spki: &[u8]) -> Result<KeyType, String> {
    let unreadable = || "an unreadable public key".to_string();
    let (alg, rest) = der::seq(spki)
        .and_then(|items| der::expect(items, der::SEQUENCE))
        .ok_or_else(unreadable)?;
    let (bits, _) = der::expect(rest, der::BIT_STRING).ok_or_else(unreadable)?;
    let rsa_modulus = || {
        // BIT STRING: unused-bits byte, then RSAPublicKey ::= SEQUENCE { modulus, exponent }.
        let (n, _) = der::seq(bits.get(1..)?).and_then(|b| der::expect(b, der::INTEGER))?;
        Some(rsa_bits(n))
    };
    key_type_of_algorithm(alg, rsa_modulus)
}

/// Maps an AlgorithmIdentifier (with the RSA modulus size, read only for RSA) to a type.
fn key_type_of_algorithm(
    alg: &[u8],
    rsa_bits: impl FnOnce() -> Option<usize>,
) -> Result<KeyType, String> {
    let (algorithm, params) = der::expect(alg, der::OID).ok_or("an unreadable key algorithm")?;
    match algorithm {
        oid::RSA_ENCRYPTION => KeyType::from_rsa_bits(rsa_bits().ok_or("an unreadable RSA key")?),
        oid::EC_PUBLIC_KEY => match der::read(params) {
            Some((der::OID, curve, _)) => KeyType::from_curve(curve),
            _ => Err("an EC key with explicit (unnamed) curve parameters".into()),
        },
        oid::ED25519 => Err("an Ed25519 key".into()),
        oid::ED448 => Err("an Ed448 key".into()),
        oid::X25519 | oid::X448 => Err("a key-agreement (X25519/X448) key".into()),
        oid::RSA_PSS => Err("an RSA-PSS key".into()),
        oid::DSA => Err("a DSA key".into()),
        other => Err(format!("a key of algorithm {}", oid::dotted(other))),
    }
}

enum Pkcs8Error {
    Encrypted,
    Malformed(&'static str),
    Unsupported(String),
}

/// PrivateKeyInfo ::= SEQUENCE { version INTEGER, algorithm AlgorithmIdentifier,
/// privateKey OCTET STRING, … }
fn pkcs8_key_type(pkcs8: &[u8]) -> Result<KeyType, Pkcs8Error> {
    let not_pkcs8 = Pkcs8Error::Malformed("it is not a PKCS#8 PrivateKeyInfo");
    let items = der::seq(pkcs8).ok_or(Pkcs8Error::Malformed("it is not DER"))?;
    let (first, _, _) = der::read(items).ok_or(Pkcs8Error::Malformed("it is empty"))?;
    // EncryptedPrivateKeyInfo starts with an AlgorithmIdentifier instead of a version: an
    // encrypted key mislabelled "PRIVATE KEY".
    if first == der::SEQUENCE {
        return Err(Pkcs8Error::Encrypted);
    }
    let (_, rest) = der::expect(items, der::INTEGER).ok_or(not_pkcs8)?;
    let (alg, rest) =
        der::expect(rest, der::SEQUENCE).ok_or(Pkcs8Error::Malformed("it has no key algorithm"))?;
    let (inner, _) = der::expect(rest, der::OCTET_STRING)
        .ok_or(Pkcs8Error::Malformed("it has no private key"))?;
    key_type_of_algorithm(alg, || pkcs1_bits(inner).ok()).map_err(Pkcs8Error::Unsupported)
}

/// ECPrivateKey ::= SEQUENCE { version 1, privateKey OCTET STRING, [0] curve OID, [1] … }
fn sec1_curve(sec1: &[u8]) -> Result<&[u8], &'static str> {
    let items = der::seq(sec1).ok_or("it is not DER")?;
    let (_, rest) = der::expect(items, der::INTEGER).ok_or("it has no version")?;
    let (_, mut rest) = der::expect(rest, der::OCTET_STRING).ok_or("it has no private key")?;
    while let Some((tag, body, next)) = der::read(rest) {
        if tag == 0xA0 {
            return match der::read(body) {
                Some((der::OID, curve, _)) => Ok(curve),
                _ => Err("it has explicit curve parameters instead of a named curve"),
            };
        }
        rest = next;
    }
    Err("it does not name its curve")
}

/// RSAPrivateKey ::= SEQUENCE { version INTEGER, modulus INTEGER, … }: the modulus size.
fn pkcs1_bits(pkcs1: &[u8]) -> Result<usize, &'static str> {
    let items = der::seq(pkcs1).ok_or("it is not DER")?;
    let (_, rest) = der::expect(items, der::INTEGER).ok_or("it has no version")?;
    let (modulus, _) = der::expect(rest, der::INTEGER).ok_or("it has no modulus")?;
    Ok(rsa_bits(modulus))
}

/// Bits of a big-endian unsigned integer (DER adds a 0x00 before a high bit).
fn rsa_bits(n: &[u8]) -> usize {
    let start = n.iter().position(|&b| b != 0).unwrap_or(n.len());
    match n.get(start) {
        Some(&top) => (n.len() - start) * 8 - top.leading_zeros() as usize,
        None => 0,
    }
}

/// PrivateKeyInfo around a SEC1 or PKCS#1 key of a known type.
fn wrap_pkcs8(key_type: KeyType, inner: &[u8]) -> Vec<u8> {
    let alg = match key_type {
        KeyType::EcdsaP256 => [
            der::tlv(der::OID, oid::EC_PUBLIC_KEY),
            der::tlv(der::OID, oid::P256),
        ]
        .concat(),
        KeyType::EcdsaP384 => [
            der::tlv(der::OID, oid::EC_PUBLIC_KEY),
            der::tlv(der::OID, oid::P384),
        ]
        .concat(),
        KeyType::Rsa2048 | KeyType::Rsa3072 | KeyType::Rsa4096 => [
            der::tlv(der::OID, oid::RSA_ENCRYPTION),
            der::tlv(der::NULL, &[]),
        ]
        .concat(),
    };
    let body = [
        der::tlv(der::INTEGER, &[0]),
        der::tlv(der::SEQUENCE, &alg),
        der::tlv(der::OCTET_STRING, inner),
    ]
    .concat();
    der::tlv(der::SEQUENCE, &body)
}

/// The few DER primitives the key formats need (x509-parser covers certificates).
mod der {
    pub const INTEGER: u8 = 0x02;
    pub const BIT_STRING: u8 = 0x03;
    pub const OCTET_STRING: u8 = 0x04;
    pub const NULL: u8 = 0x05;
    pub const OID: u8 = 0x06;
    pub const SEQUENCE: u8 = 0x30;

    /// One TLV: (tag, content, rest). Single-byte tags and lengths up to 4 bytes.
    pub fn read(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            rest = &rest[n..];
            len
        };
        (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
    }

    /// The content of a SEQUENCE that spans all of `input`.
    pub fn seq(input: &[u8]) -> Option<&[u8]> {
        match read(input)? {
            (SEQUENCE, body, []) => Some(body),
            _ => None,
        }
    }

    /// The next TLV if it has `tag`: (content, rest).
    pub fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (t, body, rest) = read(input)?;
        (t == tag).then_some((body, rest))
    }

    pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = content.len();
        if len < 0x80 {
            out.push(len as u8);
        } else {
            let bytes = len.to_be_bytes();
            let skip = bytes.iter().take_while(|&&b| b == 0).count();
            out.push(0x80 | (bytes.len() - skip) as u8);
            out.extend_from_slice(&bytes[skip..]);
        }
        out.extend_from_slice(content);
        out
    }
}

/// Object identifiers, as DER content bytes.
mod oid {
    pub const RSA_ENCRYPTION: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01];
    pub const RSA_PSS: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0A];
    pub const EC_PUBLIC_KEY: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01];
    pub const DSA: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x38, 0x04, 0x01];
    pub const P256: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07];
    pub const P384: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x22];
    pub const P521: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x23];
    pub const SECP256K1: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x0A];
    pub const X25519: &[u8] = &[0x2B, 0x65, 0x6E];
    pub const X448: &[u8] = &[0x2B, 0x65, 0x6F];
    pub const ED25519: &[u8] = &[0x2B, 0x65, 0x70];
    pub const ED448: &[u8] = &[0x2B, 0x65, 0x71];

    /// Dotted form of an OID for a message, e.g. `1.3.101.112`.
    pub fn dotted(oid: &[u8]) -> String {
        let mut arcs: Vec<u64> = Vec::new();
        let mut value: u64 = 0;
        for &b in oid.iter().take(32) {
            value = (value << 7) | u64::from(b & 0x7f);
            if b & 0x80 == 0 {
                if arcs.is_empty() {
                    let first = (value / 40).min(2);
                    arcs.extend([first, value - first * 40]);
                } else {
                    arcs.push(value);
                }
                value = 0;
            }
        }
        let parts: Vec<String> = arcs.iter().map(u64::to_string).collect();
        parts.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pem::{encode, parse_blocks};

    fn block(label: Label, der: &[u8]) -> Block {
        Block {
            label,
            der: der.to_vec(),
            line: 1,
            encrypted: false,
        }
    }

    fn from_pem(text: &str) -> Result<(KeyPair, KeyType), KeyError> {
        let blocks = parse_blocks(text.as_bytes()).expect("PEM");
        parse_private_key(&blocks[0])
    }

    #[test]
    fn names_round_trip_and_unknown_lists_allowed() {
        for k in KeyType::ALL {
            assert_eq!(k.as_str().parse::<KeyType>().unwrap(), k);
            assert_eq!(k.to_string(), k.as_str());
        }
        assert_eq!("ECDSA-P384".parse::<KeyType>().unwrap(), KeyType::EcdsaP384);
        let err = "ed25519".parse::<KeyType>().unwrap_err();
        assert_eq!(err.code(), "key_unknown_type");
        assert!(err.to_string().contains("`ed25519`"), "{err}");
        assert!(err.to_string().contains(ALLOWED_KEY_TYPES), "{err}");
        let long = "x".repeat(1000).parse::<KeyType>().unwrap_err().to_string();
        assert!(long.len() < 200, "{long}");
    }

    /// Generation of every type, and every generated key read back from its PKCS#8 PEM.
    #[test]
    fn generate_every_type_and_read_it_back() {
        for k in KeyType::ALL {
            let key = k.generate().unwrap();
            assert_eq!(KeyType::of(&key).unwrap(), k);
            let pem = pkcs8_pem(&key).unwrap();
            assert_eq!(
                pem,
                key.serialize_pem().replace("\r\n", "\n"),
                "{k}: generated keys are PKCS#8"
            );
            let (back, kind) = from_pem(&pem).unwrap();
            assert_eq!(kind, k);
            assert_eq!(back.public_key_raw(), key.public_key_raw());
            assert!(!format!("{:?}", parse_blocks(pem.as_bytes()).unwrap()).contains(&pem[30..60]));
        }
    }

    /// SEC1 and PKCS#1 keys (what `openssl ecparam -genkey` and `openssl genrsa -traditional`
    /// print) are accepted and come out as PKCS#8.
    #[test]
    fn sec1_and_pkcs1_are_converted() {
        for (k, label) in [
            (KeyType::EcdsaP256, Label::EcPrivateKey),
            (KeyType::EcdsaP384, Label::EcPrivateKey),
            (KeyType::Rsa2048, Label::RsaPrivateKey),
        ] {
            let key = k.generate().unwrap();
            let legacy = to_legacy_der(key.serialized_der());
            let (parsed, kind) = parse_private_key(&block(label, &legacy)).unwrap();
            assert_eq!(kind, k);
            assert_eq!(parsed.public_key_raw(), key.public_key_raw());
            let pem = pkcs8_pem(&parsed).unwrap();
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
            // A key pair rcgen built straight from the legacy DER is wrapped too.
            let raw = KeyPair::try_from(legacy.as_slice()).unwrap();
            assert_eq!(pkcs8_pem(&raw).unwrap(), pem);
            let (again, _) = from_pem(&pem).unwrap();
            assert_eq!(again.public_key_raw(), key.public_key_raw());
        }
    }

    /// The SEC1/PKCS#1 key inside a PKCS#8 PrivateKeyInfo, as `openssl pkey -traditional`
    /// prints it: PKCS#8 drops the curve from the inner ECPrivateKey, SEC1 names it in [0].
    pub(crate) fn to_legacy_der(pkcs8: &[u8]) -> Vec<u8> {
        let items = der::seq(pkcs8).unwrap();
        let (_, rest) = der::expect(items, der::INTEGER).unwrap();
        let (alg, rest) = der::expect(rest, der::SEQUENCE).unwrap();
        let inner = der::expect(rest, der::OCTET_STRING).unwrap().0;
        let (_, params) = der::expect(alg, der::OID).unwrap();
        let Some((der::OID, curve, _)) = der::read(params) else {
            return inner.to_vec();
        };
        let fields = der::seq(inner).unwrap();
        let (version, rest) = der::expect(fields, der::INTEGER).unwrap();
        let (private, public) = der::expect(rest, der::OCTET_STRING).unwrap();
        let body = [
            der::tlv(der::INTEGER, version),
            der::tlv(der::OCTET_STRING, private),
            der::tlv(0xA0, &der::tlv(der::OID, curve)),
            public.to_vec(),
        ]
        .concat();
        der::tlv(der::SEQUENCE, &body)
    }

    #[test]
    fn refuses_unsupported_types_naming_them() {
        let ed = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let p521 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).unwrap();
        for (key, found) in [(&ed, "an Ed25519 key"), (&p521, "an ECDSA P-521 key")] {
            let err =
                parse_private_key(&block(Label::PrivateKey, key.serialized_der())).unwrap_err();
            assert_eq!(err.code(), "key_unsupported");
            let msg = err.to_string();
            assert!(
                msg.contains(found) && msg.contains(ALLOWED_KEY_TYPES),
                "{msg}"
            );
            assert!(KeyType::of(key).is_err());
        }
        let sec1 = to_legacy_der(p521.serialized_der());
        let err = parse_private_key(&block(Label::EcPrivateKey, &sec1)).unwrap_err();
        assert!(err.to_string().contains("P-521"), "{err}");
    }

    /// A PKCS#1 key whose modulus has `bits` bits; the size is refused before the numbers
    /// are looked at, so they need not be a real key.
    pub(crate) fn fake_rsa_pkcs1(bits: usize) -> Vec<u8> {
        let mut modulus = vec![0u8; bits.div_ceil(8) + 1];
        modulus[1] = 0x80 >> ((8 - bits % 8) % 8);
        let body = [
            der::tlv(der::INTEGER, &[0]),
            der::tlv(der::INTEGER, &modulus),
            der::tlv(der::INTEGER, &[1, 0, 1]),
        ]
        .concat();
        der::tlv(der::SEQUENCE, &body)
    }

    #[test]
    fn refuses_rsa_sizes_outside_the_list() {
        for bits in [1024, 2047, 2049, 2560, 3000, 8192] {
            let pkcs1 = fake_rsa_pkcs1(bits);
            assert_eq!(pkcs1_bits(&pkcs1), Ok(bits));
            let err = parse_private_key(&block(Label::RsaPrivateKey, &pkcs1)).unwrap_err();
            assert!(
                err.to_string().contains(&format!("a {bits}-bit RSA key")),
                "{err}"
            );
            let pkcs8 = wrap_pkcs8(KeyType::Rsa2048, &pkcs1);
            let err = parse_private_key(&block(Label::PrivateKey, &pkcs8)).unwrap_err();
            assert!(
                err.to_string().contains(&format!("a {bits}-bit RSA key")),
                "{err}"
            );
        }
    }

    #[test]
    fn refuses_encrypted_keys() {
        let mut legacy = block(Label::RsaPrivateKey, &[1, 2, 3]);
        legacy.encrypted = true;
        let pkcs8 = block(Label::EncryptedPrivateKey, &[1, 2, 3]);
        for b in [legacy, pkcs8] {
            let err = parse_private_key(&b).unwrap_err();
            assert_eq!(err.code(), "key_encrypted");
            assert!(err
                .to_string()
                .contains("openssl pkey -in key.pem -out plain.pem"));
        }
        // EncryptedPrivateKeyInfo under a plain "PRIVATE KEY" label.
        let epki = der::tlv(
            der::SEQUENCE,
            &[
                der::tlv(der::SEQUENCE, &der::tlv(der::OID, oid::RSA_PSS)),
                der::tlv(der::OCTET_STRING, &[9; 16]),
            ]
            .concat(),
        );
        let err = parse_private_key(&block(Label::PrivateKey, &epki)).unwrap_err();
        assert_eq!(err.code(), "key_encrypted");
    }

    /// A key encrypted by the real `openssl pkcs8 -topk8 -v2 aes256`, when openssl is here.
    #[test]
    fn refuses_a_key_encrypted_by_openssl() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let key = KeyType::EcdsaP256.generate().unwrap();
        let child = Command::new("openssl")
            .args([
                "pkcs8",
                "-topk8",
                "-v2",
                "aes256",
                "-passout",
                "pass:hapctl-test",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("openssl not found: skipped");
            return;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(key.serialize_pem().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----"));
        let err = from_pem(&text).unwrap_err();
        assert_eq!(err.code(), "key_encrypted");
    }

    #[test]
    fn refuses_malformed_keys() {
        let p256 = KeyType::EcdsaP256.generate().unwrap();
        let cases: Vec<(Label, Vec<u8>)> = vec![
            (Label::PrivateKey, vec![]),
            (Label::PrivateKey, vec![0x30, 0x03, 0x02, 0x01]),
            (
                Label::PrivateKey,
                der::tlv(der::SEQUENCE, &der::tlv(der::INTEGER, &[0])),
            ),
            // A SEC1 key under the PKCS#8 label, and a PKCS#8 key under the SEC1 label.
            (Label::PrivateKey, to_legacy_der(p256.serialized_der())),
            (Label::EcPrivateKey, p256.serialized_der().to_vec()),
            (Label::RsaPrivateKey, to_legacy_der(p256.serialized_der())),
            (Label::Certificate, p256.serialized_der().to_vec()),
        ];
        for (label, der) in cases {
            let err = parse_private_key(&block(label, &der)).unwrap_err();
            assert_eq!(err.code(), "key_malformed", "{label}: {err}");
        }
        // Right structure, wrong numbers: the private scalar changed under the public key.
        let mut bad = p256.serialized_der().to_vec();
        let n = bad.len();
        bad[n - 71] ^= 1;
        let err = parse_private_key(&block(Label::PrivateKey, &bad)).unwrap_err();
        assert_eq!(err.code(), "key_malformed", "{err}");
    }

    #[test]
    fn sec1_without_named_curve() {
        let sec1 = der::tlv(
            der::SEQUENCE,
            &[
                der::tlv(der::INTEGER, &[1]),
                der::tlv(der::OCTET_STRING, &[5; 32]),
            ]
            .concat(),
        );
        let err = parse_private_key(&block(Label::EcPrivateKey, &sec1)).unwrap_err();
        assert!(err.to_string().contains("does not name its curve"), "{err}");
    }

    #[test]
    fn der_helpers() {
        assert_eq!(oid::dotted(oid::ED25519), "1.3.101.112");
        assert_eq!(oid::dotted(oid::P256), "1.2.840.10045.3.1.7");
        assert_eq!(rsa_bits(&[0, 0x80, 0]), 16);
        assert_eq!(rsa_bits(&[0x01, 0]), 9);
        assert_eq!(rsa_bits(&[0, 0]), 0);
        let long = der::tlv(der::OCTET_STRING, &[0; 300]);
        assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2C]);
        assert_eq!(der::read(&long).unwrap().1.len(), 300);
        assert!(der::read(&long[..100]).is_none());
        assert!(der::read(&[0x04, 0x85, 1, 1, 1, 1, 1]).is_none());
        let pem = encode("PRIVATE KEY", &[1]);
        assert!(from_pem(&pem).is_err());
    }
}
