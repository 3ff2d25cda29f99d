//! Desired state → the set of files HAProxy reads. Pure and deterministic: the same state and
//! settings always give the same bytes, so "nothing changed" is a byte comparison.
//!
//! Configuration text comes from templates (embedded, overridable from a folder); map files are
//! plain data and are written directly, which keeps 100k-entry maps fast.

mod backends;
mod fileset;
mod logging;
mod templates;
mod waf;

use std::fmt::{self, Write};

use serde::Serialize;

use crate::model::{BlockKey, Domain, DomainBackendOf, EdgeState};
use crate::settings::Settings;

pub use backends::Sections;
pub use fileset::{FileId, FileSet, SetFile};
pub use logging::LOG_LEN;
pub use templates::{TemplateError, Templates};

/// First line of every file hapctl renders (after the file's comment marker).
pub const HEADER: &str =
    "Managed by hapctl: do not edit, changes are overwritten on the next apply.";

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template {name} failed to render: {message}; fix the override in render.templates_dir or remove it")]
    Template { name: &'static str, message: String },
    #[error("domain {domain} routes to app {app}, which has no [[app]] entry in the settings; add it back or remove the domain")]
    UnknownApp { domain: String, app: String },
}

#[derive(Serialize)]
struct AppView {
    name: String,
    backend: String,
    server: String,
    readiness_path: String,
    version: Option<String>,
    port: Option<u16>,
}

/// Renders the whole file set for `state`.
pub fn render(
    state: &EdgeState,
    settings: &Settings,
    templates: &Templates,
) -> Result<FileSet, RenderError> {
    render_with(state, settings, templates, None)
}

/// [`render`], reusing the backend sections of earlier renders kept in `memo` where their
/// domain is unchanged (the same bytes as a render without it).
pub fn render_with(
    state: &EdgeState,
    settings: &Settings,
    templates: &Templates,
    memo: Option<&mut Sections>,
) -> Result<FileSet, RenderError> {
    // One backend per domain, written directly: at 10,000 domains a template loop costs
    // several times the whole render budget. The shape of a backend is typed logic (its
    // profile), not free text, so it is not part of the overridable templates.
    let resolvers = settings.resolvers.as_ref();
    let backends = backends::sections(
        state,
        resolvers.map(|_| crate::settings::RESOLVERS_NAME),
        memo,
    );
    let routes = routes(state, settings)?;
    let ctx = template_context(state, settings, backends);
    let paths = &settings.paths;
    let mut set = FileSet::default();
    for id in FileId::RENDERED {
        let bytes = match id.template() {
            Some(name) => {
                let text = templates
                    .render(name, &ctx)
                    .map_err(|message| RenderError::Template { name, message })?;
                // The pages are returned with `lf-file`: a log-format string.
                if name.ends_with(".html.j2") {
                    logging::lf_page(&text).into_bytes()
                } else {
                    text.into_bytes()
                }
            }
            None => render_data(id, state, &routes),
        };
        set.insert(id, id.path(paths), ensure_final_newline(bytes));
    }
    Ok(set)
}

/// The name of the fleet's `peers` section.
pub const PEERS_SECTION: &str = "hapctl_fleet";

/// The `peers` section: this edge binds its own address; the others are dialled.
fn peers_view(p: &crate::model::FleetPeers) -> minijinja::Value {
    let servers: Vec<minijinja::Value> = p
        .peers
        .iter()
        .map(|(name, addr)| {
            let addr = (*name != p.local).then(|| addr.to_string());
            minijinja::context! { name => name.as_str(), addr => addr }
        })
        .collect();
    minijinja::context! {
        name => PEERS_SECTION,
        local => p.local.as_str(),
        bind => p.bind().to_string(),
        servers => servers,
    }
}

