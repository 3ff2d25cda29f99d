//! The fleet section's tables, targets and JSON.

use std::time::Duration;

use serde_json::json;

use super::join::Join;
use super::lab::Fleet;
use super::leader::LeaderKill;
use super::outage::Outage;
use super::Series;
use crate::stats::{ms, percentile};
use crate::{Report, Table, Target};

const P50_MS: f64 = 100.0;
const P99_MS: f64 = 500.0;
const JOIN_S: f64 = 30.0;
const CATCH_UP_S: f64 = 2.0;

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50 and p99 of `v` (not empty), in ms.
fn p50_p99(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (percentile(&s, 50.0), percentile(&s, 99.0))
}

pub fn report(
    fleet: &Fleet,
    series: &[Series],
    publish_ms: &[f64],
    joins: &[Join],
    killed: &LeaderKill,
    outage: &Outage,
) -> Report {
    let mut r = Report::default();
    r.notes.push(format!(
        "the fleet: {} domains and {} blocks (+ the fixture's 300) published from e0, 3 etcd members, 3 edges; filled, published and served by all 3 in {:.1} s",
        fleet.domains,
        fleet.blocks,
        fleet.ready_in.as_secs_f64()
    ));
    writes_table(&mut r, series);
    costs_table(&mut r, series, publish_ms);
    joins_table(&mut r, joins);
    leader_table(&mut r, killed);
    outage_table(&mut r, outage);
    r.json = json!({
        "domains": fleet.domains,
        "blocks": fleet.blocks,
        "ready_s": fleet.ready_in.as_secs_f64(),
        "writes": series.iter().map(|s| json!({
            "kind": s.kind.label(),
            "answer_ms": s.samples.iter().map(|x| millis(x.answer)).collect::<Vec<_>>(),
            "seen_ms": s.samples.iter().map(|x| x.seen.iter().map(|d| d.map(millis)).collect::<Vec<_>>()).collect::<Vec<_>>(),
            "checks_per_write": s.checks_per_write,
            "apply_ms": s.apply_ms,
        })).collect::<Vec<_>>(),
        "publish_ms": publish_ms,
    });
    r
}

fn writes_table(r: &mut Report, series: &[Series]) {
    let mut t = Table::new(
        "a write on one edge (e0, e1, e2 in turn) → in effect through all 3 edges' HAProxy (ms from sending it)",
        &["write", "n", "answer p50", "first edge p50", "last edge p50", "last edge p99", "last edge max", "not seen"],
    );
    for Series { kind, samples, .. } in series {
        let answer: Vec<f64> = samples.iter().map(|s| millis(s.answer)).collect();
        let first: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.seen.iter().flatten().min().copied().map(millis))
            .collect();
        let last: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.last().map(millis))
            .collect();
        let unseen = samples.len() - last.len();
        if last.is_empty() || first.is_empty() {
            continue;
        }
        let (l50, l99) = p50_p99(&last);
        let max = last.iter().copied().fold(0.0, f64::max);
        t.row(vec![
            kind.label().into(),
            samples.len().to_string(),
            ms(p50_p99(&answer).0),
            ms(p50_p99(&first).0),
            ms(l50),
            ms(l99),
            ms(max),
            unseen.to_string(),
        ]);
        r.targets.push(Target {
            goal: format!(
                "{} → in effect on all 3 edges: p50 < {P50_MS} ms, p99 < {P99_MS} ms",
                kind.label()
            ),
            met: Some(l50 < P50_MS && l99 < P99_MS && unseen == 0),
            detail: format!("p50 {} ms, p99 {} ms, {unseen} not seen", ms(l50), ms(l99)),
        });
    }
    r.tables.push(t);
}

/// Per series: each edge's `haproxy -c` runs per write and the p50 of its own applies; and
/// the etcd publication alone.
fn costs_table(r: &mut Report, series: &[Series], publish_ms: &[f64]) {
    let mut t = Table::new(
        "where a write's time goes: each edge (e0 / e1 / e2) per write",
        &[
            "write",
            "haproxy -c per write",
            "its apply, p50 ms (apply records)",
        ],
    );
    for s in series {
        let checks: Vec<String> = s
            .checks_per_write
            .iter()
            .map(|c| format!("{c:.2}"))
            .collect();
        let applies: Vec<String> = s
            .apply_ms
            .iter()
            .map(|a| {
                if a.is_empty() {
                    "—".into()
                } else {
                    ms(p50_p99(a).0)
                }
            })
            .collect();
        t.row(vec![
            s.kind.label().into(),
            checks.join(" / "),
            if applies.is_empty() {
                "(block path: no record)".into()
            } else {
                applies.join(" / ")
            },
        ]);
    }
    r.tables.push(t);
    if !publish_ms.is_empty() {
        let (p50, p99) = p50_p99(publish_ms);
        r.notes.push(format!(
            "the etcd publication of one block through hapctl's FleetLink (one transaction on the 3 members), {} times: p50 {} ms, p99 {} ms",
            publish_ms.len(),
            ms(p50),
            ms(p99)
        ));
    }
}

