//! The route table: one entry per route, from which both the router and `/openapi.json` are
//! built.

use std::collections::BTreeMap;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::{middleware, Json, Router};
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::path::{OperationBuilder, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::HttpMethod::{self, Delete, Get, Post, Put};
use utoipa::openapi::{
    ComponentsBuilder, Content, InfoBuilder, OpenApi, OpenApiBuilder, Paths, Ref, RefOr, Required,
    ResponseBuilder, ResponsesBuilder,
};
use utoipa::{IntoParams, PartialSchema};

use super::error::ApiError;
use super::{
    audit, auth, certs, compat, count_requests, history, limits, logs, master, policies, profiles,
    proving, proxies, traffic, ui, v1, waf, ApiState, BODY_LIMIT,
};
use crate::contract::{
    one_or_list, AuditQuery, BlockQuery, BlockRequest, ClearRequest, DeliveryRequest, DomainQuery,
    ErrorAnswer, ExemptRequest, HttpsRequest, ImportRequest, LimitsRequest, LogQuery, OrderRequest,
    PolicyRequest, ProfilesRequest, PutDomainRequest, RollbackRequest, TrafficQuery, TrustRequest,
    WafTestRequest,
};
use crate::model::Scope;

/// What `/openapi.json` says about a route. Its schemas are made only when the document is
/// asked for: the router, built at startup from the same table, never runs that code.
pub struct RouteDoc {
    pub method: HttpMethod,
    pub path: &'static str,
    /// Who may call it: the one place a route's scope is declared.
    pub guard: Guard,
    pub summary: &'static str,
    /// Schema of the request body, if it takes one.
    pub body: Option<fn() -> RefOr<Schema>>,
    /// The parameters of its query string.
    pub query: Option<fn() -> Vec<Parameter>>,
}

/// Whether a route needs a token, and of which scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The health checks and the old manager's two pages.
    Open,
    Needs(Scope),
}

impl Guard {
    /// Whether a call is a change the audit trail records: every route that needs more than
    /// `read`.
    pub fn audited(self) -> bool {
        matches!(self, Guard::Needs(s) if s != Scope::Read)
    }
}

const OPEN: Guard = Guard::Open;
const READ: Guard = Guard::Needs(Scope::Read);
const BLOCKS: Guard = Guard::Needs(Scope::Blocks);
const DOMAINS: Guard = Guard::Needs(Scope::Domains);
const CERTS: Guard = Guard::Needs(Scope::Certs);
const DELIVER: Guard = Guard::Needs(Scope::Deliver);
const ADMIN: Guard = Guard::Needs(Scope::Admin);

fn doc(
    method: HttpMethod,
    path: &'static str,
    guard: Guard,
    summary: &'static str,
    body: Option<fn() -> RefOr<Schema>>,
) -> RouteDoc {
    RouteDoc {
        method,
        path,
        guard,
        summary,
        body,
        query: None,
    }
}

/// The body schema of `T`, inline with every nested type in place (clients and the
/// hostile-input suite read the schemas without resolving references).
fn body<T: PartialSchema>() -> Option<fn() -> RefOr<Schema>> {
    Some(T::schema)
}

/// The query parameters `Q` documents.
fn query_of<Q: IntoParams>() -> Vec<Parameter> {
    Q::into_params(|| Some(ParameterIn::Query))
}

impl RouteDoc {
    fn with_query<Q: IntoParams>(mut self) -> RouteDoc {
        self.query = Some(query_of::<Q>);
        self
    }
}

