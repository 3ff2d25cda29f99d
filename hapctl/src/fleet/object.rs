//! The fleet's desired state as etcd keys: one key per object, its value a small JSON
//! document. Pure: keys and values are parsed through the model's own parsers, so a
//! hand-edited key that does not parse is refused here, never rendered.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::{
    check_secs, AppName, Backend, Block, BlockKey, Domain, DomainProtections, EdgeState,
    HttpsPolicy, Invalid, LimitPolicy, Limits, Note, ProxyNet, ProxyPreset, Server, Windows,
    MAX_TARPIT_SECS, MAX_WINDOW_SECS,
};

/// One object of the desired state, named by what it is and which one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKey {
    Domain(Domain),
    Https(Domain),
    Suspended(Domain),
    Waf(Domain),
    Protections(Domain),
    DomainLimits(Domain),
    /// The edge-wide limits: windows, tarpit, local exemption, default policy.
    Limits,
    Exempt(BlockKey),
    Proxy(ProxyNet),
    Block(BlockKey),
}

impl ObjectKey {
    /// The key below the fleet's `state/` folder, e.g. `domain/shop.example.com`.
    pub fn path(&self) -> String {
        match self {
            ObjectKey::Domain(d) => format!("domain/{d}"),
            ObjectKey::Https(d) => format!("https/{d}"),
            ObjectKey::Suspended(d) => format!("suspended/{d}"),
            ObjectKey::Waf(d) => format!("waf/{d}"),
            ObjectKey::Protections(d) => format!("protections/{d}"),
            ObjectKey::DomainLimits(d) => format!("domain-limits/{d}"),
            ObjectKey::Limits => "limits".to_string(),
            ObjectKey::Exempt(k) => format!("exempt/{k}"),
            ObjectKey::Proxy(n) => format!("proxy/{n}"),
            ObjectKey::Block(k) => format!("block/{k}"),
        }
    }

    pub fn parse(path: &str) -> Result<ObjectKey, Invalid> {
        if path == "limits" {
            return Ok(ObjectKey::Limits);
        }
        let (kind, id) = path
            .split_once('/')
            .ok_or_else(|| Invalid::new("key", path, "is not KIND/ID"))?;
        let domain = || id.parse::<Domain>();
        Ok(match kind {
            "domain" => ObjectKey::Domain(domain()?),
            "https" => ObjectKey::Https(domain()?),
            "suspended" => ObjectKey::Suspended(domain()?),
            "waf" => ObjectKey::Waf(domain()?),
            "protections" => ObjectKey::Protections(domain()?),
            "domain-limits" => ObjectKey::DomainLimits(domain()?),
            "exempt" => ObjectKey::Exempt(id.parse()?),
            "proxy" => ObjectKey::Proxy(id.parse()?),
            "block" => ObjectKey::Block(id.parse()?),
            _ => {
                return Err(Invalid::new(
                    "key",
                    path,
                    "names no kind of object hapctl knows",
                ))
            }
        })
    }

    pub fn is_block(&self) -> bool {
        matches!(self, ObjectKey::Block(_))
    }
}

/// An object's value, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    Servers(Backend),
    App(AppName),
    Https(HttpsPolicy),
    Suspended,
    Waf(crate::model::WafPolicy),
    Protections(DomainProtections),
    DomainLimits(LimitPolicy),
    Limits(Box<Limits>),
    Exempt,
    Proxy(Option<ProxyPreset>),
    Block(Block),
}

/// The objects of a desired state, by key.
pub type Objects = BTreeMap<ObjectKey, Object>;

/// The objects `state` (with the proxies' presets and the blocks in force) consists of. What
/// only concerns one edge (which slot a domain sits in, the live generation of an app) is
/// not an object of the fleet.
pub fn objects_of(
    state: &EdgeState,
    proxies: &[(ProxyNet, Option<ProxyPreset>)],
    blocks: &[Block],
) -> Objects {
    let mut out = Objects::new();
    for d in domains_of(state) {
        domain_objects(state, d, &mut out);
    }
    global_objects(state, proxies, blocks, &mut out);
    out
}

/// A change from `before` to `after` (each with its proxies' presets) as the fleet's changes,
/// with the objects it replaces: only the domains whose entries differ become objects
/// (backends no change touched compare by pointer), so a change costs what it touches.
pub fn changes_between(
    (before, before_proxies): (&EdgeState, &[(ProxyNet, Option<ProxyPreset>)]),
    (after, after_proxies): (&EdgeState, &[(ProxyNet, Option<ProxyPreset>)]),
) -> (Objects, Vec<Change>) {
    let (mut old, mut new) = (Objects::new(), Objects::new());
    for d in changed_domains(before, after) {
        domain_objects(before, d, &mut old);
        domain_objects(after, d, &mut new);
    }
    global_objects(before, before_proxies, &[], &mut old);
    global_objects(after, after_proxies, &[], &mut new);
    let changes = diff(&old, &new);
    (old, changes)
}

