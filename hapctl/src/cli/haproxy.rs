//! `hapctl haproxy start|stop|status|reload`: the HAProxy master.

use std::path::Path;

use clap::Subcommand;

use super::{open, output, Failure, JsonOut};

#[derive(Subcommand)]
pub enum HaproxyCommand {
    /// Apply the desired state, then start the master (never a second one).
    Start,
    /// Stop the master and its workers; a running `hapctl serve` leaves it stopped.
    Stop,
    /// Master PID, workers, version, and whether `hapctl serve` supervises it.
    Status(JsonOut),
    /// Reload through the master (never a restart) and confirm the new worker.
    Reload,
    /// Take over the HAProxy a systemd unit runs: one checked reload when the unit already
    /// loads hapctl's files; otherwise check the unit's new command line, install it as a
    /// drop-in, restart once, then apply.
    Adopt {
        /// Check and tell what would be done; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

pub fn run(dir: &Path, cmd: HaproxyCommand) -> Result<u8, Failure> {
    let mut edge = open(dir)?;
    match cmd {
        HaproxyCommand::Start => match edge.apply_and_start("haproxy start")? {
            (_, Some(started)) => {
                println!("HAProxy master running, PID {}", started.master_pid);
                Ok(0)
            }
            (report, None) => Ok(output::print_report(&report, false)),
        },
        HaproxyCommand::Stop => {
            edge.stop_haproxy()?;
            println!("HAProxy stopped; `hapctl serve` will not start it again until `hapctl haproxy start`");
            Ok(0)
        }
        HaproxyCommand::Status(out) => {
            let supervision = edge.supervision();
            output::print_haproxy_status(&edge.supervisor().status(), &supervision, out.json);
            Ok(0)
        }
        HaproxyCommand::Adopt { dry_run } => {
            let adoption = edge.adopt(dry_run)?;
            for step in &adoption.steps {
                println!("{step}");
            }
            Ok(adoption
                .apply
                .map_or(0, |report| output::print_report(&report, false)))
        }
        HaproxyCommand::Reload => {
            let r = edge.reload_haproxy("hapctl haproxy reload")?.report;
            println!(
                "reloaded in {:.0} ms: master PID {} unchanged, new worker(s) {:?}, old worker(s) {:?}",
                r.duration.as_secs_f64() * 1000.0,
                r.master_pid,
                r.new_workers,
                r.old_workers
            );
            Ok(0)
        }
    }
}