/// Every route of the API.
pub fn table() -> Vec<(RouteDoc, MethodRouter<ApiState>)> {
    vec![
        (doc(Get, "/health", OPEN, "(edge manager) 200 {status: healthy, haproxy_status: running|stopped, database: connected} while the database answers, 500 unhealthy otherwise (no token needed)", None), get(compat::health)),
        (doc(Get, "/v1/health", OPEN, "200 when the master runs, a worker exists and the live config is the known-good one, else 503 (no token needed)", None), get(v1::health)),
        (doc(Get, "/v1/fleet", READ, "The fleet (docs/fleet.md): {revision, published, edges: [{name, applied_revision, lagging, outcome, message, refused: [revision, reason] | null, haproxy, version, addresses, at}]} from etcd; 409 no_fleet without [fleet], 503 when etcd is unreachable", None), get(v1::fleet)),
        (doc(Get, "/v1/status", READ, "HAProxy master and workers, supervision (whether hapctl serve restarts it, whether a stop keeps it down), last applies, generations, counts; resolution: {unresolved_servers: [{domain, server, host, seen}], runtime_resolvers, warning} as HAProxy holds them (null when it does not answer)", None), get(v1::status)),
        (doc(Get, "/v1/domains", READ, "List domains: every one (a bare array), or with limit, after or q one page in name order, {domains, next, total}, each with suspended, protections, https, own_limits and waf", None)
            .with_query::<DomainQuery>(), get(v1::list_domains)),
        (doc(Get, "/v1/domains/{name}", READ, "One domain, with its WAF policy (waf: mode off when it has none)", None), get(v1::get_domain)),
        (doc(Put, "/v1/domains/{name}", DOMAINS, "Create or replace a domain (servers + profile, or an app); applied at once, coalesced with concurrent changes; {result, apply}, and for servers {unresolved_servers, runtime_resolvers, warning}: those whose host name does not resolve now (down until it does)",
            body::<PutDomainRequest>()), put(v1::put_domain)),
        (doc(Delete, "/v1/domains/{name}", DOMAINS, "Remove a domain", None), delete(v1::delete_domain)),
        (doc(Put, "/v1/domains/{name}/https", DOMAINS, "A domain's HTTPS policy: redirect HTTP to HTTPS (301/308, never the ACME path) and HSTS; a runtime map change, no reload",
            body::<HttpsRequest>()), put(policies::put_https)),
        (doc(Put, "/v1/domains/{name}/profiles", DOMAINS, "A domain's path-protection profiles (wordpress: wp-login cookie challenge and POST limit, xmlrpc POST limit, wp-json batch patch, wp-admin gate), the per-host wp-admin gate switch and the two POST thresholds; replaces them; a runtime map change, no reload",
            body::<ProfilesRequest>()), put(profiles::put_profiles)),
        (doc(Post, "/v1/domains/{name}/suspend", DOMAINS, "Answer the domain with the suspended page (503; ACME still answered); a runtime map change, no reload", None), post(policies::post_suspend)),
        (doc(Post, "/v1/domains/{name}/resume", DOMAINS, "Serve a suspended domain again; a runtime map change, no reload", None), post(policies::post_resume)),
        (doc(Get, "/v1/limits", READ, "Rate limits: windows, tarpit, local exemption, default policy, per-domain policies, exempt networks", None), get(limits::get_limits)),
        (doc(Put, "/v1/limits", DOMAINS, "Edge-wide limits: default policy (runtime map change, no reload), windows and tarpit (reload), local exemption (runtime)",
            body::<LimitsRequest>()), put(limits::put_limits)),
        (doc(Put, "/v1/domains/{name}/limits", DOMAINS, "A domain's own rate-limit policy, edited from its current one; a runtime map change, no reload", body::<PolicyRequest>()), put(limits::put_domain_limits)),
        (doc(Delete, "/v1/domains/{name}/limits", DOMAINS, "The domain follows the edge-wide default again; a runtime map change, no reload", None), delete(limits::delete_domain_limits)),
        (doc(Post, "/v1/limits/exempt", DOMAINS, "Exempt an IP or CIDR from every limit; a runtime map change, no reload",
            body::<ExemptRequest>()), post(limits::post_exempt)),
        (doc(Delete, "/v1/limits/exempt/{key}", DOMAINS, "Stop exempting an IP or CIDR (URL-encode the '/')", None), delete(limits::delete_exempt)),
        (doc(Get, "/v1/trusted-proxies", READ, "Trusted proxies (hapctl proxy ls), whose CF-Connecting-IP, X-Real-IP and X-Forwarded-For name the real client: {proxies: [{net, preset}]}; preset is the one a range came with, else null", None), get(proxies::list)),
        (doc(Post, "/v1/trusted-proxies", DOMAINS, "Trust an IP or CIDR (hapctl proxy add NET), or a preset's ranges (--preset: the list shipped with hapctl, or nets, a newer one; ranges the preset no longer has are dropped); one safe apply; a refused net is a 400 at net (nets[i]) and changes nothing",
            body::<TrustRequest>()), post(proxies::post)),
        (doc(Delete, "/v1/trusted-proxies/{key}", DOMAINS, "Stop trusting an IP or CIDR (hapctl proxy rm; URL-encode the '/'); 404 when it is not trusted", None), delete(proxies::delete)),
        (doc(Delete, "/v1/trusted-proxies/presets/{preset}", DOMAINS, "Stop trusting every range of a preset (hapctl proxy rm --preset)", None), delete(proxies::delete_preset)),
        (doc(Get, "/v1/security/stats", READ, "The busiest clients of the rate-limit table (?limit=1-1000&min_rate=R), counters named; 502 when HAProxy cannot be read", None), get(limits::get_stats)),
        (doc(Post, "/v1/security/clear", DOMAINS, "Forget one client's counters (clear table)",
            body::<ClearRequest>()), post(limits::post_clear)),
        (doc(Get, "/v1/waf", READ, "The WAF agent (docs/waf.md): {configured: false} without [waf]; else {configured, up, down_reason, pid, engine, crs, rules, rules_loaded_at, inspected, blocked, detected, errors, timeouts, reloads, reload_failures, reload_error, by_rule: {RULE_ID: requests}}, from its state file (hapctl waf status)", None), get(waf::get_waf)),
        (doc(Post, "/v1/waf/reload", ADMIN, "Reload the agent's rules (SIGHUP; HAProxy's connections stay) and answer the outcome once it is known (a few seconds): {outcome: reloaded, pid, crs, rules, rules_loaded_at}; a refused rule set is a 422 naming its loader and libmodsecurity's reason (the old rules keep serving), 503 when the agent is down, 409 without [waf]", None), post(waf::post_reload)),
        (doc(Get, "/v1/waf/rules", READ, "The rule set the agent loads (hapctl waf rules --json): {engine, crs, loader, loaded, rules, removed, files: [{file, rules: [{id, phase, paranoia, severity, message}]}]}: what an exclusion names; a set libmodsecurity refuses is a 422, 409 without [waf]", None), get(waf::get_rules)),
        (doc(Post, "/v1/waf/test", READ, "Evaluate a request against the rules without sending it (hapctl waf test): {verdict: block|detect|pass|off, score, threshold, counted, matched: [{id, severity, message, points}], policy, policy_from}; scored under policy if given, else the stored policy of domain or of the URL's host, else block at the CRS defaults", body::<WafTestRequest>()), post(waf::post_test)),
        (doc(Get, "/v1/certificates", READ, "List certificates: names, source, validity, next renewal, last error, the host names each serves", None), get(certs::list)),
        (doc(Get, "/v1/certificates/{name}", READ, "One certificate", None), get(certs::show)),
        (doc(Put, "/v1/certificates/{name}", CERTS, "Install a PEM bundle (leaf, chain, unencrypted key); refused with the problem named and nothing written; served without a reload (201 when new)",
            body::<ImportRequest>()), put(certs::put)),
        (doc(Post, "/v1/certificates/{name}/request", CERTS, "Order from the ACME CA (HTTP-01, or DNS-01 through [acme] dns_hook) and serve it without a reload (201 when new)",
            body::<OrderRequest>()), post(certs::request)),
        (doc(Post, "/v1/certificates/{name}/renew", CERTS, "Renew an ACME certificate now; 502 when the order fails (the current one keeps serving)", None), post(certs::renew)),
        (doc(Post, "/v1/renewals", CERTS, "Renew every ACME certificate that is due, one order at a time (hapctl cert renew --all): {renewals: [{name, report, error}]}, empty when none is due; a failed one keeps serving its current certificate, its error says why", None), post(certs::renew_due)),
        (doc(Delete, "/v1/certificates/{name}", CERTS, "Stop serving a certificate and delete it (not the default)", None), delete(certs::delete)),
        (doc(Get, "/v1/blocked-ips", READ, "One page of the blocks in force, in key order (IPv4 then IPv6, by address, then prefix length): {blocks: [{key, reason, author, created_at, expires_at}], next}; next is the `after` of the following page, null on the last one. A bad parameter is a 400 naming it", None)
            .with_query::<BlockQuery>(), get(v1::list_blocks)),
        (doc(Post, "/v1/blocked-ips", BLOCKS, "Block one entry or a list; runtime API, no reload, no haproxy -c",
            Some(one_or_list::<BlockRequest>)), post(v1::post_blocks)),
        (doc(Delete, "/v1/blocked-ips/{key}", BLOCKS, "Unblock an IP or CIDR (URL-encode the '/')", None), delete(v1::delete_block)),
        (doc(Post, "/v1/blocked-ips/sync", BLOCKS, "Rebuild the file and the runtime map from the database, atomically", None), post(v1::sync_blocks)),
        (doc(Post, "/v1/deliveries", DELIVER, "Deliver a version of an app",
            body::<DeliveryRequest>()), post(v1::post_delivery)),
        (doc(Get, "/v1/deliveries", READ, "Delivery history", None), get(v1::list_deliveries)),
        (doc(Get, "/v1/deliveries/current", READ, "The latest delivery or rollback started by this daemon, its steps so far: {running, kind, app, version, started_at, steps: [{name, detail, ms}], outcome when over}; {running: false} before any", None), get(v1::current_delivery)),
        (doc(Post, "/v1/rollback", DELIVER, "Cut back to the previous generation",
            body::<RollbackRequest>()), post(v1::post_rollback)),
        (doc(Post, "/v1/apply", DOMAINS, "Re-render and apply the committed state: {result: null, apply} with its outcome, message, checks, reloads and their reasons; a refused or failed apply is the error, with its apply", None), post(v1::post_apply)),
        (doc(Post, "/v1/haproxy/start", ADMIN, "Apply the committed state, then start the HAProxy master (hapctl haproxy start): {master_pid, apply}; 409 when a master runs (never a second one); an earlier stop no longer holds", None), post(master::post_start)),
        (doc(Post, "/v1/haproxy/reload", ADMIN, "Reload through the master, never a restart (hapctl haproxy reload), under the apply lock: {master_pid, new_workers, old_workers, duration_ms, reason}, recorded in the apply history; 409 when no master runs", None), post(master::post_reload)),
        (doc(Post, "/v1/haproxy/stop", ADMIN, "Stop the master and its workers (hapctl haproxy stop): {outcome: stopped|killed|not-running, master_pid}; it stays down, hapctl serve does not restart it, until a start", None), post(master::post_stop)),
        (doc(Get, "/v1/applies", READ, "Apply history with outcomes and durations, newest first; diff_bytes: the size of each apply's diff", None), get(history::list_applies)),
        (doc(Get, "/v1/applies/{id}", READ, "One apply with its diff: the unified diff of the rendered files it changed (at most 256 KiB, password values and private keys masked)", None), get(history::get_apply)),
        (doc(Get, "/v1/proofs", READ, "The journals of hapctl prove (proofs of cutovers), newest first: {name, title, modified, bytes}", None), get(history::list_proofs)),
        (doc(Post, "/v1/proofs", DELIVER, "Deliver a version proved from outside (hapctl prove -- hapctl deliver VERSION): streams, a probe, the master and the version served are measured through the public bind while it runs (its lines are the steps of /v1/deliveries/current); answers {outcome: proved|failed, passed, checks, journal}",
            body::<DeliveryRequest>()), post(proving::post_proof)),
        (doc(Get, "/v1/proofs/{name}", READ, "One proof's journal: {name, markdown} (its checks, timeline, failures and the way back)", None), get(history::get_proof)),
        (doc(Get, "/v1/logs", READ, "The access log (hapctl logs; [logs] target = \"file\"), newest first: {records: [{ts, id, client, peer, host, method, path, status, bytes, tq, tw, tc, tr, ta, term, backend, tls, sni, denied_by}], next, partial}; next is the `before` of the older page, null on the last one; partial: at most 16 MiB of lines past `before` are searched, so a filter that matches little may answer fewer records, and next searches on; 409 when the log goes to syslog or journald; a bad parameter is a 400 naming it", None)
            .with_query::<LogQuery>(), get(logs::list)),
        (doc(Get, "/v1/traffic", READ, "Traffic per domain from the access log this daemon received (hapctl top; docs/traffic.md): {since, now, tracked_domains, edge, domains: [{domain, windows: [{window: 1m|15m|1h, seconds, requests, requests_per_second, status: {none, 1xx..5xx}, bytes_in, bytes_out, time_ms: {p50, p95, p99}, turned_away, by_reason: {REASON: n}}], totals}], backends, backends_error}; since: when the counts begin (a restart empties them); backends=true adds HAProxy's counters per backend (show stat); points=DOMAIN answers {domain, since, points: [{at, seconds, requests, errors, turned_away, by_reason, p95_ms}], events} over the hour (`*`: the edge, by minute, with events: [{at, kind: waf-down|waf-up|waf-restarted, text}] kept since the daemon started); 409 when traffic is not counted", None)
            .with_query::<TrafficQuery>(), get(traffic::get)),
        (doc(Get, "/v1/audit", ADMIN, "The audit trail (hapctl audit), newest first: {records: [{id, at_ms, who, via, peer, forwarded, action, objects, summary, result: {at_ms, status, outcome} | null}]}; result null: the daemon stopped during the change", None)
            .with_query::<AuditQuery>(), get(audit::list)),
        (doc(Get, "/metrics", READ, "Prometheus metrics", None), get(v1::metrics)),
        (doc(Get, "/openapi.json", READ, "This document", None), get(openapi)),
        (doc(Get, "/api/domains", READ, "(edge manager) Bare array of domains: id, domain, ssl_enabled, ssl_cert_path, template_override, is_wildcard, backend_name", None), get(compat::list_domains)),
        (doc(Post, "/api/domain", DOMAINS, "(edge manager) Create or replace a domain; 200 {status: success, domain_id, unresolved_servers, runtime_resolvers, warning}: the servers whose host name does not resolve now wait in maintenance; errors E1 (400, 500)",
            body::<compat::DomainBody>()), post(compat::post_domain)),
        (doc(Delete, "/api/domain", DOMAINS, "(edge manager) Remove a domain; errors E1 (400, 404, 500)", body::<compat::NameBody>()), delete(compat::delete_domain)),
        (doc(Get, "/api/blocked-ips", READ, "(edge manager) Bare array of blocks, newest first: id, ip_address, reason, blocked_at, blocked_by, expiry_time", None), get(compat::list_blocks)),
        (doc(Post, "/api/blocked-ips", BLOCKS, "(edge manager) Block an IP or CIDR; 200 {status, blocked_ip_id, message, runtime_map_updated}; E1 409 when already blocked",
            body::<compat::BlockBody>()), post(compat::post_block)),
        (doc(Delete, "/api/blocked-ips", BLOCKS, "(edge manager) Unblock; E1 404 when absent", body::<compat::IpBody>()), delete(compat::delete_block)),
        (doc(Post, "/api/blocked-ips/sync", BLOCKS, "(edge manager) Rebuild file and runtime map, then read the map back: 200 all present, 207 partial", None), post(compat::sync_blocks)),
        (doc(Post, "/api/security/temporary-block", BLOCKS, "(edge manager) Block one address for duration_minutes (default 60); it expires by itself",
            body::<compat::TemporaryBody>()), post(compat::temporary_block)),
        (doc(Get, "/api/security/stats", READ, "(edge manager) The busiest clients of the stick table (?limit=50&min_req_rate=1); errors E1 (400, 502)", None), get(compat::get_stats)),
        (doc(Post, "/api/security/clear-expired", BLOCKS, "(edge manager) Remove expired blocks now", None), post(compat::clear_expired)),
        (doc(Get, "/api/regenerate", DOMAINS, "(edge manager) Safe apply of the committed state, a confirmed reload when it changed nothing; errors E2", None), get(compat::regenerate)),
        (doc(Get, "/api/reload", ADMIN, "(edge manager) Reload HAProxy through the master (the live, known-good files), or start it; errors E2", None), get(compat::reload)),
        (doc(Post, "/api/config/reload", DOMAINS, "(edge manager) Safe apply, a confirmed reload when it changed nothing; errors E1", None), post(compat::config_reload)),
        (doc(Post, "/api/ssl", CERTS, "(edge manager) HTTP-01 certificate for one domain; errors E1", body::<compat::DomainRequest>()), post(compat::post_ssl)),
        (doc(Post, "/api/ssl/bundle", CERTS, "(edge manager) One certificate for primary and its SANs; cleanup is always empty (one certificate serves each name); errors E1",
            body::<compat::BundleRequest>()), post(compat::post_bundle)),
        (doc(Post, "/api/certificates/request", CERTS, "(edge manager) A certificate per domain (+ www.): 200 all, 207 some, 500 none issued",
            body::<compat::CertificatesRequest>()), post(compat::post_certificates_request)),
        (doc(Post, "/api/certificates/renew", CERTS, "(edge manager) Renew what is due, through the runtime API: never a reload, whatever the message says", None), post(compat::post_renew)),
        (doc(Get, "/api/certificates/status", READ, "(edge manager) One entry per served host name, expiry and days left", None), get(compat::status)),
        (doc(Get, "/api/certificates/{domain}/download", CERTS, "(edge manager) Chain and PRIVATE KEY of the certificate serving the domain", None), get(compat::get_download)),
        (doc(Get, "/api/certificates/{domain}/key", CERTS, "(edge manager) The PRIVATE KEY of the certificate serving the domain", None), get(compat::get_key)),
        (doc(Get, "/api/certificates/{domain}/cert", READ, "(edge manager) The chain of the certificate serving the domain", None), get(compat::get_cert)),
        (doc(Post, "/api/ssl/dns-challenge/request", CERTS, "(edge manager) Start a DNS-01 order for *.<domain>; answers the TXT value for _acme-challenge.<domain> (E3)", body::<compat::DomainRequest>()), post(compat::post_dns_request)),
        (doc(Post, "/api/ssl/dns-challenge/verify", CERTS, "(edge manager) Finish it: the wildcard certificate wildcard.<domain> is served (E3)", body::<compat::DomainRequest>()), post(compat::post_dns_verify)),
        (doc(Get, "/", OPEN, "(edge manager) An HTML page (the old web UI's place; no token needed)", None), get(compat::root)),
        (doc(Get, "/default-page", OPEN, "(edge manager) The old default page, HTML (no token needed)", None), get(compat::default_page)),
    ]
}

