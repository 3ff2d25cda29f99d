//! Desired state → the set of files HAProxy reads. Pure and deterministic: the same state and
//! settings always give the same bytes, so "nothing changed" is a byte comparison.
//!
//! Configuration text comes from templates (embedded, overridable from a folder); map files are
//! plain data and are written directly, which keeps 100k-entry maps fast.

mod fileset;
mod templates;

use serde::Serialize;

use crate::model::{Domain, EdgeState, Profile};
use crate::settings::Settings;

pub use fileset::{FileId, FileSet, SetFile};
pub use templates::{TemplateError, Templates};

/// First line of every file hapctl renders (after the file's comment marker).
pub const HEADER: &str =
    "Managed by hapctl: do not edit, changes are overwritten on the next apply.";

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template {name} failed to render: {message}; fix the override in render.templates_dir or remove it")]
    Template { name: &'static str, message: String },
}

#[derive(Serialize)]
struct ServerView {
    name: String,
    addr: String,
    check: bool,
    weight: Option<u16>,
    maxconn: Option<u32>,
}

#[derive(Serialize)]
struct BackendView {
    name: String,
    domain: String,
    profile: &'static str,
    check_path: Option<String>,
    servers: Vec<ServerView>,
}

/// Renders the whole file set for `state`.
pub fn render(
    state: &EdgeState,
    settings: &Settings,
    templates: &Templates,
) -> Result<FileSet, RenderError> {
    let paths = &settings.paths;
    let at = |id: FileId| id.path(paths).display().to_string();
    let backends: Vec<BackendView> = state
        .domains
        .iter()
        .map(|(domain, backend)| BackendView {
            name: domain.backend_name(),
            domain: domain.to_string(),
            profile: match backend.profile() {
                Profile::Default => "default",
                Profile::WebSocket => "websocket",
                Profile::Sse => "sse",
                Profile::HttpCheck(_) => "http-check",
            },
            check_path: match backend.profile() {
                Profile::HttpCheck(p) => Some(p.to_string()),
                _ => None,
            },
            servers: backend
                .servers()
                .iter()
                .map(|s| ServerView {
                    name: s.name.to_string(),
                    addr: s.addr.to_string(),
                    check: s.options.check,
                    weight: s.options.weight,
                    maxconn: s.options.maxconn,
                })
                .collect(),
        })
        .collect();
    let ctx = minijinja::context! {
        header => HEADER,
        http_bind => settings.edge.http_bind.to_string(),
        admin_socket => paths.admin_socket.display().to_string(),
        hosts_map => at(FileId::HostsMap),
        wildcards_map => at(FileId::WildcardsMap),
        blocked_map => at(FileId::BlockedMap),
        trusted_proxies_file => at(FileId::TrustedProxies),
        unknown_host_page => at(FileId::UnknownHostPage),
        blocked_page => at(FileId::BlockedPage),
        backends => backends,
    };

    let mut set = FileSet::default();
    for id in FileId::ALL {
        let bytes = match id.template() {
            Some(name) => templates
                .render(name, &ctx)
                .map_err(|message| RenderError::Template { name, message })?
                .into_bytes(),
            None => render_data(id, state),
        };
        set.insert(id, id.path(paths), ensure_final_newline(bytes));
    }
    Ok(set)
}

/// The data files: maps and the trusted-proxy list, one entry per line.
fn render_data(id: FileId, state: &EdgeState) -> Vec<u8> {
    let mut out = format!("# {HEADER}\n");
    match id {
        FileId::HostsMap => {
            for domain in state.domains.keys().filter(|d| !d.is_wildcard()) {
                out += &format!("{} {}\n", domain, domain.backend_name());
            }
        }
        FileId::WildcardsMap => {
            // `map_end` returns the first matching line: longest suffix first, so the most
            // specific wildcard wins.
            let mut wild: Vec<&Domain> = state.domains.keys().filter(|d| d.is_wildcard()).collect();
            wild.sort_by_key(|d| (std::cmp::Reverse(d.name().as_str().len()), *d));
            for domain in wild {
                out += &format!(".{} {}\n", domain.name(), domain.backend_name());
            }
        }
        FileId::BlockedMap => {
            for key in state.blocks.keys() {
                out += &blocked_map_line(&key.to_string());
            }
        }
        FileId::TrustedProxies => {
            for net in &state.trusted_proxies {
                out += &format!("{net}\n");
            }
        }
        _ => unreachable!("{id:?} is rendered from a template"),
    }
    out.into_bytes()
}

/// One line of the blocked-clients map. The value is a constant: the match is on the key
/// (`map_ip(...) -m found`), and the runtime API adds entries in the same form.
pub fn blocked_map_line(key: &str) -> String {
    format!("{key} 1\n")
}

fn ensure_final_newline(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.last() != Some(&b'\n') {
        bytes.push(b'\n');
    }
    bytes
}

#[cfg(test)]
mod tests;
