//! The pure part of the import: the old edge's raw values, through the model's parsers, into
//! a `Plan` (what is new, what hapctl already has) and the items refused with their reason.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::types::Value;

use super::read::{Legacy, OldFile, OldList, Row};
use super::values::{self, show, Naive};
use super::{CertImport, Current, DomainImport, Item, ItemStatus, Plan, Refused};
use crate::model::{
    Backend, BackendLabel, Block, BlockKey, CertName, Domain, Invalid, Note, Profile, ProxyNet,
    Server, ServerAddr, ServerName, TextContext,
};
use crate::tls::bundle::{parse_bundle, BundleCheck};
use crate::tls::x509::{rfc3339, serial_matches};

/// Who a block without `blocked_by` is recorded as blocked by.
const DEFAULT_AUTHOR: &str = "import-legacy";
/// The old manager's own self-signed default: hapctl makes its own.
const OLD_DEFAULT_CERT: &str = "default_self_signed_cert.pem";

/// What the planner reads besides the old edge and hapctl's state.
pub struct Context<'a> {
    /// Unix seconds: blocks and bundles are judged at this instant.
    pub now: i64,
    /// Reads the old naive local times (`expiry_time`) as Unix seconds.
    pub local: &'a dyn Fn(&Naive) -> Option<i64>,
    /// Whether server options may name resolvers (`[resolvers]` is configured).
    pub options: TextContext,
}

/// Plans the import of `old` into an edge that has `current`.
pub fn plan(old: &Legacy, current: &Current, ctx: &Context<'_>) -> Plan {
    let (now, local) = (ctx.now, ctx.local);
    let mut p = Planner {
        plan: Plan::default(),
        current,
        options: ctx.options,
    };
    p.domains(&old.db.domains, &old.db.backends, &old.db.servers);
    p.blocks(&old.db.blocks, now, local);
    p.certificates(&old.certs, now);
    for list in &old.lists {
        p.list(list);
    }
    p.plan
}

struct Planner<'a> {
    plan: Plan,
    current: &'a Current,
    options: TextContext,
}

fn status(unchanged: bool) -> ItemStatus {
    if unchanged {
        ItemStatus::Unchanged
    } else {
        ItemStatus::New
    }
}

fn item<T>(source: String, unchanged: bool, value: T) -> Item<T> {
    Item {
        source,
        status: status(unchanged),
        value,
    }
}

/// A model refusal as a reason.
fn invalid(e: Invalid) -> String {
    e.to_string()
}

/// The integer a foreign-key cell holds (`domain_id`, `backend_id`).
fn key_of(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(i) => Some(*i),
        Value::Text(s) => s.parse().ok(),
        _ => None,
    }
}

