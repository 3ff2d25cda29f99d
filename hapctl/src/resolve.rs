//! Which servers named by host name do not resolve now, and what that means for them.
//!
//! HAProxy loads such a server with `init-addr last,libc,none`: a name that does not resolve
//! leaves it in maintenance (`MAINT (resolution)`) until it does, at the next reload, or at
//! runtime when `[resolvers]` follow it. There are two ways to find those servers, each used
//! where it is right:
//! - HAProxy's own `show servers state` ([`by_haproxy`]), where HAProxy runs and has loaded
//!   the servers (the answer to a change, `hapctl status`): its verdict, runtime resolution
//!   included, at no DNS cost to hapctl.
//! - libc lookups ([`by_lookup`]: `getaddrinfo`, what HAProxy's `libc` init-addr does at
//!   load), where HAProxy has not loaded the names (an import's plan, a change while HAProxy is
//!   stopped). A lookup cannot be cancelled, so each runs on a thread of its own with a
//!   timeout, a bounded number at once, within a bounded total time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::ToSocketAddrs;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde::ser::SerializeMap;

use crate::haproxy::{ServerState, RESOLUTION_MAINT};
use crate::model::{Backend, Domain, EdgeState, HostName, Server, ServerHost, ServerName};

/// How long one lookup may take before its name counts as not answering.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Lookups in flight at once.
const PARALLEL: usize = 16;
/// After this, the names not looked up yet are left unchecked.
const TOTAL_TIME: Duration = Duration::from_secs(20);
/// At most this many servers are named in a warning.
const NAMED_IN_WARNING: usize = 10;

/// A server whose host name does not resolve now: it is down (in maintenance) until it does.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnresolvedServer {
    pub domain: Domain,
    pub server: ServerName,
    pub host: HostName,
    pub seen: Seen,
}

/// How hapctl knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Seen {
    /// HAProxy holds the server in maintenance because its name did not resolve.
    Haproxy,
    /// The system resolver has no address for the name.
    NoAddress,
    /// The system resolver did not answer within [`LOOKUP_TIMEOUT`].
    NoAnswer,
}

/// The servers that do not resolve now, among those looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    pub unresolved: Vec<UnresolvedServer>,
    /// Names not looked up: the lookups' total time ran out first.
    pub unchecked: Vec<HostName>,
    /// `[resolvers]` is configured: HAProxy follows the names at runtime.
    pub follows: bool,
}

impl Resolution {
    pub fn new(follows: bool) -> Resolution {
        Resolution {
            follows,
            ..Resolution::default()
        }
    }

    /// What the unresolved servers mean, for people; `None` when every name resolves.
    pub fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.unresolved.is_empty() {
            let named = self
                .unresolved
                .iter()
                .map(|u| format!("{} ({} server {})", u.host, u.domain, u.server));
            let until = if self.follows {
                "until it resolves: the [resolvers] follow the name and put the server in service without a reload"
            } else {
                "until it resolves at a reload; set [resolvers] in hapctl.toml to follow the name at runtime"
            };
            parts.push(format!(
                "{} server(s) do not resolve now: {}. Each is down (in maintenance) {until}; every other server is served.",
                self.unresolved.len(),
                listed(named, self.unresolved.len())
            ));
        }
        if !self.unchecked.is_empty() {
            let named = self.unchecked.iter().map(HostName::to_string);
            parts.push(format!(
                "{} name(s) were not looked up (the system resolver answered too slowly): {}.",
                self.unchecked.len(),
                listed(named, self.unchecked.len())
            ));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}

impl Resolution {
    /// `body` (a JSON object: an answer, a report) with these fields added.
    pub fn merged_into(&self, mut body: serde_json::Value) -> serde_json::Value {
        if let (serde_json::Value::Object(map), Ok(serde_json::Value::Object(fields))) =
            (&mut body, serde_json::to_value(self))
        {
            map.extend(fields);
        }
        body
    }
}

/// The first few of `items`, and how many more there are.
fn listed(items: impl Iterator<Item = String>, count: usize) -> String {
    let mut text: Vec<String> = items.take(NAMED_IN_WARNING).collect();
    if count > NAMED_IN_WARNING {
        text.push(format!("and {} more", count - NAMED_IN_WARNING));
    }
    text.join(", ")
}

/// `unresolved_servers` and `runtime_resolvers` (always), `unchecked_hosts` and `warning`
/// (when there are any): the fields every answer that reports resolution carries.
impl serde::Serialize for Resolution {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("unresolved_servers", &self.unresolved)?;
        if !self.unchecked.is_empty() {
            map.serialize_entry("unchecked_hosts", &self.unchecked)?;
        }
        map.serialize_entry("runtime_resolvers", &self.follows)?;
        if let Some(warning) = self.warning() {
            map.serialize_entry("warning", &warning)?;
        }
        map.end()
    }
}

