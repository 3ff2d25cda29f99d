//! The bad bundles, each with the error code and message fragment it must get.

use rcgen::{CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, KeyPair};

use super::keys::{
    fake_rsa_pkcs1, sec1_key_pem, EC_PARAMETERS_AND_SEC1, ENCRYPTED_PKCS8, LEGACY_ENCRYPTED_RSA,
    RSA_1024,
};
use super::pki::{ca, day, issue_leaf, keyed, new_key, params, set_validity, Span, CA_SPAN};
use super::{cat, names, pem_body, replace_char, Case, Pki, NOW};
use hapctl::tls::key::KeyType;
use hapctl::tls::pem::{encode, MAX_BUNDLE_BYTES};
use hapctl::tls::x509::rfc3339;

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
