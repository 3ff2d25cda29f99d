//! One cutover: start the target generation (unless it runs), wait until it is ready, point
//! the app's server line at it through the safe apply, then retire per the retention rule.
//! What it started it stops again when it fails.

use crate::apply::{Applier, ApplyReport};
use crate::clock::{unix_millis, unix_now};
use crate::model::{AppName, Generation, Version};
use crate::settings::AppSettings;
use crate::store::{AppState, Store};

use super::runner::Runner;
use super::{
    ensure_port_free, readiness, record, DeliverError, Deliveries, DeliveryOutcome, DeliveryReport,
    DeliveryStep, Steps,
};

/// One cutover under way.
struct Cutover<'a> {
    app: &'a AppSettings,
    /// `deliver` or `rollback`.
    kind: &'static str,
    before: AppState,
    target: Version,
    runner: Runner,
    /// This cutover started the target's process (it did not run already).
    started_here: bool,
}

impl Deliveries<'_> {
    /// Moves `app_name` to `target`, or to its previous generation when `None`.
    pub(super) fn cutover(
        &self,
        store: &mut Store,
        app_name: &AppName,
        target: Option<&Version>,
        kind: &'static str,
        on_step: &mut dyn FnMut(&DeliveryStep),
    ) -> Result<DeliveryReport, DeliverError> {
        let app = self.app(app_name)?;
        let _lock = self.lock(app_name)?;
        let started_at_ms = unix_millis();
        let mut steps = Steps::start(on_step);
        let before = store.app_state(app_name)?;
        let target = match target {
            Some(t) => t.clone(),
            None => previous(app_name, &before)?,
        };
        let mut c = Cutover {
            app,
            kind,
            before,
            target,
            runner: Runner::new(self.settings, app),
            started_here: false,
        };
        if c.before.current.as_ref() == Some(&c.target) {
            let message = format!("{app_name} {} is already live; nothing done", c.target);
            return Ok(c.report(steps, DeliveryOutcome::AlreadyLive, message, None));
        }
        let generation = Generation {
            port: self.port_for(store, app, &c.before, &c.target)?,
            version: c.target.clone(),
        };
        c.start(&generation, &mut steps)?;
        let ready =
            readiness::Readiness::of(app, &generation).wait(|| c.runner.is_running(&c.target));
        if let Err(why) = ready {
            let r = c.not_ready(steps, why);
            store.record_delivery(&record(&r, started_at_ms))?;
            return Ok(r);
        }
        steps.done(
            "ready",
            format!(
                "{} consecutive answers on {}",
                app.readiness_successes, app.readiness_path
            ),
        );
        let apply = self
            .apply(store, &c, &generation)
            .inspect_err(|_| c.abandon())?;
        steps.done(
            "apply",
            format!("{}: {}", apply.outcome.as_str(), apply.message),
        );
        let r = if apply.outcome.is_success() {
            steps.done("retire", c.retire());
            c.delivered(steps, apply)
        } else {
            c.abandon();
            c.apply_failed(steps, apply)
        };
        store.record_delivery(&record(&r, started_at_ms))?;
        Ok(r)
    }

    /// The safe apply of the cutover: the generation remembered, the app's state moved.
    fn apply(
        &self,
        store: &mut Store,
        c: &Cutover,
        generation: &Generation,
    ) -> Result<ApplyReport, DeliverError> {
        let app_name = &c.app.name;
        let after = AppState {
            current: Some(c.target.clone()),
            previous: c.before.current.clone(),
        };
        let applier = Applier::new(self.settings, self.templates);
        let trigger = format!("{} {app_name} {}", c.kind, c.target);
        let (apply, _) = applier.apply(store, &trigger, |tx| {
            tx.remember_generation(app_name, generation, unix_now())?;
            tx.set_app_state(app_name, &after, unix_now())?;
            Ok(())
        })?;
        Ok(apply)
    }
}

/// The generation a rollback goes back to.
fn previous(app_name: &AppName, before: &AppState) -> Result<Version, DeliverError> {
    before
        .previous
        .clone()
        .ok_or_else(|| DeliverError::NoPrevious {
            app: app_name.to_string(),
            current: before
                .current
                .as_ref()
                .map_or("none".into(), Version::to_string),
        })
}

