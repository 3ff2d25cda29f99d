//! HAProxy's own counters per backend: `show stat` over the admin socket (bounded in time),
//! parsed by the names of its header line, so a version that adds columns reads the same.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::report::{BackendStat, StatusClasses};
use crate::haproxy::{CliSocket, SocketError};

/// Backends (type 2) and servers (type 4) of every proxy.
const COMMAND: &str = "show stat -1 6 -1";

/// Every backend's counters, by name.
pub fn read_backends(
    admin_socket: &Path,
    timeout: Duration,
) -> Result<Vec<BackendStat>, SocketError> {
    let text = CliSocket::new(admin_socket, timeout).command(COMMAND)?;
    Ok(parse(&text))
}

/// The backends of a `show stat` answer, their servers counted in; unreadable rows skipped.
pub fn parse(text: &str) -> Vec<BackendStat> {
    let mut lines = text.lines();
    let Some(header) = lines.next().and_then(|h| h.strip_prefix("# ")) else {
        return Vec::new();
    };
    let names: Vec<&str> = header.split(',').collect();
    let col = |row: &[&str], name: &str| -> String {
        names
            .iter()
            .position(|n| *n == name)
            .and_then(|i| row.get(i))
            .map_or_else(String::new, |v| v.to_string())
    };
    let num = |row: &[&str], name: &str| col(row, name).parse::<u64>().unwrap_or(0);
    let mut servers: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    let mut backends = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let row: Vec<&str> = line.split(',').collect();
        let proxy = col(&row, "pxname");
        match col(&row, "type").as_str() {
            "1" => backends.push(BackendStat {
                backend: proxy,
                status: col(&row, "status"),
                sessions_now: num(&row, "scur"),
                requests_total: num(&row, "req_tot"),
                status_total: StatusClasses {
                    none: num(&row, "hrsp_other"),
                    s1xx: num(&row, "hrsp_1xx"),
                    s2xx: num(&row, "hrsp_2xx"),
                    s3xx: num(&row, "hrsp_3xx"),
                    s4xx: num(&row, "hrsp_4xx"),
                    s5xx: num(&row, "hrsp_5xx"),
                },
                bytes_in: num(&row, "bin"),
                bytes_out: num(&row, "bout"),
                servers_up: 0,
                servers: 0,
            }),
            "2" => {
                let s = servers.entry(proxy).or_default();
                s.1 += 1;
                s.0 += u32::from(col(&row, "status").starts_with("UP"));
            }
            _ => {}
        }
    }
    for b in &mut backends {
        if let Some((up, all)) = servers.get(&b.backend) {
            (b.servers_up, b.servers) = (*up, *all);
        }
    }
    backends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_with_their_servers() {
        let text = "# pxname,svname,scur,bin,bout,status,type,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,req_tot,\n\
            be_shop,s1,0,10,20,UP,2,0,3,0,0,1,0,,\n\
            be_shop,s2,0,10,20,DOWN,2,0,0,0,0,0,0,,\n\
            be_shop,BACKEND,1,100,200,UP,1,0,3,0,0,1,0,4,\n\n";
        let b = parse(text);
        assert_eq!(b.len(), 1);
        let shop = &b[0];
        assert_eq!(
            (
                shop.backend.as_str(),
                shop.requests_total,
                shop.status_total.s5xx
            ),
            ("be_shop", 4, 1)
        );
        assert_eq!((shop.servers_up, shop.servers, shop.bytes_out), (1, 2, 200));
        assert!(parse("Unknown command").is_empty());
    }
}
