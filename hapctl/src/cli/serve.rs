//! `hapctl serve`: the daemon, serving the HTTP API.

use std::net::SocketAddr;
use std::path::Path;

use clap::Args;

use hapctl::daemon::{self, ServeOptions};
use hapctl::http;

use super::Failure;

#[derive(Args)]
pub struct ServeArgs {
    /// Listen address (default: [api] listen, 127.0.0.1:9090).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Serve without a bearer token (only allowed on a loopback address).
    #[arg(long)]
    no_auth: bool,
}

pub fn run(dir: &Path, args: ServeArgs) -> Result<u8, Failure> {
    daemon::serve(
        dir,
        ServeOptions {
            listen: args.listen,
            no_auth: args.no_auth,
        },
        http::router,
    )?;
    Ok(0)
}
