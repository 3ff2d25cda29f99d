use super::*;

fn one(input: &str) -> Result<PemBlock, PemError> {
    let mut blocks = parse_blocks(input.as_bytes())?;
    assert_eq!(blocks.len(), 1);
    Ok(blocks.remove(0))
}

#[test]
fn base64_round_trips_every_length() {
    for len in 0..200usize {
        let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        let pem = encode("CERTIFICATE", &data);
        if len == 0 {
            assert!(matches!(
                parse_blocks(pem.as_bytes()),
                Err(PemError::EmptyBlock { .. })
            ));
            continue;
        }
        for line in pem.lines() {
            assert!(line.len() <= 64, "{line}");
        }
        assert_eq!(one(&pem).unwrap().der, data, "len {len}");
    }
}

#[test]
fn accepts_crlf_blank_lines_bom_and_indentation() {
    let pem = encode("CERTIFICATE", b"hello world!").replace('\n', "\r\n");
    let input = format!("\u{feff}\r\n\r\n  {pem}\r\n\t\r\n{pem}");
    let blocks = parse_blocks(input.as_bytes()).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].der, b"hello world!");
    assert_eq!(blocks[0].line, 3);
    assert_eq!(blocks[1].line, 8);
}

#[test]
fn refuses_text_outside_blocks_without_quoting_it() {
    let pem = encode("CERTIFICATE", b"abc");
    let input = format!("Bag Attributes\n    localKeyID: SECRET\n{pem}");
    let err = parse_blocks(input.as_bytes()).unwrap_err();
    assert_eq!(err, PemError::TextOutsideBlocks { line: 1 });
    assert!(!err.to_string().contains("SECRET"));
    let input = format!("{pem}trailing junk\n");
    assert_eq!(
        parse_blocks(input.as_bytes()).unwrap_err(),
        PemError::TextOutsideBlocks { line: 4 }
    );
}

#[test]
fn refuses_binary_and_hints_der() {
    let der = [0x30, 0x82, 0x01, 0x0a, 0x02, 0x82];
    let err = parse_blocks(&der).unwrap_err();
    assert!(matches!(
        err,
        PemError::NotText {
            looks_der: true,
            ..
        }
    ));
    assert!(err.to_string().contains("openssl x509 -inform der"));
    let err = parse_blocks(b"abc\n\0def").unwrap_err();
    assert_eq!(
        err,
        PemError::NotText {
            what: "a NUL byte",
            line: 2,
            looks_der: false
        }
    );
    assert!(matches!(
        parse_blocks("caf\u{e9}".as_bytes()),
        Err(PemError::NotText {
            what: "a non-ASCII byte",
            ..
        })
    ));
}

#[test]
fn empty_and_oversized() {
    assert_eq!(parse_blocks(b"").unwrap_err(), PemError::Empty);
    assert_eq!(parse_blocks(b" \r\n\n\t").unwrap_err(), PemError::Empty);
    let big = vec![b'\n'; MAX_BUNDLE_BYTES + 1];
    assert_eq!(
        parse_blocks(&big).unwrap_err(),
        PemError::TooLarge {
            size: MAX_BUNDLE_BYTES + 1
        }
    );
    // The limit itself is allowed (and then found empty).
    let edge = vec![b'\n'; MAX_BUNDLE_BYTES];
    assert_eq!(parse_blocks(&edge).unwrap_err(), PemError::Empty);
}

#[test]
fn structural_errors() {
    let pem = encode("CERTIFICATE", &[7u8; 100]);
    let cut = &pem[..pem.len() / 2];
    assert!(matches!(
        parse_blocks(cut.as_bytes()),
        Err(PemError::Truncated { line: 1, .. })
    ));
    let no_end = pem.replace("-----END CERTIFICATE-----\n", "");
    let two = format!("{no_end}{pem}");
    assert!(matches!(
        parse_blocks(two.as_bytes()),
        Err(PemError::Truncated { line: 1, .. })
    ));
    let mismatched = pem.replace("END CERTIFICATE", "END PRIVATE KEY");
    let err = parse_blocks(mismatched.as_bytes()).unwrap_err();
    assert!(matches!(err, PemError::MismatchedEnd { .. }));
    assert!(err.to_string().contains("-----END PRIVATE KEY-----"));
    let end_only = "-----END CERTIFICATE-----\n";
    assert!(matches!(
        parse_blocks(end_only.as_bytes()),
        Err(PemError::EndWithoutBegin { .. })
    ));
    assert!(matches!(
        parse_blocks(b"-----BEGIN CERTIFICATE\n"),
        Err(PemError::BadArmour { line: 1 })
    ));
    let empty = "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        parse_blocks(empty.as_bytes()),
        Err(PemError::EmptyBlock { .. })
    ));
}

