//! `GET /v1/domains` with `limit`, `after` or `q` ([`DomainQuery`]): one page of the domains
//! in name order, for lists of 10,000 (the dashboard).

use serde_json::{json, Value};

use crate::contract::DomainQuery;
use crate::model::{Domain, EdgeState, HttpsPolicy};

/// The page of `names` (any order) `query` asks for: `(the page, next, total matching)`.
fn select<'a>(query: &DomainQuery, names: &[&'a str]) -> (Vec<&'a str>, Option<&'a str>, usize) {
    let mut matching: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| query.q.as_deref().is_none_or(|q| n.contains(q)))
        .collect();
    matching.sort_unstable();
    let start = query
        .after
        .as_deref()
        .map_or(0, |a| matching.partition_point(|n| *n <= a));
    let page: Vec<&str> = matching[start..]
        .iter()
        .copied()
        .take(query.limit)
        .collect();
    let next = (start + page.len() < matching.len())
        .then(|| page.last().copied())
        .flatten();
    (page, next, matching.len())
}

/// `{domains, next, total}` of the page `query` asks for, each domain as `view` shows it plus
/// its suspension, protections, HTTPS policy and whether it has its own limits (the
/// dashboard's protections page).
pub fn page(
    query: &DomainQuery,
    state: &EdgeState,
    view: impl Fn(&Domain) -> Option<Value>,
) -> Value {
    let all: Vec<(String, &Domain)> = state
        .domains
        .keys()
        .chain(state.app_domains.keys())
        .map(|d| (d.to_string(), d))
        .collect();
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    let (page, next, total) = select(query, &names);
    let by_name: std::collections::HashMap<&str, &Domain> =
        all.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let domains: Vec<Value> = page
        .iter()
        .filter_map(|n| {
            let d = by_name.get(n)?;
            let mut v = view(d)?;
            v["suspended"] = json!(state.suspended.contains(*d));
            v["protections"] = json!(state.protections.get(*d));
            v["own_limits"] = json!(state.limits.domains.contains_key(*d));
            v["https"] = https_json(state.https.get(*d).copied().unwrap_or_default());
            Some(v)
        })
        .collect();
    json!({"domains": domains, "next": next, "total": total})
}

/// A domain's HTTPS policy in the shape `PUT /v1/domains/{name}/https` takes.
fn https_json(policy: HttpsPolicy) -> Value {
    let redirect = match policy.redirect.code() {
        0 => "off".to_string(),
        code => code.to_string(),
    };
    json!({"redirect": redirect, "hsts_max_age": policy.hsts.map(|h| h.max_age()),
        "hsts_include_subdomains": policy.hsts.is_some_and(|h| h.include_subdomains),
        "alt_svc": policy.alt_svc})
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::http::ApiError;

    fn query(pairs: &[(&str, &str)]) -> Result<Option<DomainQuery>, ApiError> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        Ok(DomainQuery::from_pairs(&owned)?)
    }

    #[test]
    fn no_parameters_is_the_bare_list_and_bad_ones_are_named() {
        assert_eq!(query(&[]).unwrap(), None);
        for (pairs, field) in [
            (&[("limit", "0")][..], "limit"),
            (&[("limit", "1001")][..], "limit"),
            (&[("limit", "x")][..], "limit"),
            (&[("page", "2")][..], "query"),
        ] {
            let e = query(pairs).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{pairs:?}");
            assert_eq!(e.status, 400);
        }
    }

    #[test]
    fn pages_follow_each_other_in_name_order_and_q_filters() {
        let names: Vec<String> = (0..2500).map(|i| format!("d{i:05}.example.com")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut seen = Vec::new();
        let mut after = String::new();
        loop {
            let mut pairs = vec![("limit", "1000")];
            if !after.is_empty() {
                pairs.push(("after", after.as_str()));
            }
            let q = query(&pairs).unwrap().unwrap();
            let (page, next, total) = select(&q, &refs);
            assert_eq!(total, 2500);
            seen.extend(page.iter().map(|s| s.to_string()));
            match next {
                Some(n) => after = n.to_string(),
                None => break,
            }
        }
        assert_eq!(seen, names);

        let q = query(&[("q", " D0012 "), ("limit", "5")]).unwrap().unwrap();
        let (page, next, total) = select(&q, &refs);
        assert_eq!(total, 10);
        assert_eq!(page[0], "d00120.example.com");
        assert_eq!(next, Some("d00124.example.com"));
        let q = query(&[("q", "nothing-like-it")]).unwrap().unwrap();
        assert_eq!(select(&q, &refs), (vec![], None, 0));
    }
}