/// Every domain some per-domain part of `state` names.
fn domains_of(state: &EdgeState) -> BTreeSet<&Domain> {
    let mut out: BTreeSet<&Domain> = state.domains.keys().collect();
    out.extend(state.app_domains.keys());
    out.extend(state.https.keys());
    out.extend(state.suspended.iter());
    out.extend(state.waf.keys());
    out.extend(state.protections.keys());
    out.extend(state.limits.domains.keys());
    out
}

/// The domains whose entries differ between `a` and `b`, in any per-domain part.
fn changed_domains<'s>(a: &'s EdgeState, b: &'s EdgeState) -> BTreeSet<&'s Domain> {
    let mut out = BTreeSet::new();
    differing(&a.domains, &b.domains, &mut out);
    differing(&a.app_domains, &b.app_domains, &mut out);
    differing(&a.https, &b.https, &mut out);
    differing(&a.waf, &b.waf, &mut out);
    differing(&a.protections, &b.protections, &mut out);
    differing(&a.limits.domains, &b.limits.domains, &mut out);
    out.extend(a.suspended.symmetric_difference(&b.suspended));
    out
}

/// Adds to `out` the keys whose entries differ between `a` and `b`.
fn differing<'s, V: PartialEq>(
    a: &'s BTreeMap<Domain, V>,
    b: &'s BTreeMap<Domain, V>,
    out: &mut BTreeSet<&'s Domain>,
) {
    out.extend(
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, _)| k),
    );
    out.extend(b.keys().filter(|k| !a.contains_key(*k)));
}

/// One domain's objects: its route, HTTPS policy, suspension, WAF policy, protections and
/// limit policy.
fn domain_objects(state: &EdgeState, d: &Domain, out: &mut Objects) {
    if let Some(b) = state.domains.get(d) {
        out.insert(ObjectKey::Domain(d.clone()), Object::Servers(b.clone()));
    }
    if let Some(app) = state.app_domains.get(d) {
        out.insert(ObjectKey::Domain(d.clone()), Object::App(app.clone()));
    }
    if let Some(p) = state.https.get(d) {
        out.insert(ObjectKey::Https(d.clone()), Object::Https(*p));
    }
    if state.suspended.contains(d) {
        out.insert(ObjectKey::Suspended(d.clone()), Object::Suspended);
    }
    if let Some(p) = state.waf.get(d) {
        out.insert(ObjectKey::Waf(d.clone()), Object::Waf(p.clone()));
    }
    if let Some(p) = state.protections.get(d) {
        let object = Object::Protections(p.clone());
        out.insert(ObjectKey::Protections(d.clone()), object);
    }
    if let Some(p) = state.limits.domains.get(d) {
        out.insert(ObjectKey::DomainLimits(d.clone()), Object::DomainLimits(*p));
    }
}

/// The objects no domain holds: the limits' settings, exempt clients, proxies and blocks.
fn global_objects(
    state: &EdgeState,
    proxies: &[(ProxyNet, Option<ProxyPreset>)],
    blocks: &[Block],
    out: &mut Objects,
) {
    for k in &state.limits.exempt {
        out.insert(ObjectKey::Exempt(*k), Object::Exempt);
    }
    let mut limits = state.limits.clone();
    limits.domains.clear();
    limits.exempt.clear();
    out.insert(ObjectKey::Limits, Object::Limits(Box::new(limits)));
    for (net, preset) in proxies {
        out.insert(ObjectKey::Proxy(*net), Object::Proxy(*preset));
    }
    for b in blocks {
        out.insert(ObjectKey::Block(b.key), Object::Block(b.clone()));
    }
}

/// One difference between two sets of objects: the new value, or `None` when it is gone.
pub type Change = (ObjectKey, Option<Object>);

