//! A fleet: edges sharing one desired state in a real etcd cluster, each applying it through
//! its own HAProxy. Requests go through every edge's HAProxy to prove a change is in effect
//! there. `changes`: what a change does across the fleet; `faults`: etcd down, a leader
//! killed, a restored snapshot; `membership`: joining, leaving, an unpublished fleet; `certs`:
//! certificates ordered once and installed by every edge; `deliveries`: edge by edge, proved.

mod certs;
mod changes;
mod deliveries;
mod faults;
mod membership;

use std::time::Duration;

use serde_json::json;
use testkit::fleet::FleetLab;
use testkit::{Backend, Edge};

const WITHIN: Duration = Duration::from_secs(15);

fn put_domain(lab: &FleetLab, on: usize, host: &str, backend: &Backend) -> serde_json::Value {
    let body = json!({ "servers": [{ "address": backend.addr() }] });
    let r = lab
        .daemon(on)
        .call("PUT", &format!("/v1/domains/{host}"), Some(&body));
    assert!(r.status == 200 || r.status == 201, "{r:?}");
    r.json
}

/// Puts a domain on edge `on` as soon as etcd (just started again) takes writes.
fn put_domain_once_etcd_is_back(lab: &FleetLab, on: usize, host: &str, backend: &Backend) {
    let deadline = std::time::Instant::now() + WITHIN;
    loop {
        let body = json!({ "servers": [{ "address": backend.addr() }] });
        let r = lab
            .daemon(on)
            .call("PUT", &format!("/v1/domains/{host}"), Some(&body));
        if r.status == 200 || r.status == 201 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn serves(host: &'static str, body: &'static str) -> impl Fn(usize, &Edge) -> Result<(), String> {
    move |_, edge| {
        let r = edge.get(host, "/");
        (r.status == 200 && r.body.contains(body))
            .then_some(())
            .ok_or_else(|| format!("GET {host}: {} {:?}", r.status, r.body))
    }
}

fn not_served(host: &'static str) -> impl Fn(usize, &Edge) -> Result<(), String> {
    move |_, edge| {
        let r = edge.get(host, "/");
        (r.status == 404)
            .then_some(())
            .ok_or_else(|| format!("GET {host}: {} (404 expected)", r.status))
    }
}

/// The master's reload count once it stays the same for a moment (a reload in flight, such
/// as the one of a start, is over).
fn settled_reloads(edge: &Edge) -> u32 {
    let read = || edge.master().show_proc().ok().map(|p| p.master.reloads);
    loop {
        let first = read();
        std::thread::sleep(Duration::from_millis(300));
        if first.is_some() && read() == first {
            return first.unwrap_or_default();
        }
    }
}
