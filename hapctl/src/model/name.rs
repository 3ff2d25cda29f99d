//! Host names: `DomainName` (one RFC 1123 name, ASCII, lower-case) and `Domain` (what the
//! edge routes: an exact name or a `*.` wildcard over a suffix).

use std::fmt;
use std::str::FromStr;

use super::error::{describe_char, find_blank_or_control, serde_via_str, Invalid};

/// Longest name in presentation form (RFC 1035 §2.3.4 gives 255 octets on the wire).
const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

/// A valid host name: ASCII (internationalised names converted to their `xn--` form),
/// lower-case, labels of 1–63 letters, digits and inner hyphens, at most 253 characters.
/// Shared, not copied, when cloned: a copy of the desired state at 10,000 domains clones every
/// name several times per apply.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DomainName(std::sync::Arc<str>);

impl DomainName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.0.split('.')
    }

    fn parse_field(field: &'static str, input: &str) -> Result<DomainName, Invalid> {
        let err = |rule: String| Invalid::new(field, input, rule);
        if input.is_empty() {
            return Err(err("must not be empty".into()));
        }
        if input.len() > 4 * MAX_NAME_LEN {
            return Err(err(format!("is longer than {MAX_NAME_LEN} characters")));
        }
        if let Some((i, c)) = find_blank_or_control(input) {
            return Err(err(format!(
                "contains whitespace, a control or an invisible character ({} at position {i})",
                describe_char(c)
            )));
        }
        if let Some(c) = input
            .chars()
            .find(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || *c == '-' || *c == '.'))
        {
            return Err(err(format!(
                "contains {}; a host name has only letters, digits, '-' and '.'",
                describe_char(c)
            )));
        }
        if input.ends_with('.') {
            return Err(err("must not end with '.'".into()));
        }
        let ascii = if input.is_ascii() {
            let lower = input.to_ascii_lowercase();
            if lower.split('.').any(|l| l.starts_with("xn--")) {
                check_punycode(&lower).map_err(err)?;
            }
            lower
        } else {
            to_ascii_idn(input).map_err(err)?
        };
        check_ascii_name(&ascii).map_err(err)?;
        Ok(DomainName(ascii.into()))
    }
}

/// An `xn--` name must decode, and its Unicode form must pass the same look-alike rules as a
/// name typed in Unicode (and encode back to exactly this name).
fn check_punycode(ascii: &str) -> Result<(), String> {
    let (unicode, decoded) = idna::domain_to_unicode(ascii);
    if decoded.is_err() {
        return Err("has an xn-- label that is not valid punycode".into());
    }
    match to_ascii_idn(&unicode)? {
        back if back == ascii => Ok(()),
        _ => Err(format!("is not the canonical ASCII form of {unicode:?}")),
    }
}

/// RFC 1123 rules on an ASCII name.
fn check_ascii_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "is {} characters long; the limit is {MAX_NAME_LEN}",
            name.len()
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("has an empty label ('..' or a leading '.')".into());
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(format!(
                "label {label:?} is {} characters long; the limit is {MAX_LABEL_LEN}",
                label.len()
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} starts or ends with '-'"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(format!("label {label:?} contains {}", describe_char(c)));
        }
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err("ends with an all-numeric label: it looks like an IP address, not a host name (RFC 3696 §2)".into());
    }
    Ok(())
}

