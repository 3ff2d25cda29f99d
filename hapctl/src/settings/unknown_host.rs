//! `[edge] unknown_host`: what a request for a host no domain serves gets.

/// The answer for an unknown host (without `edge.default_app`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownHost {
    /// `"404"`: the unknown-host page, 404, on every path.
    #[default]
    NotFound,
    /// `"200"`: the old manager's "site not configured" page, 200 on `/` (404 page elsewhere).
    NotConfigured,
}

/// `None` is the default; an error is `(key, message)`.
pub(super) fn resolve(raw: Option<&str>) -> Result<UnknownHost, (String, String)> {
    match raw {
        None | Some("404") => Ok(UnknownHost::NotFound),
        Some("200") => Ok(UnknownHost::NotConfigured),
        Some(other) => Err((
            "edge.unknown_host".into(),
            format!(
                "{:?} must be \"404\" (the unknown-host page) or \"200\" (the site-not-configured page on /)",
                crate::model::bounded(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_answers_are_accepted() {
        assert_eq!(resolve(None), Ok(UnknownHost::NotFound));
        assert_eq!(resolve(Some("404")), Ok(UnknownHost::NotFound));
        assert_eq!(resolve(Some("200")), Ok(UnknownHost::NotConfigured));
        for bad in ["", "500", " 200", "ok", "404\n"] {
            let (key, message) = resolve(Some(bad)).unwrap_err();
            assert_eq!(key, "edge.unknown_host");
            assert!(message.contains("must be \"404\""), "{message}");
        }
    }
}
