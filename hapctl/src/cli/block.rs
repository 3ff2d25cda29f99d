//! `hapctl block add|rm|ls`: blocked IP addresses and networks (the block fast path). A block
//! or unblock goes to the running daemon when there is one (`forward.rs`), which keeps the key
//! set in memory.

use std::path::Path;

use clap::Subcommand;
use serde_json::Value;

use hapctl::blocks::{BlockChange, BlockReport, ChangeResult};
use hapctl::contract::{BlockQuery, BlockRequest};
use hapctl::edge::Edge;
use hapctl::model::{BlockKey, Note, Ttl};

use super::{forward, open, output, Failure, JsonFlag, JsonOut};

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
    /// Rebuild the map files and the running worker's maps from the database.
    Sync,
    /// List blocks (expired ones are left out): all of them, or one page in key order when
    /// a page option is given (the next page's `--after` is printed on stderr).
    Ls {
        /// Blocks per page (1-10000).
        #[arg(long)]
        limit: Option<String>,
        /// Blocks after this key (the `--after` printed with the page before).
        #[arg(long)]
        after: Option<String>,
        /// Only blocks inside this network (an address: that block alone).
        #[arg(long)]
        prefix: Option<String>,
        /// Only blocks whose reason contains this text (ASCII case ignored).
        #[arg(long)]
        reason: Option<String>,
        /// Only blocks that expire within this long: 90s, 30m, 12h, 7d.
        #[arg(long)]
        expiring: Option<String>,
        #[command(flatten)]
        out: JsonOut,
    },
}

pub fn run(dir: &Path, cmd: BlockCommand) -> Result<u8, Failure> {
    match cmd {
        BlockCommand::Add {
            key,
            reason,
            author,
            ttl,
            out,
        } => add(dir, &key, &reason, author, ttl, out.json),
        BlockCommand::Rm { key, out } => {
            let key: BlockKey = key.parse()?;
            // The route's key is one path segment: a network's '/' goes encoded.
            let path = format!("/v1/blocked-ips/{}", key.to_string().replace('/', "%2F"));
            let report = match forward::send(dir, "DELETE", &path, &Value::Null)? {
                // The daemon answers an unblock of a key not blocked with a 404.
                Some(answer) if answer.status == 404 => BlockReport::not_found(),
                Some(answer) => answer.block_report()?,
                None => open(dir)?.change_blocks(&[BlockChange::Remove(key)])?,
            };
            output::print_block_report(&[key], &report, out.json);
            Ok(if report.results == [ChangeResult::NotFound] {
                7
            } else {
                0
            })
        }
        BlockCommand::Sync => {
            open(dir)?.sync_blocks()?;
            println!("synced: the blocked map files and the running worker's maps hold the database's blocks");
            Ok(0)
        }
        BlockCommand::Ls {
            limit,
            after,
            prefix,
            reason,
            expiring,
            out,
        } => {
            let given = [
                ("limit", limit),
                ("after", after),
                ("prefix", prefix),
                ("reason", reason),
                ("expiring", expiring),
            ];
            let pairs: Vec<(&str, &str)> = given
                .iter()
                .filter_map(|(name, v)| v.as_deref().map(|v| (*name, v)))
                .collect();
            if pairs.is_empty() {
                output::print_blocks(&open(dir)?.blocks()?, out.json);
                return Ok(0);
            }
            let query = BlockQuery::from_pairs(pairs)?;
            let page = open(dir)?.blocks_page(&query)?;
            output::print_blocks(&page.blocks, out.json);
            if let Some(next) = page.next {
                eprintln!("more: --after {next}");
            }
            Ok(0)
        }
    }
}

/// `block add`: through the daemon when one runs, else here.
fn add(
    dir: &Path,
    key: &str,
    reason: &str,
    author: Option<String>,
    ttl: Option<String>,
    json: bool,
) -> Result<u8, Failure> {
    let key: BlockKey = key.parse()?;
    let ttl = ttl.map(|t| t.parse::<Ttl>()).transpose()?;
    let reason = Note::parse("reason", reason)?;
    let author = author
        .or_else(|| std::env::var("SUDO_USER").ok())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "hapctl".into());
    let author = Note::parse("author", &author)?;
    let body = BlockRequest::new(key, &reason, &author, ttl);
    let report = match forward::send(dir, "POST", "/v1/blocked-ips", &body)? {
        Some(answer) => answer.block_report()?,
        None => {
            let block = Edge::new_block(key, reason, author, ttl);
            open(dir)?.change_blocks(&[BlockChange::Put(block)])?
        }
    };
    output::print_block_report(&[key], &report, json);
    Ok(0)
}
