//! A change on its way through the CLI or the API, and its apply report at the end.

use std::process::{Child, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::api::{Answer, Api};
use crate::sys;

use super::{Served, Set, Via, OP_TIMEOUT};

/// A change on its way: the CLI process, or the PUT on its own thread.
pub(super) enum Job {
    Cli {
        child: Child,
        stdout: JoinHandle<Vec<u8>>,
        stderr: JoinHandle<Vec<u8>>,
    },
    Api(JoinHandle<(anyhow::Result<Answer>, Duration)>),
}

impl Job {
    /// `t0`: when the request counts as made (the API's answer time is taken from it).
    pub(super) fn start(s: &Served, via: Via, to: Set, t0: Instant) -> anyhow::Result<Job> {
        Ok(match via {
            Via::Cli => {
                let mut args = vec!["domain".to_string(), "add".into(), s.host.clone()];
                args.extend(to.cli_args(&s.a, &s.b));
                args.push("--json".into());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let mut child = s
                    .edge
                    .command(&args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("spawn hapctl domain add")?;
                Job::Cli {
                    stdout: sys::read_in_background(child.stdout.take()),
                    stderr: sys::read_in_background(child.stderr.take()),
                    child,
                }
            }
            Via::Api => {
                let api = Api::of(&s.daemon);
                let path = format!("/v1/domains/{}", s.host);
                let body = to.api_body(&s.a, &s.b);
                Job::Api(thread::spawn(move || {
                    (api.call("PUT", &path, Some(&body)), t0.elapsed())
                }))
            }
        })
    }

    pub(super) fn ended(&mut self) -> bool {
        match self {
            Job::Cli { child, .. } => matches!(child.try_wait(), Ok(Some(_))),
            Job::Api(h) => h.is_finished(),
        }
    }

    /// Waits (bounded) for the end: the apply report (an applied one, else an error) and the
    /// time from `t0` to the end (as seen here for the CLI, on the PUT's thread for the API).
    pub(super) fn finish(self, t0: Instant) -> anyhow::Result<(Value, Duration)> {
        match self {
            Job::Cli {
                mut child,
                stdout,
                stderr,
            } => {
                let status = loop {
                    if let Some(status) = child.try_wait()? {
                        break status;
                    }
                    if t0.elapsed() > OP_TIMEOUT {
                        let _ = child.kill();
                        let _ = child.wait();
                        bail!("hapctl domain add did not exit within {OP_TIMEOUT:?}");
                    }
                    thread::sleep(Duration::from_micros(500));
                };
                let end = t0.elapsed();
                let out = String::from_utf8_lossy(&stdout.join().unwrap_or_default()).into_owned();
                let err = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
                let report: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
                if !status.success() || report["outcome"] != "applied" {
                    bail!(
                        "hapctl domain add ({status}): {} {}",
                        out.trim(),
                        err.trim()
                    );
                }
                Ok((report, end))
            }
            Job::Api(h) => {
                let (answer, end) = h
                    .join()
                    .map_err(|_| anyhow::anyhow!("the PUT thread panicked"))?;
                let answer = answer?;
                let report = answer.json()["apply"].clone();
                if !matches!(answer.status, 200 | 201) || report["outcome"] != "applied" {
                    bail!("PUT /v1/domains: {}", answer.describe());
                }
                Ok((report, end))
            }
        }
    }
}
