//! Where a domain's servers sit in haproxy.cfg: in its own backend (`d_<domain>`), or in a
//! pre-allocated slot backend (`slot_<kind>_<n>`) that the runtime API filled.
//!
//! HAProxy cannot create a backend without a reload, so every reload also loads a few empty
//! backends of each shape in use. A new domain of that shape takes a free one at runtime (its
//! servers added with `add server`, its route with `add map`), and the files say the same.
//! The next apply that reloads anyway moves every slotted domain back to its own backend and
//! sizes the spares again. Server names in a slot start with the domain, so stats and logs
//! still say which domain a backend serves.

use std::collections::BTreeMap;
use std::str::FromStr;

use super::{Backend, Domain, DomainBackend, EdgeState, Invalid, Profile, ServerName};

/// A backend shape that has slots: the profiles without their own per-domain lines, each
/// alone or with an event-stream twin beside it (a domain with SSE routing, as the old
/// manager's routes make them: the twin has the same servers and long-lived timeouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlotKind {
    Default,
    WebSocket,
    Sse,
    LongLived,
    DefaultTwin,
    WebSocketTwin,
    SseTwin,
    LongLivedTwin,
}

impl SlotKind {
    pub const ALL: [SlotKind; 8] = [
        SlotKind::Default,
        SlotKind::WebSocket,
        SlotKind::Sse,
        SlotKind::LongLived,
        SlotKind::DefaultTwin,
        SlotKind::WebSocketTwin,
        SlotKind::SseTwin,
        SlotKind::LongLivedTwin,
    ];

    /// The slot kind a domain's backend fits; `None` for a profile with lines of its own
    /// (`http-check:PATH`).
    pub fn of(backend: &Backend) -> Option<SlotKind> {
        let twin = backend.sse_routing();
        Some(match (backend.profile(), twin) {
            (Profile::Default, false) => SlotKind::Default,
            (Profile::WebSocket, false) => SlotKind::WebSocket,
            (Profile::Sse, false) => SlotKind::Sse,
            (Profile::LongLived, false) => SlotKind::LongLived,
            (Profile::Default, true) => SlotKind::DefaultTwin,
            (Profile::WebSocket, true) => SlotKind::WebSocketTwin,
            (Profile::Sse, true) => SlotKind::SseTwin,
            (Profile::LongLived, true) => SlotKind::LongLivedTwin,
            (Profile::HttpCheck(_), _) => return None,
        })
    }

    /// The profile whose directives an empty slot of this kind carries.
    pub fn profile(self) -> Profile {
        match self {
            SlotKind::Default | SlotKind::DefaultTwin => Profile::Default,
            SlotKind::WebSocket | SlotKind::WebSocketTwin => Profile::WebSocket,
            SlotKind::Sse | SlotKind::SseTwin => Profile::Sse,
            SlotKind::LongLived | SlotKind::LongLivedTwin => Profile::LongLived,
        }
    }

    /// Whether each slot of this kind has an event-stream twin backend.
    pub fn has_twin(self) -> bool {
        matches!(
            self,
            SlotKind::DefaultTwin
                | SlotKind::WebSocketTwin
                | SlotKind::SseTwin
                | SlotKind::LongLivedTwin
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SlotKind::Default => "default",
            SlotKind::WebSocket => "websocket",
            SlotKind::Sse => "sse",
            SlotKind::LongLived => "longlived",
            SlotKind::DefaultTwin => "default_sse",
            SlotKind::WebSocketTwin => "websocket_sse",
            SlotKind::SseTwin => "sse_sse",
            SlotKind::LongLivedTwin => "longlived_sse",
        }
    }

    /// Spare slots once one domain of this kind exists (the default kind: always). The old
    /// manager's routes make every domain of theirs a default one with a twin, so that kind
    /// gets as many spares as the default kind.
    fn floor(self, in_use: bool) -> Option<u16> {
        match self {
            SlotKind::Default => Some(MIN_DEFAULT_SPARES),
            _ if !in_use => None,
            SlotKind::DefaultTwin => Some(MIN_DEFAULT_SPARES),
            _ => Some(MIN_OTHER_SPARES),
        }
    }
}

