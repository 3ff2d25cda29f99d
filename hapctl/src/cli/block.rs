//! `hapctl block add|rm|ls`: blocked IP addresses and networks (the block fast path).

use std::path::Path;

use clap::Subcommand;

use hapctl::blocks::{BlockChange, ChangeResult};
use hapctl::edge::Edge;
use hapctl::model::{BlockKey, Note, Ttl};

use super::{open, output, Failure, JsonFlag, JsonOut};

#[derive(Subcommand)]
pub enum BlockCommand {
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
    Ls(JsonOut),
}

pub fn run(dir: &Path, cmd: BlockCommand) -> Result<u8, Failure> {
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
        BlockCommand::Ls(out) => {
            output::print_blocks(&open(dir)?.blocks()?, out.json);
            Ok(0)
        }
    }
}
