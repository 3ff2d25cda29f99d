//! Security stats: the stick table read through the worker's admin socket, and one client's
//! counters cleared (`clear table T key K`; `del table` is not a runtime-API command).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;

use super::maps::TABLE;
use super::table::{self, ClientRow, TableError, COUNTERS};
use crate::haproxy::{CliSocket, RuntimeError};
use crate::settings::Settings;

/// How long `clear` waits for streams that still hold a client's entry.
const CLEAR_PATIENCE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("cannot read the stick table {TABLE} through the admin socket: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("cannot read the stick table {TABLE}: {0}")]
    Table(#[from] TableError),
}

/// The busiest clients, with the table's totals.
#[derive(Debug, Clone, Serialize)]
pub struct SecurityStats {
    pub table: String,
    pub table_size: u64,
    pub total_tracked_ips: u64,
    pub sources_with_activity: usize,
    pub counters: [&'static str; 4],
    pub counter_windows_ms: BTreeMap<String, u64>,
    pub returned: usize,
    pub min_req_rate: u64,
    pub sources: Vec<ClientRow>,
}

/// The client table of the running worker.
pub struct Stats {
    socket: CliSocket,
}

impl Stats {
    pub fn from_settings(settings: &Settings) -> Stats {
        Stats {
            // A 200k-entry dump takes a while to stream.
            socket: CliSocket::new(settings.paths.admin_socket.clone(), Duration::from_secs(30)),
        }
    }

    fn run(&self, command: &str) -> Result<String, RuntimeError> {
        Ok(self.socket.command(command)?)
    }

    /// The `limit` busiest clients with at least `min_req_rate` requests in the window, sorted
    /// by (http_req_rate, http_err_rate, conn_rate, conn_cur), highest first.
    pub fn top(&self, limit: usize, min_req_rate: u64) -> Result<SecurityStats, StatsError> {
        let dump = table::parse(&self.run(&format!("show table {TABLE}"))?)?;
        let sources_with_activity = dump.rows.iter().filter(|r| r.is_active()).count();
        let mut sources: Vec<ClientRow> = dump
            .rows
            .into_iter()
            .filter(|r| r.http_req_rate >= min_req_rate)
            .collect();
        sources.sort_by(|a, b| b.rank().cmp(&a.rank()).then(a.ip.cmp(&b.ip)));
        sources.truncate(limit);
        Ok(SecurityStats {
            table: dump.table,
            table_size: dump.size,
            total_tracked_ips: dump.used,
            sources_with_activity,
            counters: COUNTERS,
            counter_windows_ms: dump.windows_ms,
            returned: sources.len(),
            min_req_rate,
            sources,
        })
    }

    /// Forgets one client's counters (its entry is removed; the next request starts at 1).
    /// HAProxy refuses while a stream still holds the entry ("Entry currently in use"): the
    /// client's last request is finishing, so this retries for up to `CLEAR_PATIENCE`.
    pub fn clear(&self, ip: IpAddr) -> Result<(), StatsError> {
        let command = format!("clear table {TABLE} key {}", table::table_key(ip));
        let deadline = std::time::Instant::now() + CLEAR_PATIENCE;
        loop {
            let answer = self.run(&command)?;
            let answer = answer.trim();
            if answer.is_empty() {
                return Ok(());
            }
            if !answer.contains("in use") || std::time::Instant::now() >= deadline {
                return Err(RuntimeError::Refused {
                    command,
                    answer: answer.to_string(),
                }
                .into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
