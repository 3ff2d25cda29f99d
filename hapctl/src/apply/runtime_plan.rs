//! Which changes the running worker can take without a reload, and how. Pure: the old and
//! the new desired state in, the runtime operations out, or why only a reload can load the
//! change.
//!
//! - Servers of domains that already exist: added, removed, re-weighted, moved to another
//!   address (`add server`, drain + `del server`, `set server … weight|addr`).
//! - Exact domains added with a slot-capable profile and servers given by address: a free
//!   slot backend of that kind takes their servers (with SSE routing, its twin too), then
//!   `hosts.map` their route (`model::Placement`); removed domains lose their route first,
//!   then their servers (drained).
//!
//! Everything else must be equal, or the change needs a reload.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::model::{Backend, Domain, EdgeState, Placement, Server, ServerHost, SlotKind};

/// One change to one backend's servers in the running worker. `name` is the server's name
/// in HAProxy (in a slot, `<domain>:<server>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOp {
    Add {
        backend: String,
        name: String,
        server: Server,
    },
    /// Drained first: its requests and streams finish.
    Remove { backend: String, name: String },
    Weight {
        backend: String,
        name: String,
        weight: u16,
    },
    Addr {
        backend: String,
        name: String,
        ip: String,
        port: u16,
    },
}

impl ServerOp {
    pub fn backend(&self) -> &str {
        match self {
            ServerOp::Add { backend, .. }
            | ServerOp::Remove { backend, .. }
            | ServerOp::Weight { backend, .. }
            | ServerOp::Addr { backend, .. } => backend,
        }
    }
}

/// A change of `hosts.map` (where an exact domain is routed) or of `sse.map`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOp {
    Add {
        domain: Domain,
        backend: String,
    },
    Remove {
        domain: Domain,
    },
    /// The `sse.map` line of a removed domain whose twin was its own (keyed by its backend).
    RemoveTwin {
        backend: String,
    },
}

impl RouteOp {
    /// The map's key the change is about.
    pub fn key(&self) -> String {
        match self {
            RouteOp::Add { domain, .. } | RouteOp::Remove { domain } => domain.to_string(),
            RouteOp::RemoveTwin { backend } => backend.clone(),
        }
    }

    /// The value the change leaves under the key (`None`: the key is gone).
    pub fn value(&self) -> Option<&str> {
        match self {
            RouteOp::Add { backend, .. } => Some(backend),
            RouteOp::Remove { .. } | RouteOp::RemoveTwin { .. } => None,
        }
    }
}

/// What the worker must do, in this order: servers added or changed, routes added, routes
/// removed, servers removed (drained).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimePlan {
    pub servers: Vec<ServerOp>,
    pub routes: Vec<RouteOp>,
    /// The domains whose servers `servers` changes (the read-back looks at these alone).
    pub domains: Vec<Domain>,
}

impl RuntimePlan {
    pub fn len(&self) -> usize {
        self.servers.len() + self.routes.len()
    }
}

/// Why a change does not go through the runtime path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRuntime {
    /// No domain or server changed (the change, if any, is elsewhere).
    Unchanged,
    /// Only a reload can load it: why, for the reload's recorded reason.
    Reload(String),
    /// Every slot of a kind is taken: the reload that follows sizes them again.
    Capacity(String),
}

/// HAProxy's weight when a server line names none.
const DEFAULT_WEIGHT: u16 = 1;

/// The operations that turn `old` into `new` in the worker. Added domains are placed into
/// free slots of `new.placement`, which the caller saves with the change.
pub fn plan(old: &EdgeState, new: &mut EdgeState) -> Result<RuntimePlan, NotRuntime> {
    let diff = DomainDiff::of(&old.domains, &new.domains);
    only_servers_and_domains_differ(old, new, &diff)?;
    let mut plan = RuntimePlan::default();
    plan.change_servers(&old.placement, &diff.changed)?;
    plan.add_domains(&mut new.placement, &diff.added)?;
    plan.remove_domains(&old.placement, &diff.removed)?;
    if plan.len() == 0 {
        return Err(NotRuntime::Unchanged);
    }
    Ok(plan)
}

