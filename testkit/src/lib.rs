//! What hapctl's tests and benchmarks run against: a real edge (the hapctl binary and a real
//! haproxy) in a temp dir on free loopback ports, real backends, and a plain HTTP client.
//! Everything started here is stopped on drop, also when a test panics.
//!
//! The tests' hapctl binary is the one cargo built beside the test binary ([`hapctl_bin`]),
//! so their [`Edge`]s run from the test targets of the `hapctl` package (which cargo builds
//! the binary for); bench names its release build in an [`EdgeSetup`]. The helpers panic, as
//! tests want; each has a `try_` twin returning the error, for bench.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

mod backend;
mod client;
mod demo;
mod edge;
mod haproxy;
mod ports;
mod rt;

pub mod app;
pub mod daemon;
pub mod etcd;
pub mod fleet;
pub mod h2;
pub mod h3;
pub mod http;
pub mod pages;
pub mod pebble;
pub mod pki;
pub mod seed;
pub mod smtp;
pub mod tls_corpus;

pub use backend::{Backend, Recorded};
pub use client::{connect_source, http_get, http_send, try_http_get, Response};
pub use demo::{demo_app_edge, generation_pids, DemoApp, DemoEdge, GenerationsGuard, Stream};
pub use edge::{print_tail, Edge, EdgeSetup};
pub use haproxy::{
    check_runs, counting_haproxy, haproxy_bin, haproxy_version, quic_haproxy_bin, refusing_haproxy,
};
pub use ports::{free_port, free_port_in};
pub use rt::Answer;

pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command (stdin closed, output captured) and panics if it takes longer than `timeout`
/// (it is killed then): hapctl's own bounded run, for tests.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Output {
    hapctl::process::run_with_timeout(&mut cmd, timeout)
        .unwrap_or_else(|e| panic!("command {cmd:?}: {e}"))
}

/// The hapctl binary cargo built for the running test: beside `deps/`, where the test binary
/// itself lives (`target/<profile>/deps/<test>-<hash>`).
pub fn hapctl_bin() -> PathBuf {
    built_bin("hapctl", "cargo build -p hapctl")
}

/// The demo application, built with the workspace (`cargo build --workspace` builds it; the
/// test scripts do).
pub fn demo_app_bin() -> PathBuf {
    built_bin("demo-app", "cargo build -p demo-app")
}

/// `name` in the profile directory of the running test binary, which must exist.
fn built_bin(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary in target/<profile>/deps");
    let bin = profile_dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: run `{build}` (scripts/test.sh does)",
        bin.display()
    );
    bin
}
