//! Test material: a throwaway PKI made with `rcgen`, and corpora of bad and good bundles with
//! the outcome each must have. Compiled always (it only needs `rcgen`), so the CLI and API
//! integration tests can send exactly the bundles the unit tests check.
//!
//! Validity dates are days before and after a given `now`: the `*_at` functions take the real
//! clock (for tests of the binary), the others use the fixed [`NOW`] (for unit tests, whose
//! messages then show fixed dates).
//!
//! Nothing here is secret: every key is generated per run, except the few fixed keys below
//! that exist only to be refused or accepted (made once with OpenSSL).

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};

use x509_parser::asn1_rs::{Integer, Sequence, ToDer};
use x509_parser::num_bigint::BigUint;

use super::key::KeyType;
use super::pem::{encode, parse_blocks, MAX_BUNDLE_BYTES};
use super::x509::rfc3339;

/// The fixed `now` of [`hostile_corpus`] and [`accepted_corpus`]: 2030-01-01T00:00:00Z.
pub const NOW: i64 = 1_893_456_000;

/// Validity in days from the day of `now`: (first day, last day).
type Span = (i64, i64);
/// The test CAs: five years back, ten ahead.
const CA_SPAN: Span = (-1826, 3652);
/// A current leaf: at [`NOW`], 2029-06-01 to 2030-09-01.
const LEAF_SPAN: Span = (-214, 243);

/// The unix time of midnight UTC `days` after the day of `now`.
fn day(now: i64, days: i64) -> i64 {
    (now.div_euclid(86_400) + days) * 86_400
}

fn set_validity(p: &mut CertificateParams, now: i64, span: Span) {
    let date =
        |unix| time::OffsetDateTime::from_unix_timestamp(unix).expect("corpus dates are in range");
    p.not_before = date(day(now, span.0));
    p.not_after = date(day(now, span.1));
}

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

/// Root → intermediate → leaf (`www.example.com`, `example.com`), all ECDSA P-256.
pub struct Pki {
    now: i64,
    root: CertifiedIssuer<'static, KeyPair>,
    intermediate: CertifiedIssuer<'static, KeyPair>,
    leaf_pem: String,
    leaf_key: KeyPair,
}

impl Pki {
    /// Valid at [`NOW`].
    pub fn generate() -> Pki {
        Pki::generate_at(NOW)
    }

    /// Valid at `now` (the leaf from 214 days before to 243 days after).
    pub fn generate_at(now: i64) -> Pki {
        let root = ca("hapctl Test Root", None, now, CA_SPAN);
        let intermediate = ca("hapctl Test Intermediate", Some(&root), now, CA_SPAN);
        let leaf_key = new_key();
        let leaf_pem = issue_leaf(
            &["www.example.com", "example.com"],
            &leaf_key,
            &intermediate,
            now,
            |p| p.serial_number = Some(SerialNumber::from_slice(&[0x8F, 0x01, 0x02])),
        );
        Pki {
            now,
            root,
            intermediate,
            leaf_pem,
            leaf_key,
        }
    }

    /// Leaf, intermediate, key: the ordinary good bundle.
    pub fn basic(&self) -> Vec<u8> {
        cat(&[
            &self.leaf_pem,
            &self.intermediate.pem(),
            &self.leaf_key.serialize_pem(),
        ])
    }

    /// A leaf for `key` and `names` with the intermediate: the chain a CA would return.
    pub fn leaf_for(&self, key: &KeyPair, names: &[&str]) -> String {
        issue_leaf(names, key, &self.intermediate, self.now, |_| {}) + &self.intermediate.pem()
    }

    /// Like [`Pki::leaf_for`], with an empty subject (names in the SAN only).
    pub fn leaf_for_empty_subject(&self, key: &KeyPair, names: &[&str]) -> String {
        issue_leaf(names, key, &self.intermediate, self.now, |p| {
            p.distinguished_name = rcgen::DistinguishedName::new();
        }) + &self.intermediate.pem()
    }

    /// The key identifier the leaf's authorityKeyIdentifier carries.
    pub fn intermediate_key_id(&self) -> Vec<u8> {
        CertificateParams::default().key_identifier(self.intermediate.key())
    }

    pub fn leaf_key_pem(&self) -> String {
        self.leaf_key.serialize_pem()
    }
}

fn new_key() -> KeyPair {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256 key generation")
}

fn params(cn: &str, names: &[&str], now: i64, span: Span) -> CertificateParams {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut p = CertificateParams::new(names).expect("valid test names");
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    set_validity(&mut p, now, span);
    p.use_authority_key_identifier_extension = true;
    p
}

fn ca(
    cn: &str,
    issuer: Option<&CertifiedIssuer<'static, KeyPair>>,
    now: i64,
    span: Span,
) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = params(cn, &[], now, span);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    match issuer {
        Some(issuer) => CertifiedIssuer::signed_by(p, new_key(), issuer),
        None => CertifiedIssuer::self_signed(p, new_key()),
    }
    .expect("test CA")
}

