//! `demo-app`: a tiny versioned HTTP/1.1 application used to test
//! zero-downtime deliveries behind HAProxy, served by axum on hyper.
//!
//! See `README.md` next to `Cargo.toml` for the CLI and the routes.

mod app;
mod args;
mod limits;
mod log;
mod refusal;
mod routes;
mod server;
mod stream;
mod write_timeout;

use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use axum::http::HeaderValue;

use app::App;
use args::Command;

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
    let listener = match TcpListener::bind(addr).and_then(|l| {
        l.set_nonblocking(true)?;
        Ok(l)
    }) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("demo-app: cannot listen on {addr}: {e}");
            return ExitCode::from(1);
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    let app = Arc::new(App {
        x_version: HeaderValue::from_str(&config.version).expect("a checked --version"),
        version: config.version.as_str().into(),
        ready_path: config.ready_path.clone(),
        ready_at: started + config.ready_delay,
    });
    log::line(
        &app.version,
        format_args!(
            "listening on {local}, ready on {} after {} ms, max {} connections",
            config.ready_path,
            config.ready_delay.as_millis(),
            config.max_connections
        ),
    );
    // One thread: the app only waits (on sockets and timers), and tests run
    // many instances at once.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("demo-app: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let limits = server::Limits {
        max_connections: config.max_connections,
        idle_timeout: config.idle_timeout,
    };
    runtime.block_on(async {
        match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => {
                server::serve(listener, app, limits).await;
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("demo-app: cannot listen on {addr}: {e}");
                ExitCode::from(1)
            }
        }
    })
}
