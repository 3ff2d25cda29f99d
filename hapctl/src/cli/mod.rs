//! The `hapctl` command line. One file per command group, each owning its clap types and its
//! `run`; this module holds the top-level parser, the dispatch and what the groups share.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use hapctl::edge::{self, Edge};

mod alerts;
mod apply;
mod audit;
mod block;
mod cert;
mod deliver;
mod domain;
mod fleet;
mod forward;
mod haproxy;
mod import_legacy;
mod init;
mod limits;
mod logs;
pub mod output;
mod prove;
mod proxy;
mod serve;
mod token;
mod top;
mod waf;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (applied or unchanged)
  1  error (state directory, database, I/O, HAProxy not reachable...)
  2  invalid input (the message names the field and the rule); nothing changed
  3  rejected: HAProxy refused the new configuration; the known-good set was restored
  4  validator unavailable: haproxy -c could not run; nothing changed
  5  reload failed, rolled back: the known-good set was restored and reloaded
  6  ROLLBACK FAILED: the edge needs a person now
  7  not found: the domain, block, app, certificate or previous generation does not exist;
     nothing changed
  8  not ready: the new generation never became ready; delivery aborted, nothing changed
  9  prove: the measurement ran and at least one check failed (see the table and the journal)";

#[derive(Parser)]
#[command(name = "hapctl", version, about = "Control plane for an HAProxy edge", after_help = EXIT_CODES)]
pub struct Cli {
    /// State directory (settings, database, live files).
    #[arg(
        long,
        global = true,
        env = "HAPCTL_STATE_DIR",
        default_value = "/var/lib/hapctl"
    )]
    state_dir: PathBuf,
    /// Log as JSON lines on stderr.
    #[arg(long, global = true)]
    pub log_json: bool,
    #[command(subcommand)]
    command: Command,
}

// The variants' doc comments are the commands' help; their order is the order of `--help`.
#[derive(Subcommand)]
enum Command {
    /// Create the state directory: settings, database, folders.
    Init(init::InitArgs),
    /// Run, stop and inspect the HAProxy master.
    #[command(subcommand)]
    Haproxy(haproxy::HaproxyCommand),
    /// Domains and their servers.
    #[command(subcommand)]
    Domain(domain::DomainCommand),
    /// Blocked IP addresses and networks.
    #[command(subcommand)]
    Block(block::BlockCommand),
    /// TLS certificates: ACME, uploads, renewal (installed without a reload).
    #[command(subcommand)]
    Cert(cert::CertCommand),
    /// Trusted proxies: peers whose X-Forwarded-For names the real client.
    #[command(subcommand)]
    Proxy(proxy::ProxyCommand),
    /// Rate limits and tarpits per client IP: presets, thresholds, exemptions (no reload)
    #[command(subcommand)]
    Limits(limits::LimitsCommand),
    /// Who the rate limits see: top clients from HAProxy's stick tables, clear one client
    #[command(subcommand)]
    Security(limits::SecurityCommand),
    /// Render the desired state and apply it through the safe path.
    Apply(apply::ApplyArgs),
    /// HAProxy master and workers, and the last applies.
    Status(JsonOut),
    /// Deliver VERSION of an app: start it, wait until ready, cut over, retire the one before.
    Deliver(deliver::DeliverArgs),
    /// Cut back over to the previous generation (started first if it is not running).
    Rollback(deliver::RollbackArgs),
    /// After a reboot: start each app's generation in service and HAProxy; nothing else.
    Boot,
    /// The access log (one line per request): last lines, filtered, or followed.
    Logs(logs::LogsArgs),
    /// Alerts of [alerts]: `test` sends one of each kind.
    #[command(subcommand)]
    Alerts(alerts::AlertsCommand),
    /// Traffic per domain, live: requests, answers, time, bytes, what turned requests away.
    Top(top::TopArgs),
    /// Run the HTTP API daemon (starts HAProxy if needed; stopping it leaves HAProxy running).
    Serve(serve::ServeArgs),
    /// Generations of each app: current, previous, retired; PID, port, ready.
    Generations(JsonOut),
    /// Measure a cutover from outside while COMMAND runs: long streams, a short-request probe,
    /// master PID and workers, version served. Exit 0 only when every check passes (9: one failed).
    Prove(prove::ProveArgs),
    /// Import the old manager's database, certificates and lists (plan first; --dry-run).
    ImportLegacy(import_legacy::ImportArgs),
    /// The web application firewall: its SPOE agent, status, a request evaluated offline.
    #[command(subcommand)]
    Waf(waf::WafCommand),
    /// Several edges sharing one desired state in etcd ([fleet], docs/fleet.md).
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
    /// API tokens: names, scopes, secrets (docs/access.md).
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Who changed what, from where, with what result (docs/access.md).
    Audit(audit::AuditArgs),
}

