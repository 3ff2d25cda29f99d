//! A backend's servers in the running worker, changed through its admin socket without a
//! reload: dynamic servers (`add server`/`del server`), `set server … weight|addr|state`, and
//! `show servers state` to read every change back.
//!
//! Runtime changes are lost at the next reload (the new worker reads the files), so callers
//! write the files first. Commands carry only typed values (names, addresses, the option text
//! `ServerOptions::to_text` renders), never raw input.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::socket::CliSocket;
use super::RuntimeError;

/// How often a removal looks whether the draining server is idle.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// The `srv_admin_state` bit of a server HAProxy holds in maintenance because its name did not
/// resolve (`MAINT (resolution)` in `show stat`; an `init-addr …,none` server on 2.6 and 3.0).
pub const RESOLUTION_MAINT: u32 = 0x20;

/// One server as `show servers state` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    pub backend: String,
    pub name: String,
    pub addr: String,
    pub port: u16,
    /// The weight set by configuration or `set server … weight`.
    pub weight: u32,
    /// HAProxy's admin-state bits: 0 is ready; maintenance and drain set bits.
    pub admin_state: u32,
}

/// The servers of the current worker, through its admin socket (the caller holds the apply
/// lock, so no reload of hapctl's replaces the worker meanwhile).
pub struct RuntimeServers {
    socket: CliSocket,
}

impl RuntimeServers {
    pub fn new(socket: CliSocket) -> RuntimeServers {
        RuntimeServers { socket }
    }

    /// Runs `command`; its answer must be one of `ok` (an empty answer when `ok` is empty).
    fn expect(&self, command: &str, ok: &[&str]) -> Result<(), RuntimeError> {
        let answer = self.socket.command(command)?;
        let answer = answer.trim();
        if (ok.is_empty() && answer.is_empty()) || ok.iter().any(|o| answer.starts_with(o)) {
            Ok(())
        } else {
            Err(RuntimeError::Refused {
                command: command.to_string(),
                answer: answer.to_string(),
            })
        }
    }

    /// Adds a server (`options`: configuration keywords, as on its `server` line) and puts it
    /// in service; its health checks start when `check` is on.
    pub fn add(
        &self,
        backend: &str,
        name: &str,
        addr: &str,
        options: &str,
        check: bool,
    ) -> Result<(), RuntimeError> {
        let line = format!("add server {backend}/{name} {addr} {options}");
        self.expect(line.trim_end(), &["New server registered."])?;
        if check {
            self.expect(&format!("enable health {backend}/{name}"), &[])?;
        }
        self.expect(&format!("enable server {backend}/{name}"), &[])
    }

    pub fn set_weight(&self, backend: &str, name: &str, weight: u16) -> Result<(), RuntimeError> {
        self.expect(&format!("set server {backend}/{name} weight {weight}"), &[])
    }

    /// `ip` without brackets, as HAProxy takes it.
    pub fn set_addr(
        &self,
        backend: &str,
        name: &str,
        ip: &str,
        port: u16,
    ) -> Result<(), RuntimeError> {
        self.expect(
            &format!("set server {backend}/{name} addr {ip} port {port}"),
            &["IP changed", "no need to change", "port changed"],
        )
    }

    /// Takes a server out: drain (no new request), wait until its last connection ended (at
    /// most `drain_timeout`), maintenance, delete. Returns false when it still served
    /// connections at the deadline: it is then left draining, which gives it no new request.
    pub fn remove(
        &self,
        backend: &str,
        name: &str,
        drain_timeout: Duration,
    ) -> Result<bool, RuntimeError> {
        self.expect(&format!("set server {backend}/{name} state drain"), &[])?;
        let deadline = Instant::now() + drain_timeout;
        while self.connections(backend, name)? > 0 {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(DRAIN_POLL);
        }
        self.expect(&format!("set server {backend}/{name} state maint"), &[])?;
        self.expect(
            &format!("del server {backend}/{name}"),
            &["Server deleted."],
        )?;
        Ok(true)
    }

