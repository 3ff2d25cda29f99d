//! Uploaded certificate bundles: PEM blocks, keys, certificates and chains.
//!
//! The input is tried as a bundle itself, and as an edit of the DER of one block of a good
//! bundle from the test kit's `tls_corpus` (re-encoded as PEM), so that the key and
//! certificate readers behind the PEM layer are reached too.
#![no_main]
use std::sync::OnceLock;

use hapctl::fuzzing::{parse_bundle, BundleCheck};
use hapctl::tls::pem::{encode, parse_blocks};
use testkit::tls_corpus::{accepted_corpus, Accepted, NOW};

/// A good bundle and its blocks (label, DER).
type Good = (Accepted, Vec<(&'static str, Vec<u8>)>);

fn good() -> &'static [Good] {
    static GOOD: OnceLock<Vec<Good>> = OnceLock::new();
    GOOD.get_or_init(|| {
        accepted_corpus()
            .into_iter()
            .map(|case| {
                let blocks = parse_blocks(&case.input).expect("a good bundle");
                let blocks = blocks
                    .into_iter()
                    .map(|b| (b.label.as_str(), b.der))
                    .collect();
                (case, blocks)
            })
            .collect()
    })
}

fn check(input: &[u8], now: i64, must_cover: &[String]) {
    let check = BundleCheck { now, must_cover };
    if let Ok(bundle) = parse_bundle(input, &check) {
        // What HAProxy gets is itself an accepted bundle, and the same one.
        let again = parse_bundle(bundle.haproxy_pem.as_bytes(), &check);
        assert_eq!(again.as_ref(), Ok(&bundle));
    }
}

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    check(input, NOW, &["www.example.com".to_string()]);
    // [case, block, offset (2 bytes), mode, bytes…]: overwrite (mode even) or insert (odd)
    // `bytes` at `offset` of that block's DER; mode ≥ 128 cuts the DER at `offset` first.
    let [case, block, hi, lo, mode, bytes @ ..] = input else {
        return;
    };
    let cases = good();
    let (case, blocks) = &cases[usize::from(*case) % cases.len()];
    let target = usize::from(*block) % blocks.len();
    let pem: String = blocks
        .iter()
        .enumerate()
        .map(|(i, (label, der))| {
            if i != target {
                return encode(label, der);
            }
            let mut der = der.clone();
            let at = usize::from(u16::from_be_bytes([*hi, *lo])) % (der.len() + 1);
            if *mode >= 128 {
                der.truncate(at);
            }
            if mode % 2 == 0 {
                let end = (at + bytes.len()).min(der.len());
                der.splice(at..end, bytes.iter().copied());
            } else {
                der.splice(at..at, bytes.iter().copied());
            }
            encode(label, &der)
        })
        .collect();
    check(pem.as_bytes(), case.now, &case.must_cover);
});