/// Everything but the servers of the domains both have, and the domains added or removed,
/// must be equal; else why not.
fn only_servers_and_domains_differ(
    old: &EdgeState,
    new: &EdgeState,
    diff: &DomainDiff,
) -> Result<(), NotRuntime> {
    // Compared field by field, without copying the states (tens of ms at 10,000 domains).
    let others_equal = others_equal(old, new);
    let mut placement = old.placement.clone();
    for (domain, _) in &diff.removed {
        placement.release(domain);
    }
    let placement_equal = placement == new.placement;
    let shapes_equal = diff.changed.iter().all(|(_, before, after)| {
        before.profile() == after.profile() && before.sse_routing() == after.sse_routing()
    });
    if others_equal && placement_equal && shapes_equal {
        return Ok(());
    }
    Err(match (diff.is_empty(), others_equal, placement_equal) {
        (true, true, false) => NotRuntime::Reload(
            "the placement changed: slotted domains move to backends of their own (compaction)"
                .into(),
        ),
        (true, _, true) => NotRuntime::Unchanged,
        _ => NotRuntime::Reload(
            "domains changed beyond their servers (profile, SSE routing) or with other settings"
                .into(),
        ),
    })
}

impl RuntimePlan {
    /// The server operations of the domains both states have, where they are.
    fn change_servers(
        &mut self,
        placement: &Placement,
        changed: &[(&Domain, &Backend, &Backend)],
    ) -> Result<(), NotRuntime> {
        for (domain, before, after) in changed {
            if before.servers() == after.servers() {
                continue;
            }
            self.domains.push((*domain).clone());
            let name = |s: &Server| placement.server_name(domain, &s.name);
            for backend in backends_of(placement, domain, after) {
                let ops = backend_ops(&backend, &name, before.servers(), after.servers())?;
                self.servers.extend(ops);
            }
        }
        Ok(())
    }

    /// Each added domain into a free slot of its kind: its servers, then its route.
    fn add_domains(
        &mut self,
        placement: &mut Placement,
        added: &[(&Domain, &Backend)],
    ) -> Result<(), NotRuntime> {
        for (domain, backend) in added {
            let kind = slot_kind(domain, backend)?;
            if placement.capacity(kind) == 0 {
                return Err(NotRuntime::Reload(format!(
                    "{domain} is the first {} domain: there is no slot backend of that kind yet",
                    kind.as_str()
                )));
            }
            let Some(slot) = placement.place(domain, kind) else {
                return Err(NotRuntime::Capacity(format!(
                    "no free slot_{}_* backend for {domain} ({} of {} in use)",
                    kind.as_str(),
                    placement.capacity(kind),
                    placement.capacity(kind)
                )));
            };
            self.domains.push((*domain).clone());
            for into in backends_of(placement, domain, backend) {
                for s in backend.servers() {
                    self.servers.push(ServerOp::Add {
                        backend: into.clone(),
                        name: placement.server_name(domain, &s.name),
                        server: s.clone(),
                    });
                }
            }
            self.routes.push(RouteOp::Add {
                domain: (*domain).clone(),
                backend: slot.backend_name(),
            });
        }
        Ok(())
    }

    /// Each removed domain: its routes, then its servers (drained).
    fn remove_domains(
        &mut self,
        placement: &Placement,
        removed: &[(&Domain, &Backend)],
    ) -> Result<(), NotRuntime> {
        for (domain, backend) in removed {
            if domain.is_wildcard() {
                return Err(NotRuntime::Reload(format!(
                    "{domain} is removed: a wildcard's route is a suffix map"
                )));
            }
            self.routes.push(RouteOp::Remove {
                domain: (*domain).clone(),
            });
            if backend.sse_routing() && placement.slot_of(domain).is_none() {
                self.routes.push(RouteOp::RemoveTwin {
                    backend: domain.backend_name(),
                });
            }
            self.domains.push((*domain).clone());
            for from in backends_of(placement, domain, backend) {
                for s in backend.servers() {
                    self.servers.push(ServerOp::Remove {
                        backend: from.clone(),
                        name: placement.server_name(domain, &s.name),
                    });
                }
            }
        }
        Ok(())
    }
}

/// How two domain maps differ, found in one pass over both in key order: at 10,000 domains a
/// lookup per domain in the other map was most of the plan.
struct DomainDiff<'a> {
    added: Vec<(&'a Domain, &'a Backend)>,
    removed: Vec<(&'a Domain, &'a Backend)>,
    /// Domains in both, with their backend before and after, where the two differ.
    changed: Vec<(&'a Domain, &'a Backend, &'a Backend)>,
}

