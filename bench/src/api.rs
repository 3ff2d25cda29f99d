//! The API daemon's calls through the kit's HTTP client: one request per connection, or many
//! on one kept-alive connection. Every connect, read and write is bounded by a timeout.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use testkit::daemon::Daemon;
use testkit::http;

/// Bound on one connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on each read and write (a PUT at 10,000 domains waits for a reload of ~2 s).
const IO_TIMEOUT: Duration = Duration::from_secs(120);

/// What the daemon answered.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The answer as a short error message.
    pub fn describe(&self) -> String {
        let text = self.text();
        format!(
            "{} {}",
            self.status,
            text.chars().take(400).collect::<String>()
        )
    }
}

/// How to reach a running daemon; cheap to clone into threads.
#[derive(Debug, Clone)]
pub struct Api {
    pub port: u16,
    pub token: String,
}

impl Api {
    /// How to reach the kit's running `daemon`.
    pub fn of(daemon: &Daemon) -> Api {
        Api {
            port: daemon.port,
            token: daemon.token.clone(),
        }
    }

    /// One request on a fresh connection (`Connection: close`).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Answer> {
        let bytes = body.map(serde_json::to_vec).transpose()?;
        self.call_raw(method, path, bytes.as_deref())
    }

    pub fn call_raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> anyhow::Result<Answer> {
        let mut conn = self.connect()?;
        conn.send(method, path, body, false)
            .with_context(|| format!("{method} {path}"))
    }

    /// A connection for several requests (HTTP/1.1 keep-alive).
    pub fn connect(&self) -> anyhow::Result<Conn> {
        let target = SocketAddr::from(([127, 0, 0, 1], self.port));
        let stream = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
            .with_context(|| format!("connect to the API on {target}"))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            token: self.token.clone(),
            port: self.port,
        })
    }
}

/// One connection to the daemon.
pub struct Conn {
    stream: TcpStream,
    token: String,
    port: u16,
}

impl Conn {
    /// Sends one request and reads its answer; `keep_alive: false` asks the server to close.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        keep_alive: bool,
    ) -> anyhow::Result<Answer> {
        let authorization = format!("Bearer {}", self.token);
        let mut headers = vec![
            ("Authorization", authorization.as_str()),
            (
                "Connection",
                if keep_alive { "keep-alive" } else { "close" },
            ),
        ];
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        let host = format!("127.0.0.1:{}", self.port);
        let request = http::raw_request(
            method,
            path,
            &host,
            &headers,
            Some(body.unwrap_or_default()),
        );
        self.stream
            .write_all(&request)
            .context("send the request")?;
        let answer = http::read_response(&mut self.stream).map_err(anyhow::Error::msg)?;
        Ok(Answer {
            status: answer.status,
            body: answer.body,
        })
    }

    /// JSON in, JSON out, on this connection (kept alive).
    pub fn json(&mut self, method: &str, path: &str, body: &Value) -> anyhow::Result<Answer> {
        let bytes = serde_json::to_vec(body)?;
        self.send(method, path, Some(&bytes), true)
    }
}
