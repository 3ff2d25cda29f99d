//! hapctl: a control plane for an HAProxy edge.
//!
//! Data flows one way: `cli` → `edge` (services) → `apply` → `haproxy`.
//! `model` and `render` are pure; see `ARCHITECTURE.md` for the map.

pub mod access;
pub mod alerts;
pub mod apply;
pub mod blocks;
pub mod clock;
pub mod contract;
pub mod daemon;
pub mod deliver;
pub mod edge;
pub mod fault;
pub mod fleet;
pub mod fsutil;
pub mod haproxy;
pub mod http;
pub mod legacy;
pub mod locks;
pub mod logs;
pub mod model;
pub mod process;
pub mod protect;
pub mod prove;
pub mod quic;
pub mod render;
pub mod resolve;
pub mod settings;
pub mod store;
pub mod tls;
pub mod traffic;
pub mod waf;

// The test kit's TLS corpus, which the unit tests compile in (`tls::corpus`), names this crate
// `hapctl` as the kit does.
#[cfg(test)]
extern crate self as hapctl;

/// Entry points for the fuzz targets in `fuzz/` (built with `--cfg fuzzing` by cargo-fuzz):
/// every parser of text that comes from outside.
#[cfg(fuzzing)]
pub mod fuzzing {
    pub use crate::haproxy::messages::alerts_and_warnings as haproxy_messages;
    pub use crate::haproxy::runtime::parse_lookup;
    pub use crate::haproxy::validator::invalid_messages as check_output;
    pub use crate::tls::bundle::{parse_bundle, BundleCheck};
}
