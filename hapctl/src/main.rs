//! The `hapctl` binary: parses the command line and hands it to `cli`, which calls the edge
//! services and prints the results.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cli::output::init_logging(cli.log_json);
    match cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("error: {}", cli::describe_chain(&f.error));
            ExitCode::from(f.code)
        }
    }
}
