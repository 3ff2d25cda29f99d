//! `POST /v1/waf/test`: a request evaluated against the rules without being sent.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::schemas;
use crate::model::{Domain, Invalid, WafPolicy};
use crate::waf::trial::Trial;

/// The request to evaluate, and the policy to score it under (as in the domain API).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WafTestRequest {
    /// a path and query or an http:// or https:// URL
    pub url: String,
    #[serde(default = "get")]
    pub method: String,
    #[serde(default)]
    #[schema(inline)]
    pub headers: Vec<WafTestHeader>,
    pub body: Option<String>,
    #[schema(schema_with = schemas::string)]
    pub domain: Option<Domain>,
    #[schema(schema_with = schemas::waf_policy)]
    pub policy: Option<WafPolicy>,
}

impl WafTestRequest {
    /// The request parsed field by field, as `hapctl waf test` parses its arguments; an error
    /// names its field.
    pub fn parse(self) -> Result<WafTest, Invalid> {
        let headers: Vec<(String, String)> = self
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect();
        let trial = Trial::parse(&self.url, &self.method, &headers, self.body.as_deref())?;
        let policy = self
            .policy
            .map(WafPolicy::checked)
            .transpose()
            .map_err(|e| e.in_field("policy"))?;
        Ok(WafTest {
            trial,
            policy,
            domain: self.domain,
        })
    }
}

/// A [`WafTestRequest`], parsed.
#[derive(Debug)]
pub struct WafTest {
    pub trial: Trial,
    /// The policy to score it under, if given.
    pub policy: Option<WafPolicy>,
    /// Whose stored policy to score it under when none is given (else the URL's host's).
    pub domain: Option<Domain>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WafTestHeader {
    pub name: String,
    pub value: String,
}

fn get() -> String {
    "GET".into()
}
