//! Which certificate serves which name, and the crt-list that says so. Pure.
//!
//! Every SNI name is given to exactly one certificate, so HAProxy never has to choose between
//! duplicates: the certificate named after the host (`shop.example.com`, or
//! `wildcard.example.com` for `*.example.com`) first, then the one that expires last, then by
//! name. HAProxy itself prefers an exact SNI entry over a wildcard one, and falls back to the
//! first line of the list, the default certificate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use crate::model::{CertName, Domain};
use crate::store::CertRecord;

/// What the choice needs to know about one installed certificate.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub name: &'a CertName,
    pub names: &'a [Domain],
    pub not_after: i64,
}

/// One crt-list line after the default: a certificate and the SNI names it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrtListEntry {
    pub cert: CertName,
    /// `shop.example.com` or `*.example.com`, as crt-list SNI filters.
    pub filters: Vec<String>,
}

/// The candidates of the certificates the database knows.
pub fn candidates<'r>(records: impl IntoIterator<Item = &'r CertRecord>) -> Vec<Candidate<'r>> {
    records
        .into_iter()
        .map(|r| Candidate {
            name: &r.name,
            names: &r.names,
            not_after: r.not_after,
        })
        .collect()
}

/// Gives every name to one certificate; certificates left with no name are not listed.
pub fn assign(candidates: &[Candidate<'_>]) -> Vec<CrtListEntry> {
    let mut owner: BTreeMap<String, &Candidate<'_>> = BTreeMap::new();
    for c in candidates.iter().filter(|c| !c.name.is_default()) {
        for name in c.names {
            let host = name.to_string();
            let better = match owner.get(&host) {
                None => true,
                Some(current) => rank(c, &host) < rank(current, &host),
            };
            if better {
                owner.insert(host, c);
            }
        }
    }
    let mut served: BTreeMap<&CertName, Vec<String>> = BTreeMap::new();
    for (host, c) in &owner {
        served.entry(c.name).or_default().push(host.clone());
    }
    served
        .into_iter()
        .map(|(cert, filters)| CrtListEntry {
            cert: cert.clone(),
            filters,
        })
        .collect()
}

/// Lower is better.
fn rank<'c>(c: &'c Candidate<'_>, host: &str) -> (bool, std::cmp::Reverse<i64>, &'c CertName) {
    let named_after = CertName::for_host(host).is_ok_and(|n| &n == c.name);
    (!named_after, std::cmp::Reverse(c.not_after), c.name)
}

/// The PEM file HAProxy loads for a certificate.
pub fn pem_path(certs_dir: &Path, name: &CertName) -> std::path::PathBuf {
    certs_dir.join(format!("{name}.pem"))
}

/// The crt-list file: the default certificate first (it answers unknown SNI), then one line
/// per certificate with its names. Options come from the bind line.
pub fn render(certs_dir: &Path, served: &[CrtListEntry]) -> Vec<u8> {
    let mut out = format!(
        "# {}\n{}\n",
        crate::render::HEADER,
        pem_path(certs_dir, &CertName::default_cert()).display()
    );
    for s in served {
        let _ = writeln!(
            out,
            "{} {}",
            pem_path(certs_dir, &s.cert).display(),
            s.filters.join(" ")
        );
    }
    out.into_bytes()
}

/// The certificate HAProxy answers `host` with, by the same rules.
pub fn serving<'s>(served: &'s [CrtListEntry], host: &str) -> Option<&'s CertName> {
    let exact = served.iter().find(|s| s.filters.iter().any(|f| f == host));
    exact
        .or_else(|| {
            let (_, parent) = host.split_once('.')?;
            let wildcard = format!("*.{parent}");
            served.iter().find(|s| s.filters.contains(&wildcard))
        })
        .map(|s| &s.cert)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Domain {
        s.parse().unwrap()
    }

    #[test]
    fn each_name_goes_to_one_certificate() {
        let (shop, other, wild) = (
            "shop.example.com".parse::<CertName>().unwrap(),
            "bundle".parse::<CertName>().unwrap(),
            "wildcard.example.com".parse::<CertName>().unwrap(),
        );
        let shop_names = [d("shop.example.com")];
        let bundle_names = [d("shop.example.com"), d("api.example.com")];
        let wild_names = [d("*.example.com")];
        let served = assign(&[
            Candidate {
                name: &other,
                names: &bundle_names,
                not_after: 2_000,
            },
            Candidate {
                name: &shop,
                names: &shop_names,
                not_after: 1_000,
            },
            Candidate {
                name: &wild,
                names: &wild_names,
                not_after: 1_000,
            },
        ]);
        // Named after the host beats expiring later.
        assert_eq!(serving(&served, "shop.example.com"), Some(&shop));
        assert_eq!(serving(&served, "api.example.com"), Some(&other));
        assert_eq!(serving(&served, "www.example.com"), Some(&wild));
        assert_eq!(serving(&served, "a.b.example.com"), None);
        assert_eq!(serving(&served, "example.com"), None);
        let text = String::from_utf8(render(Path::new("/c"), &served)).unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "/c/default.pem",
                "/c/bundle.pem api.example.com",
                "/c/shop.example.com.pem shop.example.com",
                "/c/wildcard.example.com.pem *.example.com"
            ]
        );
    }
}
