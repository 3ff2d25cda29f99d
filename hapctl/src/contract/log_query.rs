//! `GET /v1/logs?limit=&before=&domain=&status=&client=`: the filters of `hapctl logs` and a
//! page of the access log, newest first.

use std::net::IpAddr;

use utoipa::IntoParams;

use super::query::parse_limit;
use super::QueryError;
use crate::logs::{DomainFilter, Filter, RequestId, StatusFilter};
use crate::model::bounded;

pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;

/// The query, parsed. Each field's doc is its parameter's description in `/openapi.json`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// records per page
    // The bounds are DEFAULT_LIMIT and MAX_LIMIT (the derive takes literals; a test ties them).
    #[param(value_type = Option<usize>, minimum = 1, maximum = 500, default = 50)]
    pub limit: usize,
    /// the `next` of the page before (a request id): the records written before it
    #[param(value_type = Option<String>, example = "1c0e6e1a-52b3-4f41-9d0c-52a4c1b2a0f3")]
    pub before: Option<RequestId>,
    /// only this host, or every name below *.domain
    #[param(value_type = Option<String>, example = "*.example.com")]
    pub domain: Option<DomainFilter>,
    /// only this status (404) or class (4xx)
    #[param(value_type = Option<String>, example = "4xx")]
    pub status: Option<StatusFilter>,
    /// only this client (the real one: trusted proxies' headers applied)
    #[param(value_type = Option<String>, example = "203.0.113.7")]
    pub client: Option<IpAddr>,
}

impl LogQuery {
    /// From decoded `name=value` pairs; an error names a bad or unknown parameter.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<LogQuery, QueryError> {
        let mut q = LogQuery {
            limit: DEFAULT_LIMIT,
            before: None,
            domain: None,
            status: None,
            client: None,
        };
        for (key, value) in pairs {
            let bad = |why: String| QueryError::new(key, format!("{key}: {why}"));
            match key.as_str() {
                "domain" => q.domain = Some(value.parse().map_err(bad)?),
                "status" => q.status = Some(value.parse().map_err(bad)?),
                "client" => {
                    let ip = value.parse::<IpAddr>().map_err(|_| {
                        bad(format!("{:?} is not an IPv4 or IPv6 address", bounded(value)))
                    })?;
                    q.client = Some(ip);
                }
                "before" => q.before = Some(value.parse().map_err(bad)?),
                "limit" => q.limit = parse_limit(value, MAX_LIMIT).map_err(bad)?,
                _ => {
                    return Err(QueryError::new(
                        key,
                        format!(
                            "{:?} is not a parameter of /v1/logs (domain, status, client, before, limit)",
                            bounded(key)
                        ),
                    ))
                }
            }
        }
        Ok(q)
    }

    /// The records it asks for.
    pub fn filter(&self) -> Filter {
        Filter {
            domain: self.domain.clone(),
            status: self.status,
            client: self.client,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_limit_is_the_parsed_one() {
        super::super::query::assert_limit::<super::LogQuery>(
            super::DEFAULT_LIMIT,
            super::MAX_LIMIT,
        );
    }
}