impl Planner<'_> {
    fn refuse(&mut self, source: &str, value: &str, reason: impl Into<String>) {
        self.plan.refused.push(Refused {
            source: source.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        });
    }

    fn domains(&mut self, domains: &[Row], backends: &[Row], servers: &[Row]) {
        let domain_ids: BTreeSet<i64> = domains.iter().map(|r| r.id).collect();
        let mut backends_of: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
        for b in backends {
            match key_of(&b.cells[1]).filter(|id| domain_ids.contains(id)) {
                Some(id) => backends_of.entry(id).or_default().push(b),
                None => self.refuse(
                    &format!("backends id {}", b.id),
                    &show(&b.cells[0]),
                    format!("belongs to no domain (domain_id {})", show(&b.cells[1])),
                ),
            }
        }
        let mut servers_of: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
        for s in servers {
            if let Some(id) = key_of(&s.cells[0]) {
                servers_of.entry(id).or_default().push(s);
            }
        }
        let mut seen: BTreeMap<Domain, String> = BTreeMap::new();
        for row in domains {
            let source = format!("domains id {}", row.id);
            let backends = backends_of.get(&row.id).map(Vec::as_slice).unwrap_or(&[]);
            match self.domain(row, backends, &servers_of) {
                Err(reason) => self.refuse(&source, &show(&row.cells[0]), reason),
                Ok(d) => {
                    if let Some(first) = seen.get(&d.domain) {
                        let reason = format!("the same domain as {first}");
                        self.refuse(&source, &d.domain.to_string(), reason);
                        continue;
                    }
                    seen.insert(d.domain.clone(), source.clone());
                    match self.conflict(&d) {
                        Err(reason) => self.refuse(&source, &d.domain.to_string(), reason),
                        Ok(unchanged) => {
                            self.label_left_out(backends);
                            self.plan.domains.push(item(source, unchanged, d));
                        }
                    }
                }
            }
        }
    }

    fn domain(
        &self,
        row: &Row,
        backends: &[&Row],
        servers_of: &BTreeMap<i64, Vec<&Row>>,
    ) -> Result<DomainImport, String> {
        let [name, template, wildcard] = &row.cells[..] else {
            unreachable!("three domain columns are selected")
        };
        let name = values::text("domain", name)?.ok_or("domain is NULL")?;
        let name = if values::truthy("is_wildcard", wildcard)? && !name.starts_with("*.") {
            format!("*.{name}")
        } else {
            name
        };
        let domain: Domain = name.parse().map_err(invalid)?;
        let backend_row = match backends {
            [] => return Err("no backend: a certificate-only row, nothing to route (its certificate comes from the certificate folder)".into()),
            [one] => one,
            many => return Err(format!("has {} backends; the old manager kept one per domain", many.len())),
        };
        let rows = servers_of
            .get(&backend_row.id)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if rows.is_empty() {
            return Err(format!(
                "backend {} has no servers (the old edge pointed it at a backend it never rendered)",
                show(&backend_row.cells[0])
            ));
        }
        let servers = rows
            .iter()
            .map(|s| server(s, self.options).map_err(|e| format!("server id {}: {e}", s.id)))
            .collect::<Result<Vec<_>, _>>()?;
        // The old default template's per-request SSE routing comes along (docs/compat.md).
        let template_name = values::text("template_override", template)?.unwrap_or_default();
        let backend = Backend::new(servers, values::profile(template)?)
            .map_err(|e| e.to_string())?
            .with_sse_routing(Profile::template_sse_routing(
                &template_name,
                domain.is_wildcard(),
            ));
        Ok(DomainImport {
            domain,
            backend,
            backend_name: label(backend_row).ok(),
        })
    }

    /// The domain comes without its old backend name when that is not a label.
    fn label_left_out(&mut self, backends: &[&Row]) {
        if let [b] = backends {
            if let Err(why) = label(b) {
                let reason = format!("backend_name not kept ({why}); the domain is imported and listed under hapctl's backend name");
                self.refuse(&format!("backends id {}", b.id), &show(&b.cells[0]), reason);
            }
        }
    }

    /// `Ok(true)` when hapctl has the same domain already (whatever its label).
    fn conflict(&self, d: &DomainImport) -> Result<bool, String> {
        let state = &self.current.state;
        if let Some(app) = state.app_domains.get(&d.domain) {
            return Err(format!(
                "hapctl routes {} to the app {app}; it keeps that route",
                d.domain
            ));
        }
        match state.domains.get(&d.domain) {
            None => Ok(false),
            Some(b) if *b == d.backend => Ok(true),
            Some(_) => Err(format!(
                "hapctl already has {} with other servers or another profile and keeps its own (`hapctl domain rm {}` first to import this one)",
                d.domain, d.domain
            )),
        }
    }

    fn blocks(&mut self, rows: &[Row], now: i64, local: &dyn Fn(&Naive) -> Option<i64>) {
        let mut seen: BTreeMap<BlockKey, String> = BTreeMap::new();
        for row in rows {
            let source = format!("blocked_ips id {}", row.id);
            match block(row, now, local) {
                Err(reason) => self.refuse(&source, &show(&row.cells[0]), reason),
                Ok(b) => {
                    if let Some(first) = seen.get(&b.key) {
                        let reason = format!("the same block as {first} once normalised");
                        self.refuse(&source, &show(&row.cells[0]), reason);
                        continue;
                    }
                    seen.insert(b.key, source.clone());
                    let unchanged = self.current.blocks.contains(&b.key);
                    self.plan.blocks.push(item(source, unchanged, b));
                }
            }
        }
    }

    fn certificates(&mut self, files: &[OldFile], now: i64) {
        let names: BTreeSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
        let mut seen: BTreeMap<CertName, String> = BTreeMap::new();
        for file in files {
            let source = format!("certs/{}", file.name);
            let shown = format!("{:?}", crate::model::bounded(&file.name));
            match certificate(file, &names, now) {
                Err(reason) => self.refuse(&source, &shown, reason),
                Ok(c) => {
                    if let Some(first) = seen.get(&c.name) {
                        let reason = format!("the same certificate name as {first}");
                        self.refuse(&source, &shown, reason);
                        continue;
                    }
                    seen.insert(c.name.clone(), source.clone());
                    match self.current.certs.get(&c.name) {
                        None => self.plan.certificates.push(item(source, false, c)),
                        Some(serial) if serial_matches(serial, &c.serial) => {
                            self.plan.certificates.push(item(source, true, c))
                        }
                        Some(serial) => self.refuse(
                            &source,
                            &shown,
                            format!(
                                "hapctl already has a certificate {} (serial {serial}) and keeps it; `hapctl cert import {} --pem FILE` replaces it",
                                c.name, c.name
                            ),
                        ),
                    }
                }
            }
        }
    }

    fn list(&mut self, list: &OldList) {
        for (i, line) in list.text.lines().enumerate() {
            let entry = line.trim();
            if entry.is_empty() || entry.starts_with('#') {
                continue;
            }
            let source = format!("{}:{}", list.file, i + 1);
            let shown = format!("{:?}", crate::model::bounded(entry));
            if let Err(reason) = self.list_entry(list.file, entry, source.clone()) {
                self.refuse(&source, &shown, reason);
            }
        }
    }

    fn list_entry(&mut self, file: &str, entry: &str, source: String) -> Result<(), String> {
        let state = &self.current.state;
        match file {
            "cloudflare_ips.list" | "trusted_proxies.list" => {
                let net: ProxyNet = entry.parse().map_err(invalid)?;
                let unchanged = state.trusted_proxies.contains(&net);
                let items = if file == "cloudflare_ips.list" {
                    &mut self.plan.cloudflare
                } else {
                    &mut self.plan.trusted_proxies
                };
                push_once(items, item(source, unchanged, net));
            }
            "trusted_ips.list" | "trusted_ips.map" => {
                // The map's lines are `<ip> 1`.
                let mut words = entry.split_whitespace();
                let ip = words.next().unwrap_or_default();
                if file == "trusted_ips.map"
                    && !matches!((words.next(), words.next()), (Some(_), None))
                {
                    return Err("a trusted_ips.map line is `<ip> 1`".into());
                }
                let key: BlockKey = if file == "trusted_ips.map" { ip } else { entry }
                    .parse()
                    .map_err(invalid)?;
                let unchanged = state.limits.exempt.contains(&key);
                push_once(&mut self.plan.limit_exempt, item(source, unchanged, key));
            }
            "wpadmin_gate_exempt.list" | "suspended_domains.list" => {
                let d: Domain = entry.parse().map_err(invalid)?;
                let known = state.domains.contains_key(&d)
                    || state.app_domains.contains_key(&d)
                    || self.plan.domains.iter().any(|i| i.value.domain == d);
                if !known {
                    return Err(format!("{d} is neither imported nor a domain of hapctl"));
                }
                if file == "suspended_domains.list" {
                    let unchanged = state.suspended.contains(&d);
                    push_once(&mut self.plan.suspended, item(source, unchanged, d));
                } else {
                    let unchanged = state.protections.get(&d).is_some_and(|p| !p.wp_admin_gate);
                    push_once(&mut self.plan.wp_admin_gate_off, item(source, unchanged, d));
                }
            }
            other => unreachable!("{other} is not in LIST_FILES"),
        }
        Ok(())
    }
}

