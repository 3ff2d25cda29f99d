//! Free loopback ports. Also compiled into hapctl's own unit tests (`haproxy/testutil.rs`),
//! which cannot use the kit: std only.

use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    free_port_in(20_000, 12_000)
}

/// A port nothing listens on right now, in `first..first + count`: a range of its own keeps a
/// kind of listener (HAProxy's peers) off the ports other tests probe. HAProxy binds with
/// SO_REUSEPORT, so two of them on one port would share its connections.
pub fn free_port_in(first: u16, count: u16) -> u16 {
    // Below Linux's ephemeral range (32768-60999): a port the kernel hands out for bind(0) is
    // also what it gives outgoing connections, and one of those (a client, HAProxy to a backend)
    // took such a port between this probe and HAProxy's bind once in CI.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(7919)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for _ in 0..200 {
        let n = seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(104_729));
        let port = first + (n % u32::from(count)) as u16;
        if reserve(port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port found in {first}-{}", first + count - 1);
}

/// Holds the port for this process's lifetime with a lock file, so that no other test process
/// picks it between this probe and the bind of whatever it is for: two tests' HAProxys once got
/// the same port that way and, binding with SO_REUSEPORT, shared its connections in CI.
/// The kernel drops the lock when the process ends, however it ends.
fn reserve(port: u16) -> bool {
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    let dir = lock_dir();
    let Ok(file) = File::create(dir.join(format!("{port}.lock"))) else {
        return false;
    };
    if file.try_lock().is_err() {
        return false;
    }
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(file);
    true
}

fn lock_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("hapctl-test-ports");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot make the port lock folder {}: {e}", dir.display());
    }
    dir
}
