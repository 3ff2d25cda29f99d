//! prove's plain HTTP/1.1 client, also the deliveries' readiness probe (a client, not any of
//! the delivery logic prove judges) and the one the test kit wraps: every connect and every
//! read has its own timeout, every request carries `Connection: close` on a new connection, and
//! every way a request can go wrong is named by a [`Cause`].
//!
//! The reading half ([`Conn`]) also works on a stream the caller connected and wrote to
//! itself (any request bytes, TLS), so the tests have no second client.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;

/// A request head larger than this is an error (a misbehaving server, not an app answer).
const MAX_HEAD: usize = 64 * 1024;
/// Short answers (`/`, `/version`) are tiny; a larger body is cut and called wrong.
const MAX_BODY: usize = 1024 * 1024;
/// Longest chunk accepted in a stream.
const MAX_CHUNK: usize = 1024 * 1024;

/// Why a request failed, as the probe counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// Nothing listened: the connection was refused.
    Refused,
    /// The connection was reset or closed before the answer was complete.
    Reset,
    /// Connect or a read took longer than its timeout.
    Timeout,
    /// A complete answer whose status is not 2xx.
    Non2xx,
    /// A 2xx answer whose body is not what the app serves (empty, or not a version line).
    WrongBody,
    /// Any other local error (no free port, malformed answer...).
    Other,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Refused => "refused",
            Cause::Reset => "reset",
            Cause::Timeout => "timeout",
            Cause::Non2xx => "non-2xx",
            Cause::WrongBody => "wrong-body",
            Cause::Other => "other",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    pub cause: Cause,
    pub detail: String,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.cause.as_str(), self.detail)
    }
}

impl HttpError {
    pub fn new(cause: Cause, detail: impl Into<String>) -> HttpError {
        HttpError {
            cause,
            detail: detail.into(),
        }
    }

    /// Classifies an I/O error met at `step` (connect, write, read).
    fn io(step: &str, e: &io::Error) -> HttpError {
        use io::ErrorKind as K;
        let cause = match e.kind() {
            K::ConnectionRefused => Cause::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                Cause::Reset
            }
            K::WouldBlock | K::TimedOut => Cause::Timeout,
            _ => Cause::Other,
        };
        HttpError::new(cause, format!("{step}: {e}"))
    }
}

/// A stream whose reads the client can bound: a timeout set on the socket under it.
pub trait Timed: Read {
    fn set_read_timeout(&self, timeout: Duration) -> io::Result<()>;
}

impl Timed for TcpStream {
    fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        TcpStream::set_read_timeout(self, Some(timeout))
    }
}

/// How large an answer may be before it is called wrong.
#[derive(Debug, Clone, Copy)]
pub struct AnswerLimits {
    pub body: usize,
    pub chunk: usize,
}

impl AnswerLimits {
    /// prove's and the readiness probe's: short answers, streams of small chunks.
    pub const PROBE: AnswerLimits = AnswerLimits {
        body: MAX_BODY,
        chunk: MAX_CHUNK,
    };
}

/// Bounds of one request.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// Each read (and the write) waits at most this long.
    pub read: Duration,
}

/// Status and headers of an answer.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The head as received: the status line, the header lines and the blank line, each with
    /// its line end.
    pub raw: String,
}

