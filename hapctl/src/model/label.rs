//! The `backend_name` a client of the old manager's API gave a domain. hapctl names its
//! backends itself (`d_<domain>`, `w_<base>`); this label is only kept and shown back by
//! `GET /api/domains`, so a client that reads back what it wrote finds it. It is never
//! rendered into a file HAProxy reads.

use std::fmt;
use std::str::FromStr;

use super::error::{describe_char, is_invisible, serde_via_str, Invalid};

/// Most characters a label may have (the old manager's names are a few dozen).
pub const MAX_LABEL_CHARS: usize = 128;

/// A client's backend name: not blank, at most [`MAX_LABEL_CHARS`] characters, printable (no
/// control or invisible character). Kept as given.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendLabel(String);

impl BackendLabel {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for BackendLabel {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<BackendLabel, Invalid> {
        let err = |rule: String| Invalid::new("backend_name", s, rule);
        if s.trim().is_empty() {
            return Err(err("must not be empty".into()));
        }
        if s.chars().count() > MAX_LABEL_CHARS {
            return Err(err(format!("has at most {MAX_LABEL_CHARS} characters")));
        }
        if let Some(c) = s.chars().find(|c| c.is_control() || is_invisible(*c)) {
            return Err(err(format!(
                "contains {}; a backend name is printable text",
                describe_char(c)
            )));
        }
        Ok(BackendLabel(s.to_string()))
    }
}

impl fmt::Display for BackendLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(BackendLabel);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_printable_bounded_text_kept_as_given() {
        for ok in ["a_example", "WP site 1", "blog-backend.v2", "ü_backend"] {
            assert_eq!(ok.parse::<BackendLabel>().unwrap().as_str(), ok);
        }
        let long = "x".repeat(MAX_LABEL_CHARS + 1);
        for bad in [
            "",
            "   ",
            "a\nb",
            "tab\there",
            "zero\u{200B}width",
            long.as_str(),
        ] {
            let e = bad.parse::<BackendLabel>().unwrap_err();
            assert_eq!(e.field, "backend_name", "{bad:?}");
        }
    }
}
