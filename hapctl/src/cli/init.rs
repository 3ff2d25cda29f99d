//! `hapctl init`: the state directory.

use std::path::Path;

use clap::Args;

use hapctl::edge;

use super::Failure;

#[derive(Args)]
pub struct InitArgs {
    /// Reset existing state (the database is deleted).
    #[arg(long)]
    force: bool,
    /// Public HTTP listener, IP:PORT (default 127.0.0.1:8080).
    #[arg(long)]
    http_bind: Option<String>,
}

pub fn run(dir: &Path, args: InitArgs) -> Result<u8, Failure> {
    let path = edge::init(dir, args.force, args.http_bind.as_deref()).map_err(|e| match e {
        // Only --http-bind can make the built-in settings invalid: input, exit 2.
        edge::EdgeError::Settings(_) => Failure::input(e),
        e => e.into(),
    })?;
    println!(
        "initialised {}; next: hapctl --state-dir {} haproxy start",
        path.display(),
        dir.display()
    );
    Ok(0)
}
