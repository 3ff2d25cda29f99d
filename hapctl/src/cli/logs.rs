//! `hapctl logs`: the access log `hapctl serve` writes ([logs] target = "file").

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use clap::Args;

use hapctl::logs::{
    access_log_file, read_tail, AccessRecord, DomainFilter, Filter, Follower, StatusFilter,
};
use hapctl::settings::Settings;

use super::Failure;

/// How often `--follow` looks for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Args)]
pub struct LogsArgs {
    /// Keep printing new lines as they are written (across rotations).
    #[arg(long, short)]
    follow: bool,
    /// Only this host (exact), or `*.example.com` for every name below it.
    #[arg(long)]
    domain: Option<DomainFilter>,
    /// Only this status (`404`) or class (`4xx`).
    #[arg(long)]
    status: Option<StatusFilter>,
    /// Only this client (the real one: trusted proxies' forwarding headers applied).
    #[arg(long)]
    client: Option<std::net::IpAddr>,
    /// Print each record as the JSON line HAProxy wrote.
    #[arg(long)]
    json: bool,
    /// How many matching lines to print first (from the newest back).
    #[arg(long, short = 'n', default_value_t = 50)]
    lines: usize,
}

pub fn run(dir: &Path, args: LogsArgs) -> Result<u8, Failure> {
    let settings = Settings::load(dir)?;
    let logs = &settings.logs;
    let file = access_log_file(logs)?;
    let filter = Filter {
        domain: args.domain,
        status: args.status,
        client: args.client,
    };
    // Taken before the tail is read, so no line falls between the two.
    let mut follower = args.follow.then(|| Follower::at_end(file));
    let mut out = std::io::stdout().lock();
    for (raw, record) in read_tail(file, logs.keep, &filter, args.lines)? {
        if print(&mut out, &raw, &record, args.json).is_err() {
            return Ok(0);
        }
    }
    let Some(follower) = follower.as_mut() else {
        return Ok(0);
    };
    loop {
        for raw in follower.poll()? {
            let Some(record) = AccessRecord::parse(&raw) else {
                continue;
            };
            if filter.matches(&record) && print(&mut out, &raw, &record, args.json).is_err() {
                return Ok(0); // the reader went away (a closed pipe)
            }
        }
        std::thread::sleep(FOLLOW_INTERVAL);
    }
}

fn print(out: &mut impl Write, raw: &str, r: &AccessRecord, json: bool) -> std::io::Result<()> {
    if json {
        writeln!(out, "{raw}")?;
    } else {
        let time = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + Duration::from_secs_f64(r.ts.max(0.0)),
        );
        let denied = match r.denied_by.as_str() {
            "" | "-" => String::new(),
            d => format!(" denied_by={d}"),
        };
        writeln!(
            out,
            "{time} {} {} {}{} client={} {}ms {} id={}{denied}",
            r.status, r.method, r.host, r.path, r.client, r.ta, r.term, r.id
        )?;
    }
    out.flush()
}
