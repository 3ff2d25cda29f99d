//! Splits an uploaded bundle into PEM blocks, strictly.
//!
//! OpenSSL (and so HAProxy) skips anything between blocks; we refuse it instead, because text
//! outside blocks is how a wrong paste shows itself (a cut block, `Bag Attributes` lines, a
//! key without its BEGIN line). Messages never quote the input: a stray line may be key
//! material, so they give line numbers and labels (sanitised and cut short) only.

use std::fmt;

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::{alphabet, DecodeError, Engine};

/// Refuse anything larger: a chain of ten certificates with a 4096-bit key is under 20 KiB.
pub const MAX_BUNDLE_BYTES: usize = 256 * 1024;
/// Ten certificates, one key and room for a mistake to be reported by the bundle check.
pub const MAX_BLOCKS: usize = 16;

/// The labels a bundle may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Certificate,
    /// PKCS#8 `PrivateKeyInfo`.
    PrivateKey,
    /// PKCS#8 `EncryptedPrivateKeyInfo`: recognised only so that it can be refused clearly.
    EncryptedPrivateKey,
    /// SEC1 `ECPrivateKey`.
    EcPrivateKey,
    /// PKCS#1 `RSAPrivateKey`.
    RsaPrivateKey,
}

impl Label {
    pub fn as_str(self) -> &'static str {
        match self {
            Label::Certificate => "CERTIFICATE",
            Label::PrivateKey => "PRIVATE KEY",
            Label::EncryptedPrivateKey => "ENCRYPTED PRIVATE KEY",
            Label::EcPrivateKey => "EC PRIVATE KEY",
            Label::RsaPrivateKey => "RSA PRIVATE KEY",
        }
    }

    pub fn is_key(self) -> bool {
        self != Label::Certificate
    }

    fn parse(label: &str) -> Result<Label, &'static str> {
        Ok(match label {
            "CERTIFICATE" => Label::Certificate,
            "PRIVATE KEY" => Label::PrivateKey,
            "ENCRYPTED PRIVATE KEY" => Label::EncryptedPrivateKey,
            "EC PRIVATE KEY" => Label::EcPrivateKey,
            "RSA PRIVATE KEY" => Label::RsaPrivateKey,
            // The hints say what the block is and what to do instead.
            "X509 CRL" => return Err("a certificate revocation list"),
            "CERTIFICATE REQUEST" | "NEW CERTIFICATE REQUEST" => {
                return Err("a certificate signing request; send the certificate the CA issued for it")
            }
            "DH PARAMETERS" | "X9.42 DH PARAMETERS" => {
                return Err("Diffie-Hellman parameters, which hapctl configures itself")
            }
            "EC PARAMETERS" => {
                return Err("curve parameters from `openssl ecparam -genkey`; the EC PRIVATE KEY block alone is enough")
            }
            "TRUSTED CERTIFICATE" => {
                return Err("OpenSSL's trusted-certificate form; convert it with `openssl x509 -in cert.pem -out plain.pem`")
            }
            "PUBLIC KEY" | "RSA PUBLIC KEY" => {
                return Err("a public key; the bundle needs the private key")
            }
            "OPENSSH PRIVATE KEY" => {
                return Err("an OpenSSH key; convert it with `ssh-keygen -p -m PKCS8 -f key`")
            }
            "DSA PRIVATE KEY" => {
                return Err("a DSA key; use an ECDSA P-256/P-384 or RSA 2048/3072/4096 key")
            }
            "PKCS7" | "CMS" => {
                return Err("a PKCS#7 container; extract its certificates with `openssl pkcs7 -print_certs -in chain.p7b`")
            }
            _ => return Err("a kind of block hapctl does not use"),
        })
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decoded block. `Debug` shows the size only: `der` may be a private key.
#[derive(Clone, PartialEq, Eq)]
pub struct PemBlock {
    pub label: Label,
    pub der: Vec<u8>,
    /// 1-based line of the BEGIN line, for messages.
    pub line: usize,
    /// The block had the legacy `Proc-Type: 4,ENCRYPTED` header (OpenSSL's old key encryption).
    pub encrypted: bool,
}

