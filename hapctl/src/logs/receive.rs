//! The receiver's threads. One acceptor takes the workers' connections (one per HAProxy
//! process: during a reload the old and the new worker both send); one reader per connection
//! cuts the stream into whole lines and hands them, in chunks, to the one writer, which owns
//! the rotating file. Only HAProxy's connections are read (`peer.rs`). The channel is bounded:
//! a slow disk slows the readers, the socket buffers fill, and HAProxy keeps the lines in its
//! ring until they can be sent.

use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver as Rx, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::peer::Senders;
use super::{LineTap, ReceiverStats, RotatingFile};

/// Bound on one wait (accept poll, socket read, channel receive): how soon a stop is seen.
const WAIT: Duration = Duration::from_millis(100);
/// Buffered lines reach the file at least this often under a steady stream.
const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// One read from a worker's connection.
const READ_CHUNK: usize = 256 * 1024;
/// Chunks queued between the readers and the writer.
const QUEUE: usize = 64;
/// A "line" longer than this without a newline is cut: HAProxy's lines are far shorter
/// (`render::LOG_LEN`), so it is not HAProxy writing.
const LINE_MAX: usize = 1 << 20;

/// At most one warning per this about refused connections (a local process could retry fast).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Starts the acceptor and the writer; returns their handles (acceptor first).
pub(super) fn start(
    listener: TcpListener,
    senders: Senders,
    (file, tap): (RotatingFile, Option<LineTap>),
    stats: Arc<ReceiverStats>,
    stop: Arc<AtomicBool>,
) -> io::Result<[JoinHandle<()>; 2]> {
    let (tx, rx) = sync_channel(QUEUE);
    let writer_stats = stats.clone();
    let writer = std::thread::Builder::new()
        .name("access-log-write".into())
        .spawn(move || write(rx, file, tap, &writer_stats))?;
    let acceptor = std::thread::Builder::new()
        .name("access-log-accept".into())
        .spawn(move || accept(listener, &senders, tx, &stats, &stop))?;
    Ok([acceptor, writer])
}

fn accept(
    listener: TcpListener,
    senders: &Senders,
    tx: SyncSender<Vec<u8>>,
    stats: &ReceiverStats,
    stop: &Arc<AtomicBool>,
) {
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    let mut warned: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let admitted = stream
                    .local_addr()
                    .map_err(|e| super::peer::Refusal::Table(e.to_string()))
                    .and_then(|local| senders.admit(peer, local));
                if let Err(why) = admitted {
                    let refused = stats.refused.fetch_add(1, Ordering::Relaxed) + 1;
                    if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(
                            "access log: refused a connection from {peer} ({refused} so far): {why}; only HAProxy (users {:?}) may send lines",
                            senders.uids()
                        );
                    }
                    continue;
                }
                stats.connections.fetch_add(1, Ordering::Relaxed);
                let (tx, stop) = (tx.clone(), stop.clone());
                let spawned = std::thread::Builder::new()
                    .name("access-log-read".into())
                    .spawn(move || read(stream, &tx, &stop));
                match spawned {
                    Ok(handle) => readers.push(handle),
                    Err(e) => tracing::error!("access log: cannot start a reader: {e}"),
                }
                readers.retain(|r| !r.is_finished());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(WAIT / 2),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::error!("access log: accepting on the socket failed: {e}");
                std::thread::sleep(WAIT);
            }
        }
    }
    for r in readers {
        let _ = r.join();
    }
}

/// Sends the connection's whole lines to the writer until the worker closes it (it exited)
/// or a stop is asked; a partial last line of a closed connection is kept.
fn read(mut stream: TcpStream, tx: &SyncSender<Vec<u8>>, stop: &AtomicBool) {
    if let Err(e) = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(WAIT)))
    {
        tracing::error!("access log: cannot set up a worker's connection: {e}");
        return;
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];
    // Under steady traffic a read never times out: a stop is also looked at between chunks,
    // and what is already buffered is read for at most one more WAIT.
    let mut stop_at: Option<Instant> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            let at = *stop_at.get_or_insert_with(|| Instant::now() + WAIT);
            if Instant::now() >= at {
                break;
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                pending.extend_from_slice(&buf[..n]);
                let whole = match pending.iter().rposition(|b| *b == b'\n') {
                    Some(i) => i + 1,
                    None if pending.len() > LINE_MAX => pending.len(),
                    None => continue,
                };
                let rest = pending.split_off(whole);
                if tx.send(std::mem::replace(&mut pending, rest)).is_err() {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!("access log: a worker's connection failed: {e}");
                break;
            }
        }
    }
    if !pending.is_empty() {
        let _ = tx.send(pending);
    }
    if stop.load(Ordering::SeqCst) {
        reset(&stream);
    }
}

/// Makes the close a reset. HAProxy 3.0 does not read its log connection: after a plain close
/// (FIN) its next write still succeeds, into nothing, and only the one after fails; after a
/// reset the next write fails at once. Measured: 2 lines lost at a daemon restart with FIN, 1
/// with a reset (HAProxy 2.6 notices either and loses none).
fn reset(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket, and a pointer to a `linger` of the size given.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Writes what the readers send until every sender is gone, then flushes.
fn write(rx: Rx<Vec<u8>>, mut file: RotatingFile, tap: Option<LineTap>, stats: &ReceiverStats) {
    let mut dirty = false;
    let mut last_flush = Instant::now();
    let mut failing = false;
    loop {
        let result = match rx.recv_timeout(WAIT) {
            Ok(chunk) => {
                if let Some(tap) = &tap {
                    tap(&chunk);
                }
                let written = write_chunk(&chunk, &mut file, stats);
                dirty = true;
                if last_flush.elapsed() >= FLUSH_EVERY {
                    last_flush = Instant::now();
                    dirty = false;
                    written.and_then(|()| file.flush())
                } else {
                    written
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                last_flush = Instant::now();
                if std::mem::take(&mut dirty) {
                    file.flush()
                } else {
                    Ok(())
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match result {
            Ok(()) => failing = false,
            Err(e) => {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                if !failing {
                    tracing::error!(
                        "access log: cannot write: {e}; lines are lost until it works again"
                    );
                }
                failing = true;
            }
        }
    }
    let _ = file.flush();
}

/// Writes the chunk's access lines; HAProxy's own notices (a proxy stopped at a reload, a
/// server went down) share the stream and go to the daemon's log instead.
fn write_chunk(chunk: &[u8], file: &mut RotatingFile, stats: &ReceiverStats) -> io::Result<()> {
    for line in chunk.split(|b| *b == b'\n') {
        let line = trim_line(line);
        if line.is_empty() {
            continue;
        }
        if !line.starts_with(b"{") {
            stats.notices.fetch_add(1, Ordering::Relaxed);
            tracing::info!("haproxy: {}", String::from_utf8_lossy(line));
            continue;
        }
        file.write_line(line)?;
        stats.lines.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes
            .fetch_add(line.len() as u64 + 1, Ordering::Relaxed);
        stats.rotations.store(file.rotations, Ordering::Relaxed);
    }
    Ok(())
}

/// The line without a trailing carriage return or NUL.
fn trim_line(data: &[u8]) -> &[u8] {
    let end = data
        .iter()
        .rposition(|b| !matches!(b, b'\r' | 0))
        .map_or(0, |i| i + 1);
    &data[..end]
}
