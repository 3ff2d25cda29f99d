//! The tables, targets, notes and JSON of the domain-add section: the CLI series and the API
//! series summed up by the same code, one row each per size.

use serde_json::{json, Map, Value};

use crate::fixture;
use crate::stats::{bytes, ms, Summary};
use crate::{Table, Target};

use super::{Measured, Op, SizeStats, RAW_RUNS, STEPS, TARGET_DOMAINS, TARGET_MS};

/// The series of a size, in the order of the tables and of `count_target`'s lists.
const VIA: [&str; 4] = [
    "CLI",
    "API",
    "API, old route (POST /api/domain)",
    "CLI, daemon running",
];
/// The old route's add → routed may take at most this many times `PUT /v1`'s (issue 31).
const OLD_ROUTE_RATIO: f64 = 2.0;

/// One series (CLI or API) at one size.
#[derive(Clone)]
pub(super) struct Stats {
    ops: usize,
    first: Summary,
    ended: Summary,
    apply: Summary,
    before: Summary,
    after: Summary,
    /// Aligned with `STEPS`; `None` where no op had the step.
    steps: Vec<Option<Summary>>,
    /// Per op: the counting wrapper's, the reports', the master's.
    checks_all: f64,
    checks_apply: f64,
    reloads: f64,
    /// The reload reasons' kinds and how many ops' applies gave each.
    reason_kinds: Vec<(String, usize)>,
}

impl Stats {
    pub(super) fn of(ops: &[Op]) -> Stats {
        let sum = |f: &dyn Fn(&Op) -> f64| {
            Summary::of(&ops.iter().map(f).collect::<Vec<_>>()).expect("a series has ops")
        };
        let per_op = |f: &dyn Fn(&Op) -> f64| ops.iter().map(f).sum::<f64>() / ops.len() as f64;
        let mut reason_kinds: Vec<(String, usize)> = Vec::new();
        for r in ops.iter().flat_map(|o| &o.applied.reload_reasons) {
            let kind = r.split(':').next().unwrap_or(r).to_string();
            match reason_kinds.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => reason_kinds.push((kind, 1)),
            }
        }
        Stats {
            ops: ops.len(),
            first: sum(&|o| o.first_ok_ms),
            ended: sum(&|o| o.ended_ms),
            apply: sum(&|o| o.applied.apply_ms),
            before: sum(&|o| o.applied.before_apply_ms),
            after: sum(&|o| o.after_apply_ms()),
            steps: STEPS
                .iter()
                .map(|s| Summary::of(&ops.iter().filter_map(|o| o.step(s)).collect::<Vec<_>>()))
                .collect(),
            checks_all: per_op(&|o| o.checks as f64),
            checks_apply: per_op(&|o| o.applied.checks as f64),
            reloads: per_op(&|o| o.reloads as f64),
            reason_kinds,
        }
    }

    fn reasons(&self) -> String {
        if self.reason_kinds.is_empty() {
            return "none".into();
        }
        let kinds: Vec<String> = self
            .reason_kinds
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect();
        kinds.join(", ")
    }

    /// A step's median over the ops that had it, with how many did when not all of them (a
    /// check and a reload are in the few adds that reloaded only).
    fn step_cell(&self, s: &Option<Summary>) -> Option<String> {
        let s = (*s)?;
        Some(if s.n < self.ops {
            format!("{} ({}/{})", ms(s.median), s.n, self.ops)
        } else {
            ms(s.median)
        })
    }

    /// The medians of the steps the ops had, as `name ms`.
    fn steps_text(&self) -> String {
        let steps: Vec<String> = STEPS
            .iter()
            .zip(&self.steps)
            .filter_map(|(name, s)| Some(format!("{name} {}", self.step_cell(s)?)))
            .collect();
        steps.join(", ")
    }

    /// The series as JSON; `ended_key` names request → exit/answer.
    fn json(&self, ops: &[Op], ended_key: &str) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("first_ok_ms".into(), self.first.to_json());
        m.insert(ended_key.into(), self.ended.to_json());
        m.insert("apply_ms".into(), self.apply.to_json());
        m.insert("before_apply_ms".into(), self.before.to_json());
        m.insert("after_apply_ms".into(), self.after.to_json());
        m.insert("steps_ms".into(), steps_json(&self.steps));
        m.insert("haproxy_c_per_op".into(), json!(self.checks_all));
        m.insert("report_haproxy_c_per_op".into(), json!(self.checks_apply));
        m.insert("reloads_per_op".into(), json!(self.reloads));
        m.insert(
            "ops".into(),
            ops.iter().map(|o| op_json(o, ended_key)).collect(),
        );
        m
    }
}