impl fmt::Debug for PemBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PemBlock")
            .field("label", &self.label)
            .field("der_len", &self.der.len())
            .field("line", &self.line)
            .field("encrypted", &self.encrypted)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    #[error("the input is empty: send the certificate chain and its private key as PEM text (-----BEGIN CERTIFICATE----- … -----END CERTIFICATE-----, then the key)")]
    Empty,
    #[error("the input is {size} bytes, more than the {max} allowed: a certificate chain with its key is a few kilobytes, so check that this is the right file", max = MAX_BUNDLE_BYTES)]
    TooLarge { size: usize },
    #[error("the input is not PEM text: {what} on line {line}{}", der_hint(*.looks_der))]
    NotText {
        what: &'static str,
        line: usize,
        looks_der: bool,
    },
    #[error("line {line} is outside any -----BEGIN …----- / -----END …----- block and is not blank: remove it (only PEM blocks and blank lines are allowed, not text such as `Bag Attributes` or `subject=` lines)")]
    TextOutsideBlocks { line: usize },
    #[error("line {line} looks like a PEM armour line but is not `-----BEGIN LABEL-----` or `-----END LABEL-----`: fix or remove it")]
    BadArmour { line: usize },
    #[error("line {line} ends a {label} block that was never begun: the BEGIN line is missing, copy the whole block")]
    EndWithoutBegin { label: String, line: usize },
    #[error("the {label} block that begins on line {line} has no -----END {label}----- line: the text was cut short, copy the whole block")]
    Truncated { label: String, line: usize },
    #[error("the {begin} block that begins on line {line} ends with -----END {end}----- on line {end_line}: the BEGIN and END labels must be the same")]
    MismatchedEnd {
        begin: String,
        end: String,
        line: usize,
        end_line: usize,
    },
    #[error("the {label} block that begins on line {line} is not valid base64 (line {bad_line}): the block was damaged, copy it again")]
    BadBase64 {
        label: String,
        line: usize,
        bad_line: usize,
    },
    #[error("the {label} block that begins on line {line} is empty: copy the whole block")]
    EmptyBlock { label: String, line: usize },
    #[error("the {label} block that begins on line {line} has a header line (line {header_line}): only plain PEM blocks are accepted, export it again without headers")]
    Header {
        label: String,
        line: usize,
        header_line: usize,
    },
    #[error("the input has more than {max} PEM blocks: a bundle is one certificate, its intermediates and one private key", max = MAX_BLOCKS)]
    TooManyBlocks,
    #[error("the {label} block on line {line} is not accepted ({hint}): a bundle holds only CERTIFICATE blocks and one private key")]
    UnsupportedBlock {
        label: String,
        line: usize,
        hint: &'static str,
    },
}

fn der_hint(looks_der: bool) -> &'static str {
    if looks_der {
        " (this looks like binary DER: convert it with `openssl x509 -inform der -in cert.der -out cert.pem`, or `openssl pkey -inform der` for a key)"
    } else {
        ""
    }
}

impl PemError {
    /// A stable machine-readable code (for API error bodies and tests).
    pub fn code(&self) -> &'static str {
        match self {
            PemError::Empty => "pem_empty",
            PemError::TooLarge { .. } => "pem_too_large",
            PemError::NotText { .. } => "pem_not_text",
            PemError::TextOutsideBlocks { .. } => "pem_text_outside_blocks",
            PemError::BadArmour { .. } => "pem_bad_armour",
            PemError::EndWithoutBegin { .. } => "pem_end_without_begin",
            PemError::Truncated { .. } => "pem_truncated",
            PemError::MismatchedEnd { .. } => "pem_mismatched_end",
            PemError::BadBase64 { .. } => "pem_bad_base64",
            PemError::EmptyBlock { .. } => "pem_empty_block",
            PemError::Header { .. } => "pem_header",
            PemError::TooManyBlocks => "pem_too_many_blocks",
            PemError::UnsupportedBlock { .. } => "pem_unsupported_block",
        }
    }
}