impl<'a> DomainDiff<'a> {
    fn of(old: &'a BTreeMap<Domain, Backend>, new: &'a BTreeMap<Domain, Backend>) -> Self {
        let mut diff = DomainDiff {
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
        };
        let (mut olds, mut news) = (old.iter().peekable(), new.iter().peekable());
        loop {
            let order = match (olds.peek(), news.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                // Equality first: names shared between the two states compare by pointer.
                (Some((a, _)), Some((b, _))) if a == b => Ordering::Equal,
                (Some((a, _)), Some((b, _))) => a.cmp(b),
            };
            match order {
                Ordering::Less => diff.removed.extend(olds.next()),
                Ordering::Greater => diff.added.extend(news.next()),
                Ordering::Equal => {
                    let ((domain, before), (_, after)) =
                        (olds.next().expect("peeked"), news.next().expect("peeked"));
                    if before != after {
                        diff.changed.push((domain, before, after));
                    }
                }
            }
        }
        diff
    }

    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The slot kind an added domain can take, or why it needs a backend section of its own.
fn slot_kind(domain: &Domain, backend: &Backend) -> Result<SlotKind, NotRuntime> {
    let why = |what: &str| Err(NotRuntime::Reload(format!("{domain} is new and {what}")));
    if domain.is_wildcard() {
        return why("a wildcard (its route is a suffix map)");
    }
    if let Some(s) = backend
        .servers()
        .iter()
        .find(|s| ip_of(&s.addr.host).is_none())
    {
        return why(&format!(
            "its server {} is a host name (resolvers)",
            s.name.as_str()
        ));
    }
    SlotKind::of(backend).map_or_else(
        || why("has a profile with lines of its own (http-check)"),
        Ok,
    )
}

/// The backends that hold a domain's servers where `placement` puts it: its own or its
/// slot's, and the event-stream twin beside it with SSE routing.
pub(super) fn backends_of(
    placement: &Placement,
    domain: &Domain,
    backend: &Backend,
) -> Vec<String> {
    let mut out = vec![placement.backend_name(domain)];
    if backend.sse_routing() {
        out.push(placement.sse_twin(domain));
    }
    out
}

/// Whether everything but the domains and the placement is equal. Destructured without
/// `..`: a new field of `EdgeState` must be sorted here.
fn others_equal(old: &EdgeState, new: &EdgeState) -> bool {
    let EdgeState {
        domains: _,
        placement: _,
        app_domains,
        live_generations,
        trusted_proxies,
        https,
        suspended,
        waf,
        limits,
        protections,
        peers,
    } = old;
    *app_domains == new.app_domains
        && *peers == new.peers
        && *live_generations == new.live_generations
        && *trusted_proxies == new.trusted_proxies
        && *https == new.https
        && *suspended == new.suspended
        && *waf == new.waf
        && *limits == new.limits
        && *protections == new.protections
}

fn backend_ops(
    backend: &str,
    runtime_name: &dyn Fn(&Server) -> String,
    before: &[Server],
    after: &[Server],
) -> Result<Vec<ServerOp>, NotRuntime> {
    let mut ops = Vec::new();
    let find = |list: &[Server], name: &str| list.iter().find(|s| s.name.as_str() == name).cloned();
    for old in before {
        if find(after, old.name.as_str()).is_none() {
            ops.push(ServerOp::Remove {
                backend: backend.into(),
                name: runtime_name(old),
            });
        }
    }
    for new in after {
        let name = runtime_name(new);
        let ip = ip_of(&new.addr.host).ok_or_else(|| {
            NotRuntime::Reload(format!(
                "server {} of {backend} is a host name (resolvers)",
                new.name.as_str()
            ))
        })?;
        let Some(old) = find(before, new.name.as_str()) else {
            ops.push(ServerOp::Add {
                backend: backend.into(),
                name,
                server: new.clone(),
            });
            continue;
        };
        // Only the weight and the address change in place; any other option (checks, TLS…)
        // is a new server line, which only a reload loads.
        let mut same = old.options.clone();
        same.weight = new.options.weight;
        if same != new.options {
            return Err(NotRuntime::Reload(format!(
                "server {} of {backend} changed options other than weight and address",
                new.name.as_str()
            )));
        }
        if old.options.weight != new.options.weight {
            ops.push(ServerOp::Weight {
                backend: backend.into(),
                name: name.clone(),
                weight: new.options.weight.unwrap_or(DEFAULT_WEIGHT),
            });
        }
        if old.addr != new.addr {
            ops.push(ServerOp::Addr {
                backend: backend.into(),
                name,
                ip,
                port: new.addr.port.get(),
            });
        }
    }
    Ok(ops)
}

/// A server named by host name is resolved by the `resolvers` section, which dynamic servers
/// cannot use: only addresses go through the runtime path.
pub fn ip_of(host: &ServerHost) -> Option<String> {
    match host {
        ServerHost::V4(ip) => Some(ip.to_string()),
        ServerHost::V6(ip) => Some(ip.to_string()),
        ServerHost::Name(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Placement, Profile, ServerName};

    fn server(name: &str, spec: &str) -> Server {
        Server::parse_spec(spec, name.parse::<ServerName>().unwrap()).unwrap()
    }

    fn domain(name: &str) -> Domain {
        name.parse().unwrap()
    }

    fn state(servers: Vec<Server>) -> EdgeState {
        let mut s = EdgeState::default();
        s.domains.insert(
            domain("shop.example.com"),
            Backend::new(servers, Profile::Default).unwrap(),
        );
        s.placement = Placement::sized_for(&s);
        s
    }

    #[test]
    fn server_changes_become_runtime_operations() {
        let old = state(vec![
            server("s1", "10.0.0.1:80"),
            server("s2", "10.0.0.2:80"),
        ]);
        let mut new = state(vec![
            server("s1", "10.0.0.9:8080,weight=5"),
            server("s3", "10.0.0.3:80"),
        ]);
        let plan = plan(&old, &mut new).unwrap();
        let be = "d_shop.example.com".to_string();
        assert_eq!(
            plan.servers,
            vec![
                ServerOp::Remove {
                    backend: be.clone(),
                    name: "s2".into()
                },
                ServerOp::Weight {
                    backend: be.clone(),
                    name: "s1".into(),
                    weight: 5
                },
                ServerOp::Addr {
                    backend: be.clone(),
                    name: "s1".into(),
                    ip: "10.0.0.9".into(),
                    port: 8080
                },
                ServerOp::Add {
                    backend: be,
                    name: "s3".into(),
                    server: server("s3", "10.0.0.3:80")
                },
            ]
        );
        assert!(plan.routes.is_empty());
    }

    #[test]
    fn a_new_domain_takes_a_slot_and_a_removed_one_gives_it_back() {
        let old = state(vec![server("s1", "10.0.0.1:80")]);
        let mut new = old.clone();
        let backend = Backend::new(
            vec![
                server("a", "10.0.0.5:80"),
                server("b", "10.0.0.6:80,weight=3"),
            ],
            Profile::Default,
        )
        .unwrap();
        new.domains.insert(domain("new.example.com"), backend);
        let plan = plan(&old, &mut new).unwrap();
        let slot = "slot_default_0".to_string();
        assert_eq!(
            plan.servers,
            vec![
                ServerOp::Add {
                    backend: slot.clone(),
                    name: "new.example.com:a".into(),
                    server: server("a", "10.0.0.5:80")
                },
                ServerOp::Add {
                    backend: slot.clone(),
                    name: "new.example.com:b".into(),
                    server: server("b", "10.0.0.6:80,weight=3")
                },
            ]
        );
        assert_eq!(
            plan.routes,
            vec![RouteOp::Add {
                domain: domain("new.example.com"),
                backend: slot.clone()
            }]
        );
        assert_eq!(new.placement.backend_name(&domain("new.example.com")), slot);

        // Removed again: the route goes first, then the servers, and the slot is free.
        let mut gone = old.clone();
        let plan = super::plan(&new, &mut gone).unwrap();
        assert_eq!(
            plan.routes,
            vec![RouteOp::Remove {
                domain: domain("new.example.com")
            }]
        );
        assert_eq!(plan.servers.len(), 2);
        assert!(
            matches!(&plan.servers[0], ServerOp::Remove { backend, name }
            if backend == "slot_default_0" && name == "new.example.com:a")
        );
        assert_eq!(gone.placement.slots().count(), 0);
    }

    #[test]
    fn a_domain_with_sse_routing_fills_a_slot_and_its_twin() {
        let compat = |spec: &str| {
            Backend::new(vec![server("s1", spec)], Profile::Default)
                .unwrap()
                .with_sse_routing(true)
        };
        let mut old = EdgeState::default();
        old.domains
            .insert(domain("shop.example.com"), compat("10.0.0.1:80"));
        old.placement = Placement::sized_for(&old);
        let mut new = old.clone();
        new.domains
            .insert(domain("new.example.com"), compat("10.0.0.5:80"));
        let added = plan(&old, &mut new).unwrap();
        let backends: Vec<&str> = added.servers.iter().map(ServerOp::backend).collect();
        assert_eq!(backends, ["slot_default_sse_0", "slot_default_sse_0_sse"]);
        assert_eq!(
            added.routes,
            vec![RouteOp::Add {
                domain: domain("new.example.com"),
                backend: "slot_default_sse_0".into()
            }]
        );

        // Its servers change in the slot and the twin; the own-backend domain's in both too.
        let mut moved = new.clone();
        moved
            .domains
            .insert(domain("new.example.com"), compat("10.0.0.6:80"));
        moved
            .domains
            .insert(domain("shop.example.com"), compat("10.0.0.2:80"));
        let changed = plan(&new, &mut moved).unwrap();
        let backends: Vec<&str> = changed.servers.iter().map(ServerOp::backend).collect();
        assert_eq!(
            backends,
            [
                "slot_default_sse_0",
                "slot_default_sse_0_sse",
                "d_shop.example.com",
                "d_shop.example.com_sse"
            ]
        );

        // Removed from its slot: its route and servers; from backends of its own: its
        // sse.map line too.
        let removed = plan(&new, &mut old.clone()).unwrap();
        assert_eq!(removed.servers.len(), 2);
        assert_eq!(removed.routes.len(), 1);
        let mut none = old.clone();
        none.domains.clear();
        let removed = plan(&old, &mut none).unwrap();
        assert_eq!(
            removed.routes,
            vec![
                RouteOp::Remove {
                    domain: domain("shop.example.com")
                },
                RouteOp::RemoveTwin {
                    backend: "d_shop.example.com".into()
                }
            ]
        );
        let backends: Vec<&str> = removed.servers.iter().map(ServerOp::backend).collect();
        assert_eq!(backends, ["d_shop.example.com", "d_shop.example.com_sse"]);
    }

    #[test]
    fn a_full_kind_says_so() {
        let old = state(vec![server("s1", "10.0.0.1:80")]);
        let mut new = old.clone();
        for i in 0..16 {
            new.domains.insert(
                domain(&format!("n{i}.example.com")),
                Backend::new(vec![server("a", "10.0.0.5:80")], Profile::Default).unwrap(),
            );
        }
        assert_eq!(plan(&old, &mut new.clone()).unwrap().routes.len(), 16);
        new.domains.insert(
            domain("one-too-many.example.com"),
            Backend::new(vec![server("a", "10.0.0.5:80")], Profile::Default).unwrap(),
        );
        match plan(&old, &mut new) {
            Err(NotRuntime::Capacity(why)) => assert!(why.contains("16 of 16"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn anything_else_needs_a_reload() {
        let old = state(vec![server("s1", "10.0.0.1:80")]);
        let reload = |mut new: EdgeState| match plan(&old, &mut new) {
            Err(NotRuntime::Reload(why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(plan(&old, &mut old.clone()), Err(NotRuntime::Unchanged));
        reload(state(vec![server("s1", "10.0.0.1:80,nocheck")]));
        assert!(reload(state(vec![server("s1", "app.internal:80")])).contains("host name"));
        // Another profile.
        let mut other = old.clone();
        other.domains.insert(
            domain("shop.example.com"),
            Backend::new(vec![server("s1", "10.0.0.2:80")], Profile::WebSocket).unwrap(),
        );
        reload(other);
        // New domains that need a section of their own.
        for (name, profile, spec) in [
            ("*.wild.example.com", Profile::Default, "10.0.0.2:80"),
            ("named.example.com", Profile::Default, "app.internal:80"),
            ("ws.example.com", Profile::WebSocket, "10.0.0.2:80"),
            (
                "checked.example.com",
                "http-check:/health".parse().unwrap(),
                "10.0.0.2:80",
            ),
        ] {
            let mut more = old.clone();
            more.domains.insert(
                domain(name),
                Backend::new(vec![server("s1", spec)], profile).unwrap(),
            );
            match plan(&old, &mut more) {
                Err(NotRuntime::Reload(_)) | Err(NotRuntime::Capacity(_)) => {}
                other => panic!("{name}: {other:?}"),
            }
        }
        // A change outside the domains, alone and with a server change.
        let mut suspended = old.clone();
        suspended.suspended.insert(domain("shop.example.com"));
        assert_eq!(
            plan(&old, &mut suspended.clone()),
            Err(NotRuntime::Unchanged)
        );
        suspended.domains.insert(
            domain("shop.example.com"),
            Backend::new(vec![server("s1", "10.0.0.2:80")], Profile::Default).unwrap(),
        );
        reload(suspended);
    }
}
