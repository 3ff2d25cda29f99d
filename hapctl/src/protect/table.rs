//! `show table` parsed by field name (pure), on 2.6 and 3.x (3.x adds `shard=`).

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The counters the table stores, in the order they are reported.
pub const COUNTERS: [&str; 4] = ["conn_cur", "conn_rate", "http_req_rate", "http_err_rate"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("the answer to `show table` is not a table dump (it starts with {0:?})")]
    NotADump(String),
    #[error("the table dump has no {field} in line {line:?}")]
    Missing { field: &'static str, line: String },
    #[error("the table dump's {field} is {value:?}, not a number")]
    NotANumber { field: String, value: String },
}

/// One tracked client with its counters named.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClientRow {
    /// The client (IPv4 clients are stored IPv4-mapped and shown as IPv4).
    pub ip: IpAddr,
    pub conn_cur: u64,
    pub conn_rate: u64,
    pub http_req_rate: u64,
    pub http_err_rate: u64,
}

impl ClientRow {
    /// Sort key, highest first: (http_req_rate, http_err_rate, conn_rate, conn_cur).
    pub fn rank(&self) -> (u64, u64, u64, u64) {
        (
            self.http_req_rate,
            self.http_err_rate,
            self.conn_rate,
            self.conn_cur,
        )
    }

    pub fn is_active(&self) -> bool {
        self.rank() != (0, 0, 0, 0)
    }
}

/// A whole `show table` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDump {
    pub table: String,
    pub size: u64,
    pub used: u64,
    /// Each rate counter's window in milliseconds, as the rows report it.
    pub windows_ms: BTreeMap<String, u64>,
    pub rows: Vec<ClientRow>,
}

fn number(field: &str, value: &str) -> Result<u64, TableError> {
    value.parse().map_err(|_| TableError::NotANumber {
        field: field.to_string(),
        value: crate::model::bounded(value),
    })
}

/// `# table: NAME, type: ipv6, size:204800, used:5` then one line per entry.
pub fn parse(answer: &str) -> Result<TableDump, TableError> {
    let mut lines = answer.lines();
    let head = lines.next().unwrap_or_default();
    let Some(rest) = head.strip_prefix("# table: ") else {
        return Err(TableError::NotADump(crate::model::bounded(head)));
    };
    let mut header: BTreeMap<&str, &str> = BTreeMap::new();
    let mut parts = rest.split(',');
    let table = parts.next().unwrap_or_default().trim().to_string();
    for part in parts {
        if let Some((k, v)) = part.split_once(':') {
            header.insert(k.trim(), v.trim());
        }
    }
    let field = |name: &'static str| {
        header
            .get(name)
            .copied()
            .ok_or_else(|| TableError::Missing {
                field: name,
                line: crate::model::bounded(head),
            })
    };
    let size = number("size", field("size")?)?;
    let used = number("used", field("used")?)?;
    let mut windows_ms = BTreeMap::new();
    let mut rows = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let mut values: BTreeMap<&str, &str> = BTreeMap::new();
        for token in line.split_whitespace().skip(1) {
            let Some((name, value)) = token.split_once('=') else {
                continue;
            };
            let name = match name.split_once('(') {
                Some((base, period)) => {
                    let period = period.trim_end_matches(')');
                    windows_ms.insert(base.to_string(), number(base, period)?);
                    base
                }
                None => name,
            };
            values.insert(name, value);
        }
        let get = |name: &'static str| {
            values
                .get(name)
                .copied()
                .ok_or_else(|| TableError::Missing {
                    field: name,
                    line: crate::model::bounded(line),
                })
        };
        let key = get("key")?;
        let ip: IpAddr = key.parse().map_err(|_| TableError::NotANumber {
            field: "key".to_string(),
            value: crate::model::bounded(key),
        })?;
        let counter = |name: &'static str| get(name).and_then(|v| number(name, v));
        rows.push(ClientRow {
            ip: unmapped(ip),
            conn_cur: counter("conn_cur")?,
            conn_rate: counter("conn_rate")?,
            http_req_rate: counter("http_req_rate")?,
            http_err_rate: counter("http_err_rate")?,
        });
    }
    Ok(TableDump {
        table,
        size,
        used,
        windows_ms,
        rows,
    })
}

/// `::ffff:a.b.c.d` → `a.b.c.d`.
pub fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The key a client has in the table (IPv4 as IPv4-mapped IPv6).
pub fn table_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_string(),
        IpAddr::V6(v6) => v6.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP_26: &str = "# table: st_clients, type: ipv6, size:204800, used:2\n\
0x55676a2a5e68: key=::ffff:10.7.1.1 use=0 exp=599992 conn_rate(10000)=3 conn_cur=0 http_req_rate(10000)=3 http_err_rate(30000)=1\n\
0x7f60ec04abc8: key=2001:db8::7 use=1 exp=599853 shard=0 conn_rate(10000)=1 conn_cur=1 http_req_rate(10000)=1 http_err_rate(30000)=0\n\n";

    #[test]
    fn parses_by_field_name() {
        let dump = parse(DUMP_26).unwrap();
        assert_eq!(
            (dump.table.as_str(), dump.size, dump.used),
            ("st_clients", 204800, 2)
        );
        assert_eq!(dump.windows_ms["http_err_rate"], 30000);
        assert_eq!(dump.rows[0].ip.to_string(), "10.7.1.1");
        assert_eq!(dump.rows[0].http_err_rate, 1);
        assert_eq!(dump.rows[1].ip.to_string(), "2001:db8::7");
        assert_eq!(dump.rows[1].conn_cur, 1);
    }

    #[test]
    fn refuses_what_is_not_a_dump() {
        assert!(matches!(
            parse("Unknown command\n"),
            Err(TableError::NotADump(_))
        ));
        let no_counter = "# table: t, type: ipv6, size:1, used:1\n0x1: key=::1 use=0 exp=1\n";
        assert!(matches!(parse(no_counter), Err(TableError::Missing { .. })));
        let bad = "# table: t, type: ipv6, size:1, used:1\n0x1: key=::1 conn_cur=x conn_rate(1)=1 http_req_rate(1)=1 http_err_rate(1)=1\n";
        assert!(matches!(parse(bad), Err(TableError::NotANumber { .. })));
    }

    #[test]
    fn keys_are_ipv4_mapped() {
        assert_eq!(table_key("127.0.0.2".parse().unwrap()), "::ffff:127.0.0.2");
        assert_eq!(table_key("2001:db8::7".parse().unwrap()), "2001:db8::7");
    }
}
