//! `hapctl waf`: the web application firewall agent (docs/waf.md).

use std::path::Path;

use anyhow::Context;
use clap::{Args, Subcommand};

use hapctl::model::{Domain, Exclusion, FailMode, WafMode, WafPolicy};
use hapctl::settings::waf::WafSettings;
use hapctl::settings::Settings;
use hapctl::waf::ruleset::RuleSet;
use hapctl::waf::trial::{header_line, Trial};
use hapctl::waf::{self, Engine};

use super::Failure;

#[derive(Subcommand)]
pub enum WafCommand {
    /// Run the SPOE agent HAProxy asks ([waf] listen; SIGHUP reloads the rules).
    Serve,
    /// The agent's health and counters (from its state file).
    Status(StatusArgs),
    /// Reload the running agent's rules (SIGHUP; HAProxy's connections stay) and wait until
    /// it says whether the new rules serve.
    Reload,
    /// The loaded rule set: CRS version, every rule id by file, with phase, paranoia level,
    /// severity and message (what an exclusion names).
    Rules(StatusArgs),
    /// Evaluate a request against the CRS without sending it: the rules that match, the score.
    Test(TestArgs),
    /// A domain's policy: shown, or changed by the flags given (a runtime change, no reload).
    Policy(PolicyArgs),
}

#[derive(Args)]
pub struct PolicyArgs {
    domain: Domain,
    /// off, detect (log only) or block.
    #[arg(long)]
    mode: Option<WafMode>,
    /// When the agent is down, slow or fails: open (pass, logged) or closed (503).
    #[arg(long)]
    fail: Option<FailMode>,
    /// CRS paranoia level, 1 to 4.
    #[arg(long)]
    paranoia: Option<String>,
    /// Anomaly score at which a request is blocked (CRS default 5).
    #[arg(long)]
    threshold: Option<String>,
    /// Request-body bytes inspected (at most [waf] body_max are sent).
    #[arg(long)]
    body_limit: Option<String>,
    /// A rule that does not count: `942100`, or `942100@/search` under a path. Repeatable.
    #[arg(long = "exclude")]
    exclude: Vec<Exclusion>,
    /// Drop the exclusions the domain had before the ones given.
    #[arg(long)]
    clear_exclusions: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct TestArgs {
    /// Path and query (`/search?q=1' OR '1'='1`) or a full http:// or https:// URL (its host
    /// picks the domain's policy and is the Host header).
    url: String,
    #[arg(long, default_value = "GET")]
    method: String,
    /// `Name: value`, repeatable.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// The request body.
    #[arg(long)]
    body: Option<String>,
    /// Score under this domain's stored policy (default: the URL's host's).
    #[arg(long)]
    domain: Option<Domain>,
    /// Score under this policy, as its map value (`block:open:1:5:8192:942100@/x`), instead
    /// of a domain's (without either: block at the CRS defaults).
    #[arg(long)]
    policy: Option<String>,
    #[arg(long)]
    json: bool,
}

pub fn run(dir: &Path, cmd: WafCommand) -> Result<u8, Failure> {
    if let WafCommand::Policy(args) = cmd {
        return policy(dir, args);
    }
    let settings = Settings::load(dir)?;
    let waf = settings
        .waf
        .as_ref()
        .context("[waf] is not configured in hapctl.toml (docs/waf.md)")?;
    match cmd {
        WafCommand::Serve => serve(waf, &settings.paths.run_dir),
        WafCommand::Status(a) => status(&settings, a),
        WafCommand::Reload => reload(&settings),
        WafCommand::Rules(a) => rules(waf, a),
        WafCommand::Test(a) => test(dir, waf, a),
        WafCommand::Policy(_) => unreachable!("handled above"),
    }
}

fn policy(dir: &Path, args: PolicyArgs) -> Result<u8, Failure> {
    let mut edge = super::open(dir)?;
    let mut p = edge.state()?.waf.remove(&args.domain).unwrap_or_default();
    let before = p.clone();
    p.mode = args.mode.unwrap_or(p.mode);
    p.fail = args.fail.unwrap_or(p.fail);
    if args.clear_exclusions {
        p.exclusions.clear();
    }
    p.exclusions.extend(args.exclude);
    // One parser for every field: the map value's (the agent reads the same one).
    let mut fields: Vec<String> = p.to_map_value().split(':').map(str::to_string).collect();
    for (i, v) in [
        (2, args.paranoia),
        (3, args.threshold),
        (4, args.body_limit),
    ] {
        if let Some(v) = v {
            fields[i] = v;
        }
    }
    let p = WafPolicy::from_map_value(&fields.join(":")).map_err(Failure::input)?;
    if p == before {
        if args.json {
            super::output::print_json(&p);
        } else {
            println!("{} {}", args.domain, p.to_map_value());
        }
        return Ok(0);
    }
    edge.check_waf_policy(&p).map_err(Failure::input)?;
    let report = edge.set_waf_policy(&args.domain, p.clone())?;
    if !args.json {
        println!("{} {}", args.domain, p.to_map_value());
    }
    Ok(super::output::print_report(&report, args.json))
}

fn serve(waf: &WafSettings, run_dir: &Path) -> Result<u8, Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Rule loads and the state file; the evaluations run on the agent's own workers
        // (waf/pool.rs).
        .max_blocking_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let stop = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        waf::serve(waf, run_dir, stop).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
}

