//! The access log's target line and the pages HAProxy fills in (`lf-file`).

use crate::settings::{LogSettings, LogTarget, DEV_LOG};

/// Longest log datagram. Every client-controlled field of the log format is cut before it is
/// escaped (`json` writes at most 6 bytes per input byte): host 256, URI 1024 (HAProxy's
/// `tune.http.logurilen`), user agent 256, SNI 256, so a line stays whole below this.
pub const LOG_LEN: u32 = 16384;

/// What a page template writes for the request id: `{{ request_id }}`. Plain letters, so the
/// HTML auto-escaping leaves it alone; replaced by `%[unique-id]` after the `%` of the page
/// were escaped.
pub(super) const REQUEST_ID_MARK: &str = "HAPCTLREQUESTIDMARK";

/// The ring the `file` target logs to (`crate::logs` explains why a ring).
pub const LOG_RING: &str = "hapctl_access";

/// The `ring` section of the `file` target.
#[derive(Debug, serde::Serialize)]
pub(super) struct Ring {
    name: &'static str,
    maxlen: u32,
    size: u64,
    /// `ipv4@IP:PORT` or `ipv6@IP:PORT`: HAProxy reads the last colon as the port's.
    server: String,
}

pub(super) fn ring(logs: &LogSettings) -> Option<Ring> {
    (logs.target == LogTarget::File).then(|| Ring {
        name: LOG_RING,
        maxlen: LOG_LEN,
        size: logs.buffer,
        server: match logs.listen {
            std::net::SocketAddr::V4(a) => format!("ipv4@{}:{}", a.ip(), a.port()),
            std::net::SocketAddr::V6(a) => format!("ipv6@{}:{}", a.ip(), a.port()),
        },
    })
}

/// The `log` line of `global` (address, length, format, facility).
pub(super) fn log_line(logs: &LogSettings) -> String {
    let (address, format) = match &logs.target {
        LogTarget::File => (format!("ring@{LOG_RING}"), "raw"),
        LogTarget::Syslog { host, port } => (format!("{host}:{port}"), "rfc5424"),
        LogTarget::Journald => (DEV_LOG.to_string(), "rfc3164"),
    };
    format!("{address} len {LOG_LEN} format {format} local0 info")
}

/// A rendered page as HAProxy's `lf-file` reads it: a log-format string, where `%` starts a
/// variable. Every `%` of the page is doubled (a theme's `width:100%` stays text) and the
/// request-id mark becomes `%[unique-id]`. The id is hapctl's own `uuid()` (hex digits and
/// dashes), so it needs no HTML escaping wherever a template puts it.
pub(super) fn lf_page(text: &str) -> String {
    text.replace('%', "%%")
        .replace(REQUEST_ID_MARK, "%[unique-id]")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn pages_escape_percent_and_fill_the_id() {
        let page = format!("<p style=\"width:100%\">id {REQUEST_ID_MARK}</p>");
        assert_eq!(
            lf_page(&page),
            "<p style=\"width:100%%\">id %[unique-id]</p>"
        );
    }

    #[test]
    fn each_target_has_its_log_line() {
        let mut logs = LogSettings {
            target: LogTarget::File,
            listen: "127.0.0.1:601".parse().unwrap(),
            file: PathBuf::from("/srv/logs/access.log"),
            max_size: 1 << 20,
            keep: 2,
            buffer: 1 << 20,
        };
        assert_eq!(
            log_line(&logs),
            "ring@hapctl_access len 16384 format raw local0 info"
        );
        assert_eq!(ring(&logs).unwrap().server, "ipv4@127.0.0.1:601");
        logs.listen = "[::1]:7000".parse().unwrap();
        assert_eq!(ring(&logs).unwrap().server, "ipv6@::1:7000");
        logs.target = LogTarget::Syslog {
            host: "10.0.0.5".into(),
            port: 514,
        };
        assert_eq!(
            log_line(&logs),
            "10.0.0.5:514 len 16384 format rfc5424 local0 info"
        );
        logs.target = LogTarget::Journald;
        assert!(log_line(&logs).starts_with("/dev/log "));
    }
}
