//! `hapctl proxy add|rm|ls`: trusted proxies, whose forwarding headers name the real client.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use hapctl::model::{ProxyNet, ProxyPreset};

use super::{open, output, Failure, JsonFlag};

#[derive(Subcommand)]
pub enum ProxyCommand {
    /// Trust CF-Connecting-IP, X-Real-IP and X-Forwarded-For from an IP or CIDR, or from a
    /// preset's ranges (`--preset cloudflare`; again later to take a newer list with --from).
    Add {
        #[arg(required_unless_present = "preset", conflicts_with = "preset")]
        net: Option<String>,
        #[arg(long)]
        preset: Option<String>,
        /// The preset's current list, one CIDR per line (default: the list shipped with hapctl).
        #[arg(long, requires = "preset", value_name = "FILE")]
        from: Option<PathBuf>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Stop trusting an IP or CIDR, or every range of a preset.
    Rm {
        #[arg(required_unless_present = "preset", conflicts_with = "preset")]
        net: Option<String>,
        #[arg(long)]
        preset: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List trusted proxies (and the preset each comes from).
    Ls,
}

/// A list of CIDRs, one per line (`#` comments and blank lines allowed), each parsed.
fn read_list(path: &Path) -> Result<Vec<ProxyNet>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot read {}: {e}", path.display())))?;
    let nets = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.parse::<ProxyNet>())
        .collect::<Result<Vec<_>, _>>()?;
    if nets.is_empty() {
        return Err(Failure::input(anyhow::anyhow!(
            "{} lists no range; a preset needs at least one",
            path.display()
        )));
    }
    Ok(nets)
}

pub fn run(dir: &Path, cmd: ProxyCommand) -> Result<u8, Failure> {
    match cmd {
        ProxyCommand::Add {
            preset: Some(preset),
            from,
            out,
            ..
        } => {
            let preset: ProxyPreset = preset.parse()?;
            let nets = from.as_deref().map(read_list).transpose()?;
            let (report, counts) = open(dir)?.trust_preset(preset, nets)?;
            if let Some((added, removed)) = counts {
                eprintln!("preset {preset}: {added} range(s) added, {removed} removed");
            }
            Ok(output::print_report(&report, out.json))
        }
        ProxyCommand::Add { net, out, .. } => {
            let net: ProxyNet = net.unwrap_or_default().parse()?;
            let (report, _) = open(dir)?.trust_proxy(&net)?;
            Ok(output::print_report(&report, out.json))
        }
        ProxyCommand::Rm {
            preset: Some(preset),
            out,
            ..
        } => {
            let report = open(dir)?.distrust_preset(preset.parse()?)?;
            Ok(output::print_report(&report, out.json))
        }
        ProxyCommand::Rm { net, out, .. } => {
            let report = open(dir)?.distrust_proxy(&net.unwrap_or_default().parse()?)?;
            Ok(output::print_report(&report, out.json))
        }
        ProxyCommand::Ls => {
            for (net, preset) in open(dir)?.trusted_proxies()? {
                match preset {
                    Some(p) => println!("{net}\t{p}"),
                    None => println!("{net}"),
                }
            }
            Ok(0)
        }
    }
}