/// A server certificate valid for [`LEAF_SPAN`] around `now` unless `tweak` says otherwise.
fn issue_leaf(
    names: &[&str],
    key: &KeyPair,
    issuer: &CertifiedIssuer<'static, KeyPair>,
    now: i64,
    tweak: impl FnOnce(&mut CertificateParams),
) -> String {
    let cn = names.first().copied().unwrap_or("leaf");
    let mut p = params(cn, names, now, LEAF_SPAN);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    tweak(&mut p);
    p.signed_by(key, issuer).expect("test leaf").pem()
}

/// A leaf for `www.example.com` with a fresh key: (certificate PEM, key PEM).
fn keyed(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    now: i64,
    tweak: impl FnOnce(&mut CertificateParams),
) -> (String, String) {
    let k = new_key();
    (
        issue_leaf(&["www.example.com"], &k, issuer, now, tweak),
        k.serialize_pem(),
    )
}

/// The DER of the first block of `pem`.
fn pem_body(pem: &str) -> Vec<u8> {
    parse_blocks(pem.as_bytes())
        .expect("test PEM")
        .remove(0)
        .der
}

/// `pem` with the character at (0-based) `line`, `column` replaced.
fn replace_char(pem: &str, line: usize, column: usize, c: char) -> String {
    let mut lines: Vec<String> = pem.lines().map(str::to_owned).collect();
    lines[line].replace_range(column..column + 1, &c.to_string());
    lines.join("\n") + "\n"
}

fn cat(parts: &[&str]) -> Vec<u8> {
    parts.concat().into_bytes()
}