impl FromStr for SlotKind {
    type Err = Invalid;

    fn from_str(s: &str) -> Result<SlotKind, Invalid> {
        SlotKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                Invalid::new(
                    "slot kind",
                    s,
                    "default, websocket, sse or longlived, each alone or with _sse",
                )
            })
    }
}

/// One slot backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendSlot {
    pub kind: SlotKind,
    pub index: u16,
}

impl BackendSlot {
    /// `slot_<kind>_<n>`: `_` never occurs in a domain name and app backends may not start
    /// with `slot_`, so it collides with nothing.
    pub fn backend_name(self) -> String {
        self.to_string()
    }

    /// The event-stream twin of a slot whose kind has one (`<slot>_sse`).
    pub fn twin_name(self) -> Option<String> {
        self.kind.has_twin().then(|| format!("{self}_sse"))
    }
}

/// The backend serving a domain: its own or a slot's (see [`Placement::backend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainBackendOf<'d> {
    Own(DomainBackend<'d>),
    Slot(BackendSlot),
}

impl std::fmt::Display for DomainBackendOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DomainBackendOf::Own(name) => name.fmt(f),
            DomainBackendOf::Slot(slot) => slot.fmt(f),
        }
    }
}

impl std::fmt::Display for BackendSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slot_{}_{}", self.kind.as_str(), self.index)
    }
}

/// Most spare slots of one kind: each is an empty backend in every check and reload.
pub const MAX_SPARES: u16 = 512;
/// Spare slots of the default kind on any edge: the first domains need no reload either.
const MIN_DEFAULT_SPARES: u16 = 16;
/// Spare slots of another kind once one domain of it exists.
const MIN_OTHER_SPARES: u16 = 4;

/// The slots each kind has and which domain sits in which.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    capacity: BTreeMap<SlotKind, u16>,
    slots: BTreeMap<Domain, BackendSlot>,
}

impl Placement {
    /// Checks what the database holds: every slot within its kind's capacity, used once, by
    /// an exact domain.
    pub fn new(
        capacity: BTreeMap<SlotKind, u16>,
        slots: BTreeMap<Domain, BackendSlot>,
    ) -> Result<Placement, Invalid> {
        let mut seen = std::collections::BTreeSet::new();
        for (domain, slot) in &slots {
            let shown = || format!("{domain} in {}", slot.backend_name());
            if domain.is_wildcard() {
                return Err(Invalid::new(
                    "slot",
                    &shown(),
                    "only exact domains take slots",
                ));
            }
            if slot.index >= capacity.get(&slot.kind).copied().unwrap_or(0) {
                return Err(Invalid::new("slot", &shown(), "beyond its kind's capacity"));
            }
            if !seen.insert(*slot) {
                return Err(Invalid::new("slot", &shown(), "used by two domains"));
            }
        }
        Ok(Placement { capacity, slots })
    }

    /// Every domain in its own backend, and spares sized from how many domains of each kind
    /// `state` has: a twentieth of them, at least 16 default ones (4 of a kind in use).
    pub fn sized_for(state: &EdgeState) -> Placement {
        let mut counts: BTreeMap<SlotKind, usize> = BTreeMap::new();
        for backend in state.domains.values() {
            if let Some(kind) = SlotKind::of(backend) {
                *counts.entry(kind).or_default() += 1;
            }
        }
        let capacity = SlotKind::ALL
            .into_iter()
            .filter_map(|kind| {
                let n = counts.get(&kind).copied().unwrap_or(0);
                let floor = kind.floor(n > 0)?;
                let share = u16::try_from(n.div_ceil(20)).unwrap_or(MAX_SPARES);
                Some((kind, share.clamp(floor, MAX_SPARES)))
            })
            .collect();
        Placement {
            capacity,
            slots: BTreeMap::new(),
        }
    }

