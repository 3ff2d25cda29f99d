//! One proof: measure before, run the command, measure after, judge.

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use super::report::event;
use super::summary::{probe_events, probe_failures, summarize_probe};
use super::{
    checks, command, http, ms, now_rfc3339, probe, stream, watch, After, Before, Cause,
    CheckStatus, CommandRun, Edge, Event, Options, Processes, Proof, ProveError, StreamLog,
    CONNECT_TIMEOUT, VERSION_REQUESTS,
};

/// One proof under way: what it measures, its clock and what it saw so far.
struct Measurement<'a> {
    edge: &'a Edge,
    options: &'a Options,
    label: &'a str,
    argv: &'a [String],
    expect_version: Option<String>,
    clock: Instant,
    started_at: String,
    timeouts: http::Timeouts,
    timeline: Vec<Event>,
}

/// What a proof saw after its command, to judge.
struct Seen {
    before: Before,
    /// Every worker before the command, old ones included.
    before_workers: BTreeSet<i32>,
    run: CommandRun,
    probe_log: probe::ProbeLog,
    after_procs: Processes,
    version_answers: Vec<String>,
    streams: Vec<StreamLog>,
}

/// Measures the edge before, during and after `argv` runs, and judges the cutover.
pub(super) fn prove_one(
    edge: &Edge,
    options: &Options,
    label: &str,
    argv: &[String],
    expect_version: Option<String>,
    progress: &mut dyn FnMut(&str),
) -> Result<Proof, ProveError> {
    let mut m = Measurement {
        edge,
        options,
        label,
        argv,
        expect_version,
        clock: Instant::now(),
        started_at: now_rfc3339(),
        timeouts: http::Timeouts {
            connect: CONNECT_TIMEOUT,
            read: options.request_timeout,
        },
        timeline: Vec::new(),
    };
    progress(&format!(
        "prove {label}: measuring {} (Host: {})",
        edge.addr, options.host
    ));

    // Before: the edge serves, the master answers, the streams are established.
    let baseline = m.baseline()?;
    let stream_config = m.stream_config();
    let open = m.open_streams(&stream_config, progress)?;

    // The probe, warmed up so that "before" has requests too.
    let max_duration = options.timeout + options.settle + Duration::from_secs(30);
    let probe = m.start_probe(max_duration);

    // The master and workers just before the command, and a watcher during it.
    let (before_procs, before_list) = edge.processes(m.clock);
    let Some(before_list) = before_list else {
        let _ = probe.stop();
        stream_config.command_end.set(ms(m.clock));
        return Err(ProveError::Before(format!(
            "HAProxy's master socket stopped answering `show proc` ({})",
            before_procs.error.unwrap_or_default()
        )));
    };
    let watcher = watch::watch(edge.master.clone(), &before_list, m.clock, max_duration);

    // During.
    let run = m.run_command(&stream_config, progress);

    // After: settle, then the processes, the version served, the streams to their end.
    thread::sleep(options.settle);
    let probe_log = probe.stop();
    let stopped = format!("probe stopped after the {:?} settle period", options.settle);
    m.push("probe", stopped);
    m.timeline.extend(watcher.stop());
    let after_procs = edge.processes_settled(m.clock, Duration::from_secs(3));
    let version_answers = m.ask_expected_version();
    if !open.is_empty() {
        progress("  waiting for the long streams to end");
    }
    let streams = m.finish_streams(open, &stream_config);

    let proof = m.judge(Seen {
        before: Before {
            processes: before_procs,
            version_served: baseline,
        },
        before_workers: before_list.all_worker_pids().into_iter().collect(),
        run,
        probe_log,
        after_procs,
        version_answers,
        streams,
    });
    progress(&format!(
        "  {}",
        if proof.passed { "passed" } else { "FAILED" }
    ));
    Ok(proof)
}

