//! `hapctl token add|ls|rm|rotate`: named API tokens and their scopes (docs/access.md). A
//! secret is printed once, by `add` and `rotate`, and stored only as its hash.

use std::path::Path;

use clap::Subcommand;

use hapctl::model::{Scopes, TokenName};

use super::{open, output, Failure, JsonOut};

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Add a token and print its secret, once: SCOPE is read, blocks, domains, certs, deliver
    /// or admin (comma-separated for several).
    Add {
        name: String,
        #[arg(long, value_name = "SCOPE[,SCOPE…]")]
        scope: String,
        /// It stops working after this long (e.g. 30d); default: never.
        #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
        expires: Option<std::time::Duration>,
    },
    /// List the tokens: name, scopes, creation and expiry (never a secret).
    Ls(JsonOut),
    /// Remove a token; requests with it are refused at once.
    Rm { name: String },
    /// Give a token a new secret (printed once); the old one stops working at once. For
    /// `default`, [api] token_file is rewritten too.
    Rotate { name: String },
}

pub fn run(dir: &Path, cmd: TokenCommand) -> Result<u8, Failure> {
    let access = open(dir)?.access(true)?;
    match cmd {
        TokenCommand::Add {
            name,
            scope,
            expires,
        } => {
            let name: TokenName = name.parse()?;
            let scopes: Scopes = scope.parse()?;
            let now = hapctl::clock::unix_now();
            let expires_at = expires.map(|d| now.saturating_add(d.as_secs() as i64));
            let secret = access.add(name.clone(), scopes.clone(), expires_at)?;
            eprintln!("token {name} added with scopes {scopes}; its secret, shown only now:");
            println!("{}", secret.reveal());
        }
        TokenCommand::Ls(out) => {
            let tokens = access.list(hapctl::clock::unix_now())?;
            if out.json {
                output::print_json(&tokens);
            } else {
                for t in tokens {
                    let expiry = match (t.expires_at, t.expired) {
                        (None, _) => "never expires".to_string(),
                        (Some(at), false) => format!("expires at {at} (unix)"),
                        (Some(at), true) => format!("EXPIRED at {at} (unix)"),
                    };
                    println!("{}\t{}\t{expiry}", t.name, t.scopes);
                }
            }
        }
        TokenCommand::Rm { name } => {
            let name: TokenName = name.parse()?;
            access.remove(&name)?;
            eprintln!("token {name} removed");
        }
        TokenCommand::Rotate { name } => {
            let name: TokenName = name.parse()?;
            let secret = access.rotate(&name)?;
            eprintln!(
                "token {name} has a new secret, shown only now; the old one no longer works:"
            );
            println!("{}", secret.reveal());
        }
    }
    Ok(0)
}
