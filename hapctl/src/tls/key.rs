//! Private keys: the supported types, generation, and reading an uploaded key.
//!
//! The type and size are read from the DER (with x509-parser's DER reader) before any crypto
//! library sees the key, so that a refused key (Ed25519, P-521, RSA 1024, …) is named
//! precisely instead of failing as "could not parse". An accepted key keeps its form: PKCS#8,
//! SEC1 or PKCS#1, all of which HAProxy (OpenSSL) loads.

use std::fmt;
use std::str::FromStr;

use rcgen::{KeyPair, PublicKeyData, RsaKeySize, SignatureAlgorithm};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use x509_parser::asn1_rs::{oid, Any, Class, FromDer, Integer, OctetString, Oid, Tag};
use x509_parser::num_bigint::BigUint;
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_DSA, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_NIST_EC_P521,
    OID_PKCS1_RSAENCRYPTION, OID_PKCS1_RSASSAPSS, OID_SIG_ED25519, OID_SIG_ED448,
};
use x509_parser::public_key::PublicKey;
use x509_parser::x509::{AlgorithmIdentifier, SubjectPublicKeyInfo};

use super::pem::{self, Label, PemBlock};

// Object identifiers the registry does not name (rustfmt would space out the dotted arcs).
#[rustfmt::skip]
const OID_SECP256K1: Oid<'static> = oid!(1.3.132.0.10);
#[rustfmt::skip]
const OID_X25519: Oid<'static> = oid!(1.3.101.110);
#[rustfmt::skip]
const OID_X448: Oid<'static> = oid!(1.3.101.111);

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
        let rsa = |size| KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, size);
        let result = match self {
            KeyType::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            KeyType::EcdsaP384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
            KeyType::Rsa2048 => rsa(RsaKeySize::_2048),
            KeyType::Rsa3072 => rsa(RsaKeySize::_3072),
            KeyType::Rsa4096 => rsa(RsaKeySize::_4096),
        };
        result.map_err(|e| KeyError::Generate {
            key_type: self,
            reason: e.to_string(),
        })
    }

    /// The type of a key pair already in memory (one we generated, or one from `rcgen`).
    pub fn of(key: &KeyPair) -> Result<KeyType, KeyError> {
        spki_der_key_type(&key.subject_public_key_info()).map_err(|found| KeyError::Unsupported {
            found,
            at: "the key pair in memory".into(),
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

    fn from_curve(curve: &Oid<'_>) -> Result<KeyType, String> {
        if *curve == OID_EC_P256 {
            Ok(KeyType::EcdsaP256)
        } else if *curve == OID_NIST_EC_P384 {
            Ok(KeyType::EcdsaP384)
        } else if *curve == OID_NIST_EC_P521 {
            Err("an ECDSA P-521 key".into())
        } else if *curve == OID_SECP256K1 {
            Err("an ECDSA secp256k1 key".into())
        } else {
            Err(format!("an EC key on curve {}", shown_oid(curve)))
        }
    }

    /// What rcgen signs with, and reads the key for.
    fn signature_algorithm(self) -> &'static SignatureAlgorithm {
        match self {
            KeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyType::Rsa2048 | KeyType::Rsa3072 | KeyType::Rsa4096 => &rcgen::PKCS_RSA_SHA256,
        }
    }
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
/// PKCS#1 `RSA PRIVATE KEY`. The key pair keeps the block's DER (see [`private_key_pem`]).
pub fn parse_private_key(block: &PemBlock) -> Result<(KeyPair, KeyType), KeyError> {
    let at = format!("the {} block on line {}", block.label, block.line);
    if block.encrypted || block.label == Label::EncryptedPrivateKey {
        return Err(KeyError::Encrypted { at });
    }
    let malformed = |format, reason| KeyError::Malformed {
        at: at.clone(),
        format,
        reason,
    };
    let unsupported = |found| KeyError::Unsupported {
        found,
        at: at.clone(),
    };
    let der = block.der.as_slice();
    let (key_type, format, key_der) = match block.label {
        Label::PrivateKey => {
            let key_type = pkcs8_key_type(der).map_err(|e| match e {
                Pkcs8Error::Encrypted => KeyError::Encrypted { at: at.clone() },
                Pkcs8Error::Malformed(reason) => malformed("PKCS#8", reason),
                Pkcs8Error::Unsupported(found) => unsupported(found),
            })?;
            let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der));
            (key_type, "PKCS#8", key_der)
        }
        Label::EcPrivateKey => {
            let curve = sec1_curve(der).map_err(|reason| malformed("SEC1 EC", reason))?;
            let key_type = KeyType::from_curve(&curve).map_err(unsupported)?;
            let key_der = PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der));
            (key_type, "SEC1 EC", key_der)
        }
        Label::RsaPrivateKey => {
            let bits = pkcs1_bits(der).map_err(|reason| malformed("PKCS#1 RSA", reason))?;
            let key_type = KeyType::from_rsa_bits(bits).map_err(unsupported)?;
            let key_der = PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der));
            (key_type, "PKCS#1 RSA", key_der)
        }
        Label::Certificate | Label::EncryptedPrivateKey => {
            return Err(malformed("private", "this block is not a private key"));
        }
    };
    // aws-lc-rs checks the numbers themselves (the point is on the curve and is the public
    // key, the RSA primes multiply to the modulus).
    let key = KeyPair::from_der_and_sign_algo(&key_der, key_type.signature_algorithm())
        .map_err(|_| malformed(format, "the key's values are inconsistent"))?;
    if KeyType::of(&key).ok() != Some(key_type) {
        return Err(malformed(
            format,
            "its public key does not match its declared type",
        ));
    }
    Ok((key, key_type))
}

