//! A backend server for the edge's routes: 200, a fixed body, and the request's headers as
//! the backend saw them, echoed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A backend server answering every request with 200 and a fixed body.
pub struct Backend {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl Backend {
    pub fn start(body: &str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let body = body.to_string();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let body = body.clone();
                thread::spawn(move || serve(&mut conn, &body));
            }
        });
        Backend { port, stop }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

fn serve(conn: &mut TcpStream, body: &str) {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // One request per connection is enough here; answer once the head is complete.
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_lowercase();
    // Echo what the edge told us about the client, so tests can check the real-IP logic.
    let seen = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let real_ip = seen("x-real-ip: ");
    let (proto, port) = (seen("x-forwarded-proto: "), seen("x-forwarded-port: "));
    let (cf, true_client) = (seen("cf-connecting-ip: "), seen("true-client-ip: "));
    // Every X-Request-Id line, comma-joined: a client's own must never arrive next to the edge's.
    let request_ids: Vec<&str> = head
        .lines()
        .filter_map(|l| l.strip_prefix("x-request-id: "))
        .map(str::trim)
        .collect();
    let request_id = request_ids.join(",");
    // The request line as the backend received it (method, normalised URI, version).
    let line = head.lines().next().unwrap_or("").trim();
    let resp = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-seen-request-line: {line}\r\nx-seen-request-id: {request_id}\r\nx-seen-real-ip: {real_ip}\r\nx-seen-forwarded-proto: {proto}\r\nx-seen-forwarded-port: {port}\r\nx-seen-cf-connecting-ip: {cf}\r\nx-seen-true-client-ip: {true_client}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(resp.as_bytes());
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
