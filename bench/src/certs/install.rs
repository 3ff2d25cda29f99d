//! certs: one `hapctl cert import|rm` and what was seen around it (timed to served or not),
//! the bulk install that builds a size, and the master reload count over a stretch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::haproxy::{CliSocket, RuntimeCerts};
use hapctl::tls::x509::serial_matches;
use serde_json::{json, Value};
use testkit::Edge;

use super::edge::{served_serial, TlsEdge};
use super::pki::{Leaf, TestCa};
use super::{elapsed_ms, pct, site, PROBE_EVERY};
use crate::api::Api;
use crate::stats::ms;
use crate::sys;
use crate::Table;

/// Bound on one install, from spawn to served (and again to exit).
const INSTALL_BOUND: Duration = Duration::from_secs(30);
/// Bound on building one size by repeated `cert import`.
const BULK_BOUND: Duration = Duration::from_secs(240);

/// What one `hapctl cert import|rm --json` said, and what was seen around it.
#[derive(Debug, Clone)]
pub(super) struct Install {
    pub(super) name: String,
    /// A new name (true) or a new serial for an installed one.
    pub(super) new: bool,
    /// Spawn → a handshake with its SNI presented the new serial (measured installs only).
    pub(super) served_ms: Option<f64>,
    /// Spawn → exit.
    pub(super) exit_ms: f64,
    /// hapctl's own time (`duration_ms`).
    pub(super) duration_ms: f64,
    pub(super) installed: String,
    pub(super) report_checks: i64,
    pub(super) report_reloads: i64,
    /// Seen from outside: `haproxy -c` runs (wrapper) and master reloads (`show proc`).
    pub(super) checks: usize,
    pub(super) reloads: i64,
    pub(super) probes: u32,
    pub(super) probe_failures: u32,
}

impl Install {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "new": self.new,
            "served_ms": self.served_ms,
            "exit_ms": self.exit_ms,
            "duration_ms": self.duration_ms,
            "installed": self.installed,
            "report_checks": self.report_checks,
            "report_reloads": self.report_reloads,
            "haproxy_checks_seen": self.checks,
            "master_reloads_seen": self.reloads,
            "probes": self.probes,
            "probe_failures": self.probe_failures,
        })
    }
}

/// Picks some of the measured installs (new names, replacements, all).
pub(super) type Pick = fn(&Install) -> bool;

/// The report fields of `cert import --json` / `cert rm --json`.
pub(super) fn parse_report(
    stdout: &str,
) -> anyhow::Result<(String, f64, i64, i64, Option<String>)> {
    let v: Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the --json report is not JSON: {stdout:?}"))?;
    Ok((
        v["installed"].as_str().unwrap_or("?").to_string(),
        v["duration_ms"].as_f64().context("no duration_ms")?,
        v["checks"].as_i64().context("no checks")?,
        v["reloads"].as_i64().context("no reloads")?,
        v["serial"].as_str().map(str::to_string),
    ))
}

impl TlsEdge {
    /// `hapctl cert import` (bounded), unobserved; HAProxy may be stopped (files only).
    pub(super) fn import(&mut self, leaf: &Leaf, running: bool) -> anyhow::Result<Install> {
        self.install_by(leaf, running, |edge| {
            let pem = leaf.pem.display().to_string();
            let out = edge.try_ok(&["cert", "import", &leaf.name, "--pem", &pem, "--json"])?;
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        })
    }

    /// `PUT /v1/certificates/{name}` to a running `hapctl serve`: the daemon's own install path,
    /// the one its renewals take, with no hapctl process started per certificate.
    pub(super) fn import_api(&mut self, api: &Api, leaf: &Leaf) -> anyhow::Result<Install> {
        self.install_by(leaf, true, |_| {
            let pem = std::fs::read_to_string(&leaf.pem)?;
            let path = format!("/v1/certificates/{}", leaf.name);
            let answer = api.call("PUT", &path, Some(&json!({ "pem": pem })))?;
            if !(200..300).contains(&answer.status) {
                bail!("PUT {path}: {}", answer.describe());
            }
            Ok(answer.text())
        })
    }