fn steps_json(steps: &[Option<Summary>]) -> Value {
    STEPS
        .iter()
        .zip(steps)
        .map(|(name, s)| {
            let v = s.map_or(Value::Null, Summary::to_json);
            (name.to_string(), v)
        })
        .collect::<Map<_, _>>()
        .into()
}

fn op_json(o: &Op, ended_key: &str) -> Value {
    let a = &o.applied;
    json!({
        "host": o.host,
        "first_ok_ms": o.first_ok_ms,
        ended_key: o.ended_ms,
        "apply_ms": a.apply_ms,
        "before_apply_ms": a.before_apply_ms,
        "steps_ms": a.steps.iter().map(|(n, d)| (n.clone(), json!(d))).collect::<Map<_, _>>(),
        "haproxy_c": o.checks,
        "reloads": o.reloads,
        "report_checks": a.checks,
        "report_reloads": a.reloads,
        "reload_reasons": a.reload_reasons,
        "probes": o.probes,
    })
}

/// The CLI's fields stay at the top level of a size (as before the API series); the API's
/// are under `api`.
pub(super) fn size_json(n: usize, m: &Measured, stats: &SizeStats) -> Value {
    let [cli, api, compat, forwarded] = stats.with_ops(m).map(|(s, _)| s);
    let mut size = Map::new();
    size.insert("domains".into(), json!(n));
    size.insert("servers".into(), json!(m.servers));
    size.insert("haproxy_cfg_bytes".into(), json!(m.config_bytes));
    size.insert("bulk_insert_ms".into(), json!(m.insert_ms));
    size.insert("haproxy_start_ms".into(), json!(m.start_ms));
    size.insert("load_state_ms".into(), m.load_state.to_json());
    size.insert(
        "haproxy_alone".into(),
        json!({ "check_ms": m.raw_check.to_json(), "reload_ms": m.raw_reload.to_json() }),
    );
    size.extend(cli.json(&m.cli, "exit_ms"));
    let mut api_json = api.json(&m.api, "answer_ms");
    api_json.insert("daemon_start_ms".into(), json!(m.daemon_start_ms));
    size.insert("api".into(), api_json.into());
    size.insert(
        "api_old_route".into(),
        compat.json(&m.compat, "answer_ms").into(),
    );
    size.insert(
        "cli_daemon_running".into(),
        forwarded.json(&m.forwarded, "exit_ms").into(),
    );
    size.into()
}

/// The section's tables, filled a size at a time.
pub(super) struct Tables {
    setup: Table,
    latency: Table,
    split: Table,
    raw: Table,
    reloads: Table,
}

impl Tables {
    pub(super) fn new() -> Tables {
        let mut split_header = vec!["domains", "via", "before apply"];
        split_header.extend(STEPS);
        split_header.extend(["apply total", "after apply", "exit/answer", "first 200"]);
        Tables {
            setup: Table::new(
                "domain-add: the edge under test",
                &[
                    "domains",
                    "servers",
                    "haproxy.cfg",
                    "bulk insert ms",
                    "haproxy start ms",
                    "load_state ms (median of 5)",
                    "daemon start ms",
                ],
            ),
            latency: Table::new(
                "domain-add: request → first 200 through HAProxy, ms (CLI: from spawning `hapctl domain add`; API: from sending `PUT /v1/domains/{name}`)",
                &[
                    "domains",
                    "via",
                    "ops",
                    "median",
                    "p95",
                    "min",
                    "max",
                    "exit/answer (median)",
                    "haproxy -c/op (apply)",
                    "haproxy -c/op (all)",
                    "reloads/op",
                    "reload reasons (kind × ops)",
                ],
            ),
            split: Table::new(
                "domain-add: where the time goes (medians, ms; steps from the apply report, (k/ops) where only k ops had the step)",
                &split_header,
            ),
            raw: Table::new(
                format!("domain-add: HAProxy alone on the same live set, no hapctl command around it (median of {RAW_RUNS}, ms)"),
                &[
                    "domains",
                    "haproxy -c",
                    "reload (master socket, confirmed)",
                    "sum",
                    "CLI add, first 200",
                    "API add, first 200",
                ],
            ),
            reloads: Table::new(
                "domain-add: the adds that reloaded, and the reasons their applies recorded",
                &["domains", "via", "add", "reloads (master)", "reasons (apply report)"],
            ),
        }
    }