/// The same fields read back (the CLI reads the daemon's answer); the warning is derived.
impl<'de> serde::Deserialize<'de> for Resolution {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Resolution, D::Error> {
        #[derive(serde::Deserialize)]
        struct Fields {
            unresolved_servers: Vec<UnresolvedServer>,
            #[serde(default)]
            unchecked_hosts: Vec<HostName>,
            runtime_resolvers: bool,
        }
        let f = Fields::deserialize(d)?;
        Ok(Resolution {
            unresolved: f.unresolved_servers,
            unchecked: f.unchecked_hosts,
            follows: f.runtime_resolvers,
        })
    }
}

/// Whether any server of `backend` is named by host name.
pub fn has_names(backend: &Backend) -> bool {
    backend
        .servers()
        .iter()
        .any(|s| matches!(s.addr.host, ServerHost::Name(_)))
}

fn host_of(server: &Server) -> Option<&HostName> {
    match &server.addr.host {
        ServerHost::Name(h) => Some(h),
        _ => None,
    }
}

/// HAProxy's verdict: the servers of `state`'s domains (only `only`, when given) that
/// `held` (`show servers state`) shows in resolution maintenance.
pub fn by_haproxy(
    state: &EdgeState,
    only: Option<&Domain>,
    held: &[ServerState],
    follows: bool,
) -> Resolution {
    let mut backends: BTreeMap<String, (&Domain, &Backend)> = BTreeMap::new();
    for (domain, backend) in &state.domains {
        if only.is_some_and(|d| d != domain) || !has_names(backend) {
            continue;
        }
        // The SSE twin holds the same servers.
        backends.insert(state.placement.backend_name(domain), (domain, backend));
        backends.insert(state.placement.sse_twin(domain), (domain, backend));
    }
    let mut found = BTreeMap::new();
    for s in held
        .iter()
        .filter(|s| s.admin_state & RESOLUTION_MAINT != 0)
    {
        let Some((domain, backend)) = backends.get(&s.backend) else {
            continue;
        };
        let server = backend
            .servers()
            .iter()
            .find(|x| state.placement.server_name(domain, &x.name) == s.name);
        if let Some((server, host)) = server.and_then(|x| Some((x, host_of(x)?))) {
            let key = ((*domain).clone(), server.name.clone());
            found.entry(key).or_insert_with(|| host.clone());
        }
    }
    let unresolved = found
        .into_iter()
        .map(|((domain, server), host)| UnresolvedServer {
            domain,
            server,
            host,
            seen: Seen::Haproxy,
        })
        .collect();
    Resolution {
        unresolved,
        unchecked: Vec::new(),
        follows,
    }
}

