//! The good bundles, and the names, key type and chain each must give.

use rcgen::KeyPair;

use super::keys::{sec1_key_pem, RSA_2048_PKCS1};
use super::pki::{new_key, params, LEAF_SPAN};
use super::{names, Accepted, Pki, NOW};
use hapctl::tls::key::KeyType;

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
