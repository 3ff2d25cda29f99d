//! `hapctl deliver`, `rollback`, `boot` and `generations`: the generations of each app.

use std::path::Path;

use clap::Args;

use hapctl::edge::Edge;
use hapctl::model::{AppName, Version};

use super::{open, output, Failure, JsonFlag, JsonOut};

#[derive(Args)]
pub struct DeliverArgs {
    version: String,
    /// The app (default: the only [[app]] of the settings).
    #[arg(long)]
    app: Option<String>,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Args)]
pub struct RollbackArgs {
    #[arg(long)]
    app: Option<String>,
    #[command(flatten)]
    out: JsonFlag,
}

pub fn deliver(dir: &Path, args: DeliverArgs) -> Result<u8, Failure> {
    let version: Version = args.version.parse()?;
    let (mut edge, app) = open_for_app(dir, args.app)?;
    let report = edge.deliver(&app, &version, &mut output::step_printer(args.out.json))?;
    Ok(output::print_delivery(&report, args.out.json))
}

pub fn rollback(dir: &Path, args: RollbackArgs) -> Result<u8, Failure> {
    let (mut edge, app) = open_for_app(dir, args.app)?;
    let report = edge.rollback(&app, &mut output::step_printer(args.out.json))?;
    Ok(output::print_delivery(&report, args.out.json))
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
