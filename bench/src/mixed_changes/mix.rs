//! The mix of mixed-changes: the kinds of change, their shares, the bench's model of the
//! edge, and the seeded generator that turns it into the next request.

use serde_json::{json, Value};

use crate::fixture::{self, Servers};

/// Fixed, so every run (and every size) sends the same sequence of kinds.
pub(super) const SEED: u64 = 0x6d69_7865_642d_0013;
/// Servers a domain may grow to through server adds.
const MAX_SERVERS: usize = 4;
const BLOCK_REASON: &str = "hapctl-bench mixed-changes";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    ServerAdd,
    ServerRemove,
    ServerWeight,
    DomainAdd,
    DomainRemove,
    BlockAdd,
    BlockRemove,
    Https,
    Suspension,
    Profile,
    Check,
}

impl Kind {
    /// The mix, in changes per 100; the last two are the ones that need a reload.
    pub(super) const MIX: [(Kind, u64); 11] = [
        (Kind::ServerAdd, 14),
        (Kind::ServerRemove, 12),
        (Kind::ServerWeight, 20),
        (Kind::DomainAdd, 12),
        (Kind::DomainRemove, 10),
        (Kind::BlockAdd, 10),
        (Kind::BlockRemove, 8),
        (Kind::Https, 5),
        (Kind::Suspension, 5),
        (Kind::Profile, 2),
        (Kind::Check, 2),
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::ServerAdd => "server added",
            Kind::ServerRemove => "server removed",
            Kind::ServerWeight => "server re-weighted",
            Kind::DomainAdd => "domain added",
            Kind::DomainRemove => "domain removed",
            Kind::BlockAdd => "block added",
            Kind::BlockRemove => "block removed",
            Kind::Https => "HTTPS policy",
            Kind::Suspension => "suspend / resume",
            Kind::Profile => "profile (reload)",
            Kind::Check => "server check (reload)",
        }
    }

    /// Whether hapctl has a runtime path for this kind (no reload expected).
    pub(super) fn runtime(self) -> bool {
        !matches!(self, Kind::Profile | Kind::Check)
    }

    /// What to send instead when this kind has nothing to act on (nothing to remove, every
    /// domain full).
    fn fallback(self) -> Kind {
        match self {
            Kind::ServerAdd => Kind::ServerRemove,
            Kind::ServerRemove => Kind::ServerAdd,
            Kind::DomainRemove => Kind::DomainAdd,
            Kind::BlockRemove => Kind::BlockAdd,
            other => other,
        }
    }
}

/// splitmix64: tiny, seeded, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone)]
struct Srv {
    name: String,
    addr: String,
    weight: Option<u16>,
    check: bool,
}

/// What the bench believes a domain is; every PUT sends all of it.
#[derive(Clone)]
struct Dom {
    name: String,
    profile: String,
    /// The profile it started with (a profile change toggles between this and long-lived).
    own_profile: String,
    servers: Vec<Srv>,
    next_server: usize,
    /// A fixture domain (never removed; HTTPS, suspension, profile and check changes).
    fixture: bool,
    https: bool,
    suspended: bool,
}

impl Dom {
    fn put_body(&self) -> Value {
        let servers: Vec<Value> = self
            .servers
            .iter()
            .map(|s| {
                let mut v = json!({"name": s.name, "address": s.addr, "check": s.check});
                if let Some(w) = s.weight {
                    v["weight"] = json!(w);
                }
                v
            })
            .collect();
        json!({"servers": servers, "profile": self.profile})
    }
}

/// One change to send.
pub(super) struct Request {
    pub(super) kind: Kind,
    pub(super) method: &'static str,
    pub(super) path: String,
    pub(super) body: Option<Value>,
}

/// The edge as the bench models it, and the seeded source of the next change.
pub(super) struct Mix {
    rng: Rng,
    domains: Vec<Dom>,
    blocks: Vec<String>,
    next_domain: usize,
    next_block: usize,
    a: String,
    b: String,
}

impl Mix {
    /// The exact fixture domains whose profile has slots (the runtime path's shapes).
    pub(super) fn new(n: usize, a: &str, b: &str) -> Mix {
        let domains = (0..n)
            .filter_map(|i| {
                let name = fixture::domain(i);
                let backend = fixture::backend(i, Servers::At(a));
                let profile = backend.profile().to_string();
                let slotted = ["default", "websocket", "sse", "long-lived"].contains(&&*profile);
                if name.is_wildcard() || !slotted || backend.sse_routing() {
                    return None;
                }
                let servers: Vec<Srv> = backend
                    .servers()
                    .iter()
                    .map(|s| Srv {
                        name: s.name.as_str().to_string(),
                        addr: a.to_string(),
                        weight: s.options.weight,
                        check: s.options.check,
                    })
                    .collect();
                Some(Dom {
                    name: name.to_string(),
                    own_profile: profile.clone(),
                    profile,
                    next_server: servers.len() + 1,
                    servers,
                    fixture: true,
                    https: false,
                    suspended: false,
                })
            })
            .collect();
        Mix {
            rng: Rng(SEED),
            domains,
            blocks: Vec::new(),
            next_domain: 0,
            next_block: 0,
            a: a.into(),
            b: b.into(),
        }
    }

    /// How many domains server changes may act on.
    pub(super) fn domains(&self) -> usize {
        self.domains.len()
    }

    fn kind(&mut self) -> Kind {
        let total: u64 = Kind::MIX.iter().map(|(_, w)| w).sum();
        let mut r = self.rng.next() % total;
        for (kind, w) in Kind::MIX {
            if r < w {
                return kind;
            }
            r -= w;
        }
        unreachable!("r < total")
    }

