//! A matched rule, read from libmodsecurity's log line for it.

/// One rule that matched: its id, CRS severity (0 emergency … 7 debug) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMatch {
    pub id: u32,
    pub severity: Option<u8>,
    pub message: String,
}

impl RuleMatch {
    /// From `ModSecurity: Warning. … [id "942100"] [msg "…"] [severity "2"] …`; a line
    /// without a rule id (engine notices) is not a match.
    pub fn parse(line: &str) -> Option<RuleMatch> {
        let id = field(line, "id")?.parse().ok()?;
        Some(RuleMatch {
            id,
            severity: field(line, "severity").and_then(|s| s.parse().ok()),
            message: field(line, "msg").unwrap_or_default().to_string(),
        })
    }

    /// The CRS anomaly score this match adds: its severity's weight for request rules
    /// (911xxx–944xxx), nothing for the CRS's own bookkeeping and hapctl's rules.
    pub fn anomaly_points(&self) -> u32 {
        if !(911_000..949_000).contains(&self.id) {
            return 0;
        }
        // crs-setup.conf's tx.critical/error/warning/notice_anomaly_score defaults.
        match self.severity {
            Some(0..=2) => 5,
            Some(3) => 4,
            Some(4) => 3,
            Some(5) => 2,
            _ => 0,
        }
    }
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let open = format!("[{key} \"");
    let start = line.find(&open)? + open.len();
    let len = line[start..].find("\"]")?;
    Some(&line[start..start + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"ModSecurity: Warning. detected SQLi using libinjection. [file "/usr/share/modsecurity-crs/rules/REQUEST-942-APPLICATION-ATTACK-SQLI.conf"] [line "65"] [id "942100"] [rev ""] [msg "SQL Injection Attack Detected via libinjection"] [data "Matched Data: s&sos found within ARGS:id: 1' or '1'='1"] [severity "2"] [ver "OWASP_CRS/3.3.4"] [maturity "0"] [accuracy "0"] [tag "attack-sqli"] [hostname "127.0.0.1"] [uri "/"] [unique_id "abc.pl1"] [ref "v8,13"]"#;

    #[test]
    fn a_crs_line_gives_id_severity_and_message() {
        let m = RuleMatch::parse(LINE).unwrap();
        assert_eq!(m.id, 942100);
        assert_eq!(m.severity, Some(2));
        assert_eq!(m.message, "SQL Injection Attack Detected via libinjection");
        assert_eq!(m.anomaly_points(), 5);
    }

    #[test]
    fn lines_without_an_id_and_bookkeeping_rules_score_nothing() {
        assert_eq!(RuleMatch::parse("ModSecurity: Warning. nothing here"), None);
        assert_eq!(RuleMatch::parse(r#"[id "x1"]"#), None);
        let eval = RuleMatch::parse(r#"[id "949110"] [severity "2"]"#).unwrap();
        assert_eq!(eval.anomaly_points(), 0);
        let notice = RuleMatch::parse(r#"[id "920350"] [severity "5"]"#).unwrap();
        assert_eq!(notice.anomaly_points(), 2);
    }
}
