//! The templates: embedded defaults, each replaceable by a file of the same name.

use std::path::Path;
use std::sync::Arc;

use minijinja::Environment;

const EMBEDDED: [(&str, &str); 11] = [
    (
        "haproxy.cfg.j2",
        include_str!("../../templates/haproxy.cfg.j2"),
    ),
    (
        "generation.cfg.j2",
        include_str!("../../templates/generation.cfg.j2"),
    ),
    (
        "unknown-host.html.j2",
        include_str!("../../templates/unknown-host.html.j2"),
    ),
    (
        "blocked.html.j2",
        include_str!("../../templates/blocked.html.j2"),
    ),
    (
        "suspended.html.j2",
        include_str!("../../templates/suspended.html.j2"),
    ),
    (
        "limited.html.j2",
        include_str!("../../templates/limited.html.j2"),
    ),
    (
        "denied.html.j2",
        include_str!("../../templates/denied.html.j2"),
    ),
    (
        "not-configured.html.j2",
        include_str!("../../templates/not-configured.html.j2"),
    ),
    (
        "waf-spoe.conf.j2",
        include_str!("../../templates/waf-spoe.conf.j2"),
    ),
    (
        "waf-blocked.html.j2",
        include_str!("../../templates/waf-blocked.html.j2"),
    ),
    (
        "waf-unavailable.html.j2",
        include_str!("../../templates/waf-unavailable.html.j2"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot read the templates folder {dir} (render.templates_dir): {error}")]
    Io { dir: String, error: std::io::Error },
    #[error("{file}: not a template hapctl renders; expected one of: {known}")]
    Unknown { file: String, known: String },
    #[error("{file}: template syntax error: {message}")]
    Syntax { file: String, message: String },
}

/// Compiled templates, ready to render. A clone shares them: the daemon's connections
/// (`Edge::connection`) render with one compiled set instead of one each.
#[derive(Clone)]
pub struct Templates {
    env: Arc<Environment<'static>>,
}

impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Templates")
    }
}

impl Templates {
    /// The embedded templates only.
    pub fn embedded() -> Templates {
        Templates::with_overrides(Vec::new()).expect("embedded templates compile")
    }

    /// Embedded templates, with every `*.j2` file of `dir` replacing the one of the same name.
    pub fn load(dir: Option<&Path>) -> Result<Templates, TemplateError> {
        let Some(dir) = dir else {
            return Ok(Templates::embedded());
        };
        let io = |error| TemplateError::Io {
            dir: dir.display().to_string(),
            error,
        };
        let mut overrides = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with('.') {
                continue;
            }
            let Some((name, _)) = EMBEDDED.iter().find(|(n, _)| *n == file) else {
                return Err(TemplateError::Unknown {
                    file: entry.path().display().to_string(),
                    known: EMBEDDED.map(|(n, _)| n).join(", "),
                });
            };
            let text = std::fs::read_to_string(entry.path()).map_err(io)?;
            overrides.push((*name, text));
        }
        Templates::with_overrides(overrides)
    }

    fn with_overrides(overrides: Vec<(&'static str, String)>) -> Result<Templates, TemplateError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        for (name, text) in EMBEDDED {
            let text = overrides
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| t.clone())
                .unwrap_or_else(|| text.to_string());
            env.add_template_owned(name, text)
                .map_err(|e| TemplateError::Syntax {
                    file: name.to_string(),
                    message: e.to_string(),
                })?;
        }
        Ok(Templates { env: Arc::new(env) })
    }

    pub(super) fn render(&self, name: &str, ctx: &minijinja::Value) -> Result<String, String> {
        self.env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .map_err(|e| e.to_string())
    }
}
