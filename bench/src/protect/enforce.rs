//! Threshold change → enforced: `PUT /v1/limits` moves the default `req_rate` threshold
//! under (or back over) what a tracked client is doing. The client sends requests back to
//! back on a kept-alive connection while the PUT is in flight; the clock runs from sending
//! the PUT until the client's first answer with the new verdict (429, or 200 again). The
//! API answer is timed on its own thread.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use testkit::Edge;

use crate::api::Api;
use crate::stats::Summary;
use crate::traffic::Client;

/// The client's real IP, from a trusted proxy's X-Forwarded-For (127.0.0.0/8 is trusted).
const CLIENT: &str = "203.0.113.250";
/// Bound on one change reaching the client.
const ENFORCE_BOUND: Duration = Duration::from_secs(10);

/// One change, timed.
pub struct Change {
    /// The threshold was lowered under the client's rate (429 expected), or raised again.
    pub lower: bool,
    pub api_ms: f64,
    pub enforced_ms: f64,
    /// The apply's own duration (`apply.duration` of the answer).
    pub apply_ms: f64,
    /// Requests the client sent until it saw the new verdict.
    pub probes: u32,
    pub reloads: u64,
    pub checks: u64,
}

pub struct Series {
    pub changes: Vec<Change>,
    /// Master `show proc` reloads and wrapper `haproxy -c` runs, over the series.
    pub master_reloads: i64,
    pub checks: usize,
}

impl Series {
    pub fn of(&self, lower: bool) -> Option<(Summary, Summary, Summary)> {
        let pick = |f: fn(&Change) -> f64| {
            let v: Vec<f64> = self
                .changes
                .iter()
                .filter(|c| c.lower == lower)
                .map(f)
                .collect();
            Summary::of(&v)
        };
        Some((
            pick(|c| c.enforced_ms)?,
            pick(|c| c.api_ms)?,
            pick(|c| c.apply_ms)?,
        ))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "master_reloads": self.master_reloads,
            "haproxy_checks": self.checks,
            "changes": self.changes.iter().map(|c| json!({
                "lower": c.lower, "api_ms": c.api_ms, "enforced_ms": c.enforced_ms,
                "apply_ms": c.apply_ms, "probes": c.probes,
                "apply_reloads": c.reloads, "apply_checks": c.checks,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The standard preset with the request-rate, connection-rate and error-rate rules raised out
/// of reach (the probing client sends thousands of requests per window, and gets hundreds of
/// 429s while waiting for a raise), or with `req_rate` at 1 (the client is over it with its
/// next request).
fn body(lower: bool) -> Value {
    let req_rate = if lower { "1:deny" } else { "1000000:deny" };
    let soft = if lower { "off" } else { "999999:tarpit" };
    json!({"preset": "standard", "rules": {
        "req_rate": req_rate, "req_rate_soft": soft, "conn_rate": "1000000:deny",
        "err_rate": "1000000:tarpit-403"}})
}

/// A probe on the kept-alive connection, reconnecting once if HAProxy closed it (a deny may).
fn probe(client: &mut Client, edge: &Edge, host: &str) -> anyhow::Result<u16> {
    match client.get() {
        Ok(s) => Ok(s),
        Err(_) => {
            *client = connect(edge, host)?;
            client.get()
        }
    }
}

fn connect(edge: &Edge, host: &str) -> anyhow::Result<Client> {
    Client::connect(
        edge.port,
        host,
        "/",
        &format!("X-Forwarded-For: {CLIENT}\r\n"),
    )
}

/// `ops` changes, alternating lower / raise, starting with a lower.
pub fn series(edge: &Edge, api: &Api, host: &str, ops: usize) -> anyhow::Result<Series> {
    let mut conn = api.connect()?;
    let answer = conn.json("PUT", "/v1/limits", &body(false))?;
    if answer.status != 200 {
        bail!("PUT /v1/limits (standard): {}", answer.describe());
    }
    let mut client = connect(edge, host)?;
    for _ in 0..5 {
        let s = probe(&mut client, edge, host)?;
        if s != 200 {
            bail!("under the standard preset the client got {s}, not 200");
        }
    }
    let reloads0 = edge.try_show_proc()?.master.reloads;
    let checks0 = edge.check_runs();
    let mut changes = Vec::new();
    for i in 0..ops {
        let lower = i.is_multiple_of(2);
        let want = if lower { 429 } else { 200 };
        let t0 = Instant::now();
        let (answer, api_ms, enforced_ms, probes) = thread::scope(|scope| {
            let put = scope.spawn(|| {
                let a = conn.json("PUT", "/v1/limits", &body(lower));
                (a, t0.elapsed().as_secs_f64() * 1000.0)
            });
            let mut probes = 0;
            let seen = loop {
                probes += 1;
                let s = probe(&mut client, edge, host)?;
                if s == want {
                    break t0.elapsed().as_secs_f64() * 1000.0;
                }
                if t0.elapsed() > ENFORCE_BOUND {
                    bail!("change {i}: still {s} after {ENFORCE_BOUND:?}, not {want}");
                }
            };
            let (answer, api_ms) = put
                .join()
                .map_err(|_| anyhow::anyhow!("the PUT panicked"))?;
            anyhow::Ok((answer.context("PUT /v1/limits")?, api_ms, seen, probes))
        })?;
        if answer.status != 200 {
            bail!("PUT /v1/limits: {}", answer.describe());
        }
        let apply = &answer.json()["apply"];
        changes.push(Change {
            lower,
            api_ms,
            enforced_ms,
            apply_ms: apply["duration"].as_f64().unwrap_or(f64::NAN),
            probes,
            reloads: apply["reloads"].as_u64().unwrap_or(u64::MAX),
            checks: apply["checks"].as_u64().unwrap_or(u64::MAX),
        });
    }
    // Leave the edge as it was found.
    let answer = conn.json("PUT", "/v1/limits", &body(false))?;
    if answer.status != 200 {
        bail!("PUT /v1/limits (standard): {}", answer.describe());
    }
    Ok(Series {
        changes,
        master_reloads: edge.try_show_proc()?.master.reloads as i64 - reloads0 as i64,
        checks: edge.check_runs() - checks0,
    })
}