/// Splits `input` into blocks, in input order. LF and CRLF line endings, blank lines and a
/// leading UTF-8 byte-order mark (Windows editors add one) are accepted; nothing else outside
/// blocks is.
pub fn parse_blocks(input: &[u8]) -> Result<Vec<PemBlock>, PemError> {
    if input.len() > MAX_BUNDLE_BYTES {
        return Err(PemError::TooLarge { size: input.len() });
    }
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    check_text(input)?;
    // `check_text` allowed ASCII only, so nothing is replaced (and nothing copied).
    let text = String::from_utf8_lossy(input);
    if text.trim().is_empty() {
        return Err(PemError::Empty);
    }

    let mut blocks = Vec::new();
    let mut lines = text.split('\n').enumerate().map(|(i, l)| (i + 1, l.trim()));
    while let Some((line_no, line)) = lines.next() {
        if line.is_empty() {
            continue;
        }
        let Some(armour) = armour(line) else {
            // Dashes at either end: an armour line with a typo, not stray text.
            return Err(if line.starts_with("--") || line.ends_with("--") {
                PemError::BadArmour { line: line_no }
            } else {
                PemError::TextOutsideBlocks { line: line_no }
            });
        };
        let begin = match armour {
            Armour::Begin(label) => label,
            Armour::End(label) => {
                return Err(PemError::EndWithoutBegin {
                    label: bounded(label, 40),
                    line: line_no,
                })
            }
        };
        if blocks.len() == MAX_BLOCKS {
            return Err(PemError::TooManyBlocks);
        }
        let block = read_block(begin, line_no, &mut lines)?;
        blocks.push(block);
    }
    Ok(blocks)
}

/// Reads a block's body up to its END line; `lines` is positioned after the BEGIN line.
fn read_block<'a>(
    begin: &str,
    line: usize,
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
) -> Result<PemBlock, PemError> {
    let shown = || bounded(begin, 40);
    let Body {
        body,
        encrypted,
        line_starts,
        end_line,
    } = read_body(begin, line, lines)?;
    let label = match Label::parse(begin) {
        Ok(label) => label,
        Err(hint) => {
            return Err(PemError::UnsupportedBlock {
                label: shown(),
                line,
                hint,
            })
        }
    };
    if encrypted && !label.is_key() {
        return Err(PemError::Header {
            label: shown(),
            line,
            header_line: line + 1,
        });
    }
    if body.is_empty() {
        return Err(PemError::EmptyBlock {
            label: shown(),
            line,
        });
    }
    let der = decode_base64(&body).map_err(|at| {
        // The line holding the bad character; the last line if the length was wrong.
        let bad_line = line_starts
            .iter()
            .rev()
            .find(|(_, start)| *start <= at)
            .map_or(end_line, |(no, _)| *no);
        PemError::BadBase64 {
            label: shown(),
            line,
            bad_line,
        }
    })?;
    Ok(PemBlock {
        label,
        der,
        line,
        encrypted,
    })
}

/// A block's base64 text, read up to its END line.
struct Body {
    body: String,
    /// Its headers mark OpenSSL's legacy key encryption.
    encrypted: bool,
    /// (line number, length of body before this line) to map a base64 error to a line.
    line_starts: Vec<(usize, usize)>,
    end_line: usize,
}