fn names(list: &[&str]) -> Vec<String> {
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

/// Encrypted by `openssl pkcs8 -topk8 -v2 aes256` (password `hapctl-test`).
const ENCRYPTED_PKCS8: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----
MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAj0PyUBz7t0AAICCAAw
DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEDSLYFA/gimKKcb6NcRGLfEEgZCH
k0s2gx8pRqYH+y7niA2UlUtTaqRL+ABT6aIJrSdvNyvprQjWMiOES4lhElEl68AW
2R9JUX93+iCYTIcZlG68JAMjYJhOsywpwVZx/izs3U2C2XDT812PPd7LrYZPRFbL
6hDHfgqtjxwxIPPAEOR/5zE6EC8fVM/M14LCu4rY3CApfRz26p2jqHeDDSBreEs=
-----END ENCRYPTED PRIVATE KEY-----
";

/// `openssl genrsa -traditional -aes128` (password `hapctl-test`): the legacy header form.
const LEGACY_ENCRYPTED_RSA: &str = "-----BEGIN RSA PRIVATE KEY-----
Proc-Type: 4,ENCRYPTED
DEK-Info: AES-128-CBC,C4185FF00E55E4DC365FF11758FB71DD

um3hYRxP57nLGxZT38ZuDh06Uo/SVQNKiNyiJFyfNPKfYVHhI0Z9j+dktMhlzuFq
u/qwlY2RYAhM3+wq5nscC2cM5p/7riRhbGuS9haJMUN+lt6eKv4N8usJi+yKwizJ
NSbbazZpVPMg4h2lHqQwaJIMLXMdjHvOZ/hPqKuAZGgI6Me4vpGKCS8L1tbqTB82
W70yuzsf+tVnCftFAVxPqdNq3WgLUZqeS9lhNO2xA3qav/0+MFlE7iwePuMINGNV
jJVO9ABxZ840xRfWBmP1TB25Fz/E+V49M42C72Q+PEEVHjAsO+1XDOVhXAjbSdty
dyriCI/9zxT6oPsJlaBPUACMNqtRKl/jCxyc7X0gBTnomFnGAg4gVDN59Wy3D5Zg
Of81pfw+14sM6PoGFjdhY3erXXWqqmJkEAd5tysJDkz3qMW1PIEQTUn/yp7Xmjmm
Z7qyIw496Fo2c8eAyk/8h/YHCac8fhK5LCCQ6NNCRDIJwZHLibzelbiaKmjCdhBH
2XByE8K4Fz45WNBvoYtj6aq1BbFgCz3jOXsyV41WYOOvntEIyKXs7FdKD4ck41QB
Uc+u07eloIysheO7Q3m6aPG3lwKDVfFbVghFjiObT9loR0tgRWCBflkEuW9aKp2n
yl7uMg/+SAiM4ksgJRfwYtXcQR5yiq3WnOP51uLNHc/MA8GCK0vy9OgOt4up3Qoe
CnV0YnzMxjmBf6KAcWERhNywmLM2NtV1NWy34FIiQWV90yoTkQgr9lVhyicOUnYF
9MBtWme26Hvm7FgDWORPyhxCSH6NFlznwhIdJIAjOW53fsa5/RCG/tejmf9vO+Ce
-----END RSA PRIVATE KEY-----
";

/// `openssl genrsa -traditional 1024`.
const RSA_1024: &str = "-----BEGIN RSA PRIVATE KEY-----
MIICXQIBAAKBgQDKRsrXu/Mxu4P5wgPpV/vgscEhNjZSyvgQMTzdigszXthAXgnP
Fl/Rlp2GmY+uCFcAa8OAKnyBVx0XykpGp/mCj7SNv+qT9Xi0BFbAlN8o23mZK8xj
a6ub90YlV9rau+bFb1GvkRnDpkmTI/1SLPgfFhRBGy6GDTm+SXa8sUs9gQIDAQAB
AoGAJLwijndlvTxuxWcEytXdunrNtjhgOTz/PAGVKi6txhCNeXMamO9ZS3js9srg
mxyMoFjx0k7k+aBWekGUp6xN1aOGcbDdsvg6PTkQ1BpMirzP47wwUK5V4vDvvqgP
WN2wg6PK8DEqa7jdWvXf2W1BxUO8SgYK5kA8kUX+i0kaoFkCQQDtEHCwQjrirK/V
sg0pD5n6b11fC8pGQoU+OnqBTlF13QHxIvZKqCXvLoVblWRNL+eFASWGr2yx6UZs
aDrwlQfTAkEA2m8A0C0a3vovuzmanlfRGP4tQg+wiK8NMrqLT2Lq/PbDnYe6bzYw
bAQhB0flVTIHssRu2xGysP0RH94VhvDE2wJBAOl3DWOodhGSe8B6j1dm0/+8+TmH
hPdYv5wfP1Jk7PikZSszgVbY7jL1n8QoBhW2Hc3w6SIRVXyI/h/5LkKMop0CQD5j
AdpzZ39T+ZoBw9WBw2jd/9MkZAlF5gEdInjUCcWiPRCbGXZ2BbJ0I3LO6ANDPMuk
Kv1KuryuKtvtNDzMO40CQQCrivkWj72x1FpqV3Sqh8hCpRBhzF5Cwx22MU+Yukh1
MdV4iq0JhHJjgGDdRDtq4te3Mxqp5Hn0VcPDvOd425Xs
-----END RSA PRIVATE KEY-----
";

/// `openssl genrsa -traditional 2048`: a PKCS#1 key to accept.
const RSA_2048_PKCS1: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEoAIBAAKCAQEArHzgKd+SttxtED8/u8H6nRg/1ZgG1dvSFQTkx9jB8/eyXaFl
jN4AyaLpSkjILsLGUznhN4rA/cNrrQbsJo3eYGiM3OzOFGmylpaZkyybU0DHi8l4
bny1HMql7unNNRQTPVN4/AES1qnmVAvQ3st7wDgq36CgprYwcFoQsKjDObJYmJlw
SsDGRvIOzLHrmYXolRhnDX9fxkX5nQ3RH+UnM0U4tNszATaYCQupJlLq4A1VwcuW
+TQxghvtqvLu82RZNL4FeFcBYB8635JSbBZD4xA3PGDhKzXNabudH/w1gKiuwbMI
tzvVH9BawnzwFwaXUBk7HoW8TsPIrMRQm8be3wIDAQABAoH/SYGTLzzNi1GNvZBP
d8TPnPmfxuJ+m959NS2WYijkn8kgrZzP7A7x018mHJKVH8vyAwGOttJqxyVXUmVe
wgcevXL5749eMsAi1yKhJps2rwol/65gOPeh5JKpPOVd2GohEyqw+PXvxvaxEFno
NY4euxYb1GsCoCoc3YJKgcSjflVr8L4isq7sXEQuM6xMf6L0/7KG4HsDb19hICLX
fUI8uRarNK4H6gjRKjCXMUmG6/HnJOrUJ032PxwOLac3t7RqqsLF6qmZHKuIz8Oe
wCyfZCoyvENRcdIifr54zXIxAHqUbJVHJG/D5nr/gur3J8l03fdtGVB3GiOuOMNh
S7yhAoGBAOKU4+Y8ntgJr2i9lCdfzYmnflkU1uKRCufT1mF9t0CzMwGER+9s+ihv
2X1ekQhHC648uQULK+g3Dl8uTboDx5GSQCkI3M9EG4bjLFujJYRO8y+Q+V5v01+0
dFzXeyjOkB9Fwro97upIdzAcMdUxHY0HQQyGP3eOnTZzXSEONq2ZAoGBAMLiBImz
zK24bNQK6xZUhDUq5JdyvJQdUFIrPiyJ312JEkfB7I7wlPLDpQtRgYV1AO48maxV
HmvNwvhQXc5BnuMSe2PaeMLC+UEWHX68Zz5AXR9x2pe0Uk792fMUKhcmdK3DPU5c
cw6v3VdUInkxgUPKum1YA1E/QwM40OHAYgs3AoGAVIY2fi0fFHiIdwpBum6Cvlc9
Sv37K4nwB4t+7d93/SrcXDR8oVSF/Y+8Eoi0keHu+ZCtdLQ2LOpc8iTT2hCO4j8s
sCIePTOrESat5YF2/WR2U8hBPnl44LrwrbG0wAROv1vGyLNR7RQbYlciP+WSoImU
OpfaFT+eZjGjDDHBNAECgYAmGF6AuIf7MYD8lkHMNKs/ZWoX/NLGNVC9LzzRIgZq
11+ebVcbvgWvyvTZWI50EyIib/AuUtlGg4toVPVxWzx+8N7z7wIKOGjXA0ayvouE
DLrnaa8sVpB8Zn0TWk68BcVrLi4uwj2vkks3RfgTLs0w/lEhDMJhQHeOCq4yYxQH
UwKBgGPn0Ov5/6OvCZoIyVaUS14zI1JaxcHVojG/XAyN3OWWCO10P7ZBjtJT2ZZA
ZlGk2TrwwIPD02vRboFohv9eY9n/r8iVGfZry3YSfnGL9zwF8NYAgWd8m5JKnNm2
Rk2xF+TH8+aLJWAMCAabjMJ7nuSdRX+Jrt0lA6ECfxYV/txR
-----END RSA PRIVATE KEY-----
";

/// `openssl ecparam -name prime256v1 -genkey`: SEC1 key after an EC PARAMETERS block.
const EC_PARAMETERS_AND_SEC1: &str = "-----BEGIN EC PARAMETERS-----
BggqhkjOPQMBBw==
-----END EC PARAMETERS-----
-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIKq9GHoXDBdEms5ll4v2ulqQ0496+W/y35qj7HOShlP/oAoGCCqGSM49
AwEHoUQDQgAEQqcCLXuqJ3IG4JdcYUSLfs78hfabo8I5GMZGFDDbkMwDeYIwdp9H
zG+WBwDnRmQ7tDL1UO0oThd1azyxyygaPg==
-----END EC PRIVATE KEY-----
";

fn sec1_key_pem() -> &'static str {
    let start = EC_PARAMETERS_AND_SEC1
        .find("-----BEGIN EC PRIVATE KEY")
        .unwrap_or(0);
    &EC_PARAMETERS_AND_SEC1[start..]
}