impl Measurement<'_> {
    fn push(&mut self, source: &'static str, what: String) {
        self.timeline.push(event(ms(self.clock), source, what));
    }

    /// The version the edge serves before anything runs (it must serve, or nothing is
    /// measured), and a master that answers.
    fn baseline(&mut self) -> Result<String, ProveError> {
        let (edge, options) = (self.edge, self.options);
        let baseline = baseline(edge, options, self.timeouts)?;
        let serves = format!("the edge serves {baseline} (GET {})", options.path);
        self.push("prove", serves);
        if let (p, None) = edge.processes(self.clock) {
            return Err(ProveError::Before(format!(
                "HAProxy's master socket does not answer `show proc` ({}); prove reads the \
                 master PID and workers there",
                p.error.unwrap_or_default()
            )));
        }
        Ok(baseline)
    }

    fn stream_config(&self) -> stream::StreamConfig {
        stream::StreamConfig {
            addr: self.edge.addr,
            host: self.options.host.clone(),
            lines: self.options.stream_lines,
            interval_ms: self.options.stream_interval_ms,
            connect_timeout: CONNECT_TIMEOUT,
            hold: self.options.stream_hold,
            command_end: stream::CommandEnd::default(),
        }
    }

    /// Opens every stream at once, then waits for each first line.
    fn open_streams(
        &mut self,
        config: &stream::StreamConfig,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Vec<stream::OpenStream>, ProveError> {
        let first_line_timeout =
            Duration::from_secs(5).max(Duration::from_millis(u64::from(config.interval_ms) * 3));
        let pending: Vec<_> = (1..=self.options.streams)
            .map(|id| stream::start(id, config, self.clock))
            .collect();
        let mut open = Vec::new();
        for p in pending {
            let s = p
                .wait_first(first_line_timeout)
                .map_err(|e| ProveError::Before(format!("{e} (GET {})", config.target())))?;
            self.timeline.push(event(
                s.first_line_ms,
                "stream",
                format!(
                    "stream {} established, first line from {} ({})",
                    s.id,
                    s.version,
                    config.target()
                ),
            ));
            open.push(s);
        }
        if !open.is_empty() {
            let versions: BTreeSet<&str> = open.iter().map(|s| s.version.as_str()).collect();
            progress(&format!(
                "  {} long stream(s) open on {}",
                open.len(),
                versions.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        Ok(open)
    }

    /// Starts the short-request probe and lets it warm up.
    fn start_probe(&mut self, max_duration: Duration) -> probe::Probe {
        let options = self.options;
        let probe = probe::Probe::start(
            probe::ProbeConfig {
                addr: self.edge.addr,
                host: options.host.clone(),
                path: options.path.clone(),
                rate: options.rate,
                timeouts: self.timeouts,
                request_timeout: options.request_timeout,
                max_duration,
            },
            self.clock,
        );
        let started = format!(
            "short-request probe started: {}/s, a new connection each",
            options.rate
        );
        self.push("probe", started);
        thread::sleep(Duration::from_secs_f64(
            (5.0 / options.rate).clamp(0.1, 1.0),
        ));
        probe
    }

    /// Runs the command (bounded), telling the streams when it ended.
    fn run_command(
        &mut self,
        stream_config: &stream::StreamConfig,
        progress: &mut dyn FnMut(&str),
    ) -> CommandRun {
        let (options, label) = (self.options, self.label);
        progress(&format!("  running: {}", self.argv.join(" ")));
        let run =
            command::run_command(self.argv, &self.edge.state_dir, options.timeout, self.clock);
        stream_config.command_end.set(run.ended_ms);
        let started = format!("started: {label}");
        self.timeline
            .push(event(run.started_ms, "command", started));
        let ended = describe_end(&run, options.timeout);
        self.timeline.push(event(run.ended_ms, "command", ended));
        progress(&format!(
            "  command ended after {:.0} ms (exit {}); settling {:?}",
            run.duration_ms,
            run.exit_code.map_or("-".into(), |c| c.to_string()),
            options.settle
        ));
        run
    }

    /// `GET /version` a few times when a version is expected.
    fn ask_expected_version(&mut self) -> Vec<String> {
        let Some(expected) = self.expect_version.clone() else {
            return Vec::new();
        };
        let answers = ask_version(self.edge, self.options, self.timeouts);
        let what = format!(
            "GET /version x{VERSION_REQUESTS}: {} (expected {expected})",
            checks::summarize_answers(&answers)
        );
        self.push("prove", what);
        answers
    }

    /// Waits for each stream to end (bounded by its announced length, or its close when
    /// held, plus 10 s).
    fn finish_streams(
        &mut self,
        open: Vec<stream::OpenStream>,
        config: &stream::StreamConfig,
    ) -> Vec<StreamLog> {
        let mut streams = Vec::new();
        for s in open {
            let (id, version) = (s.id, s.version.clone());
            let end_ms = config
                .close_at()
                .unwrap_or(s.first_line_ms + config.expected_duration().as_secs_f64() * 1000.0);
            let left = Duration::from_secs_f64(((end_ms - ms(self.clock)) / 1000.0).max(0.0));
            let log = s
                .finish(left + Duration::from_secs(10))
                .unwrap_or_else(|why| {
                    let mut l = StreamLog::new(id, config, 0.0);
                    l.version = Some(version);
                    l.error = Some(why);
                    l
                });
            let t_ms = log.ended_ms.unwrap_or(ms(self.clock));
            self.timeline.push(event(t_ms, "stream", stream_end(&log)));
            streams.push(log);
        }
        streams
    }

    /// Every check with its numbers, and the proof.
    fn judge(mut self, seen: Seen) -> Proof {
        let options = self.options;
        let probe = summarize_probe(&seen.probe_log, options.rate, &seen.run);
        let failures = probe_failures(&seen.probe_log, &seen.run);
        probe_events(&seen.probe_log, &probe, &mut self.timeline);
        self.timeline.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        let after = After {
            new_workers: seen
                .after_procs
                .workers
                .iter()
                .copied()
                .filter(|p| !seen.before_workers.contains(p))
                .collect(),
            version_served: seen
                .probe_log
                .outcomes
                .iter()
                .rev()
                .find_map(|o| o.result.as_ref().ok().cloned()),
            processes: seen.after_procs,
            version_answers: seen.version_answers,
        };
        let (before, run, streams) = (seen.before, seen.run, seen.streams);
        let checks = vec![
            checks::check_master(&before.processes, &after.processes),
            checks::check_new_worker(&before.processes, &after),
            checks::check_probe(&probe, &failures, options.max_failures),
            checks::check_streams(&streams, &run, options),
            checks::check_version(self.expect_version.as_deref(), &after.version_answers),
            checks::check_command(&run, options.timeout),
        ];
        let passed = checks.iter().all(|c| c.status != CheckStatus::Fail);
        let way_back = checks::way_back(self.argv, &self.edge.state_dir, &before, &after, &checks);
        Proof {
            label: self.label.to_string(),
            command: self.argv.to_vec(),
            passed,
            started_at: self.started_at,
            duration_ms: ms(self.clock),
            expect_version: self.expect_version,
            before,
            run,
            after,
            probe,
            streams,
            checks,
            failures,
            timeline: self.timeline,
            way_back,
        }
    }
}

/// The timeline's line for a stream that ended.
fn stream_end(log: &StreamLog) -> String {
    let id = log.id;
    if log.intact() {
        format!(
            "stream {id} ended: {}/{} lines, all from {}, {}",
            log.received,
            log.announced,
            log.version.as_deref().unwrap_or("?"),
            if log.closed_by_client {
                "closed by the client after the command and the hold"
            } else {
                "final chunk"
            }
        )
    } else {
        format!(
            "stream {id} BROKEN: {}/{} lines{}{}",
            log.received,
            log.announced,
            log.error
                .as_deref()
                .map(|e| format!("; {e}"))
                .unwrap_or_default(),
            if log.foreign_lines > 0 {
                format!("; {} line(s) from another generation", log.foreign_lines)
            } else {
                String::new()
            }
        )
    }
}

/// The version the edge serves before anything runs: it must serve, or nothing is measured.
fn baseline(
    edge: &Edge,
    options: &Options,
    timeouts: http::Timeouts,
) -> Result<String, ProveError> {
    http::get(
        edge.addr,
        &options.host,
        &options.path,
        timeouts,
        options.request_timeout,
    )
    .and_then(|r| {
        if (200..300).contains(&r.head.status) {
            http::version_of(&r)
        } else {
            Err(http::HttpError::new(
                Cause::Non2xx,
                format!("status {}", r.head.status),
            ))
        }
    })
    .map_err(|e| {
        ProveError::Before(format!(
            "GET {} with Host {} on {} failed before the command ({e}); the edge must serve \
             the app before a cutover can be measured (--host, --path)",
            options.path, options.host, edge.addr
        ))
    })
}

/// `GET /version` a few times, each on a new connection: the bodies, or what went wrong.
fn ask_version(edge: &Edge, options: &Options, timeouts: http::Timeouts) -> Vec<String> {
    let mut answers = Vec::new();
    for _ in 0..VERSION_REQUESTS {
        let answer = http::get(
            edge.addr,
            &options.host,
            "/version",
            timeouts,
            options.request_timeout,
        );
        answers.push(match answer {
            Ok(r) if r.head.status == 200 => String::from_utf8_lossy(&r.body).trim().to_string(),
            Ok(r) => format!("(status {})", r.head.status),
            Err(e) => format!("({e})"),
        });
        thread::sleep(Duration::from_millis(20));
    }
    answers
}

fn describe_end(run: &CommandRun, timeout: Duration) -> String {
    match (&run.spawn_error, run.timed_out, run.exit_code, run.signal) {
        (Some(e), ..) => format!("could not start: {e}"),
        (None, true, ..) => format!("killed after the {timeout:?} timeout"),
        (None, false, Some(code), _) => format!("exited {code} after {:.0} ms", run.duration_ms),
        (None, false, None, sig) => format!("ended by signal {}", sig.unwrap_or(0)),
    }
}
