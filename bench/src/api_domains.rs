//! api-domains: `PUT /v1/domains/{name}` through the daemon on an edge with 1,000 domains.
//!
//! 1. Latency to routed: sequential PUTs of new domains, each timed from sending the request
//!    to the first request with the new Host answered 200 by the backend through HAProxy.
//! 2. Coalescing: rounds of 100 concurrent PUTs (new domains); reloads (master `show proc`)
//!    and `haproxy -c` runs (counting wrapper) per round.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Edge;

use crate::api::{Answer, Api};
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge, HttpBackend};
use crate::stats::{ms, Summary};
use crate::{Ctx, Report, Table, Target};

const BODY: &str = "hapctl-bench backend\n";
const DOMAINS: usize = 1_000;
const SEQUENTIAL: usize = 15;
const CONCURRENT: usize = 100;
const ROUNDS: usize = 3;
const TARGET_RELOADS: i64 = 5;
const POLL_EVERY: Duration = Duration::from_millis(2);
const OP_TIMEOUT: Duration = Duration::from_secs(60);
const APPLY_STEPS: [&str; 5] = ["render", "snapshot", "write", "check", "reload"];

/// Fields drop in order: the daemon before the edge.
struct Served {
    daemon: Daemon,
    edge: Edge,
}

struct Put {
    host: String,
    routed_ms: f64,
    api_ms: f64,
    apply_ms: f64,
    steps: Vec<(String, f64)>,
    reloads: i64,
}

struct Round {
    ok: usize,
    failed: Vec<String>,
    wall_ms: f64,
    latencies: Vec<f64>,
    /// Distinct applies named by the answers (`apply.started_at_ms`).
    applies: usize,
    reloads: i64,
    checks: usize,
    routed: usize,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = HttpBackend::start(BODY);
    let addr = backend.addr();
    let edge = new_edge(&hapctl)?;
    edge.load(&fixture::state(DOMAINS, Servers::At(&addr)))?;
    edge.start()?;
    let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(120)))?;
    let s = Served { daemon, edge };
    let api = Api::of(&s.daemon);
    let body = json!({"servers": [{"address": addr}]});

    eprintln!("api-domains: {SEQUENTIAL} sequential PUTs at {DOMAINS} domains…");
    let puts = sequential_puts(&s.edge, &api, &body)?;
    let rounds = concurrent_rounds(&s.edge, &api, &body)?;
    let total_domains = api
        .call("GET", "/v1/domains", None)?
        .json()
        .as_array()
        .map_or(0, Vec::len);
    drop(s);
    Ok(report(&puts, &rounds, &body, total_domains))
}

/// [`SEQUENTIAL`] PUTs of new domains, each timed to routed.
fn sequential_puts(edge: &Edge, api: &Api, body: &Value) -> anyhow::Result<Vec<Put>> {
    let mut puts = Vec::new();
    for i in 0..SEQUENTIAL {
        if !edge.wait_old_workers_gone(Duration::from_secs(10))? {
            eprintln!("  (old workers still draining after 10 s; measuring anyway)");
        }
        let p = put_once(edge, api, &format!("put-{i}.example.com"), body)?;
        eprintln!(
            "  {}: routed after {} ms, answer {} ms (apply {} ms), reloads {}",
            p.host,
            ms(p.routed_ms),
            ms(p.api_ms),
            ms(p.apply_ms),
            p.reloads
        );
        puts.push(p);
    }
    Ok(puts)
}

/// [`ROUNDS`] rounds of [`CONCURRENT`] PUTs at once.
fn concurrent_rounds(edge: &Edge, api: &Api, body: &Value) -> anyhow::Result<Vec<Round>> {
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        edge.wait_old_workers_gone(Duration::from_secs(10))?;
        let round = concurrent_round(edge, api, r, body)?;
        eprintln!(
            "  round {}: {} PUTs answered ok in {} ms; {} applies, {} reloads, {} haproxy -c; {} routed",
            r + 1,
            round.ok,
            ms(round.wall_ms),
            round.applies,
            round.reloads,
            round.checks,
            round.routed
        );
        rounds.push(round);
    }
    Ok(rounds)
}