fn status(settings: &Settings, args: StatusArgs) -> Result<u8, Failure> {
    let status = waf::status::status(settings);
    let Some(a) = &status.agent else {
        unreachable!("[waf] is configured: checked by run")
    };
    if args.json {
        super::output::print_json(&status);
        return Ok(if a.up { 0 } else { 1 });
    }
    match (&a.down_reason, a.pid) {
        (None, Some(pid)) => println!("agent: up (pid {pid})"),
        (reason, _) => println!("agent: DOWN ({})", reason.as_deref().unwrap_or("")),
    }
    if let (Some(engine), Some(at)) = (&a.engine, a.rules_loaded_at) {
        println!(
            "rules: {} loaded at {} ({}; {})",
            a.rules.map_or("?".into(), |n| n.to_string()),
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(at)
            ),
            a.crs.as_deref().unwrap_or("CRS version unknown"),
            engine
        );
    }
    if let Some(e) = &a.reload_error {
        println!("last reload refused: {e}");
    }
    println!(
        "inspected {}  blocked {}  detected {}  errors {}  timeouts {}",
        a.inspected, a.blocked, a.detected, a.errors, a.timeouts
    );
    for (rule, n) in &a.by_rule {
        println!("  rule {rule}: {n}");
    }
    Ok(if a.up { 0 } else { 1 })
}

fn reload(settings: &Settings) -> Result<u8, Failure> {
    let r = waf::status::reload(&settings.paths.run_dir)?;
    println!(
        "rules reloaded (agent pid {}, {} rules, {})",
        r.pid,
        r.rules,
        r.crs.as_deref().unwrap_or("CRS version unknown")
    );
    Ok(0)
}

