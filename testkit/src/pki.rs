//! A test CA (rcgen): root → intermediate → leaves, for certificate tests.

use std::io::Read;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

pub struct TestCa {
    root_der: Vec<u8>,
    pub intermediate_pem: String,
    intermediate: Issuer<'static, KeyPair>,
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

fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(90);
}

fn ca_usages() -> Vec<KeyUsagePurpose> {
    vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ]
}

impl TestCa {
    pub fn new(label: &str) -> TestCa {
        let mut root = CertificateParams::new(Vec::<String>::new()).unwrap();
        root.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        root.distinguished_name
            .push(DnType::CommonName, format!("hapctl test root {label}"));
        root.key_usages = ca_usages();
        root.serial_number = Some(random_serial().0);
        validity(&mut root);
        let root_key = KeyPair::generate().unwrap();
        let root_cert = root.self_signed(&root_key).unwrap();
        let root_issuer = Issuer::new(root, root_key);

        let mut inter = CertificateParams::new(Vec::<String>::new()).unwrap();
        inter.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        inter.distinguished_name.push(
            DnType::CommonName,
            format!("hapctl test intermediate {label}"),
        );
        inter.key_usages = ca_usages();
        inter.use_authority_key_identifier_extension = true;
        inter.serial_number = Some(random_serial().0);
        validity(&mut inter);
        let inter_key = KeyPair::generate().unwrap();
        let inter_cert = inter.signed_by(&inter_key, &root_issuer).unwrap();
        TestCa {
            root_der: root_cert.der().to_vec(),
            intermediate_pem: inter_cert.pem(),
            intermediate: Issuer::new(inter, inter_key),
        }
    }

    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.root_der.clone()))
            .unwrap();
        roots
    }

    /// A leaf for `names` (ECDSA P-256, valid from yesterday for 90 days, serverAuth).
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names[0].clone());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let (serial, hex) = random_serial();
        params.serial_number = Some(serial);
        validity(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.intermediate).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            serial: hex,
        }
    }

    /// The upload: leaf, its chain (the intermediate), then the key.
    pub fn bundle(&self, leaf: &Leaf) -> String {
        format!("{}{}{}", leaf.cert_pem, self.intermediate_pem, leaf.key_pem)
    }
}