/// Converts an internationalised name to ASCII, refusing the characters that make a name look
/// like another one: look-alikes of ASCII letters, labels mixing Latin, Greek and Cyrillic, and
/// labels spelled only with Cyrillic or Greek letters that read as Latin ones.
fn to_ascii_idn(input: &str) -> Result<String, String> {
    for c in input.chars().filter(|c| !c.is_ascii()) {
        match idna::domain_to_ascii(c.encode_utf8(&mut [0; 4])) {
            Ok(mapped) if mapped.is_empty() => {
                return Err(format!("contains {}, which is invisible", describe_char(c)))
            }
            Ok(mapped) if mapped.is_ascii() && !mapped.starts_with("xn--") => {
                return Err(format!(
                    "contains {}, a look-alike of {mapped:?}; type the ASCII character",
                    describe_char(c)
                ))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(format!(
                    "contains {}, which is not allowed in an internationalised name",
                    describe_char(c)
                ))
            }
        }
    }
    for label in input.split('.') {
        check_scripts(label)?;
    }
    idna::domain_to_ascii_strict(input)
        .map(|s| s.to_ascii_lowercase())
        .map_err(|_| "is not a valid internationalised domain name (IDNA 2008/UTS 46)".into())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Script {
    Latin,
    Greek,
    Cyrillic,
    Other,
}

fn script_of(c: char) -> Option<Script> {
    let u = c as u32;
    Some(match u {
        _ if c.is_ascii_digit() || c == '-' => return None,
        _ if c.is_ascii_alphabetic() => Script::Latin,
        0x00C0..=0x024F | 0x1E00..=0x1EFF => Script::Latin,
        0x0370..=0x03FF | 0x1F00..=0x1FFF => Script::Greek,
        0x0400..=0x052F | 0x2DE0..=0x2DFF | 0xA640..=0xA69F | 0x1C80..=0x1C8F => Script::Cyrillic,
        _ => Script::Other,
    })
}

/// Cyrillic and Greek letters that are drawn like Latin ones.
const LATIN_LOOKALIKES: &str = "аеорсухіјѕԁӏһԛԝьвкмнтгпшзАВЕКМНОРСТХЅІЈԌοαντκιυρεχβγηωζ";

fn check_scripts(label: &str) -> Result<(), String> {
    let scripts: Vec<Script> = label.chars().filter_map(script_of).collect();
    let has = |s| scripts.contains(&s);
    let confusable = has(Script::Cyrillic) as u8 + has(Script::Greek) as u8;
    if confusable > 0 && (has(Script::Latin) || confusable > 1) {
        return Err(format!(
            "label {label:?} mixes Latin, Greek or Cyrillic letters, a classic look-alike of another name"
        ));
    }
    if confusable > 0
        && label
            .chars()
            .all(|c| !c.is_alphabetic() || LATIN_LOOKALIKES.contains(c))
    {
        return Err(format!(
            "label {label:?} is spelled only with Cyrillic or Greek letters that look Latin"
        ));
    }
    Ok(())
}

impl FromStr for DomainName {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        DomainName::parse_field("domain", s)
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(DomainName);

/// What the edge routes: one exact name, or every name below a suffix (`*.example.com`
/// matches `a.example.com` and `a.b.example.com`, not `example.com`). Exact names win over
/// wildcards, and the longest wildcard suffix wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Domain {
    Exact(DomainName),
    Wildcard(DomainName),
}

impl Domain {
    pub fn is_wildcard(&self) -> bool {
        matches!(self, Domain::Wildcard(_))
    }

    /// The name (exact) or the suffix after `*.` (wildcard).
    pub fn name(&self) -> &DomainName {
        match self {
            Domain::Exact(n) | Domain::Wildcard(n) => n,
        }
    }

    /// Name of this domain's HAProxy backend; unique per domain and made only of characters
    /// HAProxy accepts in identifiers.
    pub fn backend_name(&self) -> String {
        self.backend().to_string()
    }

    /// The event-stream twin beside the domain's own backend (SSE routing). `_` never occurs
    /// in a domain name and app backends may not start with `d_`/`w_`, so it cannot collide
    /// with another backend.
    pub fn sse_twin_name(&self) -> String {
        format!("{}_sse", self.backend())
    }

    /// [`Domain::backend_name`], written where it goes (a line per domain in a map) without a
    /// String of its own.
    pub fn backend(&self) -> DomainBackend<'_> {
        DomainBackend(self)
    }
}

/// A domain's backend name as `Display`: see [`Domain::backend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DomainBackend<'a>(&'a Domain);

impl fmt::Display for DomainBackend<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Domain::Exact(n) => write!(f, "d_{n}"),
            Domain::Wildcard(n) => write!(f, "w_{n}"),
        }
    }
}

