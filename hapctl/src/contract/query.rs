//! What a refused query string says: the parameter and why, answered as a 400 naming it.

/// A parameter of a query string (`?limit=…`) that does not parse, or one the route does not
/// take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    /// The parameter, or `query` for a name the route does not know.
    pub field: String,
    pub message: String,
}

impl QueryError {
    pub fn new(field: &str, message: impl Into<String>) -> QueryError {
        QueryError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// A page size from 1 to `max`.
pub fn parse_limit(value: &str, max: usize) -> Result<usize, String> {
    value
        .parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("must be a number from 1 to {max}"))
}

/// Query pairs as the router decodes them, for tests.
#[cfg(test)]
pub(super) fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Asserts that `T`'s documented `limit` parameter has the bounds its parser applies.
#[cfg(test)]
pub(super) fn assert_limit<T: utoipa::IntoParams>(default: usize, max: usize) {
    let params = T::into_params(|| None);
    let limit = params
        .iter()
        .find(|p| p.name == "limit")
        .expect("a limit parameter");
    let schema = serde_json::to_value(&limit.schema).unwrap();
    assert_eq!(
        (&schema["minimum"], &schema["maximum"], &schema["default"]),
        (&1.into(), &max.into(), &default.into()),
        "{schema}"
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_block_page_is_the_parsed_one() {
        use crate::model::{BlockQuery, DEFAULT_PAGE, MAX_PAGE};
        super::assert_limit::<BlockQuery>(DEFAULT_PAGE, MAX_PAGE);
    }
}
