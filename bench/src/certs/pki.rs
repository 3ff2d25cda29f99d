//! certs: the kit's test CA (ECDSA P-256), made for a run, and the leaf bundles it writes.

use std::path::PathBuf;

use anyhow::Context;
use hapctl::tls::pem::parse_blocks;
use hapctl::tls::x509::CertInfo;

use crate::sys::TempDir;

/// A CA made for this run; it writes leaf bundles into its folder.
pub(super) struct TestCa {
    ca: testkit::pki::TestCa,
    dir: TempDir,
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
        Ok(TestCa {
            ca: testkit::pki::TestCa::new("hapctl-bench"),
            dir: TempDir::new("certs-pem")?,
        })
    }

    /// A new leaf for `name` (a new key and a new serial each time), written as a bundle.
    pub(super) fn leaf(&self, name: &str) -> anyhow::Result<Leaf> {
        let leaf = self.ca.leaf(&[name]);
        let blocks = parse_blocks(leaf.cert_pem.as_bytes())?;
        let info = CertInfo::from_der(&blocks[0].der)?;
        let path = self.dir.path().join(format!("{name}.{}.pem", info.serial));
        std::fs::write(&path, self.ca.bundle(&leaf))
            .with_context(|| format!("write {}", path.display()))?;
        Ok(Leaf {
            name: name.to_string(),
            serial: info.serial,
            pem: path,
        })
    }
}
