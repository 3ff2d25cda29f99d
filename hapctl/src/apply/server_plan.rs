//! Which changes the running worker can take without a reload: servers of domains that
//! already exist (added, removed, re-weighted, moved to another address), everything else
//! equal. Pure: the old and the new desired state in, the runtime operations out, or `None`
//! when only a reload can load the change.

use crate::model::{Backend, EdgeState, Server, ServerHost};

/// One change to one backend's servers in the running worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOp {
    Add {
        backend: String,
        server: Server,
    },
    /// Drained first: its requests and streams finish.
    Remove {
        backend: String,
        name: String,
    },
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

/// HAProxy's weight when a server line names none.
const DEFAULT_WEIGHT: u16 = 1;

/// The operations that turn `old` into `new` in the worker, when servers are all that
/// changed; `None` otherwise (or when nothing changed at all).
pub fn plan(old: &EdgeState, new: &EdgeState) -> Option<Vec<ServerOp>> {
    if old.domains.len() != new.domains.len() {
        return None;
    }
    // Everything but the servers must be equal: put the old servers into the new state.
    let mut rest = new.clone();
    for (domain, backend) in rest.domains.iter_mut() {
        let before = old.domains.get(domain)?;
        *backend = with_servers(backend, before.servers())?;
    }
    if &rest != old {
        return None;
    }
    let mut ops = Vec::new();
    for (domain, after) in &new.domains {
        let before = &old.domains[domain];
        if before.servers() == after.servers() {
            continue;
        }
        let mut names = vec![domain.backend_name()];
        if after.sse_routing() {
            names.push(crate::render::sse_twin(domain));
        }
        for name in names {
            ops.extend(backend_ops(&name, before.servers(), after.servers())?);
        }
    }
    (!ops.is_empty()).then_some(ops)
}

fn with_servers(backend: &Backend, servers: &[Server]) -> Option<Backend> {
    Backend::new(servers.to_vec(), backend.profile().clone())
        .ok()
        .map(|b| b.with_sse_routing(backend.sse_routing()))
}

fn backend_ops(backend: &str, before: &[Server], after: &[Server]) -> Option<Vec<ServerOp>> {
    let mut ops = Vec::new();
    let find = |list: &[Server], name: &str| list.iter().find(|s| s.name.as_str() == name).cloned();
    for old in before {
        if find(after, old.name.as_str()).is_none() {
            ops.push(ServerOp::Remove {
                backend: backend.into(),
                name: old.name.as_str().into(),
            });
        }
    }
    for new in after {
        let ip = ip_of(&new.addr.host)?;
        let Some(old) = find(before, new.name.as_str()) else {
            ops.push(ServerOp::Add {
                backend: backend.into(),
                server: new.clone(),
            });
            continue;
        };
        // Only the weight and the address change in place; any other option (checks, TLS…)
        // is a new server line, which only a reload loads.
        let mut same = old.options.clone();
        same.weight = new.options.weight;
        if same != new.options {
            return None;
        }
        if old.options.weight != new.options.weight {
            ops.push(ServerOp::Weight {
                backend: backend.into(),
                name: new.name.as_str().into(),
                weight: new.options.weight.unwrap_or(DEFAULT_WEIGHT),
            });
        }
        if old.addr != new.addr {
            ops.push(ServerOp::Addr {
                backend: backend.into(),
                name: new.name.as_str().into(),
                ip,
                port: new.addr.port.get(),
            });
        }
    }
    Some(ops)
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
    use crate::model::{Domain, Profile, ServerName};

    fn server(name: &str, spec: &str) -> Server {
        Server::parse_spec(spec, name.parse::<ServerName>().unwrap()).unwrap()
    }

    fn state(servers: Vec<Server>) -> EdgeState {
        let mut s = EdgeState::default();
        let domain: Domain = "shop.example.com".parse().unwrap();
        s.domains
            .insert(domain, Backend::new(servers, Profile::Default).unwrap());
        s
    }

    #[test]
    fn server_changes_become_runtime_operations() {
        let old = state(vec![
            server("s1", "10.0.0.1:80"),
            server("s2", "10.0.0.2:80"),
        ]);
        let new = state(vec![
            server("s1", "10.0.0.9:8080,weight=5"),
            server("s3", "10.0.0.3:80"),
        ]);
        let ops = plan(&old, &new).unwrap();
        let be = "d_shop.example.com".to_string();
        assert_eq!(
            ops,
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
                    server: server("s3", "10.0.0.3:80")
                },
            ]
        );
    }

    #[test]
    fn anything_else_needs_a_reload() {
        let old = state(vec![server("s1", "10.0.0.1:80")]);
        assert_eq!(plan(&old, &old), None, "nothing changed");
        // Another option than weight or address.
        assert_eq!(
            plan(&old, &state(vec![server("s1", "10.0.0.1:80,nocheck")])),
            None
        );
        // A host name.
        assert_eq!(
            plan(&old, &state(vec![server("s1", "app.internal:80")])),
            None
        );
        // Another profile.
        let mut other = old.clone();
        let domain: Domain = "shop.example.com".parse().unwrap();
        other.domains.insert(
            domain,
            Backend::new(vec![server("s1", "10.0.0.2:80")], Profile::WebSocket).unwrap(),
        );
        assert_eq!(plan(&old, &other), None);
        // Another domain.
        let mut more = old.clone();
        more.domains.insert(
            "other.example.com".parse().unwrap(),
            Backend::new(vec![server("s1", "10.0.0.2:80")], Profile::Default).unwrap(),
        );
        assert_eq!(plan(&old, &more), None);
        // A change outside the domains.
        let mut suspended = state(vec![server("s1", "10.0.0.2:80")]);
        suspended
            .suspended
            .insert("shop.example.com".parse().unwrap());
        assert_eq!(plan(&old, &suspended), None);
    }
}
