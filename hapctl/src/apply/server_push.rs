//! Carrying a server plan into the running worker and reading it back (`show servers state`):
//! every wanted server present with its address, port and weight and in service, every
//! removed one gone (or, still finishing its connections, draining: it gets no new request).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::haproxy::{CliSocket, RuntimeError, RuntimeServers};
use crate::model::{EdgeState, Server};

use super::server_plan::{ip_of, ServerOp};

/// How long a removal waits for a draining server's last connection before leaving it
/// draining (no new request) until its connections end or the next reload.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// `srv_admin_state` bits of a server drained or in maintenance by the runtime API.
const DRAINING_OR_MAINT: u32 = 0x01 | 0x08;

/// What the push did beyond the plan.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Removed servers still serving connections at the drain deadline.
    pub left_draining: Vec<String>,
}

/// Applies `ops` through the worker's admin socket, then reads every touched backend back
/// against `state`.
pub fn push(
    admin_socket: &std::path::Path,
    ops: &[ServerOp],
    state: &EdgeState,
) -> Result<Pushed, RuntimeError> {
    let servers = RuntimeServers::new(CliSocket::new(admin_socket, Duration::from_secs(5)));
    let mut pushed = Pushed::default();
    for op in ops {
        match op {
            ServerOp::Add { backend, server } => servers.add(
                backend,
                server.name.as_str(),
                &server.addr.to_string(),
                &server.options.to_text(),
                server.options.check,
            )?,
            ServerOp::Remove { backend, name } => {
                if !servers.remove(backend, name, DRAIN_TIMEOUT)? {
                    pushed.left_draining.push(format!("{backend}/{name}"));
                }
            }
            ServerOp::Weight {
                backend,
                name,
                weight,
            } => servers.set_weight(backend, name, *weight)?,
            ServerOp::Addr {
                backend,
                name,
                ip,
                port,
            } => servers.set_addr(backend, name, ip, *port)?,
        }
    }
    let wanted = wanted_servers(state);
    let mut touched: Vec<&str> = ops.iter().map(ServerOp::backend).collect();
    touched.dedup();
    for backend in touched {
        let held = servers.state(backend)?;
        let want = wanted.get(backend).copied().unwrap_or_default();
        check_backend(backend, want, &held)?;
    }
    Ok(pushed)
}

/// Each backend's servers as the files declare them (SSE twins included).
fn wanted_servers(state: &EdgeState) -> BTreeMap<String, &[Server]> {
    let mut out = BTreeMap::new();
    for (domain, backend) in &state.domains {
        out.insert(domain.backend_name(), backend.servers());
        if backend.sse_routing() {
            out.insert(crate::render::sse_twin(domain), backend.servers());
        }
    }
    out
}

fn check_backend(
    backend: &str,
    want: &[Server],
    held: &BTreeMap<String, crate::haproxy::ServerState>,
) -> Result<(), RuntimeError> {
    let wrong = |what: String| RuntimeError::Refused {
        command: format!("show servers state {backend}"),
        answer: what,
    };
    for s in want {
        let Some(h) = held.get(s.name.as_str()) else {
            return Err(wrong(format!("{} is missing", s.name.as_str())));
        };
        let ip = ip_of(&s.addr.host).unwrap_or_default();
        let weight = u32::from(s.options.weight.unwrap_or(1));
        if h.addr != ip || h.port != s.addr.port.get() || h.weight != weight || h.admin_state != 0 {
            return Err(wrong(format!(
                "{} is {}:{} weight {} admin state {}, expected {ip}:{} weight {weight} in service",
                h.name,
                h.addr,
                h.port,
                h.weight,
                h.admin_state,
                s.addr.port.get()
            )));
        }
    }
    for h in held.values() {
        let wanted = want.iter().any(|s| s.name.as_str() == h.name);
        if !wanted && h.admin_state & DRAINING_OR_MAINT == 0 {
            return Err(wrong(format!("{} is still in service", h.name)));
        }
    }
    Ok(())
}

impl super::Applier<'_> {
    /// The runtime path for server changes: `Ok(Ok(message))` when the worker took the plan
    /// (files written first, read back; no check, no reload), `Ok(Err(why))` when the apply
    /// must check and reload instead (`why`: a runtime failure, `None` when there was no plan).
    pub(super) fn runtime_servers(
        &self,
        before: &EdgeState,
        state: &EdgeState,
        new: &super::Snapshot,
        live: &super::Snapshot,
        p: &mut super::Progress,
    ) -> Result<Result<String, Option<String>>, super::ApplyError> {
        let Some(ops) = super::server_plan::plan(before, state) else {
            return Ok(Err(None));
        };
        if self.master.show_proc().is_err() {
            return Ok(Err(None));
        }
        // Recovery reloads after a crash from here on, so the worker cannot keep servers the
        // files lost.
        self.write_marker(super::Phase::Reloading)?;
        new.write_live(&self.settings.paths, live, |_| {})
            .map_err(super::io_context("cannot write the changed files"))?;
        crate::fault::point("runtime-servers:after-write");
        p.step("write");
        match push(&self.settings.paths.admin_socket, &ops, state) {
            Ok(pushed) => {
                crate::fault::point("runtime-servers:after-push");
                p.step("runtime");
                let mut message = format!(
                    "{} server change(s) through the runtime API (read back), no check, no reload",
                    ops.len()
                );
                if !pushed.left_draining.is_empty() {
                    message += &format!(
                        "; {} still finishing connections: draining (no new request) until they end or the next reload",
                        pushed.left_draining.join(", ")
                    );
                }
                Ok(Ok(message))
            }
            Err(e) => {
                tracing::warn!(
                    "runtime server change failed ({e}); checking and reloading instead"
                );
                Ok(Err(Some(e.to_string())))
            }
        }
    }
}