impl Cutover<'_> {
    /// Starts the target's process unless it runs already.
    fn start(&mut self, generation: &Generation, steps: &mut Steps) -> Result<(), DeliverError> {
        let (target, port) = (&self.target, generation.port);
        if self.runner.is_running(target) {
            steps.done(
                "start",
                format!("{target} already runs on 127.0.0.1:{port}"),
            );
            return Ok(());
        }
        ensure_port_free(port).map_err(|message| DeliverError::NoPort {
            app: self.app.name.to_string(),
            version: target.to_string(),
            message,
        })?;
        self.runner.start(generation)?;
        self.started_here = true;
        steps.done("start", format!("started {target} on 127.0.0.1:{port}"));
        Ok(())
    }

    /// Stops what this cutover started, after it failed.
    fn abandon(&self) {
        if self.started_here {
            let (app_name, target) = (&self.app.name, &self.target);
            if let Err(e) = self.runner.remove(app_name, target) {
                tracing::error!("could not stop {app_name} {target} after a failed delivery: {e}");
            }
        }
    }

    fn not_ready(&self, mut steps: Steps, why: String) -> DeliveryReport {
        self.abandon();
        let message = format!(
            "{} {} did not become ready: {why}; nothing changed{}. Its log: {}",
            self.app.name,
            self.target,
            if self.started_here {
                ", the process was stopped"
            } else {
                ""
            },
            self.runner.log_tail(&self.target)
        );
        steps.done("ready", why);
        self.report(steps, DeliveryOutcome::NotReady, message, None)
    }

    fn apply_failed(&self, steps: Steps, apply: ApplyReport) -> DeliveryReport {
        let message = format!(
            "the cutover to {} failed ({}); {} still serves",
            self.target,
            apply.outcome.as_str(),
            self.before
                .current
                .as_ref()
                .map_or("nothing".into(), Version::to_string)
        );
        self.report(steps, DeliveryOutcome::ApplyFailed, message, Some(apply))
    }

    fn delivered(&self, steps: Steps, apply: ApplyReport) -> DeliveryReport {
        let message = format!(
            "{} {} is live ({}); {}",
            self.app.name,
            self.target,
            self.kind,
            self.before
                .current
                .as_ref()
                .map_or("first delivery".into(), |c| format!("{c} kept running"))
        );
        self.report(steps, DeliveryOutcome::Delivered, message, Some(apply))
    }

    /// The retention rule: the generation replaced by the previous delivery goes, the one
    /// just replaced stays (old workers still stream from it; it is the way back). A failure
    /// here does not undo the cutover: it is reported.
    fn retire(&self) -> String {
        let (app_name, target, before) = (&self.app.name, &self.target, &self.before);
        let mut notes = Vec::new();
        match &before.previous {
            Some(old) if old != target && Some(old) != before.current.as_ref() => {
                match self.runner.remove(app_name, old) {
                    Ok(()) => {
                        notes.push(format!("removed {old}, replaced by the previous delivery"))
                    }
                    Err(e) => notes.push(format!("could not remove {old}: {e}")),
                }
            }
            _ => notes.push("nothing to remove".into()),
        }
        if let Some(replaced) = &before.current {
            match self.runner.keep_not_at_boot(replaced) {
                Ok(()) => notes.push(format!(
                    "kept {replaced} running for the old workers and the way back"
                )),
                Err(e) => notes.push(format!("could not mark {replaced} as not-at-boot: {e}")),
            }
        }
        if let Err(e) = self.runner.start_at_boot(target) {
            notes.push(format!("could not mark {target} as started at boot: {e}"));
        }
        notes.join("; ")
    }

    fn report(
        &self,
        steps: Steps,
        outcome: DeliveryOutcome,
        message: String,
        apply: Option<ApplyReport>,
    ) -> DeliveryReport {
        DeliveryReport {
            app: self.app.name.clone(),
            kind: self.kind,
            from: self.before.current.clone(),
            to: self.target.clone(),
            outcome,
            message,
            total_ms: steps.started.elapsed().as_secs_f64() * 1000.0,
            steps: steps.steps,
            apply,
        }
    }
}
