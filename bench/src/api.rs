//! A small HTTP/1.1 client for the API daemon: one request per connection, or many on one
//! kept-alive connection. Every connect, read and write is bounded by a timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

/// Bound on one connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on each read and write (a PUT at 10,000 domains waits for a reload of ~2 s).
const IO_TIMEOUT: Duration = Duration::from_secs(120);
/// Larger answers are refused (`GET /v1/blocked-ips` at 100,000 entries is ~15 MB).
const MAX_ANSWER: usize = 256 * 1024 * 1024;

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
            pending: Vec::new(),
        })
    }
}

/// One connection to the daemon.
pub struct Conn {
    stream: TcpStream,
    token: String,
    port: u16,
    /// Bytes read past the previous answer.
    pending: Vec<u8>,
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
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\nConnection: {}\r\nContent-Length: {}\r\n",
            self.port,
            self.token,
            if keep_alive { "keep-alive" } else { "close" },
            body.map_or(0, <[u8]>::len)
        );
        if body.is_some() {
            head += "Content-Type: application/json\r\n";
        }
        head += "\r\n";
        let mut request = head.into_bytes();
        if let Some(b) = body {
            request.extend_from_slice(b);
        }
        self.stream
            .write_all(&request)
            .context("send the request")?;
        self.read_answer()
    }

    /// JSON in, JSON out, on this connection (kept alive).
    pub fn json(&mut self, method: &str, path: &str, body: &Value) -> anyhow::Result<Answer> {
        let bytes = serde_json::to_vec(body)?;
        self.send(method, path, Some(&bytes), true)
    }

    fn fill(&mut self) -> anyhow::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.pending.extend_from_slice(&chunk[..n]);
                    if self.pending.len() > MAX_ANSWER {
                        bail!("answer larger than {MAX_ANSWER} bytes");
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("read the answer"),
            }
        }
    }

    fn read_answer(&mut self) -> anyhow::Result<Answer> {
        let end = loop {
            if let Some(end) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            if self.fill()? == 0 {
                bail!(
                    "the connection closed before a complete answer ({} bytes)",
                    self.pending.len()
                );
            }
        };
        let head = String::from_utf8_lossy(&self.pending[..end]).into_owned();
        let status: u16 = head
            .split("\r\n")
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no status line in {head:?}"))?;
        let header = |name: &str| {
            head.split("\r\n").skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
        };
        self.pending.drain(..end + 4);
        let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            self.read_chunked()?
        } else if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            while self.pending.len() < len {
                if self.fill()? == 0 {
                    bail!("answer cut: {} of {len} body bytes", self.pending.len());
                }
            }
            self.pending.drain(..len).collect()
        } else {
            while self.fill()? > 0 {}
            std::mem::take(&mut self.pending)
        };
        Ok(Answer { status, body })
    }

    fn read_chunked(&mut self) -> anyhow::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let eol = loop {
                if let Some(p) = self.pending.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                if self.fill()? == 0 {
                    bail!("chunked answer cut");
                }
            };
            let size_text = String::from_utf8_lossy(&self.pending[..eol]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .with_context(|| format!("bad chunk size {size_text:?}"))?;
            while self.pending.len() < eol + 2 + size + 2 {
                if self.fill()? == 0 {
                    bail!("chunked answer cut");
                }
            }
            body.extend_from_slice(&self.pending[eol + 2..eol + 2 + size]);
            self.pending.drain(..eol + 2 + size + 2);
            if size == 0 {
                return Ok(body);
            }
        }
    }
}
