//! The `hapctl` command line: parses arguments, calls the edge services, prints results.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use hapctl::blocks::{BlockChange, ChangeResult};
use hapctl::edge::{self, Edge};
use hapctl::model::{
    AppName, Backend, BlockKey, Domain, Note, Profile, ProxyNet, Server, ServerName, Ttl, Version,
};

mod output;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (applied or unchanged)
  1  error (state directory, database, I/O, HAProxy not reachable...)
  2  invalid input (the message names the field and the rule); nothing changed
  3  rejected: HAProxy refused the new configuration; the known-good set was restored
  4  validator unavailable: haproxy -c could not run; nothing changed
  5  reload failed, rolled back: the known-good set was restored and reloaded
  6  ROLLBACK FAILED: the edge needs a person now
  7  not found: the domain, block, app or previous generation does not exist; nothing changed
  8  not ready: the new generation never became ready; delivery aborted, nothing changed
  9  prove: the measurement ran and at least one check failed (see the table and the journal)";

#[derive(Parser)]
#[command(name = "hapctl", version, about = "Control plane for an HAProxy edge", after_help = EXIT_CODES)]
struct Cli {
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
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the state directory: settings, database, folders.
    Init {
        /// Reset existing state (the database is deleted).
        #[arg(long)]
        force: bool,
        /// Public HTTP listener, IP:PORT (default 127.0.0.1:8080).
        #[arg(long)]
        http_bind: Option<String>,
    },
    /// Run, stop and inspect the HAProxy master.
    #[command(subcommand)]
    Haproxy(HaproxyCommand),
    /// Domains and their servers.
    #[command(subcommand)]
    Domain(DomainCommand),
    /// Blocked IP addresses and networks.
    #[command(subcommand)]
    Block(BlockCommand),
    /// Trusted proxies: peers whose X-Forwarded-For names the real client.
    #[command(subcommand)]
    Proxy(ProxyCommand),
    /// Render the desired state and apply it through the safe path.
    Apply {
        /// Show the diff and HAProxy's verdict; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// HAProxy master and workers, and the last applies.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Deliver VERSION of an app: start it, wait until ready, cut over, retire the one before.
    Deliver {
        version: String,
        /// The app (default: the only [[app]] of the settings).
        #[arg(long)]
        app: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Cut back over to the previous generation (started first if it is not running).
    Rollback {
        #[arg(long)]
        app: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// After a reboot: start each app's generation in service and HAProxy; nothing else.
    Boot,
    /// Run the HTTP API daemon (starts HAProxy if needed; stopping it leaves HAProxy running).
    Serve {
        /// Listen address (default: [api] listen, 127.0.0.1:9090).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Serve without a bearer token (only allowed on a loopback address).
        #[arg(long)]
        no_auth: bool,
    },
    /// Generations of each app: current, previous, retired; PID, port, ready.
    Generations {
        #[arg(long)]
        json: bool,
    },
    /// Measure a cutover from outside while COMMAND runs: long streams, a short-request probe,
    /// master PID and workers, version served. Exit 0 only when every check passes (9: one failed).
    Prove(ProveArgs),
}

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
struct ProveArgs {
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
    /// How long the probe goes on after the command ended.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    settle: std::time::Duration,
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
    timeout: std::time::Duration,
    /// Bound on one short request (connect, and each read).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    request_timeout: std::time::Duration,
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

#[derive(Subcommand)]
enum HaproxyCommand {
    /// Apply the desired state, then start the master (never a second one).
    Start,
    /// Stop the master and its workers.
    Stop,
    /// Master PID, workers, version.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Reload through the master (never a restart) and confirm the new worker.
    Reload,
}

#[derive(Subcommand)]
enum DomainCommand {
    /// Add a domain, or replace it if it exists.
    Add {
        /// `shop.example.com` or `*.example.com`.
        name: String,
        /// HOST:PORT[,weight=N][,maxconn=N][,check|nocheck]; repeat for more servers.
        #[arg(
            long = "server",
            required_unless_present = "app",
            conflicts_with = "app"
        )]
        servers: Vec<String>,
        /// Route the domain to a delivered application instead of servers.
        #[arg(long)]
        app: Option<String>,
        /// default, websocket, sse, http-check or http-check:/path.
        #[arg(long, default_value = "default")]
        profile: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Remove a domain.
    Rm {
        name: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List domains.
    Ls {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum BlockCommand {
    /// Block an IP or CIDR (or refresh its reason and expiry).
    Add {
        key: String,
        #[arg(long, default_value = "")]
        reason: String,
        /// Who blocked it (default: $SUDO_USER or $USER).
        #[arg(long)]
        author: Option<String>,
        /// Lift the block after this long: 90s, 30m, 12h, 7d.
        #[arg(long)]
        ttl: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Unblock an IP or CIDR.
    Rm {
        key: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List blocks (expired ones are left out).
    Ls {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ProxyCommand {
    /// Trust X-Forwarded-For from an IP or CIDR.
    Add {
        net: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Stop trusting an IP or CIDR.
    Rm {
        net: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List trusted proxies.
    Ls,
}

#[derive(Args)]
struct JsonFlag {
    /// Print the apply report as JSON.
    #[arg(long)]
    json: bool,
}

/// An error with the exit code it maps to.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Failure {
        let error = e.into();
        let code = match error.downcast_ref::<edge::EdgeError>() {
            Some(edge::EdgeError::Apply(hapctl::apply::ApplyError::NotFound(_))) => 7,
            Some(edge::EdgeError::Deliver(d)) if d.is_not_found() => 7,
            _ if error.downcast_ref::<hapctl::model::Invalid>().is_some() => 2,
            _ => 1,
        };
        Failure { code, error }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    output::init_logging(cli.log_json);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("error: {}", describe_chain(&f.error));
            ExitCode::from(f.code)
        }
    }
}

/// The error and its causes, each cause shown once: most messages already quote their cause.
fn describe_chain(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

fn run(cli: Cli) -> Result<u8, Failure> {
    let dir = cli.state_dir;
    match cli.command {
        Command::Init { force, http_bind } => {
            let path = edge::init(&dir, force, http_bind.as_deref()).map_err(|e| match e {
                // Only --http-bind can make the built-in settings invalid: input, exit 2.
                edge::EdgeError::Settings(_) => Failure {
                    code: 2,
                    error: e.into(),
                },
                e => e.into(),
            })?;
            println!(
                "initialised {}; next: hapctl --state-dir {} haproxy start",
                path.display(),
                dir.display()
            );
            Ok(0)
        }
        Command::Haproxy(cmd) => haproxy_command(&dir, cmd),
        Command::Domain(cmd) => domain_command(&dir, cmd),
        Command::Block(cmd) => block_command(&dir, cmd),
        Command::Proxy(cmd) => proxy_command(&dir, cmd),
        Command::Apply {
            dry_run: true,
            json,
        } => {
            let edge = open(&dir)?;
            let dry = edge.dry_run()?;
            output::print_dry_run(&dry, json);
            Ok(if dry.verdict == "valid" { 0 } else { 3 })
        }
        Command::Apply {
            dry_run: false,
            json,
        } => {
            let report = open(&dir)?.apply("apply")?;
            Ok(output::print_report(&report, json))
        }
        Command::Status { json } => {
            let edge = open(&dir)?;
            output::print_status(&edge, json)?;
            Ok(0)
        }
        Command::Deliver { version, app, out } => {
            let version: Version = version.parse()?;
            let app = app.map(|a| a.parse::<AppName>()).transpose()?;
            let mut edge = open(&dir)?;
            let app = edge.resolve_app(app)?;
            let report = edge.deliver(&app, &version, &mut output::step_printer(out.json))?;
            Ok(output::print_delivery(&report, out.json))
        }
        Command::Rollback { app, out } => {
            let app = app.map(|a| a.parse::<AppName>()).transpose()?;
            let mut edge = open(&dir)?;
            let app = edge.resolve_app(app)?;
            let report = edge.rollback(&app, &mut output::step_printer(out.json))?;
            Ok(output::print_delivery(&report, out.json))
        }
        Command::Boot => {
            let problems = open(&dir)?.boot(&mut output::step_printer(false))?;
            for p in &problems {
                eprintln!("problem: {p}");
            }
            Ok(if problems.is_empty() { 0 } else { 1 })
        }
        Command::Serve { listen, no_auth } => {
            hapctl::api::serve(&dir, hapctl::api::ServeOptions { listen, no_auth })?;
            Ok(0)
        }
        Command::Generations { json } => {
            output::print_generations(&open(&dir)?.generations()?, json);
            Ok(0)
        }
        Command::Prove(args) => prove_command(&dir, args),
    }
}

fn prove_command(dir: &std::path::Path, args: ProveArgs) -> Result<u8, Failure> {
    use hapctl::prove;
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
        prove::ProveError::Options(_) => Failure {
            code: 2,
            error: e.into(),
        },
        e => e.into(),
    })?;
    match prove::journal::write(&settings.paths.journal_dir, &report) {
        Ok(path) => report.journal = Some(path),
        Err(e) => eprintln!(
            "warning: cannot write the journal in {}: {e}",
            settings.paths.journal_dir.display()
        ),
    }
    let json_to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    if let Some(path) = args.json.as_deref().filter(|_| !json_to_stdout) {
        let text = serde_json::to_string_pretty(&report).expect("a report always serialises");
        hapctl::fsutil::write_atomic(path, format!("{text}\n").as_bytes(), 0o644)
            .with_context(|| format!("cannot write the JSON report to {}", path.display()))?;
    }
    output::print_proof(&report, json_to_stdout);
    Ok(report.exit_code)
}

fn open(dir: &std::path::Path) -> anyhow::Result<Edge> {
    Edge::open(dir).with_context(|| format!("cannot open the state directory {}", dir.display()))
}

fn haproxy_command(dir: &std::path::Path, cmd: HaproxyCommand) -> Result<u8, Failure> {
    let mut edge = open(dir)?;
    let timeout = edge.settings.haproxy.start_timeout;
    match cmd {
        HaproxyCommand::Start => {
            let report = edge.apply("haproxy start")?;
            if !report.outcome.is_success() {
                return Ok(output::print_report(&report, false));
            }
            let started = edge.supervisor().start(timeout)?;
            println!("HAProxy master running, PID {}", started.master_pid);
            Ok(0)
        }
        HaproxyCommand::Stop => {
            edge.supervisor().stop(edge::STOP_TIMEOUT)?;
            println!("HAProxy stopped");
            Ok(0)
        }
        HaproxyCommand::Status { json } => {
            output::print_haproxy_status(&edge.supervisor().status(), json);
            Ok(0)
        }
        HaproxyCommand::Reload => {
            let master = hapctl::haproxy::Master::from_settings(&edge.settings);
            let r = master.reload(edge.settings.haproxy.reload_timeout)?;
            println!(
                "reloaded in {:.0} ms: master PID {} unchanged, new worker(s) {:?}, old worker(s) {:?}",
                r.duration.as_secs_f64() * 1000.0,
                r.master_pid,
                r.new_workers,
                r.old_workers
            );
            Ok(0)
        }
    }
}

fn domain_command(dir: &std::path::Path, cmd: DomainCommand) -> Result<u8, Failure> {
    match cmd {
        DomainCommand::Add {
            name,
            app: Some(app),
            out,
            ..
        } => {
            let (name, app): (Domain, AppName) = (name.parse()?, app.parse()?);
            let (report, _) = open(dir)?.put_app_domain(&name, &app)?;
            Ok(output::print_report(&report, out.json))
        }
        DomainCommand::Add {
            name,
            servers,
            profile,
            out,
            app: None,
        } => {
            let (name, profile): (Domain, Profile) = (name.parse()?, profile.parse()?);
            let servers = servers
                .iter()
                .enumerate()
                .map(|(i, spec)| Server::parse_spec(spec, ServerName::nth(i + 1)))
                .collect::<Result<Vec<_>, _>>()?;
            let backend = Backend::new(servers, profile)?;
            let (report, created) = open(dir)?.put_domain(&name, &backend)?;
            if let Some(created) = created {
                eprintln!(
                    "domain {name} {}",
                    if created { "added" } else { "replaced" }
                );
            }
            Ok(output::print_report(&report, out.json))
        }
        DomainCommand::Rm { name, out } => {
            let report = open(dir)?.remove_domain(&name.parse()?)?;
            Ok(output::print_report(&report, out.json))
        }
        DomainCommand::Ls { json } => {
            output::print_domains(&open(dir)?.state()?, json);
            Ok(0)
        }
    }
}

fn block_command(dir: &std::path::Path, cmd: BlockCommand) -> Result<u8, Failure> {
    match cmd {
        BlockCommand::Add {
            key,
            reason,
            author,
            ttl,
            out,
        } => {
            let key: BlockKey = key.parse()?;
            let ttl = ttl.map(|t| t.parse::<Ttl>()).transpose()?;
            let reason = Note::parse("reason", &reason)?;
            let author = author
                .or_else(|| std::env::var("SUDO_USER").ok())
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "hapctl".into());
            let author = Note::parse("author", &author)?;
            let block = Edge::new_block(key, reason, author, ttl);
            let report = open(dir)?.change_blocks(&[BlockChange::Put(block)])?;
            output::print_block_report(&[key], &report, out.json);
            Ok(0)
        }
        BlockCommand::Rm { key, out } => {
            let key: BlockKey = key.parse()?;
            let report = open(dir)?.change_blocks(&[BlockChange::Remove(key)])?;
            output::print_block_report(&[key], &report, out.json);
            Ok(if report.results == [ChangeResult::NotFound] {
                7
            } else {
                0
            })
        }
        BlockCommand::Ls { json } => {
            output::print_blocks(&open(dir)?.blocks()?, json);
            Ok(0)
        }
    }
}

fn proxy_command(dir: &std::path::Path, cmd: ProxyCommand) -> Result<u8, Failure> {
    match cmd {
        ProxyCommand::Add { net, out } => {
            let (report, _) = open(dir)?.trust_proxy(&net.parse::<ProxyNet>()?)?;
            Ok(output::print_report(&report, out.json))
        }
        ProxyCommand::Rm { net, out } => {
            let report = open(dir)?.distrust_proxy(&net.parse::<ProxyNet>()?)?;
            Ok(output::print_report(&report, out.json))
        }
        ProxyCommand::Ls => {
            for net in &open(dir)?.state()?.trusted_proxies {
                println!("{net}");
            }
            Ok(0)
        }
    }
}