    /// One install by `run`, which returns the install report (JSON), with the counts around it.
    fn install_by(
        &mut self,
        leaf: &Leaf,
        running: bool,
        run: impl FnOnce(&Edge) -> anyhow::Result<String>,
    ) -> anyhow::Result<Install> {
        let new = !self.serials.contains_key(&leaf.name);
        let before = if running { Some(self.reloads()?) } else { None };
        let checks = self.edge.check_runs();
        let t = Instant::now();
        let report = run(&self.edge)?;
        let exit_ms = elapsed_ms(t);
        let (installed, duration_ms, report_checks, report_reloads, serial) =
            parse_report(&report)?;
        if !serial.is_some_and(|s| serial_matches(&s, &leaf.serial)) {
            bail!("install of {}: the report names another serial", leaf.name);
        }
        let reloads = match before {
            Some(b) => self.reloads()? as i64 - b as i64,
            None => 0,
        };
        self.serials.insert(leaf.name.clone(), leaf.serial.clone());
        Ok(Install {
            name: leaf.name.clone(),
            new,
            served_ms: None,
            exit_ms,
            duration_ms,
            installed,
            report_checks,
            report_reloads,
            checks: self.edge.check_runs() - checks,
            reloads,
            probes: 0,
            probe_failures: 0,
        })
    }

    /// `hapctl cert import`, timed from spawn to the first handshake with its SNI that
    /// presents the new serial (a probe every `PROBE_EVERY`).
    pub(super) fn import_observed(&mut self, leaf: &Leaf) -> anyhow::Result<Install> {
        let new = !self.serials.contains_key(&leaf.name);
        let before = self.reloads()?;
        let checks = self.edge.check_runs();
        let pem = leaf.pem.display().to_string();
        let cmd = self
            .edge
            .command(&["cert", "import", &leaf.name, "--pem", &pem, "--json"]);
        let (addr, sni, want) = (self.https, leaf.name.clone(), leaf.serial.clone());
        let mut failures = 0;
        let obs = sys::spawn_and_observe(
            cmd,
            PROBE_EVERY,
            INSTALL_BOUND,
            "cert import → new serial served",
            || match served_serial(addr, &sni) {
                Ok(s) => serial_matches(&s, &want),
                Err(_) => {
                    failures += 1;
                    false
                }
            },
        )?;
        if !obs.status.success() {
            bail!(
                "hapctl cert import {} failed ({}): {} {}",
                leaf.name,
                obs.status,
                obs.stdout.trim(),
                obs.stderr.trim()
            );
        }
        let (installed, duration_ms, report_checks, report_reloads, _) = parse_report(&obs.stdout)?;
        let reloads = self.reloads()? as i64 - before as i64;
        self.serials.insert(leaf.name.clone(), leaf.serial.clone());
        Ok(Install {
            name: leaf.name.clone(),
            new,
            served_ms: obs.seen.map(|d| d.as_secs_f64() * 1000.0),
            exit_ms: obs.exit.as_secs_f64() * 1000.0,
            duration_ms,
            installed,
            report_checks,
            report_reloads,
            checks: self.edge.check_runs() - checks,
            reloads,
            probes: obs.probes,
            probe_failures: failures,
        })
    }

    /// Control for the renewals: replaces `leaf`'s certificate in the running worker through
    /// the runtime API from the bench (no hapctl, no files, no database). The files keep the
    /// serial `serials` names, which a restart serves again.
    pub(super) fn runtime_replace(&self, leaf: &Leaf) -> anyhow::Result<Install> {
        let before = self.reloads()?;
        let checks = self.edge.check_runs();
        let paths = &self.edge.settings()?.paths;
        let name: hapctl::model::CertName = leaf.name.parse()?;
        let file = hapctl::tls::crtlist::pem_path(&paths.certs_dir, &name);
        let list = hapctl::render::FileId::CrtList.path(paths);
        let pem = std::fs::read_to_string(&leaf.pem)?;
        let runtime =
            RuntimeCerts::new(CliSocket::new(&paths.admin_socket, Duration::from_secs(5)));
        let t = Instant::now();
        runtime
            .install(
                &file.display().to_string(),
                &pem,
                &list.display().to_string(),
                std::slice::from_ref(&leaf.name),
            )
            .with_context(|| format!("runtime install of {}", leaf.name))?;
        let took = elapsed_ms(t);
        Ok(Install {
            name: leaf.name.clone(),
            new: false,
            served_ms: None,
            exit_ms: took,
            duration_ms: took,
            installed: "runtime API only".into(),
            report_checks: 0,
            report_reloads: 0,
            checks: self.edge.check_runs() - checks,
            reloads: self.reloads()? as i64 - before as i64,
            probes: 0,
            probe_failures: 0,
        })
    }

