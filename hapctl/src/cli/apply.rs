//! `hapctl apply` and `hapctl status`: the safe apply and what it left behind.

use std::path::Path;

use clap::Args;

use super::{open, output, Failure, JsonOut};

#[derive(Args)]
pub struct ApplyArgs {
    /// Show the diff and HAProxy's verdict; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Move the domains added at runtime (in slot backends) to backends of their own, and
    /// size the spare slots again: one check, one reload.
    #[arg(long, conflicts_with = "dry_run")]
    compact: bool,
    #[arg(long)]
    json: bool,
}

pub fn run(dir: &Path, args: ApplyArgs) -> Result<u8, Failure> {
    let mut edge = open(dir)?;
    if args.dry_run {
        let dry = edge.dry_run()?;
        output::print_dry_run(&dry, args.json);
        return Ok(if dry.verdict == "valid" { 0 } else { 3 });
    }
    let report = if args.compact {
        edge.compact()?
    } else {
        edge.apply("apply")?
    };
    Ok(output::print_report(&report, args.json))
}

pub fn status(dir: &Path, out: JsonOut) -> Result<u8, Failure> {
    let status = open(dir)?.status(5)?;
    output::print_status(&status, out.json);
    Ok(0)
}