/// A PKCS#1 key with a `bits`-bit modulus: refused on its size before its numbers matter.
fn fake_rsa_pkcs1(bits: usize) -> String {
    encode("RSA PRIVATE KEY", &fake_rsa_pkcs1_der(bits))
}

/// The DER of [`fake_rsa_pkcs1`]: `RSAPrivateKey { version 0, modulus 2^(bits-1), 65537 }`
/// (a size check reads no further).
pub(crate) fn fake_rsa_pkcs1_der(bits: usize) -> Vec<u8> {
    let modulus = BigUint::from(1u8) << bits.saturating_sub(1);
    // A DER INTEGER is signed: a high bit needs a 0x00 before it.
    let mut modulus = modulus.to_bytes_be();
    if modulus[0] & 0x80 != 0 {
        modulus.insert(0, 0);
    }
    let items = [
        0u32.to_der_vec(),
        Integer::new(&modulus).to_der_vec(),
        65_537u32.to_der_vec(),
    ];
    let items: Vec<u8> = items
        .into_iter()
        .flat_map(|item| item.expect("DER of an integer"))
        .collect();
    Sequence::new(items.into())
        .to_der_vec()
        .expect("DER of a sequence")
}

/// The bad bundles at [`NOW`], each with the error it must get.
pub fn hostile_corpus() -> Vec<Case> {
    hostile_corpus_at(NOW)
}

