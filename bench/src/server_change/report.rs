//! The tables, targets, notes and JSON of the server-change section.

use serde_json::{json, Value};

use crate::fixture;
use crate::stats::ms;
use crate::{Ctx, Table, Target};

use super::{Group, Op, Via, DOMAIN_INDEX, SERIES, STEPS, TARGET_DOMAINS, TARGET_MS};

pub(super) fn latency_table(groups: &[Group]) -> Table {
    let mut t = Table::new(
        "server-change: request → in effect through HAProxy, ms (CLI: from spawn; API: from sending the PUT)",
        &[
            "domains",
            "path",
            "via",
            "change",
            "ops",
            "p50",
            "p95",
            "max",
            "exit/answer p50",
            "slowest answer",
            "haproxy -c/op (apply)",
            "haproxy -c/op (after)",
            "reloads/op",
        ],
    );
    for g in groups {
        let effect = g.summary(|o| o.effect_ms);
        t.row(vec![
            g.domains.to_string(),
            g.path.into(),
            g.via.name().into(),
            g.change.into(),
            g.ops.len().to_string(),
            ms(effect.median),
            ms(effect.p95),
            ms(effect.max),
            ms(g.summary(|o| o.ended_ms).median),
            ms(g.summary(|o| o.slowest_probe_ms).max),
            format!("{:.2}", g.per_op(|o| o.report_checks as f64)),
            format!("{:.2}", g.per_op(|o| o.after_checks() as f64)),
            format!("{:.2}", g.per_op(|o| o.reloads as f64)),
        ]);
    }
    t
}

pub(super) fn split_table(groups: &[Group]) -> Table {
    let mut header = vec!["domains", "path", "via", "change", "before apply"];
    header.extend(STEPS);
    header.extend(["apply total", "after apply", "exit/answer", "in effect"]);
    header.extend(["load_state alone", "render alone"]);
    let mut t = Table::new(
        "server-change: where the time goes (medians, ms; steps from the apply report)",
        &header,
    );
    for g in groups {
        let mut row = vec![
            g.domains.to_string(),
            g.path.into(),
            g.via.name().into(),
            g.change.into(),
            ms(g.summary(|o| o.before_apply_ms).median),
        ];
        row.extend(
            STEPS
                .iter()
                .map(|s| g.step_median(s).map_or("-".into(), ms)),
        );
        row.extend([
            ms(g.summary(|o| o.apply_ms).median),
            ms(g.summary(|o| o.ended_ms - o.before_apply_ms - o.apply_ms)
                .median),
            ms(g.summary(|o| o.ended_ms).median),
            ms(g.summary(|o| o.effect_ms).median),
            ms(g.summary(|o| o.load_state_ms).median),
            ms(g.summary(|o| o.render_ms).median),
        ]);
        t.row(row);
    }
    t
}

/// Runtime vs reload for the same add and removal of B, p50 in effect.
pub(super) fn ratio_table(ctx: &Ctx, groups: &[Group]) -> Table {
    let mut t = Table::new(
        "server-change: the same change of B, runtime path vs reload path (p50 in effect, ms)",
        &[
            "domains",
            "via",
            "B",
            "runtime",
            "reload",
            "reload ÷ runtime",
        ],
    );
    let p50 = |n: usize, via: Via, change: &str| {
        groups
            .iter()
            .find(|g| g.domains == n && g.via == via && g.change == change)
            .map(|g| g.summary(|o| o.effect_ms).median)
    };
    for &n in &ctx.sizes {
        for via in [Via::Cli, Via::Api] {
            for (what, runtime, reload) in [
                ("added", SERIES[0].other.0, SERIES[2].other.0),
                ("removed", SERIES[0].start.0, SERIES[2].start.0),
            ] {
                if let (Some(r), Some(l)) = (p50(n, via, runtime), p50(n, via, reload)) {
                    t.row(vec![
                        n.to_string(),
                        via.name().into(),
                        what.into(),
                        ms(r),
                        ms(l),
                        format!("{:.1}", l / r),
                    ]);
                }
            }
        }
    }
    t
}