/// The old backend's name as the label `GET /api/domains` shows.
fn label(backend: &Row) -> Result<BackendLabel, String> {
    values::text("backend name", &backend.cells[0])?
        .unwrap_or_default()
        .parse()
        .map_err(invalid)
}

/// A list entry seen twice (or in both trusted-IP files) is one item.
fn push_once<T: PartialEq>(items: &mut Vec<Item<T>>, new: Item<T>) {
    if !items.iter().any(|i| i.value == new.value) {
        items.push(new);
    }
}

fn server(row: &Row, options: TextContext) -> Result<Server, String> {
    let [_, name, address, port, opts] = &row.cells[..] else {
        unreachable!("five server columns are selected")
    };
    let name: ServerName = values::text("server name", name)?
        .unwrap_or_default()
        .parse()
        .map_err(invalid)?;
    let address = values::text("server address", address)?.unwrap_or_default();
    Ok(Server {
        name,
        addr: ServerAddr {
            host: ServerAddr::parse_host(&address).map_err(invalid)?,
            port: values::port(port)?,
        },
        options: values::server_options(opts, options)?,
    })
}

fn block(row: &Row, now: i64, local: &dyn Fn(&Naive) -> Option<i64>) -> Result<Block, String> {
    let [ip, reason, blocked_at, blocked_by, expiry] = &row.cells[..] else {
        unreachable!("five block columns are selected")
    };
    let key: BlockKey = values::text("ip_address", ip)?
        .unwrap_or_default()
        .parse()
        .map_err(invalid)?;
    let expires_at = match values::text("expiry_time", expiry)?.filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => {
            let t = Naive::parse(&s).and_then(|n| local(&n)).ok_or_else(|| {
                format!(
                    "expiry_time {s:?} is not a local date and time (YYYY-MM-DDTHH:MM:SS.ffffff)"
                )
            })?;
            if t <= now {
                return Err(format!(
                    "expired at {} (the old manager never lifted expired blocks); not imported",
                    rfc3339(t)
                ));
            }
            Some(t)
        }
    };
    let note = |field: &'static str, v: &Value, default: &str| -> Result<Note, String> {
        let text = values::text(field, v)?.unwrap_or_else(|| default.to_string());
        Note::parse(field, &text).map_err(invalid)
    };
    // `blocked_at` is bookkeeping (SQLite's UTC CURRENT_TIMESTAMP): unreadable means now.
    let created_at = values::text("blocked_at", blocked_at)
        .ok()
        .flatten()
        .and_then(|s| Naive::parse(&s))
        .map_or(now, Naive::as_utc);
    Ok(Block {
        key,
        reason: note("reason", reason, "")?,
        author: note("blocked_by", blocked_by, DEFAULT_AUTHOR)?,
        created_at,
        expires_at,
    })
}

