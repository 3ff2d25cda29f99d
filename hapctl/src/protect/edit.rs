//! Edits of the limits as the CLI and the API give them (strings, parsed here), turned into
//! checked values before anything is written.

use crate::model::{
    parse_secs, Invalid, LimitPolicy, LimitRule, Limits, Slot, MAX_TARPIT_SECS, MAX_WINDOW_SECS,
};

/// A policy edit: an optional preset (`standard`, `off`, `custom` = off plus the rules
/// given), then rules replaced one by one (`off` or `THRESHOLD:ACTION`).
#[derive(Debug, Clone, Default)]
pub struct PolicyEdit {
    pub preset: Option<String>,
    pub rules: Vec<(Slot, String)>,
}

impl PolicyEdit {
    /// The edited policy, checked as a whole once every rule is set.
    pub fn apply(&self, base: LimitPolicy) -> Result<LimitPolicy, Invalid> {
        let mut policy = match self.preset.as_deref() {
            Some("custom") if self.rules.is_empty() => {
                return Err(Invalid::new(
                    "limits preset",
                    "custom",
                    "needs at least one rule (--req-rate 5000:deny, ...)",
                ))
            }
            Some(name) => LimitPolicy::preset(name)?,
            None => base,
        };
        for (slot, spec) in &self.rules {
            let rule = LimitRule::parse_spec(spec).map_err(|e| e.in_field(slot.name()))?;
            policy = policy.with(*slot, rule);
        }
        policy.check()
    }

    pub fn is_empty(&self) -> bool {
        self.preset.is_none() && self.rules.is_empty()
    }
}

/// An edit of the edge-wide settings.
#[derive(Debug, Clone, Default)]
pub struct EdgeEdit {
    pub policy: PolicyEdit,
    pub req_window: Option<String>,
    pub conn_window: Option<String>,
    pub err_window: Option<String>,
    pub tarpit: Option<String>,
    pub local_exempt: Option<bool>,
}

impl EdgeEdit {
    /// `current` with this edit applied, every field checked.
    pub fn apply(&self, current: &Limits) -> Result<Limits, Invalid> {
        let mut next = current.clone();
        next.default = self.policy.apply(current.default)?;
        let window = |field, v: &Option<String>, old: u32| match v {
            Some(v) => parse_secs(field, v, MAX_WINDOW_SECS),
            None => Ok(old),
        };
        next.windows.req = window("req_window", &self.req_window, current.windows.req)?;
        next.windows.conn = window("conn_window", &self.conn_window, current.windows.conn)?;
        next.windows.err = window("err_window", &self.err_window, current.windows.err)?;
        if let Some(t) = &self.tarpit {
            next.tarpit_secs = parse_secs("tarpit", t, MAX_TARPIT_SECS)?;
        }
        if let Some(local) = self.local_exempt {
            next.local_exempt = local;
        }
        Ok(next)
    }
}

/// `on`/`off` (and `true`/`false`) for a switch.
pub fn parse_switch(field: &'static str, s: &str) -> Result<bool, Invalid> {
    match s {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(Invalid::new(field, s, "must be on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_are_checked_after_every_rule_is_set() {
        let edit = PolicyEdit {
            preset: None,
            rules: vec![
                (Slot::ReqRateSoft, "6000:tarpit".into()),
                (Slot::ReqRate, "8000:deny".into()),
            ],
        };
        let p = edit.apply(LimitPolicy::standard()).unwrap();
        assert_eq!(p.rule(Slot::ReqRate).unwrap().threshold(), 8000);
    }

    #[test]
    fn hostile_edits_are_refused() {
        let bad = |preset: Option<&str>, rule: &str| PolicyEdit {
            preset: preset.map(String::from),
            rules: vec![(Slot::ErrRate, rule.to_string())],
        };
        assert!(bad(Some("paranoid"), "off")
            .apply(LimitPolicy::off())
            .is_err());
        assert!(bad(None, "0:deny").apply(LimitPolicy::off()).is_err());
        assert!(bad(None, "5:deny\nhttp-request allow")
            .apply(LimitPolicy::off())
            .is_err());
        let custom = PolicyEdit {
            preset: Some("custom".into()),
            rules: vec![],
        };
        assert!(custom.apply(LimitPolicy::off()).is_err());
        let edge = EdgeEdit {
            req_window: Some("0".into()),
            ..Default::default()
        };
        assert!(edge.apply(&Limits::default()).is_err());
        let edge = EdgeEdit {
            tarpit: Some("61".into()),
            ..Default::default()
        };
        assert!(edge.apply(&Limits::default()).is_err());
    }
}