fn report(puts: &[Put], rounds: &[Round], body: &Value, total_domains: usize) -> Report {
    let routed = Summary::of(&puts.iter().map(|p| p.routed_ms).collect::<Vec<_>>()).expect("> 0");
    let answered = Summary::of(&puts.iter().map(|p| p.api_ms).collect::<Vec<_>>()).expect("> 0");
    let mut notes = vec![
        format!(
            "edge: `hapctl init`, {DOMAINS} fixture domains written to the database, `hapctl haproxy start`, \
             `hapctl serve --listen 127.0.0.1:<free>`. Each PUT body is {body} (health checks on, the API default); \
             every fixture server points at the same in-process backend, checks off."
        ),
        "latency: the PUT runs on its own thread (one connection); from the moment it is sent the bench requests \
         GET / with the new Host on a fresh connection every ~2 ms until the backend's 200. Before each PUT the \
         bench waits until the master has no old worker left."
            .into(),
        format!(
            "concurrent: {CONCURRENT} threads wait on a barrier, then each sends one PUT on its own connection; \
             applies = distinct `apply.started_at_ms` among the answers; reloads = master reload count after the \
             last answer − before; then each new Host is requested once through the edge. {total_domains} domains \
             at the end."
        ),
    ];
    for r in rounds {
        if !r.failed.is_empty() {
            notes.push(format!("failed PUTs: {}", r.failed.join("; ")));
        }
    }
    Report {
        tables: vec![
            latency_table(puts, &routed, &answered),
            split_table(puts, &routed, &answered),
            rounds_table(rounds),
        ],
        targets: targets(rounds, &routed, &answered),
        notes,
        json: json!({
            "domains": DOMAINS,
            "sequential": {
                "routed_ms": routed.to_json(),
                "api_ms": answered.to_json(),
                "ops": puts.iter().map(|p| json!({
                    "host": p.host,
                    "routed_ms": p.routed_ms,
                    "api_ms": p.api_ms,
                    "apply_ms": p.apply_ms,
                    "steps_ms": p.steps.iter().map(|(n, d)| (n.clone(), json!(d))).collect::<serde_json::Map<_, _>>(),
                    "reloads": p.reloads,
                })).collect::<Vec<_>>(),
            },
            "concurrent": rounds.iter().map(|r| json!({
                "puts": CONCURRENT,
                "ok": r.ok,
                "wall_ms": r.wall_ms,
                "answer_ms": Summary::of(&r.latencies).map(Summary::to_json),
                "applies": r.applies,
                "reloads": r.reloads,
                "haproxy_c": r.checks,
                "routed": r.routed,
            })).collect::<Vec<_>>(),
        }),
    }
}

fn latency_table(puts: &[Put], routed: &Summary, answered: &Summary) -> Table {
    let mut lat = Table::new(
        format!("api-domains: PUT /v1/domains/{{name}} (new domain) at {DOMAINS} domains, send → first 200 through HAProxy, ms"),
        &["ops", "median", "p95", "min", "max", "API answer (median)", "reloads/op"],
    );
    lat.row(vec![
        puts.len().to_string(),
        ms(routed.median),
        ms(routed.p95),
        ms(routed.min),
        ms(routed.max),
        ms(answered.median),
        format!(
            "{:.2}",
            puts.iter().map(|p| p.reloads).sum::<i64>() as f64 / puts.len() as f64
        ),
    ]);
    lat
}

fn split_table(puts: &[Put], routed: &Summary, answered: &Summary) -> Table {
    let mut split = Table::new(
        "api-domains: the apply of one PUT (medians, ms; from the answer's `apply`)",
        &[
            "render",
            "snapshot",
            "write",
            "check",
            "reload",
            "apply total",
            "API answer",
            "routed",
        ],
    );
    let step = |p: &Put, name: &str| {
        p.steps
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, d)| *d)
    };
    let mut row: Vec<String> = APPLY_STEPS
        .iter()
        .map(|name| {
            ms(
                Summary::of(&puts.iter().map(|p| step(p, name)).collect::<Vec<_>>())
                    .expect("> 0")
                    .median,
            )
        })
        .collect();
    row.push(ms(Summary::of(
        &puts.iter().map(|p| p.apply_ms).collect::<Vec<_>>(),
    )
    .expect("> 0")
    .median));
    row.push(ms(answered.median));
    row.push(ms(routed.median));
    split.row(row);
    split
}

