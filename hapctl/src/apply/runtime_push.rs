//! Carrying a runtime plan into the running worker and reading it back: every wanted server
//! present with its address, port and weight and in service, every removed one gone (or,
//! still finishing its connections, draining: it gets no new request) (`show servers state`),
//! every route added or removed (`get map`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::haproxy::{CliSocket, RuntimeError, RuntimeMap, RuntimeServers};
use crate::model::{Domain, EdgeState, Server};
use crate::render::FileId;

use super::memo::Role;
use super::reload::ReloadFrom;
use super::runtime_plan::{backends_of, ip_of, NotRuntime, RouteOp, RuntimePlan, ServerOp};
use super::{Applier, ApplyError, Attempt, Loaded, Ran};

/// How long a removal waits for a draining server's last connection before leaving it
/// draining (no new request) until its connections end or the next reload.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// `srv_admin_state` bits of a server drained or in maintenance by the runtime API.
const DRAINING_OR_MAINT: u32 = 0x01 | 0x08;
/// The files a runtime plan may change: the backends' sections and the routes.
const PLAN_FILES: [FileId; 3] = [FileId::Config, FileId::HostsMap, FileId::SseMap];

/// What the push did beyond the plan.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Removed servers still serving connections at the drain deadline.
    pub left_draining: Vec<String>,
}

/// Applies `plan` through the worker's admin socket (servers, routes added, routes removed,
/// servers removed), then reads every touched backend and route back against `state`.
pub fn push(
    settings: &crate::settings::Settings,
    plan: &RuntimePlan,
    state: &EdgeState,
) -> Result<Pushed, RuntimeError> {
    let socket = || CliSocket::new(&settings.paths.admin_socket, Duration::from_secs(5));
    let servers = RuntimeServers::new(socket());
    let map = |id: FileId| {
        RuntimeMap::on_worker(socket(), id.path(&settings.paths).display().to_string())
    };
    let routes = Routes {
        hosts: map(FileId::HostsMap),
        sse: map(FileId::SseMap),
    };
    let mut pushed = Pushed::default();
    let (removals, changes): (Vec<&ServerOp>, Vec<&ServerOp>) = plan
        .servers
        .iter()
        .partition(|op| matches!(op, ServerOp::Remove { .. }));
    for op in changes {
        match op {
            ServerOp::Add {
                backend,
                name,
                server,
            } => servers.add(
                backend,
                name,
                &server.addr.to_string(),
                &server.options.to_text(),
                server.options.check,
            )?,
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
            ServerOp::Remove { .. } => unreachable!("partitioned above"),
        }
    }
    // Routes after the servers they lead to, removals before the servers go.
    let (adds, removals_of_routes): (Vec<&RouteOp>, Vec<&RouteOp>) = plan
        .routes
        .iter()
        .partition(|op| matches!(op, RouteOp::Add { .. }));
    for op in adds.into_iter().chain(removals_of_routes) {
        let (map, _) = routes.of(op);
        match op.value() {
            Some(value) => map.add(&op.key(), value)?,
            None => map.remove(&op.key())?,
        }
    }
    for op in removals {
        if let ServerOp::Remove { backend, name } = op {
            if !servers.remove(backend, name, DRAIN_TIMEOUT)? {
                pushed.left_draining.push(format!("{backend}/{name}"));
            }
        }
    }
    read_back(&servers, &routes, plan, state)?;
    Ok(pushed)
}

/// The worker's route maps.
struct Routes {
    hosts: RuntimeMap,
    sse: RuntimeMap,
}

impl Routes {
    /// The map a route change is made in, and its file's name.
    fn of(&self, op: &RouteOp) -> (&RuntimeMap, &'static str) {
        match op {
            RouteOp::Add { .. } | RouteOp::Remove { .. } => (&self.hosts, "hosts.map"),
            RouteOp::RemoveTwin { .. } => (&self.sse, "sse.map"),
        }
    }
}

fn read_back(
    servers: &RuntimeServers,
    routes: &Routes,
    plan: &RuntimePlan,
    state: &EdgeState,
) -> Result<(), RuntimeError> {
    let mut touched: Vec<&str> = plan.servers.iter().map(ServerOp::backend).collect();
    touched.sort_unstable();
    touched.dedup();
    let wanted = wanted_servers(state, &plan.domains, &touched);
    for backend in touched {
        let held = servers.state(backend)?;
        let want = wanted.get(backend).map(Vec::as_slice).unwrap_or_default();
        check_backend(backend, want, &held)?;
    }
    for op in &plan.routes {
        let ((map, name), key, want) = (routes.of(op), op.key(), op.value());
        let held = map.value_of(&key)?;
        if held.as_deref() != want {
            return Err(RuntimeError::Refused {
                command: format!("get map {name} {key}"),
                answer: format!("routes to {held:?}, expected {want:?}"),
            });
        }
    }
    Ok(())
}

