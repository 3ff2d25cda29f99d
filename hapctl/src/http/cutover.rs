//! The cutover in progress, step by step, for `GET /v1/deliveries/current`: a delivery or a
//! rollback answers only when it is over, so the dashboard shows its steps from here meanwhile.
//! It keeps the latest cutover started (two apps delivered at once show the later one).

use std::sync::Mutex;

use serde_json::{json, Value};

use crate::clock::unix_now;
use crate::deliver::DeliveryStep;

#[derive(Default)]
pub struct Cutovers(Mutex<Option<Value>>);

impl Cutovers {
    fn with(&self, f: impl FnOnce(&mut Option<Value>)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// A cutover starts; `version` is the target (empty for a rollback: the previous one).
    pub fn start(&self, kind: &str, app: &str, version: &str) {
        self.with(|c| {
            *c = Some(
                json!({"running": true, "kind": kind, "app": app, "version": version,
                "started_at": unix_now(), "steps": []}),
            )
        });
    }

    pub fn step(&self, step: &DeliveryStep) {
        self.with(|c| {
            if let Some(steps) = c.as_mut().and_then(|v| v["steps"].as_array_mut()) {
                steps.push(serde_json::to_value(step).unwrap_or_default());
            }
        });
    }

    /// It is over: `outcome` is the report's, or `error` when it did not run.
    pub fn finish(&self, outcome: &str) {
        self.with(|c| {
            if let Some(v) = c.as_mut() {
                v["running"] = json!(false);
                v["outcome"] = json!(outcome);
            }
        });
    }

    pub fn current(&self) -> Value {
        let mut out = json!({"running": false});
        self.with(|c| {
            if let Some(v) = c {
                out = v.clone();
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn steps_accumulate_until_the_cutover_is_over() {
        let c = super::Cutovers::default();
        assert_eq!(c.current()["running"], false);
        c.start("deliver", "shop", "v2");
        let step = crate::deliver::DeliveryStep {
            name: "start".into(),
            detail: "port 9001".into(),
            ms: 12.0,
        };
        c.step(&step);
        c.step(&step);
        let now = c.current();
        assert_eq!(now["running"], true);
        assert_eq!(now["steps"].as_array().unwrap().len(), 2);
        assert_eq!(now["steps"][0]["detail"], "port 9001");
        c.finish("delivered");
        assert_eq!(c.current()["running"], false);
        assert_eq!(c.current()["outcome"], "delivered");
        c.start("rollback", "shop", "");
        assert!(c.current()["steps"].as_array().unwrap().is_empty());
    }
}
