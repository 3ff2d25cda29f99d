//! The integration tests, one binary: each module tests one capability of the edge (or one
//! hazard: `crash`, `hostile_input`, `properties`) against the real `hapctl` binary, a real
//! HAProxy and real processes. One binary links the workspace once instead of once per suite;
//! nextest still runs every test in its own process. The systemd lab, which boots containers,
//! is its own binary (`tests/systemd_lab.rs`). The harness is the `testkit` crate.

mod access;
mod alerts;
mod apply;
mod blocks;
mod certs;
mod cli;
mod compat;
mod crash;
mod daemon;
mod dashboard;
mod deliveries;
mod domains;
mod fleet;
mod hostile_input;
mod http3;
mod import_legacy;
mod logs;
mod privileges;
mod properties;
mod protections;
mod prove;
mod supervision;
mod traffic;
mod waf;
