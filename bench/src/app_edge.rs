//! An edge with one delivered application, the kit's [`DemoEdge`]: app `shop` (exec runner
//! around the release demo-app, ready delay 0), backend `applicatif`, server `courante`,
//! routed from one host, first version delivered. Dropping it kills every generation it
//! started, then the edge stops HAProxy.

use std::path::Path;

use testkit::{DemoApp, DemoEdge};

use crate::harness::new_edge;

/// The Host routed to the app.
pub const HOST: &str = "shop.example.com";
pub const APP: &str = "shop";

/// The bench's edge ([`new_edge`]) with the app's settings, `haproxy start`, `domain add HOST
/// --app shop`, `deliver first`, and a wait until the edge serves it.
pub fn start(hapctl: &Path, demo_app: &Path, first: &str) -> anyhow::Result<DemoEdge> {
    let app = DemoApp {
        bin: demo_app.to_path_buf(),
        host: HOST,
        first,
        readiness_timeout: "10s",
        ports: 40,
        never_ready: "*never*",
    };
    DemoEdge::try_start(new_edge(hapctl)?, &app)
}

/// What the deliveries' benchmarks read of the app's edge.
pub trait Delivered {
    /// The version the edge serves for HOST now (body of `GET /`, trimmed), if it answers 200.
    fn served(&self) -> Option<String>;
    /// The log of a version's process (for error messages).
    fn generation_log(&self, version: &str) -> String;
}

impl Delivered for DemoEdge {
    fn served(&self) -> Option<String> {
        match self.try_get(HOST, "/") {
            Ok(r) if r.status == 200 => Some(r.body.trim_end().to_string()),
            _ => None,
        }
    }

    fn generation_log(&self, version: &str) -> String {
        std::fs::read_to_string(self.path(&format!("generations/{APP}/{version}.log")))
            .unwrap_or_default()
    }
}
