//! `hapctl import-legacy`: the old manager's database, certificates and lists onto hapctl
//! (`docs/migration.md`). Prints the plan (and everything refused, with the reason), then
//! applies it unless `--dry-run`.

use std::path::{Path, PathBuf};

use clap::Args;

use hapctl::legacy::{
    self, Current, HaproxyCheck, ImportOutcome, Item, ItemStatus, LegacyError, Plan,
};
use hapctl::model::TextContext;

use super::output::{print_json, rfc3339};
use super::{open, Failure};

#[derive(Args)]
pub struct ImportArgs {
    /// The old manager's SQLite database (`/etc/haproxy/haproxy_config.db`), read-only.
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    /// Its certificate folder (`/etc/haproxy/certs`): `<domain>.pem` bundles.
    #[arg(long, value_name = "DIR")]
    certs: Option<PathBuf>,
    /// The folder of its lists (`/etc/haproxy`): trusted_proxies.list, cloudflare_ips.list,
    /// trusted_ips.list/.map, wpadmin_gate_exempt.list, suspended_domains.list.
    #[arg(long, value_name = "DIR")]
    lists: Option<PathBuf>,
    /// Print the plan only; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the plan and the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(dir: &Path, args: ImportArgs) -> Result<u8, Failure> {
    let old = legacy::read(&args.db, args.certs.as_deref(), args.lists.as_deref())
        .map_err(Failure::input)?;
    let mut edge = open(dir)?;
    let current = Current::of(&edge)?;
    let ctx = legacy::Context {
        now: hapctl::clock::unix_now(),
        local: &legacy::local_to_unix,
        options: TextContext {
            resolvers: edge.settings.resolvers.is_some(),
        },
    };
    let mut plan = legacy::plan(&old, &current, &ctx);
    // The dry run checks the set on a scratch copy, to say what the real run will do with the
    // rows HAProxy refuses; the real run's own apply is that check (one haproxy -c).
    if args.dry_run {
        plan.haproxy_check = legacy::check(&mut edge, &mut plan)?;
    }
    plan.look_up_names(edge.settings.resolvers.is_some());
    let (new, _) = plan.counts();
    let result = if args.dry_run || new == 0 {
        Ok(None)
    } else {
        legacy::import(&mut edge, &mut plan).map(Some)
    };
    if args.json {
        print_json(&serde_json::json!({
            "dry_run": args.dry_run,
            "plan": plan,
            "outcome": result.as_ref().ok(),
            "error": result.as_ref().err().map(|e| e.to_string()),
        }));
    } else {
        print_plan(&plan);
        match &result {
            Ok(Some(outcome)) => print_outcome(outcome),
            Ok(None) if args.dry_run => println!("dry run: nothing was changed"),
            Ok(None) => println!("nothing to import: the edge already has every item"),
            Err(_) => {}
        }
    }
    match result {
        Ok(_) if args.dry_run => dry_run_code(&plan),
        Ok(_) => Ok(0),
        Err(LegacyError::NotApplied {
            report: Some(report),
            message,
            undone,
        }) => {
            for line in &report.haproxy_messages {
                eprintln!("haproxy: {line}");
            }
            Err(Failure {
                code: report.outcome.exit_code() as u8,
                error: anyhow::anyhow!("the import was not applied: {message}; {undone}"),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// A dry run whose set HAProxy refuses for reasons no row explains says the import would be
/// refused, with the exit code of that refusal.
fn dry_run_code(plan: &Plan) -> Result<u8, Failure> {
    match &plan.haproxy_check {
        Some(HaproxyCheck::Invalid { .. }) => Err(Failure {
            code: hapctl::apply::ApplyOutcome::Rejected.exit_code() as u8,
            error: anyhow::anyhow!(
                "the import would be refused: HAProxy refuses the set for reasons no row explains"
            ),
        }),
        _ => Ok(0),
    }
}

fn mark(status: ItemStatus) -> &'static str {
    match status {
        ItemStatus::New => "+",
        ItemStatus::Unchanged => "=",
    }
}

fn section<T>(title: &str, items: &[Item<T>], line: impl Fn(&T) -> String) {
    if items.is_empty() {
        return;
    }
    let new = items.iter().filter(|i| i.status == ItemStatus::New).count();
    println!(
        "{title}: {new} to import, {} already present",
        items.len() - new
    );
    for i in items {
        println!("  {} {}\t({})", mark(i.status), line(&i.value), i.source);
    }
}

fn print_plan(plan: &Plan) {
    section("domains", &plan.domains, |d| {
        let servers: Vec<String> = d
            .backend
            .servers()
            .iter()
            .map(|s| format!("{} {}", s.name, s.addr))
            .collect();
        format!(
            "{}\t{}\t{}",
            d.domain,
            d.backend.profile(),
            servers.join(", ")
        )
    });
    section("blocked IPs", &plan.blocks, |b| {
        let until = b
            .expires_at
            .map_or("permanent".into(), |t| format!("until {}", rfc3339(t)));
        format!("{}\t{until}\t{}", b.key, b.reason)
    });
    section("certificates", &plan.certificates, |c| {
        format!(
            "{}\t{}\tuntil {}",
            c.name,
            c.names.join(" "),
            rfc3339(c.not_after)
        )
    });
    section("trusted proxies", &plan.trusted_proxies, |n| n.to_string());
    section("cloudflare preset", &plan.cloudflare, |n| n.to_string());
    section("rate-limit exemptions", &plan.limit_exempt, |n| {
        n.to_string()
    });
    section("wp-admin gate off", &plan.wp_admin_gate_off, |d| {
        d.to_string()
    });
    section("suspended domains", &plan.suspended, |d| d.to_string());
    if !plan.refused.is_empty() {
        println!("refused: {} (not imported)", plan.refused.len());
        for r in &plan.refused {
            println!("  ! {}\t{}: {}", r.source, r.value, r.reason);
        }
    }
    print_checks(plan);
    let (new, unchanged) = plan.counts();
    println!(
        "{new} to import, {unchanged} already present, {} refused",
        plan.refused.len()
    );
}

/// HAProxy's verdict on the set (when it was asked) and the servers that would wait for
/// their name.
fn print_checks(plan: &Plan) {
    match &plan.haproxy_check {
        None => {}
        Some(HaproxyCheck::Valid) => {
            println!("haproxy -c of the set this import makes (a scratch copy): valid")
        }
        Some(HaproxyCheck::Invalid { messages }) => {
            println!("haproxy -c REFUSES the set this import makes, for reasons no row explains:");
            for line in messages {
                println!("  haproxy: {line}");
            }
        }
        Some(HaproxyCheck::Unavailable { reason }) => println!(
            "haproxy -c could not run ({reason}): HAProxy's verdict on the rows is not known"
        ),
    }
    if let Some(warning) = plan.resolution.warning() {
        println!("WARNING: {warning}");
    }
}

fn print_outcome(o: &ImportOutcome) {
    for c in &o.certificates {
        println!(
            "certificate {}: installed ({:?}, {} reload(s))",
            c.name, c.installed, c.reloads
        );
    }
    if let Some(a) = &o.apply {
        println!(
            "apply: {}: {} ({} check(s), {} reload(s))",
            a.outcome.as_str(),
            a.message,
            a.checks,
            a.reloads
        );
    }
    if let Some(b) = &o.blocks {
        println!(
            "blocks: {} added (enforcement: {:?})",
            b.results.len(),
            b.enforcement
        );
    }
}