    /// `hapctl cert rm NAME --json` (bounded): hapctl's duration and the exit time, ms.
    pub(super) fn remove(&mut self, name: &str) -> anyhow::Result<(f64, f64)> {
        let t = Instant::now();
        let out = self.edge.try_ok(&["cert", "rm", name, "--json"])?;
        let exit_ms = elapsed_ms(t);
        let (_, duration_ms, _, _, _) = parse_report(&String::from_utf8_lossy(&out.stdout))?;
        self.serials.remove(name);
        Ok((duration_ms, exit_ms))
    }

    /// Installs `site(from)`..`site(to)` one `cert import` at a time.
    pub(super) fn bulk(
        &mut self,
        ca: &TestCa,
        from: usize,
        to: usize,
        running: bool,
    ) -> anyhow::Result<Bulk> {
        let t = Instant::now();
        let mut ops = Vec::with_capacity(to - from);
        for i in from..to {
            let leaf = ca.leaf(&site(i))?;
            ops.push(self.import(&leaf, running)?);
            if t.elapsed() > BULK_BOUND {
                bail!(
                    "bulk install {from}→{to}: only {} imports within {BULK_BOUND:?}",
                    ops.len()
                );
            }
        }
        Ok(Bulk {
            from,
            to,
            wall_ms: elapsed_ms(t),
            ops,
        })
    }
}

/// Edge A under one master: its reload count from a start to the end of what ran on it.
pub(super) struct Stretch {
    pub(super) what: String,
    pub(super) pid: i32,
    pub(super) reloads_from: u32,
    pub(super) reloads_to: u32,
    pub(super) same_pid: bool,
}

impl Stretch {
    pub(super) fn begin(a: &TlsEdge, what: &str) -> anyhow::Result<Stretch> {
        let p = a.edge.try_show_proc()?;
        Ok(Stretch {
            what: what.to_string(),
            pid: p.master.pid,
            reloads_from: p.master.reloads,
            reloads_to: p.master.reloads,
            same_pid: true,
        })
    }

    pub(super) fn end(mut self, a: &TlsEdge) -> anyhow::Result<Stretch> {
        let p = a.edge.try_show_proc()?;
        self.reloads_to = p.master.reloads;
        self.same_pid = p.master.pid == self.pid;
        Ok(self)
    }
}

/// One size built by repeated `cert import`.
pub(super) struct Bulk {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) wall_ms: f64,
    pub(super) ops: Vec<Install>,
}

impl Bulk {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "from": self.from,
            "to": self.to,
            "wall_ms": self.wall_ms,
            "exit_ms": self.ops.iter().map(|o| o.exit_ms).collect::<Vec<_>>(),
            "duration_ms": self.ops.iter().map(|o| o.duration_ms).collect::<Vec<_>>(),
            "installed": self.ops.iter().map(|o| o.installed.clone()).collect::<Vec<_>>(),
            "master_reloads_seen": self.ops.iter().map(|o| o.reloads).sum::<i64>(),
            "haproxy_checks_seen": self.ops.iter().map(|o| o.checks).sum::<usize>(),
        })
    }
}

/// How many of `ops` were installed each way, e.g. `runtime 20`.
pub(super) fn modes<'o>(ops: impl IntoIterator<Item = &'o Install>) -> String {
    let mut m: BTreeMap<&str, usize> = BTreeMap::new();
    for o in ops {
        *m.entry(o.installed.as_str()).or_default() += 1;
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn bulk_row(table: &mut Table, edge: &str, b: &Bulk) {
    let exit: Vec<f64> = b.ops.iter().map(|o| o.exit_ms).collect();
    let own: Vec<f64> = b.ops.iter().map(|o| o.duration_ms).collect();
    let tenth = (own.len() / 10).max(1);
    table.row(vec![
        edge.to_string(),
        format!("{} → {}", b.from, b.to),
        b.ops.len().to_string(),
        format!("{:.1}", b.wall_ms / 1000.0),
        format!("{:.1}", b.ops.len() as f64 / (b.wall_ms / 1000.0)),
        ms(pct(&exit, 50.0)),
        ms(pct(&own, 50.0)),
        ms(pct(&own[..tenth.min(own.len())], 50.0)),
        ms(pct(&own[own.len() - tenth.min(own.len())..], 50.0)),
        modes(&b.ops),
        b.ops.iter().map(|o| o.checks).sum::<usize>().to_string(),
        b.ops.iter().map(|o| o.reloads).sum::<i64>().to_string(),
    ]);
}