fn rules(waf: &WafSettings, args: StatusArgs) -> Result<u8, Failure> {
    // Loaded as the agent loads them: a set libmodsecurity refuses is an error here too.
    let engine = Engine::load(&waf.crs)?;
    let set = RuleSet::read(&waf.crs)?;
    let count = set.ids().count();
    if args.json {
        let v = serde_json::json!({"engine": engine.version(), "crs": set.crs, "loader": waf.crs,
            "loaded": engine.rules_loaded(), "rules": count, "removed": set.removed, "files": set.files});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("engine: {}", engine.version());
    println!("crs: {}", set.crs.as_deref().unwrap_or("unknown"));
    println!(
        "rules: {count} with an id ({} loaded by libmodsecurity)",
        engine.rules_loaded()
    );
    let removed: Vec<String> = set.removed.iter().map(u32::to_string).collect();
    println!("removed by hapctl: {}", removed.join(" "));
    let opt = |v: Option<u8>| v.map_or("-".to_string(), |n| n.to_string());
    for f in &set.files {
        println!("\n{} ({} rules)", f.file, f.rules.len());
        for r in &f.rules {
            println!(
                "  {:>9}  phase {}  PL{}  {:<8}  {}",
                r.id,
                opt(r.phase),
                opt(r.paranoia),
                r.severity.as_deref().unwrap_or("-"),
                r.message.as_deref().unwrap_or("")
            );
        }
    }
    Ok(0)
}

fn test(dir: &Path, waf: &WafSettings, args: TestArgs) -> Result<u8, Failure> {
    let headers = args
        .headers
        .iter()
        .map(|h| header_line(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::input)?;
    let trial = Trial::parse(&args.url, &args.method, &headers, args.body.as_deref())
        .map_err(Failure::input)?;
    let given = args
        .policy
        .as_deref()
        .map(WafPolicy::from_map_value)
        .transpose()
        .map_err(Failure::input)?;
    // The stored policies are read only when one may be used.
    let stored = if given.is_none() && (args.domain.is_some() || trial.host.is_some()) {
        super::open(dir)?.state()?.waf
    } else {
        Default::default()
    };
    let (policy, from) = trial.policy(given, args.domain.as_ref(), &stored);
    let engine = Engine::load(&waf.crs)?;
    let mut outcome = trial.evaluate(&engine, policy, waf.body_max)?;
    outcome.policy_from = from;
    if args.json {
        super::output::print_json(&outcome);
        return Ok(0);
    }
    for m in &outcome.matched {
        println!("{:>9}  +{}  {}", m.id, m.points, m.message);
    }
    println!(
        "verdict: {} (score {}, threshold {}; policy {}: {})",
        outcome.verdict, outcome.score, outcome.threshold, outcome.policy_from, outcome.policy
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::WafCommand;
    use crate::cli::{Cli, Command};

    /// `KEY=value` lines of a unit file's section.
    fn section<'a>(unit: &'a str, name: &str) -> Vec<(&'a str, &'a str)> {
        let header = format!("[{name}]");
        unit.lines()
            .skip_while(|l| l.trim() != header)
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                l.split_once('=')
                    .unwrap_or_else(|| panic!("not KEY=value: {l}"))
            })
            .collect()
    }

    #[test]
    fn the_shipped_unit_runs_the_agent_as_the_cli_parses_it() {
        let unit = include_str!("../../../dist/hapctl-waf.service");
        let daemon = include_str!("../../../dist/hapctl.service");
        let service = section(unit, "Service");
        let get = |k: &str| service.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let exec: Vec<&str> = get("ExecStart")
            .expect("ExecStart")
            .split_whitespace()
            .collect();
        // The package installs the binary at /usr/bin/hapctl (package.metadata.deb assets).
        assert_eq!(exec[0], "/usr/bin/hapctl");
        let cli = Cli::try_parse_from(&exec).unwrap_or_else(|e| panic!("{exec:?}: {e}"));
        assert!(
            matches!(cli.command, Command::Waf(WafCommand::Serve)),
            "{exec:?}"
        );
        // The same state directory and sandbox as the daemon's unit.
        let daemon_service = section(daemon, "Service");
        for key in [
            "Environment",
            "ProtectSystem",
            "ProtectHome",
            "NoNewPrivileges",
            "PrivateTmp",
        ] {
            let theirs = daemon_service
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| *v);
            assert_eq!(get(key), theirs, "{key}");
        }
        assert_eq!(get("Restart"), Some("on-failure"));
        assert_eq!(get("ExecReload"), Some("/bin/kill -HUP $MAINPID"));
        assert!(!section(unit, "Install").is_empty());
        assert!(!section(unit, "Unit").is_empty());
    }
}