impl FromStr for Domain {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        match s.strip_prefix("*.") {
            Some(rest) => {
                let name = DomainName::parse_field("domain", rest)
                    .map_err(|e| Invalid::new("domain", s, e.rule))?;
                if name.labels().count() < 2 {
                    return Err(Invalid::new(
                        "domain",
                        s,
                        "a wildcard must cover at least two labels (*.example.com, not *.com)",
                    ));
                }
                Ok(Domain::Wildcard(name))
            }
            None if s.contains('*') => Err(Invalid::new(
                "domain",
                s,
                "'*' is only allowed as the whole first label of a wildcard (*.example.com)",
            )),
            None => DomainName::parse_field("domain", s).map(Domain::Exact),
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Domain::Exact(n) => write!(f, "{n}"),
            Domain::Wildcard(n) => write!(f, "*.{n}"),
        }
    }
}
serde_via_str!(Domain);

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> String {
        s.parse::<Domain>()
            .unwrap_or_else(|e| panic!("{s:?} refused: {e}"))
            .to_string()
    }
    fn refused(s: &str) -> String {
        match s.parse::<Domain>() {
            Ok(d) => panic!("{s:?} accepted as {d}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn accepts_and_normalises() {
        assert_eq!(ok("Shop.Example.COM"), "shop.example.com");
        assert_eq!(ok("*.example.com"), "*.example.com");
        assert_eq!(ok("localhost"), "localhost");
        assert_eq!(ok("a-b.c0.example"), "a-b.c0.example");
        assert_eq!(ok("bücher.example"), "xn--bcher-kva.example");
        assert_eq!(ok("xn--bcher-kva.example"), "xn--bcher-kva.example");
        assert_eq!(ok("XN--bcher-kva.example"), "xn--bcher-kva.example");
        assert_eq!(ok("пример.рф"), "xn--e1afmkfd.xn--p1ai");
        assert_eq!(ok("日本.example"), "xn--wgv71a.example");
        let label = "a".repeat(63);
        assert_eq!(ok(&format!("{label}.com")).len(), 67);
    }

    #[test]
    fn refuses_injection_and_malformed_names() {
        for (input, needle) in [
            ("", "empty"),
            ("shop.example.com\nbackend x", "whitespace"),
            ("shop example.com", "whitespace"),
            ("shop.example.com#", "'#'"),
            ("\"shop\".com", "'\"'"),
            ("shop.com'", "'''"),
            ("%[src].example.com", "'%'"),
            ("{a}.com", "'{'"),
            ("a\u{0}b.com", "control"),
            ("a\u{7f}b.com", "control"),
            ("under_score.com", "'_'"),
            ("example.com.", "end with '.'"),
            ("a..com", "empty label"),
            (".a.com", "empty label"),
            ("-a.com", "starts or ends"),
            ("a-.com", "starts or ends"),
            ("300.1.1.1", "all-numeric"),
            ("1.2.3.4", "all-numeric"),
            ("a*.example.com", "'*'"),
            ("*.com", "two labels"),
            ("*", "'*'"),
            ("shop.example.com:80", "':'"),
            ("a/b.com", "'/'"),
            ("a\\b.com", "'\\'"),
            ("ex\u{200B}ample.com", "invisible"),
            ("ex\u{00AD}ample.com", "invisible"),
        ] {
            let e = refused(input);
            assert!(e.contains(needle), "{input:?}: {e:?} lacks {needle:?}");
            assert!(e.starts_with("invalid domain"), "{e}");
        }
    }

    #[test]
    fn refuses_length_overflows() {
        let long_label = format!("{}.com", "a".repeat(64));
        assert!(refused(&long_label).contains("63"));
        let long_name = vec!["a".repeat(60); 5].join("."); // 304 characters
        assert!(refused(&long_name).contains("253"));
        let exactly_254 = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(62)
        );
        assert_eq!(exactly_254.len(), 254);
        assert!(refused(&exactly_254).contains("253"));
    }

    #[test]
    fn refuses_look_alikes() {
        // Cyrillic 'а' inside a Latin word.
        assert!(refused("p\u{0430}ypal.com").contains("mixes"));
        // Whole-script Cyrillic spelling of "apple"-like strings.
        assert!(refused("\u{0430}\u{0440}\u{0440}\u{04CF}\u{0435}.com").contains("look Latin"));
        // The same look-alikes, typed as punycode, and punycode that does not decode.
        assert!(refused("xn--80ak6aa92e.com").contains("look Latin"));
        assert!(refused("xn--zz.example.com").contains("punycode"));
        // Fullwidth ASCII.
        assert!(refused("ｅxample.com").contains("look-alike"));
        // Greek omicron in a Latin word.
        assert!(refused("g\u{03BF}\u{03BF}gle.com").contains("mixes"));
    }

    #[test]
    fn backend_names_are_distinct_identifiers() {
        let exact: Domain = "example.com".parse().unwrap();
        let wild: Domain = "*.example.com".parse().unwrap();
        assert_ne!(exact.backend_name(), wild.backend_name());
        assert_eq!(wild.backend_name(), "w_example.com");
    }

    #[test]
    fn serde_goes_through_the_parser() {
        let d: Domain = serde_json::from_str("\"*.Example.com\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"*.example.com\"");
        assert!(serde_json::from_str::<Domain>("\"a b\"").is_err());
    }
}
