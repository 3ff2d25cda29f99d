//! `hapctl alerts test`: one alert of each kind, firing, to every webhook and e-mail address of
//! `[alerts]`, to see that they arrive (and what they look like).

use std::path::Path;

use clap::Subcommand;

use hapctl::alerts::{samples, Notice, Sender, State};
use hapctl::settings::Settings;

use super::Failure;

#[derive(Subcommand)]
pub enum AlertsCommand {
    /// Send one alert of each kind (marked as a test) to every target of [alerts].
    Test,
}

pub fn run(dir: &Path, cmd: AlertsCommand) -> Result<u8, Failure> {
    let AlertsCommand::Test = cmd;
    let settings = Settings::load(dir)?;
    let Some(alerts) = &settings.alerts else {
        return Err(anyhow::anyhow!(
            "no [alerts] in hapctl.toml: set a webhook or smtp and email_to (docs/alerts.md)"
        )
        .into());
    };
    let sender = Sender::new(alerts)?;
    let edge = hapctl::alerts::edge_name(&settings);
    let mut failed = 0;
    for alert in samples() {
        let notice = Notice {
            state: State::Firing,
            alert,
            edge: edge.clone(),
            at: hapctl::clock::unix_now(),
        };
        for d in sender.send(&notice) {
            match d.result {
                Ok(()) => println!("{} → {}: sent", notice.alert.kind.as_str(), d.target),
                Err(e) => {
                    failed += 1;
                    eprintln!("{} → {}: {e}", notice.alert.kind.as_str(), d.target);
                }
            }
        }
    }
    Ok(u8::from(failed > 0))
}
