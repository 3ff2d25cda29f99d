//! The tests' and benchmarks' HTTP/1.1 requests, on plain sockets. A request goes out exactly
//! as built ([`raw_request`] or bytes of the test's own), so a test can also send what no real
//! client would (a lying `Content-Length`, bare chunks, a bad request line); the answer is read
//! by hapctl's own client ([`hapctl::prove::http`]), every step bounded. Not hyper: hyper
//! refuses to send malformed requests, and tests also bind a chosen loopback source address
//! and read answers on TLS streams.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::io::FromRawFd;
use std::thread;
use std::time::Duration;

use hapctl::prove::http::{AnswerLimits, Response, Timed};
pub use hapctl::prove::http::{Conn, Head};

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

/// A test reads whatever it asked for: bounds far above any answer a test expects.
const LIMITS: AnswerLimits = AnswerLimits {
    body: 1 << 30,
    chunk: 1 << 30,
};

/// The reading half of `stream` for a test that reads answer after answer itself (pipelined
/// requests, chunks as they arrive), with the kit's bounds.
pub fn reader(stream: TcpStream, read_timeout: Duration) -> Conn<TcpStream> {
    Conn::new(stream, read_timeout, LIMITS)
}

/// Sends `raw` on `stream` and reads the answer, each read bounded by `read_timeout`.
pub fn exchange(
    stream: TcpStream,
    raw: &[u8],
    read_timeout: Duration,
) -> Result<HttpResponse, String> {
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let writer = if raw.len() > WRITE_IN_THREAD {
        let mut w = stream.try_clone().unwrap();
        let raw = raw.to_vec();
        Some((
            stream.try_clone().unwrap(),
            thread::spawn(move || {
                let _ = w.write_all(&raw);
            }),
        ))
    } else {
        (&stream)
            .write_all(raw)
            .map_err(|e| format!("send the request: {e}"))?;
        None
    };
    let to_head = raw.starts_with(b"HEAD ");
    let answer = Conn::new(stream, read_timeout, LIMITS).read_answer(to_head);
    if let Some((stream, w)) = writer {
        let _ = stream.shutdown(Shutdown::Both);
        let _ = w.join();
    }
    answer.map(HttpResponse::from).map_err(|e| e.to_string())
}

/// Reads one answer from `stream`, framed by its chunks, its `Content-Length` or the close,
/// each read bounded by the timeout the caller set on the socket.
pub fn read_response(stream: &mut impl Read) -> Result<HttpResponse, String> {
    Conn::new(Preset(stream), CONNECT_TIMEOUT, LIMITS)
        .read_answer(false)
        .map(HttpResponse::from)
        .map_err(|e| e.to_string())
}

/// A stream whose read timeout its owner already set (a TLS stream over a socket).
struct Preset<R>(R);

impl<R: Read> Read for Preset<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read> Timed for Preset<R> {
    fn set_read_timeout(&self, _: Duration) -> io::Result<()> {
        Ok(())
    }
}

impl From<Response> for HttpResponse {
    fn from(answer: Response) -> HttpResponse {
        HttpResponse {
            status: answer.head.status,
            head: answer.head.raw.trim_end_matches(['\r', '\n']).to_string(),
            headers: answer.head.headers,
            body: answer.body,
        }
    }
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
