//! The desired state read back from its rows, every value parsed again through the model.

use rusqlite::Connection;

use super::{corrupt, generation_row, limits, placement, profiles, StoreError};
use crate::model::{
    AppName, Backend, Domain, EdgeState, HttpsPolicy, ProxyNet, Server, ServerOptions, TextContext,
};

pub(super) fn load_state(conn: &Connection) -> Result<EdgeState, StoreError> {
    let mut state = EdgeState::default();
    let servers = load_servers(conn)?;
    load_domains(conn, servers, &mut state)?;
    load_live_generations(conn, &mut state)?;
    load_https_policies(conn, &mut state)?;
    load_suspended(conn, &mut state)?;
    state.limits = limits::load(conn)?;
    profiles::load(conn, &mut state)?;
    super::waf::load(conn, &mut state)?;
    placement::load(conn, &mut state)?;
    load_trusted_proxies(conn, &mut state)?;
    super::fleet::load_peers(conn, &mut state)?;
    Ok(state)
}

/// Every server, grouped by domain in name order.
fn load_servers(conn: &Connection) -> Result<Vec<(String, Vec<Server>)>, StoreError> {
    // Both tables are read in name order (their primary keys) and joined as they come: a
    // cold read of 10,000 domains spent most of its time allocating, one owned string per
    // cell and a map keyed by domain name (`hapctl` with no daemon pays it on every command).
    let mut servers: Vec<(String, Vec<Server>)> = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT domain, name, addr, weight, maxconn, check_enabled, extra_options FROM servers ORDER BY domain, position",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let domain = text(r, 0)?;
        let options = ServerOptions {
            weight: r.get(3)?,
            maxconn: r.get(4)?,
            check: r.get(5)?,
            ..ServerOptions::parse_text(text(r, 6)?, TextContext { resolvers: false })
                .map_err(corrupt("servers", domain))?
        }
        .validate()
        .map_err(corrupt("servers", domain))?;
        let server = Server {
            name: text(r, 1)?.parse().map_err(corrupt("servers", domain))?,
            addr: text(r, 2)?.parse().map_err(corrupt("servers", domain))?,
            options,
        };
        match servers.last_mut() {
            Some((last, list)) if last == domain => list.push(server),
            _ => servers.push((domain.to_string(), vec![server])),
        }
    }
    Ok(servers)
}

/// The domains, each joined with its `servers` (routed to an app, or a backend).
fn load_domains(
    conn: &Connection,
    servers: Vec<(String, Vec<Server>)>,
    state: &mut EdgeState,
) -> Result<(), StoreError> {
    let mut servers = servers.into_iter().peekable();
    let mut stmt =
        conn.prepare("SELECT name, profile, app, sse_routing FROM domains ORDER BY name")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let name = text(r, 0)?;
        let domain: Domain = name.parse().map_err(corrupt("domains", name))?;
        // The servers of names before this one belong to no domain row (the foreign key
        // forbids it, but a row is never trusted to say so).
        while servers.next_if(|(d, _)| d.as_str() < name).is_some() {}
        let mut list = servers
            .next_if(|(d, _)| d == name)
            .map(|(_, list)| list)
            .unwrap_or_default();
        if let Some(app) = r.get::<_, Option<String>>(2)? {
            let app: AppName = app.parse().map_err(corrupt("domains", name))?;
            state.app_domains.insert(domain, app);
            continue;
        }
        // Pushed one by one, a list has room for 4 servers (Vec's smallest growth): 2.3 of the
        // 6.4 MiB a parsed state took at 10,000 domains, held by every apply while it renders
        // (BENCHMARKS.md, daemon memory).
        list.shrink_to_fit();
        let profile = text(r, 1)?.parse().map_err(corrupt("domains", name))?;
        let backend = Backend::new(list, profile)
            .map_err(corrupt("domains", name))?
            .with_sse_routing(r.get(3)?);
        state.domains.insert(domain, backend);
    }
    Ok(())
}

fn load_live_generations(conn: &Connection, state: &mut EdgeState) -> Result<(), StoreError> {
    let mut stmt = conn.prepare(
        "SELECT s.app, g.version, g.port FROM app_state s JOIN generations g
         ON g.app = s.app AND g.version = s.current",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let app: String = r.get(0)?;
        let app: AppName = app.parse().map_err(corrupt("app_state", &app))?;
        let generation = generation_row(app.as_str(), r.get(1)?, r.get(2)?)?;
        state.live_generations.insert(app, generation);
    }
    Ok(())
}

fn load_https_policies(conn: &Connection, state: &mut EdgeState) -> Result<(), StoreError> {
    let mut stmt = conn.prepare("SELECT domain, policy FROM https_policies")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let domain: String = r.get(0)?;
        let policy: String = r.get(1)?;
        let policy =
            HttpsPolicy::from_map_value(&policy).map_err(corrupt("https_policies", &domain))?;
        let domain: Domain = domain.parse().map_err(corrupt("https_policies", &domain))?;
        state.https.insert(domain, policy);
    }
    Ok(())
}

fn load_suspended(conn: &Connection, state: &mut EdgeState) -> Result<(), StoreError> {
    let mut stmt = conn.prepare("SELECT domain FROM suspended_domains")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let domain: String = r.get(0)?;
        state.suspended.insert(
            domain
                .parse()
                .map_err(corrupt("suspended_domains", &domain))?,
        );
    }
    Ok(())
}

fn load_trusted_proxies(conn: &Connection, state: &mut EdgeState) -> Result<(), StoreError> {
    let mut stmt = conn.prepare("SELECT net FROM trusted_proxies")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let net: String = r.get(0)?;
        let net: ProxyNet = net.parse().map_err(corrupt("trusted_proxies", &net))?;
        state.trusted_proxies.insert(net);
    }
    Ok(())
}

/// Column `i` of `row` as text, borrowed from the row (no copy).
fn text<'r>(row: &'r rusqlite::Row, i: usize) -> Result<&'r str, StoreError> {
    Ok(row.get_ref(i)?.as_str().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into())
    })?)
}
