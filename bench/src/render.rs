//! render: `hapctl::render::render` of the full file set, in-process (it is pure).

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use hapctl::model::EdgeState;
use hapctl::render::{render, FileId, Templates};
use hapctl::settings::{Settings, DEFAULT_SETTINGS_TOML};
use serde_json::{json, Value};

use crate::fixture::{self, Servers};
use crate::stats::{bytes, ms, Summary};
use crate::sys::TempDir;
use crate::{Ctx, Report, Table, Target};

/// Target: the full set for 10,000 domains renders in under this (median).
const TARGET_DOMAINS: usize = 10_000;
const TARGET_MS: f64 = 20.0;

const WARMUP: usize = 3;
const MIN_ITERATIONS: usize = 15;
const MAX_ITERATIONS: usize = 5_000;

/// The two cut-down template sets of the split, and the directory that holds them.
type SplitTemplates = (TempDir, Templates, Templates);

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let settings = Settings::parse(
        Path::new("/var/lib/hapctl"),
        Path::new("hapctl.toml"),
        DEFAULT_SETTINGS_TOML,
    )
    .context("the default settings")?;
    let templates = Templates::embedded();
    let budget = Duration::from_millis(ctx.render_budget_ms);
    let variants = split_templates()?;
    let runs = ctx
        .sizes
        .iter()
        .map(|&n| measure_size(n, &settings, &templates, variants.as_ref(), budget))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(report(&runs, variants.is_some(), budget))
}

/// The renders of one fixture size.
struct SizeRun {
    domains: usize,
    wildcards: usize,
    servers: usize,
    timing: Summary,
    samples: Vec<f64>,
    cfg_bytes: usize,
    total_bytes: usize,
    file_bytes: serde_json::Map<String, Value>,
    /// Full, without backend sections, with an empty backend loop: when the template could be
    /// cut.
    split: Option<Vec<Summary>>,
}

fn measure_size(
    n: usize,
    settings: &Settings,
    templates: &Templates,
    variants: Option<&SplitTemplates>,
    budget: Duration,
) -> anyhow::Result<SizeRun> {
    let state = fixture::state(n, Servers::Spread);
    let set = render(&state, settings, templates).context("render failed")?;
    let (timing, samples) = time_renders(&state, settings, templates, budget)?;
    let split = match variants {
        // Interleaved, so that load from other processes hits the three variants alike.
        Some((_dir, without, empty_loop)) => Some(time_interleaved(
            &state,
            settings,
            &[templates, without, empty_loop],
            budget,
        )?),
        None => None,
    };
    Ok(SizeRun {
        domains: n,
        wildcards: state.domains.keys().filter(|d| d.is_wildcard()).count(),
        servers: state.domains.values().map(|b| b.servers().len()).sum(),
        timing,
        samples,
        cfg_bytes: set.get(FileId::Config).map(|f| f.bytes.len()).unwrap_or(0),
        total_bytes: set.files().iter().map(|f| f.bytes.len()).sum(),
        file_bytes: set
            .files()
            .iter()
            .map(|f| (f.id.name().to_string(), json!(f.bytes.len())))
            .collect(),
        split,
    })
}

fn report(runs: &[SizeRun], with_split: bool, budget: Duration) -> Report {
    let mut tables = vec![timings_table(runs)];
    let mut notes = vec![format!(
        "fixture: 4 in 5 domains exact, 1 in 5 wildcard; 1-3 servers each; profiles mixed \
         (default, websocket, sse, http-check); {} blocked keys in the state (blocked.map itself is written by \
         the block path, not by render); 2 trusted proxies. \
         Warm-up {WARMUP} renders, then at least {MIN_ITERATIONS} and up to {} ms of renders.",
        fixture::BLOCKS,
        budget.as_millis()
    )];
    if with_split {
        tables.push(split_table(runs));
        notes.push(
            "split: 'no backend sections' renders haproxy.cfg.j2 without its backend loop (what is left: building and \
             serialising the template context, the map files, the pages, the static text); 'empty backend loop' \
             iterates backends and servers but prints nothing; so loop itself = empty loop - no sections, and \
             backend text = full - empty loop."
                .into(),
        );
    } else {
        notes.push(format!(
            "split skipped: haproxy.cfg.j2 has no `{LOOP}` line to cut at"
        ));
    }
    Report {
        tables,
        targets: vec![target(runs)],
        notes,
        json: json!({ "sizes": runs.iter().map(size_json).collect::<Vec<_>>() }),
    }
}

fn timings_table(runs: &[SizeRun]) -> Table {
    let mut table = Table::new(
        "render: the full rendered file set (haproxy.cfg, generation.cfg, host maps, proxy list, pages), ms per render",
        &[
            "domains",
            "iterations",
            "median",
            "p95",
            "min",
            "max",
            "spread",
            "haproxy.cfg",
            "all files",
        ],
    );
    for r in runs {
        let s = &r.timing;
        table.row(vec![
            r.domains.to_string(),
            s.n.to_string(),
            ms(s.median),
            ms(s.p95),
            ms(s.min),
            ms(s.max),
            ms(s.spread()),
            bytes(r.cfg_bytes),
            bytes(r.total_bytes),
        ]);
    }
    table
}

