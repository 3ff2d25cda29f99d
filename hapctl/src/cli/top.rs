//! `hapctl top`: traffic per domain, live, from the running `hapctl serve` (its counts live in
//! the daemon's memory: `GET /v1/traffic` over the daemon's unix socket).

use std::path::Path;
use std::time::Duration;

use clap::Args;

use hapctl::contract::TRAFFIC_MAX_LIMIT;
use hapctl::traffic::{SortKey, TrafficReport, Window, WindowReport};

use super::{forward, output, Failure};

#[derive(Args)]
pub struct TopArgs {
    /// Order: requests, errors (5xx), turned_away, bytes, p95 or domain.
    #[arg(long, short, default_value = "requests")]
    sort: SortKey,
    /// The window shown and sorted by: 1m, 15m or 1h.
    #[arg(long, short, default_value = "1m")]
    window: Window,
    /// Domains shown.
    #[arg(long, short = 'n', default_value_t = 20)]
    limit: usize,
    /// Seconds between two screens.
    #[arg(long, short = 'd', default_value_t = 2)]
    delay: u64,
    /// Screens to show before exiting (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    iterations: u64,
    /// Print the report once as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(dir: &Path, args: TopArgs) -> Result<u8, Failure> {
    if !(1..=TRAFFIC_MAX_LIMIT).contains(&args.limit) {
        return Err(Failure::input(anyhow::anyhow!(
            "--limit must be 1 to {TRAFFIC_MAX_LIMIT}"
        )));
    }
    let path = format!(
        "/v1/traffic?limit={}&sort={}&window={}",
        args.limit,
        args.sort.as_str(),
        args.window.as_str()
    );
    let mut shown = 0;
    loop {
        let report = fetch(dir, &path)?;
        if args.json {
            output::print_json(&report);
            return Ok(0);
        }
        // Clear the screen and go home, as top does.
        print!("\x1b[H\x1b[2J");
        print_screen(&report, args.window);
        shown += 1;
        if args.iterations != 0 && shown >= args.iterations {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_secs(args.delay.max(1)));
    }
}

fn fetch(dir: &Path, path: &str) -> Result<TrafficReport, Failure> {
    let answer = forward::send(dir, "GET", path, &())?.ok_or_else(|| {
        anyhow::anyhow!("hapctl top reads the traffic `hapctl serve` counts, and none runs for this state directory: start it (hapctl serve)")
    })?;
    if answer.status != 200 {
        return Err(answer.failure());
    }
    serde_json::from_value(answer.body).map_err(|e| {
        anyhow::anyhow!("`hapctl serve` answered /v1/traffic with an unknown shape ({e})").into()
    })
}

fn print_screen(r: &TrafficReport, window: Window) {
    let w = window.as_str();
    println!(
        "hapctl top: {} domains counted since {} (a restart of hapctl serve empties the counts); window {w}",
        r.tracked_domains,
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(r.since))
    );
    println!(
        "{:<32} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9}",
        "domain",
        "req/s",
        "2xx",
        "3xx",
        "4xx",
        "5xx",
        "away",
        "p50ms",
        "p95ms",
        "p99ms",
        "in",
        "out"
    );
    if let Some(edge) = r.edge.window(w) {
        print_row("(all)", edge);
    }
    for d in &r.domains {
        if let Some(win) = d.window(w) {
            print_row(&d.domain, win);
        }
    }
}

fn print_row(name: &str, w: &WindowReport) {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    println!(
        "{:<32} {:>8.2} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9}",
        name.chars().take(32).collect::<String>(),
        w.requests_per_second,
        w.status.s2xx,
        w.status.s3xx,
        w.status.s4xx,
        w.status.s5xx,
        w.turned_away,
        ms(w.time_ms.p50),
        ms(w.time_ms.p95),
        ms(w.time_ms.p99),
        bytes(w.bytes_in),
        bytes(w.bytes_out),
    );
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1}G", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1}M", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.1}K", n as f64 / 1024.0),
        n => n.to_string(),
    }
}