impl Head {
    /// The status line's protocol version (`HTTP/1.1`, `HTTP/1.0`).
    pub fn version(&self) -> &str {
        self.raw.split_whitespace().next().unwrap_or("")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn is_chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    fn content_length(&self) -> Result<Option<usize>, HttpError> {
        match self.header("content-length") {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                HttpError::new(
                    Cause::Other,
                    format!("bad content-length {v:?} in the answer"),
                )
            }),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Response {
    pub head: Head,
    pub body: Vec<u8>,
}

/// One open connection that has sent its request.
pub struct Conn<S: Timed = TcpStream> {
    reader: BufReader<S>,
    read_timeout: Duration,
    /// No read may end later than this.
    deadline: Option<Instant>,
    limits: AnswerLimits,
    /// The framing lines of the last chunk read, as received (see [`Conn::chunk_framing`]).
    framing: String,
}

/// Connects (bounded by `timeouts.connect`) and sends `GET target` with `Host: host`.
pub fn send_get(
    addr: SocketAddr,
    host: &str,
    target: &str,
    timeouts: Timeouts,
) -> Result<Conn, HttpError> {
    let stream = TcpStream::connect_timeout(&addr, timeouts.connect)
        .map_err(|e| HttpError::io("connect", &e))?;
    let _ = stream.set_nodelay(true);
    stream
        .set_write_timeout(Some(timeouts.read))
        .map_err(|e| HttpError::io("set the write timeout", &e))?;
    stream
        .set_read_timeout(Some(timeouts.read))
        .map_err(|e| HttpError::io("set the read timeout", &e))?;
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: hapctl-prove\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    (&stream)
        .write_all(request.as_bytes())
        .map_err(|e| HttpError::io("write the request", &e))?;
    Ok(Conn::new(stream, timeouts.read, AnswerLimits::PROBE))
}

/// A whole `GET` on a new connection: connect, send, read head and body. The whole exchange
/// ends within `total` (each read also within `timeouts.read`).
pub fn get(
    addr: SocketAddr,
    host: &str,
    target: &str,
    timeouts: Timeouts,
    total: Duration,
) -> Result<Response, HttpError> {
    let deadline = Instant::now() + total;
    let mut conn = send_get(addr, host, target, timeouts)?;
    conn.deadline = Some(deadline);
    let head = conn.read_head()?;
    let body = conn.read_body(&head)?;
    Ok(Response { head, body })
}

impl<S: Timed> Conn<S> {
    /// The reading half of a request the caller sent on `stream` itself (any bytes, any
    /// stream): each read waits at most `read_timeout`.
    pub fn new(stream: S, read_timeout: Duration, limits: AnswerLimits) -> Conn<S> {
        Conn {
            reader: BufReader::new(stream),
            read_timeout,
            deadline: None,
            limits,
            framing: String::new(),
        }
    }

    /// One whole answer: interim (1xx) answers skipped, then the body framed by its chunks,
    /// its `content-length` or the close; none after a HEAD request (`to_head`), 204 or 304.
    pub fn read_answer(&mut self, to_head: bool) -> Result<Response, HttpError> {
        let head = loop {
            let head = self.read_head()?;
            if !(100..200).contains(&head.status) {
                break head;
            }
        };
        let body = if to_head || head.status == 204 || head.status == 304 {
            Vec::new()
        } else {
            self.read_body(&head)?
        };
        Ok(Response { head, body })
    }

    /// The body `head` announces: chunked, `content-length` bytes, or up to the close.
    pub fn read_body(&mut self, head: &Head) -> Result<Vec<u8>, HttpError> {
        let max = self.limits.body;
        if head.is_chunked() {
            let mut body = Vec::new();
            while let Some(chunk) = self.next_chunk()? {
                body.extend_from_slice(&chunk);
                if body.len() > max {
                    return Err(HttpError::new(
                        Cause::WrongBody,
                        format!("body larger than {max} bytes"),
                    ));
                }
            }
            Ok(body)
        } else if let Some(len) = head.content_length()? {
            if len > max {
                return Err(HttpError::new(
                    Cause::WrongBody,
                    format!("content-length {len} is larger than {max} bytes"),
                ));
            }
            let mut body = vec![0; len];
            self.read_exact(&mut body).map_err(|e| {
                let mut e = HttpError::io("read the body", &e);
                if e.cause == Cause::Reset {
                    e.detail = format!("connection closed before the {len}-byte body was complete");
                }
                e
            })?;
            Ok(body)
        } else {
            self.read_to_close()
        }
    }

    /// Sets the socket's timeout for the next read: the read timeout, shortened to the deadline.
    fn arm(&mut self) -> io::Result<()> {
        let mut t = self.read_timeout;
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request's overall time ran out",
                ));
            }
            t = t.min(left);
        }
        self.reader.get_ref().set_read_timeout(t)
    }

    /// One line with its line end.
    fn read_raw_line(&mut self, what: &str, limit: usize) -> Result<String, HttpError> {
        let mut line = Vec::new();
        loop {
            self.arm().map_err(|e| HttpError::io(what, &e))?;
            let available = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HttpError::io(what, &e)),
            };
            if available.is_empty() {
                return Err(HttpError::new(
                    Cause::Reset,
                    format!("{what}: connection closed by the server"),
                ));
            }
            let (used, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    line.extend_from_slice(&available[..=i]);
                    (i + 1, true)
                }
                None => {
                    line.extend_from_slice(available);
                    (available.len(), false)
                }
            };
            self.reader.consume(used);
            if line.len() > limit {
                return Err(HttpError::new(
                    Cause::Other,
                    format!("{what}: line longer than {limit} bytes"),
                ));
            }
            if done {
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
        }
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut filled = 0;
        while filled < buf.len() {
            self.arm()?;
            match self.reader.read(&mut buf[filled..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn read_to_close(&mut self) -> Result<Vec<u8>, HttpError> {
        let mut body = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            self.arm().map_err(|e| HttpError::io("read the body", &e))?;
            match self.reader.read(&mut buf) {
                Ok(0) => return Ok(body),
                Ok(n) => {
                    body.extend_from_slice(&buf[..n]);
                    if body.len() > self.limits.body {
                        return Err(HttpError::new(
                            Cause::WrongBody,
                            format!("body larger than {} bytes", self.limits.body),
                        ));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(HttpError::io("read the body", &e)),
            }
        }
    }

    /// Reads the status line and headers.
    pub fn read_head(&mut self) -> Result<Head, HttpError> {
        let mut raw = self.read_raw_line("read the status line", MAX_HEAD)?;
        let status_line = raw.trim_end_matches(['\r', '\n']).to_string();
        let mut parts = status_line.split_whitespace();
        let status = match (parts.next(), parts.next().map(str::parse::<u16>)) {
            (Some(v), Some(Ok(s))) if v.starts_with("HTTP/1.") => s,
            _ => {
                return Err(HttpError::new(
                    Cause::Other,
                    format!("not an HTTP/1 status line: {status_line:?}"),
                ))
            }
        };
        let mut headers = Vec::new();
        let mut size = status_line.len();
        loop {
            let raw_line = self.read_raw_line("read the headers", MAX_HEAD)?;
            raw += &raw_line;
            let line = raw_line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                break;
            }
            size += line.len();
            if size > MAX_HEAD {
                return Err(HttpError::new(
                    Cause::Other,
                    format!("answer head larger than {MAX_HEAD} bytes"),
                ));
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        Ok(Head {
            status,
            headers,
            raw,
        })
    }

    /// The framing lines of the chunk [`Conn::next_chunk`] read last, each with its line end:
    /// its size line; after the final chunk also the trailers and the blank line that ends
    /// the body. What a strict reader checks that this one lets pass.
    pub fn chunk_framing(&self) -> &str {
        &self.framing
    }

    /// The next chunk of a chunked body; `None` after the final (zero) chunk and its trailers.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        self.framing = self.read_raw_line("read a chunk size", 1024)?;
        let size_line = self.framing.trim_end_matches(['\r', '\n']);
        let size_text = size_line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| {
            HttpError::new(Cause::Other, format!("bad chunk size line {size_line:?}"))
        })?;
        if size > self.limits.chunk {
            return Err(HttpError::new(
                Cause::Other,
                format!("chunk of {size} bytes is larger than {}", self.limits.chunk),
            ));
        }
        if size == 0 {
            // Trailers, up to the empty line that ends the message.
            for _ in 0..64 {
                let line = self.read_raw_line("read the trailers", MAX_HEAD)?;
                self.framing += &line;
                if line.trim_end_matches(['\r', '\n']).is_empty() {
                    return Ok(None);
                }
            }
            return Err(HttpError::new(Cause::Other, "more than 64 trailer lines"));
        }
        let mut data = vec![0; size + 2];
        self.read_exact(&mut data).map_err(|e| {
            let mut e = HttpError::io("read a chunk", &e);
            if e.cause == Cause::Reset {
                e.detail = "connection closed in the middle of a chunk".into();
            }
            e
        })?;
        if &data[size..] != b"\r\n" {
            return Err(HttpError::new(
                Cause::Other,
                "a chunk does not end with CRLF",
            ));
        }
        data.truncate(size);
        Ok(Some(data))
    }
}

/// A version as the demo app (and hapctl's versions) spell it: 1–64 of `[A-Za-z0-9._-]`.
pub fn is_version(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The version a short answer names: its body must be one version line (`V` or `V\n`); when
/// the answer also carries `x-version`, both must agree.
pub fn version_of(response: &Response) -> Result<String, HttpError> {
    let text = String::from_utf8_lossy(&response.body);
    let line = text.strip_suffix('\n').unwrap_or(&text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() {
        return Err(HttpError::new(Cause::WrongBody, "empty body"));
    }
    if !is_version(line) {
        return Err(HttpError::new(
            Cause::WrongBody,
            format!(
                "body is not a version line: {:?}",
                text.chars().take(60).collect::<String>()
            ),
        ));
    }
    if let Some(h) = response.head.header("x-version") {
        if h != line {
            return Err(HttpError::new(
                Cause::WrongBody,
                format!("body says {line:?} but x-version says {h:?}"),
            ));
        }
    }
    Ok(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// Serves one connection with `answer` (after reading the request head), then closes.
    fn serve_once(answer: &'static [u8], pause: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = Vec::new();
            let mut b = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut b) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&b[..n]),
                }
            }
            thread::sleep(pause);
            let _ = conn.write_all(answer);
        });
        addr
    }

    const T: Timeouts = Timeouts {
        connect: Duration::from_secs(1),
        read: Duration::from_millis(500),
    };

    #[test]
    fn reads_content_length_and_chunked_answers() {
        let addr = serve_once(
            b"HTTP/1.1 200 OK\r\nx-version: 1.4.2\r\ncontent-length: 6\r\n\r\n1.4.2\n",
            Duration::ZERO,
        );
        let r = get(addr, "h", "/", T, Duration::from_secs(2)).unwrap();
        assert_eq!(r.head.status, 200);
        assert_eq!(version_of(&r).unwrap(), "1.4.2");

        let addr = serve_once(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n1.5\r\n3\r\n.0\n\r\n0\r\n\r\n",
            Duration::ZERO,
        );
        let r = get(addr, "h", "/", T, Duration::from_secs(2)).unwrap();
        assert_eq!(version_of(&r).unwrap(), "1.5.0");
    }

    #[test]
    fn names_each_cause() {
        // Refused: a port nothing listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = get(port, "h", "/", T, Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.cause, Cause::Refused, "{e}");

        // Reset: closed before the body is complete.
        let addr = serve_once(
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n1.4",
            Duration::ZERO,
        );
        let e = get(addr, "h", "/", T, Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.cause, Cause::Reset, "{e}");

        // Timeout: nothing within the read timeout.
        let addr = serve_once(b"HTTP/1.1 200 OK\r\n\r\n", Duration::from_millis(1500));
        let e = get(addr, "h", "/", T, Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.cause, Cause::Timeout, "{e}");

        // Wrong body: empty, not a version, or disagreeing with x-version.
        for answer in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n<html></html",
            b"HTTP/1.1 200 OK\r\nx-version: 1.5.0\r\ncontent-length: 6\r\n\r\n1.4.2\n",
        ] {
            let answer: &'static [u8] = Box::leak(answer.to_vec().into_boxed_slice());
            let addr = serve_once(answer, Duration::ZERO);
            let r = get(addr, "h", "/", T, Duration::from_secs(2)).unwrap();
            assert_eq!(version_of(&r).unwrap_err().cause, Cause::WrongBody);
        }
    }

    #[test]
    fn streams_chunks_until_the_final_one() {
        let addr = serve_once(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n8\r\nv 1/2\nxx\r\n6\r\nv 2/2\n\r\n0\r\n\r\n",
            Duration::ZERO,
        );
        let mut c = send_get(addr, "h", "/stream", T).unwrap();
        assert_eq!(c.read_head().unwrap().status, 200);
        assert_eq!(c.next_chunk().unwrap().unwrap(), b"v 1/2\nxx");
        assert_eq!(c.next_chunk().unwrap().unwrap(), b"v 2/2\n");
        assert_eq!(c.next_chunk().unwrap(), None);

        // Cut without the final chunk.
        let addr = serve_once(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nv 1/2\n\r\n",
            Duration::ZERO,
        );
        let mut c = send_get(addr, "h", "/stream", T).unwrap();
        c.read_head().unwrap();
        c.next_chunk().unwrap();
        assert_eq!(c.next_chunk().unwrap_err().cause, Cause::Reset);
    }
}
