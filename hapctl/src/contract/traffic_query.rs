//! `GET /v1/traffic?limit=&sort=&window=&backends=&domain=`: which domains `hapctl top` and the
//! dashboard see, in what order, and whether HAProxy's own counters come along.

use utoipa::IntoParams;

use super::query::parse_limit;
use super::QueryError;
use crate::logs::DomainFilter;
use crate::model::bounded;
use crate::traffic::{SortKey, Window};

pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 100_000;

/// The query, parsed. Each field's doc is its parameter's description in `/openapi.json`.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TrafficQuery {
    /// domains in the answer, the first by `sort`
    // The bounds are DEFAULT_LIMIT and MAX_LIMIT (the derive takes literals; a test ties them).
    #[param(value_type = Option<usize>, minimum = 1, maximum = 100000, default = 50)]
    pub limit: usize,
    /// requests (default), errors (5xx), turned_away, bytes, p95 or domain
    #[param(value_type = Option<String>, example = "errors")]
    pub sort: SortKey,
    /// the window `sort` reads: 1m (default), 15m or 1h
    #[param(value_type = Option<String>, example = "15m")]
    pub window: Window,
    /// also HAProxy's counters per backend (`show stat`): true or false (default)
    #[param(value_type = Option<bool>)]
    pub backends: bool,
    /// with `points`: the hour of this domain in five-minute points (`*`: the whole edge,
    /// minute by minute)
    #[param(value_type = Option<String>, example = "shop.example.com")]
    pub points: Option<String>,
}

impl TrafficQuery {
    /// From decoded `name=value` pairs; an error names a bad or unknown parameter.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<TrafficQuery, QueryError> {
        let mut q = TrafficQuery {
            limit: DEFAULT_LIMIT,
            sort: SortKey::default(),
            window: Window::OneMinute,
            backends: false,
            points: None,
        };
        for (key, value) in pairs {
            let bad = |why: String| QueryError::new(key, format!("{key}: {why}"));
            match key.as_str() {
                "limit" => q.limit = parse_limit(value, MAX_LIMIT).map_err(bad)?,
                "sort" => q.sort = value.parse().map_err(bad)?,
                "window" => q.window = value.parse().map_err(bad)?,
                "backends" => {
                    q.backends = value
                        .parse()
                        .map_err(|_| bad(format!("{:?} is not true or false", bounded(value))))?
                }
                "points" => q.points = Some(parse_points(value).map_err(bad)?),
                _ => {
                    return Err(QueryError::new(
                        key,
                        format!(
                            "{:?} is not a parameter of /v1/traffic (limit, sort, window, backends, points)",
                            bounded(key)
                        ),
                    ))
                }
            }
        }
        Ok(q)
    }
}

/// `*` or a host name (as the access log's `host`, lowercase).
fn parse_points(value: &str) -> Result<String, String> {
    if value == "*" {
        return Ok(value.to_string());
    }
    match value.parse::<DomainFilter>() {
        Ok(DomainFilter::Exact(name)) => Ok(name),
        _ => Err(format!(
            "{:?} is not a host name or * (the whole edge)",
            bounded(value)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::query::pairs;
    use super::*;

    #[test]
    fn parameters_parse_or_name_the_bad_one() {
        let q = TrafficQuery::from_pairs(&pairs(&[("sort", "errors"), ("window", "1h")])).unwrap();
        assert_eq!(
            (q.sort, q.window, q.limit),
            (SortKey::Errors, Window::OneHour, 50)
        );
        for bad in [
            ("sort", "x"),
            ("window", "2m"),
            ("limit", "0"),
            ("nope", "1"),
        ] {
            let e = TrafficQuery::from_pairs(&pairs(&[bad])).unwrap_err();
            assert!(e.to_string().contains(bad.0), "{e}");
        }
        super::super::query::assert_limit::<TrafficQuery>(DEFAULT_LIMIT, MAX_LIMIT);
    }
}