    pub(super) fn add(&mut self, n: usize, m: &Measured, stats: &SizeStats) {
        let series = stats.with_ops(m);
        let [cli, api, ..] = series.map(|(s, _)| s);
        self.setup.row(vec![
            n.to_string(),
            m.servers.to_string(),
            bytes(m.config_bytes),
            format!("{:.0}", m.insert_ms),
            format!("{:.0}", m.start_ms),
            ms(m.load_state.median),
            format!("{:.0}", m.daemon_start_ms),
        ]);
        for (via, (s, ops)) in VIA.into_iter().zip(series) {
            self.latency.row(vec![
                n.to_string(),
                via.into(),
                s.ops.to_string(),
                ms(s.first.median),
                ms(s.first.p95),
                ms(s.first.min),
                ms(s.first.max),
                ms(s.ended.median),
                format!("{:.2}", s.checks_apply),
                format!("{:.2}", s.checks_all),
                format!("{:.2}", s.reloads),
                s.reasons(),
            ]);
            let mut row = vec![n.to_string(), via.into(), ms(s.before.median)];
            row.extend(
                s.steps
                    .iter()
                    .map(|st| s.step_cell(st).unwrap_or("-".into())),
            );
            row.extend([
                ms(s.apply.median),
                ms(s.after.median),
                ms(s.ended.median),
                ms(s.first.median),
            ]);
            self.split.row(row);
            for o in ops
                .iter()
                .filter(|o| o.reloads != 0 || !o.applied.reload_reasons.is_empty())
            {
                self.reloads.row(vec![
                    n.to_string(),
                    via.into(),
                    o.host.clone(),
                    o.reloads.to_string(),
                    o.applied.reload_reasons.join("; "),
                ]);
            }
        }
        self.raw.row(vec![
            n.to_string(),
            ms(m.raw_check.median),
            ms(m.raw_reload.median),
            ms(m.raw_check.median + m.raw_reload.median),
            ms(cli.first.median),
            ms(api.first.median),
        ]);
    }

    pub(super) fn into_vec(self) -> Vec<Table> {
        vec![self.setup, self.latency, self.split, self.reloads, self.raw]
    }
}

/// Medians of one series for a target's detail; `ended` names request → exit/answer.
fn detail(s: &Stats, ended: &str) -> String {
    format!(
        "median {} ms (min {}, max {}); medians: before the apply {} ms, apply steps {}, after the apply {} ms; {ended} {} ms",
        ms(s.first.median),
        ms(s.first.min),
        ms(s.first.max),
        ms(s.before.median),
        s.steps_text(),
        ms(s.after.median),
        ms(s.ended.median)
    )
}

/// The CLI at 10,000 domains (not measured without that size), alone or beside the daemon.
pub(super) fn cli_target(at_target: Option<&Stats>, daemon_running: bool) -> Target {
    let how = if daemon_running {
        "with `hapctl serve` running (the CLI hands the change to it)"
    } else {
        "with no daemon"
    };
    Target {
        goal: format!("domain add at {TARGET_DOMAINS} domains under {TARGET_MS} ms (median, spawn → first 200), {how}"),
        met: at_target.map(|s| s.first.median < TARGET_MS),
        detail: at_target.map_or(format!("{TARGET_DOMAINS} not among --sizes"), |s| {
            detail(s, "command exit")
        }),
    }
}

/// The API at the largest size of the run.
pub(super) fn api_target(largest: Option<&(usize, Stats)>) -> Target {
    let n = largest.map_or(TARGET_DOMAINS, |(n, _)| *n);
    let mut text = largest.map_or("no size measured".into(), |(_, s)| detail(s, "API answer"));
    if n < TARGET_DOMAINS {
        text += &format!(" (issue 13's target is at {TARGET_DOMAINS} domains)");
    }
    Target {
        goal: format!("domain add via the API → routed at {n} domains under {TARGET_MS} ms (p50)"),
        met: largest.map(|(_, s)| s.first.median < TARGET_MS),
        detail: text,
    }
}

/// The old manager's route against `PUT /v1` at every size: add → routed (medians, same run).
pub(super) fn old_route_target(sizes: &[(usize, Stats, Stats)]) -> Target {
    let ratios: Vec<(usize, f64, f64, f64)> = sizes
        .iter()
        .map(|(n, v1, old)| {
            let (a, b) = (v1.first.median, old.first.median);
            (*n, a, b, b / a)
        })
        .collect();
    let cells: Vec<String> = ratios
        .iter()
        .map(|(n, a, b, r)| format!("{n} domains: {} ms vs {} ms (×{r:.2})", ms(*b), ms(*a)))
        .collect();
    Target {
        goal: format!(
            "`POST /api/domain` add → routed within {OLD_ROUTE_RATIO}× of `PUT /v1/domains`'s (median, same run), every size"
        ),
        met: (!ratios.is_empty()).then(|| ratios.iter().all(|r| r.3 <= OLD_ROUTE_RATIO)),
        detail: cells.join("; "),
    }
}

