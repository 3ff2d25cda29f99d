//! The rule set as an operator needs it to write an exclusion (`hapctl waf rules`): every
//! rule id with its file, phase, paranoia level, severity and message, read from the same
//! files the engine loads (hapctl's base, the CRS loader and what it includes, hapctl's
//! rules after the CRS), and the rules hapctl removes.

use std::path::{Path, PathBuf};

use super::engine::{without_include_optional, AFTER, BASE};
use super::EngineError;

/// One rule with an id (chained rules are part of the rule that starts the chain).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleInfo {
    pub id: u32,
    /// 1 request headers, 2 request body, 3–4 the response (HAProxy sends only requests).
    pub phase: Option<u8>,
    /// The CRS paranoia level whose rules include it (its `paranoia-level/N` tag).
    pub paranoia: Option<u8>,
    pub severity: Option<String>,
    pub message: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleFile {
    pub file: String,
    pub rules: Vec<RuleInfo>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleSet {
    /// `OWASP_CRS/3.3.4` (its `SecComponentSignature`).
    pub crs: Option<String>,
    pub files: Vec<RuleFile>,
    /// Ids hapctl's own rules remove (`SecRuleRemoveById`).
    pub removed: Vec<u32>,
}

/// Includes deeper than this are a loop.
const MAX_DEPTH: usize = 8;

impl RuleSet {
    /// Reads what [`super::Engine::load`] loads for `crs_loader`.
    pub fn read(crs_loader: &Path) -> Result<RuleSet, EngineError> {
        let loader = std::fs::read_to_string(crs_loader)
            .map_err(|_| EngineError::NoCrs(crs_loader.display().to_string()))?;
        let mut set = RuleSet {
            crs: None,
            files: Vec::new(),
            removed: Vec::new(),
        };
        set.text("hapctl (templates/waf/modsecurity.conf)", BASE, 0)?;
        set.text(
            &crs_loader.display().to_string(),
            &without_include_optional(&loader),
            0,
        )?;
        set.text("hapctl (templates/waf/after-crs.conf)", AFTER, 0)?;
        set.files.retain(|f| !f.rules.is_empty());
        Ok(set)
    }

    /// Every rule id, in load order.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.files.iter().flat_map(|f| f.rules.iter().map(|r| r.id))
    }

    fn text(&mut self, name: &str, text: &str, depth: usize) -> Result<(), EngineError> {
        let mut rules = Vec::new();
        for line in directives(text) {
            let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            match word {
                "Include" => {
                    if depth >= MAX_DEPTH {
                        return Err(EngineError::Rules(format!(
                            "includes nested too deep at {name}"
                        )));
                    }
                    for path in expand(rest.trim().trim_matches('"'))? {
                        let text = std::fs::read_to_string(&path)
                            .map_err(|e| EngineError::Rules(format!("{}: {e}", path.display())))?;
                        self.text(&path.display().to_string(), &text, depth + 1)?;
                    }
                }
                "SecComponentSignature" => {
                    self.crs = Some(rest.trim().trim_matches('"').to_string());
                }
                "SecRuleRemoveById" => self.removed.extend(
                    rest.split_whitespace()
                        .filter_map(|n| n.parse::<u32>().ok()),
                ),
                "SecRule" | "SecAction" => rules.extend(rule(rest)),
                _ => {}
            }
        }
        self.files.push(RuleFile {
            file: name.to_string(),
            rules,
        });
        Ok(())
    }
}

/// Logical lines: comments dropped, `\` continuations joined.
fn directives(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                current += head;
                current.push(' ');
            }
            None => {
                current += t;
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The actions of one `SecRule`/`SecAction`; `None` without an id (a chained part).
fn rule(directive: &str) -> Option<RuleInfo> {
    let id = action(directive, "id:")?.parse().ok()?;
    let phase = action(directive, "phase:").and_then(|p| match p.as_str() {
        "request" => Some(2),
        "response" => Some(4),
        n => n.parse().ok(),
    });
    let paranoia = directive
        .split("paranoia-level/")
        .nth(1)
        .and_then(|r| r.get(..1))
        .and_then(|d| d.parse().ok());
    Some(RuleInfo {
        id,
        phase,
        paranoia,
        severity: action(directive, "severity:"),
        message: action(directive, "msg:"),
    })
}

/// The value of the first `name` action: quoted (`msg:'…'`) or up to the next `,` or `"`.
fn action(directive: &str, name: &str) -> Option<String> {
    let mut from = 0;
    while let Some(i) = directive[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        // An action starts the action list or follows a comma (`phase:` is no `xphase:`).
        let before = directive[..at].trim_end().chars().last();
        if !matches!(before, Some('"' | ',') | None) {
            continue;
        }
        let rest = &directive[from..];
        let value = match rest.strip_prefix('\'') {
            Some(q) => q.split('\'').next().unwrap_or(""),
            None => rest.split([',', '"']).next().unwrap_or("").trim(),
        };
        return Some(value.to_string());
    }
    None
}

/// An `Include` path: one file, or a `*` in its file name matched in sorted order (as
/// libmodsecurity's glob does).
fn expand(pattern: &str) -> Result<Vec<PathBuf>, EngineError> {
    let path = Path::new(pattern);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let Some((head, tail)) = name.split_once('*') else {
        return Ok(vec![path.to_path_buf()]);
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let entries = std::fs::read_dir(dir)
        .map_err(|e| EngineError::Rules(format!("{}: {e}", dir.display())))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.len() >= head.len() + tail.len() && n.starts_with(head) && n.ends_with(tail)
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::waf::DEBIAN_CRS;

    #[test]
    fn actions_are_read_from_a_continued_rule() {
        let text = "# comment\nSecRule ARGS \"@rx x\" \\\n  \"id:942100,\\\n  phase:2,\\\n  msg:'SQL, injected',\\\n  tag:'paranoia-level/1',\\\n  severity:'CRITICAL',\\\n  chain\"\n  SecRule ARGS \"@rx y\" \"t:none\"\nSecAction \"id:900000,phase:request,nolog\"\n";
        let d = directives(text);
        assert_eq!(d.len(), 3, "{d:?}");
        let r = rule(d[0].split_once(' ').unwrap().1).unwrap();
        assert_eq!(
            r,
            RuleInfo {
                id: 942100,
                phase: Some(2),
                paranoia: Some(1),
                severity: Some("CRITICAL".into()),
                message: Some("SQL, injected".into()),
            }
        );
        assert_eq!(rule("ARGS \"@rx y\" \"t:none\""), None);
        let a = rule(d[2].split_once(' ').unwrap().1).unwrap();
        assert_eq!((a.id, a.phase), (900000, Some(2)));
    }

    #[test]
    fn debians_crs_is_listed_with_its_version_and_hapctls_removal() {
        let set = RuleSet::read(Path::new(DEBIAN_CRS)).unwrap();
        assert!(
            set.crs.as_deref().unwrap_or("").starts_with("OWASP_CRS/3"),
            "{:?}",
            set.crs
        );
        let sqli = set
            .files
            .iter()
            .find(|f| f.file.ends_with("REQUEST-942-APPLICATION-ATTACK-SQLI.conf"))
            .expect("the SQLi file");
        let r = sqli.rules.iter().find(|r| r.id == 942100).expect("942100");
        assert_eq!((r.phase, r.paranoia), (Some(2), Some(1)));
        assert!(r.message.as_deref().unwrap_or("").contains("SQL"), "{r:?}");
        assert!(set.removed.contains(&901321));
        let ids: Vec<u32> = set.ids().collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "an id twice");
        assert!(ids.len() > 300, "{}", ids.len());
    }
}
