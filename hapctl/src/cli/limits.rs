//! `hapctl limits show|set|exempt` and `hapctl security top|clear`: per-client rate limits
//! and the client table they count in.

use std::net::IpAddr;
use std::path::Path;

use clap::{Args, Subcommand};

use hapctl::model::{BlockKey, Invalid, Slot};
use hapctl::protect::{parse_switch, EdgeEdit, PolicyEdit, SecurityStats};

use super::{open, output, Failure, JsonFlag, JsonOut};

/// The rules of a policy: a preset, then rules replaced (`off` or `THRESHOLD:ACTION`, the
/// action being log, deny[-403|-429|-503] or tarpit[-403|-429|-503]). First match wins, in
/// the order of these flags.
#[derive(Args, Default)]
pub struct RuleArgs {
    /// standard (the old manager's rules), off, or custom (off plus the rules given).
    #[arg(long)]
    preset: Option<String>,
    /// Requests per request window, hard tier (standard: 5000:deny).
    #[arg(long, value_name = "RULE")]
    req_rate: Option<String>,
    /// Requests per request window, soft tier, below the hard one (standard: 3000:tarpit).
    #[arg(long, value_name = "RULE")]
    req_rate_soft: Option<String>,
    /// New tracked streams per connection window (standard: 500:deny).
    #[arg(long, value_name = "RULE")]
    conn_rate: Option<String>,
    /// Streams in flight (standard: 500:deny).
    #[arg(long, value_name = "RULE")]
    conn_cur: Option<String>,
    /// HTTP errors per error window (standard: 100:tarpit-403).
    #[arg(long, value_name = "RULE")]
    err_rate: Option<String>,
}

impl RuleArgs {
    pub fn edit(self) -> PolicyEdit {
        let rules = [
            (Slot::ReqRate, self.req_rate),
            (Slot::ReqRateSoft, self.req_rate_soft),
            (Slot::ConnRate, self.conn_rate),
            (Slot::ConnCur, self.conn_cur),
            (Slot::ErrRate, self.err_rate),
        ]
        .into_iter()
        .filter_map(|(slot, spec)| spec.map(|s| (slot, s)))
        .collect();
        PolicyEdit {
            preset: self.preset,
            rules,
        }
    }
}

// Parsed once per run: the size of the biggest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum LimitsCommand {
    /// The limits: windows, tarpit, default policy, per-domain policies, exemptions.
    Show(JsonOut),
    /// Change the edge-wide default policy and settings. Thresholds, actions and the local
    /// exemption are runtime map changes (no reload); windows and the tarpit reload.
    Set {
        #[command(flatten)]
        rules: RuleArgs,
        /// Request-rate window, seconds (1-3600; reload).
        #[arg(long, value_name = "SECONDS")]
        req_window: Option<String>,
        /// Connection-rate window, seconds (1-3600; reload).
        #[arg(long, value_name = "SECONDS")]
        conn_window: Option<String>,
        /// Error-rate window, seconds (1-3600; reload).
        #[arg(long, value_name = "SECONDS")]
        err_window: Option<String>,
        /// How long a tarpit holds a request, seconds (1-60; reload).
        #[arg(long, value_name = "SECONDS")]
        tarpit: Option<String>,
        /// Exempt loopback and private addresses (on/off; runtime).
        #[arg(long, value_name = "on|off")]
        local_exempt: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Trusted clients that skip every limit (runtime map, no reload).
    #[command(subcommand)]
    Exempt(ExemptCommand),
}

