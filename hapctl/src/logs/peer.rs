//! Who sent an access-log connection. The listener is loopback TCP, which has no
//! `SO_PEERCRED`, but both ends are sockets of this host: the kernel's connection table
//! (`/proc/net/tcp`, `/proc/net/tcp6`) names the user owning the connecting one. Only HAProxy
//! (root, this daemon's user or the workers' user) may write the access log; any other local
//! user would be forging lines.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The users whose connections are read.
#[derive(Debug, Clone)]
pub(super) struct Senders {
    uids: Vec<u32>,
}

/// Why a connection was not read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Its socket belongs to another user.
    User(u32),
    /// Its socket is not in the table, or was closed by its process already (the kernel shows
    /// such a socket as root, with inode 0, so its owner is unknown).
    Unknown,
    /// The table could not be read.
    Table(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::User(uid) => write!(f, "it comes from user {uid}"),
            Refusal::Unknown => write!(f, "its sender had closed it already"),
            Refusal::Table(e) => write!(f, "its sender is unknown: {e}"),
        }
    }
}

impl Senders {
    /// Root, this process's user and, when they drop to one, HAProxy's workers' user.
    pub(super) fn haproxy(worker_uid: Option<u32>) -> Senders {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let mut uids = vec![0, me];
        uids.extend(worker_uid);
        uids.sort_unstable();
        uids.dedup();
        Senders { uids }
    }

    pub(super) fn uids(&self) -> &[u32] {
        &self.uids
    }

    /// Whether the connection from `peer` to our `local` address may write the access log.
    pub(super) fn admit(&self, peer: SocketAddr, local: SocketAddr) -> Result<(), Refusal> {
        let table = if peer.is_ipv4() {
            "/proc/net/tcp"
        } else {
            "/proc/net/tcp6"
        };
        let text =
            std::fs::read_to_string(table).map_err(|e| Refusal::Table(format!("{table}: {e}")))?;
        let uid = owner(&text, peer, local).ok_or(Refusal::Unknown)?;
        if self.uids.contains(&uid) {
            Ok(())
        } else {
            Err(Refusal::User(uid))
        }
    }
}

/// The owner of the open socket whose local address is `peer` and remote address `local`, in
/// a `/proc/net/tcp{,6}` table (lines of `sl local remote st queues timer retransmits uid
/// timeout inode …`).
fn owner(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 10
            || parse_addr(fields[1])? != peer
            || parse_addr(fields[2])? != local
            || fields[9] == "0"
        {
            return None;
        }
        fields[7].parse().ok()
    })
}

/// `0100007F:1F90`: the address as the kernel prints it (each 32-bit word of the network-order
/// address as a host-order hex number), a colon, the port in hex.
fn parse_addr(hex: &str) -> Option<SocketAddr> {
    let (addr, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = addr.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(w, 16).ok()?.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                chunk.copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    fn hex4(ip: Ipv4Addr) -> String {
        format!("{:08X}", u32::from_ne_bytes(ip.octets()))
    }

    #[test]
    fn the_owner_is_the_open_socket_from_the_peer_to_us() {
        let us: SocketAddr = "127.0.0.1:9514".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let u = hex4(Ipv4Addr::LOCALHOST);
        let p = &u;
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
        let row = |local: &str, remote: &str, uid: u32, inode: u32| {
            format!("   1: {local} {remote} 01 00000000:00000000 00:00000000 00000000 {uid:>5}        0 {inode} 1 0 20 4 30 10 -1")
        };
        let listening = row(&format!("{u}:252A"), "00000000:0000", 0, 100);
        // Our accepted end (owned by us) and the peer's end (owned by 108).
        let accepted = row(&format!("{u}:252A"), &format!("{p}:9C40"), 0, 101);
        let sender = row(&format!("{p}:9C40"), &format!("{u}:252A"), 108, 102);
        let table = [header, &listening, &accepted, &sender].join("\n");
        assert_eq!(owner(&table, peer, us), Some(108));
        // Another peer port, or a closed sender (inode 0, shown as root): unknown.
        assert_eq!(owner(&table, "127.0.0.1:40001".parse().unwrap(), us), None);
        let orphan = row(&format!("{p}:9C40"), &format!("{u}:252A"), 0, 0);
        assert_eq!(owner(&[header, &orphan].join("\n"), peer, us), None);
        assert_eq!(owner("garbage\n1: zz yy", peer, us), None);
    }

    #[test]
    fn addresses_read_as_the_kernel_prints_them() {
        let v4 = format!("{}:1F90", hex4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(parse_addr(&v4), Some("127.0.0.2:8080".parse().unwrap()));
        let one = u32::from_ne_bytes([0, 0, 0, 1]);
        let v6 = format!("{:08X}{:08X}{:08X}{one:08X}:0050", 0, 0, 0);
        assert_eq!(parse_addr(&v6), Some("[::1]:80".parse().unwrap()));
        for bad in ["", "0100007F", "0100007F:", "0100007:0050", "XX00007F:0050"] {
            assert_eq!(parse_addr(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_real_connection_is_owned_by_this_process_user() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, peer) = listener.accept().unwrap();
        let local = stream.local_addr().unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let only_me = Senders { uids: vec![me] };
        assert_eq!(only_me.admit(peer, local), Ok(()));
        let other = Senders {
            uids: vec![me.wrapping_add(1)],
        };
        assert_eq!(other.admit(peer, local), Err(Refusal::User(me)));
    }
}