fn rounds_table(rounds: &[Round]) -> Table {
    let mut conc = Table::new(
        format!("api-domains: {CONCURRENT} concurrent PUTs of new domains, per round"),
        &[
            "round",
            "answered 2xx",
            "wall ms",
            "answer p50",
            "answer max",
            "applies",
            "reloads",
            "haproxy -c",
            "routed after",
        ],
    );
    for (i, r) in rounds.iter().enumerate() {
        let l = Summary::of(&r.latencies).unwrap_or(Summary::of(&[0.0]).expect("one"));
        conc.row(vec![
            (i + 1).to_string(),
            format!("{}/{CONCURRENT}", r.ok),
            ms(r.wall_ms),
            ms(l.median),
            ms(l.max),
            r.applies.to_string(),
            r.reloads.to_string(),
            r.checks.to_string(),
            format!("{}/{CONCURRENT}", r.routed),
        ]);
    }
    conc
}

fn targets(rounds: &[Round], routed: &Summary, answered: &Summary) -> Vec<Target> {
    let worst = rounds.iter().map(|r| r.reloads).max().unwrap_or(0);
    let all_ok = rounds
        .iter()
        .all(|r| r.ok == CONCURRENT && r.routed == CONCURRENT);
    vec![
        Target {
            goal: format!("at most {TARGET_RELOADS} reloads per {CONCURRENT} concurrent PUTs"),
            met: Some(worst <= TARGET_RELOADS && all_ok),
            detail: format!(
                "reloads per round: {}; haproxy -c per round: {}; every PUT answered 2xx and routed: {all_ok}",
                rounds.iter().map(|r| r.reloads.to_string()).collect::<Vec<_>>().join(", "),
                rounds.iter().map(|r| r.checks.to_string()).collect::<Vec<_>>().join(", ")
            ),
        },
        Target {
            goal: "PUT at 1,000 domains: latency to routed (reported, no target)".into(),
            met: None,
            detail: format!(
                "median {} ms (min {}, max {}), API answer median {} ms",
                ms(routed.median),
                ms(routed.min),
                ms(routed.max),
                ms(answered.median)
            ),
        },
    ]
}

fn put_once(edge: &Edge, api: &Api, host: &str, body: &Value) -> anyhow::Result<Put> {
    let reloads_before = edge.try_show_proc()?.master.reloads;
    let w = watch_put(edge, api, host, body, BODY)?;
    let j = w.answer.json();
    let steps = j["apply"]["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .filter_map(|s| Some((s["name"].as_str()?.to_string(), s["duration"].as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    Ok(Put {
        host: host.to_string(),
        routed_ms: w.routed.as_secs_f64() * 1000.0,
        api_ms: w.answered.as_secs_f64() * 1000.0,
        apply_ms: j["apply"]["duration"].as_f64().unwrap_or(f64::NAN),
        steps,
        reloads: edge.try_show_proc()?.master.reloads as i64 - reloads_before as i64,
    })
}

/// A PUT watched from the moment it was sent.
pub(crate) struct Watched {
    /// The daemon's answer: 200 or 201.
    pub answer: Answer,
    /// Send → the first 200 with the backend's body for the new Host through HAProxy.
    pub routed: Duration,
    /// Send → the daemon's answer (taken on the PUT's thread).
    pub answered: Duration,
    /// Requests made through the edge until routed.
    pub probes: u32,
}

/// Sends `PUT /v1/domains/{host}` on its own thread and, from that moment, requests the new
/// Host through the edge on a fresh connection every ~2 ms until it answers 200 with
/// `backend_body`. An answer other than 200/201, or no route 5 s after the answer, is an error.
pub(crate) fn watch_put(
    edge: &Edge,
    api: &Api,
    host: &str,
    body: &Value,
    backend_body: &str,
) -> anyhow::Result<Watched> {
    let path = format!("/v1/domains/{host}");
    watch_request(edge, api, ("PUT", &path), host, body, backend_body)
}

