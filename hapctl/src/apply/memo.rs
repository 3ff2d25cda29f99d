//! What a long-lived caller (the daemon's `Edge`) keeps between applies so that the next one
//! renders little: each domain's backend section, and the last two whole sets with the state
//! each was rendered from. One of those is the state before the next change, whose files the
//! runtime path compares with the live ones: at 10,000 domains that render cost ~15 ms.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::model::EdgeState;
use crate::render::{self, RenderError, Templates};
use crate::settings::Settings;

use super::Snapshot;

/// Whole sets kept: the last two new states' (the newest, and the one before it, which is the
/// committed state when the apply of the newest runs).
const RECENT: usize = 2;

/// Renders of one edge, for one set of settings and templates (the caller's, fixed for its
/// lifetime): the same state renders the same bytes.
#[derive(Debug, Default)]
pub struct RenderMemo {
    sections: render::Sections,
    /// Shared with the applies that use them: a set is megabytes at 10,000 domains.
    recent: VecDeque<(EdgeState, Arc<Snapshot>)>,
}

/// Which state of an apply a render is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The apply's new state: kept for the next apply.
    New,
    /// The state before the change (usually the new state of the apply before): not kept.
    Before,
}

impl RenderMemo {
    pub(super) fn render(
        &mut self,
        state: &EdgeState,
        role: Role,
        settings: &Settings,
        templates: &Templates,
    ) -> Result<Arc<Snapshot>, RenderError> {
        if let Some(set) = self.kept(state) {
            return Ok(set);
        }
        let set = Arc::new(
            render::render_with(state, settings, templates, Some(&mut self.sections))
                .map(Snapshot::from_set)?,
        );
        if role == Role::New {
            self.recent.push_back((state.clone(), set.clone()));
        }
        Ok(set)
    }

    /// Lets go of the sets beyond the last [`RECENT`]: called once the change is in effect,
    /// since freeing a state and its set takes ~2 ms at 10,000 domains.
    pub(super) fn trim(&mut self) {
        let extra = self.recent.len().saturating_sub(RECENT);
        self.recent.drain(..extra);
    }

    fn kept(&self, state: &EdgeState) -> Option<Arc<Snapshot>> {
        self.recent
            .iter()
            .find(|(s, _)| s == state)
            .map(|(_, set)| set.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, Server, ServerName};

    fn backend(spec: &str) -> Backend {
        let server = Server::parse_spec(spec, ServerName::nth(1)).unwrap();
        Backend::new(vec![server], "default".parse().unwrap()).unwrap()
    }

    #[test]
    fn a_kept_render_is_the_bytes_a_fresh_render_gives() {
        let settings = Settings::parse(
            std::path::Path::new("/srv/h"),
            std::path::Path::new("hapctl.toml"),
            crate::settings::DEFAULT_SETTINGS_TOML,
        )
        .unwrap();
        let templates = Templates::embedded();
        let fresh = |s: &EdgeState| {
            Snapshot::from_set(render::render_with(s, &settings, &templates, None).unwrap())
        };
        let mut states = vec![EdgeState::default()];
        for (i, spec) in ["10.0.0.1:80", "10.0.0.1:80,weight=7", "10.0.0.2:80"]
            .into_iter()
            .enumerate()
        {
            let mut next = states.last().unwrap().clone();
            let domain = format!("d{}.example.com", i % 2).parse().unwrap();
            next.domains.insert(domain, backend(spec));
            states.push(next);
        }
        let mut memo = RenderMemo::default();
        for (i, pair) in states.windows(2).enumerate() {
            // As an apply does: the new state, then the one before it.
            let new = memo
                .render(&pair[1], Role::New, &settings, &templates)
                .unwrap();
            assert_eq!(*new, fresh(&pair[1]));
            let kept = memo.recent.iter().any(|(s, _)| *s == pair[0]);
            assert_eq!(
                kept,
                i > 0,
                "the state before is kept from the apply before"
            );
            let before = memo
                .render(&pair[0], Role::Before, &settings, &templates)
                .unwrap();
            assert_eq!(*before, fresh(&pair[0]));
            memo.trim();
        }
        assert_ne!(
            fresh(&states[1]),
            fresh(&states[2]),
            "the states render apart"
        );
        assert_eq!(memo.recent.len(), RECENT);
    }
}
