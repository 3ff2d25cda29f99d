//! `hapctl haproxy adopt`: hapctl takes over an HAProxy that a systemd unit runs.
//!
//! A reload re-reads the files on the master's own command line. When that line already
//! loads hapctl's files (a stock Debian unit, `-f /etc/haproxy/haproxy.cfg`, with hapctl's
//! generation file still empty), adopting is one checked reload: no restart, no gap. When it
//! does not (the lab's extra `-f generation.cfg`), the unit must change, and the order below
//! keeps what a restart or a reboot would start valid at every moment:
//! 1. an absent file of the new command line is created empty (a comment), so the new line
//!    can load today's files;
//! 2. `haproxy -c` of the new command line, on the files as they are now;
//! 3. the drop-in (with its own `ExecStartPre` check), then `systemctl daemon-reload`;
//! 4. one `systemctl restart` (the only gap), waiting for the new master's worker;
//! 5. the normal apply: hapctl's files, checked, reloaded through the master socket.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::apply::{ApplyError, ApplyReport, Snapshot};
use crate::fsutil;
use crate::haproxy::{
    has_configuration, systemctl, ConfigVerdict, MasterCommand, MasterLayout, SupervisorError,
    Validator,
};
use crate::render::{self, FileId};
use crate::settings::{Mode, Settings};

use super::{io_err, Edge, EdgeError};

/// Where systemd reads administrator drop-ins.
const SYSTEMD_DIR: &str = "/etc/systemd/system";
const SYSTEMCTL_TIMEOUT: Duration = Duration::from_secs(30);
/// The empty file of step 1: a comment, so it declares nothing.
const PLACEHOLDER: &[u8] =
    b"# Created empty by `hapctl haproxy adopt`; hapctl's next apply writes it.\n";

/// What an adoption did (or, dry, would do), step by step.
#[derive(Debug, Default)]
pub struct Adoption {
    pub steps: Vec<String>,
    /// Whether HAProxy was restarted (the unit had to change).
    pub restarted: bool,
    /// The final apply (absent on a dry run).
    pub apply: Option<ApplyReport>,
}

impl Edge {
    /// Adopts the HAProxy the configured unit runs; `dry_run` checks and tells, changes
    /// nothing.
    pub fn adopt(&mut self, dry_run: bool) -> Result<Adoption, EdgeError> {
        let unit = self.settings.haproxy.systemd_unit.clone();
        let (pid, running) = self.unit_master(&unit)?;
        let mut out = Adoption::default();
        out.steps.push(format!(
            "{unit} runs master PID {pid}: {}",
            running.argv.join(" ")
        ));

        let state = self.state()?;
        let new = Snapshot::from_set(
            render::render(&state, &self.settings, &self.templates).map_err(ApplyError::from)?,
        );
        let files: Vec<PathBuf> = [FileId::Config, FileId::Generation]
            .map(|id| id.path(&self.settings.paths))
            .to_vec();
        let ours: Vec<(&Path, bool)> = [FileId::Config, FileId::Generation]
            .iter()
            .zip(&files)
            .map(|(id, path)| (path.as_path(), new.get(*id).is_some_and(has_configuration)))
            .collect();
        match running.layout(&ours) {
            MasterLayout::Fits => {
                out.steps
                    .push("it loads hapctl's files: one checked reload, no restart".into());
                if !dry_run {
                    out.apply = Some(self.apply("haproxy adopt (reload only)")?);
                }
                return Ok(out);
            }
            MasterLayout::Differs { foreign, .. } if !foreign.is_empty() => {
                let list: Vec<String> = foreign.iter().map(|f| f.display().to_string()).collect();
                return refuse(format!("{unit} also loads {}, which hapctl does not write: what they serve would stop. Move it into hapctl (`hapctl import-legacy`, `hapctl domain add`), take them off the unit's command line, then adopt again", list.join(", ")));
            }
            MasterLayout::Differs { missing, .. } => {
                let list: Vec<String> = missing.iter().map(|f| f.display().to_string()).collect();
                out.steps.push(format!(
                    "it does not load {}: the unit must change, and HAProxy restart once",
                    list.join(", ")
                ));
            }
        }
        out.steps.push(self.check_command_line(&files, dry_run)?);
        self.change_unit(&unit, pid, dry_run, &mut out)?;
        Ok(out)
    }

    /// The master PID and command line of the HAProxy the unit runs (systemd mode only).
    fn unit_master(&self, unit: &str) -> Result<(i32, MasterCommand), EdgeError> {
        if self.settings.haproxy.mode != Mode::Systemd {
            return refuse("adopt is for an HAProxy a systemd unit runs ([haproxy] mode = \"systemd\"); in direct mode hapctl starts HAProxy itself: `hapctl haproxy start`".into());
        }
        let Some(pid) = self.supervisor().master_pid() else {
            return refuse(format!(
                "{unit} runs no HAProxy: start it (`systemctl start {unit}`) and adopt again"
            ));
        };
        let running = MasterCommand::read(pid).map_err(io_err(format!(
            "cannot read the command line of HAProxy's master (PID {pid})"
        )))?;
        Ok((pid, running))
    }

