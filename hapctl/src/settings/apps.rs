//! `[[app]]` entries: applications delivered as generations, one process per version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::parse_duration;
use crate::model::{AppName, HttpPath, Port, Version};

/// How each version of an application gets its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortPlan {
    /// An explicit version → port table.
    Table(BTreeMap<Version, Port>),
    /// Ports allocated per version from an inclusive range, remembered in the database.
    Range { first: u16, last: u16 },
}

/// How a generation's process is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerSettings {
    /// hapctl runs the command itself: argv tokens where `{version}` and `{port}` are replaced.
    Exec { argv: Vec<String> },
    /// A systemd template unit such as `app@{version}.service`.
    Systemd { unit: String },
}

#[derive(Debug, Clone)]
pub struct AppSettings {
    pub name: AppName,
    /// HAProxy backend in the generation file.
    pub backend: String,
    /// The single server line of that backend.
    pub server: String,
    pub readiness_path: HttpPath,
    pub readiness_timeout: Duration,
    /// Consecutive successful readiness answers required.
    pub readiness_successes: u32,
    /// When set, the body served there must equal the version.
    pub version_path: Option<HttpPath>,
    pub ports: PortPlan,
    pub runner: RunnerSettings,
    /// Bound on how long old workers may keep serving after a reload (global directive: the
    /// largest value over all apps is used). Streams longer than this are cut.
    pub hard_stop_after: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when an exec generation is stopped.
    pub stop_grace: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApp {
    name: String,
    backend: Option<String>,
    server: Option<String>,
    readiness_path: Option<String>,
    readiness_timeout: Option<String>,
    readiness_successes: Option<u32>,
    version_path: Option<String>,
    ports: Option<BTreeMap<String, u16>>,
    port_range: Option<String>,
    runner: RawRunner,
    hard_stop_after: Option<String>,
    stop_grace: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum RawRunner {
    Exec { command: String },
    Systemd { unit: String },
}

/// Resolves every `[[app]]`; an error is `(key, message)`.
pub(super) fn resolve(
    raw: Vec<RawApp>,
    state_dir: &Path,
) -> Result<Vec<AppSettings>, (String, String)> {
    let mut apps = Vec::new();
    let mut backends = BTreeSet::new();
    for (i, app) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("app[{i}].{k}");
        let name: AppName = app
            .name
            .parse()
            .map_err(|e: crate::model::Invalid| (key("name"), e.rule))?;
        if apps.iter().any(|a: &AppSettings| a.name == name) {
            return Err((key("name"), format!("{name} is defined twice")));
        }
        let backend = app.backend.unwrap_or_else(|| format!("app_{name}"));
        check_identifier(&backend).map_err(|m| (key("backend"), m))?;
        if !backends.insert(backend.clone()) {
            return Err((key("backend"), format!("{backend} is used by two apps")));
        }
        let server = app.server.unwrap_or_else(|| "current".into());
        check_identifier(&server).map_err(|m| (key("server"), m))?;
        let path = |k: &str, v: &str| v.parse::<HttpPath>().map_err(|e| (key(k), e.rule));
        let readiness_path = path(
            "readiness_path",
            app.readiness_path.as_deref().unwrap_or("/ready"),
        )?;
        let version_path = app
            .version_path
            .as_deref()
            .map(|v| path("version_path", v))
            .transpose()?;
        let ports = resolve_ports(app.ports, app.port_range, &key)?;
        let runner = resolve_runner(app.runner, state_dir, &key)?;
        let successes = app.readiness_successes.unwrap_or(3);
        if successes == 0 || successes > 100 {
            return Err((key("readiness_successes"), "must be 1 to 100".into()));
        }
        apps.push(AppSettings {
            name,
            backend,
            server,
            readiness_path,
            readiness_timeout: parse_duration(app.readiness_timeout.as_deref(), 30)
                .map_err(|m| (key("readiness_timeout"), m))?,
            readiness_successes: successes,
            version_path,
            ports,
            runner,
            hard_stop_after: app
                .hard_stop_after
                .as_deref()
                .map(|v| parse_duration(Some(v), 0))
                .transpose()
                .map_err(|m| (key("hard_stop_after"), m))?,
            stop_grace: parse_duration(app.stop_grace.as_deref(), 10)
                .map_err(|m| (key("stop_grace"), m))?,
        });
    }
    Ok(apps)
}

/// `ports` or `port_range`, exactly one.
fn resolve_ports(
    ports: Option<BTreeMap<String, u16>>,
    port_range: Option<String>,
    key: &dyn Fn(&str) -> String,
) -> Result<PortPlan, (String, String)> {
    Ok(match (ports, port_range) {
        (Some(table), None) => {
            let mut ports = BTreeMap::new();
            for (version, port) in table {
                let v: Version = version
                    .parse()
                    .map_err(|e: crate::model::Invalid| (key("ports"), e.to_string()))?;
                let p = Port::try_from(port).map_err(|e| (key("ports"), e.to_string()))?;
                ports.insert(v, p);
            }
            PortPlan::Table(ports)
        }
        (None, Some(range)) => parse_range(&range).map_err(|m| (key("port_range"), m))?,
        _ => return Err((
            key("ports"),
            "set exactly one of `ports` (a version → port table) or `port_range` (\"18200-18299\")"
                .into(),
        )),
    })
}

/// `[app.runner]`: a command line (its program relative to `state_dir`) or a template unit.
fn resolve_runner(
    runner: RawRunner,
    state_dir: &Path,
    key: &dyn Fn(&str) -> String,
) -> Result<RunnerSettings, (String, String)> {
    Ok(match runner {
        RawRunner::Exec { command } => {
            let mut argv: Vec<String> = command.split_whitespace().map(String::from).collect();
            let Some(program) = argv.first_mut() else {
                return Err((key("runner.command"), "is empty".into()));
            };
            // A relative program path is relative to the state directory, like every path.
            if program.contains('/') && !program.starts_with('/') && !program.contains('{') {
                *program = state_dir.join(&*program).display().to_string();
            }
            RunnerSettings::Exec { argv }
        }
        RawRunner::Systemd { unit } => {
            let ok = unit.contains("{version}")
                && unit.ends_with(".service")
                && unit
                    .replace("{version}", "v")
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "@._-:".contains(c));
            if !ok {
                return Err((
                    key("runner.unit"),
                    format!("{:?} must be a template unit name containing {{version}} and ending in .service, e.g. \"app@{{version}}.service\"", crate::model::bounded(&unit)),
                ));
            }
            RunnerSettings::Systemd { unit }
        }
    })
}

