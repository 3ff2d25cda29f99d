//! `GET /v1/domains?limit=&after=&q=`: one page of the domains in name order, for lists of
//! 10,000 (the dashboard). Without parameters the route keeps its bare array.

use utoipa::IntoParams;

use super::QueryError;

/// Domains per page unless `limit` says otherwise, and the most it may say.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

/// A page request, parsed. Each field's doc is its parameter's description in
/// `/openapi.json`.
#[derive(Debug, PartialEq, Eq, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DomainQuery {
    /// domains per page
    // The bounds are DEFAULT_LIMIT and MAX_LIMIT (the derive takes literals; a test ties them).
    #[param(value_type = Option<usize>, minimum = 1, maximum = 1000, default = 100)]
    pub limit: usize,
    /// the `next` of the page before
    pub after: Option<String>,
    /// only names containing this text
    pub q: Option<String>,
}

impl DomainQuery {
    /// `None` without parameters (the bare list); an error naming a bad or unknown parameter.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<Option<DomainQuery>, QueryError> {
        if pairs.is_empty() {
            return Ok(None);
        }
        let mut query = DomainQuery {
            limit: DEFAULT_LIMIT,
            after: None,
            q: None,
        };
        for (name, value) in pairs {
            match name.as_str() {
                "limit" => {
                    query.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            QueryError::new(
                                "limit",
                                format!("limit {value:?}: a number of domains, 1 to {MAX_LIMIT}"),
                            )
                        })?
                }
                "after" => query.after = Some(value.to_ascii_lowercase()),
                "q" if value.len() > 253 => {
                    return Err(QueryError::new("q", "q: at most 253 characters"))
                }
                "q" => query.q = Some(value.trim().to_ascii_lowercase()).filter(|q| !q.is_empty()),
                _ => {
                    return Err(QueryError::new(
                        "query",
                        format!("unknown parameter {name:?}: limit, after and q are known"),
                    ))
                }
            }
        }
        Ok(Some(query))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_limit_is_the_parsed_one() {
        super::super::query::assert_limit::<super::DomainQuery>(
            super::DEFAULT_LIMIT,
            super::MAX_LIMIT,
        );
    }
}