    /// A random domain that satisfies `ok`, by index.
    fn pick(&mut self, ok: impl Fn(&Dom) -> bool) -> Option<usize> {
        let fits: Vec<usize> = (0..self.domains.len())
            .filter(|&i| ok(&self.domains[i]))
            .collect();
        (!fits.is_empty()).then(|| fits[self.rng.below(fits.len())])
    }

    /// The next change; the model is updated as if it succeeded (a failure ends the run).
    pub(super) fn next(&mut self) -> Request {
        let kind = self.kind();
        self.make(kind)
            .or_else(|| self.make(kind.fallback()))
            .expect("a kind and its fallback always have something to act on")
    }

    fn make(&mut self, kind: Kind) -> Option<Request> {
        match kind {
            Kind::ServerAdd => self.server_add(),
            Kind::ServerRemove => {
                let i = self.pick(|d| d.servers.len() > 1)?;
                let k = self.rng.below(self.domains[i].servers.len());
                self.domains[i].servers.remove(k);
                Some(put(kind, &self.domains[i]))
            }
            Kind::ServerWeight => {
                let i = self.pick(|_| true)?;
                let k = self.rng.below(self.domains[i].servers.len());
                let w = self.rng.below(101) as u16;
                self.domains[i].servers[k].weight = Some(w);
                Some(put(kind, &self.domains[i]))
            }
            Kind::DomainAdd => Some(self.domain_add()),
            Kind::DomainRemove => {
                let i = self.pick(|d| !d.fixture)?;
                let d = self.domains.remove(i);
                Some(Request {
                    kind,
                    method: "DELETE",
                    path: format!("/v1/domains/{}", d.name),
                    body: None,
                })
            }
            Kind::BlockAdd => Some(self.block_add()),
            Kind::BlockRemove => {
                if self.blocks.is_empty() {
                    return None;
                }
                let key = self.blocks.remove(self.rng.below(self.blocks.len()));
                Some(Request {
                    kind,
                    method: "DELETE",
                    path: format!("/v1/blocked-ips/{key}"),
                    body: None,
                })
            }
            Kind::Https | Kind::Suspension | Kind::Profile | Kind::Check => self.toggle(kind),
        }
    }

    fn server_add(&mut self) -> Option<Request> {
        let i = self.pick(|d| d.servers.len() < MAX_SERVERS)?;
        let addr = if self.rng.below(2) == 0 {
            self.b.clone()
        } else {
            self.a.clone()
        };
        let d = &mut self.domains[i];
        d.servers.push(Srv {
            name: format!("s{}", d.next_server),
            addr,
            weight: None,
            check: false,
        });
        d.next_server += 1;
        Some(put(Kind::ServerAdd, d))
    }

    fn domain_add(&mut self) -> Request {
        let profile = match self.rng.below(20) {
            0..=14 => "default",
            15..=17 => "websocket",
            _ => "long-lived",
        };
        let d = Dom {
            name: format!("new-{}.example.com", self.next_domain),
            profile: profile.into(),
            own_profile: profile.into(),
            servers: vec![Srv {
                name: "s1".into(),
                addr: self.a.clone(),
                weight: None,
                check: false,
            }],
            next_server: 2,
            fixture: false,
            https: false,
            suspended: false,
        };
        self.next_domain += 1;
        let req = put(Kind::DomainAdd, &d);
        self.domains.push(d);
        req
    }

    fn block_add(&mut self) -> Request {
        let key = format!(
            "100.64.{}.{}",
            (self.next_block >> 8) & 0xff,
            self.next_block & 0xff
        );
        self.next_block += 1;
        self.blocks.push(key.clone());
        Request {
            kind: Kind::BlockAdd,
            method: "POST",
            path: "/v1/blocked-ips".into(),
            body: Some(json!({"ip": key, "reason": BLOCK_REASON})),
        }
    }

    /// Flips one setting of a fixture domain: HTTPS, suspension, profile or its first
    /// server's check.
    fn toggle(&mut self, kind: Kind) -> Option<Request> {
        let i = self.pick(|d| d.fixture)?;
        let d = &mut self.domains[i];
        Some(match kind {
            Kind::Https => {
                d.https = !d.https;
                let body = if d.https {
                    json!({"redirect": "301", "hsts_max_age": 31_536_000})
                } else {
                    json!({"redirect": "off"})
                };
                Request {
                    kind,
                    method: "PUT",
                    path: format!("/v1/domains/{}/https", d.name),
                    body: Some(body),
                }
            }
            Kind::Suspension => {
                d.suspended = !d.suspended;
                let verb = if d.suspended { "suspend" } else { "resume" };
                Request {
                    kind,
                    method: "POST",
                    path: format!("/v1/domains/{}/{verb}", d.name),
                    body: None,
                }
            }
            Kind::Profile => {
                d.profile = if d.profile == d.own_profile {
                    "long-lived".into()
                } else {
                    d.own_profile.clone()
                };
                put(kind, d)
            }
            Kind::Check => {
                d.servers[0].check = !d.servers[0].check;
                put(kind, d)
            }
            other => unreachable!("{} is not a toggle", other.name()),
        })
    }
}

/// The PUT of a domain's whole definition.
fn put(kind: Kind, d: &Dom) -> Request {
    Request {
        kind,
        method: "PUT",
        path: format!("/v1/domains/{}", d.name),
        body: Some(d.put_body()),
    }
}
