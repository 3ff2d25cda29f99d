//! Which way an apply takes to the edge, decided before anything is written. Pure: from the
//! files that differ, whether the worker runs and loaded hapctl's files, and the runtime plan.

use crate::render::FileId;

use super::runtime_plan::{NotRuntime, RuntimePlan};
use super::runtime_push;

/// The path of one apply; each has its executor in [`super::Applier`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ApplyPath {
    /// The live files already match and the worker was started from them: nothing runs.
    Unchanged,
    /// Maps alone (policies, suspensions, limits, profiles, WAF) changed and a worker runs:
    /// each is replaced in it through the runtime API, no check, no reload.
    Maps,
    /// Servers and routes through the runtime API; the plan's slot placement is saved.
    Runtime(RuntimePlan),
    /// Write, `haproxy -c`, reload.
    Reload {
        /// Why the runtime path cannot take the change (`None`: the changed files, or a
        /// worker not started from them, explain the reload).
        why: Option<NotRuntime>,
        /// The runtime plan placed added domains in free slots: saved with the change.
        placed: bool,
    },
}

impl ApplyPath {
    /// The path for files `changed`; `stale_worker`: the running worker lacks hapctl's
    /// blocked map, so it was not started from these files and is reloaded even when they
    /// are unchanged. `worker_runs` is asked (one round trip to the master) unless nothing
    /// is to be done.
    pub(super) fn choose(
        changed: &[FileId],
        stale_worker: bool,
        plan: Result<RuntimePlan, NotRuntime>,
        worker_runs: impl FnOnce() -> bool,
    ) -> ApplyPath {
        if changed.is_empty() && !stale_worker {
            return ApplyPath::Unchanged;
        }
        let worker_runs = worker_runs();
        if stale_worker {
            return ApplyPath::Reload {
                why: None,
                placed: false,
            };
        }
        if worker_runs && changed.iter().all(|id| FileId::RUNTIME_MAPS.contains(id)) {
            return ApplyPath::Maps;
        }
        let placed = plan.is_ok();
        match (runtime_push::usable(plan, changed), worker_runs) {
            (Ok(plan), true) => ApplyPath::Runtime(plan),
            // No worker to change: the files wait for HAProxy's start.
            (Ok(_), false) => ApplyPath::Reload { why: None, placed },
            (Err(why), _) => ApplyPath::Reload {
                why: Some(why),
                placed,
            },
        }
    }

    /// Whether the change is meant to take effect through the runtime API (the history's
    /// diff is then made after it, not before).
    pub(super) fn is_runtime(&self) -> bool {
        matches!(self, ApplyPath::Maps | ApplyPath::Runtime(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: FileId = FileId::RUNTIME_MAPS[0];

    fn plan() -> Result<RuntimePlan, NotRuntime> {
        Ok(RuntimePlan::default())
    }

    fn reload(why: Option<NotRuntime>, placed: bool) -> ApplyPath {
        ApplyPath::Reload { why, placed }
    }

    #[test]
    fn nothing_changed_runs_nothing_and_asks_no_master() {
        let path = ApplyPath::choose(&[], false, Err(NotRuntime::Unchanged), || {
            panic!("the master is not asked when nothing changed")
        });
        assert_eq!(path, ApplyPath::Unchanged);
    }

    #[test]
    fn a_stale_worker_is_reloaded_even_with_unchanged_files_or_maps_alone() {
        for changed in [&[][..], &[MAP]] {
            let path = ApplyPath::choose(changed, true, plan(), || true);
            assert_eq!(path, reload(None, false), "{changed:?}");
        }
    }

    #[test]
    fn maps_alone_go_through_the_runtime_api_when_a_worker_runs() {
        let changed = [MAP, FileId::RUNTIME_MAPS[1]];
        let unchanged = || Err(NotRuntime::Unchanged);
        assert_eq!(
            ApplyPath::choose(&changed, false, unchanged(), || true),
            ApplyPath::Maps
        );
        assert_eq!(
            ApplyPath::choose(&changed, false, unchanged(), || false),
            reload(Some(NotRuntime::Unchanged), false)
        );
    }

    #[test]
    fn a_usable_plan_takes_the_runtime_path_only_with_a_worker() {
        let changed = [FileId::Config, FileId::HostsMap];
        assert_eq!(
            ApplyPath::choose(&changed, false, plan(), || true),
            ApplyPath::Runtime(RuntimePlan::default())
        );
        assert_eq!(
            ApplyPath::choose(&changed, false, plan(), || false),
            reload(None, true)
        );
    }

    #[test]
    fn a_plan_beside_other_changed_files_reloads_keeping_its_placement() {
        let changed = [FileId::Config, FileId::TrustedProxies];
        let path = ApplyPath::choose(&changed, false, plan(), || true);
        let ApplyPath::Reload {
            why: Some(NotRuntime::Reload(why)),
            placed: true,
        } = path
        else {
            panic!("{path:?}");
        };
        assert!(why.contains("beyond haproxy.cfg"), "{why}");
    }

    #[test]
    fn no_plan_reloads_with_its_reason() {
        let full = NotRuntime::Capacity("every slot is taken".into());
        let path = ApplyPath::choose(&[FileId::Config], false, Err(full.clone()), || true);
        assert_eq!(path, reload(Some(full), false));
        assert!(!path.is_runtime());
    }
}