/// The bad bundles, with dates around `now`.
pub fn hostile_corpus_at(now: i64) -> Vec<Case> {
    let pki = Pki::generate_at(now);
    let leaf = pki.leaf_pem.as_str();
    let inter = pki.intermediate.pem();
    let inter = inter.as_str();
    let root = pki.root.pem();
    let root = root.as_str();
    let key = pki.leaf_key.serialize_pem();
    let key = key.as_str();
    let basic = pki.basic();
    let basic_text = String::from_utf8_lossy(&basic).into_owned();
    let leaf_der = pem_body(leaf);

    let other_root = ca("Other Root", None, now, CA_SPAN);
    let other_inter = ca("Other Intermediate", Some(&other_root), now, CA_SPAN);
    let expired_span = (-1826, -365);
    let expired_inter = ca(
        "hapctl Expired Intermediate",
        Some(&pki.root),
        now,
        expired_span,
    );
    // Same name as the real intermediate, another key.
    let impostor = ca("hapctl Test Intermediate", Some(&pki.root), now, CA_SPAN);
    let not_ca = {
        let p = params("hapctl Not A CA", &["not-a-ca.example.com"], now, CA_SPAN);
        CertifiedIssuer::signed_by(p, new_key(), &pki.root).expect("test issuer")
    };

    let (past, future): (Span, Span) = ((-365, -275), (59, 151));
    let (expired_leaf, expired_key) = keyed(&pki.intermediate, now, |p| set_validity(p, now, past));
    let (future_leaf, future_key) = keyed(&pki.intermediate, now, |p| set_validity(p, now, future));
    let (under_expired, under_expired_key) = keyed(&expired_inter, now, |_| {});
    let (under_not_ca, under_not_ca_key) = keyed(&not_ca, now, |_| {});
    let (client, client_key) = keyed(&pki.intermediate, now, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    });
    let wildcard_key = new_key();
    let wildcard = issue_leaf(
        &["*.example.com"],
        &wildcard_key,
        &pki.intermediate,
        now,
        |_| {},
    );
    let wildcard_key = wildcard_key.serialize_pem();
    let p521 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).expect("P-521 key");
    let ed25519 = KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("Ed25519 key");
    let csr = CertificateParams::new(vec!["www.example.com".to_string()])
        .expect("test CSR names")
        .serialize_request(&pki.leaf_key)
        .expect("test CSR")
        .pem()
        .expect("CSR PEM");
    let extra_certs: String = (0..9)
        .map(|i| {
            let p = params(&format!("extra {i}"), &[], now, CA_SPAN);
            p.self_signed(&new_key()).expect("test cert").pem()
        })
        .collect();

    let mut cases = Vec::new();
    let mut add = |name, input: Vec<u8>, must: &[&str], code, fragment: &str| {
        cases.push(Case {
            name,
            input,
            now,
            must_cover: names(must),
            code,
            fragment: fragment.to_string(),
        });
    };
    let date = |days| rfc3339(day(now, days));
    let www = &["www.example.com"][..];

    // The chain and the key.
    add(
        "key_mismatch",
        cat(&[leaf, inter, &new_key().serialize_pem()]),
        www,
        "key_mismatch",
        "the private key does not belong to the certificate CN=www.example.com",
    );
    add(
        "key_of_other_type",
        cat(&[
            leaf,
            inter,
            &KeyType::EcdsaP384
                .generate()
                .expect("P-384")
                .serialize_pem(),
        ]),
        www,
        "key_mismatch",
        "(the key is ecdsa-p384, the certificate's is ecdsa-p256)",
    );
    add(
        "misordered_chain",
        cat(&[leaf, root, inter, key]),
        www,
        "chain_misordered",
        "certificate #2 (CN=hapctl Test Root) is not the issuer of certificate #1",
    );
    add(
        "intermediate_before_leaf",
        cat(&[inter, leaf, key]),
        www,
        "chain_leaf_not_first",
        "the leaf must come first",
    );
    add(
        "unrelated_intermediate",
        cat(&[leaf, &other_inter.pem(), key]),
        www,
        "chain_unrelated",
        "certificate #2 (CN=Other Intermediate) is unrelated",
    );
    add(
        "unrelated_extra_root",
        cat(&[leaf, inter, &other_root.pem(), key]),
        www,
        "chain_unrelated",
        "certificate #3 (CN=Other Root) is unrelated",
    );
    add(
        "impostor_intermediate",
        cat(&[leaf, &impostor.pem(), key]),
        www,
        "chain_wrong_issuer_key",
        "its key did not sign it",
    );
    add(
        "issuer_not_ca",
        cat(&[&under_not_ca, &not_ca.pem(), &under_not_ca_key]),
        www,
        "chain_issuer_not_ca",
        "is not a CA certificate",
    );
    add(
        "duplicate_leaf",
        cat(&[leaf, leaf, inter, key]),
        www,
        "chain_duplicate",
        "certificate #2 is a copy of certificate #1",
    );
    add(
        "duplicate_intermediate",
        cat(&[leaf, inter, inter, key]),
        www,
        "chain_duplicate",
        "certificate #3 is a copy of certificate #2",
    );
    add(
        "ca_as_leaf",
        cat(&[inter, root, &pki.intermediate.key().serialize_pem()]),
        &[],
        "leaf_is_ca",
        "is a CA certificate (basicConstraints CA:TRUE)",
    );
    add(
        "client_certificate",
        cat(&[&client, inter, &client_key]),
        www,
        "leaf_not_server",
        "lacks serverAuth",
    );

    // Dates and names.
    add(
        "expired_leaf",
        cat(&[&expired_leaf, inter, &expired_key]),
        www,
        "leaf_expired",
        // Not the second of "now": the case runs a moment after the corpus is made.
        &format!("expired on {} (now is ", date(past.1)),
    );
    add(
        "not_yet_valid_leaf",
        cat(&[&future_leaf, inter, &future_key]),
        www,
        "leaf_not_yet_valid",
        &format!("is not valid before {}", date(future.0)),
    );
    add(
        "expired_intermediate",
        cat(&[&under_expired, &expired_inter.pem(), &under_expired_key]),
        www,
        "chain_expired",
        &format!(
            "intermediate certificate #2 (CN=hapctl Expired Intermediate) expired on {}",
            date(expired_span.1)
        ),
    );
    add(
        "names_not_covered",
        basic.clone(),
        &["www.example.com", "shop.example.net"],
        "names_not_covered",
        "does not cover shop.example.net; it covers www.example.com, example.com",
    );
    add(
        "wildcard_not_apex",
        cat(&[&wildcard, inter, &wildcard_key]),
        &["a.example.com", "example.com"],
        "names_not_covered",
        "does not cover example.com; it covers *.example.com",
    );
    add(
        "wildcard_not_two_levels",
        cat(&[&wildcard_key, &wildcard, inter]),
        &["a.b.example.com"],
        "names_not_covered",
        "does not cover a.b.example.com",
    );

    // Keys.
    add(
        "encrypted_pkcs8",
        cat(&[leaf, inter, ENCRYPTED_PKCS8]),
        www,
        "key_encrypted",
        "decrypt it first, e.g. `openssl pkey -in key.pem -out plain.pem`",
    );
    add(
        "encrypted_legacy_rsa",
        cat(&[leaf, inter, LEGACY_ENCRYPTED_RSA]),
        www,
        "key_encrypted",
        "the RSA PRIVATE KEY block on line",
    );
    add(
        "rsa_1024",
        cat(&[leaf, inter, RSA_1024]),
        www,
        "key_unsupported",
        "is a 1024-bit RSA key",
    );
    add("rsa_3000", cat(&[leaf, inter, &fake_rsa_pkcs1(3000)]), www, "key_unsupported",
        "is a 3000-bit RSA key, which is not supported: use a key of type ecdsa-p256, ecdsa-p384, rsa2048, rsa3072, rsa4096");
    add(
        "p521_key",
        cat(&[&pki.leaf_for(&p521, www), &p521.serialize_pem()]),
        www,
        "key_unsupported",
        "is an ECDSA P-521 key",
    );
    add(
        "ed25519_key",
        cat(&[&pki.leaf_for(&ed25519, www), &ed25519.serialize_pem()]),
        www,
        "key_unsupported",
        "is an Ed25519 key",
    );
    add(
        "sec1_key_under_rsa_label",
        cat(&[
            leaf,
            inter,
            &sec1_key_pem().replace("EC PRIVATE", "RSA PRIVATE"),
        ]),
        www,
        "key_malformed",
        "is not a valid PKCS#1 RSA key",
    );
    add(
        "only_key",
        key.as_bytes().to_vec(),
        &[],
        "bundle_no_certificate",
        "has no certificate",
    );
    add(
        "only_certs",
        cat(&[leaf, inter]),
        &[],
        "bundle_no_key",
        "has no private key",
    );
    add(
        "two_keys",
        cat(&[leaf, inter, key, &new_key().serialize_pem()]),
        &[],
        "bundle_too_many_keys",
        "has 2 private keys",
    );
    add(
        "same_key_twice",
        cat(&[key, leaf, inter, key]),
        &[],
        "bundle_too_many_keys",
        "keep only the one that belongs to the certificate",
    );

    // PEM structure.
    add("empty", Vec::new(), &[], "pem_empty", "the input is empty");
    add(
        "whitespace_only",
        b" \r\n\n\t\n".to_vec(),
        &[],
        "pem_empty",
        "the input is empty",
    );
    add(
        "garbage_text",
        b"hello, this is my certificate\n".to_vec(),
        &[],
        "pem_text_outside_blocks",
        "line 1 is outside any",
    );
    add(
        "binary_bytes",
        (0..=255u8).rev().cycle().take(2000).collect(),
        &[],
        "pem_not_text",
        "is not PEM text: a non-ASCII byte on line 1",
    );
    add(
        "der_certificate",
        leaf_der.clone(),
        &[],
        "pem_not_text",
        "openssl x509 -inform der",
    );
    add(
        "nul_bytes",
        basic_text.replacen("-----\n", "-----\n\0", 1).into_bytes(),
        &[],
        "pem_not_text",
        "a NUL byte on line 2",
    );
    add(
        "non_ascii",
        format!("# café\n{basic_text}").into_bytes(),
        &[],
        "pem_not_text",
        "a non-ASCII byte on line 1",
    );
    add(
        "leading_garbage",
        format!("subject=CN=www.example.com\n{basic_text}").into_bytes(),
        &[],
        "pem_text_outside_blocks",
        "line 1 is outside any",
    );
    add(
        "trailing_garbage",
        format!("{basic_text}\nThanks, the ops team\n").into_bytes(),
        &[],
        "pem_text_outside_blocks",
        "not text such as `Bag Attributes`",
    );
    add(
        "bag_attributes",
        format!("Bag Attributes\n    localKeyID: 01 02\n{basic_text}").into_bytes(),
        &[],
        "pem_text_outside_blocks",
        "line 1 is outside any",
    );
    add(
        "truncated_mid_base64",
        basic_text.as_bytes()[..basic_text.len() - key.len() / 2].to_vec(),
        &[],
        "pem_truncated",
        "the PRIVATE KEY block that begins on line",
    );
    add(
        "truncated_before_end",
        cat(&[&leaf.replace("-----END CERTIFICATE-----\n", ""), inter, key]),
        &[],
        "pem_truncated",
        "has no -----END CERTIFICATE----- line",
    );
    add(
        "mismatched_end",
        cat(&[
            &leaf.replace("END CERTIFICATE", "END X509 CERTIFICATE"),
            inter,
            key,
        ]),
        &[],
        "pem_mismatched_end",
        "ends with -----END X509 CERTIFICATE-----",
    );
    add(
        "end_without_begin",
        cat(&[leaf, "-----END CERTIFICATE-----\n", inter, key]),
        &[],
        "pem_end_without_begin",
        "was never begun",
    );
    add(
        "bad_base64",
        cat(&[&replace_char(leaf, 2, 10, '!'), inter, key]),
        &[],
        "pem_bad_base64",
        "is not valid base64 (line 3)",
    );
    add(
        "bad_armour",
        cat(&[
            &leaf.replacen(
                "-----BEGIN CERTIFICATE-----",
                "----BEGIN CERTIFICATE-----",
                1,
            ),
            inter,
            key,
        ]),
        &[],
        "pem_bad_armour",
        "line 1 looks like a PEM armour line",
    );
    add(
        "lone_cr_line_endings",
        basic_text.replace('\n', "\r").into_bytes(),
        &[],
        "pem_bad_armour",
        "looks like a PEM armour line",
    );
    add(
        "header_in_certificate",
        cat(&[
            &leaf.replacen("-----\n", "-----\nComment: exported by a tool\n", 1),
            inter,
            key,
        ]),
        &[],
        "pem_header",
        "has a header line (line 2)",
    );
    add(
        "oversized",
        format!("{basic_text}{}", "\n".repeat(MAX_BUNDLE_BYTES)).into_bytes(),
        &[],
        "pem_too_large",
        "more than the 262144 allowed",
    );
    add(
        "too_many_blocks",
        leaf.repeat(17).into_bytes(),
        &[],
        "pem_too_many_blocks",
        "more than 16 PEM blocks",
    );
    add(
        "eleven_certificates",
        cat(&[leaf, inter, &extra_certs, key]),
        &[],
        "bundle_too_many_certificates",
        "the bundle has 11 certificates, more than the 10 allowed",
    );

    // Blocks that are not a certificate or a key.
    add(
        "crl_block",
        cat(&[
            leaf,
            inter,
            &encode("X509 CRL", &[0x30, 0x03, 0x02, 0x01, 0x01]),
            key,
        ]),
        &[],
        "pem_unsupported_block",
        "the X509 CRL block on line",
    );
    add(
        "csr_block",
        cat(&[&csr, key]),
        &[],
        "pem_unsupported_block",
        "the CERTIFICATE REQUEST block on line 1 is not accepted",
    );
    add(
        "dh_parameters",
        cat(&[
            leaf,
            inter,
            key,
            &encode(
                "DH PARAMETERS",
                &[0x30, 0x06, 0x02, 0x01, 0x17, 0x02, 0x01, 0x02],
            ),
        ]),
        &[],
        "pem_unsupported_block",
        "the DH PARAMETERS block",
    );
    add(
        "trusted_certificate",
        cat(&[
            &leaf.replace("CERTIFICATE", "TRUSTED CERTIFICATE"),
            inter,
            key,
        ]),
        &[],
        "pem_unsupported_block",
        "the TRUSTED CERTIFICATE block on line 1",
    );
    add(
        "ec_parameters",
        cat(&[leaf, inter, EC_PARAMETERS_AND_SEC1]),
        &[],
        "pem_unsupported_block",
        "the EC PARAMETERS block",
    );
    add(
        "public_key_instead",
        cat(&[leaf, inter, &pki.leaf_key.public_key_pem()]),
        &[],
        "pem_unsupported_block",
        "the PUBLIC KEY block",
    );
    add(
        "openssh_key",
        cat(&[
            leaf,
            inter,
            &encode("OPENSSH PRIVATE KEY", b"openssh-key-v1\0"),
        ]),
        &[],
        "pem_unsupported_block",
        "ssh-keygen -p -m PKCS8",
    );

    // Blocks that decode but hold no certificate.
    add(
        "not_a_certificate",
        cat(&[&encode("CERTIFICATE", b"this is not DER at all"), key]),
        &[],
        "cert_malformed",
        "certificate #1 (the CERTIFICATE block on line 1): it is not a valid X.509 certificate",
    );
    add(
        "certificate_cut_short",
        cat(&[leaf, &encode("CERTIFICATE", &pem_body(inter)[..200]), key]),
        &[],
        "cert_malformed",
        "certificate #2 (the CERTIFICATE block on line",
    );
    add(
        "certificate_with_trailing_bytes",
        cat(&[
            &encode("CERTIFICATE", &[leaf_der.as_slice(), &[0, 0]].concat()),
            inter,
            key,
        ]),
        &[],
        "cert_malformed",
        "has 2 bytes after the certificate",
    );
    cases
}

