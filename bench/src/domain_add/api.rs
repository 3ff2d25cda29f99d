//! The API series of domain-add: `hapctl serve` on the edge the CLI series used, and
//! `PUT /v1/domains/new-api-I.example.com` timed from sending it to the first 200 through HAProxy;
//! the same through the old manager's `POST /api/domain` (its clients' route, unchanged);
//! then, the daemon still running, `hapctl domain add new-fwd-I.example.com`, which the CLI hands
//! to the daemon (its `run/api.sock`), timed from spawning it.

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Edge;

use crate::api::Api;
use crate::api_domains::{watch_put, watch_request, Watched};

use super::{unix_ms, Applied, Op, BODY};

/// Bound on the daemon's start (at 10,000 domains it parses the state first).
const DAEMON_START: Duration = Duration::from_secs(300);
/// Bound on waiting, before and after each PUT, for old workers and the daemon's coalesced check.
const SETTLE: Duration = Duration::from_secs(15);

/// The adds of one run of the daemon, by route.
pub(super) struct Series {
    /// Spawn → `/health` answering 200, ms.
    pub daemon_ms: f64,
    pub api: Vec<Op>,
    /// `POST /api/domain`.
    pub compat: Vec<Op>,
    /// The CLI beside the daemon.
    pub forwarded: Vec<Op>,
}

/// Starts the daemon, makes `k` adds through `/v1`, `k` through the old route and `k` through
/// the CLI beside it, stops it.
pub(super) fn series(edge: &Edge, k: usize, backend: &str) -> anyhow::Result<Series> {
    let daemon = Daemon::try_start(edge, &Serve::within(DAEMON_START))?;
    let daemon_ms = daemon.startup.as_secs_f64() * 1000.0;
    let daemon_api = Api::of(&daemon);
    // The servers of the CLI series: one, health-checked (the default of both).
    let body = json!({ "servers": [{ "address": backend }] });
    let mut api = Vec::with_capacity(k);
    for i in 0..k {
        let host = format!("new-api-{i}.example.com");
        let put = |host: &str| watch_put(edge, &daemon_api, host, &body, BODY);
        let op = watched(edge, &host, put, |w, sent_unix_ms| {
            let report = &w.answer.json()["apply"];
            if report["outcome"] != "applied" {
                bail!(
                    "PUT /v1/domains/{host}: not applied: {}",
                    w.answer.describe()
                );
            }
            Ok(Applied::parse(report, sent_unix_ms))
        })?;
        op.log("API");
        api.push(op);
    }
    let compat = compat_series(edge, &daemon_api, k, backend)?;
    let mut forwarded = Vec::with_capacity(k);
    for i in 0..k {
        edge.settle(SETTLE)?;
        let op = super::add_once(edge, &format!("new-fwd-{i}.example.com"), backend)?;
        op.log("CLI, daemon running");
        forwarded.push(op);
    }
    Ok(Series {
        daemon_ms,
        api,
        compat,
        forwarded,
    })
    // `daemon` drops here (before the edge): HAProxy keeps running.
}

/// `k` adds through `POST /api/domain` as the old manager's clients send them (one server by
/// address and port, `options: "check"`). The first domain with the old routes' event-stream
/// twin loads that kind's spare slots (one reload, as the first default domain of the fixture
/// did): it goes first and is not counted.
fn compat_series(edge: &Edge, api: &Api, k: usize, backend: &str) -> anyhow::Result<Vec<Op>> {
    let (address, port) = backend.rsplit_once(':').context("the backend is IP:port")?;
    let post = |host: &str| {
        let body = json!({"domain": host, "backend_name": "bench_backend", "servers": [
            {"name": "web1", "address": address, "port": port, "options": "check"}]});
        watch_request(edge, api, ("POST", "/api/domain"), host, &body, BODY)
    };
    edge.settle(SETTLE)?;
    post("first-compat.example.com")?;
    let mut ops = Vec::with_capacity(k);
    for i in 0..k {
        let host = format!("new-compat-{i}.example.com");
        let op = watched(edge, &host, post, |w, sent_unix_ms| {
            if w.answer.json()["status"] != "success" {
                bail!("POST /api/domain {host}: {}", w.answer.describe());
            }
            Ok(Applied::from_history(&latest_apply(api)?, sent_unix_ms))
        })?;
        op.log("API, old route");
        ops.push(op);
    }
    Ok(ops)
}

/// The newest row of the apply history (`GET /v1/applies`): the old route answers no report.
fn latest_apply(api: &Api) -> anyhow::Result<Value> {
    let answer = api.call("GET", "/v1/applies", None)?;
    let list = answer.json();
    list.get(0)
        .cloned()
        .with_context(|| format!("no apply in the history: {}", answer.describe()))
}

/// One add through the daemon (`add`), settled before and after: the previous add's
/// background check and old workers are done before the next one, and the counts take in the
/// daemon's check of the runtime-changed set, made when idle. `applied` reads the apply from
/// the watch and when the request was sent (unix ms).
fn watched(
    edge: &Edge,
    host: &str,
    add: impl Fn(&str) -> anyhow::Result<Watched>,
    applied: impl FnOnce(&Watched, f64) -> anyhow::Result<Applied>,
) -> anyhow::Result<Op> {
    edge.settle(SETTLE)?;
    let checks_before = edge.check_runs();
    let reloads_before = edge.try_show_proc()?.master.reloads;
    let sent_unix_ms = unix_ms();
    let w = add(host)?;
    let applied = applied(&w, sent_unix_ms)?;
    edge.settle(SETTLE)?;
    Ok(Op {
        host: host.to_string(),
        first_ok_ms: w.routed.as_secs_f64() * 1000.0,
        ended_ms: w.answered.as_secs_f64() * 1000.0,
        checks: edge.check_runs() - checks_before,
        reloads: edge.try_show_proc()?.master.reloads as i64 - reloads_before as i64,
        probes: w.probes,
        applied,
    })
}
