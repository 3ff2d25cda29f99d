//! The API series of domain-add: `hapctl serve` on the edge the CLI series used, and
//! `PUT /v1/domains/new-api-I.example.com` timed from sending it to the first 200 through HAProxy;
//! then, the daemon still running, `hapctl domain add new-fwd-I.example.com`, which the CLI hands
//! to the daemon (its `run/api.sock`), timed from spawning it.

use std::time::Duration;

use anyhow::bail;
use serde_json::json;

use crate::api_domains::watch_put;
use crate::daemon::Daemon;
use crate::harness::Edge;

use super::{unix_ms, Applied, Op, BODY};

/// Bound on the daemon's start (at 10,000 domains it parses the state first).
const DAEMON_START: Duration = Duration::from_secs(300);
/// Bound on waiting, before and after each PUT, for old workers and the daemon's coalesced check.
const SETTLE: Duration = Duration::from_secs(15);

/// Starts the daemon, makes `k` adds through it and `k` through the CLI beside it, stops it.
/// Returns the daemon's start time (ms), the API's adds and the CLI's.
pub(super) fn series(
    edge: &Edge,
    k: usize,
    backend: &str,
) -> anyhow::Result<(f64, Vec<Op>, Vec<Op>)> {
    let daemon = Daemon::start(edge, DAEMON_START)?;
    let daemon_ms = daemon.startup.as_secs_f64() * 1000.0;
    // The servers of the CLI series: one, health-checked (the default of both).
    let body = json!({ "servers": [{ "address": backend }] });
    let mut ops = Vec::with_capacity(k);
    for i in 0..k {
        // The previous add's background check and old workers are done before the next one.
        edge.settle(SETTLE)?;
        let host = format!("new-api-{i}.example.com");
        let checks_before = edge.check_runs();
        let reloads_before = edge.show_proc()?.master.reloads;
        let sent_unix_ms = unix_ms();
        let w = watch_put(edge, &daemon.api, &host, &body, BODY)?;
        let report = &w.answer.json()["apply"];
        if report["outcome"] != "applied" {
            bail!(
                "PUT /v1/domains/{host}: not applied: {}",
                w.answer.describe()
            );
        }
        // The counts take in the daemon's check of the runtime-changed set, made when idle.
        edge.settle(SETTLE)?;
        let op = Op {
            host,
            first_ok_ms: w.routed.as_secs_f64() * 1000.0,
            ended_ms: w.answered.as_secs_f64() * 1000.0,
            checks: edge.check_runs() - checks_before,
            reloads: edge.show_proc()?.master.reloads as i64 - reloads_before as i64,
            probes: w.probes,
            applied: Applied::parse(report, sent_unix_ms),
        };
        op.log("API");
        ops.push(op);
    }
    let mut forwarded = Vec::with_capacity(k);
    for i in 0..k {
        edge.settle(SETTLE)?;
        let op = super::add_once(edge, &format!("new-fwd-{i}.example.com"), backend)?;
        op.log("CLI, daemon running");
        forwarded.push(op);
    }
    Ok((daemon_ms, ops, forwarded))
    // `daemon` drops here (before the edge): HAProxy keeps running.
}
