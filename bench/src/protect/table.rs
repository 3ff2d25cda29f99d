//! The client table filled to 200,000 entries through HAProxy's runtime API (`set table`,
//! pipelined in `prompt` mode on one admin-socket connection), then `hapctl security top`
//! and `GET /v1/security/stats` timed on it, with the pieces timed in-process.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::haproxy::CliSocket;
use hapctl::protect::{table, Stats, TABLE};

/// Bound on a whole fill and on each `show table`.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(120);
/// Commands per write.
const BATCH: usize = 2_000;

/// The `i`-th key: even ones IPv4 (198.18.0.0/15, stored IPv4-mapped), odd ones IPv6.
pub fn key(i: usize) -> String {
    let j = i / 2;
    assert!(j < 1 << 17, "198.18.0.0/15 holds 131,072 addresses");
    if i.is_multiple_of(2) {
        format!(
            "::ffff:198.{}.{}.{}",
            18 + (j >> 16),
            (j >> 8) & 0xff,
            j & 0xff
        )
    } else {
        format!("2001:db8:{:x}:{:x}::1", j >> 16, j & 0xffff)
    }
}

/// `set table` of entries `0..n` with varied counters. Returns the seconds it took.
pub fn fill(admin_socket: &Path, n: usize) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut stream = UnixStream::connect(admin_socket)
        .with_context(|| format!("connect to {}", admin_socket.display()))?;
    stream.set_read_timeout(Some(SOCKET_TIMEOUT))?;
    stream.set_write_timeout(Some(SOCKET_TIMEOUT))?;
    let mut reader = stream.try_clone()?;
    // Read while writing: HAProxy stops reading commands when its answers are not read.
    let answers = thread::spawn(move || {
        let mut all = Vec::new();
        reader.read_to_end(&mut all).map(|_| all)
    });
    stream.write_all(b"prompt\n")?;
    let mut batch = String::with_capacity(BATCH * 120);
    for i in 0..n {
        batch += &format!(
            "set table {TABLE} key {} data.http_req_rate {} data.conn_rate {} data.conn_cur {} data.http_err_rate {}\n",
            key(i),
            (i * 7919) % 5000 + 1,
            (i * 31) % 500,
            i % 7,
            i % 50
        );
        if batch.len() >= BATCH * 100 || i + 1 == n {
            stream.write_all(batch.as_bytes())?;
            batch.clear();
        }
    }
    stream.write_all(b"quit\n")?;
    let all = answers
        .join()
        .map_err(|_| anyhow::anyhow!("the reader panicked"))?
        .context("read the answers to set table")?;
    let secs = t0.elapsed().as_secs_f64();
    // Every command answers an empty line and the prompt: anything else is an error text.
    let expected = "\n> ".repeat(n + 1);
    if all != expected.as_bytes() {
        let text = String::from_utf8_lossy(&all);
        let odd: String = text.replace("\n> ", "").chars().take(300).collect();
        bail!(
            "set table: {} bytes of answers, not {}; besides prompts: {odd:?}",
            all.len(),
            expected.len()
        );
    }
    Ok(secs)
}

/// Where an in-process `Stats::top` spends its time (ms), and the dump's size.
pub struct Pieces {
    pub dump_ms: f64,
    pub dump_bytes: usize,
    pub parse_ms: f64,
    pub rows: usize,
    pub top_ms: f64,
}

pub fn pieces(settings: &hapctl::settings::Settings) -> anyhow::Result<Pieces> {
    let socket = CliSocket::new(&settings.paths.admin_socket, SOCKET_TIMEOUT);
    let t = Instant::now();
    let text = socket.command(&format!("show table {TABLE}"))?;
    let dump_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let dump = table::parse(&text)?;
    let parse_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    std::hint::black_box(Stats::from_settings(settings).top(20, 1)?);
    Ok(Pieces {
        dump_ms,
        dump_bytes: text.len(),
        parse_ms,
        rows: dump.rows.len(),
        top_ms: t.elapsed().as_secs_f64() * 1000.0,
    })
}
