//! The domains' backend sections of haproxy.cfg, one per domain, shaped by its profile, and the
//! long-lived twin of each domain with per-request SSE routing.

use std::fmt::Write;

use crate::model::{Backend, BackendSlot, Domain, EdgeState, Profile, ServerHost};

/// The old manager's `-sse-backend` directives: no buffering delay, 6 h for a stream to stay
/// open (and to wait between events).
const SSE_TWIN: &str = "    balance roundrobin\n    timeout server 6h\n    timeout tunnel 6h\n    timeout http-keep-alive 6h\n    option http-no-delay\n";

/// Every domain's backend section (and SSE twin), in domain order, then the slot backends.
/// With `resolvers` (the section's name), servers named by host name are resolved at runtime
/// and may start unresolved. With `memo`, a domain whose inputs are those of the last render
/// keeps its text from then (see [`Sections`]).
pub(super) fn sections(
    state: &EdgeState,
    resolvers: Option<&str>,
    memo: Option<&mut Sections>,
) -> String {
    let lasting = memo.is_some();
    let mut fresh = Sections::default();
    let memo = memo.unwrap_or(&mut fresh);
    // Both are in domain order: one pass over the two, no lookup per domain.
    let mut last = std::mem::take(&mut memo.entries).into_iter().peekable();
    let mut next = Vec::with_capacity(state.domains.len());
    // The joined own sections stay as they are while no domain with one comes or goes and
    // none of them changes (a domain added into a slot leaves them all alone).
    let mut own_same = !memo.own.is_empty();
    for (domain, backend) in &state.domains {
        // Equality first: the names are shared with the last state, so it is a pointer test.
        while let Some((_, gone)) = last.next_if(|(key, _)| key != domain && key < domain) {
            own_same &= gone.slot.is_some();
        }
        let (slot, resolved) = (state.placement.slot_of(domain), resolvers.is_some());
        let kept = last.next_if(|(key, e)| {
            key == domain && e.slot == slot && e.resolved == resolved && e.backend == *backend
        });
        own_same &= kept.is_some() || slot.is_some();
        let entry = kept.unwrap_or_else(|| {
            (
                domain.clone(),
                Entry {
                    text: domain_text(domain, backend, slot, resolvers),
                    backend: backend.clone(),
                    slot,
                    resolved,
                },
            )
        });
        next.push(entry);
    }
    own_same &= last.all(|(_, e)| e.slot.is_some());
    memo.entries = next;
    if !own_same {
        memo.own = memo
            .entries
            .iter()
            .filter(|(_, e)| e.slot.is_none())
            .map(|(_, e)| e.text.as_str())
            .collect();
    }
    let mut out = if lasting {
        let mut out = String::with_capacity(memo.own.len() + 4096);
        out.push_str(&memo.own);
        out
    } else {
        std::mem::take(&mut memo.own)
    };
    slot_sections(&mut out, state, &memo.entries);
    out
}

/// The backend sections of the last render, by domain, with what they were rendered from: a
/// render at 10,000 domains formats ~1.5 MB of server lines, most of them unchanged from one
/// apply to the next. Owned by whoever renders repeatedly (the apply), empty at first.
#[derive(Debug, Default)]
pub struct Sections {
    entries: Vec<(Domain, Entry)>,
    /// The texts of the entries in backends of their own, joined in domain order.
    own: String,
}

#[derive(Debug)]
struct Entry {
    /// What the text was rendered from: the state's own backend, shared (a clone is a
    /// pointer), so an unchanged domain compares equal at a glance.
    backend: Backend,
    slot: Option<BackendSlot>,
    resolved: bool,
    text: String,
}