/// What turns `old` into `new`, in key order.
pub fn diff(old: &Objects, new: &Objects) -> Vec<Change> {
    let mut out = Vec::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.push((k.clone(), Some(v.clone())));
        }
    }
    for k in old.keys().filter(|k| !new.contains_key(*k)) {
        out.push((k.clone(), None));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainValue {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    servers: Vec<Server>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    profile: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    sse_routing: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    app: Option<AppName>,
}

/// A value kept in a policy's text form (the one the database and the maps use).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyValue {
    policy: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsValue {
    req_window: u64,
    conn_window: u64,
    err_window: u64,
    tarpit: u64,
    local_exempt: bool,
    default: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProxyValue {
    preset: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockValue {
    reason: String,
    author: String,
    created_at: i64,
    expires_at: Option<i64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// The JSON text of `object`.
pub fn encode(object: &Object) -> String {
    let policy = |policy: String| json(&PolicyValue { policy });
    match object {
        Object::Servers(b) => json(&DomainValue {
            servers: b.servers().to_vec(),
            profile: Some(b.profile().to_string()),
            sse_routing: b.sse_routing(),
            app: None,
        }),
        Object::App(app) => json(&DomainValue {
            servers: vec![],
            profile: None,
            sse_routing: false,
            app: Some(app.clone()),
        }),
        Object::Https(p) => policy(p.map_value()),
        Object::Waf(p) => policy(p.to_map_value()),
        Object::Protections(p) => policy(p.map_value()),
        Object::DomainLimits(p) => policy(p.map_value()),
        Object::Limits(l) => json(&LimitsValue {
            req_window: l.windows.req.into(),
            conn_window: l.windows.conn.into(),
            err_window: l.windows.err.into(),
            tarpit: l.tarpit_secs.into(),
            local_exempt: l.local_exempt,
            default: l.default.map_value(),
        }),
        Object::Suspended | Object::Exempt => json(&Empty {}),
        Object::Proxy(preset) => json(&ProxyValue {
            preset: preset.map(|p| p.as_str().to_string()),
        }),
        Object::Block(b) => json(&BlockValue {
            reason: b.reason.to_string(),
            author: b.author.to_string(),
            created_at: b.created_at,
            expires_at: b.expires_at,
        }),
    }
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("a fleet value serialises")
}

/// The object `text` holds under `key`, parsed as the API would parse it.
pub fn decode(key: &ObjectKey, text: &[u8]) -> Result<Object, Invalid> {
    let shown = String::from_utf8_lossy(text);
    let bad = |e: serde_json::Error| Invalid::new("value", &shown, e.to_string());
    let policy = || serde_json::from_slice::<PolicyValue>(text).map(|v| v.policy);
    let empty = || serde_json::from_slice::<Empty>(text).map(|_| ());
    Ok(match key {
        ObjectKey::Domain(_) => domain(serde_json::from_slice(text).map_err(bad)?)?,
        ObjectKey::Https(_) => Object::Https(HttpsPolicy::from_map_value(&policy().map_err(bad)?)?),
        ObjectKey::Waf(_) => Object::Waf(crate::model::WafPolicy::from_map_value(
            &policy().map_err(bad)?,
        )?),
        ObjectKey::Protections(_) => {
            Object::Protections(DomainProtections::from_map_value(&policy().map_err(bad)?)?)
        }
        ObjectKey::DomainLimits(_) => {
            Object::DomainLimits(LimitPolicy::from_map_value(&policy().map_err(bad)?)?)
        }
        ObjectKey::Limits => limits(serde_json::from_slice(text).map_err(bad)?)?,
        ObjectKey::Suspended(_) => empty().map(|_| Object::Suspended).map_err(bad)?,
        ObjectKey::Exempt(_) => empty().map(|_| Object::Exempt).map_err(bad)?,
        ObjectKey::Proxy(_) => {
            let preset = serde_json::from_slice::<ProxyValue>(text)
                .map_err(bad)?
                .preset;
            Object::Proxy(preset.map(|p| p.parse()).transpose()?)
        }
        ObjectKey::Block(k) => block(k, serde_json::from_slice(text).map_err(bad)?)?,
    })
}

fn domain(v: DomainValue) -> Result<Object, Invalid> {
    if let Some(app) = v.app {
        if !v.servers.is_empty() || v.sse_routing {
            return Err(Invalid::new(
                "app",
                app.as_str(),
                "an app domain has no servers",
            ));
        }
        return Ok(Object::App(app));
    }
    let servers = v
        .servers
        .into_iter()
        .map(|s| {
            Ok(Server {
                options: s.options.validate()?,
                ..s
            })
        })
        .collect::<Result<Vec<_>, Invalid>>()?;
    let profile = v.profile.as_deref().unwrap_or("default").parse()?;
    Ok(Object::Servers(
        Backend::new(servers, profile)?.with_sse_routing(v.sse_routing),
    ))
}

fn limits(v: LimitsValue) -> Result<Object, Invalid> {
    Ok(Object::Limits(Box::new(Limits {
        windows: Windows {
            req: check_secs("req_window", v.req_window, MAX_WINDOW_SECS)?,
            conn: check_secs("conn_window", v.conn_window, MAX_WINDOW_SECS)?,
            err: check_secs("err_window", v.err_window, MAX_WINDOW_SECS)?,
        },
        tarpit_secs: check_secs("tarpit", v.tarpit, MAX_TARPIT_SECS)?,
        local_exempt: v.local_exempt,
        default: LimitPolicy::from_map_value(&v.default)?,
        ..Limits::default()
    })))
}

fn block(key: &BlockKey, v: BlockValue) -> Result<Object, Invalid> {
    Ok(Object::Block(Block {
        key: *key,
        reason: Note::parse("reason", &v.reason)?,
        author: Note::parse("author", &v.author)?,
        created_at: v.created_at,
        expires_at: v.expires_at,
    }))
}

#[cfg(test)]
mod tests;