/// [`watch_put`] for any request that adds `host` (`request`: method and path), such as the
/// old manager's `POST /api/domain`.
pub(crate) fn watch_request(
    edge: &Edge,
    api: &Api,
    request: (&str, &str),
    host: &str,
    body: &Value,
    backend_body: &str,
) -> anyhow::Result<Watched> {
    let method = request.0;
    let t0 = Instant::now();
    let request = {
        let api = api.clone();
        let body = body.clone();
        let (method, path) = (request.0.to_string(), request.1.to_string());
        thread::spawn(move || {
            let answer = api.call(&method, &path, Some(&body));
            (answer, t0.elapsed())
        })
    };
    let mut next = t0;
    let mut probes = 0;
    let routed = loop {
        probes += 1;
        if let Ok(r) = edge.try_get(host, "/") {
            if r.status == 200 && r.body == backend_body {
                break t0.elapsed();
            }
        }
        if request.is_finished() && t0.elapsed() > Duration::from_secs(5) {
            // Answered long ago and still not routed: the answer says why.
            break Duration::MAX;
        }
        if t0.elapsed() > OP_TIMEOUT {
            bail!("{host} was not routed within {OP_TIMEOUT:?} of its {method}");
        }
        next += POLL_EVERY;
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now;
        }
    };
    let (answer, answered) = request
        .join()
        .map_err(|_| anyhow::anyhow!("the {method} thread panicked"))?;
    let answer = answer?;
    if answer.status != 201 && answer.status != 200 {
        bail!("{method} {host}: {}", answer.describe());
    }
    if routed == Duration::MAX {
        bail!(
            "{method} {host} answered {} but the host is not routed",
            answer.status
        );
    }
    Ok(Watched {
        answer,
        routed,
        answered,
        probes,
    })
}

fn concurrent_round(edge: &Edge, api: &Api, round: usize, body: &Value) -> anyhow::Result<Round> {
    let reloads_before = edge.try_show_proc()?.master.reloads;
    let checks_before = edge.check_runs();
    let barrier = Arc::new(Barrier::new(CONCURRENT + 1));
    let hosts: Vec<String> = (0..CONCURRENT)
        .map(|i| format!("burst-{round}-{i}.example.com"))
        .collect();
    let handles: Vec<_> = hosts
        .iter()
        .map(|host| {
            let api = api.clone();
            let barrier = barrier.clone();
            let body = body.clone();
            let path = format!("/v1/domains/{host}");
            thread::spawn(move || {
                // Connect before the barrier, so the requests leave together.
                let conn = api.connect();
                barrier.wait();
                let t0 = Instant::now();
                let bytes = serde_json::to_vec(&body).expect("JSON");
                let answer = conn.and_then(|mut c| c.send("PUT", &path, Some(&bytes), false));
                (answer, t0.elapsed())
            })
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    let mut ok = 0;
    let mut failed = Vec::new();
    let mut latencies = Vec::new();
    let mut applies: Vec<i64> = Vec::new();
    for (h, host) in handles.into_iter().zip(&hosts) {
        let (answer, elapsed) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a PUT thread panicked"))?;
        match answer {
            Ok(a) if a.status == 200 || a.status == 201 => {
                ok += 1;
                latencies.push(elapsed.as_secs_f64() * 1000.0);
                if let Some(t) = a.json()["apply"]["started_at_ms"].as_i64() {
                    if !applies.contains(&t) {
                        applies.push(t);
                    }
                }
            }
            Ok(a) => failed.push(format!("{host}: {}", a.describe())),
            Err(e) => failed.push(format!("{host}: {e:#}")),
        }
    }
    let wall_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let reloads = edge
        .try_show_proc()
        .context("show proc after the round")?
        .master
        .reloads as i64
        - reloads_before as i64;
    let checks = edge.check_runs() - checks_before;
    let routed = hosts
        .iter()
        .filter(|h| matches!(edge.try_get(h, "/"), Ok(r) if r.status == 200 && r.body == BODY))
        .count();
    Ok(Round {
        ok,
        failed,
        wall_ms,
        latencies,
        applies: applies.len(),
        reloads,
        checks,
        routed,
    })
}