/// Each route's guard by method and path, as the router matches them.
pub type Guards = std::collections::HashMap<(axum::http::Method, String), Guard>;

pub fn guards() -> Guards {
    table()
        .into_iter()
        .map(|(doc, _)| {
            let method = match doc.method {
                Get => axum::http::Method::GET,
                Put => axum::http::Method::PUT,
                Post => axum::http::Method::POST,
                Delete => axum::http::Method::DELETE,
                _ => unreachable!("the route table uses GET, PUT, POST and DELETE only"),
            };
            ((method, doc.path.to_string()), doc.guard)
        })
        .collect()
}

/// The router: the table, grouped by path, behind authentication and request counting.
pub fn router(app: ApiState) -> Router {
    let mut by_path: BTreeMap<&'static str, MethodRouter<ApiState>> = BTreeMap::new();
    for (doc, route) in table() {
        let merged = match by_path.remove(doc.path) {
            Some(existing) => existing.merge(route),
            None => route,
        };
        by_path.insert(doc.path, merged);
    }
    let mut router = Router::new();
    for (path, route) in by_path {
        router = router.route(path, route);
    }
    router
        // Unknown paths and methods answer before authentication, as the old manager's did.
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            auth::require_token,
        ))
        // The dashboard signs in without the token; its pages call the routes above.
        .merge(ui::routes())
        .fallback(|uri: Uri| async move { routing_error(&uri, StatusCode::NOT_FOUND) })
        .method_not_allowed_fallback(|uri: Uri| async move {
            routing_error(&uri, StatusCode::METHOD_NOT_ALLOWED)
        })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(ui::etag))
        .layer(middleware::from_fn_with_state(app.clone(), count_requests))
        .with_state(app)
}