/// HAProxy identifiers (backend and server names); `d_`, `w_` and `slot_` are the domains'
/// backends.
fn check_identifier(s: &str) -> Result<(), String> {
    let shown = crate::model::bounded(s);
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c));
    if !ok {
        return Err(format!(
            "{shown:?} must be 1-64 characters of letters, digits, '_', '.', ':' and '-'"
        ));
    }
    if ["d_", "w_", "slot_"].iter().any(|p| s.starts_with(p)) {
        return Err(format!(
            "{shown:?} starts with d_, w_ or slot_, which hapctl uses for domain backends"
        ));
    }
    Ok(())
}

fn parse_range(s: &str) -> Result<PortPlan, String> {
    let parsed = s.split_once('-').and_then(|(a, b)| {
        let first = Port::try_from(a.trim().parse::<u16>().ok()?).ok()?.get();
        let last = Port::try_from(b.trim().parse::<u16>().ok()?).ok()?.get();
        Some((first, last))
    });
    match parsed {
        Some((first, last)) if first <= last => Ok(PortPlan::Range { first, last }),
        _ => Err(format!(
            "{:?} must be FIRST-LAST with 1 <= FIRST <= LAST <= 65535, e.g. \"18200-18299\"",
            crate::model::bounded(s)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Settings;
    use super::*;

    fn parse(text: &str) -> Result<Settings, String> {
        Settings::parse(Path::new("/srv/h"), Path::new("hapctl.toml"), text)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_lab_app_parses() {
        let s = parse(
            r#"
[[app]]
name = "pub-maj-app"
backend = "applicatif"
server = "courante"
readiness_path = "/pret"
ports = { "1.4.2" = 18211, "1.5.0" = 18212 }
hard_stop_after = "10m"
[app.runner]
kind = "systemd"
unit = "pub-maj-app@{version}.service"
"#,
        )
        .unwrap();
        let app = &s.apps[0];
        assert_eq!(app.backend, "applicatif");
        assert_eq!(app.readiness_path.as_str(), "/pret");
        assert_eq!(app.hard_stop_after, Some(Duration::from_secs(600)));
        let PortPlan::Table(t) = &app.ports else {
            panic!()
        };
        assert_eq!(t[&"1.5.0".parse().unwrap()].get(), 18212);
    }

    #[test]
    fn exec_runner_resolves_relative_programs() {
        let s = parse("[[app]]\nname = \"a\"\nport_range = \"18200-18210\"\n[app.runner]\nkind = \"exec\"\ncommand = \"bin/app --port {port} --version {version}\"\n").unwrap();
        assert_eq!(
            s.apps[0].runner,
            RunnerSettings::Exec {
                argv: vec![
                    "/srv/h/bin/app".into(),
                    "--port".into(),
                    "{port}".into(),
                    "--version".into(),
                    "{version}".into()
                ]
            }
        );
        assert_eq!(s.apps[0].backend, "app_a");
    }

    #[test]
    fn errors_name_the_app_key() {
        let base = "[[app]]\nname = \"a\"\nport_range = \"18200-18210\"\n[app.runner]\nkind = \"exec\"\ncommand = \"x\"\n";
        for (text, key) in [
            (
                base.replace("name = \"a\"", "name = \"A b\""),
                "app[0].name",
            ),
            (
                base.replace("18200-18210", "18210-18200"),
                "app[0].port_range",
            ),
            (
                base.replace(
                    "port_range = \"18200-18210\"",
                    "port_range = \"1-2\"\nports = {}",
                ),
                "app[0].ports",
            ),
            (
                base.replace("name = \"a\"", "name = \"a\"\nbackend = \"d_x\""),
                "app[0].backend",
            ),
            (
                base.replace("name = \"a\"", "name = \"a\"\nreadiness_path = \"ready\""),
                "app[0].readiness_path",
            ),
            (
                base.replace(
                    "kind = \"exec\"\ncommand = \"x\"",
                    "kind = \"systemd\"\nunit = \"app.service\"",
                ),
                "app[0].runner.unit",
            ),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
        }
        let e = parse(&base.replace("kind = \"exec\"", "kind = \"docker\"")).unwrap_err();
        assert!(e.contains("docker"), "{e}");
    }
}