/// `<host>.pem` or `_wildcard_.<base>.pem`, checked like an upload: the leaf must cover the
/// host. certbot's `<name>-0001.pem` copies are left to the file they duplicate.
fn certificate(file: &OldFile, names: &BTreeSet<&str>, now: i64) -> Result<CertImport, String> {
    let bytes = file
        .bytes
        .as_ref()
        .map_err(|e| format!("cannot read it: {e}"))?;
    if file.name == OLD_DEFAULT_CERT {
        return Err(
            "the old manager's self-signed default; hapctl has its own default certificate".into(),
        );
    }
    let stem = file.name.strip_suffix(".pem").ok_or("not a .pem bundle")?;
    if let Some((base, n)) = stem.rsplit_once('-') {
        let base_file = format!("{base}.pem");
        if n.len() == 4
            && n.bytes().all(|b| b.is_ascii_digit())
            && names.contains(base_file.as_str())
        {
            return Err(format!(
                "an extra certbot lineage of {base_file}, which is imported instead"
            ));
        }
    }
    let host = match stem.strip_prefix("_wildcard_.") {
        Some(base) => format!("*.{base}"),
        None => stem.to_string(),
    };
    let host: Domain = host.parse().map_err(invalid)?;
    let name = CertName::for_host(&host.to_string()).map_err(invalid)?;
    let must_cover = [host.to_string()];
    let bundle = parse_bundle(
        bytes,
        &BundleCheck {
            now,
            must_cover: &must_cover,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(CertImport {
        name,
        host,
        names: bundle.info.names.clone(),
        serial: bundle.info.serial.clone(),
        not_after: bundle.info.not_after,
        pem: bytes.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::legacy::read::OldDb;

    fn row(id: i64, cells: &[Value]) -> Row {
        Row {
            id,
            cells: cells.to_vec(),
        }
    }

    fn text(s: &str) -> Value {
        Value::Text(s.into())
    }

    /// `a.test` and `b.test`, one server each; `b.test` is in hapctl already with other servers.
    fn old_db() -> Legacy {
        let server = |id, backend| {
            row(
                id,
                &[
                    Value::Integer(backend),
                    text("s1"),
                    text("10.0.0.1"),
                    Value::Integer(80),
                    Value::Null,
                ],
            )
        };
        Legacy {
            db: OldDb {
                domains: vec![
                    row(1, &[text("a.test"), Value::Null, Value::Integer(0)]),
                    row(2, &[text("b.test"), Value::Null, Value::Integer(0)]),
                ],
                backends: vec![
                    row(1, &[text("a"), Value::Integer(1)]),
                    row(2, &[text("b"), Value::Integer(2)]),
                    row(3, &[text("orphan"), Value::Integer(9)]),
                ],
                servers: vec![server(1, 1), server(2, 2)],
                blocks: vec![row(
                    1,
                    &[
                        text("192.0.2.1"),
                        Value::Null,
                        Value::Null,
                        Value::Null,
                        text("2030-01-01T00:00:00"),
                    ],
                )],
            },
            ..Legacy::default()
        }
    }

    #[test]
    fn the_plan_compares_with_what_hapctl_has() {
        let old = old_db();
        let ctx = Context {
            now: 1_800_000_000,
            local: &|n: &Naive| Some(n.as_utc()),
            options: TextContext { resolvers: false },
        };
        let fresh = plan(&old, &Current::default(), &ctx);
        assert_eq!(fresh.counts(), (3, 0));
        assert_eq!(fresh.blocks[0].value.expires_at, Some(1_893_456_000));
        assert_eq!(fresh.refused.len(), 1, "{:?}", fresh.refused);
        assert!(fresh.refused[0].reason.contains("belongs to no domain"));

        // Imported once: the same plan is unchanged; a domain hapctl changed is its own.
        let mut current = Current::default();
        for d in &fresh.domains {
            let (domain, backend) = (d.value.domain.clone(), d.value.backend.clone());
            current.state.domains.insert(domain, backend);
        }
        current.blocks.insert(fresh.blocks[0].value.key);
        assert_eq!(plan(&old, &current, &ctx).counts(), (0, 3));
        let other = Server::parse_spec("10.0.0.2:80", ServerName::nth(1)).unwrap();
        let b: Domain = "b.test".parse().unwrap();
        let backend = Backend::new(vec![other], crate::model::Profile::Default).unwrap();
        current.state.domains.insert(b, backend);
        let again = plan(&old, &current, &ctx);
        assert_eq!(again.counts(), (0, 2));
        assert!(again
            .refused
            .iter()
            .any(|r| r.source == "domains id 2" && r.reason.contains("keeps its own")));

        // An expiry already past is refused, not imported.
        let late = Context {
            now: 1_900_000_000,
            ..ctx
        };
        let p = plan(&old, &Current::default(), &late);
        assert!(p.blocks.is_empty());
        assert!(p
            .refused
            .iter()
            .any(|r| r.reason.contains("expired at 2030-01-01T00:00:00Z")));
    }
}
