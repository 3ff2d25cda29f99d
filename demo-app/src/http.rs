//! Minimal server side of HTTP/1.0 and HTTP/1.1: request parsing with hard
//! limits, response framing, and the per-connection keep-alive loop.
//!
//! Limits (anything beyond is refused and the connection closed):
//! - request line: at most [`MAX_REQUEST_LINE`] bytes (414 beyond);
//! - header lines: at most [`MAX_HEADERS`] lines of at most
//!   [`MAX_HEADER_LINE`] bytes each (431 beyond);
//! - request bodies are read and discarded according to `content-length`,
//!   up to [`MAX_BODY`] bytes (413 beyond); `transfer-encoding` on a request
//!   is not supported (501);
//! - a connection may stay idle between requests for the idle timeout, and a
//!   request head must arrive within [`HEAD_TIMEOUT`] (or the idle timeout if
//!   shorter) of its first byte (408 beyond).
//!
//! Every response carries `x-version` and is framed either by
//! `content-length` or by chunked transfer coding, so a reused connection
//! always stays in sync.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::routes::{self, App};

/// Longest accepted request line, terminator excluded.
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
/// Longest accepted header line, terminator excluded.
pub const MAX_HEADER_LINE: usize = 8 * 1024;
/// Most header lines accepted in one request.
pub const MAX_HEADERS: usize = 64;
/// Largest request body that is skipped rather than refused.
pub const MAX_BODY: u64 = 1024 * 1024;
/// Time allowed for a whole request head once its first byte has arrived
/// (capped by the idle timeout).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Empty lines tolerated before a request line (RFC 9112, section 2.2).
const MAX_LEADING_EMPTY_LINES: usize = 4;
/// How long a closing connection is drained so that the peer reads our last
/// response instead of a reset.
const LINGER: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The request target in origin form (`/path?query`).
    pub target: String,
    pub version: Version,
    /// Header names are lower-cased; values are trimmed.
    pub headers: Vec<(String, String)>,
    pub content_length: u64,
    /// Whether the client allows the connection to be reused.
    pub keep_alive: bool,
    /// The client sent `expect: 100-continue`.
    pub expect_continue: bool,
}

impl Request {
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(&self.target, |(p, _)| p)
    }

    pub fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }

    /// First value of a header, by case-insensitive name.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
pub enum ParseError {
    Io(io::Error),
    UnexpectedEof,
    RequestLineTooLong,
    HeaderLineTooLong,
    TooManyHeaders,
    Bad(&'static str),
    UnsupportedVersion,
    TransferEncoding,
    BodyTooLarge,
}

impl ParseError {
    /// The status to answer with, or `None` when the peer is gone and the
    /// connection should just be closed.
    pub fn status(&self) -> Option<u16> {
        match self {
            ParseError::Io(e) if is_timeout(e) => Some(408),
            ParseError::Io(_) | ParseError::UnexpectedEof => None,
            ParseError::RequestLineTooLong => Some(414),
            ParseError::HeaderLineTooLong | ParseError::TooManyHeaders => Some(431),
            ParseError::Bad(_) => Some(400),
            ParseError::UnsupportedVersion => Some(505),
            ParseError::TransferEncoding => Some(501),
            ParseError::BodyTooLarge => Some(413),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ParseError::Io(e) if is_timeout(e) => "request head timed out".into(),
            ParseError::Io(e) => format!("read error: {e}"),
            ParseError::UnexpectedEof => "connection closed mid-request".into(),
            ParseError::RequestLineTooLong => {
                format!("request line longer than {MAX_REQUEST_LINE} bytes")
            }
            ParseError::HeaderLineTooLong => {
                format!("header line longer than {MAX_HEADER_LINE} bytes")
            }
            ParseError::TooManyHeaders => format!("more than {MAX_HEADERS} header lines"),
            ParseError::Bad(why) => (*why).into(),
            ParseError::UnsupportedVersion => "unsupported HTTP version".into(),
            ParseError::TransferEncoding => "request transfer-encoding not supported".into(),
            ParseError::BodyTooLarge => format!("request body larger than {MAX_BODY} bytes"),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

enum LineError {
    TooLong,
    Eof,
    Io(io::Error),
}

/// Reads one line terminated by LF (an optional CR before it is dropped),
/// refusing lines longer than `limit` bytes without buffering them.
/// `Ok(None)` means end of stream before any byte.
fn read_line<R: BufRead>(r: &mut R, limit: usize) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if avail.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(LineError::Eof)
            };
        }
        // `limit + 1` leaves room for the CR of a CRLF terminator.
        match avail.iter().position(|&b| b == b'\n') {
            Some(pos) => {
                if line.len() + pos > limit + 1 {
                    return Err(LineError::TooLong);
                }
                line.extend_from_slice(&avail[..pos]);
                r.consume(pos + 1);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > limit {
                    return Err(LineError::TooLong);
                }
                return Ok(Some(line));
            }
            None => {
                let n = avail.len();
                if line.len() + n > limit + 1 {
                    return Err(LineError::TooLong);
                }
                line.extend_from_slice(avail);
                r.consume(n);
            }
        }
    }
}