/// A domain's own section and SSE twin, or, in a slot, the slot's section.
fn domain_text(
    domain: &Domain,
    backend: &Backend,
    slot: Option<BackendSlot>,
    resolvers: Option<&str>,
) -> String {
    let mut out = String::with_capacity(256);
    let profile = backend.profile();
    let directives = directives(profile);
    let (name, twin, comment, prefix) = match slot {
        Some(slot) => (
            slot.backend_name(),
            slot.twin_name(),
            format!("slot: {domain} ({})", kind_name(profile)),
            Some(domain.to_string()),
        ),
        None => (
            domain.backend_name(),
            backend.sse_routing().then(|| domain.sse_twin_name()),
            format!("{domain} ({})", kind_name(profile)),
            None,
        ),
    };
    section(
        &mut out,
        &name,
        &comment,
        directives,
        backend,
        prefix.clone(),
        resolvers,
    );
    if let Some(twin) = twin {
        let comment = format!("{domain}: event streams (SSE routing)");
        section(
            &mut out, &twin, &comment, SSE_TWIN, backend, prefix, resolvers,
        );
    }
    // Kept in the memo until the domain changes: ~150 bytes, not the 256 reserved.
    out.shrink_to_fit();
    out
}

/// The slot backends of every kind: the domain a slot serves (its servers named
/// `<domain>:<server>`), or empty, waiting for one.
fn slot_sections(out: &mut String, state: &EdgeState, texts: &[(Domain, Entry)]) {
    let text_of = |domain: &Domain| {
        texts
            .binary_search_by(|(key, _)| key.cmp(domain))
            .ok()
            .map(|at| &texts[at].1)
    };
    for (kind, _) in state.placement.capacities() {
        for (index, occupant) in state.placement.occupants(kind).into_iter().enumerate() {
            match occupant.and_then(text_of) {
                Some(entry) => out.push_str(&entry.text),
                None => {
                    let slot = BackendSlot {
                        kind,
                        index: index as u16,
                    };
                    let profile = kind.profile();
                    let comment = format!(
                        "spare slot ({}): empty until a domain takes it at runtime",
                        kind_name(&profile)
                    );
                    let _ = write!(
                        out,
                        "\nbackend {}\n    # {comment}\n{}",
                        slot.backend_name(),
                        directives(&profile)
                    );
                    if let Some(twin) = slot.twin_name() {
                        let _ = write!(
                            out,
                            "\nbackend {twin}\n    # spare slot's event-stream twin\n{SSE_TWIN}"
                        );
                    }
                }
            }
        }
    }
}

fn kind_name(profile: &Profile) -> &'static str {
    match profile {
        Profile::Default => "default",
        Profile::WebSocket => "websocket",
        Profile::Sse => "sse",
        Profile::LongLived => "long-lived",
        Profile::HttpCheck(_) => "http-check",
    }
}

fn directives(profile: &Profile) -> &'static str {
    match profile {
        Profile::WebSocket => "    balance leastconn\n    timeout tunnel 1h\n",
        Profile::Sse => "    balance roundrobin\n    timeout server 1h\n    option http-no-delay\n",
        Profile::LongLived => SSE_TWIN,
        Profile::Default | Profile::HttpCheck(_) => "    balance roundrobin\n",
    }
}

/// One backend section with `backend`'s health check and servers (their names after
/// `prefix:` in a slot). Writing to a String cannot fail.
fn section(
    out: &mut String,
    name: &str,
    comment: &str,
    directives: &str,
    backend: &Backend,
    prefix: Option<String>,
    resolvers: Option<&str>,
) {
    let _ = write!(out, "\nbackend {name}\n    # {comment}\n{directives}");
    if let Profile::HttpCheck(path) = backend.profile() {
        let _ = write!(
            out,
            "    option httpchk GET {path}\n    http-check expect rstatus ^[23]\n"
        );
    }
    for s in backend.servers() {
        match &prefix {
            Some(p) => write!(out, "    server {p}:{} {}", s.name, s.addr),
            None => write!(out, "    server {} {}", s.name, s.addr),
        }
        .unwrap_or_default();
        let options = s.options.to_text();
        if !options.is_empty() {
            let _ = write!(out, " {options}");
        }
        // A name that does not resolve leaves its server in maintenance, never the whole
        // configuration refused; `[resolvers]` also follow the name at runtime.
        if let ServerHost::Name(_) = &s.addr.host {
            if let Some(r) = resolvers {
                let _ = write!(out, " resolvers {r}");
            }
            out.push_str(" init-addr last,libc,none");
        }
        out.push('\n');
    }
}