    /// Connections the server serves now (`show stat`'s `scur`), of the one backend's
    /// servers (type 4, every id): at 10,000 domains the whole `show stat` is megabytes.
    fn connections(&self, backend: &str, name: &str) -> Result<u64, RuntimeError> {
        let command = format!("show stat {backend} 4 -1");
        let answer = self.socket.command(&command)?;
        let mut lines = answer.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let column = |field: &str| header.iter().position(|h| *h == field);
        let (Some(px), Some(sv), Some(scur)) = (column("pxname"), column("svname"), column("scur"))
        else {
            return Err(RuntimeError::Refused {
                command,
                answer: answer.lines().next().unwrap_or_default().into(),
            });
        };
        Ok(lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| f.get(px) == Some(&backend) && f.get(sv) == Some(&name))
            .and_then(|f| f.get(scur)?.parse().ok())
            .unwrap_or(0))
    }

    /// Every server of `backend` in the worker, by name.
    pub fn state(&self, backend: &str) -> Result<BTreeMap<String, ServerState>, RuntimeError> {
        let rows = self.rows(&format!("show servers state {backend}"))?;
        Ok(rows.into_iter().map(|s| (s.name.clone(), s)).collect())
    }

    /// Every server of every backend in the worker.
    pub fn all(&self) -> Result<Vec<ServerState>, RuntimeError> {
        self.rows("show servers state")
    }

    fn rows(&self, command: &str) -> Result<Vec<ServerState>, RuntimeError> {
        let answer = self.socket.command(command)?;
        parse_servers_state(&answer).ok_or_else(|| RuntimeError::Refused {
            command: command.to_string(),
            answer: answer.trim().lines().last().unwrap_or_default().to_string(),
        })
    }
}

/// Reads `show servers state` (format 1: a version line, a `#` header naming the fields, one
/// line per server); `None` when the answer is not that.
pub fn parse_servers_state(answer: &str) -> Option<Vec<ServerState>> {
    let mut lines = answer.lines().filter(|l| !l.trim().is_empty());
    if lines.next()?.trim() != "1" {
        return None;
    }
    let header: Vec<&str> = lines.next()?.strip_prefix("# ")?.split(' ').collect();
    let column = |field: &str| header.iter().position(|h| *h == field);
    let (backend, name, addr, port, weight, admin) = (
        column("be_name")?,
        column("srv_name")?,
        column("srv_addr")?,
        column("srv_port")?,
        column("srv_uweight")?,
        column("srv_admin_state")?,
    );
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            Some(ServerState {
                backend: f.get(backend)?.to_string(),
                name: f.get(name)?.to_string(),
                addr: f.get(addr)?.to_string(),
                port: f.get(port)?.parse().ok()?,
                weight: f.get(weight)?.parse().ok()?,
                admin_state: f.get(admin)?.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_state_parses_by_field_name() {
        let answer = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n3 be 1 s1 127.0.0.2 2 0 3 10 5 1 0 0 6 0 0 0 - 24000 - 0 0 - - 0\n3 be 2 s2 ::1 2 8 5 5 0 1 0 0 6 0 0 0 - 23998 - 0 0 - - 0\n";
        let s = parse_servers_state(answer).unwrap();
        assert_eq!(
            s[0],
            ServerState {
                backend: "be".into(),
                name: "s1".into(),
                addr: "127.0.0.2".into(),
                port: 24000,
                weight: 3,
                admin_state: 0
            }
        );
        assert_eq!(s[1].addr, "::1");
        assert_eq!(s[1].admin_state, 8);
        assert!(parse_servers_state("Can't find backend.\n").is_none());
        let header = answer.lines().take(2).collect::<Vec<_>>().join("\n");
        assert!(
            parse_servers_state(&header).unwrap().is_empty(),
            "no server"
        );
        assert!(
            parse_servers_state("1\n# be_id be_name\n").is_none(),
            "fields missing"
        );
    }
}