/// The key as PEM, labelled by its form: the DER a key pair was read from (PKCS#8
/// `PRIVATE KEY`, SEC1 `EC PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY`), PKCS#8 for one we
/// generated. HAProxy loads all three. (`KeyPair::serialize_pem` calls every form PKCS#8.)
pub fn private_key_pem(key: &KeyPair) -> Result<String, KeyError> {
    let der = key.serialized_der();
    let label = match PrivateKeyDer::try_from(der) {
        Ok(PrivateKeyDer::Pkcs8(_)) => Label::PrivateKey,
        Ok(PrivateKeyDer::Sec1(_)) => Label::EcPrivateKey,
        Ok(PrivateKeyDer::Pkcs1(_)) => Label::RsaPrivateKey,
        _ => {
            return Err(KeyError::Malformed {
                at: "the key pair in memory".into(),
                format: "private",
                reason: "its DER form is not recognised",
            })
        }
    };
    Ok(pem::encode(label.as_str(), der))
}

/// The key type named by a SubjectPublicKeyInfo (a certificate's, or our key's), or a
/// description of the unsupported key found.
pub(crate) fn spki_key_type(spki: &SubjectPublicKeyInfo<'_>) -> Result<KeyType, String> {
    key_type_of_algorithm(&spki.algorithm, || match spki.parsed() {
        Ok(PublicKey::RSA(rsa)) => Some(unsigned_bits(rsa.modulus)),
        _ => None,
    })
}

/// [`spki_key_type`] of a DER SubjectPublicKeyInfo.
fn spki_der_key_type(spki: &[u8]) -> Result<KeyType, String> {
    match SubjectPublicKeyInfo::from_der(spki) {
        Ok(([], spki)) => spki_key_type(&spki),
        _ => Err("an unreadable public key".into()),
    }
}

/// Maps an AlgorithmIdentifier (with the RSA modulus size, read only for RSA) to a type.
fn key_type_of_algorithm(
    alg: &AlgorithmIdentifier<'_>,
    rsa_bits: impl FnOnce() -> Option<usize>,
) -> Result<KeyType, String> {
    let algorithm = &alg.algorithm;
    if *algorithm == OID_PKCS1_RSAENCRYPTION {
        KeyType::from_rsa_bits(rsa_bits().ok_or("an unreadable RSA key")?)
    } else if *algorithm == OID_KEY_TYPE_EC_PUBLIC_KEY {
        match named_curve(alg) {
            Some(curve) => KeyType::from_curve(&curve),
            None => Err("an EC key with explicit (unnamed) curve parameters".into()),
        }
    } else if *algorithm == OID_SIG_ED25519 {
        Err("an Ed25519 key".into())
    } else if *algorithm == OID_SIG_ED448 {
        Err("an Ed448 key".into())
    } else if *algorithm == OID_X25519 || *algorithm == OID_X448 {
        Err("a key-agreement (X25519/X448) key".into())
    } else if *algorithm == OID_PKCS1_RSASSAPSS {
        Err("an RSA-PSS key".into())
    } else if *algorithm == OID_KEY_TYPE_DSA {
        Err("a DSA key".into())
    } else {
        Err(format!("a key of algorithm {}", shown_oid(algorithm)))
    }
}

