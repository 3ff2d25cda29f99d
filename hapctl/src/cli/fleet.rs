//! `hapctl fleet publish|status|leave`: this edge and the fleet it shares its state with
//! (docs/fleet.md).

use std::path::Path;

use anyhow::Context;
use clap::Subcommand;

use hapctl::fleet::seal::FleetKey;
use hapctl::fleet::status::FleetView;
use hapctl::settings::{without_fleet, SETTINGS_FILE};

use super::{open, output, Failure, JsonOut};

#[derive(Subcommand)]
pub enum FleetCommand {
    /// Make this edge's desired state the fleet's: the first edge of a fleet does it once;
    /// the others join by starting `hapctl serve` with the same [fleet] section.
    Publish(JsonOut),
    /// Every edge of the fleet: the revision it applied beside the fleet's, whether it lags,
    /// what it refused, its HAProxy's health.
    Status(JsonOut),
    /// Leave the fleet: remove [fleet] from hapctl.toml and this edge's status key. The edge
    /// keeps the state it applied last, alone; restart `hapctl serve` after.
    Leave,
    /// Make the fleet key ([fleet] key_file), which seals certificates' private keys in etcd:
    /// once, on one edge; then copy the file (mode 0600) to every edge.
    Key,
}

pub fn run(dir: &Path, cmd: FleetCommand) -> Result<u8, Failure> {
    match cmd {
        FleetCommand::Publish(out) => {
            let published = open(dir)?.publish_fleet()?;
            if out.json {
                output::print_json(&published);
            } else {
                println!(
                    "published {} objects and {} certificates as the fleet's state (revision {}); start `hapctl serve` on every edge",
                    published.objects, published.certificates, published.revision
                );
            }
        }
        FleetCommand::Status(out) => {
            let view = open(dir)?.fleet_view()?;
            if out.json {
                output::print_json(&view);
            } else {
                print_view(&view);
            }
        }
        FleetCommand::Leave => leave(dir)?,
        FleetCommand::Key => make_key(dir)?,
    }
    Ok(0)
}

fn make_key(dir: &Path) -> Result<(), Failure> {
    let settings = hapctl::settings::Settings::load(dir)?;
    let Some(fleet) = &settings.fleet else {
        return Err(Failure::input(anyhow::anyhow!(
            "this edge is in no fleet: add a [fleet] section to hapctl.toml first (docs/fleet.md)"
        )));
    };
    let path = &fleet.key_file;
    let key = FleetKey::create(path).map_err(Failure::input)?;
    println!(
        "made the fleet key {} (id {}); copy it to every edge's [fleet] key_file, mode 0600",
        path.display(),
        key.id()
    );
    Ok(())
}

fn leave(dir: &Path) -> Result<(), Failure> {
    let path = dir.join(SETTINGS_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let Some(alone) = without_fleet(&text) else {
        return Err(Failure::input(anyhow::anyhow!(
            "{} has no [fleet] section: this edge is in no fleet",
            path.display()
        )));
    };
    // The status key goes first: with etcd down, the settings are still left as they were.
    open(dir)?.leave_fleet()?;
    hapctl::fsutil::write_atomic(&path, alone.as_bytes(), hapctl::fsutil::DEFAULT_MODE)
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!(
        "left the fleet; restart `hapctl serve`: this edge serves the state it applied last, alone"
    );
    Ok(())
}

fn print_view(view: &FleetView) {
    let state = if view.published {
        ""
    } else {
        " (not published: `hapctl fleet publish`)"
    };
    println!("fleet revision {}{state}", view.revision);
    if let Some(r) = &view.rollout {
        let at = r
            .revision
            .map(|v| format!(" at revision {v}"))
            .unwrap_or_default();
        let state = serde_json::to_value(r.state).unwrap_or_default();
        println!(
            "last reload rollout: {} on canary {}{at}: {}",
            state.as_str().unwrap_or_default(),
            r.canary,
            r.message.lines().next().unwrap_or_default()
        );
    }
    if let Some(d) = &view.delivery {
        let asked = &d.asked;
        let version = asked
            .version
            .as_ref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        println!(
            "last fleet delivery: {:?}{version} of {} by {}: {}",
            asked.kind, asked.app, asked.by, d.state
        );
        for (edge, state) in &d.edges {
            println!("  {edge}: {state}");
        }
    }
    println!(
        "{:<16} {:>9} {:<8} {:<10} message",
        "edge", "applied", "lagging", "haproxy"
    );
    for e in &view.edges {
        let r = &e.report;
        println!(
            "{:<16} {:>9} {:<8} {:<10} {}",
            r.name,
            r.applied_revision,
            if e.lagging { "yes" } else { "no" },
            if r.haproxy == "ok" { "ok" } else { "PROBLEM" },
            r.message
        );
        if let Some((rev, why)) = &r.refused {
            println!("{:<16} refused revision {rev}: {why}", "");
        }
        if r.haproxy != "ok" {
            println!("{:<16} haproxy: {}", "", r.haproxy);
        }
        for (app, version) in &r.generations {
            println!("{:<16} {app} {version} live", "");
        }
    }
}