/// The servers of the backends `of` as the files declare them, by their names in HAProxy:
/// the backends of the plan's `domains` (a removed domain's backend wants none).
fn wanted_servers<'s>(
    state: &'s EdgeState,
    domains: &[Domain],
    of: &[&str],
) -> BTreeMap<String, Vec<(String, &'s Server)>> {
    let mut out = BTreeMap::new();
    for domain in domains {
        let Some(backend) = state.domains.get(domain) else {
            continue;
        };
        let named: Vec<(String, &Server)> = backend
            .servers()
            .iter()
            .map(|s| (state.placement.server_name(domain, &s.name), s))
            .collect();
        for name in backends_of(&state.placement, domain, backend) {
            if of.binary_search(&name.as_str()).is_ok() {
                out.insert(name, named.clone());
            }
        }
    }
    out
}

fn check_backend(
    backend: &str,
    want: &[(String, &Server)],
    held: &BTreeMap<String, crate::haproxy::ServerState>,
) -> Result<(), RuntimeError> {
    let wrong = |what: String| RuntimeError::Refused {
        command: format!("show servers state {backend}"),
        answer: what,
    };
    for (name, s) in want {
        let Some(h) = held.get(name) else {
            return Err(wrong(format!("{name} is missing")));
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
        let wanted = want.iter().any(|(name, _)| *name == h.name);
        if !wanted && h.admin_state & DRAINING_OR_MAINT == 0 {
            return Err(wrong(format!("{} is still in service", h.name)));
        }
    }
    Ok(())
}

/// How the runtime change ended.
enum RuntimeOutcome {
    /// The worker took the plan (files written first, read back; no check, no reload).
    Applied(String),
    /// Check and reload instead; `why` is the recorded reason's detail (`None`: only the
    /// changed files explain it).
    Reload {
        why: Option<NotRuntime>,
        failure: Option<String>,
    },
}

/// The plan when the files it changes are the backends' sections and the routes, else why
/// the change takes the reload path.
pub(super) fn usable(
    plan: Result<RuntimePlan, NotRuntime>,
    changed: &[FileId],
) -> Result<RuntimePlan, NotRuntime> {
    match plan {
        Ok(_) if !changed.iter().all(|id| PLAN_FILES.contains(id)) => Err(NotRuntime::Reload(
            "files beyond haproxy.cfg, hosts.map and sse.map changed with the domains".into(),
        )),
        plan => plan,
    }
}

impl Applier<'_> {
    /// The executor of [`super::ApplyPath::Runtime`]: saves the plan's placement, carries the
    /// plan into the worker, or hands the change to the reload path (with the files it wrote
    /// put back first).
    pub(super) fn runtime_path(
        &self,
        plan: RuntimePlan,
        before: &EdgeState,
        a: &mut Attempt,
    ) -> Result<Ran, ApplyError> {
        a.tx.save_placement(&a.state.placement)?;
        let outcome = self.runtime_change(plan, before, a)?;
        a.diff_step(self);
        match outcome {
            RuntimeOutcome::Applied(message) => Ok(Ran::Applied(message, Loaded::Unchecked)),
            RuntimeOutcome::Reload { why, failure } => Ok(Ran::Reload(ReloadFrom {
                target: self.reload_path_target(&a.live, failure.is_some(), &mut a.p)?,
                why_not: why,
                runtime_failure: failure,
            })),
        }
    }

    /// The runtime change of domains and servers: `plan` is [`usable`] and a worker runs.
    fn runtime_change(
        &self,
        plan: RuntimePlan,
        before: &EdgeState,
        a: &mut Attempt,
    ) -> Result<RuntimeOutcome, ApplyError> {
        // The live files must be what the previous state renders with today's settings and
        // templates: then the new files differ from them by the plan alone.
        let old = self.render(before, Role::Before)?;
        if PLAN_FILES.iter().any(|id| old.get(*id) != a.live.get(*id)) {
            return Ok(RuntimeOutcome::Reload {
                why: Some(NotRuntime::Reload(
                    "the live files are not what the previous state renders (settings or templates changed)"
                        .into(),
                )),
                failure: None,
            });
        }
        a.p.step("prepare");
        self.write_runtime_files(&a.new, &a.live, "cannot write the changed files")?;
        crate::fault::point("runtime-servers:after-write");
        a.p.step("write");
        match push(self.settings, &plan, &a.state) {
            Ok(pushed) => {
                crate::fault::point("runtime-servers:after-push");
                a.p.step("runtime");
                let mut message = format!(
                    "{} change(s) through the runtime API ({} server, {} route), read back, no check, no reload",
                    plan.len(),
                    plan.servers.len(),
                    plan.routes.len()
                );
                if !pushed.left_draining.is_empty() {
                    message += &format!(
                        "; {} still finishing connections: draining (no new request) until they end or the next reload",
                        pushed.left_draining.join(", ")
                    );
                }
                Ok(RuntimeOutcome::Applied(message))
            }
            Err(e) => {
                tracing::warn!("runtime change failed ({e}); checking and reloading instead");
                Ok(RuntimeOutcome::Reload {
                    why: None,
                    failure: Some(e.to_string()),
                })
            }
        }
    }
}
