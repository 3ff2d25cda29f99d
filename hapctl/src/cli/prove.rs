//! `hapctl prove`: measure a cutover from outside while a command runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use hapctl::model::{AppName, Version};
use hapctl::prove;

use super::{open, output, Failure};

#[derive(Args)]
#[command(after_help = "\
Examples:
  hapctl prove --expect-version 1.5.0 -- hapctl deliver 1.5.0
  hapctl prove --cycle 1.5.0                 # deliver 1.5.0, then rollback, one report
  hapctl prove --json proof.json -- ./livrer 1.5.0

Checks: master (PID unchanged), new-worker (a reload happened), probe (failed short requests
<= --max-failures), streams (each ran to its end on the generation it started on, and outlived
the command), version (GET /version == --expect-version), command (exited 0).
COMMAND runs with HAPCTL_STATE_DIR set to the state directory measured.")]
pub struct ProveArgs {
    /// Long streams opened before the command (0: none).
    #[arg(long, default_value_t = 2)]
    streams: usize,
    /// Short requests per second, each on a new connection (`50` or `50/s`).
    #[arg(long, default_value = "50", value_parser = parse_rate)]
    rate: f64,
    /// Lines of each long stream; the streams must outlive the command.
    #[arg(long, default_value_t = 50)]
    stream_lines: u32,
    /// Pause between two lines of a stream, in ms.
    #[arg(long, default_value_t = 100)]
    stream_interval_ms: u32,
    /// Hold the streams: the client closes them this long after the command ended, so they
    /// outlast a command of any duration (--stream-lines then only bounds them and must cover
    /// --timeout, the hold and 10 s).
    #[arg(long, value_parser = humantime::parse_duration)]
    stream_hold: Option<Duration>,
    /// How long the probe goes on after the command ended.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    settle: Duration,
    /// Failed short requests tolerated.
    #[arg(long, default_value_t = 0)]
    max_failures: u64,
    /// The version `GET /version` must answer afterwards.
    #[arg(long, conflicts_with = "cycle")]
    expect_version: Option<Version>,
    /// Host header of every request (default: a domain routed to the app, else the bind's IP).
    #[arg(long)]
    host: Option<String>,
    /// Path of the short requests; the answer must be a version line (`V` or `V\n`).
    #[arg(long, default_value = "/")]
    path: String,
    /// Also write the report as JSON to FILE (`-` for stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Bound on COMMAND; it is killed (with its process group) after this.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Bound on one short request (connect, and each read).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Prove `hapctl deliver VERSION`, then `hapctl rollback`, in one report.
    #[arg(long, value_name = "VERSION", conflicts_with = "command")]
    cycle: Option<Version>,
    /// The app of `--cycle` (default: the only one), also used to choose the default Host.
    #[arg(long)]
    app: Option<AppName>,
    /// The command to prove, after `--`.
    #[arg(last = true, value_name = "COMMAND", required_unless_present = "cycle")]
    command: Vec<String>,
}

/// `50` or `50/s`.
fn parse_rate(s: &str) -> Result<f64, String> {
    let n = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    match n.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1000.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a rate: a number of requests per second above 0 and at most 1000, like 50 or 50/s"
        )),
    }
}

pub fn run(dir: &Path, args: ProveArgs) -> Result<u8, Failure> {
    // Only settings and the routed host are read; the edge (and its database) is closed
    // before the command runs.
    let (settings, host) = {
        let edge = open(dir)?;
        let host = match args.host {
            Some(h) => h,
            None => prove::default_host(
                &edge.settings,
                &edge.state().unwrap_or_default(),
                args.app.as_ref(),
            ),
        };
        (edge.settings.clone(), host)
    };
    let options = prove::Options {
        streams: args.streams,
        rate: args.rate,
        stream_lines: args.stream_lines,
        stream_interval_ms: args.stream_interval_ms,
        stream_hold: args.stream_hold,
        settle: args.settle,
        max_failures: args.max_failures,
        expect_version: args.expect_version.map(|v| v.to_string()),
        host,
        path: args.path,
        timeout: args.timeout,
        request_timeout: args.request_timeout,
    };
    let subject = match args.cycle {
        Some(version) => prove::Subject::Cycle {
            version: version.to_string(),
            app: args.app,
            hapctl: std::env::current_exe()
                .context("cannot find this hapctl binary to run the cycle's commands")?,
        },
        None => prove::Subject::Command(args.command),
    };
    let mut report = prove::run(&settings, &options, &subject, &mut |line| {
        eprintln!("{line}")
    })
    .map_err(|e| match e {
        prove::ProveError::Options(_) => Failure::input(e),
        e => e.into(),
    })?;
    match prove::journal::write(&settings.paths.journal_dir, &report) {
        Ok(path) => report.journal = Some(path),
        Err(e) => eprintln!(
            "warning: cannot write the journal in {}: {e}",
            settings.paths.journal_dir.display()
        ),
    }
    let json_to_stdout = args.json.as_deref() == Some(Path::new("-"));
    if let Some(path) = args.json.as_deref().filter(|_| !json_to_stdout) {
        let text = serde_json::to_string_pretty(&report).expect("a report always serialises");
        hapctl::fsutil::write_atomic(path, format!("{text}\n").as_bytes(), 0o644)
            .with_context(|| format!("cannot write the JSON report to {}", path.display()))?;
    }
    output::print_proof(&report, json_to_stdout);
    Ok(report.exit_code)
}
