//! certs: the test CA made for a run (rcgen, ECDSA P-256) and the leaf bundles it writes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use hapctl::tls::x509::CertInfo;
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
};

use crate::sys::TempDir;

/// A CA made for this run; it writes leaf bundles into its folder.
pub(super) struct TestCa {
    pub(super) issuer: CertifiedIssuer<'static, KeyPair>,
    pub(super) dir: TempDir,
    /// Distinguishes this run's serials from any earlier run's.
    pub(super) nonce: u32,
    pub(super) next: AtomicU64,
}

/// One leaf bundle on disk.
#[derive(Debug, Clone)]
pub(super) struct Leaf {
    pub(super) name: String,
    /// As `CertInfo` prints it.
    pub(super) serial: String,
    pub(super) pem: PathBuf,
}

impl TestCa {
    pub(super) fn new() -> anyhow::Result<TestCa> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "hapctl-bench test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = date_time_ymd(2024, 1, 1);
        params.not_after = date_time_ymd(2036, 1, 1);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        let nonce = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
            .unwrap_or(0)
            ^ std::process::id();
        Ok(TestCa {
            issuer,
            dir: TempDir::new("certs-pem")?,
            nonce,
            next: AtomicU64::new(1),
        })
    }

    /// A new leaf for `name` (a new key and a new serial each time), written as a bundle.
    pub(super) fn leaf(&self, name: &str) -> anyhow::Result<Leaf> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_string()])?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        // 0x4B first: positive, no padding byte, never a leading zero.
        let mut serial = vec![0x4B];
        serial.extend(self.nonce.to_be_bytes());
        serial.extend(self.next.fetch_add(1, Ordering::SeqCst).to_be_bytes());
        params.serial_number = Some(SerialNumber::from(serial));
        params.not_before = date_time_ymd(2025, 1, 1);
        params.not_after = date_time_ymd(2030, 1, 1);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        let info = CertInfo::from_der(cert.der())?;
        let pem = format!("{}{}{}", cert.pem(), self.issuer.pem(), key.serialize_pem());
        let path = self.dir.path().join(format!("{name}.{}.pem", info.serial));
        std::fs::write(&path, pem).with_context(|| format!("write {}", path.display()))?;
        Ok(Leaf {
            name: name.to_string(),
            serial: info.serial,
            pem: path,
        })
    }
}