/// The parameters of an AlgorithmIdentifier if they are an OID (an EC key's named curve).
fn named_curve<'a>(alg: &AlgorithmIdentifier<'a>) -> Option<Oid<'a>> {
    alg.parameters.as_ref().and_then(oid_of)
}

/// `any` as an OBJECT IDENTIFIER. (asn1-rs 0.7 converts any primitive value to an `Oid`
/// without looking at its tag, so the tag is checked here.)
fn oid_of<'a>(any: &Any<'a>) -> Option<Oid<'a>> {
    let is_oid = any.class() == Class::Universal && any.tag() == Tag::Oid;
    is_oid.then(|| Oid::try_from(any).ok()).flatten()
}

/// `AlgorithmIdentifier ::= SEQUENCE { algorithm OBJECT IDENTIFIER, parameters ANY OPTIONAL }`
/// from the content of its SEQUENCE; `None` if it does not start with an OID.
fn algorithm_identifier(content: &[u8]) -> Option<AlgorithmIdentifier<'_>> {
    let (rest, algorithm) = Any::from_der(content).ok()?;
    let parameters = match rest {
        [] => None,
        _ => Some(Any::from_der(rest).ok()?.1),
    };
    Some(AlgorithmIdentifier::new(oid_of(&algorithm)?, parameters))
}

/// The dotted form of an OID from the input, cut short for a message.
fn shown_oid(oid: &Oid<'_>) -> String {
    pem::bounded(&oid.to_id_string(), 60)
}

enum Pkcs8Error {
    Encrypted,
    Malformed(&'static str),
    Unsupported(String),
}

/// PrivateKeyInfo ::= SEQUENCE { version INTEGER, algorithm AlgorithmIdentifier,
/// privateKey OCTET STRING, … }
fn pkcs8_key_type(pkcs8: &[u8]) -> Result<KeyType, Pkcs8Error> {
    let items = sequence(pkcs8).ok_or(Pkcs8Error::Malformed("it is not DER"))?;
    let (_, first) = Any::from_der(items).map_err(|_| Pkcs8Error::Malformed("it is empty"))?;
    // EncryptedPrivateKeyInfo starts with an AlgorithmIdentifier instead of a version: an
    // encrypted key mislabelled "PRIVATE KEY".
    if first.tag() == Tag::Sequence {
        return Err(Pkcs8Error::Encrypted);
    }
    let (rest, _) = Integer::from_der(items)
        .map_err(|_| Pkcs8Error::Malformed("it is not a PKCS#8 PrivateKeyInfo"))?;
    let (rest, alg) = Any::from_der(rest)
        .ok()
        .filter(|(_, alg)| alg.tag() == Tag::Sequence)
        .ok_or(Pkcs8Error::Malformed("it has no key algorithm"))?;
    let alg = algorithm_identifier(alg.data)
        .ok_or_else(|| Pkcs8Error::Unsupported("an unreadable key algorithm".into()))?;
    let (_, inner) =
        OctetString::from_der(rest).map_err(|_| Pkcs8Error::Malformed("it has no private key"))?;
    key_type_of_algorithm(&alg, || pkcs1_bits(inner.as_ref()).ok()).map_err(Pkcs8Error::Unsupported)
}

/// `ECPrivateKey ::= SEQUENCE { version 1, privateKey OCTET STRING, [0] curve OID, [1] … }`
fn sec1_curve(sec1: &[u8]) -> Result<Oid<'_>, &'static str> {
    let items = sequence(sec1).ok_or("it is not DER")?;
    let (rest, _) = Integer::from_der(items).map_err(|_| "it has no version")?;
    let (mut rest, _) = OctetString::from_der(rest).map_err(|_| "it has no private key")?;
    // Then the optional `[0]` parameters and `[1]` public key.
    while let Ok((next, field)) = Any::from_der(rest) {
        if field.class() == Class::ContextSpecific
            && field.tag() == Tag(0)
            && field.header.is_constructed()
        {
            return Any::from_der(field.data)
                .ok()
                .and_then(|(_, curve)| oid_of(&curve))
                .ok_or("it has explicit curve parameters instead of a named curve");
        }
        rest = next;
    }
    Err("it does not name its curve")
}

/// RSAPrivateKey ::= SEQUENCE { version INTEGER, modulus INTEGER, … }: the modulus size.
fn pkcs1_bits(pkcs1: &[u8]) -> Result<usize, &'static str> {
    let items = sequence(pkcs1).ok_or("it is not DER")?;
    let (rest, _) = Integer::from_der(items).map_err(|_| "it has no version")?;
    let (_, modulus) = Integer::from_der(rest).map_err(|_| "it has no modulus")?;
    Ok(unsigned_bits(modulus.as_ref()))
}

