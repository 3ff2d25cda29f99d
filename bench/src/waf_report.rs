//! The waf section's tables and issue 38's targets: the floor, the rounds through the edge
//! beside it (medians of the alternating rounds; the long, single-client and glue rounds one
//! row each).

use crate::stats::{ms, Summary};
use crate::waf::{CLIENTS, MEASURE};
use crate::waf_floor::Floor;
use crate::waf_round::Round;
use crate::{Report, Table, Target};

const COLUMNS: [&str; 18] = [
    "agent",
    "rules",
    "WAF",
    "requests",
    "clients",
    "req/s",
    "vs off",
    "p50",
    "p99",
    "added p50",
    "added p99",
    "HAProxy cores",
    "agent cores",
    "machine cores",
    "agent CPU µs/req",
    "vs floor 1 thread",
    "vs floor 2 threads",
    "failed",
];

/// What a row's "vs off" and "added" are read against: its WAF-off rounds.
#[derive(Clone, Copy)]
struct Base {
    rate: f64,
    p50: f64,
    p99: f64,
}

impl Base {
    fn of(off: &[&Round]) -> Base {
        Base {
            rate: median(off, Round::per_s),
            p50: median(off, |r| r.p(50.0)),
            p99: median(off, |r| r.p(99.0)),
        }
    }
}

/// The alternating rounds' groups of one agent: off, detect, block (clean), block (attacks).
fn groups<'a>(rounds: &'a [Round], agent: &str) -> Vec<Vec<&'a Round>> {
    [
        ("off", "clean"),
        ("detect", "clean"),
        ("block", "clean"),
        ("block", "attack"),
    ]
    .iter()
    .map(|(mode, traffic)| {
        rounds
            .iter()
            .filter(|r| alternating(r) && r.plan.agent == agent)
            .filter(|r| r.plan.mode == *mode && r.plan.traffic == *traffic)
            .collect()
    })
    .collect()
}

fn alternating(r: &Round) -> bool {
    r.plan.rules == "crs" && r.plan.clients == CLIENTS && r.plan.measure == MEASURE
}

pub fn report(report: &mut Report, floors: &[(&'static str, Floor)], rounds: &[Round]) {
    report.tables.push(floor_table(floors));
    // The floor's CPU per transaction on 1 and 2 threads (the agent's default workers).
    let floor_of = |rules: &str| {
        let cpu = |threads| floor_median(floors, rules, threads, Floor::cpu_us);
        (cpu(1), cpu(2))
    };
    let mut t = Table::new(
        format!(
            "Through the edge, {CLIENTS} kept-alive clients, rounds of {} s alternating (medians; a baseline agent's turns between this one's); \"added\": over WAF off; \"vs floor\": agent CPU ÷ the floor's CPU per transaction on 1 or 2 threads",
            MEASURE.as_secs()
        ),
        &COLUMNS,
    );
    for agent in ["this", "baseline"] {
        let groups = groups(rounds, agent);
        let base = Base::of(&groups[0]);
        for g in groups.iter().filter(|g| !g.is_empty()) {
            t.row(row(g, &base, floor_of("crs")));
        }
    }
    report.tables.push(t);
    let mut other = Table::new(
        "Single rounds: the long one (failed answers counted, the agent's errors and timeouts included), one client alone, and the glue (hapctl's base alone, no CRS; added over its own WAF-off round)",
        &COLUMNS,
    );
    for r in rounds.iter().filter(|r| !alternating(r)) {
        let off: Vec<&Round> = rounds
            .iter()
            .filter(|o| o.plan.mode == "off" && o.plan.agent == r.plan.agent)
            .filter(|o| o.plan.rules == r.plan.rules && o.plan.clients == r.plan.clients)
            .collect();
        other.row(row(&[r], &Base::of(&off), floor_of(r.plan.rules)));
    }
    report.tables.push(other);
    let groups = groups(rounds, "this");
    let engine_rate = floor_median(floors, "crs", 2, Floor::per_s);
    report.targets = targets(
        &groups,
        rounds,
        &Base::of(&groups[0]),
        floor_of("crs"),
        engine_rate,
    );
}

fn floor_table(floors: &[(&'static str, Floor)]) -> Table {
    let mut t = Table::new(
        "The floor: hapctl's evaluation (engine wrapper and scoring) of the edge's clean request, in process, no socket; measured before each turn of rounds (medians, CPU range)",
        &["rules", "threads", "samples", "transactions/s", "µs per transaction", "CPU µs per transaction", "CPU range"],
    );
    for (rules, threads) in [("crs", 1), ("crs", 2), ("empty", 1), ("empty", 2)] {
        let of = |f: &dyn Fn(&Floor) -> f64| floor_median(floors, rules, threads, f);
        let cpu: Vec<f64> = samples(floors, rules, threads)
            .map(|f| f.cpu_us())
            .collect();
        let range = Summary::of(&cpu).map_or("-".into(), |s| format!("{:.0}–{:.0}", s.min, s.max));
        t.row(vec![
            rules.to_string(),
            threads.to_string(),
            cpu.len().to_string(),
            format!("{:.0}", of(&Floor::per_s)),
            format!("{:.0}", of(&Floor::wall_us)),
            format!("{:.0}", of(&Floor::cpu_us)),
            range,
        ]);
    }
    t
}

fn samples<'a>(
    floors: &'a [(&'static str, Floor)],
    rules: &'a str,
    threads: usize,
) -> impl Iterator<Item = &'a Floor> {
    floors
        .iter()
        .filter(move |(r, f)| *r == rules && f.threads == threads)
        .map(|(_, f)| f)
}