/// The good bundles at [`NOW`], and what they must give.
pub fn accepted_corpus() -> Vec<Accepted> {
    accepted_corpus_at(NOW)
}

/// The good bundles, with dates around `now`.
pub fn accepted_corpus_at(now: i64) -> Vec<Accepted> {
    let pki = Pki::generate_at(now);
    let leaf = pki.leaf_pem.as_str();
    let inter = pki.intermediate.pem();
    let inter = inter.as_str();
    let key = pki.leaf_key.serialize_pem();
    let key = key.as_str();
    let basic = String::from_utf8_lossy(&pki.basic()).into_owned();
    let both = ["www.example.com", "example.com"];

    let sec1 = KeyPair::from_pem(sec1_key_pem()).expect("fixed SEC1 key");
    let pkcs1 = KeyPair::from_pem(RSA_2048_PKCS1).expect("fixed PKCS#1 key");
    let p384 = KeyType::EcdsaP384.generate().expect("P-384 key");
    let wildcard_key = new_key();
    let self_signed_key = new_key();
    let self_signed = params("self.example.com", &["self.example.com"], now, LEAF_SPAN)
        .self_signed(&self_signed_key)
        .expect("self-signed leaf")
        .pem();

    let mut out = Vec::new();
    let mut add = |name, input: String, must: &[&str], leaf_names: &[&str], key_type, served| {
        out.push(Accepted {
            name,
            input: input.into_bytes(),
            now,
            must_cover: names(must),
            names: names(leaf_names),
            key_type,
            served,
        });
    };
    let p256 = KeyType::EcdsaP256;
    add("basic", basic.clone(), &both, &both, p256, 2);
    add(
        "key_first",
        [key, leaf, inter].concat(),
        &both,
        &both,
        p256,
        2,
    );
    add(
        "key_between",
        [leaf, key, inter].concat(),
        &both,
        &both,
        p256,
        2,
    );
    add(
        "crlf_line_endings",
        basic.replace('\n', "\r\n"),
        &both,
        &both,
        p256,
        2,
    );
    add(
        "messy_whitespace",
        format!("\u{feff}\n\n  {}\t\n\n", basic.replace('\n', "  \n")),
        &[],
        &both,
        p256,
        2,
    );
    add(
        "chain_with_root",
        [leaf, inter, &pki.root.pem(), key].concat(),
        &both,
        &both,
        p256,
        2,
    );
    add(
        "leaf_without_intermediate",
        [leaf, key].concat(),
        &[],
        &both,
        p256,
        1,
    );
    add(
        "sec1_key",
        pki.leaf_for(&sec1, &["sec1.example.com"]) + sec1_key_pem(),
        &["sec1.example.com"],
        &["sec1.example.com"],
        p256,
        2,
    );
    add(
        "pkcs1_key",
        pki.leaf_for(&pkcs1, &["rsa.example.com"]) + RSA_2048_PKCS1,
        &["rsa.example.com"],
        &["rsa.example.com"],
        KeyType::Rsa2048,
        2,
    );
    add(
        "p384_key",
        pki.leaf_for(&p384, &["p384.example.com"]) + &p384.serialize_pem(),
        &[],
        &["p384.example.com"],
        KeyType::EcdsaP384,
        2,
    );
    add(
        "wildcard",
        pki.leaf_for(&wildcard_key, &["*.example.com"]) + &wildcard_key.serialize_pem(),
        &["a.example.com", "B.Example.Com"],
        &["*.example.com"],
        p256,
        2,
    );
    add(
        "self_signed_leaf",
        self_signed + &self_signed_key.serialize_pem(),
        &["self.example.com"],
        &["self.example.com"],
        p256,
        1,
    );
    out
}
