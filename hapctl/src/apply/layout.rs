//! Before an apply writes anything: does the running master load the files hapctl checks?
//!
//! A reload re-reads the files on the master's own command line. When that list differs from
//! hapctl's (a stock unit without hapctl's generation file, or an extra `-f` of the
//! operator's), a reload would serve something `haproxy -c` never saw, or fail. Such an apply
//! stops before its first write and says what to do.

use std::path::{Path, PathBuf};

use crate::haproxy::{has_configuration, MasterCommand, MasterLayout};
use crate::render::FileId;
use crate::settings::{Mode, Settings};

use super::snapshot::Snapshot;

/// The running master (PID `pid`) does not load what this apply would check.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.0))]
pub struct LayoutMismatch(Box<Mismatch>);

#[derive(Debug)]
struct Mismatch {
    running: MasterCommand,
    ours: Vec<PathBuf>,
    missing: Vec<PathBuf>,
    foreign: Vec<PathBuf>,
    mode: Mode,
    unit: String,
}

/// The files a reload of the running master would load, against the set `new`.
pub fn check(settings: &Settings, new: &Snapshot, master_pid: i32) -> Result<(), LayoutMismatch> {
    // Unreadable (another user's process without /proc access): nothing to compare with; the
    // reload's own confirmation still catches a master that fails to load the set.
    let Ok(running) = MasterCommand::read(master_pid) else {
        return Ok(());
    };
    let ours: Vec<(PathBuf, bool)> = [FileId::Config, FileId::Generation]
        .into_iter()
        .map(|id| {
            let content = new.get(id).is_some_and(has_configuration);
            (id.path(&settings.paths), content)
        })
        .collect();
    let refs: Vec<(&Path, bool)> = ours.iter().map(|(p, c)| (p.as_path(), *c)).collect();
    match running.layout(&refs) {
        MasterLayout::Fits => Ok(()),
        MasterLayout::Differs { missing, foreign } => Err(LayoutMismatch(Box::new(Mismatch {
            running,
            ours: ours.into_iter().map(|(p, _)| p).collect(),
            missing,
            foreign,
            mode: settings.haproxy.mode,
            unit: settings.haproxy.systemd_unit.clone(),
        }))),
    }
}

fn describe(m: &Mismatch) -> String {
    let list = |files: &[PathBuf]| {
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut why = Vec::new();
    if !m.missing.is_empty() {
        why.push(format!("it does not load {}", list(&m.missing)));
    }
    if !m.foreign.is_empty() {
        why.push(format!(
            "it also loads {}, which hapctl does not write",
            list(&m.foreign)
        ));
    }
    let next = match m.mode {
        Mode::Systemd => format!(
            "run `hapctl haproxy adopt`: it checks the command line {} will run with `haproxy -c`, installs it as a drop-in and restarts HAProxy once",
            m.unit
        ),
        Mode::Direct => "restart HAProxy with hapctl's files: `hapctl haproxy stop` then `hapctl haproxy start`".into(),
    };
    format!(
        "the running HAProxy (master PID {}: `{}`) was not started with hapctl's files ({}): {}. A reload re-reads only the master's own files, so it would not serve what hapctl checks; no configuration file was written. Next: {next}",
        m.running.pid,
        m.running.argv.join(" "),
        list(&m.ours),
        why.join("; "),
    )
}