fn floor_median(
    floors: &[(&'static str, Floor)],
    rules: &str,
    threads: usize,
    f: impl Fn(&Floor) -> f64,
) -> f64 {
    let v: Vec<f64> = samples(floors, rules, threads).map(f).collect();
    Summary::of(&v).map_or(f64::NAN, |s| s.median)
}

fn row(rounds: &[&Round], base: &Base, floor_us: (f64, f64)) -> Vec<String> {
    let first = &rounds[0].plan;
    let rate = median(rounds, Round::per_s);
    let (p50, p99) = (median(rounds, |r| r.p(50.0)), median(rounds, |r| r.p(99.0)));
    let agent_us = median(rounds, Round::agent_cpu_us);
    let inspected = first.mode != "off";
    let vs = |floor: f64| {
        if inspected {
            format!("{:.2}", agent_us / floor)
        } else {
            "-".into()
        }
    };
    let cores =
        |cpu_secs: fn(&Round) -> f64| format!("{:.2}", median(rounds, |r| cpu_secs(r) / r.secs()));
    vec![
        first.agent.to_string(),
        first.rules.to_string(),
        first.mode.to_string(),
        if first.traffic == "attack" {
            "SQL injection (403)".into()
        } else {
            "clean (200)".into()
        },
        first.clients.to_string(),
        format!("{rate:.0}"),
        format!("{:.3}", rate / base.rate),
        ms(p50),
        ms(p99),
        ms(p50 - base.p50),
        ms(p99 - base.p99),
        cores(|r| r.haproxy_cpu),
        cores(|r| r.agent_cpu),
        cores(|r| r.machine_cores * r.secs()),
        if inspected {
            format!("{agent_us:.0}")
        } else {
            "-".into()
        },
        vs(floor_us.0),
        vs(floor_us.1),
        rounds
            .iter()
            .map(|r| r.not_ok + r.agent_failed)
            .sum::<u64>()
            .to_string(),
    ]
}

fn median(rounds: &[&Round], f: impl Fn(&Round) -> f64) -> f64 {
    let v: Vec<f64> = rounds.iter().map(|r| f(r)).collect();
    Summary::of(&v).map_or(f64::NAN, |s| s.median)
}

fn targets(
    groups: &[Vec<&Round>],
    rounds: &[Round],
    base: &Base,
    (floor_1, floor_2): (f64, f64),
    engine_rate: f64,
) -> Vec<Target> {
    let ratio = |g: &[&Round]| median(g, Round::per_s) / base.rate;
    // Beside it, what the engine alone evaluates on 2 threads on the same machine meanwhile.
    let rate = |g: &[&Round]| {
        let r = median(g, Round::per_s);
        format!(
            "{:.3} ({r:.0} req/s; the floor on 2 threads {engine_rate:.0}/s: {:.2} of it)",
            r / base.rate,
            r / engine_rate
        )
    };
    let (detect, block) = (&groups[1], &groups[2]);
    let agent_us = median(detect, Round::agent_cpu_us);
    let (p50, p99) = (
        median(detect, |r| r.p(50.0)) - base.p50,
        median(detect, |r| r.p(99.0)) - base.p99,
    );
    let long: Vec<&Round> = rounds
        .iter()
        .filter(|r| r.plan.measure > MEASURE && r.plan.agent == "this")
        .collect();
    let failed: u64 = long.iter().map(|r| r.not_ok + r.agent_failed).sum();
    let answered: u64 = long.iter().map(|r| r.ok + r.not_ok).sum();
    let attacks_passed: u64 = groups[3].iter().map(|r| r.not_ok).sum();
    vec![
        Target {
            goal: "WAF detect ≥ 0.15 × WAF-off req/s (clean)".into(),
            met: Some(ratio(detect) >= 0.15),
            detail: rate(detect),
        },
        Target {
            goal: "WAF block ≥ 0.15 × WAF-off req/s (clean)".into(),
            met: Some(ratio(block) >= 0.15),
            detail: rate(block),
        },
        Target {
            goal: "agent CPU per request ≤ 1.3 × the floor's, on as many threads as workers (2)"
                .into(),
            met: Some(agent_us / floor_2 <= 1.3),
            detail: format!(
                "{agent_us:.0} µs vs {floor_2:.0} µs: {:.2}× ({:.2}× the 1-thread floor, {floor_1:.0} µs)",
                agent_us / floor_2,
                agent_us / floor_1
            ),
        },
        Target {
            goal: format!("added latency at {CLIENTS} clients: p50 ≤ 2 ms, p99 ≤ 10 ms"),
            met: Some(p50 <= 2.0 && p99 <= 10.0),
            detail: format!("p50 +{} ms, p99 +{} ms", ms(p50), ms(p99)),
        },
        Target {
            goal: "0 failed answers in the long round (statuses, agent errors and timeouts)".into(),
            met: (!long.is_empty()).then_some(failed == 0),
            detail: format!("{failed} of {answered}"),
        },
        Target {
            goal: "every SQL injection answered 403".into(),
            met: (!groups[3].is_empty()).then_some(attacks_passed == 0),
            detail: format!("{attacks_passed} not 403"),
        },
    ]
}