/// The content of the DER SEQUENCE that is all of `der`.
fn sequence(der: &[u8]) -> Option<&[u8]> {
    match Any::from_der(der) {
        Ok(([], any)) if any.tag() == Tag::Sequence && any.header.is_constructed() => {
            Some(any.data)
        }
        _ => None,
    }
}

/// Bits of a big-endian unsigned integer (an RSA modulus).
fn unsigned_bits(n: &[u8]) -> usize {
    usize::try_from(BigUint::from_bytes_be(n).bits()).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::super::corpus::fake_rsa_pkcs1_der;
    use super::super::pem::{encode, parse_blocks};
    use super::*;
    use x509_parser::asn1_rs::{Error, Sequence, TaggedExplicit, ToDer};

    fn block(label: Label, der: &[u8]) -> PemBlock {
        PemBlock {
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

    /// The DER of one value.
    fn der(value: impl ToDer) -> Vec<u8> {
        value.to_der_vec().unwrap()
    }

    /// A DER SEQUENCE of encoded items.
    fn seq(items: &[Vec<u8>]) -> Vec<u8> {
        der(Sequence::new(items.concat().into()))
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
            let pem = private_key_pem(&key).unwrap();
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
    /// print) are accepted and keep their form and label.
    #[test]
    fn sec1_and_pkcs1_keep_their_form() {
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
            let pem = private_key_pem(&parsed).unwrap();
            assert_eq!(pem, encode(label.as_str(), &legacy), "{k}");
            // A key pair rcgen built straight from the legacy DER is labelled the same way.
            let raw = KeyPair::try_from(legacy.as_slice()).unwrap();
            assert_eq!(private_key_pem(&raw).unwrap(), pem);
            let (again, _) = from_pem(&pem).unwrap();
            assert_eq!(again.public_key_raw(), key.public_key_raw());
        }
    }

    /// The SEC1/PKCS#1 key inside a PKCS#8 PrivateKeyInfo, as `openssl pkey -traditional`
    /// prints it: PKCS#8 drops the curve from the inner ECPrivateKey, SEC1 names it in `[0]`.
    fn to_legacy_der(pkcs8: &[u8]) -> Vec<u8> {
        let (rest, _version) = Integer::from_der(sequence(pkcs8).unwrap()).unwrap();
        let (rest, alg) = AlgorithmIdentifier::from_der(rest).unwrap();
        let (_, inner) = OctetString::from_der(rest).unwrap();
        let Some(curve) = named_curve(&alg) else {
            return inner.as_ref().to_vec();
        };
        let (rest, version) = Integer::from_der(sequence(inner.as_ref()).unwrap()).unwrap();
        let (public, private) = OctetString::from_der(rest).unwrap();
        seq(&[
            der(version),
            der(private),
            der(TaggedExplicit::<Oid, Error, 0>::explicit(curve)),
            public.to_vec(),
        ])
    }

    /// A PKCS#8 PrivateKeyInfo around a PKCS#1 key.
    fn rsa_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
        seq(&[
            der(0u32),
            seq(&[der(OID_PKCS1_RSAENCRYPTION), der(())]),
            der(OctetString::new(pkcs1)),
        ])
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

    #[test]
    fn refuses_rsa_sizes_outside_the_list() {
        for bits in [1024, 2047, 2049, 2560, 3000, 8192] {
            let pkcs1 = fake_rsa_pkcs1_der(bits);
            assert_eq!(pkcs1_bits(&pkcs1), Ok(bits));
            let err = parse_private_key(&block(Label::RsaPrivateKey, &pkcs1)).unwrap_err();
            assert!(
                err.to_string().contains(&format!("a {bits}-bit RSA key")),
                "{err}"
            );
            let pkcs8 = rsa_pkcs8(&pkcs1);
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
        let epki = seq(&[
            seq(&[der(OID_PKCS1_RSASSAPSS)]),
            der(OctetString::new(&[9; 16])),
        ]);
        let err = parse_private_key(&block(Label::PrivateKey, &epki)).unwrap_err();
        assert_eq!(err.code(), "key_encrypted");
    }

    /// A key encrypted by the real `openssl pkcs8 -topk8 -v2 aes256`, when openssl is here.
    #[test]
    fn refuses_a_key_encrypted_by_openssl() {
        let key = KeyType::EcdsaP256.generate().unwrap();
        let out = super::super::openssl(
            &[
                "pkcs8",
                "-topk8",
                "-v2",
                "aes256",
                "-passout",
                "pass:hapctl-test",
            ],
            key.serialize_pem().as_bytes(),
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----"));
        let err = from_pem(&text).unwrap_err();
        assert_eq!(err.code(), "key_encrypted");
    }

    #[test]
    fn refuses_malformed_keys() {
        let p256 = KeyType::EcdsaP256.generate().unwrap();
        let cases: Vec<(Label, Vec<u8>)> = vec![
            (Label::PrivateKey, vec![]),
            // Cut short, and a version alone.
            (Label::PrivateKey, vec![0x30, 0x03, 0x02, 0x01]),
            (Label::PrivateKey, seq(&[der(0u32)])),
            // Trailing bytes after the key.
            (
                Label::PrivateKey,
                [p256.serialized_der(), &[0][..]].concat(),
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
        // Right structure, wrong numbers: the private scalar changed under the public key,
        // in PKCS#8 and in SEC1 (30 77 02 01 01 04 20 <scalar> …).
        let mut bad = p256.serialized_der().to_vec();
        let n = bad.len();
        bad[n - 71] ^= 1;
        let err = parse_private_key(&block(Label::PrivateKey, &bad)).unwrap_err();
        assert_eq!(err.code(), "key_malformed", "{err}");
        let mut bad = to_legacy_der(p256.serialized_der());
        bad[10] ^= 1;
        let err = parse_private_key(&block(Label::EcPrivateKey, &bad)).unwrap_err();
        assert_eq!(err.code(), "key_malformed", "{err}");
        assert!(err.to_string().contains("not a valid SEC1 EC key"), "{err}");
    }

    #[test]
    fn sec1_without_named_curve() {
        let sec1 = seq(&[der(1u32), der(OctetString::new(&[5; 32]))]);
        let err = parse_private_key(&block(Label::EcPrivateKey, &sec1)).unwrap_err();
        assert!(err.to_string().contains("does not name its curve"), "{err}");
        // `[0]` holding explicit parameters (a SEQUENCE) instead of a curve's OID.
        let explicit = seq(&[
            der(1u32),
            der(OctetString::new(&[5; 32])),
            der(TaggedExplicit::<Sequence, Error, 0>::explicit(
                Sequence::new(der(1u32).into()),
            )),
        ]);
        let err = parse_private_key(&block(Label::EcPrivateKey, &explicit)).unwrap_err();
        assert!(
            err.to_string().contains("explicit curve parameters"),
            "{err}"
        );
    }

    /// Unknown curves and algorithms are named by their dotted OID, cut short.
    #[test]
    fn unknown_oids_are_named() {
        assert_eq!(
            KeyType::from_curve(&OID_SIG_ED25519),
            Err("an EC key on curve 1.3.101.112".into())
        );
        let arcs: Vec<u64> = (1..=30).collect();
        let long = Oid::from(&arcs).unwrap();
        let msg = KeyType::from_curve(&long).unwrap_err();
        assert!(msg.len() < 100 && msg.ends_with('…'), "{msg}");
        let x25519 = seq(&[
            der(0u32),
            seq(&[der(OID_X25519)]),
            der(OctetString::new(&[4; 34])),
        ]);
        let err = parse_private_key(&block(Label::PrivateKey, &x25519)).unwrap_err();
        assert!(err.to_string().contains("X25519"), "{err}");
        // An AlgorithmIdentifier that does not start with an OID.
        let unreadable = seq(&[
            der(0u32),
            seq(&[der(0u32)]),
            der(OctetString::new(&[4; 34])),
        ]);
        let err = parse_private_key(&block(Label::PrivateKey, &unreadable)).unwrap_err();
        assert_eq!(err.code(), "key_unsupported");
        assert!(
            err.to_string().contains("an unreadable key algorithm"),
            "{err}"
        );
    }

    #[test]
    fn modulus_sizes() {
        assert_eq!(unsigned_bits(&[0, 0x80, 0]), 16);
        assert_eq!(unsigned_bits(&[0x01, 0]), 9);
        assert_eq!(unsigned_bits(&[0, 0]), 0);
        assert_eq!(unsigned_bits(&[]), 0);
        for bits in [2047, 2048, 2049] {
            assert_eq!(pkcs1_bits(&fake_rsa_pkcs1_der(bits)), Ok(bits));
        }
        let pem = encode("PRIVATE KEY", &[1]);
        assert!(from_pem(&pem).is_err());
    }
}