/// `--json` of the commands that change something.
#[derive(Args)]
struct JsonFlag {
    /// Print the apply report as JSON.
    #[arg(long)]
    json: bool,
}

/// `--json` of the listings and status commands; it has no help line.
#[derive(Args)]
struct JsonOut {
    #[arg(long)]
    json: bool,
}

/// An error with the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// Exit 2, for the errors whose type alone does not say they come from the user's input.
    fn input(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 2,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Failure {
        let error = e.into();
        let code = match error.downcast_ref::<edge::EdgeError>() {
            Some(edge::EdgeError::Apply(hapctl::apply::ApplyError::NotFound(_))) => 7,
            Some(edge::EdgeError::Deliver(d)) if d.is_not_found() => 7,
            Some(edge::EdgeError::Certs(c)) => match c {
                hapctl::tls::CertError::NotFound(_) => 7,
                hapctl::tls::CertError::Bundle(_) | hapctl::tls::CertError::Refused(_) => 2,
                _ => 1,
            },
            _ if error.downcast_ref::<hapctl::model::Invalid>().is_some() => 2,
            _ => 1,
        };
        Failure { code, error }
    }
}

/// The error and its causes, each cause shown once: most messages already quote their cause.
pub fn describe_chain(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

/// Runs the command; `Ok` carries the exit code of a command that ran to its end. A change is
/// recorded in the audit trail first, as the local user (no record, no change).
pub fn run(cli: Cli) -> Result<u8, Failure> {
    let argv: Vec<String> = std::env::args().collect();
    let record = audit::LocalChange::begin(&cli.state_dir, &argv)?;
    let result = dispatch(cli);
    if let Some(record) = record {
        record.finish(match &result {
            Ok(code) => *code,
            Err(f) => f.code,
        });
    }
    result
}

fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let dir = cli.state_dir.as_path();
    match cli.command {
        Command::Init(args) => init::run(dir, args),
        Command::Haproxy(cmd) => haproxy::run(dir, cmd),
        Command::Domain(cmd) => domain::run(dir, cmd),
        Command::Block(cmd) => block::run(dir, cmd),
        Command::Cert(cmd) => cert::run(dir, cmd),
        Command::Proxy(cmd) => proxy::run(dir, cmd),
        Command::Limits(cmd) => limits::run(dir, cmd),
        Command::Security(cmd) => limits::security(dir, cmd),
        Command::Apply(args) => apply::run(dir, args),
        Command::Status(out) => apply::status(dir, out),
        Command::Deliver(args) => deliver::deliver(dir, args),
        Command::Rollback(args) => deliver::rollback(dir, args),
        Command::Boot => deliver::boot(dir),
        Command::Logs(args) => logs::run(dir, args),
        Command::Top(args) => top::run(dir, args),
        Command::Alerts(cmd) => alerts::run(dir, cmd),
        Command::Serve(args) => serve::run(dir, args),
        Command::Generations(out) => deliver::generations(dir, out),
        Command::Prove(args) => prove::run(dir, args),
        Command::ImportLegacy(args) => import_legacy::run(dir, args),
        Command::Waf(cmd) => waf::run(dir, cmd),
        Command::Fleet(cmd) => fleet::run(dir, cmd),
        Command::Token(cmd) => token::run(dir, cmd),
        Command::Audit(args) => audit::run(dir, args),
    }
}

fn open(dir: &Path) -> anyhow::Result<Edge> {
    Edge::open(dir).with_context(|| format!("cannot open the state directory {}", dir.display()))
}
