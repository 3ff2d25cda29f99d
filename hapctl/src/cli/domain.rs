//! `hapctl domain add|rm|ls|https|suspend|resume|limits|profile|sse`: domains, their servers and their policies.

use std::path::Path;

use clap::Subcommand;

use hapctl::contract::{HttpsRequest, PutDomainRequest};
use hapctl::edge::{after_put, DomainResult, ProtectionsChange};
use hapctl::model::{
    AppName, Backend, Domain, Hsts, HttpsPolicy, Invalid, PostLimit, Profile, ProtectProfile,
    Redirect, Server, ServerName,
};

use serde::Serialize;
use serde_json::{json, Value};

use super::limits::RuleArgs;
use super::{forward, open, output, Failure, JsonFlag, JsonOut};

#[derive(Subcommand)]
pub enum DomainCommand {
    /// Add a domain, or replace it if it exists.
    Add {
        /// `shop.example.com` or `*.example.com`.
        name: String,
        /// HOST:PORT[,weight=N][,maxconn=N][,check|nocheck]; repeat for more servers.
        #[arg(
            long = "server",
            required_unless_present = "app",
            conflicts_with = "app"
        )]
        servers: Vec<String>,
        /// Route the domain to a delivered application instead of servers.
        #[arg(long)]
        app: Option<String>,
        /// default, websocket, sse, http-check or http-check:/path.
        #[arg(long, default_value = "default")]
        profile: String,
        /// Send event streams (Accept: text/event-stream, ?action=stream) to a long-lived twin
        /// of the backend (6 h, no delay), as the old manager did.
        #[arg(long, conflicts_with = "app")]
        sse_routing: bool,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Per-request SSE routing of a domain on or off (event streams to its long-lived twin
    /// backend; a reload).
    Sse {
        name: String,
        #[arg(value_name = "on|off")]
        state: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Remove a domain.
    Rm {
        name: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List domains.
    Ls(JsonOut),
    /// Answer a domain with the suspended page (503) until it is resumed (no reload).
    Suspend {
        name: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Serve a suspended domain again (no reload).
    Resume {
        name: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// A domain's own rate-limit policy (a map change: no reload); --inherit follows the
    /// edge-wide default again (`hapctl limits set`).
    Limits {
        name: String,
        #[command(flatten)]
        rules: RuleArgs,
        #[arg(long, conflicts_with_all = ["preset", "req_rate", "req_rate_soft", "conn_rate", "conn_cur", "err_rate"])]
        inherit: bool,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// A domain's path-protection profiles and their thresholds (a map change: no reload).
    /// Prints the result.
    Profile {
        name: String,
        /// Turn a profile on (wordpress); repeatable.
        #[arg(long, value_name = "PROFILE")]
        add: Vec<String>,
        /// Turn a profile off; repeatable.
        #[arg(long, value_name = "PROFILE")]
        rm: Vec<String>,
        /// on or off: the wordpress wp-admin gate for this host (302 to wp-login).
        #[arg(long, value_name = "on|off")]
        wp_admin_gate: Option<String>,
        /// wordpress: login POSTs per client per 60 s before the tarpit (1-100000, default 30;
        /// runtime). The 60 s window is fixed.
        #[arg(long, value_name = "N")]
        wp_login_posts: Option<String>,
        /// wordpress: xmlrpc POSTs per client per 60 s before the tarpit (1-100000, default
        /// 60; runtime).
        #[arg(long, value_name = "N")]
        wp_xmlrpc_posts: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// A domain's HTTPS policy: redirect HTTP to HTTPS, HSTS (a map change: no reload).
    Https {
        name: String,
        /// off, 301 or 308 (308 keeps the method and body).
        #[arg(long, default_value = "off")]
        redirect: String,
        /// Send Strict-Transport-Security with this max-age (seconds) on HTTPS answers.
        #[arg(long, value_name = "SECONDS", conflicts_with = "no_hsts")]
        hsts: Option<u32>,
        /// Add includeSubDomains to the HSTS header.
        #[arg(long, requires = "hsts")]
        hsts_subdomains: bool,
        /// No HSTS header (the default).
        #[arg(long)]
        no_hsts: bool,
        /// on (the default) or off: HTTPS answers announce HTTP/3 with alt-svc where the edge
        /// serves it.
        #[arg(long, value_name = "on|off", default_value = "on")]
        alt_svc: String,
        #[command(flatten)]
        out: JsonFlag,
    },
}

pub fn run(dir: &Path, cmd: DomainCommand) -> Result<u8, Failure> {
    match cmd {
        DomainCommand::Add {
            name,
            app: Some(app),
            out,
            ..
        } => add_app(dir, &name, &app, out.json),
        DomainCommand::Add {
            name,
            servers,
            profile,
            sse_routing,
            out,
            app: None,
        } => add_servers(dir, &name, &servers, &profile, sse_routing, out.json),
        DomainCommand::Sse { name, state, out } => sse(dir, &name, &state, out.json),
        DomainCommand::Rm { name, out } => {
            let name: Domain = name.parse()?;
            let path = format!("/v1/domains/{name}");
            forwarded_or(dir, "DELETE", &path, Value::Null, out.json, || {
                let report = open(dir)?.remove_domain(&name)?;
                Ok(output::print_report(&report, out.json))
            })
        }
        DomainCommand::Https {
            name,
            redirect,
            hsts,
            hsts_subdomains,
            no_hsts: _,
            alt_svc,
            out,
        } => {
            let hsts = hsts.map(|age| (age, hsts_subdomains));
            https(dir, &name, &redirect, hsts, &alt_svc, out.json)
        }
        DomainCommand::Limits {
            name,
            rules,
            inherit,
            out,
        } => limits(dir, &name, rules, inherit, out.json),
        DomainCommand::Profile {
            name,
            add,
            rm,
            wp_admin_gate,
            wp_login_posts,
            wp_xmlrpc_posts,
            out,
        } => {
            let domain: Domain = name.parse()?;
            let parse = |v: &[String]| {
                v.iter()
                    .map(|p| p.parse::<ProtectProfile>())
                    .collect::<Result<Vec<_>, _>>()
            };
            let posts =
                |field, v: Option<String>| v.map(|v| PostLimit::parse(field, &v)).transpose();
            let change = ProtectionsChange::Edit {
                add: parse(&add)?,
                rm: parse(&rm)?,
                wp_admin_gate: wp_admin_gate
                    .map(|v| hapctl::protect::parse_switch("wp-admin-gate", &v))
                    .transpose()?,
                wp_login_posts: posts("wp-login-posts", wp_login_posts)?,
                wp_xmlrpc_posts: posts("wp-xmlrpc-posts", wp_xmlrpc_posts)?,
            };
            profile(dir, &domain, change, out.json)
        }
        DomainCommand::Suspend { name, out } => suspension(dir, &name, true, out.json),
        DomainCommand::Resume { name, out } => suspension(dir, &name, false, out.json),
        DomainCommand::Ls(out) => {
            output::print_domains(&open(dir)?.state()?, out.json);
            Ok(0)
        }
    }
}

/// `domain add NAME --app APP`.
fn add_app(dir: &Path, name: &str, app: &str, json: bool) -> Result<u8, Failure> {
    let (name, app): (Domain, AppName) = (name.parse()?, app.parse()?);
    let body = json!({ "app": app });
    forwarded_or(
        dir,
        "PUT",
        &format!("/v1/domains/{name}"),
        body,
        json,
        || {
            let (report, _) = open(dir)?.put_app_domain(&name, &app)?;
            Ok(output::print_report(&report, json))
        },
    )
}

/// `domain add NAME --server ...`: says whether it was added or replaced, and which of its
/// servers' names do not resolve.
fn add_servers(
    dir: &Path,
    name: &str,
    servers: &[String],
    profile: &str,
    sse_routing: bool,
    json: bool,
) -> Result<u8, Failure> {
    let (name, profile): (Domain, Profile) = (name.parse()?, profile.parse()?);
    let servers = servers
        .iter()
        .enumerate()
        .map(|(i, spec)| Server::parse_spec(spec, ServerName::nth(i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let backend = Backend::new(servers, profile)?.with_sse_routing(sse_routing);
    let announce = |created: bool| {
        eprintln!(
            "domain {name} {}",
            if created { "added" } else { "replaced" }
        )
    };
    let body = PutDomainRequest::servers(&backend);
    if let Some(answer) = forward::send(dir, "PUT", &format!("/v1/domains/{name}"), &body)? {
        match answer.result() {
            Some(DomainResult::Created) => announce(true),
            Some(DomainResult::Replaced) => announce(false),
            _ => {}
        }
        return answer.print_put_report(json);
    }
    let mut edge = open(dir)?;
    let (report, created) = edge.put_domain(&name, &backend)?;
    if let Some(created) = created {
        announce(created);
    }
    let resolution = report
        .outcome
        .is_success()
        .then(|| after_put(&edge.settings, &name, &backend));
    let report = serde_json::to_value(&report).expect("a report serialises");
    output::print_put_report(&report, resolution.as_ref(), json)
}

/// `domain sse NAME on|off`: a domain with servers of its own, put again with the switch.
fn sse(dir: &Path, name: &str, state: &str, json: bool) -> Result<u8, Failure> {
    let on = match state {
        "on" => true,
        "off" => false,
        other => return Err(Invalid::new("state", other, "must be on or off").into()),
    };
    let domain: Domain = name.parse()?;
    let mut edge = open(dir)?;
    let state = edge.state()?;
    let Some(backend) = state.domains.get(&domain) else {
        if state.app_domains.contains_key(&domain) {
            return Err(Failure::input(anyhow::anyhow!(
                "domain {domain} is routed to an app: SSE routing needs its own servers"
            )));
        }
        return Err(
            hapctl::edge::EdgeError::Apply(hapctl::apply::ApplyError::NotFound(format!(
                "domain {domain} does not exist; `hapctl domain ls` lists them"
            )))
            .into(),
        );
    };
    let (report, _) = edge.put_domain(&domain, &backend.clone().with_sse_routing(on))?;
    Ok(output::print_report(&report, json))
}

/// `domain https NAME`: the redirect, HSTS (max-age, subdomains) and alt-svc, through the
/// daemon when one runs.
fn https(
    dir: &Path,
    name: &str,
    redirect: &str,
    hsts: Option<(u32, bool)>,
    alt_svc: &str,
    json: bool,
) -> Result<u8, Failure> {
    let parsed = match redirect {
        "off" => Redirect::Off,
        "301" => Redirect::Permanent301,
        "308" => Redirect::Permanent308,
        other => return Err(Invalid::new("redirect", other, "must be off, 301 or 308").into()),
    };
    let alt_svc = match alt_svc {
        "on" => true,
        "off" => false,
        other => return Err(Invalid::new("alt-svc", other, "must be on or off").into()),
    };
    let hsts = hsts
        .map(|(age, subdomains)| Hsts::new(age, subdomains))
        .transpose()?;
    let domain: Domain = name.parse()?;
    let body = HttpsRequest {
        redirect: redirect.to_string(),
        hsts_max_age: hsts.map(|h| u64::from(h.max_age())),
        hsts_include_subdomains: hsts.is_some_and(|h| h.include_subdomains),
        alt_svc,
    };
    let path = format!("/v1/domains/{domain}/https");
    forwarded_or(dir, "PUT", &path, body, json, || {
        let policy = HttpsPolicy {
            redirect: parsed,
            hsts,
            alt_svc,
        };
        let report = open(dir)?.set_https_policy(&domain, policy)?;
        Ok(output::print_report(&report, json))
    })
}

/// `domain limits NAME`: edits the domain's own policy from its current one (or the default),
/// or lets it follow the default again.
fn limits(
    dir: &Path,
    name: &str,
    rules: RuleArgs,
    inherit: bool,
    json: bool,
) -> Result<u8, Failure> {
    let domain: Domain = name.parse()?;
    let mut edge = open(dir)?;
    let policy = match inherit {
        true => None,
        false => {
            let edit = rules.edit();
            if edit.is_empty() {
                return Err(Failure::input(anyhow::anyhow!(
                    "give --preset, a rule (--req-rate ...) or --inherit"
                )));
            }
            let limits = edge.limits()?;
            let base = limits.domains.get(&domain).unwrap_or(&limits.default);
            Some(edit.apply(*base)?)
        }
    };
    let report = edge.set_domain_limits(&domain, policy)?;
    Ok(output::print_report(&report, json))
}

/// `domain profile NAME`: applies the edit and says what the domain's protections are now.
fn profile(
    dir: &Path,
    domain: &Domain,
    change: ProtectionsChange,
    json: bool,
) -> Result<u8, Failure> {
    let (report, after) = open(dir)?.set_protections(domain, change)?;
    let profiles: Vec<_> = after.profiles.iter().map(|p| p.name()).collect();
    eprintln!(
        "domain {domain}: profiles [{}], wp-admin gate {}, wp-login POSTs {}/60s, xmlrpc POSTs {}/60s",
        profiles.join(", "),
        if after.wp_admin_gate { "on" } else { "off" },
        after.wp_login_posts.get(),
        after.wp_xmlrpc_posts.get()
    );
    Ok(output::print_report(&report, json))
}

/// Suspends or resumes a domain, through the daemon when one runs.
fn suspension(dir: &Path, name: &str, suspended: bool, json: bool) -> Result<u8, Failure> {
    let domain: Domain = name.parse()?;
    let verb = if suspended { "suspend" } else { "resume" };
    let path = format!("/v1/domains/{domain}/{verb}");
    forwarded_or(dir, "POST", &path, Value::Null, json, || {
        let report = open(dir)?.set_suspended(&domain, suspended)?;
        Ok(output::print_report(&report, json))
    })
}

/// Sends the change to the running daemon (`forward.rs`) and prints its report, or, with no
/// daemon, runs `local`.
fn forwarded_or(
    dir: &Path,
    method: &str,
    path: &str,
    body: impl Serialize,
    json: bool,
    local: impl FnOnce() -> Result<u8, Failure>,
) -> Result<u8, Failure> {
    match forward::send(dir, method, path, &body)? {
        Some(answer) => answer.print_report(json),
        None => local(),
    }
}
