//! The agent's decision: the matched rules scored under the domain's policy.

use crate::model::WafPolicy;

use super::matches::RuleMatch;

/// Most rule ids reported back to HAProxy (the log line stays bounded).
pub const MAX_REPORTED: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WafVerdict {
    /// The anomaly score of the rules that count (exclusions dropped).
    pub score: u32,
    /// Whether the score reached the domain's threshold.
    pub over: bool,
    /// The counting rules that matched, in evaluation order, at most [`MAX_REPORTED`].
    pub rules: Vec<u32>,
}

impl WafVerdict {
    pub fn score(matches: &[RuleMatch], policy: &WafPolicy, path: &str) -> WafVerdict {
        let counting: Vec<&RuleMatch> = matches
            .iter()
            .filter(|m| m.anomaly_points() > 0)
            .filter(|m| !policy.exclusions.iter().any(|e| e.covers(m.id, path)))
            .collect();
        let score = counting.iter().map(|m| m.anomaly_points()).sum();
        let mut rules: Vec<u32> = Vec::new();
        for m in counting {
            if !rules.contains(&m.id) && rules.len() < MAX_REPORTED {
                rules.push(m.id);
            }
        }
        WafVerdict {
            score,
            over: score >= policy.threshold,
            rules,
        }
    }

    /// `942100,942190` (empty when nothing counted).
    pub fn rules_text(&self) -> String {
        let ids: Vec<String> = self.rules.iter().map(u32::to_string).collect();
        ids.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: u32, severity: u8) -> RuleMatch {
        RuleMatch {
            id,
            severity: Some(severity),
            message: String::new(),
        }
    }

    #[test]
    fn exclusions_and_bookkeeping_rules_do_not_count() {
        let matches = [m(942100, 2), m(942100, 2), m(949110, 2), m(920350, 4)];
        let mut policy = WafPolicy::default();
        let v = WafVerdict::score(&matches, &policy, "/search");
        assert_eq!(
            (v.score, v.over, v.rules_text().as_str()),
            (13, true, "942100,920350")
        );
        policy.exclusions = vec!["942100@/search".parse().unwrap()];
        let v = WafVerdict::score(&matches, &policy, "/search/x");
        assert_eq!(
            (v.score, v.over, v.rules_text().as_str()),
            (3, false, "920350")
        );
        let v = WafVerdict::score(&matches, &policy, "/other");
        assert_eq!(v.score, 13);
    }
}