/// The system resolver's verdict on the host names of `servers`.
pub fn by_lookup<'a>(
    servers: impl IntoIterator<Item = (&'a Domain, &'a Server)>,
    follows: bool,
) -> Resolution {
    let named: Vec<(&Domain, &Server, &HostName)> = servers
        .into_iter()
        .filter_map(|(d, s)| Some((d, s, host_of(s)?)))
        .collect();
    let hosts: BTreeSet<HostName> = named.iter().map(|(_, _, h)| (*h).clone()).collect();
    let found = lookup_all(hosts, Arc::new(system_resolves), Bounds::SYSTEM);
    let mut out = Resolution::new(follows);
    for (domain, server, host) in named {
        let seen = match found.get(host) {
            Some(Lookup::NoAddress) => Seen::NoAddress,
            Some(Lookup::NoAnswer) => Seen::NoAnswer,
            _ => continue,
        };
        out.unresolved.push(UnresolvedServer {
            domain: domain.clone(),
            server: server.name.clone(),
            host: host.clone(),
            seen,
        });
    }
    out.unchecked = found
        .into_iter()
        .filter(|(_, l)| *l == Lookup::NotAsked)
        .map(|(h, _)| h)
        .collect();
    out
}

/// One name's lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    Resolved,
    NoAddress,
    NoAnswer,
    NotAsked,
}

struct Bounds {
    timeout: Duration,
    parallel: usize,
    total: Duration,
}

impl Bounds {
    const SYSTEM: Bounds = Bounds {
        timeout: LOOKUP_TIMEOUT,
        parallel: PARALLEL,
        total: TOTAL_TIME,
    };
}

/// `getaddrinfo` of the name, as HAProxy's `libc` init-addr asks it.
fn system_resolves(host: &str) -> bool {
    (host, 0u16)
        .to_socket_addrs()
        .is_ok_and(|mut addrs| addrs.next().is_some())
}