fn joins_table(r: &mut Report, joins: &[Join]) {
    let mut t = Table::new(
        "a new edge joins (s from `hapctl serve` started)",
        &[
            "join",
            "/health",
            "serves the sample",
            "fleet status at the fleet's revision",
            "every block in its database",
            "revision",
            "blocks (e0's)",
        ],
    );
    let secs = |d: Duration| format!("{:.2}", d.as_secs_f64());
    for (i, j) in joins.iter().enumerate() {
        t.row(vec![
            format!("joiner{i}"),
            secs(j.health),
            secs(j.serving),
            secs(j.at_revision),
            j.all_blocks.map_or("not within 300 s".into(), secs),
            j.revision.to_string(),
            format!("{} ({})", j.blocked.0, j.blocked.1),
        ]);
    }
    let whole: Option<Vec<Duration>> = joins.iter().map(Join::whole).collect();
    let worst = whole.and_then(|w| w.into_iter().max());
    r.targets.push(Target {
        goal: format!("a new edge serves the whole fleet in < {JOIN_S} s"),
        met: (!joins.is_empty()).then_some(worst.is_some_and(|w| w.as_secs_f64() < JOIN_S)),
        detail: format!(
            "slowest of {}: {} s (serving the sample, at the fleet's revision, every block)",
            joins.len(),
            worst.map_or("—".into(), secs)
        ),
    });
    r.tables.push(t);
}

fn leader_table(r: &mut Report, k: &LeaderKill) {
    let mut t = Table::new(
        "the etcd leader killed during concurrent writes (12 threads over 3 edges, 4 in 5 blocks, 1 in 5 domain puts)",
        &["measure", "value"],
    );
    let refused: Vec<String> = k
        .refused
        .iter()
        .map(|(s, n)| format!("{n} × {s}"))
        .collect();
    let rows = [
        ("writes", k.writes.to_string()),
        ("acknowledged", k.acked.to_string()),
        (
            "acknowledged when the leader was killed",
            k.acked_at_kill.to_string(),
        ),
        (
            "not acknowledged",
            if refused.is_empty() {
                "0".into()
            } else {
                refused.join(", ")
            },
        ),
        (
            "acknowledged but lost (etcd or an edge)",
            k.lost.len().to_string(),
        ),
        (
            "kill → first ack of a write sent after it",
            k.recovered
                .map_or("none".into(), |d| format!("{} ms", ms(millis(d)))),
        ),
        (
            "longest time without an ack",
            format!("{} ms", ms(millis(k.longest_gap))),
        ),
        (
            "last answer → all edges at the fleet's revision",
            format!("{:.2} s", k.converged.as_secs_f64()),
        ),
        ("the fleet's revision then", k.revision.to_string()),
    ];
    for (m, v) in rows {
        t.row(vec![m.into(), v]);
    }
    r.tables.push(t);
    for lost in k.lost.iter().take(5) {
        r.notes.push(format!("lost: {lost}"));
    }
    r.targets.push(Target {
        goal: "the etcd leader killed during writes: 0 acknowledged writes lost, all edges at the same revision".into(),
        met: Some(k.lost.is_empty()),
        detail: format!("{} of {} acknowledged, {} lost; all 3 edges at revision {}", k.acked, k.writes, k.lost.len(), k.revision),
    });
}

fn outage_table(r: &mut Report, o: &Outage) {
    let mut t = Table::new("etcd entirely down under traffic", &["measure", "value"]);
    let rows = [
        ("requests through the 3 edges", o.requests.to_string()),
        ("failed requests", o.failed.to_string()),
        ("writes while etcd was down", o.writes.to_string()),
        (
            "of them refused with 503 and the etcd message",
            o.refused_as_expected.to_string(),
        ),
        (
            "slowest refusal",
            format!("{} ms", ms(millis(o.slowest_refusal))),
        ),
        (
            "etcd healthy → the write accepted",
            format!(
                "{} ms ({} refused tries)",
                ms(millis(o.accepted)),
                o.retries
            ),
        ),
        (
            "etcd healthy → in effect on all 3",
            o.caught_up.map_or("not within 30 s".into(), |d| {
                format!("{} ms", ms(millis(d)))
            }),
        ),
    ];
    for (m, v) in rows {
        t.row(vec![m.into(), v]);
    }
    r.tables.push(t);
    r.notes.extend(
        o.first_failure
            .iter()
            .map(|f| format!("first failed request: {f}")),
    );
    r.notes.extend(
        o.unexpected
            .iter()
            .take(5)
            .map(|u| format!("a write during the outage: {u}")),
    );
    let caught = o.caught_up.is_some_and(|d| d.as_secs_f64() < CATCH_UP_S);
    r.targets.push(Target {
        goal: format!("etcd down: 0 failed requests, every write refused with 503 and its message, caught up within {CATCH_UP_S} s"),
        met: Some(o.failed == 0 && o.unexpected.is_empty() && o.writes > 0 && caught),
        detail: format!(
            "{} of {} requests failed; {} of {} writes refused as expected; caught up in {}",
            o.failed, o.requests, o.refused_as_expected, o.writes,
            o.caught_up.map_or("—".into(), |d| format!("{} ms", ms(millis(d))))
        ),
    });
}