/// Every add of every series, every size: reloads only with a recorded reason.
pub(super) fn count_target(sizes: &[(usize, Vec<Vec<Op>>)]) -> Target {
    let mut faults = Vec::new();
    let mut reloads = 0;
    for (n, series) in sizes {
        for (via, ops) in VIA.iter().zip(series) {
            for o in ops {
                reloads += o.reloads;
                if o.count_fault() {
                    faults.push(format!(
                        "{n} domains, {via} {}: {} haproxy -c in the apply, {} reload(s), reasons {:?}",
                        o.host, o.applied.checks, o.reloads, o.applied.reload_reasons
                    ));
                }
            }
        }
    }
    Target {
        goal: "0 `haproxy -c` and 0 reloads in the apply of an add, unless the apply records why it reloaded (the first domain of a kind, a full kind); CLI and API".into(),
        met: Some(faults.is_empty()),
        detail: if faults.is_empty() {
            format!("every add, CLI and API: 0 haproxy -c in its apply and 0 reloads (master `show proc`), or as many reloads as recorded reasons ({reloads} reload(s) in all)")
        } else {
            faults.join("; ")
        },
    }
}

pub(super) fn notes(backend: &str) -> Vec<String> {
    vec![
        format!(
            "each size runs on a fresh state dir: `hapctl init`, N fixture domains (and {} blocks) written to the \
             database in one transaction, `hapctl haproxy start`; every fixture server points at one in-process \
             backend on {backend} with health checks off (20,000 checked servers would flood that one backend). \
             CLI series: `hapctl domain add new-I.example.com --server {backend} --json` (checks on, the CLI \
             default), no daemon running. Then the HAProxy-alone runs, then the API series on the same edge: \
             `hapctl serve --listen 127.0.0.1:<free>` started (daemon start ms), and as many \
             `PUT /v1/domains/new-api-I.example.com` with {{\"servers\": [{{\"address\": \"{backend}\"}}]}} \
             (checks on, the API default), each on its own thread and connection; then one \
             `POST /api/domain` (the old manager's route: `{{\"domain\", \"backend_name\", \"servers\": [{{\"name\": \"web1\", \
             \"address\", \"port\", \"options\": \"check\"}}]}}`, SSE routing on as the old template had it) not \
             counted -- the first domain of that shape loads its spare slots, one reload, as the fixture's first \
             default domain did -- and as many more `POST /api/domain` of new-compat-I.example.com, whose apply \
             counts come from the history (`GET /v1/applies`: the old answer has no report, so no steps); then, \
             the daemon still running, as many `hapctl domain add new-fwd-I.example.com` (CLI, daemon running: the CLI sends \
             the change to the daemon over its unix socket); the daemon is stopped after them.",
            fixture::BLOCKS
        ),
        "probe: a fresh connection with the new Host every ~2 ms from the request (spawn / send) until a 200 with \
         the backend's body. Before each CLI add the harness waits until the master has no old worker left; before \
         each PUT, and again before its counts are read, also until `run/unchecked` is gone (the daemon checks a \
         runtime-changed set when idle)."
            .into(),
        "haproxy -c (apply) = the report's `checks`; (all) = counting-wrapper runs, CLI: spawn → exit (with the \
         command's own check of the new set at its end), API: send → settled (with the daemon's coalesced check). \
         reloads = master `show proc` reload count after − before; their reasons are the apply report's \
         `reload_reasons` (`kind: detail`)."
            .into(),
        "HAProxy alone: after the CLI adds, `haproxy -c` (the real binary) on the live files, and a reload \
         through the master socket with hapctl's library (`Master::reload`: `reload`, then `show proc` every 10 ms \
         until the new worker shows) -- the floor any apply with one check and one reload pays."
            .into(),
        "before apply = request → the apply's start (the report's started_at_ms, 1 ms resolution): for the CLI, \
         process start, settings, templates, database open, lock, recovery sweep, the change; for the API, the \
         request, the daemon's domain job and the change. render = load the state from SQLite + render (load_state \
         alone, in-process on the same database: see the first table); diff = the live files against the new ones; prepare (runtime path) = the master asked, the state before the change rendered (kept by the daemon) and compared with the live files; \
         write = the changed files and their fsyncs; runtime = the change through the runtime API, read back; \
         reload = `reload` on the master socket until `show proc` shows the new worker (polled every 10 ms). \
         after apply = exit/answer − before − apply: commit, history row, known-good promotion (CLI: its check and \
         exit)."
            .into(),
    ]
}
