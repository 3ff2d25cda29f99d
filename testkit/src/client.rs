//! The edge's answers as the tests read them, through the kit's client ([`crate::http`]).

use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use crate::http;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
    /// What the backend saw in `X-Real-IP` (our test backends echo it).
    pub seen_real_ip: String,
    /// The response head, lowercased (`seen` reads the backend's echoes from it).
    pub head: String,
}

impl Response {
    /// The first response header `name` (lowercase), value lowercased.
    pub fn header(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}:");
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map(str::trim)
    }

    /// What the backend saw in request header `name` (lowercase), as it echoes it.
    pub fn seen(&self, name: &str) -> &str {
        let prefix = format!("x-seen-{name}:");
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or("")
            .trim()
    }
}

/// A plain HTTP/1.1 GET with `Connection: close`, every step bounded by a timeout.
/// `source` binds the client to another loopback address (e.g. 127.0.0.2) first.
pub fn http_get(
    source: Option<Ipv4Addr>,
    port: u16,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    http_send(source, "GET", port, host, path, headers)
}

/// [`http_get`], saying why there is no answer (refused, reset, timeout) instead of panicking.
pub fn try_http_get(
    source: Option<Ipv4Addr>,
    port: u16,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Response, String> {
    try_http_send(source, "GET", port, host, path, headers)
}

/// [`http_get`] with another method (a body-less request: send `Content-Length: 0` for POST).
pub fn http_send(
    source: Option<Ipv4Addr>,
    method: &str,
    port: u16,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    try_http_send(source, method, port, host, path, headers)
        .unwrap_or_else(|e| panic!("{method} {path} on {host}: {e}"))
}

fn try_http_send(
    source: Option<Ipv4Addr>,
    method: &str,
    port: u16,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Response, String> {
    let stream = http::connect(source, port).map_err(|e| format!("connect to the edge: {e}"))?;
    let raw = http::raw_request(method, path, host, headers, None);
    // Longer than a tarpit at its default length (10 s), which some tests wait out for its 429.
    let answer = http::exchange(stream, &raw, Duration::from_secs(30))?;
    let head = answer.head.to_lowercase();
    let seen_real_ip = answer.header("x-seen-real-ip").unwrap_or("").to_string();
    Ok(Response {
        status: answer.status,
        body: answer.text(),
        seen_real_ip,
        head,
    })
}

/// A TCP connection to the edge's port on 127.0.0.1 from `source` (a request left open).
pub fn connect_source(source: Ipv4Addr, port: u16) -> TcpStream {
    http::connect(Some(source), port).unwrap()
}
