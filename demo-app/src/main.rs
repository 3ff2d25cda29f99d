//! `demo-app`: a tiny versioned HTTP/1.1 application used to test
//! zero-downtime deliveries behind HAProxy. Standard library only.
//!
//! See `README.md` next to `Cargo.toml` for the CLI and the routes.

mod args;
mod http;
mod routes;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use args::{Command, Config};
use routes::App;

/// Writes one log line to stderr, ignoring failures (a closed stderr must
/// not take the server down).
fn log_line(version: &str, msg: std::fmt::Arguments) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let line = format!(
        "{}.{:03} demo-app[{version}] {msg}\n",
        now.as_secs(),
        now.subsec_millis()
    );
    let _ = io::stderr().lock().write_all(line.as_bytes());
}

/// One line per request: peer, method, target, status, note, duration.
pub fn log_request(
    version: &str,
    peer: SocketAddr,
    method: &str,
    target: &str,
    status: u16,
    note: &str,
    started: Instant,
) {
    let ms = started.elapsed().as_millis();
    let sep = if note.is_empty() { "" } else { " " };
    log_line(
        version,
        format_args!("{peer} {method} {target} {status}{sep}{note} {ms}ms"),
    );
}

/// Decrements the active connection count when a connection ends.
struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Refuses a connection over the limit from the accept loop, without
/// blocking it: whatever the client already sent is drained, a 503 is
/// written with a short timeout, and the connection is closed.
fn reject(stream: TcpStream, peer: SocketAddr, version: &str) {
    let started = Instant::now();
    if stream.set_nonblocking(true).is_ok() {
        let mut buf = [0u8; 8192];
        let _ = (&stream).read(&mut buf);
        let _ = stream.set_nonblocking(false);
    }
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let f = http::Framing {
        x_version: version,
        keep_alive: false,
        head_only: false,
        http10: false,
    };
    let mut out = &stream;
    let _ = http::write_fixed(&mut out, &f, 503, &[], b"too many connections\n");
    let _ = stream.shutdown(Shutdown::Write);
    log_request(
        version,
        peer,
        "-",
        "-",
        503,
        "too many connections",
        started,
    );
}

fn serve(listener: TcpListener, app: Arc<App>, config: &Config) -> ! {
    let active = Arc::new(AtomicUsize::new(0));
    let timeouts = http::Timeouts {
        idle: config.idle_timeout,
    };
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                log_line(&app.version, format_args!("accept failed: {e}"));
                // Out of descriptors or similar: do not spin.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if active.load(Ordering::SeqCst) >= config.max_connections {
            reject(stream, peer, &app.version);
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let guard = ActiveGuard(Arc::clone(&active));
        let conn_app = Arc::clone(&app);
        let spawned = std::thread::Builder::new()
            .name("conn".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let _guard = guard;
                http::serve_connection(stream, peer, &conn_app, timeouts);
            });
        if let Err(e) = spawned {
            // The closure, and with it the stream and the guard, is dropped.
            log_line(
                &app.version,
                format_args!("cannot start a thread for {peer}: {e}"),
            );
        }
    }
}

fn main() -> ExitCode {
    let config = match args::parse_args(std::env::args_os().skip(1)) {
        Ok(Command::Run(c)) => c,
        Ok(Command::Help) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("demo-app: {msg}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let addr = SocketAddr::new(config.bind, config.port);
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("demo-app: cannot listen on {addr}: {e}");
            return ExitCode::from(1);
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    let app = Arc::new(App {
        version: config.version.clone(),
        ready_path: config.ready_path.clone(),
        ready_at: started + config.ready_delay,
    });
    log_line(
        &app.version,
        format_args!(
            "listening on {local}, ready on {} after {} ms, max {} connections",
            config.ready_path,
            config.ready_delay.as_millis(),
            config.max_connections
        ),
    );
    serve(listener, app, &config)
}
