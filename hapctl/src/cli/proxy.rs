//! `hapctl proxy add|rm|ls`: trusted proxies.

use std::path::Path;

use clap::Subcommand;

use hapctl::model::ProxyNet;

use super::{open, output, Failure, JsonFlag};

#[derive(Subcommand)]
pub enum ProxyCommand {
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

pub fn run(dir: &Path, cmd: ProxyCommand) -> Result<u8, Failure> {
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