/// The lines of a block up to its END line: headers (refused but the legacy encryption's),
/// then the base64 text.
fn read_body<'a>(
    begin: &str,
    line: usize,
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
) -> Result<Body, PemError> {
    let shown = || bounded(begin, 40);
    let mut body = String::new();
    let mut encrypted = false;
    let mut body_started = false;
    let mut line_starts = Vec::new();
    let end_line = loop {
        let Some((no, text)) = lines.next() else {
            return Err(PemError::Truncated {
                label: shown(),
                line,
            });
        };
        match armour(text) {
            Some(Armour::End(end)) if end == begin => break no,
            Some(Armour::End(end)) => {
                return Err(PemError::MismatchedEnd {
                    begin: shown(),
                    end: bounded(end, 40),
                    line,
                    end_line: no,
                })
            }
            // A new BEGIN inside a block means this one lost its END line.
            Some(Armour::Begin(_)) => {
                return Err(PemError::Truncated {
                    label: shown(),
                    line,
                })
            }
            None => {}
        }
        if text.contains(':') && !body_started {
            // RFC 1421 headers. The only ones we understand mark OpenSSL's legacy key
            // encryption, which exist to be refused as such; any other header is refused.
            let (name, value) = text.split_once(':').unwrap_or((text, ""));
            match name.trim() {
                "Proc-Type" if value.contains("ENCRYPTED") => encrypted = true,
                "DEK-Info" if encrypted => {}
                _ => {
                    return Err(PemError::Header {
                        label: shown(),
                        line,
                        header_line: no,
                    })
                }
            }
            continue;
        }
        if text.is_empty() {
            continue;
        }
        body_started = true;
        line_starts.push((no, body.len()));
        body.push_str(text);
    };
    Ok(Body {
        body,
        encrypted,
        line_starts,
        end_line,
    })
}

enum Armour<'a> {
    Begin(&'a str),
    End(&'a str),
}

fn armour(line: &str) -> Option<Armour<'_>> {
    let inner = line.strip_prefix("-----")?.strip_suffix("-----")?;
    let armour = if let Some(label) = inner.strip_prefix("BEGIN ") {
        Armour::Begin(label)
    } else {
        Armour::End(inner.strip_prefix("END ")?)
    };
    let (Armour::Begin(label) | Armour::End(label)) = armour;
    valid_label(label).then_some(armour)
}

/// RFC 7468 labels: printable ASCII words joined by single spaces or hyphens, here at most
/// 64 long. Checking this keeps base64 out of a label we quote: with lone CR line endings a
/// whole file reads as one "BEGIN" line.
fn valid_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes.iter().all(|&b| b == b' ' || b.is_ascii_graphic())
        && !matches!(bytes[0], b' ' | b'-')
        && !matches!(bytes[bytes.len() - 1], b' ' | b'-')
        && !bytes
            .windows(2)
            .any(|w| matches!(w[0], b' ' | b'-') && matches!(w[1], b' ' | b'-'))
}

/// Only printable ASCII, tab, CR and LF may appear anywhere in a bundle.
fn check_text(input: &[u8]) -> Result<(), PemError> {
    let Some(pos) = input
        .iter()
        .position(|&b| !(b == b'\t' || b == b'\n' || b == b'\r' || (0x20..0x7f).contains(&b)))
    else {
        return Ok(());
    };
    let what = match input[pos] {
        0 => "a NUL byte",
        0x80.. => "a non-ASCII byte",
        _ => "a control character",
    };
    Err(PemError::NotText {
        what,
        line: 1 + input[..pos].iter().filter(|&&b| b == b'\n').count(),
        // A DER SEQUENCE with a long-form length: the start of every certificate and key.
        looks_der: input.len() > 4 && input[0] == 0x30 && input[1] & 0x80 != 0,
    })
}

/// Cuts `s` to `max` characters and replaces control characters, so that a name taken from
/// the input (a label, a certificate subject) is safe to put in a message.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Standard base64 with canonical padding (RFC 7468 §3 / RFC 4648 §4). Like OpenSSL, it
/// ignores the unused low bits of the last symbol before the padding.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Decodes a block's body (its lines joined); the error is the offset of the first bad
/// character, or of the last one if the text stops mid-group or its padding is wrong.
fn decode_base64(text: &str) -> Result<Vec<u8>, usize> {
    BASE64.decode(text).map_err(|e| match e {
        DecodeError::InvalidByte(at, _) | DecodeError::InvalidLastSymbol(at, _) => at,
        DecodeError::InvalidLength(_) | DecodeError::InvalidPadding => text.len() - 1,
    })
}

/// Encodes one block the way OpenSSL writes it: 64-character lines, LF, final newline.
pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = BASE64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    // Base64 is ASCII, so any byte offset is a character boundary.
    let mut rest = b64.as_str();
    while !rest.is_empty() {
        let (line, tail) = rest.split_at(rest.len().min(64));
        out.push_str(line);
        out.push('\n');
        rest = tail;
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests;