/// What the templates see: the settings, the files' paths, the protections' views, the
/// backend sections and the apps.
fn template_context(state: &EdgeState, settings: &Settings, backends: String) -> minijinja::Value {
    let paths = &settings.paths;
    let at = |id: FileId| id.path(paths).display().to_string();
    let drop_to = settings.haproxy.privileges.effective();
    minijinja::context! {
        header => HEADER,
        user => drop_to.user.map(|a| a.name),
        group => drop_to.group.map(|a| a.name),
        chroot => drop_to.chroot.map(|p| p.display().to_string()),
        http_bind => settings.edge.http_bind.to_string(),
        admin_socket => paths.admin_socket.display().to_string(),
        hosts_map => at(FileId::HostsMap),
        wildcards_map => at(FileId::WildcardsMap),
        blocked_map => at(FileId::BlockedMap),
        blocked_delta_map => at(FileId::BlockedDeltaMap),
        trusted_proxies_file => at(FileId::TrustedProxies),
        unknown_host_page => at(FileId::UnknownHostPage),
        not_configured_page => at(FileId::NotConfiguredPage),
        unknown_host_200 => settings.edge.unknown_host == crate::settings::UnknownHost::NotConfigured,
        sse_map => at(FileId::SseMap),
        blocked_page => at(FileId::BlockedPage),
        https_bind => settings.edge.https_bind.map(|a| a.to_string()),
        https_port_suffix => settings.edge.https_bind.map(|a| match a.port() {
            443 => String::new(),
            port => format!(":{port}"),
        }),
        crt_list => at(FileId::CrtList),
        quic => quic_view(settings),
        tls_min_version => settings.tls.min_version.haproxy_name(),
        tls_ciphers => &settings.tls.ciphers,
        tls_ciphersuites => &settings.tls.ciphersuites,
        acme_map => at(FileId::AcmeMap),
        https_map => at(FileId::HttpsMap),
        https_wildcards_map => at(FileId::HttpsWildcardsMap),
        suspended_map => at(FileId::SuspendedMap),
        suspended_wildcards_map => at(FileId::SuspendedWildcardsMap),
        suspended_page => at(FileId::SuspendedPage),
        limits_map => at(FileId::LimitsMap),
        limits_wildcards_map => at(FileId::LimitsWildcardsMap),
        exempt_map => at(FileId::ExemptMap),
        profiles_map => at(FileId::ProfilesMap),
        profiles_wildcards_map => at(FileId::ProfilesWildcardsMap),
        limited_page => at(FileId::LimitedPage),
        profile_rules => crate::protect::profiles::frontend(&crate::protect::profiles::PagePaths {
            denied: at(FileId::DeniedPage),
            limited: at(FileId::LimitedPage),
        }),
        profile_tables => crate::protect::profiles::tables(),
        normalize_uri => settings.edge.normalize_uri,
        limits => crate::protect::maps::view(&state.limits),
        peers => state.peers.as_ref().map(peers_view),
        log_target => logging::log_line(&settings.logs),
        log_ring => logging::ring(&settings.logs),
        resolvers => settings.resolvers.as_ref().map(|r| minijinja::context! {
            name => crate::settings::RESOLVERS_NAME,
            nameservers => r.nameservers.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            hold_valid => r.hold_valid.to_string(),
        }),
        request_id => logging::REQUEST_ID_MARK,
        waf => waf::view(settings.waf.as_ref(), paths),
        backends => minijinja::Value::from_object(Verbatim(backends)),
        apps => app_views(state, settings),
        hard_stop_after => hard_stop_after(settings),
        default_backend => settings.edge.default_app.as_ref().and_then(|name| {
            settings.apps.iter().find(|a| &a.name == name).map(|a| a.backend.clone())
        }),
    }
}

/// HTTP/3: the QUIC bind on the HTTPS address's UDP port, the global lines it needs and the
/// port `alt-svc` announces.
fn quic_view(settings: &Settings) -> Option<minijinja::Value> {
    let quic = settings.edge.quic.as_ref()?;
    let https = settings.edge.https_bind?;
    let family = if https.is_ipv4() { "quic4" } else { "quic6" };
    Some(minijinja::context! {
        bind => format!("{family}@{https}"),
        limited => quic.limited,
        cluster_secret => quic.cluster_secret.expose(),
        port => https.port(),
    })
}

/// Each app with its live generation, if any.
fn app_views(state: &EdgeState, settings: &Settings) -> Vec<AppView> {
    settings
        .apps
        .iter()
        .map(|app| {
            let live = state.live_generations.get(&app.name);
            AppView {
                name: app.name.to_string(),
                backend: app.backend.clone(),
                server: app.server.clone(),
                readiness_path: app.readiness_path.to_string(),
                version: live.map(|g| g.version.to_string()),
                port: live.map(|g| g.port.get()),
            }
        })
        .collect()
}

