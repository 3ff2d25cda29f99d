//! `hapctl deliver`, `rollback`, `boot` and `generations`: the generations of each app.

use std::path::Path;

use clap::Args;

use hapctl::edge::{Edge, FleetDelivery};
use hapctl::fleet::deliveries::{Kind, Outcome};
use hapctl::model::{AppName, Version};

use super::{open, output, Failure, JsonFlag, JsonOut};

#[derive(Args)]
pub struct DeliverArgs {
    version: String,
    /// The app (default: the only [[app]] of the settings).
    #[arg(long)]
    app: Option<String>,
    #[command(flatten)]
    fleet: FleetArgs,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Args)]
pub struct RollbackArgs {
    #[arg(long)]
    app: Option<String>,
    #[command(flatten)]
    fleet: FleetArgs,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Args)]
struct FleetArgs {
    /// On every running edge of the fleet, edge by edge, each cutover proved; the first
    /// failure stops it and rolls back the edges already cut over (docs/fleet.md).
    #[arg(long)]
    fleet: bool,
    /// With --fleet: edges delivering at once.
    #[arg(long, default_value_t = 1, requires = "fleet", value_parser = clap::value_parser!(u16).range(1..=64))]
    parallel: u16,
}

pub fn deliver(dir: &Path, args: DeliverArgs) -> Result<u8, Failure> {
    let version: Version = args.version.parse()?;
    if args.fleet.fleet {
        return fleet(
            dir,
            args.app,
            Kind::Deliver,
            Some(version),
            &args.fleet,
            args.out.json,
        );
    }
    let (mut edge, app) = open_for_app(dir, args.app)?;
    let report = edge.deliver(&app, &version, &mut output::step_printer(args.out.json))?;
    Ok(output::print_delivery(&report, args.out.json))
}

pub fn rollback(dir: &Path, args: RollbackArgs) -> Result<u8, Failure> {
    if args.fleet.fleet {
        return fleet(
            dir,
            args.app,
            Kind::Rollback,
            None,
            &args.fleet,
            args.out.json,
        );
    }
    let (mut edge, app) = open_for_app(dir, args.app)?;
    let report = edge.rollback(&app, &mut output::step_printer(args.out.json))?;
    Ok(output::print_delivery(&report, args.out.json))
}

/// A delivery or rollback edge by edge; exit 9 (as `hapctl prove`) when it stopped.
fn fleet(
    dir: &Path,
    app: Option<String>,
    kind: Kind,
    version: Option<Version>,
    args: &FleetArgs,
    json: bool,
) -> Result<u8, Failure> {
    let app = app.map(|a| a.parse::<AppName>()).transpose()?;
    let mut progress = |edge: &str, o: &Outcome| {
        if !json {
            println!(
                "{edge}: {:?} {} → {}: {}",
                o.state,
                o.from.as_deref().unwrap_or("-"),
                o.to.as_deref().unwrap_or("-"),
                o.message
            );
        }
    };
    let summary = open(dir)?.deliver_fleet(FleetDelivery {
        app,
        kind,
        version,
        parallel: usize::from(args.parallel),
        progress: &mut progress,
    })?;
    if json {
        output::print_json(&summary);
    } else {
        println!("fleet {kind:?} of {}: {}", summary.asked.app, summary.state);
        for (edge, state) in &summary.edges {
            println!("  {edge}: {state}");
        }
    }
    Ok(if summary.state == "delivered" {
        0
    } else {
        hapctl::prove::EXIT_CHECK_FAILED
    })
}

pub fn boot(dir: &Path) -> Result<u8, Failure> {
    let problems = open(dir)?.boot(&mut output::step_printer(false))?;
    for p in &problems {
        eprintln!("problem: {p}");
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}

pub fn generations(dir: &Path, out: JsonOut) -> Result<u8, Failure> {
    output::print_generations(&open(dir)?.generations()?, out.json);
    Ok(0)
}

/// The edge and the app `--app` names (or the only one). The name is parsed before the state
/// directory is opened, so a bad name is exit 2 even without a state directory.
fn open_for_app(dir: &Path, app: Option<String>) -> Result<(Edge, AppName), Failure> {
    let app = app.map(|a| a.parse::<AppName>()).transpose()?;
    let edge = open(dir)?;
    let app = edge.resolve_app(app)?;
    Ok((edge, app))
}