/// `tchar` of RFC 9110, the characters of methods and header names.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// Turns the target into origin form, accepting the absolute form too.
fn origin_form(target: &str) -> Result<String, ParseError> {
    if target.is_empty() || !target.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ParseError::Bad("invalid request target"));
    }
    if target.starts_with('/') {
        return Ok(target.to_string());
    }
    let lower = target.to_ascii_lowercase();
    for scheme in ["http://", "https://"] {
        if lower.starts_with(scheme) {
            let rest = &target[scheme.len()..];
            return Ok(match rest.find(['/', '?']) {
                Some(i) if rest.as_bytes()[i] == b'/' => rest[i..].to_string(),
                Some(i) => format!("/{}", &rest[i..]),
                None => "/".to_string(),
            });
        }
    }
    Err(ParseError::Bad("request target must be in origin form"))
}

fn parse_version(v: &str) -> Result<Version, ParseError> {
    match v {
        "HTTP/1.1" => Ok(Version::Http11),
        "HTTP/1.0" => Ok(Version::Http10),
        _ => {
            let b = v.as_bytes();
            if b.len() == 8
                && v.starts_with("HTTP/")
                && b[5].is_ascii_digit()
                && b[6] == b'.'
                && b[7].is_ascii_digit()
            {
                Err(ParseError::UnsupportedVersion)
            } else {
                Err(ParseError::Bad("invalid HTTP version"))
            }
        }
    }
}

fn parse_content_length(value: &str) -> Result<u64, ParseError> {
    let mut found: Option<u64> = None;
    // A repeated value ("5, 5") is allowed as long as every element agrees.
    for part in value.split(',') {
        let part = part.trim_matches([' ', '\t']);
        if part.is_empty() || part.len() > 19 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseError::Bad("invalid content-length"));
        }
        let n: u64 = part
            .parse()
            .map_err(|_| ParseError::Bad("invalid content-length"))?;
        if found.is_some_and(|f| f != n) {
            return Err(ParseError::Bad("conflicting content-length values"));
        }
        found = Some(n);
    }
    found.ok_or(ParseError::Bad("invalid content-length"))
}

