//! The one HTTP/1.1 client of the tests and benchmarks, on plain sockets. A request goes out
//! exactly as built ([`raw_request`] or bytes of the test's own), so a test can also send what
//! no real client would (a lying `Content-Length`, bare chunks, a bad request line); the answer
//! is framed by its `Content-Length`, its chunks or the close, and every step is bounded.
//! Hand-rolled rather than hyper for that: hyper refuses to send malformed requests, and
//! tests also bind a chosen loopback source address and read answers on TLS streams.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::io::FromRawFd;
use std::thread;
use std::time::Duration;

/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A request larger than this is written from another thread while the answer is read: the
/// server may answer (413) before it read it all.
const WRITE_IN_THREAD: usize = 64 * 1024;

/// One answer as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    /// The status line and the headers as sent, without the blank line.
    pub head: String,
    /// Header names lower-cased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// The first of `headers` named `name` (lower-case).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

impl HttpResponse {
    /// The first header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A TCP connection to `127.0.0.1:port`, from `source` when given (another loopback address,
/// e.g. 127.0.0.2, as a distinct client).
pub fn connect(source: Option<Ipv4Addr>, port: u16) -> Result<TcpStream, String> {
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    match source {
        None => TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
            .map_err(|e| format!("connect {target}: {e}")),
        Some(src) => Ok(connect_from(src, target)),
    }
}

/// A request: the request line, `Host`, `headers`, `Connection: close` unless `headers` say
/// otherwise, then `Content-Length` and the body when there is one.
pub fn raw_request(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("connection"))
    {
        head += "Connection: close\r\n";
    }
    if let Some(body) = body {
        head += &format!("Content-Length: {}\r\n", body.len());
    }
    head += "\r\n";
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body.unwrap_or_default());
    raw
}

/// Sends `raw` on `stream` and reads the answer, each read bounded by `read_timeout`.
pub fn exchange(
    mut stream: TcpStream,
    raw: &[u8],
    read_timeout: Duration,
) -> Result<HttpResponse, String> {
    stream.set_read_timeout(Some(read_timeout)).unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let writer = if raw.len() > WRITE_IN_THREAD {
        let mut w = stream.try_clone().unwrap();
        let raw = raw.to_vec();
        Some(thread::spawn(move || {
            let _ = w.write_all(&raw);
        }))
    } else {
        stream
            .write_all(raw)
            .map_err(|e| format!("send the request: {e}"))?;
        None
    };
    let answer = read_response(&mut stream);
    if let Some(w) = writer {
        let _ = stream.shutdown(Shutdown::Both);
        let _ = w.join();
    }
    answer
}

/// Reads one answer from `stream`: until it is complete (by its framing) or the stream ends.
/// A read error after a complete answer is no error.
pub fn read_response(stream: &mut impl Read) -> Result<HttpResponse, String> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let read_error = loop {
        match stream.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if is_complete(&raw) {
                    break None;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => break Some(e),
        }
    };
    parse_response(&raw).map_err(|e| match read_error {
        Some(r) => format!("{e} (read: {r})"),
        None => e,
    })
}

/// True when `raw` holds a whole answer framed by `Content-Length` or chunks (an answer
/// framed by the close is complete only at the end of the stream).
fn is_complete(raw: &[u8]) -> bool {
    let Some((head, body)) = final_head(raw) else {
        return false;
    };
    let headers = parse_headers(&head);
    let find = |name| header(&headers, name);
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        // The last chunk ends with an empty line: only then is it worth walking the chunks.
        return body.ends_with(b"\r\n\r\n") && dechunk(body).1;
    }
    find("content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|len| body.len() >= len)
}

/// The head of the final answer (after any `100 Continue`) and the bytes after it.
fn final_head(mut raw: &[u8]) -> Option<(String, &[u8])> {
    loop {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        raw = &raw[end + 4..];
        if status_of(&head) != Some(100) {
            return Some((head, raw));
        }
    }
}

fn status_of(head: &str) -> Option<u16> {
    head.split_whitespace().nth(1).and_then(|s| s.parse().ok())
}

fn parse_headers(head: &str) -> Vec<(String, String)> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

/// Parses one HTTP/1.1 answer (the head, then a body framed by `Content-Length`, chunked, or
/// up to the end). A `100 Continue` interim answer before the final one is skipped.
pub fn parse_response(raw: &[u8]) -> Result<HttpResponse, String> {
    let Some((head, rest)) = final_head(raw) else {
        let interim = if status_of(&String::from_utf8_lossy(raw)) == Some(100) {
            " after 100 Continue"
        } else {
            ""
        };
        return Err(format!(
            "no complete answer{interim} ({} bytes): {:?}",
            raw.len(),
            String::from_utf8_lossy(&raw[..raw.len().min(200)])
        ));
    };
    let status = status_of(&head).ok_or_else(|| format!("no status line in {head:?}"))?;
    let headers = parse_headers(&head);
    let find = |name| header(&headers, name);
    let mut body = rest.to_vec();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body).0;
    } else if let Some(len) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if body.len() < len {
            return Err(format!("answer cut: {} of {len} body bytes", body.len()));
        }
        body.truncate(len);
    }
    Ok(HttpResponse {
        status,
        head,
        headers,
        body,
    })
}

/// The data of the complete chunks of a chunked body, and whether the last chunk was seen.
pub fn dechunk(mut body: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&body[..eol]);
        let size = size.split(';').next().unwrap_or("").trim();
        let Ok(n) = usize::from_str_radix(size, 16) else {
            break;
        };
        let rest = &body[eol + 2..];
        if n == 0 {
            return (out, true);
        }
        if rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        body = rest.get(n + 2..).unwrap_or_default();
    }
    (out, false)
}

fn connect_from(source: Ipv4Addr, target: SocketAddr) -> TcpStream {
    // std cannot bind before connecting; a few lines of libc can.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let stream = TcpStream::from_raw_fd(fd);
        let sockaddr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = sockaddr(source, 0);
        assert_eq!(
            libc::bind(fd, &local as *const _ as *const libc::sockaddr, len),
            0,
            "bind {source}"
        );
        let SocketAddr::V4(t) = target else {
            unreachable!()
        };
        let remote = sockaddr(*t.ip(), t.port());
        assert_eq!(
            libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len),
            0,
            "connect {target}"
        );
        stream
    }
}