    /// Steps 1 and 2: `haproxy -c` of the new command line on today's files, absent ones
    /// created empty first (not on a dry run; removed again when the check fails). Answers
    /// the step's line.
    fn check_command_line(&self, files: &[PathBuf], dry_run: bool) -> Result<String, EdgeError> {
        let started = Instant::now();
        let created = if dry_run {
            Vec::new()
        } else {
            create_placeholders(files)?
        };
        let present: Vec<&Path> = files
            .iter()
            .map(PathBuf::as_path)
            .filter(|f| f.exists())
            .collect();
        let verdict = Validator::from_settings(&self.settings).check(&present);
        if !matches!(verdict, ConfigVerdict::Valid) {
            for f in &created {
                let _ = fsutil::remove_durable(f);
            }
            let why = match verdict {
                ConfigVerdict::Invalid { messages } => messages.join(" | "),
                ConfigVerdict::Unavailable { reason } => {
                    format!("haproxy -c could not run: {reason}")
                }
                ConfigVerdict::Valid => unreachable!(),
            };
            return refuse(format!("HAProxy refuses the new command line on the files as they are now ({why}); nothing was changed: fix the files, then adopt again"));
        }
        // An absent file is created empty (a comment) before the restart: checking without
        // it is checking with it.
        let absent: Vec<String> = files
            .iter()
            .filter(|f| !present.contains(&f.as_path()) || created.contains(f))
            .map(|f| f.display().to_string())
            .collect();
        Ok(format!(
            "checked the new command line on today's files (`haproxy -c -f {}`{}): valid, {} ms",
            files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" -f "),
            if absent.is_empty() {
                String::new()
            } else if dry_run {
                format!("; {} would be created empty first", absent.join(", "))
            } else {
                format!("; {} created empty first", absent.join(", "))
            },
            started.elapsed().as_millis()
        ))
    }

    /// Steps 3 to 5 (a dry run only says them): the drop-in, `systemctl daemon-reload`, one
    /// restart of the unit replacing master `pid`, and the apply.
    fn change_unit(
        &mut self,
        unit: &str,
        pid: i32,
        dry_run: bool,
        out: &mut Adoption,
    ) -> Result<(), EdgeError> {
        let drop_in = drop_in_path(unit);
        let text = drop_in_text(&self.settings);
        if dry_run {
            out.steps.push(format!(
                "would write {}:\n{text}then `systemctl daemon-reload`, `systemctl restart {unit}` once, and apply with a reload",
                drop_in.display()
            ));
            return Ok(());
        }
        if let Some(dir) = drop_in.parent() {
            std::fs::create_dir_all(dir)
                .map_err(io_err(format!("cannot create {}", dir.display())))?;
        }
        fsutil::write_atomic(&drop_in, text.as_bytes(), 0o644)
            .map_err(io_err(format!("cannot write {}", drop_in.display())))?;
        systemctl::daemon_reload(SYSTEMCTL_TIMEOUT).map_err(SupervisorError::from)?;
        out.steps
            .push(format!("wrote {} and reloaded systemd", drop_in.display()));

        let restart = Instant::now();
        systemctl::systemctl("restart", &[], unit, self.settings.haproxy.start_timeout)
            .map_err(SupervisorError::from)?;
        let new_pid = wait_for_new_master(self, pid)?;
        out.restarted = true;
        out.steps.push(format!(
            "restarted {unit}: master PID {pid} → {new_pid}, a worker answers after {} ms",
            restart.elapsed().as_millis()
        ));
        out.apply = Some(self.apply("haproxy adopt (after the unit change)")?);
        Ok(())
    }
}

/// An adoption refused or stopped; `why` says why and what to do.
fn refuse<T>(why: String) -> Result<T, EdgeError> {
    Err(EdgeError::Adopt(why))
}

/// Creates each absent file empty (step 1); returns those it created.
fn create_placeholders(files: &[PathBuf]) -> Result<Vec<PathBuf>, EdgeError> {
    let mut created = Vec::new();
    for file in files.iter().filter(|f| !f.exists()) {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(io_err(format!("cannot create {}", dir.display())))?;
        }
        fsutil::write_atomic(file, PLACEHOLDER, fsutil::DEFAULT_MODE)
            .map_err(io_err(format!("cannot write {}", file.display())))?;
        created.push(file.clone());
    }
    Ok(created)
}

fn drop_in_path(unit: &str) -> PathBuf {
    Path::new(SYSTEMD_DIR)
        .join(format!("{unit}.d"))
        .join("hapctl.conf")
}