type Resolver = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Looks every name up, `bounds.parallel` at a time. A lookup that outlives its timeout is
/// left to finish on its own thread (its answer is dropped); names not started within the
/// total time are `NotAsked`.
fn lookup_all(
    hosts: BTreeSet<HostName>,
    resolves: Resolver,
    bounds: Bounds,
) -> BTreeMap<HostName, Lookup> {
    let (tx, rx) = mpsc::channel();
    let end = Instant::now() + bounds.total;
    let mut queue = hosts.into_iter();
    let mut flying: BTreeMap<HostName, Instant> = BTreeMap::new();
    let mut out = BTreeMap::new();
    loop {
        while flying.len() < bounds.parallel && Instant::now() < end {
            let Some(host) = queue.next() else { break };
            let (tx, resolves, name) = (tx.clone(), resolves.clone(), host.clone());
            let spawned = std::thread::Builder::new()
                .name("hapctl-lookup".into())
                .spawn(move || {
                    let _ = tx.send((name.clone(), resolves(name.as_str())));
                });
            match spawned {
                Ok(_) => {
                    flying.insert(host, Instant::now() + bounds.timeout);
                }
                Err(_) => {
                    out.insert(host, Lookup::NotAsked);
                }
            }
        }
        let Some(first) = flying.values().min().copied() else {
            break;
        };
        match rx.recv_timeout(first.saturating_duration_since(Instant::now())) {
            Ok((host, ok)) => {
                if flying.remove(&host).is_some() {
                    let found = if ok {
                        Lookup::Resolved
                    } else {
                        Lookup::NoAddress
                    };
                    out.insert(host, found);
                }
            }
            Err(_) => {
                let now = Instant::now();
                let late: Vec<HostName> = flying
                    .iter()
                    .filter(|(_, until)| **until <= now)
                    .map(|(h, _)| h.clone())
                    .collect();
                for host in late {
                    flying.remove(&host);
                    out.insert(host, Lookup::NoAnswer);
                }
            }
        }
    }
    out.extend(queue.map(|h| (h, Lookup::NotAsked)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::haproxy::servers::parse_servers_state;

    fn host(s: &str) -> HostName {
        s.parse().unwrap()
    }

    #[test]
    fn lookups_are_bounded_in_time_and_in_number() {
        let hosts: BTreeSet<HostName> = ["ok", "gone", "slow", "a", "b", "c"]
            .into_iter()
            .map(host)
            .collect();
        let resolves: Resolver = Arc::new(|h: &str| match h {
            "slow" => {
                std::thread::sleep(Duration::from_secs(5));
                true
            }
            "gone" => false,
            _ => true,
        });
        let bounds = Bounds {
            timeout: Duration::from_millis(200),
            parallel: 2,
            total: Duration::from_secs(10),
        };
        let started = Instant::now();
        let found = lookup_all(hosts.clone(), resolves.clone(), bounds);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the slow lookup is not waited for"
        );
        assert_eq!(found[&host("ok")], Lookup::Resolved);
        assert_eq!(found[&host("gone")], Lookup::NoAddress);
        assert_eq!(found[&host("slow")], Lookup::NoAnswer);
        assert_eq!(found.len(), hosts.len());

        // Once the total time is spent, the names not started yet are not asked.
        let bounds = Bounds {
            timeout: Duration::from_millis(300),
            parallel: 1,
            total: Duration::from_millis(100),
        };
        let hosts: BTreeSet<HostName> = ["a", "slow", "zz"].into_iter().map(host).collect();
        let found = lookup_all(hosts, resolves, bounds);
        assert_eq!(found[&host("a")], Lookup::Resolved, "{found:?}");
        assert_eq!(found[&host("slow")], Lookup::NoAnswer, "{found:?}");
        assert_eq!(found[&host("zz")], Lookup::NotAsked, "{found:?}");
    }

    #[test]
    fn haproxys_resolution_maintenance_names_the_domains_servers() {
        // `show servers state` on HAProxy 2.6 with wp_site_1 unresolved (measured).
        let answer = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n3 d_blog.test 1 wp - 0 32 1 1 1 1 0 0 14 0 0 0 wp_site_1 80 - 0 0 - - 0\n3 d_blog.test 2 ip 127.0.0.1 2 0 1 1 0 8 2 0 6 0 0 0 - 8080 - 0 0 - - 0\n4 d_blog.test_sse 1 wp - 0 32 1 1 1 1 0 0 14 0 0 0 wp_site_1 80 - 0 0 - - 0\n5 d_other.test 1 s1 - 0 32 1 1 1 1 0 0 14 0 0 0 db 80 - 0 0 - - 0\n";
        let held = parse_servers_state(answer).unwrap();
        let mut state = EdgeState::default();
        let servers = vec![
            Server::parse_spec("wp_site_1:80", "wp".parse().unwrap()).unwrap(),
            Server::parse_spec("127.0.0.1:8080", "ip".parse().unwrap()).unwrap(),
        ];
        let blog: Domain = "blog.test".parse().unwrap();
        let backend = Backend::new(servers, Default::default()).unwrap();
        state
            .domains
            .insert(blog.clone(), backend.with_sse_routing(true));
        let r = by_haproxy(&state, None, &held, false);
        assert_eq!(
            r.unresolved,
            [UnresolvedServer {
                domain: blog.clone(),
                server: "wp".parse().unwrap(),
                host: host("wp_site_1"),
                seen: Seen::Haproxy,
            }],
            "once, not for the twin; not for a backend hapctl does not have"
        );
        let warning = r.warning().unwrap();
        assert!(
            warning.contains("wp_site_1 (blog.test server wp)"),
            "{warning}"
        );
        assert!(
            warning.contains("at a reload; set [resolvers]"),
            "{warning}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["unresolved_servers"][0]["seen"], "haproxy");
        assert!(json.get("unchecked_hosts").is_none(), "{json}");
        let other: Domain = "other.test".parse().unwrap();
        assert!(by_haproxy(&state, Some(&other), &held, true)
            .unresolved
            .is_empty());
        let clear = serde_json::to_value(Resolution::new(true)).unwrap();
        assert_eq!(
            clear,
            serde_json::json!({"unresolved_servers": [], "runtime_resolvers": true})
        );
        let back: Resolution = serde_json::from_value(json).unwrap();
        assert_eq!(back, r, "read back as it was written");
    }
}