/// Reads one request head. `Ok(None)` means the peer closed the connection
/// cleanly before starting a request. The body, if any, is left unread:
/// the caller skips `content_length` bytes.
pub fn read_request<R: BufRead>(r: &mut R) -> Result<Option<Request>, ParseError> {
    let mut empty_lines = 0;
    let line = loop {
        match read_line(r, MAX_REQUEST_LINE) {
            Ok(None) => return Ok(None),
            Ok(Some(l)) if l.is_empty() => {
                empty_lines += 1;
                if empty_lines > MAX_LEADING_EMPTY_LINES {
                    return Err(ParseError::Bad("too many empty lines before request"));
                }
            }
            Ok(Some(l)) => break l,
            Err(LineError::TooLong) => return Err(ParseError::RequestLineTooLong),
            Err(LineError::Eof) => return Err(ParseError::UnexpectedEof),
            Err(LineError::Io(e)) => return Err(ParseError::Io(e)),
        }
    };
    let line =
        std::str::from_utf8(&line).map_err(|_| ParseError::Bad("request line is not ASCII"))?;
    let mut parts = line.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) => (m, t, v),
        _ => return Err(ParseError::Bad("malformed request line")),
    };
    if !is_token(method) {
        return Err(ParseError::Bad("invalid method"));
    }
    let version = parse_version(version)?;
    let target = origin_form(target)?;

    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let line = match read_line(r, MAX_HEADER_LINE) {
            Ok(Some(l)) => l,
            Ok(None) | Err(LineError::Eof) => return Err(ParseError::UnexpectedEof),
            Err(LineError::TooLong) => return Err(ParseError::HeaderLineTooLong),
            Err(LineError::Io(e)) => return Err(ParseError::Io(e)),
        };
        if line.is_empty() {
            break;
        }
        if headers.len() == MAX_HEADERS {
            return Err(ParseError::TooManyHeaders);
        }
        if line[0] == b' ' || line[0] == b'\t' {
            return Err(ParseError::Bad("obsolete header line folding"));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(ParseError::Bad("header line without colon"))?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().copied().all(is_tchar) {
            return Err(ParseError::Bad("invalid header name"));
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(ParseError::Bad("control character in header value"));
        }
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let value = String::from_utf8_lossy(value)
            .trim_matches([' ', '\t'])
            .to_string();
        headers.push((name, value));
    }

    let mut content_length: Option<u64> = None;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    for (name, value) in &headers {
        match name.as_str() {
            "content-length" => {
                let n = parse_content_length(value)?;
                if content_length.is_some_and(|c| c != n) {
                    return Err(ParseError::Bad("conflicting content-length values"));
                }
                content_length = Some(n);
            }
            "transfer-encoding" => return Err(ParseError::TransferEncoding),
            "connection" => {
                for token in value.split(',').map(|t| t.trim_matches([' ', '\t'])) {
                    if token.eq_ignore_ascii_case("close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case("keep-alive") {
                        keep_alive_token = true;
                    }
                }
            }
            "expect" => expect_continue = value.eq_ignore_ascii_case("100-continue"),
            _ => {}
        }
    }
    let content_length = content_length.unwrap_or(0);
    if content_length > MAX_BODY {
        return Err(ParseError::BodyTooLarge);
    }
    let keep_alive = !close && (version == Version::Http11 || keep_alive_token);
    Ok(Some(Request {
        method: method.to_string(),
        target,
        version,
        headers,
        content_length,
        keep_alive,
        expect_continue,
    }))
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// What a response must know about the request and the connection to be
/// framed correctly.
pub struct Framing<'a> {
    /// Value of the `x-version` header carried by every response.
    pub x_version: &'a str,
    /// The connection stays open after this response.
    pub keep_alive: bool,
    /// HEAD request: headers only, no body.
    pub head_only: bool,
    /// The client speaks HTTP/1.0 and cannot take chunked encoding.
    pub http10: bool,
}

pub enum BodyLen {
    Known(u64),
    Chunked,
}

fn head_bytes(
    f: &Framing,
    status: u16,
    content_type: &str,
    extra: &[(&str, &str)],
    len: BodyLen,
) -> Vec<u8> {
    let mut h = format!(
        "HTTP/1.1 {status} {}\r\nx-version: {}\r\ncontent-type: {content_type}\r\n",
        reason(status),
        f.x_version
    );
    match len {
        BodyLen::Known(n) => h.push_str(&format!("content-length: {n}\r\n")),
        BodyLen::Chunked => h.push_str("transfer-encoding: chunked\r\n"),
    }
    if !f.keep_alive {
        h.push_str("connection: close\r\n");
    } else if f.http10 {
        h.push_str("connection: keep-alive\r\n");
    }
    for (name, value) in extra {
        h.push_str(&format!("{name}: {value}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// Writes the status line and headers of a response.
pub fn write_head<W: Write>(
    w: &mut W,
    f: &Framing,
    status: u16,
    content_type: &str,
    extra: &[(&str, &str)],
    len: BodyLen,
) -> io::Result<()> {
    w.write_all(&head_bytes(f, status, content_type, extra, len))?;
    w.flush()
}

/// Writes a whole response with a `content-length` body, in one write.
pub fn write_fixed<W: Write>(
    w: &mut W,
    f: &Framing,
    status: u16,
    extra: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let len = BodyLen::Known(body.len() as u64);
    let mut out = head_bytes(f, status, "text/plain", extra, len);
    if !f.head_only {
        out.extend_from_slice(body);
    }
    w.write_all(&out)?;
    w.flush()
}

/// Writes one chunk of a chunked body and flushes it.
pub fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        // An empty chunk would terminate the body.
        return Ok(());
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    w.write_all(&out)?;
    w.flush()
}

/// Writes the terminating zero-length chunk (no trailers).
pub fn write_last_chunk<W: Write>(w: &mut W) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

/// A reader that bounds each read by an absolute deadline, so that the total
/// time spent waiting for a request head is bounded, not just each read.
struct DeadlineReader<'a> {
    sock: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        self.sock.set_read_timeout(Some(left))?;
        let mut sock = self.sock;
        sock.read(buf)
    }
}

/// Connection timeouts.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Longest wait for the next request on an open connection, and longest
    /// blocked write (a client that stops reading is dropped).
    pub idle: Duration,
}

