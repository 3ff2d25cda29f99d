//! One page of the blocked list (`GET /v1/blocked-ips`, `hapctl block ls --limit`): every
//! parameter parsed into its type, so the store only runs the query.

use super::{BlockKey, Invalid, Note, Ttl};

/// Entries in a page when `limit` is not given.
pub const DEFAULT_PAGE: usize = 1000;
/// The most `limit` may ask for (about 1.1 MB of JSON).
pub const MAX_PAGE: usize = 10_000;

/// The parameters a page takes, in the order the error messages list them.
const PARAMETERS: [&str; 5] = ["limit", "after", "prefix", "reason", "expiring"];

/// Which blocks a page holds. Pages are in key order (IPv4 before IPv6, by address, then
/// prefix length); `after` is the last key of the page before, so inserts and removals
/// between two pages neither repeat nor skip the keys that were there. Each field's doc is
/// its parameter's description in `/openapi.json` (`GET /v1/blocked-ips`).
#[derive(Debug, Clone, PartialEq, Eq, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BlockQuery {
    /// blocks per page
    // The bounds are DEFAULT_PAGE and MAX_PAGE (the derive takes literals; a test ties them).
    #[param(value_type = Option<usize>, minimum = 1, maximum = 10000, default = 1000)]
    pub limit: usize,
    /// the `next` of the page before: blocks after this key (it need not be blocked any more)
    #[param(value_type = Option<String>, example = "203.0.113.7")]
    pub after: Option<BlockKey>,
    /// only blocks inside this network (an address: that block alone)
    #[param(value_type = Option<String>, example = "203.0.113.0/24")]
    pub prefix: Option<BlockKey>,
    /// only blocks whose reason contains this text (ASCII case ignored)
    #[param(value_type = Option<String>)]
    pub reason: Option<Note>,
    /// only blocks that expire within this long (1s to 3650d)
    #[param(value_type = Option<String>, example = "1h")]
    pub expiring: Option<Ttl>,
}

impl Default for BlockQuery {
    fn default() -> BlockQuery {
        BlockQuery {
            limit: DEFAULT_PAGE,
            after: None,
            prefix: None,
            reason: None,
            expiring: None,
        }
    }
}

impl BlockQuery {
    /// From decoded `name=value` pairs: each parameter at most once, no other name.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<BlockQuery, Invalid> {
        let mut query = BlockQuery::default();
        let mut seen = Vec::new();
        for (name, value) in pairs {
            let Some(field) = PARAMETERS.into_iter().find(|p| *p == name) else {
                return Err(Invalid::new(
                    "query",
                    name,
                    format!(
                        "is not a parameter of this list (known: {})",
                        PARAMETERS.join(", ")
                    ),
                ));
            };
            if seen.contains(&field) {
                return Err(Invalid::new(field, value, "is given more than once"));
            }
            seen.push(field);
            let key = |v: &str| v.parse::<BlockKey>().map_err(|e| e.in_field(field));
            match field {
                "limit" => query.limit = parse_limit(value)?,
                "after" => query.after = Some(key(value)?),
                "prefix" => query.prefix = Some(key(value)?),
                "reason" if value.is_empty() => {
                    return Err(Invalid::new(field, value, "must not be empty"))
                }
                "reason" => query.reason = Some(Note::parse(field, value)?),
                _ => query.expiring = Some(value.parse::<Ttl>().map_err(|e| e.in_field(field))?),
            }
        }
        Ok(query)
    }

    /// From a raw query string (`limit=50&prefix=10.0.0.0%2F8`): percent escapes and `+`
    /// decoded, and a value that is not UTF-8 refused, never replaced.
    pub fn from_query(raw: Option<&str>) -> Result<BlockQuery, Invalid> {
        let mut pairs = Vec::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name).ok_or_else(|| Invalid::new("query", name, NOT_UTF8))?;
            let value = decode(value).ok_or_else(|| {
                let field = PARAMETERS
                    .into_iter()
                    .find(|p| *p == name)
                    .unwrap_or("query");
                Invalid::new(field, value, NOT_UTF8)
            })?;
            pairs.push((name, value));
        }
        BlockQuery::from_pairs(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())))
    }

    /// Whether `key` passes the `prefix` filter (inside the network, not a wider one).
    pub fn within_prefix(&self, key: &BlockKey) -> bool {
        self.prefix.is_none_or(|p| p.net().contains(&key.net()))
    }
}

const NOT_UTF8: &str = "is not UTF-8 once its percent escapes are decoded";