    pub fn capacity(&self, kind: SlotKind) -> u16 {
        self.capacity.get(&kind).copied().unwrap_or(0)
    }

    pub fn capacities(&self) -> impl Iterator<Item = (SlotKind, u16)> + '_ {
        self.capacity.iter().map(|(k, n)| (*k, *n))
    }

    pub fn slots(&self) -> impl Iterator<Item = (&Domain, BackendSlot)> {
        self.slots.iter().map(|(d, s)| (d, *s))
    }

    pub fn slot_of(&self, domain: &Domain) -> Option<BackendSlot> {
        self.slots.get(domain).copied()
    }

    /// The domain in each slot of `kind`, by index (`None`: free).
    pub fn occupants(&self, kind: SlotKind) -> Vec<Option<&Domain>> {
        let mut out = vec![None; usize::from(self.capacity(kind))];
        for (domain, slot) in self.slots.iter().filter(|(_, s)| s.kind == kind) {
            if let Some(place) = out.get_mut(usize::from(slot.index)) {
                *place = Some(domain);
            }
        }
        out
    }

    /// Puts `domain` into the lowest free slot of `kind`; `None` when they are all taken.
    pub fn place(&mut self, domain: &Domain, kind: SlotKind) -> Option<BackendSlot> {
        let index = self.occupants(kind).iter().position(Option::is_none)?;
        let slot = BackendSlot {
            kind,
            index: u16::try_from(index).ok()?,
        };
        self.slots.insert(domain.clone(), slot);
        Some(slot)
    }

    /// Frees the slot of a domain that is gone.
    pub fn release(&mut self, domain: &Domain) {
        self.slots.remove(domain);
    }

    /// The backend that serves `domain`: its slot's, or its own.
    pub fn backend_name(&self, domain: &Domain) -> String {
        self.backend(domain).to_string()
    }

    /// [`Placement::backend_name`] as `Display`, for writing 10,000 of them without a String
    /// each.
    pub fn backend<'d>(&self, domain: &'d Domain) -> DomainBackendOf<'d> {
        match self.slot_of(domain) {
            Some(slot) => DomainBackendOf::Slot(slot),
            None => DomainBackendOf::Own(domain.backend()),
        }
    }

    /// The event-stream twin of a domain with SSE routing: its slot's, or the one beside its
    /// own backend.
    pub fn sse_twin(&self, domain: &Domain) -> String {
        self.slot_of(domain)
            .and_then(BackendSlot::twin_name)
            .unwrap_or_else(|| domain.sse_twin_name())
    }

    /// A server's name in HAProxy: in a slot, `<domain>:<server>`, so stats name the domain.
    pub fn server_name(&self, domain: &Domain, server: &ServerName) -> String {
        match self.slot_of(domain) {
            Some(_) => format!("{domain}:{}", server.as_str()),
            None => server.as_str().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Server;

    fn one_server() -> Vec<Server> {
        vec![Server::parse_spec("10.0.0.1:80", "s1".parse().unwrap()).unwrap()]
    }

    fn domain(s: &str) -> Domain {
        s.parse().unwrap()
    }

    #[test]
    fn spares_follow_the_domain_count_and_free_slots_are_reused() {
        let mut state = EdgeState::default();
        let placement = Placement::sized_for(&state);
        assert_eq!(placement.capacity(SlotKind::Default), 16);
        assert_eq!(
            placement.capacity(SlotKind::WebSocket),
            0,
            "no websocket domain yet"
        );
        for i in 0..1000 {
            state.domains.insert(
                domain(&format!("d{i}.example.com")),
                Backend::new(one_server(), Profile::Default).unwrap(),
            );
        }
        state.domains.insert(
            domain("ws.example.com"),
            Backend::new(one_server(), Profile::WebSocket).unwrap(),
        );
        let mut placement = Placement::sized_for(&state);
        assert_eq!(placement.capacity(SlotKind::Default), 50);
        assert_eq!(placement.capacity(SlotKind::WebSocket), 4);

        let a = placement.place(&domain("a.example.com"), SlotKind::WebSocket);
        let b = placement.place(&domain("b.example.com"), SlotKind::WebSocket);
        assert_eq!(
            a.map(|s| s.backend_name()).as_deref(),
            Some("slot_websocket_0")
        );
        assert_eq!(b.map(|s| s.index), Some(1));
        placement.release(&domain("a.example.com"));
        let c = placement.place(&domain("c.example.com"), SlotKind::WebSocket);
        assert_eq!(c.map(|s| s.index), Some(0), "the freed slot is taken first");
        for name in ["e", "f"] {
            assert!(placement
                .place(&domain(&format!("{name}.example.com")), SlotKind::WebSocket)
                .is_some());
        }
        assert_eq!(
            placement.place(&domain("g.example.com"), SlotKind::WebSocket),
            None,
            "full"
        );
        assert_eq!(
            placement.server_name(&domain("c.example.com"), &"s1".parse().unwrap()),
            "c.example.com:s1"
        );
        assert_eq!(
            placement.backend_name(&domain("x.example.com")),
            "d_x.example.com"
        );
    }

    #[test]
    fn domains_with_sse_routing_take_slots_with_a_twin() {
        let mut state = EdgeState::default();
        let compat = || {
            Backend::new(one_server(), Profile::Default)
                .unwrap()
                .with_sse_routing(true)
        };
        assert_eq!(SlotKind::of(&compat()), Some(SlotKind::DefaultTwin));
        let placement = Placement::sized_for(&state);
        assert_eq!(placement.capacity(SlotKind::DefaultTwin), 0, "none in use");
        for i in 0..10 {
            state
                .domains
                .insert(domain(&format!("c{i}.example.com")), compat());
        }
        state.domains.insert(
            domain("long.example.com"),
            Backend::new(one_server(), Profile::LongLived)
                .unwrap()
                .with_sse_routing(true),
        );
        let mut placement = Placement::sized_for(&state);
        assert_eq!(placement.capacity(SlotKind::DefaultTwin), 16);
        assert_eq!(placement.capacity(SlotKind::LongLivedTwin), 4);
        let placed = domain("new.example.com");
        let slot = placement.place(&placed, SlotKind::DefaultTwin).unwrap();
        assert_eq!(slot.backend_name(), "slot_default_sse_0");
        assert_eq!(slot.twin_name().as_deref(), Some("slot_default_sse_0_sse"));
        assert_eq!(placement.sse_twin(&placed), "slot_default_sse_0_sse");
        assert_eq!(
            placement.sse_twin(&domain("c1.example.com")),
            "d_c1.example.com_sse"
        );
        assert_eq!(
            "default_sse".parse::<SlotKind>().unwrap(),
            SlotKind::DefaultTwin
        );
    }

    #[test]
    fn a_broken_placement_is_refused() {
        let capacity = BTreeMap::from([(SlotKind::Default, 2)]);
        let slot = |index| BackendSlot {
            kind: SlotKind::Default,
            index,
        };
        let two = BTreeMap::from([
            (domain("a.example.com"), slot(1)),
            (domain("b.example.com"), slot(1)),
        ]);
        assert!(Placement::new(capacity.clone(), two).is_err());
        let beyond = BTreeMap::from([(domain("a.example.com"), slot(2))]);
        assert!(Placement::new(capacity.clone(), beyond).is_err());
        let wild = BTreeMap::from([(domain("*.example.com"), slot(0))]);
        assert!(Placement::new(capacity.clone(), wild).is_err());
        let fine = BTreeMap::from([(domain("a.example.com"), slot(0))]);
        assert!(Placement::new(capacity, fine).is_ok());
        assert_eq!(
            "longlived".parse::<SlotKind>().unwrap(),
            SlotKind::LongLived
        );
        assert!("spare".parse::<SlotKind>().is_err());
    }
}