/// Serves requests on one connection until it is closed, times out, or a
/// response requires closing it.
pub fn serve_connection(stream: TcpStream, peer: SocketAddr, app: &App, timeouts: Timeouts) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(timeouts.idle));
    let mut reader = BufReader::with_capacity(
        8 * 1024,
        DeadlineReader {
            sock: &stream,
            deadline: Instant::now() + timeouts.idle,
        },
    );
    let mut out = &stream;
    loop {
        // Wait (at most the idle timeout) for the first byte of a request.
        reader.get_mut().deadline = Instant::now() + timeouts.idle;
        match reader.fill_buf() {
            Ok([]) => return,
            Ok(_) => {}
            Err(_) => return,
        }
        let started = Instant::now();
        reader.get_mut().deadline = started + HEAD_TIMEOUT.min(timeouts.idle);
        let req = match read_request(&mut reader) {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(e) => {
                if let Some(status) = e.status() {
                    let f = Framing {
                        x_version: &app.version,
                        keep_alive: false,
                        head_only: false,
                        http10: false,
                    };
                    let body = format!("{}\n", e.describe());
                    let _ = write_fixed(&mut out, &f, status, &[], body.as_bytes());
                    crate::log_request(
                        &app.version,
                        peer,
                        "-",
                        "-",
                        status,
                        &e.describe(),
                        started,
                    );
                    linger_close(&stream, &mut reader);
                }
                return;
            }
        };

        let mut keep_alive = req.keep_alive;
        if req.content_length > 0 {
            if req.expect_continue {
                // The client waits for our go-ahead before sending a body we
                // do not want: answer, then close instead of skipping it.
                keep_alive = false;
            } else {
                reader.get_mut().deadline = Instant::now() + timeouts.idle;
                let mut body = (&mut reader).take(req.content_length);
                match io::copy(&mut body, &mut io::sink()) {
                    Ok(n) if n == req.content_length => {}
                    _ => return,
                }
            }
        }

        let f = Framing {
            x_version: &app.version,
            keep_alive,
            head_only: req.method == "HEAD",
            http10: req.version == Version::Http10,
        };
        let outcome = routes::respond(app, &req, &f, &mut out);
        crate::log_request(
            &app.version,
            peer,
            &req.method,
            &req.target,
            outcome.status,
            &outcome.note,
            started,
        );
        if !outcome.completed {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        if !keep_alive {
            linger_close(&stream, &mut reader);
            return;
        }
    }
}

