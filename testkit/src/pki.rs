//! A test CA valid now: root → intermediate → leaves, for tests of the running edge. Made
//! with the TLS corpus's PKI (`tls_corpus::pki`, which the bundle tests use at a fixed date),
//! so the workspace has one way of making test certificates.

use std::io::Read;

use rcgen::{
    CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::tls_corpus::pki::{ca, new_key, params, Span, CA_SPAN};

/// A leaf's validity in days around now: from yesterday, for 90 days.
const LEAF_SPAN: Span = (-1, 90);

pub struct TestCa {
    root: CertifiedIssuer<'static, KeyPair>,
    pub intermediate_pem: String,
    intermediate: CertifiedIssuer<'static, KeyPair>,
    now: i64,
}

pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    /// Uppercase hex.
    pub serial: String,
}

fn random_serial() -> (SerialNumber, String) {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .unwrap();
    // Positive, and no leading zero byte: one spelling only.
    bytes[0] = (bytes[0] & 0x7f) | 0x10;
    let hex = bytes.iter().map(|b| format!("{b:02X}")).collect();
    (SerialNumber::from_slice(&bytes), hex)
}

impl TestCa {
    /// A new root and intermediate, named after `label`.
    pub fn new(label: &str) -> TestCa {
        let now = hapctl::clock::unix_now();
        let root = ca(&format!("hapctl test root {label}"), None, now, CA_SPAN);
        let intermediate = ca(
            &format!("hapctl test intermediate {label}"),
            Some(&root),
            now,
            CA_SPAN,
        );
        TestCa {
            root,
            intermediate_pem: intermediate.pem(),
            intermediate,
            now,
        }
    }

    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.root.der().to_vec()))
            .unwrap();
        roots
    }

    /// A leaf for `names` (ECDSA P-256, valid from yesterday for 90 days, serverAuth).
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate for `name` (clientAuth), e.g. for etcd's client-cert-auth.
    pub fn client_leaf(&self, name: &str) -> Leaf {
        self.issue(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let mut params: CertificateParams = params(names[0], names, self.now, LEAF_SPAN);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        let (serial, hex) = random_serial();
        params.serial_number = Some(serial);
        let key = new_key();
        let cert = params.signed_by(&key, &self.intermediate).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            serial: hex,
        }
    }

    /// The root, PEM: what a client trusts.
    pub fn root_pem(&self) -> String {
        self.root.pem()
    }

    /// The upload: leaf, its chain (the intermediate), then the key.
    pub fn bundle(&self, leaf: &Leaf) -> String {
        format!("{}{}{}", leaf.cert_pem, self.intermediate_pem, leaf.key_pem)
    }
}