fn split_table(runs: &[SizeRun]) -> Table {
    let mut split = Table::new(
        "render split (medians, ms, the three renders interleaved): haproxy.cfg.j2 cut down, to see where the time goes",
        &[
            "domains",
            "full",
            "no backend sections",
            "empty backend loop",
            "= context+maps+pages",
            "= loop itself",
            "= backend text",
        ],
    );
    for r in runs {
        if let Some(m) = &r.split {
            let (f, w, e) = (m[0].median, m[1].median, m[2].median);
            split.row(vec![
                r.domains.to_string(),
                ms(f),
                ms(w),
                ms(e),
                ms(w),
                ms(e - w),
                ms(f - e),
            ]);
        }
    }
    split
}

fn target(runs: &[SizeRun]) -> Target {
    let goal = format!("render of {TARGET_DOMAINS} domains under {TARGET_MS} ms (median)");
    let Some(r) = runs.iter().rev().find(|r| r.domains == TARGET_DOMAINS) else {
        return Target {
            goal,
            met: None,
            detail: format!("{TARGET_DOMAINS} not among --sizes"),
        };
    };
    let s = &r.timing;
    Target {
        goal,
        met: Some(s.median < TARGET_MS),
        detail: format!(
            "median {} ms (p95 {} ms, min {} ms, max {} ms) over {} renders",
            ms(s.median),
            ms(s.p95),
            ms(s.min),
            ms(s.max),
            s.n
        ),
    }
}

fn size_json(r: &SizeRun) -> Value {
    let split = r.split.as_ref().map_or(json!(null), |m| {
        json!({
            "rounds": m[0].n,
            "full_ms": m[0].median,
            "no_backend_sections_ms": m[1].median,
            "empty_backend_loop_ms": m[2].median,
        })
    });
    json!({
        "domains": r.domains,
        "wildcards": r.wildcards,
        "servers": r.servers,
        "blocks": crate::fixture::BLOCKS,
        "ms": r.timing.to_json(),
        "haproxy_cfg_bytes": r.cfg_bytes,
        "file_bytes": r.file_bytes,
        "split": split,
        "samples_ms": r.samples,
    })
}

/// Warm-up, then renders until the budget is spent (at least MIN_ITERATIONS).
fn time_renders(
    state: &EdgeState,
    settings: &Settings,
    templates: &Templates,
    budget: Duration,
) -> anyhow::Result<(Summary, Vec<f64>)> {
    let once = || render(state, settings, templates).context("render failed");
    for _ in 0..WARMUP {
        black_box(once()?);
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < MAX_ITERATIONS
        && (samples.len() < MIN_ITERATIONS || started.elapsed() < budget)
    {
        let t = Instant::now();
        black_box(once()?);
        samples.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok((Summary::of(&samples).expect("MIN_ITERATIONS > 0"), samples))
}

/// Renders with each template set in turn, round after round, until the budget is spent
/// (at least MIN_ITERATIONS rounds); one summary per set.
fn time_interleaved(
    state: &EdgeState,
    settings: &Settings,
    sets: &[&Templates],
    budget: Duration,
) -> anyhow::Result<Vec<Summary>> {
    for t in sets {
        for _ in 0..WARMUP {
            black_box(render(state, settings, t).context("render failed")?);
        }
    }
    let mut samples = vec![Vec::new(); sets.len()];
    let started = Instant::now();
    while samples[0].len() < MAX_ITERATIONS
        && (samples[0].len() < MIN_ITERATIONS || started.elapsed() < budget)
    {
        for (t, out) in sets.iter().zip(&mut samples) {
            let at = Instant::now();
            black_box(render(state, settings, t).context("render failed")?);
            out.push(at.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(samples
        .iter()
        .map(|s| Summary::of(s).expect("MIN_ITERATIONS > 0"))
        .collect())
}

/// The embedded haproxy.cfg.j2 (same source as the hapctl being measured), cut at its backend loop.
const HAPROXY_CFG_J2: &str = include_str!("../../hapctl/templates/haproxy.cfg.j2");
const LOOP: &str = "{% for b in backends %}";

/// Two template sets for the split: without the backend sections, and with a loop over
/// backends and servers that prints nothing. `None` when the template has no such loop.
fn split_templates() -> anyhow::Result<Option<SplitTemplates>> {
    let Some(at) = HAPROXY_CFG_J2.find(LOOP) else {
        return Ok(None);
    };
    let head = &HAPROXY_CFG_J2[..at];
    let dir = TempDir::new("render-split")?;
    let load = |name: &str, text: String| -> anyhow::Result<Templates> {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join("haproxy.cfg.j2"), text)?;
        Ok(Templates::load(Some(&sub))?)
    };
    let without = load("without", head.to_string())?;
    let empty_loop = load(
        "empty-loop",
        format!("{head}{LOOP}{{% for s in b.servers %}}{{% endfor %}}{{% endfor %}}\n"),
    )?;
    Ok(Some((dir, without, empty_loop)))
}
