//! The throwaway PKI: root → intermediate → leaf, and leaves made to order.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};

use super::{cat, NOW};

/// Validity in days from the day of `now`: (first day, last day).
pub(crate) type Span = (i64, i64);
/// The test CAs: five years back, ten ahead.
pub(crate) const CA_SPAN: Span = (-1826, 3652);
/// A current leaf: at [`NOW`], 2029-06-01 to 2030-09-01.
pub(super) const LEAF_SPAN: Span = (-214, 243);

/// The unix time of midnight UTC `days` after the day of `now`.
pub(super) fn day(now: i64, days: i64) -> i64 {
    (now.div_euclid(86_400) + days) * 86_400
}

pub(crate) fn set_validity(p: &mut CertificateParams, now: i64, span: Span) {
    let date =
        |unix| time::OffsetDateTime::from_unix_timestamp(unix).expect("corpus dates are in range");
    p.not_before = date(day(now, span.0));
    p.not_after = date(day(now, span.1));
}

/// Root → intermediate → leaf (`www.example.com`, `example.com`), all ECDSA P-256.
pub struct Pki {
    pub(super) now: i64,
    pub(super) root: CertifiedIssuer<'static, KeyPair>,
    pub(super) intermediate: CertifiedIssuer<'static, KeyPair>,
    pub(super) leaf_pem: String,
    pub(super) leaf_key: KeyPair,
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

pub(crate) fn new_key() -> KeyPair {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256 key generation")
}

pub(crate) fn params(cn: &str, names: &[&str], now: i64, span: Span) -> CertificateParams {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut p = CertificateParams::new(names).expect("valid test names");
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    set_validity(&mut p, now, span);
    p.use_authority_key_identifier_extension = true;
    p
}

pub(crate) fn ca(
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
pub(super) fn issue_leaf(
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
pub(super) fn keyed(
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
