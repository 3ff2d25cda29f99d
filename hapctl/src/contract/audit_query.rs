//! `GET /v1/audit?since=&who=&object=&limit=`: the filters of `hapctl audit`.

use std::time::Duration;

use utoipa::IntoParams;

use super::query::parse_limit;
use super::QueryError;
use crate::model::bounded;
use crate::store::AuditFilter;

pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 10_000;

/// The query, parsed. Each field's doc is its parameter's description in `/openapi.json`.
#[derive(Debug, Default, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// only records of the last DURATION
    #[param(value_type = Option<String>, example = "1h")]
    pub since: Option<Duration>,
    /// only this token's records (or `uid:N`, the command line's)
    #[param(value_type = Option<String>, example = "blocker")]
    pub who: Option<String>,
    /// only records naming this object (a part of its name)
    #[param(value_type = Option<String>, example = "shop.example.com")]
    pub object: Option<String>,
    /// records at most
    #[param(value_type = Option<usize>, minimum = 1, maximum = 10000, default = 100)]
    pub limit: Option<usize>,
}

impl AuditQuery {
    /// From decoded `name=value` pairs; an error names a bad or unknown parameter.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<AuditQuery, QueryError> {
        let mut q = AuditQuery::default();
        for (key, value) in pairs {
            let bad = |why: String| QueryError::new(key, format!("{key}: {why}"));
            match key.as_str() {
                "since" => q.since = Some(parse_since(value).map_err(bad)?),
                "who" => q.who = Some(value.clone()),
                "object" => q.object = Some(value.clone()),
                "limit" => q.limit = Some(parse_limit(value, MAX_LIMIT).map_err(bad)?),
                _ => {
                    return Err(QueryError::new(
                        key,
                        format!(
                            "{:?} is not a parameter of /v1/audit (since, who, object, limit)",
                            bounded(key)
                        ),
                    ))
                }
            }
        }
        Ok(q)
    }

    /// The store's filter at `now_ms`.
    pub fn filter(&self, now_ms: i64) -> AuditFilter {
        AuditFilter {
            since_ms: self
                .since
                .map(|d| now_ms.saturating_sub(d.as_millis() as i64)),
            who: self.who.clone(),
            object: self.object.clone(),
            limit: self.limit.unwrap_or(DEFAULT_LIMIT),
        }
    }
}

/// A duration such as `30m` or `7d`.
fn parse_since(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("{:?} is not a duration like \"1h\": {e}", bounded(value)))
}

#[cfg(test)]
mod tests {
    use super::super::query::pairs;
    use super::*;

    #[test]
    fn parameters_parse_and_bad_ones_are_named() {
        let q = AuditQuery::from_pairs(&pairs(&[("since", "1h"), ("who", "blocker")])).unwrap();
        let f = q.filter(10_000_000);
        assert_eq!(f.since_ms, Some(10_000_000 - 3_600_000));
        assert_eq!(f.who.as_deref(), Some("blocker"));
        assert_eq!(f.limit, DEFAULT_LIMIT);
        for (k, v) in [
            ("since", "soon"),
            ("limit", "0"),
            ("limit", "x"),
            ("what", "1"),
        ] {
            let e = AuditQuery::from_pairs(&pairs(&[(k, v)])).unwrap_err();
            assert!(e.to_string().contains(k), "{e}");
        }
    }
}