/// An unknown path or method: in the old envelope on the old manager's paths.
fn routing_error(uri: &Uri, status: StatusCode) -> axum::response::Response {
    if compat::is_old_path(uri.path()) {
        return compat::routing_error(status);
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        return ApiError::new(
            status,
            "method_not_allowed",
            "this route does not take that method; GET /openapi.json lists them",
        )
        .into_response();
    }
    ApiError::not_found("no such route; GET /openapi.json lists them").into_response()
}

/// The OpenAPI document, built from the table: every schema and parameter from a type.
pub fn openapi_document() -> OpenApi {
    let mut paths = Paths::new();
    for (doc, _) in table() {
        let (path, method) = (doc.path, doc.method.clone());
        paths.add_path_operation(path, vec![method], operation(doc));
    }
    let components = ComponentsBuilder::new()
        .security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        )
        .schema("Error", ErrorAnswer::schema())
        .build();
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("hapctl API")
                .version(env!("CARGO_PKG_VERSION")),
        )
        .components(Some(components))
        .paths(paths)
        .build()
}

/// One route's operation: its summary, parameters, body, answers and whether it takes the
/// token.
fn operation(doc: RouteDoc) -> utoipa::openapi::path::Operation {
    let error = ResponseBuilder::new().description("error").content(
        "application/json",
        Content::new(Some(Ref::from_schema_name("Error"))),
    );
    let responses = ResponsesBuilder::new()
        .response("200", ResponseBuilder::new().description("success"))
        .response("default", error);
    let path_params = doc
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .build()
        });
    let query = doc.query.map(|params| params()).unwrap_or_default();
    let params: Vec<Parameter> = path_params.chain(query).collect();
    let body = doc.body.map(|schema| {
        RequestBodyBuilder::new()
            .required(Some(Required::True))
            .content("application/json", Content::new(Some(schema())))
            .build()
    });
    // The scope is the bearer requirement's (OpenAPI's place for it) and an extension that
    // names it alone.
    let (security, extensions) = match doc.guard {
        Guard::Open => (None, None),
        Guard::Needs(scope) => (
            Some(vec![SecurityRequirement::new("bearer", [scope.as_str()])]),
            Some(
                ExtensionsBuilder::new()
                    .add("x-hapctl-scope", scope.as_str())
                    .build(),
            ),
        ),
    };
    OperationBuilder::new()
        .summary(Some(doc.summary))
        .responses(responses)
        .parameters((!params.is_empty()).then_some(params))
        .request_body(body)
        .securities(security)
        .extensions(extensions)
        .build()
}

async fn openapi(State(_): State<ApiState>) -> impl IntoResponse {
    Json(openapi_document())
}