/// The longest `hard_stop_after` of the apps, in HAProxy's syntax.
fn hard_stop_after(settings: &Settings) -> Option<String> {
    settings
        .apps
        .iter()
        .filter_map(|a| a.hard_stop_after)
        .max()
        .map(|d| format!("{}s", d.as_secs().max(1)))
}

/// Text given to a template that goes into its output as it is, without the copy a string
/// value makes on the way in (the backend sections: 1.5 MB at 10,000 domains).
#[derive(Debug)]
struct Verbatim(String);

impl minijinja::value::Object for Verbatim {
    fn repr(self: &std::sync::Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Plain
    }

    fn render(self: &std::sync::Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a routed domain goes, written into the map as it is (no String per domain).
#[derive(Debug, Clone, Copy)]
enum Target<'s> {
    Domain(DomainBackendOf<'s>),
    App(&'s str),
}

impl fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Domain(backend) => fmt::Display::fmt(backend, f),
            Target::App(backend) => f.write_str(backend),
        }
    }
}

/// Every routed domain with the backend it goes to: its own, its slot's, or its app's; in
/// domain order (a domain is either an app's or has servers, never both).
fn routes<'s>(
    state: &'s EdgeState,
    settings: &'s Settings,
) -> Result<Vec<(&'s Domain, Target<'s>)>, RenderError> {
    let mut routes: Vec<(&Domain, Target)> = state
        .domains
        .keys()
        .map(|d| (d, Target::Domain(state.placement.backend(d))))
        .collect();
    for (domain, app) in &state.app_domains {
        let backend = settings
            .apps
            .iter()
            .find(|a| &a.name == app)
            .map(|a| a.backend.as_str())
            .ok_or_else(|| RenderError::UnknownApp {
                domain: domain.to_string(),
                app: app.to_string(),
            })?;
        routes.push((domain, Target::App(backend)));
    }
    if !state.app_domains.is_empty() {
        routes.sort_by_key(|(domain, _)| *domain);
    }
    Ok(routes)
}

/// The data files: maps and the trusted-proxy list, one entry per line.
fn render_data(id: FileId, state: &EdgeState, routes: &[(&Domain, Target)]) -> Vec<u8> {
    // A route line is ~50 bytes: the host maps grow without a copy of what they hold.
    let lines = match id {
        FileId::HostsMap | FileId::WildcardsMap => routes.len(),
        _ => 0,
    };
    let mut out = String::with_capacity(HEADER.len() + 3 + lines * 56);
    let _ = writeln!(out, "# {HEADER}");
    match id {
        FileId::HostsMap => {
            for (domain, backend) in routes.iter().filter(|(d, _)| !d.is_wildcard()) {
                let _ = writeln!(out, "{domain} {backend}");
            }
        }
        FileId::WildcardsMap => {
            for (domain, backend) in longest_suffix_first(routes.iter().map(|(d, t)| (*d, t))) {
                let _ = writeln!(out, ".{} {backend}", domain.name());
            }
        }
        FileId::TrustedProxies => {
            for net in &state.trusted_proxies {
                let _ = writeln!(out, "{net}");
            }
        }
        // Looked up like the routes: exact names, then the longest wildcard suffix.
        FileId::SuspendedMap => {
            for domain in state.suspended.iter().filter(|d| !d.is_wildcard()) {
                let _ = writeln!(out, "{domain} 1");
            }
        }
        FileId::SuspendedWildcardsMap => {
            for (domain, ()) in longest_suffix_first(state.suspended.iter().map(|d| (d, ()))) {
                let _ = writeln!(out, ".{} 1", domain.name());
            }
        }
        FileId::HttpsMap => {
            for (domain, policy) in state.https.iter().filter(|(d, _)| !d.is_wildcard()) {
                let _ = writeln!(out, "{domain} {}", policy.map_value());
            }
        }
        FileId::HttpsWildcardsMap => {
            for (domain, policy) in longest_suffix_first(state.https.iter()) {
                let _ = writeln!(out, ".{} {}", domain.name(), policy.map_value());
            }
        }
        FileId::LimitsMap => crate::protect::maps::limits_map(&mut out, &state.limits, false),
        FileId::LimitsWildcardsMap => {
            crate::protect::maps::limits_map(&mut out, &state.limits, true)
        }
        FileId::ExemptMap => crate::protect::maps::exempt_map(&mut out, &state.limits),
        FileId::ProfilesMap => crate::protect::profiles::map(&mut out, &state.protections, false),
        FileId::ProfilesWildcardsMap => {
            crate::protect::profiles::map(&mut out, &state.protections, true)
        }
        FileId::SseMap => sse_map(&mut out, state),
        FileId::WafMap => waf::map(&mut out, state, false),
        FileId::WafWildcardsMap => waf::map(&mut out, state, true),
        _ => unreachable!("{id:?} is rendered from a template"),
    }
    out.into_bytes()
}

