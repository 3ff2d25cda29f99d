use super::super::corpus;
use super::*;

fn run(input: &[u8], now: i64, must_cover: &[String]) -> Result<Bundle, BundleError> {
    parse_bundle(input, &BundleCheck { now, must_cover })
}

fn real_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Every hostile case is refused with its code and message fragment, within bounds, and
/// without any private key material in the message or its Debug form; at the fixed
/// `NOW` and at the real clock (what tests of the binary will use).
#[test]
fn hostile_corpus_is_refused_as_expected() {
    check_hostile(corpus::hostile_corpus());
    check_hostile(corpus::hostile_corpus_at(real_now()));
}

fn check_hostile(cases: Vec<corpus::Case>) {
    assert!(cases.len() >= 35, "{} cases", cases.len());
    let mut names = std::collections::HashSet::new();
    let mut failures = Vec::new();
    for case in &cases {
        assert!(names.insert(case.name), "duplicate case {}", case.name);
        match run(&case.input, case.now, &case.must_cover) {
            Ok(_) => failures.push(format!("{}: accepted", case.name)),
            Err(err) => {
                let msg = err.to_string();
                if err.code() != case.code || !msg.contains(&case.fragment) {
                    failures.push(format!(
                        "{}: got {} `{msg}`, want {} containing `{}`",
                        case.name,
                        err.code(),
                        case.code,
                        case.fragment
                    ));
                }
                if msg.len() > 600 {
                    failures.push(format!("{}: message of {} bytes", case.name, msg.len()));
                }
                let debug = format!("{err:?}");
                for secret in corpus::key_fragments(&case.input) {
                    if msg.contains(&secret) || debug.contains(&secret) {
                        failures.push(format!("{}: message shows key material", case.name));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Distinct bundles, not the same one under several names.
    let inputs: std::collections::HashSet<&Vec<u8>> = cases.iter().map(|c| &c.input).collect();
    assert_eq!(inputs.len(), cases.len());
}

#[test]
fn accepted_corpus_is_accepted_and_normalised() {
    check_accepted(corpus::accepted_corpus());
    check_accepted(corpus::accepted_corpus_at(real_now()));
}

fn check_accepted(cases: Vec<corpus::Accepted>) {
    for case in cases {
        let bundle = run(&case.input, case.now, &case.must_cover)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(bundle.info.names, case.names, "{}", case.name);
        assert_eq!(bundle.info.key_type, Some(case.key_type), "{}", case.name);
        let blocks = pem::parse_blocks(bundle.haproxy_pem.as_bytes()).unwrap();
        assert_eq!(
            blocks
                .iter()
                .filter(|b| b.label == Label::Certificate)
                .count(),
            case.served,
            "{}",
            case.name
        );
        // The key is served as it came (label and DER), at the end.
        let given = pem::parse_blocks(&case.input).unwrap();
        let given = given.iter().find(|b| b.label.is_key()).unwrap();
        let served_key = blocks.last().unwrap();
        assert_eq!(
            (served_key.label, &served_key.der),
            (given.label, &given.der),
            "{}",
            case.name
        );
        assert!(!bundle.haproxy_pem.contains('\r') && bundle.haproxy_pem.ends_with("-----\n"));
        assert_eq!(
            bundle.haproxy_pem,
            format!("{}{}", bundle.chain_pem, bundle.key_pem)
        );
        assert!(!bundle.chain_pem.contains("PRIVATE"), "{}", case.name);
        // What HAProxy gets is itself an accepted bundle, and a fixed point.
        let again = run(bundle.haproxy_pem.as_bytes(), case.now, &case.must_cover).unwrap();
        assert_eq!(again, bundle, "{}", case.name);
        let debug = format!("{bundle:?}");
        assert!(!debug.contains(&bundle.key_pem[28..90]), "{}", case.name);
    }
}

#[test]
fn leaf_fields() {
    let pki = corpus::Pki::generate();
    let bundle = run(&pki.basic(), corpus::NOW, &[]).unwrap();
    let info = &bundle.info;
    assert_eq!(info.names, ["www.example.com", "example.com"]);
    assert_eq!(info.subject, "CN=www.example.com");
    assert_eq!(info.issuer, "CN=hapctl Test Intermediate");
    assert_eq!(info.serial, "8F0102");
    assert_eq!(info.serial_der, [0x00, 0x8F, 0x01, 0x02]);
    assert_eq!(info.aki, Some(pki.intermediate_key_id()));
    assert_eq!(info.key_type, Some(KeyType::EcdsaP256));
    assert_eq!(rfc3339(info.not_before), "2029-06-01T00:00:00Z");
    assert_eq!(rfc3339(info.not_after), "2030-09-01T00:00:00Z");
    assert_eq!(bundle.key_pem, pki.leaf_key_pem());
}

/// Every supported key type through a whole bundle, and through `from_issued`.
#[test]
fn every_key_type_and_from_issued() {
    let pki = corpus::Pki::generate();
    for key_type in KeyType::ALL {
        let key = key_type.generate().unwrap();
        let chain = pki.leaf_for(&key, &["a.example.com"]);
        let must = vec!["a.example.com".to_string()];
        let check = BundleCheck {
            now: corpus::NOW,
            must_cover: &must,
        };
        let issued = from_issued(&chain, &key, &check).unwrap();
        assert_eq!(issued.info.key_type, Some(key_type));
        let upload = format!("{chain}{}", key.serialize_pem());
        assert_eq!(parse_bundle(upload.as_bytes(), &check).unwrap(), issued);
        // Another key of the same type does not belong to the certificate (large RSA
        // keys are slow to generate in debug builds, and compare the same way as 2048).
        if !matches!(key_type, KeyType::Rsa3072 | KeyType::Rsa4096) {
            let other = key_type.generate().unwrap();
            let err = from_issued(&chain, &other, &check).unwrap_err();
            assert_eq!(err.code(), "key_mismatch");
        }
    }
}

#[test]
fn from_issued_refuses_what_a_ca_would_not_send() {
    let pki = corpus::Pki::generate();
    let key = KeyType::EcdsaP256.generate().unwrap();
    let chain = pki.leaf_for(&key, &["a.example.com"]);
    let check = BundleCheck {
        now: corpus::NOW,
        must_cover: &[],
    };
    let with_key = format!("{chain}{}", key.serialize_pem());
    let err = from_issued(&with_key, &key, &check).unwrap_err();
    assert_eq!(err.code(), "bundle_key_in_chain");
    assert!(!err.to_string().contains(&key.serialize_pem()[30..80]));
    assert_eq!(
        from_issued("", &key, &check).unwrap_err().code(),
        "pem_empty"
    );
    let must = vec!["b.example.com".to_string()];
    let check = BundleCheck {
        now: corpus::NOW,
        must_cover: &must,
    };
    let err = from_issued(&chain, &key, &check).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the certificate does not cover b.example.com; it covers a.example.com: use a certificate issued for all of the domain's names (a wildcard covers one level only, not the bare domain)"
    );
    let p521 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).unwrap();
    let err = from_issued(&chain, &p521, &check).unwrap_err();
    assert_eq!(err.code(), "key_unsupported");
}

#[test]
fn boundaries_of_validity_are_inclusive() {
    let pki = corpus::Pki::generate();
    let info = run(&pki.basic(), corpus::NOW, &[]).unwrap().info;
    assert!(run(&pki.basic(), info.not_before, &[]).is_ok());
    assert!(run(&pki.basic(), info.not_after, &[]).is_ok());
    let err = run(&pki.basic(), info.not_after + 1, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the certificate CN=www.example.com expired on 2030-09-01T00:00:00Z (now is 2030-09-01T00:00:01Z): renew it and send the new certificate"
    );
    assert_eq!(
        run(&pki.basic(), info.not_before - 1, &[])
            .unwrap_err()
            .code(),
        "leaf_not_yet_valid"
    );
}

#[test]
fn uncovered_names_are_listed_within_bounds() {
    let pki = corpus::Pki::generate();
    let must: Vec<String> = (0..500).map(|i| format!("host{i}.example.net")).collect();
    let err = run(&pki.basic(), corpus::NOW, &must).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("host0.example.net, host1.example.net"),
        "{msg}"
    );
    assert!(msg.contains("and 490 more"), "{msg}");
    assert!(
        msg.contains("it covers www.example.com, example.com"),
        "{msg}"
    );
    assert!(msg.len() < 600, "{}", msg.len());
}

/// `openssl pkey -pubout` of a private key PEM, or `None` without openssl.
fn openssl_public_key(private_pem: &str) -> Option<String> {
    String::from_utf8(super::super::openssl(
        &["pkey", "-pubout"],
        private_pem.as_bytes(),
    ))
    .ok()
}

/// Keys as OpenSSL writes them (SEC1 with EC PARAMETERS stripped, PKCS#1, PKCS#8) are
/// accepted and served as they came, and OpenSSL reads them back as the same key.
#[test]
fn real_openssl_keys_are_accepted() {
    let pki = corpus::Pki::generate();
    for args in [
        &["ecparam", "-name", "secp384r1", "-genkey", "-noout"][..],
        &["genrsa", "-traditional", "3072"],
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ],
    ] {
        let key_pem = String::from_utf8(super::super::openssl(args, b"")).unwrap();
        let key = KeyPair::from_pem(&key_pem).unwrap();
        let chain = pki.leaf_for(&key, &["a.example.com"]);
        let input = format!("{key_pem}\n{chain}");
        let bundle = run(input.as_bytes(), corpus::NOW, &[]).unwrap();
        assert_eq!(bundle.key_pem, key_pem, "{args:?}");
        assert_eq!(
            openssl_public_key(&bundle.key_pem),
            openssl_public_key(&key_pem),
            "{args:?}"
        );
    }
}

/// A chain made entirely by OpenSSL, ending in an X.509 v1 root (which has no
/// basicConstraints and still counts as a CA, as OpenSSL has it).
#[test]
fn openssl_chain_with_a_v1_root() {
    let dir = std::env::temp_dir().join(format!("tlsdev-v1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = r#"set -e
        key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1.key; }
        csr() { openssl req -new -key $1.key -subj "/CN=$2" -out $1.csr; }
        key root; csr root "V1 Root"
        openssl x509 -req -in root.csr -signkey root.key -days 30 -out root.pem
        key inter; csr inter "OpenSSL Intermediate"
        printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign\n' > ca.ext
        openssl x509 -req -in inter.csr -CA root.pem -CAkey root.key -CAcreateserial \
            -days 30 -extfile ca.ext -out inter.pem
        key leaf; csr leaf v1.example.com
        printf 'subjectAltName=DNS:v1.example.com\n' > leaf.ext
        openssl x509 -req -in leaf.csr -CA inter.pem -CAkey inter.key -CAcreateserial \
            -days 30 -extfile leaf.ext -out leaf.pem
        cat leaf.pem inter.pem root.pem leaf.key"#;
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .current_dir(&dir)
        .stderr(std::process::Stdio::null())
        .output();
    std::fs::remove_dir_all(&dir).unwrap();
    let out = out.expect("sh runs");
    assert!(
        out.status.success(),
        "openssl made no chain (scripts/test.sh installs it)"
    );
    let must = vec!["v1.example.com".to_string()];
    let bundle = run(&out.stdout, real_now(), &must).unwrap();
    assert_eq!(bundle.info.issuer, "CN=OpenSSL Intermediate");
    assert_eq!(
        pem::parse_blocks(bundle.chain_pem.as_bytes())
            .unwrap()
            .len(),
        2,
        "the root is not served"
    );
}

/// ACME certificates may have an empty subject: messages name them by DNS name.
#[test]
fn empty_subject_is_named_by_dns() {
    let pki = corpus::Pki::generate();
    let key = KeyType::EcdsaP256.generate().unwrap();
    let chain = pki.leaf_for_empty_subject(&key, &["Short.example.com"]);
    let check = BundleCheck {
        now: corpus::NOW,
        must_cover: &[],
    };
    let bundle = from_issued(&chain, &key, &check).unwrap();
    assert_eq!(bundle.info.subject, "");
    assert_eq!(bundle.info.names, ["short.example.com"]);
    let other = KeyType::EcdsaP256.generate().unwrap();
    let err = from_issued(&chain, &other, &check).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "the private key does not belong to the certificate DNS:Short.example.com:"
        ),
        "{err}"
    );
}

#[test]
fn bundle_debug_hides_the_key() {
    let pki = corpus::Pki::generate();
    let bundle = run(&pki.basic(), corpus::NOW, &[]).unwrap();
    let debug = format!("{bundle:?}");
    assert!(debug.contains("[private key elided]"));
    assert!(!debug.contains("PRIVATE KEY-----"));
    // The corpus test's leak check has something to look for.
    let fragments = corpus::key_fragments(&pki.basic());
    assert!(fragments.len() >= 2, "{fragments:?}");
    assert!(fragments
        .iter()
        .all(|f| pki.leaf_key_pem().contains(f.as_str())));
}
