//! A short-request probe inside a container (its edge is on the container's own loopback):
//! curl in a shell loop, one line per request, read back from the host. Simple on purpose: it
//! judges hapctl from outside without sharing code with `hapctl prove`.

use std::process::Child;
use std::time::{Duration, Instant};

use super::container::Container;

pub struct Probe {
    child: Child,
    log: tempfile::NamedTempFile,
    stop: String,
    expect: String,
}

/// What the probe saw: `(unix time, answered as expected)` per request, in order.
pub struct ProbeLog {
    pub samples: Vec<(f64, bool)>,
    /// The lines of the failed requests (time, body, status), for messages.
    pub failures: Vec<String>,
}

impl Probe {
    /// Starts requesting `GET /` with `Host: host` (about 30 a second); a request succeeds
    /// when the body is `expect` and the status 200. Returns once 20 requests succeeded.
    pub fn start(c: &Container, host: &str, expect: &str) -> Probe {
        let log = tempfile::NamedTempFile::new().unwrap();
        let stop = format!(
            "/run/probe-{}.stop",
            log.path().file_name().unwrap().to_string_lossy()
        );
        let child = c
            .command(&format!(
                "while [ ! -e {stop} ]; do \
                   out=$(curl -s -m 1 -H 'Host: {host}' -w ' %{{http_code}}' http://127.0.0.1/ | tr -d '\\n'); \
                   printf '%s %s\\n' \"$(date +%s.%N)\" \"$out\"; \
                   sleep 0.02; \
                 done"
            ))
            .stdout(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let probe = Probe {
            child,
            log,
            stop,
            expect: format!("{expect} 200"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while probe.read().samples.iter().filter(|s| s.1).count() < 20 {
            assert!(
                Instant::now() < deadline,
                "the probe got no good answers: {:?}",
                probe.read().failures
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        probe
    }

    fn read(&self) -> ProbeLog {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let mut log = ProbeLog {
            samples: Vec::new(),
            failures: Vec::new(),
        };
        for line in text.lines() {
            let Some((t, rest)) = line.split_once(' ') else {
                continue;
            };
            let Ok(t) = t.parse::<f64>() else { continue };
            let ok = rest == self.expect;
            if !ok {
                log.failures.push(line.to_string());
            }
            log.samples.push((t, ok));
        }
        log
    }

    /// Stops the loop and returns what it saw.
    pub fn stop(mut self, c: &Container) -> ProbeLog {
        c.sh(&format!("touch {}", self.stop));
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the probe did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.read()
    }
}

impl ProbeLog {
    /// One line of numbers for the test output.
    pub fn summary(&self) -> String {
        format!(
            "{} requests, {} failed",
            self.samples.len(),
            self.failures.len()
        )
    }

    /// Seconds from `since` to the first good answer after the last failure (0 when nothing
    /// failed).
    pub fn seconds_without_service(&self, since: f64) -> f64 {
        let Some(last_failure) = self.samples.iter().rev().find(|s| !s.1) else {
            return 0.0;
        };
        self.samples
            .iter()
            .find(|s| s.0 > last_failure.0 && s.1)
            .map_or(f64::INFINITY, |s| s.0 - since)
    }
}