/// The unit's new command lines: hapctl's files, its master socket and pidfile. The empty
/// `ExecStart=` lines clear the stock unit's, as systemd requires to replace them.
fn drop_in_text(settings: &Settings) -> String {
    let paths = &settings.paths;
    let binary = settings.haproxy.binary.display();
    let files = paths
        .config_files()
        .iter()
        .map(|f| format!("-f {}", f.display()))
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "# Written by `hapctl haproxy adopt`: HAProxy loads hapctl's files and opens the master\n\
         # socket hapctl reloads through. Remove this file to give the unit back its own lines.\n\
         [Service]\n\
         ExecStartPre=\n\
         ExecStartPre={binary} -c -q {files}\n\
         ExecStart=\n\
         ExecStart={binary} -Ws -S {socket},level,admin {files} -p {pidfile}\n\
         ExecReload=\n\
         ExecReload={binary} -c -q {files}\n\
         ExecReload=/bin/kill -USR2 $MAINPID\n",
        socket = paths.master_socket.display(),
        pidfile = paths.pidfile.display(),
    )
}

/// Waits (bounded by the start timeout) for a master other than `old` that lists a worker.
fn wait_for_new_master(edge: &Edge, old: i32) -> Result<i32, EdgeError> {
    let timeout = edge.settings.haproxy.start_timeout;
    let deadline = Instant::now() + timeout;
    let master = edge.supervisor().master();
    loop {
        if let Ok(procs) = master.show_proc() {
            if procs.master.pid != old && !procs.workers.is_empty() {
                return Ok(procs.master.pid);
            }
        }
        if Instant::now() >= deadline {
            return Err(EdgeError::Adopt(format!(
                "after `systemctl restart {}`, no new master answered on {} within {timeout:?}: see `systemctl status {0}` and `journalctl -u {0}`",
                edge.settings.haproxy.systemd_unit,
                edge.settings.paths.master_socket.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_replaces_the_stock_command_lines() {
        let dir = tempfile::tempdir().unwrap();
        let toml = "[haproxy]\nmode = \"systemd\"\nbinary = \"/usr/sbin/haproxy\"\n[paths]\nconfig = \"/etc/haproxy/haproxy.cfg\"\ngeneration = \"/etc/haproxy/generation.cfg\"\nmaster_socket = \"/run/haproxy-master.sock\"\npidfile = \"/run/haproxy.pid\"\n";
        std::fs::write(dir.path().join(crate::settings::SETTINGS_FILE), toml).unwrap();
        let settings = Settings::load(dir.path()).unwrap();
        let text = drop_in_text(&settings);
        // HAPCTL_HAPROXY_BIN (another version under test) overrides the binary.
        let bin = settings.haproxy.binary.display();
        let files = "-f /etc/haproxy/haproxy.cfg -f /etc/haproxy/generation.cfg";
        assert!(text.contains(&format!("ExecStart=\nExecStart={bin} -Ws -S /run/haproxy-master.sock,level,admin {files} -p /run/haproxy.pid\n")), "{text}");
        assert!(text.contains(&format!("ExecStartPre={bin} -c -q {files}\n")));
        assert!(text.contains(&format!(
            "ExecReload=\nExecReload={bin} -c -q {files}\nExecReload=/bin/kill -USR2 $MAINPID\n"
        )));
        assert_eq!(
            drop_in_path("haproxy.service"),
            Path::new("/etc/systemd/system/haproxy.service.d/hapctl.conf")
        );
    }

    #[test]
    fn the_shipped_drop_in_is_what_adopt_writes_for_the_debian_layout() {
        let dir = tempfile::tempdir().unwrap();
        crate::edge::init(dir.path(), false, crate::edge::Layout::Debian, None).unwrap();
        let mut settings = Settings::load(dir.path()).unwrap();
        // HAPCTL_HAPROXY_BIN (another version under test) overrides the binary.
        settings.haproxy.binary = "/usr/sbin/haproxy".into();
        let shipped = include_str!("../../../dist/haproxy.service.d-hapctl.conf");
        assert_eq!(drop_in_text(&settings), shipped);
    }

    #[test]
    fn placeholders_declare_nothing() {
        assert!(!has_configuration(PLACEHOLDER));
        let dir = tempfile::tempdir().unwrap();
        let present = dir.path().join("haproxy.cfg");
        std::fs::write(&present, "global\n").unwrap();
        let absent = dir.path().join("sub/generation.cfg");
        let created = create_placeholders(&[present.clone(), absent.clone()]).unwrap();
        assert_eq!(created, vec![absent.clone()]);
        assert_eq!(std::fs::read(&present).unwrap(), b"global\n");
        assert_eq!(std::fs::read(&absent).unwrap(), PLACEHOLDER);
    }
}