/// The wildcard entries, longest suffix first: `map_end` returns the first matching line, so
/// the most specific wildcard wins.
fn longest_suffix_first<'a, T>(
    entries: impl Iterator<Item = (&'a Domain, T)>,
) -> Vec<(&'a Domain, T)> {
    let mut wild: Vec<_> = entries.filter(|(d, _)| d.is_wildcard()).collect();
    wild.sort_by_key(|(d, _)| (std::cmp::Reverse(d.name().as_str().len()), *d));
    wild
}

/// Keyed by the backend the host routed to, not by host: the route's own lookup (exact
/// name before wildcard, app domains) decides, and the twin follows it. Every slot with
/// a twin has its line, taken or not, so a domain that takes one at runtime needs none.
fn sse_map(out: &mut String, state: &EdgeState) {
    let own = state
        .domains
        .iter()
        .filter(|(domain, b)| b.sse_routing() && state.placement.slot_of(domain).is_none());
    for (domain, _) in own {
        let _ = writeln!(out, "{} {}", domain.backend(), domain.sse_twin_name());
    }
    let slots = state
        .placement
        .capacities()
        .flat_map(|(kind, n)| (0..n).map(move |index| crate::model::BackendSlot { kind, index }));
    for slot in slots {
        if let Some(twin) = slot.twin_name() {
            let _ = writeln!(out, "{slot} {twin}");
        }
    }
}

/// The value of every blocked-map entry. The match is on the key (`map_ip(...) -m found`);
/// the runtime API adds entries in the same form.
pub const BLOCKED_VALUE: &str = "1";

/// Second line of the blocked base map: the key set's fingerprint (see [`blocked_fingerprint`]).
pub const BLOCKED_BASE_MARK: &str = "# blocked keys: ";

/// The blocked-clients base map for `keys`, in the order given. Its second line names the key
/// set ([`blocked_fingerprint`]), so the block path can tell which keys the file holds by
/// reading two lines instead of the whole file.
pub fn blocked_map<'k>(keys: impl IntoIterator<Item = &'k BlockKey> + Clone) -> Vec<u8> {
    let mark = blocked_fingerprint(keys.clone());
    let mut out = format!("# {HEADER}\n{BLOCKED_BASE_MARK}{mark}\n");
    for key in keys {
        let _ = writeln!(out, "{key} {BLOCKED_VALUE}");
    }
    out.into_bytes()
}

/// The blocks made since the base map was last written: a small file rewritten per change.
pub fn blocked_delta_map<'k>(keys: impl IntoIterator<Item = &'k BlockKey>) -> Vec<u8> {
    let mut out = format!("# {HEADER}\n# blocks since blocked.map was written; folded into it\n");
    for key in keys {
        let _ = writeln!(out, "{key} {BLOCKED_VALUE}");
    }
    out.into_bytes()
}

/// `<count>-<hash>` of a key sequence (FNV-1a over each key's bytes): the same keys in the
/// same order give the same text, on every run and every machine.
pub fn blocked_fingerprint<'k>(keys: impl IntoIterator<Item = &'k BlockKey>) -> String {
    let (mut hash, mut count) = (0xcbf2_9ce4_8422_2325u64, 0usize);
    for key in keys {
        let net = key.net();
        let bytes = match net.network() {
            std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            std::net::IpAddr::V6(a) => a.octets(),
        };
        for b in bytes
            .iter()
            .chain([&net.prefix_len(), &u8::from(net.addr().is_ipv4())])
        {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        count += 1;
    }
    format!("{count}-{hash:016x}")
}

fn ensure_final_newline(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.last() != Some(&b'\n') {
        bytes.push(b'\n');
    }
    bytes
}

#[cfg(test)]
mod tests;