#[derive(Subcommand)]
pub enum ExemptCommand {
    /// Exempt an IP or CIDR.
    Add {
        net: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Stop exempting an IP or CIDR.
    Rm {
        net: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List the exempt networks.
    Ls,
}

#[derive(Subcommand)]
pub enum SecurityCommand {
    /// The busiest clients of the rate-limit table, counters named.
    Top {
        /// How many clients (1-1000).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Only clients with at least this many requests in the window.
        #[arg(long, default_value_t = 1)]
        min_rate: u64,
        #[arg(long)]
        json: bool,
    },
    /// Forget one client's counters (`clear table`).
    Clear { ip: String },
}

pub fn run(dir: &Path, cmd: LimitsCommand) -> Result<u8, Failure> {
    match cmd {
        LimitsCommand::Show(out) => {
            let limits = open(dir)?.limits()?;
            if out.json {
                output::print_json(&limits);
            } else {
                let w = limits.windows;
                println!(
                    "windows: requests {}s, connections {}s, errors {}s; tarpit {}s; local addresses exempt: {}",
                    w.req, w.conn, w.err, limits.tarpit_secs, limits.local_exempt
                );
                println!("default: {}", serde_json::to_string(&limits.default)?);
                for (domain, policy) in &limits.domains {
                    println!("{domain}: {}", serde_json::to_string(policy)?);
                }
                for net in &limits.exempt {
                    println!("exempt: {net}");
                }
            }
            Ok(0)
        }
        LimitsCommand::Set {
            rules,
            req_window,
            conn_window,
            err_window,
            tarpit,
            local_exempt,
            out,
        } => {
            let local_exempt = local_exempt
                .map(|s| parse_switch("local_exempt", &s))
                .transpose()?;
            let edit = EdgeEdit {
                policy: rules.edit(),
                req_window,
                conn_window,
                err_window,
                tarpit,
                local_exempt,
            };
            let mut edge = open(dir)?;
            let next = edit.apply(&edge.limits()?)?;
            let report = edge.set_limit_settings(&next)?;
            Ok(output::print_report(&report, out.json))
        }
        LimitsCommand::Exempt(ExemptCommand::Add { net, out }) => exempt(dir, &net, true, out),
        LimitsCommand::Exempt(ExemptCommand::Rm { net, out }) => exempt(dir, &net, false, out),
        LimitsCommand::Exempt(ExemptCommand::Ls) => {
            for net in open(dir)?.limits()?.exempt {
                println!("{net}");
            }
            Ok(0)
        }
    }
}

fn exempt(dir: &Path, net: &str, add: bool, out: JsonFlag) -> Result<u8, Failure> {
    let net: BlockKey = net.parse()?;
    let report = open(dir)?.set_limit_exempt(&net, add)?;
    Ok(output::print_report(&report, out.json))
}

pub fn security(dir: &Path, cmd: SecurityCommand) -> Result<u8, Failure> {
    match cmd {
        SecurityCommand::Top {
            limit,
            min_rate,
            json,
        } => {
            if !(1..=1000).contains(&limit) {
                return Err(Invalid::new("limit", &limit.to_string(), "must be 1 to 1000").into());
            }
            let stats = open(dir)?.security_top(limit, min_rate)?;
            if json {
                output::print_json(&stats);
            } else {
                print_top(&stats);
            }
            Ok(0)
        }
        SecurityCommand::Clear { ip } => {
            let ip: IpAddr = ip
                .parse()
                .map_err(|_| Invalid::new("ip", &ip, "must be one IPv4 or IPv6 address"))?;
            open(dir)?.security_clear(ip)?;
            eprintln!("counters of {ip} cleared");
            Ok(0)
        }
    }
}

fn print_top(stats: &SecurityStats) {
    println!(
        "table {}: {} of {} tracked, {} active",
        stats.table, stats.total_tracked_ips, stats.table_size, stats.sources_with_activity
    );
    println!(
        "{:<40} {:>13} {:>13} {:>9} {:>8}",
        "client", "http_req_rate", "http_err_rate", "conn_rate", "conn_cur"
    );
    for r in &stats.sources {
        println!(
            "{:<40} {:>13} {:>13} {:>9} {:>8}",
            r.ip.to_string(),
            r.http_req_rate,
            r.http_err_rate,
            r.conn_rate,
            r.conn_cur
        );
    }
}