/// `+` as a space and `%XX` as the byte XX (a `%` not followed by two hex digits stays); `None`
/// when the bytes are not UTF-8.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    while i < bytes.len() {
        let escaped = match bytes.get(i + 1..i + 3) {
            Some(&[h, l]) if bytes[i] == b'%' => hex(h).zip(hex(l)).map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match (bytes[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 2;
            }
            (b'+', None) => out.push(b' '),
            (b, None) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn parse_limit(value: &str) -> Result<usize, Invalid> {
    let rule = format!("must be a whole number from 1 to {MAX_PAGE}");
    if value.is_empty() || value.len() > 6 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Invalid::new("limit", value, rule));
    }
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        _ => Err(Invalid::new("limit", value, rule)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(q: &[(&str, &str)]) -> Result<BlockQuery, String> {
        BlockQuery::from_pairs(q.iter().copied()).map_err(|e| e.to_string())
    }

    #[test]
    fn parameters_parse_into_their_types() {
        assert_eq!(parse(&[]).unwrap(), BlockQuery::default());
        let q = parse(&[
            ("limit", "50"),
            ("after", "10.0.0.5"),
            ("prefix", "10.1.2.3/16"),
            ("reason", "Scanner"),
            ("expiring", "2h"),
        ])
        .unwrap();
        assert_eq!(q.limit, 50);
        assert_eq!(q.after, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(q.prefix.unwrap().to_string(), "10.1.0.0/16", "truncated");
        assert_eq!(q.reason.unwrap().as_str(), "Scanner");
        assert_eq!(q.expiring.unwrap().duration().as_secs(), 7200);
        assert_eq!(parse(&[("limit", "10000")]).unwrap().limit, MAX_PAGE);
    }

    #[test]
    fn bad_parameters_name_their_field() {
        for (pairs, field) in [
            (vec![("limit", "0")], "limit"),
            (vec![("limit", "10001")], "limit"),
            (vec![("limit", "-1")], "limit"),
            (vec![("limit", "+5")], "limit"),
            (vec![("limit", "")], "limit"),
            (vec![("limit", "99999999999999999999")], "limit"),
            (vec![("after", "10.0.0")], "after"),
            (vec![("after", "")], "after"),
            (vec![("prefix", "10.0.0.0/33")], "prefix"),
            (vec![("prefix", "0.0.0.0/0")], "prefix"),
            (vec![("reason", "")], "reason"),
            (vec![("reason", "a\u{7}b")], "reason"),
            (vec![("expiring", "soon")], "expiring"),
            (vec![("expiring", "0s")], "expiring"),
            (vec![("limit", "5"), ("limit", "6")], "limit"),
            (vec![("cursor", "x")], "query"),
        ] {
            let e = BlockQuery::from_pairs(pairs.iter().copied()).unwrap_err();
            assert_eq!(e.field, field, "{pairs:?}: {e}");
        }
    }

    #[test]
    fn a_query_string_is_decoded_strictly() {
        let q = BlockQuery::from_query(Some("limit=5&prefix=10.0.0.0%2F8&reason=port+scan%21"))
            .unwrap();
        assert_eq!(q.limit, 5);
        assert_eq!(q.prefix.unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(q.reason.unwrap().as_str(), "port scan!");
        assert_eq!(BlockQuery::from_query(None).unwrap(), BlockQuery::default());
        assert_eq!(
            BlockQuery::from_query(Some("&&")).unwrap(),
            BlockQuery::default()
        );
        let e = BlockQuery::from_query(Some("reason=%FF")).unwrap_err();
        assert_eq!(e.field, "reason");
        assert!(e.to_string().contains("UTF-8"), "{e}");
        let e = BlockQuery::from_query(Some("%C0%AF=1")).unwrap_err();
        assert_eq!(e.field, "query");
        // A stray `%` is itself.
        let e = BlockQuery::from_query(Some("reason=100%")).unwrap();
        assert_eq!(e.reason.unwrap().as_str(), "100%");
        let e = BlockQuery::from_query(Some("after")).unwrap_err();
        assert_eq!(e.field, "after", "a name without a value has an empty one");
    }

    #[test]
    fn the_prefix_filter_keeps_keys_inside_the_network_only() {
        let q = parse(&[("prefix", "10.1.0.0/16")]).unwrap();
        let inside = |k: &str| q.within_prefix(&k.parse().unwrap());
        assert!(inside("10.1.0.0/16"));
        assert!(inside("10.1.2.0/24"));
        assert!(inside("10.1.255.255"));
        assert!(!inside("10.0.0.0/8"), "a wider network is not inside");
        assert!(!inside("10.2.0.1"));
        assert!(!inside("2001:db8::1"));
        let one = parse(&[("prefix", "192.0.2.7")]).unwrap();
        assert!(one.within_prefix(&"192.0.2.7".parse().unwrap()));
        assert!(!one.within_prefix(&"192.0.2.0/24".parse().unwrap()));
    }
}
