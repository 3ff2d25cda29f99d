//! Traffic for the protections and logs sections: a kept-alive client, closed-loop load rounds,
//! and CPU readings from `/proc` (`schedstat` of every thread of a process). The backend they
//! load is the kit's `Backend::keep_alive`.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use testkit::http;

/// Bound on every read and write of the bench's sockets.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A kept-alive client of the edge: one connection, requests one after the other.
pub struct Client {
    stream: TcpStream,
    request: Vec<u8>,
}

impl Client {
    /// Connects to the edge on 127.0.0.1:`port`; every request is `GET path` with that Host
    /// and the extra header lines (each ending in CRLF).
    pub fn connect(port: u16, host: &str, path: &str, headers: &str) -> anyhow::Result<Client> {
        let target = SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&target, IO_TIMEOUT)
            .with_context(|| format!("connect to the edge on {target}"))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: hapctl-bench\r\nAccept: */*\r\n{headers}\r\n"
        );
        Ok(Client {
            stream,
            request: request.into_bytes(),
        })
    }

    /// One request; the answer's status (its body is read and dropped).
    pub fn get(&mut self) -> anyhow::Result<u16> {
        self.stream
            .write_all(&self.request)
            .context("send a request to the edge")?;
        let answer = http::read_response(&mut self.stream)
            .map_err(|e| anyhow::anyhow!("the answer from the edge: {e}"))?;
        Ok(answer.status)
    }
}

/// What one load round did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Round {
    pub secs: f64,
    /// Answers inside the measured window.
    pub ok: u64,
    pub not_ok: u64,
    /// CPU seconds used in the window, by process.
    pub haproxy_cpu: f64,
    pub daemon_cpu: f64,
    pub bench_cpu: f64,
}

impl Round {
    pub fn per_s(&self) -> f64 {
        self.ok as f64 / self.secs.max(1e-9)
    }

    /// HAProxy CPU per answered request, in microseconds.
    pub fn haproxy_us_per_req(&self) -> f64 {
        self.haproxy_cpu * 1e6 / (self.ok.max(1) as f64)
    }
}

/// The processes whose CPU a round reads.
pub struct Watched {
    pub haproxy: Vec<i32>,
    pub daemon: i32,
}

/// `clients` kept-alive clients, each with its own header lines, in a closed loop for
/// `warmup` (not counted) and then `measure`.
pub fn round(
    port: u16,
    host: &str,
    path: &str,
    headers: &[String],
    warmup: Duration,
    measure: Duration,
    watched: &Watched,
) -> anyhow::Result<Round> {
    let barrier = Arc::new(Barrier::new(headers.len() + 1));
    // Clients stay alive until the window's CPU was read (a thread's time leaves
    // /proc/PID/task when it exits).
    let done = Arc::new(Barrier::new(headers.len() + 1));
    let window = Arc::new(std::sync::Mutex::new(None::<(Instant, Instant)>));
    // All connected before any thread waits at the barrier (an error leaves none waiting).
    let clients = headers
        .iter()
        .map(|h| Client::connect(port, host, path, h))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut threads = Vec::new();
    for mut client in clients {
        let (barrier, done, window) = (barrier.clone(), done.clone(), window.clone());
        threads.push(thread::spawn(move || -> anyhow::Result<(u64, u64)> {
            barrier.wait();
            let (from, to) = window.lock().unwrap().expect("set before the barrier");
            let counted = closed_loop(&mut client, from, to);
            done.wait();
            counted
        }));
    }
    let start = Instant::now();
    let from = start + warmup;
    *window.lock().unwrap() = Some((from, from + measure));
    barrier.wait();
    thread::sleep(from.saturating_duration_since(Instant::now()));
    let before = Sample::now(watched);
    thread::sleep((from + measure).saturating_duration_since(Instant::now()));
    let after = Sample::now(watched);
    done.wait();
    let mut r = Round {
        secs: measure.as_secs_f64(),
        ..Round::default()
    };
    for t in threads {
        let (ok, not_ok) = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        r.ok += ok;
        r.not_ok += not_ok;
    }
    r.haproxy_cpu = after.haproxy - before.haproxy;
    r.daemon_cpu = after.daemon - before.daemon;
    r.bench_cpu = after.bench - before.bench;
    Ok(r)
}

/// Requests until `to`; answers from `from` on are counted (200, other).
fn closed_loop(client: &mut Client, from: Instant, to: Instant) -> anyhow::Result<(u64, u64)> {
    let (mut ok, mut not_ok) = (0, 0);
    loop {
        let status = client.get()?;
        let now = Instant::now();
        if now >= to {
            return Ok((ok, not_ok));
        }
        if now >= from {
            if status == 200 {
                ok += 1;
            } else {
                not_ok += 1;
            }
        }
    }
}

/// CPU seconds so far of the watched processes and of the bench.
struct Sample {
    haproxy: f64,
    daemon: f64,
    bench: f64,
}

impl Sample {
    fn now(w: &Watched) -> Sample {
        Sample {
            haproxy: w.haproxy.iter().map(|p| cpu_secs(&p.to_string())).sum(),
            daemon: cpu_secs(&w.daemon.to_string()),
            bench: cpu_secs("self"),
        }
    }
}

/// CPU time of every thread of a process (`/proc/PID/task/*/schedstat`, first field: ns on
/// a CPU), in seconds; 0 for a process that is gone.
pub fn cpu_secs(pid: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}
