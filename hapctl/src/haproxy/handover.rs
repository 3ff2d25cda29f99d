//! Whether the kernel keeps the connections a reload's old listener still queues.
//!
//! When HAProxy's new master cannot get the listening sockets from the old worker within its
//! hard-coded 1 s, it binds new ones beside them (`SO_REUSEPORT`); the old worker's socket
//! then closes with connections in its accept queue, and the kernel resets them unless
//! `net.ipv4.tcp_migrate_req` is 1 (Linux ≥ 5.14, per network namespace), which moves them to
//! the new socket (BENCHMARKS.md, "Connection resets during a reload"). The Debian package
//! sets it (`/usr/lib/sysctl.d/60-hapctl.conf`); `hapctl status` warns when it is off.

use std::path::Path;

/// The sysctl's file in this network namespace.
const SYSCTL: &str = "/proc/sys/net/ipv4/tcp_migrate_req";

/// `net.ipv4.tcp_migrate_req` as read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrateReq {
    On,
    Off,
    /// The kernel has no such setting (before 5.14) or it cannot be read.
    Unknown,
}

impl MigrateReq {
    pub fn read() -> MigrateReq {
        MigrateReq::parse(std::fs::read_to_string(Path::new(SYSCTL)).ok().as_deref())
    }

    fn parse(text: Option<&str>) -> MigrateReq {
        match text.map(str::trim) {
            Some("1") => MigrateReq::On,
            Some("0") => MigrateReq::Off,
            _ => MigrateReq::Unknown,
        }
    }

    /// What `hapctl status` says when connections may be reset, `None` when they are kept.
    pub fn warning(self) -> Option<&'static str> {
        match self {
            MigrateReq::On => None,
            MigrateReq::Off => Some(
                "net.ipv4.tcp_migrate_req is 0: a reload whose listener handover times out resets the connections still queued; set it to 1 (sysctl -w net.ipv4.tcp_migrate_req=1; the Debian package ships /usr/lib/sysctl.d/60-hapctl.conf)",
            ),
            MigrateReq::Unknown => Some(
                "net.ipv4.tcp_migrate_req cannot be read (Linux before 5.14?): a reload whose listener handover times out may reset queued connections",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sysctl_reads_as_on_off_or_unknown_and_only_on_is_quiet() {
        assert_eq!(MigrateReq::parse(Some("1\n")), MigrateReq::On);
        assert_eq!(MigrateReq::parse(Some("0\n")), MigrateReq::Off);
        assert_eq!(MigrateReq::parse(None), MigrateReq::Unknown);
        assert_eq!(MigrateReq::parse(Some("garbage")), MigrateReq::Unknown);
        assert!(MigrateReq::On.warning().is_none());
        assert!(MigrateReq::Off.warning().unwrap().contains("set it to 1"));
        assert!(MigrateReq::Unknown.warning().is_some());
    }
}