#[test]
fn bad_base64_names_the_line() {
    let pem = encode("CERTIFICATE", &[7u8; 100]);
    let mut lines: Vec<String> = pem.lines().map(str::to_owned).collect();
    lines[2].replace_range(3..4, "*");
    let err = parse_blocks(lines.join("\n").as_bytes()).unwrap_err();
    assert_eq!(
        err,
        PemError::BadBase64 {
            label: "CERTIFICATE".into(),
            line: 1,
            bad_line: 3
        }
    );
    // Padding in the middle and a length that stops mid-group.
    let mid_pad = "-----BEGIN CERTIFICATE-----\nAA==AAAA\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        parse_blocks(mid_pad.as_bytes()),
        Err(PemError::BadBase64 { .. })
    ));
    let short = "-----BEGIN CERTIFICATE-----\nAAAAA\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        parse_blocks(short.as_bytes()),
        Err(PemError::BadBase64 { bad_line: 2, .. })
    ));
}

/// The decoder's edges, as the hand-written one had them: padding only at the end and
/// at most two, whole groups only, the unused bits of the last symbol ignored (OpenSSL
/// ignores them too).
#[test]
fn base64_edges() {
    let body = |b64: &str| {
        let pem = format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n");
        parse_blocks(pem.as_bytes()).map(|mut blocks| blocks.remove(0).der)
    };
    assert_eq!(body("AA==").unwrap(), [0]);
    assert_eq!(body("AB==").unwrap(), [0], "trailing bits ignored");
    assert_eq!(body("AAB=").unwrap(), [0, 0], "trailing bits ignored");
    assert_eq!(body("+/+/").unwrap(), [0xFB, 0xFF, 0xBF]);
    for bad in [
        "AA", "AAA", "A===", "====", "AA=A", "AA==AA==", "-_-_", "AA AA",
    ] {
        assert!(
            matches!(body(bad), Err(PemError::BadBase64 { bad_line: 2, .. })),
            "{bad}"
        );
    }
}

#[test]
fn unknown_labels_are_named() {
    for label in [
        "X509 CRL",
        "CERTIFICATE REQUEST",
        "DH PARAMETERS",
        "TRUSTED CERTIFICATE",
        "EC PARAMETERS",
        "SOMETHING ELSE",
    ] {
        let pem = encode(label, b"xyz");
        let err = parse_blocks(pem.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, PemError::UnsupportedBlock { label: l, .. } if l == label),
            "{err:?}"
        );
        assert!(err.to_string().contains(label));
    }
    let long = encode(&"X".repeat(64), b"xyz");
    let err = parse_blocks(long.as_bytes()).unwrap_err();
    assert!(err.to_string().len() < 400, "{err}");
    assert!(
        err.to_string().contains(&format!("{}…", "X".repeat(40))),
        "{err}"
    );
}

#[test]
fn labels_that_are_not_rfc7468_are_bad_armour() {
    let key = encode("PRIVATE KEY", b"0123456789abcdef0123456789");
    // Lone CR line endings make the whole text one line, base64 included.
    let one_line = key.replace('\n', "\r");
    let err = parse_blocks(one_line.as_bytes()).unwrap_err();
    assert_eq!(err, PemError::BadArmour { line: 1 });
    for bad in ["", " X", "X-", "A--B", "A  B", "Ünï", &"X".repeat(65)] {
        let line = format!("-----BEGIN {bad}-----\n");
        assert!(
            matches!(
                parse_blocks(line.as_bytes()),
                Err(PemError::BadArmour { .. } | PemError::NotText { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(valid_label("X9.42 DH PARAMETERS"));
    assert!(valid_label("NEW-STYLE LABEL"));
}

#[test]
fn headers_only_as_legacy_encryption() {
    let body = encode("RSA PRIVATE KEY", b"secret bytes");
    let legacy = body.replacen(
        "-----\n",
        "-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\n",
        1,
    );
    let block = one(&legacy).unwrap();
    assert!(block.encrypted);
    assert_eq!(block.label, Label::RsaPrivateKey);
    assert!(!format!("{block:?}").contains("secret"));
    let comment = body.replacen("-----\n", "-----\nComment: hello\n", 1);
    assert!(matches!(
        one(&comment),
        Err(PemError::Header { header_line: 2, .. })
    ));
    let on_cert =
        encode("CERTIFICATE", b"abc").replacen("-----\n", "-----\nProc-Type: 4,ENCRYPTED\n", 1);
    assert!(matches!(one(&on_cert), Err(PemError::Header { .. })));
}

#[test]
fn too_many_blocks() {
    let pem = encode("CERTIFICATE", b"abc");
    assert_eq!(
        parse_blocks(pem.repeat(MAX_BLOCKS).as_bytes())
            .unwrap()
            .len(),
        MAX_BLOCKS
    );
    assert_eq!(
        parse_blocks(pem.repeat(MAX_BLOCKS + 1).as_bytes()).unwrap_err(),
        PemError::TooManyBlocks
    );
}

#[test]
fn bounded_cuts_and_cleans() {
    assert_eq!(bounded("abc", 5), "abc");
    assert_eq!(bounded("abcdef", 3), "abc…");
    assert_eq!(bounded("a\u{0}b\nc", 10), "a?b?c");
}