/// Half-closes the connection and briefly drains what the client still
/// sends, so that our last response is not destroyed by a TCP reset.
fn linger_close(stream: &TcpStream, reader: &mut BufReader<DeadlineReader>) {
    let _ = stream.shutdown(Shutdown::Write);
    reader.get_mut().deadline = Instant::now() + LINGER;
    let _ = io::copy(&mut reader.take(64 * 1024), &mut io::sink());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &[u8]) -> Result<Option<Request>, ParseError> {
        let mut r = raw;
        read_request(&mut r)
    }

    fn ok(raw: &str) -> Request {
        parse(raw.as_bytes()).unwrap().unwrap()
    }

    fn status(raw: &[u8]) -> Option<u16> {
        parse(raw).unwrap_err().status()
    }

    #[test]
    fn parses_simple_get() {
        let r = ok("GET /stream?lines=5&interval_ms=20 HTTP/1.1\r\nHost: x\r\nX-A:  b \r\n\r\n");
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/stream?lines=5&interval_ms=20");
        assert_eq!(r.path(), "/stream");
        assert_eq!(r.query(), "lines=5&interval_ms=20");
        assert_eq!(r.version, Version::Http11);
        assert_eq!(r.header("host"), Some("x"));
        assert_eq!(r.header("X-A"), Some("b"));
        assert_eq!(r.content_length, 0);
        assert!(r.keep_alive);
        assert!(!r.expect_continue);
    }

    #[test]
    fn bare_lf_and_leading_empty_lines_are_tolerated() {
        let r = ok("\r\n\nGET / HTTP/1.1\nHost: x\n\n");
        assert_eq!(r.path(), "/");
        assert_eq!(r.query(), "");
    }

    #[test]
    fn clean_eof_is_not_an_error() {
        assert!(parse(b"").unwrap().is_none());
        assert!(parse(b"\r\n").unwrap().is_none());
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost"),
            Err(ParseError::UnexpectedEof)
        ));
        assert!(matches!(parse(b"GET / HT"), Err(ParseError::UnexpectedEof)));
        assert_eq!(status(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn reads_consecutive_requests_from_one_buffer() {
        let raw = b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
        let mut r = &raw[..];
        assert_eq!(read_request(&mut r).unwrap().unwrap().target, "/a");
        assert_eq!(read_request(&mut r).unwrap().unwrap().target, "/b");
        assert!(read_request(&mut r).unwrap().is_none());
    }

    #[test]
    fn keep_alive_rules() {
        assert!(ok("GET / HTTP/1.1\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.1\r\nConnection: foo, Close\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.0\r\n\r\n").keep_alive);
        let r = ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(r.keep_alive);
        assert_eq!(r.version, Version::Http10);
    }

    #[test]
    fn request_line_limit() {
        let at_limit = format!("GET /{} HTTP/1.1", "a".repeat(MAX_REQUEST_LINE - 14));
        assert_eq!(at_limit.len(), MAX_REQUEST_LINE);
        assert!(parse(format!("{at_limit}\r\n\r\n").as_bytes()).is_ok());
        let over = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_REQUEST_LINE));
        assert_eq!(status(over.as_bytes()), Some(414));
        // Without any terminator, the limit still applies.
        let endless = vec![b'a'; 3 * MAX_REQUEST_LINE];
        assert_eq!(status(&endless), Some(414));
    }

    #[test]
    fn header_limits() {
        let mut raw = String::from("GET / HTTP/1.1\r\n");
        for i in 0..MAX_HEADERS {
            raw.push_str(&format!("x-h{i}: v\r\n"));
        }
        assert_eq!(ok(&format!("{raw}\r\n")).headers.len(), MAX_HEADERS);
        raw.push_str("x-one-more: v\r\n\r\n");
        assert_eq!(status(raw.as_bytes()), Some(431));

        let long = format!(
            "GET / HTTP/1.1\r\nx: {}\r\n\r\n",
            "v".repeat(MAX_HEADER_LINE)
        );
        assert_eq!(status(long.as_bytes()), Some(431));
    }

    #[test]
    fn malformed_requests_are_400() {
        for raw in [
            "GET /\r\n\r\n",
            "GET  / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1 x\r\n\r\n",
            "G(T / HTTP/1.1\r\n\r\n",
            "GET foo HTTP/1.1\r\n\r\n",
            "GET / http/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "GET / HTTP/1.1\r\nbad name: v\r\n\r\n",
            "GET / HTTP/1.1\r\n: v\r\n\r\n",
            "GET / HTTP/1.1\r\nx: a\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nx: a\x01b\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(status(raw.as_bytes()), Some(400), "{raw:?}");
        }
        assert_eq!(status(b"GET /\xff HTTP/1.1\r\n\r\n"), Some(400));
    }

    #[test]
    fn content_length_and_body_rules() {
        assert_eq!(
            ok("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n").content_length,
            12
        );
        assert_eq!(
            ok("POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n").content_length,
            3
        );
        let r = ok("POST / HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
        assert!(r.expect_continue);
        let big = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(status(big.as_bytes()), Some(413));
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(501)
        );
    }

    #[test]
    fn versions_and_targets() {
        assert_eq!(status(b"GET / HTTP/2.0\r\n\r\n"), Some(505));
        assert_eq!(status(b"GET / HTTP/0.9\r\n\r\n"), Some(505));
        assert_eq!(
            ok("GET http://h:1/version?x HTTP/1.1\r\n\r\n").target,
            "/version?x"
        );
        assert_eq!(ok("GET HTTP://h HTTP/1.1\r\n\r\n").target, "/");
        assert_eq!(ok("GET http://h?a=1 HTTP/1.1\r\n\r\n").target, "/?a=1");
        assert_eq!(status(b"OPTIONS * HTTP/1.1\r\n\r\n"), Some(400));
    }

    #[test]
    fn framing_headers() {
        let mut f = Framing {
            x_version: "1.4.2",
            keep_alive: true,
            head_only: false,
            http10: false,
        };
        let mut out = Vec::new();
        write_fixed(&mut out, &f, 200, &[("x-extra", "1")], b"hi").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nx-version: 1.4.2\r\ncontent-type: text/plain\r\n\
             content-length: 2\r\nx-extra: 1\r\n\r\nhi"
        );

        f.head_only = true;
        f.keep_alive = false;
        let mut out = Vec::new();
        write_fixed(&mut out, &f, 404, &[], b"nope").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("content-length: 4\r\nconnection: close\r\n\r\n"));
        assert!(text.ends_with("\r\n\r\n"));

        let mut out = Vec::new();
        write_chunk(&mut out, b"abc\n").unwrap();
        write_chunk(&mut out, b"").unwrap();
        write_chunk(&mut out, &[b'x'; 26]).unwrap();
        write_last_chunk(&mut out).unwrap();
        let expected = format!("4\r\nabc\n\r\n1a\r\n{}\r\n0\r\n\r\n", "x".repeat(26));
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }
}