pub(super) fn targets(groups: &[Group]) -> Vec<Target> {
    let runtime: Vec<&Group> = groups.iter().filter(|g| g.path == "runtime").collect();
    let at_target: Vec<&&Group> = runtime
        .iter()
        .filter(|g| g.domains == TARGET_DOMAINS)
        .collect();
    let latency = Target {
        goal: format!(
            "server change → in effect at {TARGET_DOMAINS} domains under {TARGET_MS} ms (p50), runtime path, CLI and API"
        ),
        met: (!at_target.is_empty())
            .then(|| at_target.iter().all(|g| g.summary(|o| o.effect_ms).median < TARGET_MS)),
        detail: if at_target.is_empty() {
            format!("{TARGET_DOMAINS} not among --sizes")
        } else {
            at_target
                .iter()
                .map(|g| format!("{} {}: p50 {} ms", g.via.name(), g.change, ms(g.summary(|o| o.effect_ms).median)))
                .collect::<Vec<_>>()
                .join("; ")
        },
    };
    let faults: Vec<String> = runtime
        .iter()
        .flat_map(|g| g.ops.iter().map(move |o| (g, o)))
        .filter(|(_, o)| {
            o.report_checks != 0 || o.checks_total > 1 || o.reloads != 0 || o.report_reloads != 0
        })
        .map(|(g, o)| {
            format!(
                "{} domains, {} {}: haproxy -c {} in the apply (report), {} in all (wrapper), {} reload(s) (report {})",
                g.domains,
                g.via.name(),
                o.change,
                o.report_checks,
                o.checks_total,
                o.reloads,
                o.report_reloads
            )
        })
        .collect();
    let after = |via: Via| {
        let ops: Vec<&Op> = runtime
            .iter()
            .filter(|g| g.via == via)
            .flat_map(|g| &g.ops)
            .collect();
        ops.iter().map(|o| o.after_checks()).sum::<i64>() as f64 / ops.len().max(1) as f64
    };
    let counts = Target {
        goal:
            "0 `haproxy -c` and 0 reloads in the apply of every runtime server change, every size"
                .into(),
        met: Some(faults.is_empty()),
        detail: if faults.is_empty() {
            format!(
                "every op: 0 and 0 (the report; master `show proc`), at most 1 check in all (counting wrapper); checks after the apply, per op: CLI {:.2} (its own, at its end), daemon {:.2} (coalesced, when idle)",
                after(Via::Cli),
                after(Via::Api)
            )
        } else {
            faults.join("; ")
        },
    };
    let reload_faults = groups
        .iter()
        .filter(|g| g.path == "reload")
        .flat_map(|g| &g.ops)
        .filter(|o| o.report_checks != 1 || o.checks_total != 1 || o.reloads != 1)
        .count();
    let reload_path = Target {
        goal: "the reload path compared with: 1 `haproxy -c` and 1 reload per change".into(),
        met: Some(reload_faults == 0),
        detail: format!("{reload_faults} op(s) otherwise"),
    };
    vec![latency, counts, reload_path]
}

pub(super) fn notes(a: &str) -> Vec<String> {
    vec![
        format!(
            "each size: a fresh state dir (`hapctl init`), N fixture domains and {} blocks written to the database, \
             `hapctl haproxy start`, `hapctl serve` (running through every series, so the CLI is measured beside the \
             daemon as in production). Every fixture server points at backend A ({a}, `nocheck`); the measured \
             domain is {}; B is a second in-process backend with its own body.",
            fixture::BLOCKS,
            fixture::domain(DOMAIN_INDEX)
        ),
        "series, each alternating between two sets of the domain's servers, via CLI (`hapctl domain add HOST --server A \
         [--server B[,weight=W]] --json`) then via API (`PUT /v1/domains/HOST`, servers [A, B]): runtime = add/remove \
         B with A health-checked (the CLI default) and B weight=0/1; reload = the same add/remove of B with `nocheck` \
         toggled on A, which changes A's server line (check + reload)."
            .into(),
        "in effect: a fresh connection every ~2 ms from the request on (roundrobin alternates A and B); for B added \
         (or weight 1), the first answer from B; for B removed (or weight 0), the last answer from B, no request \
         reaching B after it (confirmed by 25 answers without B after the command ended or the API answered). \
         Resolution: one probe (~2-3 ms). slowest answer = the longest probe request over all ops of the row."
            .into(),
        "haproxy -c (apply) = the apply report's `checks`; (after) = counting-wrapper runs from the request until \
         settled, minus those: the CLI's own check at its end, or the daemon's coalesced check when idle (200 ms). \
         reloads = master `show proc` reload count, request → settled. Before each change the bench waits until no \
         old worker is left and `run/unchecked` is gone (the pending check ran)."
            .into(),
        "before apply = request → the report's started_at_ms (1 ms resolution): process start, settings, database \
         open, lock, recovery sweep, blocks reconcile, pending check, the first load_state (the state before the \
         change) and the change. render = the second load_state (after the change) + render + reading and comparing \
         the live files. after apply = exit/answer − before − apply: commit, history row, and for the CLI its check \
         of the new set (see haproxy -c alone). load_state alone / render alone = one `Store::load_state` and one \
         `render` of it in the bench's process right after each change settled (the same load from other \
         processes as the change)."
            .into(),
    ]
}

pub(super) fn group_json(g: &Group) -> Value {
    json!({
        "domains": g.domains,
        "path": g.path,
        "via": g.via.name(),
        "change": g.change,
        "effect_ms": g.summary(|o| o.effect_ms).to_json(),
        "ended_ms": g.summary(|o| o.ended_ms).to_json(),
        "ops": g.ops.iter().map(|o| json!({
            "effect_ms": o.effect_ms,
            "slowest_probe_ms": o.slowest_probe_ms,
            "load_state_alone_ms": o.load_state_ms,
            "render_alone_ms": o.render_ms,
            "ended_ms": o.ended_ms,
            "apply_ms": o.apply_ms,
            "before_apply_ms": o.before_apply_ms,
            "steps": o.steps,
            "haproxy_c_total": o.checks_total,
            "haproxy_c_at_effect": o.checks_at_effect,
            "reloads": o.reloads,
            "report_checks": o.report_checks,
            "report_reloads": o.report_reloads,
            "probes": o.probes,
            "failed_probes": o.failed_probes,
        })).collect::<Vec<_>>(),
    })
}
