//! End-to-end tests: start the built `demo-app` binary on a free loopback
//! port (the test kit's) and read its answers with the workspace's one HTTP
//! reader (the kit's, `prove`'s), checking the framing strictly on what it
//! hands back as received (CRLF lines, one framing, chunk arrival times).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use testkit::http::{self, Conn};
use testkit::{free_port, run_bounded};

const BIN: &str = env!("CARGO_BIN_EXE_demo-app");
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `demo-app`, killed when dropped so it never outlives the test.
struct Server {
    child: Child,
    port: u16,
    spawned: Instant,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(version: &str, extra: &[&str]) -> Server {
        // The port picked may be taken between our probe and the child's
        // bind: retry with another one if the child exits at startup.
        for _ in 0..5 {
            let port = free_port();
            let spawned = Instant::now();
            let mut child = Command::new(BIN)
                .args(["--version", version, "--port", &port.to_string()])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn demo-app");
            let logs = Arc::new(Mutex::new(Vec::new()));
            let stderr = child.stderr.take().unwrap();
            let sink = Arc::clone(&logs);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    sink.lock().unwrap().push(line);
                }
            });
            let server = Server {
                child,
                port,
                spawned,
                logs,
            };
            let mut server = server;
            let deadline = Instant::now() + IO_TIMEOUT;
            loop {
                if let Some(status) = server.child.try_wait().unwrap() {
                    eprintln!("demo-app exited at startup ({status}): {:?}", server.logs());
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return server;
                }
                assert!(
                    Instant::now() < deadline,
                    "demo-app did not start listening"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("could not start demo-app");
    }

    fn connect(&self) -> Client {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        Client {
            writer: s.try_clone().unwrap(),
            conn: http::reader(s, IO_TIMEOUT),
            version: "HTTP/1.1",
        }
    }

    fn get(&self, target: &str) -> Response {
        self.connect().request("GET", target)
    }

    fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Waits until a stderr line contains `needle`.
    fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + IO_TIMEOUT;
        while !self.logs().iter().any(|l| l.contains(needle)) {
            assert!(
                Instant::now() < deadline,
                "no log line with {needle:?} in {:#?}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Chunks of a chunked body, with their arrival time.
    chunks: Vec<(Vec<u8>, Instant)>,
    chunked: bool,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        let mut found = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let first = found.next().map(|(_, v)| v.as_str());
        assert!(found.next().is_none(), "header {name} repeated");
        first
    }

    fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

struct Client {
    /// The socket itself, for sending and for seeing the close.
    writer: TcpStream,
    conn: Conn<TcpStream>,
    /// The version of the last request sent, which the status line repeats.
    version: &'static str,
}

impl Client {
    fn send(&mut self, raw: &[u8]) {
        let http10 = raw.windows(10).any(|w| w == b" HTTP/1.0\r");
        self.version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
        self.writer.write_all(raw).unwrap();
    }

    fn request(&mut self, method: &str, target: &str) -> Response {
        self.send(format!("{method} {target} HTTP/1.1\r\nhost: test\r\n\r\n").as_bytes());
        self.read_response(method == "HEAD")
    }

    /// Reads one response, checking its framing strictly: it must be
    /// delimited either by content-length or by chunked encoding.
    fn read_response(&mut self, head_only: bool) -> Response {
        let head = self.conn.read_head().expect("read the head");
        for line in head.raw.split_inclusive('\n') {
            assert!(line.ends_with("\r\n"), "line not ended by CRLF: {line:?}");
        }
        let status_line = head.raw.lines().next().unwrap_or_default();
        // Changed for hyper: it answers an HTTP/1.0 request with an HTTP/1.0
        // status line (the old server always said HTTP/1.1); both are valid
        // (RFC 9110, 2.5) and no hapctl test reads the status line's version.
        assert_eq!(head.version(), self.version, "{status_line}");
        for line in head.raw.lines().skip(1).filter(|l| !l.is_empty()) {
            assert!(line.contains(':'), "header colon: {line:?}");
        }
        let mut r = Response {
            status: head.status,
            headers: head.headers.clone(),
            body: Vec::new(),
            chunks: Vec::new(),
            chunked: false,
        };
        let te = r.header("transfer-encoding").map(str::to_string);
        let cl = r.header("content-length").map(str::to_string);
        match (te, cl) {
            (Some(te), None) => {
                assert_eq!(te, "chunked");
                r.chunked = true;
                if !head_only {
                    self.read_chunks(&mut r);
                }
            }
            (None, Some(_)) => {
                if !head_only {
                    r.body = self.conn.read_body(&head).expect("read the body");
                }
            }
            // Changed for hyper: it sends no transfer-encoding on a HEAD
            // answer whose length is unknown (`/stream`), where the old
            // server sent `chunked`; a HEAD answer has no body to frame
            // (RFC 9112, 6.3) and no hapctl test sends HEAD to the app.
            (None, None) if head_only => {}
            other => panic!("response without exactly one framing: {other:?} {r:?}"),
        }
        r
    }

    /// A chunked body, each chunk with its arrival time; every size line is
    /// the bare hex size, and the body ends with no trailers.
    fn read_chunks(&mut self, r: &mut Response) {
        while let Some(data) = self.conn.next_chunk().expect("read a chunk") {
            let size_line = self.conn.chunk_framing();
            let size = size_line
                .strip_suffix("\r\n")
                .and_then(|hex| usize::from_str_radix(hex, 16).ok());
            assert_eq!(size, Some(data.len()), "bad chunk size {size_line:?}");
            r.body.extend_from_slice(&data);
            r.chunks.push((data, Instant::now()));
        }
        assert_eq!(
            self.conn.chunk_framing(),
            "0\r\n\r\n",
            "no trailers expected"
        );
    }

    /// True when the server closes the connection (EOF) within the timeout.
    fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 64];
        matches!(self.writer.read(&mut buf), Ok(0))
    }
}

fn check_version_header(r: &Response, v: &str) {
    assert_eq!(r.header("x-version"), Some(v), "{r:?}");
}

#[test]
fn routes() {
    let v = "1.4.2";
    let s = Server::start(v, &[]);

    let r = s.get("/version");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, v.as_bytes(), "body is exactly V, no newline");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    check_version_header(&r, v);

    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "1.4.2\n");
    check_version_header(&r, v);

    let r = s.get("/ready");
    assert_eq!((r.status, r.text()), (200, "ready\n"));
    check_version_header(&r, v);

    for path in ["/nope", "/version/", "/Version", "/ready/x", "/stream/x"] {
        let r = s.get(path);
        assert_eq!(r.status, 404, "{path}");
        check_version_header(&r, v);
    }

    // A body is skipped according to its content-length, so the next
    // request on the connection is parsed correctly.
    let mut c = s.connect();
    c.send(b"POST /version HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\n\r\nhello");
    let r = c.read_response(false);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    check_version_header(&r, v);
    let r = c.request("GET", "/");
    assert_eq!((r.status, r.text()), (200, "1.4.2\n"));

    // HEAD is GET without a body.
    let r = c.request("HEAD", "/version");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("5"));
    check_version_header(&r, v);
    let r = c.request("HEAD", "/stream?lines=3&interval_ms=60000");
    assert_eq!(r.status, 200);
    // Changed for hyper (was `assert!(r.chunked)`): no transfer-encoding on
    // HEAD, see `read_response`; still not announced as an empty body.
    assert_eq!(r.header("content-length"), None);
    let r = c.request("GET", "/version");
    assert_eq!(r.text(), v, "HEAD responses sent no body");

    // One log line per request, with method, path and status.
    s.wait_log("GET /version 200");
    s.wait_log("POST /version 405");
    s.wait_log("GET /nope 404");
    s.wait_log("HEAD /version 200");
}

#[test]
fn stream() {
    let v = "1.5.0";
    let s = Server::start(v, &[]);
    let mut c = s.connect();
    let sent = Instant::now();
    let r = c.request("GET", "/stream?lines=5&interval_ms=20");
    let elapsed = sent.elapsed();
    assert_eq!(r.status, 200);
    assert!(r.chunked);
    assert_eq!(r.header("content-length"), None);
    check_version_header(&r, v);
    assert_eq!(r.chunks.len(), 5, "{r:?}");
    for (i, (chunk, _)) in r.chunks.iter().enumerate() {
        assert_eq!(
            std::str::from_utf8(chunk).unwrap(),
            format!("1.5.0 {}/5\n", i + 1),
            "each line is its own chunk"
        );
    }
    assert!(r.text().lines().all(|l| l.starts_with("1.5.0 ")));
    assert!(elapsed >= Duration::from_millis(80), "{elapsed:?}");
    // Lines are flushed one by one, not buffered until the end.
    let spread = r.chunks[4].1 - r.chunks[0].1;
    assert!(
        spread >= Duration::from_millis(60),
        "chunks arrived together: {spread:?}"
    );

    // The zero chunk ended the body: the connection is reusable.
    let r = c.request("GET", "/version");
    assert_eq!(r.text(), v);

    // Defaults and bounds of the parameters.
    let r = s.get("/stream?lines=1");
    assert_eq!(r.text(), "1.5.0 1/1\n");
    let r = s.get("/stream?lines=0");
    assert_eq!((r.status, r.chunks.len()), (200, 0));
    let r = s.get("/stream?lines=3&interval_ms=0&other=x");
    assert_eq!(r.text(), "1.5.0 1/3\n1.5.0 2/3\n1.5.0 3/3\n");
    for q in [
        "lines=abc",
        "lines=-1",
        "lines=100001",
        "interval_ms=60001",
        "interval_ms=",
        "lines=2&lines=3",
    ] {
        let r = s.get(&format!("/stream?{q}"));
        assert_eq!(r.status, 400, "{q}");
        check_version_header(&r, v);
    }

    // HTTP/1.0 cannot take chunked encoding: the length is announced.
    let mut c = s.connect();
    c.send(b"GET /stream?lines=2&interval_ms=10 HTTP/1.0\r\n\r\n");
    let r = c.read_response(false);
    assert!(!r.chunked);
    assert_eq!(r.text(), "1.5.0 1/2\n1.5.0 2/2\n");
    assert!(c.closed_by_server());
    s.wait_log("GET /stream?lines=5&interval_ms=20 200 5 lines");
}

#[test]
fn ready_delay_and_path() {
    let delay = Duration::from_millis(2000);
    let s = Server::start(
        "2.0",
        &["--ready-delay-ms", "2000", "--ready-path", "/pret"],
    );
    let r = s.get("/pret");
    assert!(
        s.spawned.elapsed() < delay,
        "machine too slow to observe the delay"
    );
    assert_eq!((r.status, r.text()), (503, "not ready\n"));
    check_version_header(&r, "2.0");
    // Other routes answer while not ready.
    assert_eq!(s.get("/version").status, 200);
    assert_eq!(s.get("/ready").status, 404, "the ready path was moved");
    let r = loop {
        let r = s.get("/pret");
        if r.status != 503 {
            break r;
        }
        assert!(s.spawned.elapsed() < delay * 5, "never became ready");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(s.spawned.elapsed() >= delay);
    assert_eq!((r.status, r.text()), (200, "ready\n"));
}

#[test]
fn keep_alive() {
    let s = Server::start("ka", &[]);
    let mut c = s.connect();
    let r1 = c.request("GET", "/version");
    let r2 = c.request("GET", "/");
    assert_eq!((r1.text(), r2.text()), ("ka", "ka\n"));
    assert_eq!(r1.header("connection"), None);

    // Pipelined requests are answered in order.
    c.send(b"GET /version HTTP/1.1\r\nhost: t\r\n\r\nGET /ready HTTP/1.1\r\nhost: t\r\n\r\n");
    assert_eq!(c.read_response(false).text(), "ka");
    assert_eq!(c.read_response(false).text(), "ready\n");

    // `connection: close` is honoured.
    c.send(b"GET / HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed_by_server());

    // HTTP/1.0 closes by default, keeps the connection on request.
    let mut c = s.connect();
    c.send(b"GET /version HTTP/1.0\r\n\r\n");
    assert_eq!(c.read_response(false).text(), "ka");
    assert!(c.closed_by_server());
    let mut c = s.connect();
    c.send(b"GET /version HTTP/1.0\r\nconnection: keep-alive\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(c.read_response(false).text(), "ka\n");
    assert!(c.closed_by_server());
}

#[test]
fn limits_and_timeouts() {
    let s = Server::start("lim", &["--idle-timeout-ms", "300"]);

    let mut c = s.connect();
    c.send(format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(9000)).as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 414);
    check_version_header(&r, "lim");
    assert!(c.closed_by_server());

    let mut c = s.connect();
    let mut raw = String::from("GET / HTTP/1.1\r\n");
    for i in 0..65 {
        raw.push_str(&format!("x-{i}: v\r\n"));
    }
    c.send(format!("{raw}\r\n").as_bytes());
    assert_eq!(c.read_response(false).status, 431);
    assert!(c.closed_by_server());

    let mut c = s.connect();
    c.send(b"hello there\r\n\r\n");
    assert_eq!(c.read_response(false).status, 400);
    assert!(c.closed_by_server());

    // An idle connection is closed after the idle timeout.
    let mut c = s.connect();
    assert_eq!(c.request("GET", "/").status, 200);
    let idle = Instant::now();
    assert!(c.closed_by_server());
    let waited = idle.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // A client that starts a request and stalls gets a 408 once the head
    // timeout (here bounded by the idle timeout) has passed.
    let mut c = s.connect();
    c.send(b"GET / HT");
    let r = c.read_response(false);
    assert_eq!(r.status, 408);
    check_version_header(&r, "lim");
    assert!(c.closed_by_server());

    // A client that gives up mid-request does not disturb the server.
    let mut c = s.connect();
    c.send(b"GET / HT");
    drop(c);
    assert_eq!(s.get("/version").text(), "lim");
}

#[test]
fn connection_limit() {
    let s = Server::start("max", &["--max-connections", "1"]);
    // The start-up probe may still hold the only slot for a moment.
    let mut held = wait_served(&s);
    assert_eq!(held.request("GET", "/").status, 200);

    // Over the limit: 503, with x-version, then close; no request needed.
    let mut over = s.connect();
    let r = over.read_response(false);
    assert_eq!(r.status, 503);
    check_version_header(&r, "max");
    assert!(over.closed_by_server());
    s.wait_log("503 too many connections");

    // Once the held connection is gone, new ones are served again.
    drop(held);
    assert_eq!(wait_served(&s).request("GET", "/version").text(), "max");
}

/// Opens a connection that gets served (not refused with 503 for lack of a
/// free slot), retrying while the slots are busy.
fn wait_served(s: &Server) -> Client {
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let mut c = s.connect();
        let r = c.request("GET", "/version");
        if r.status == 200 {
            return c;
        }
        assert_eq!(r.status, 503);
        assert!(Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the binary with `args`, expecting it to exit by itself.
fn run_to_exit(args: &[&str]) -> (ExitStatus, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    let out = run_bounded(cmd, IO_TIMEOUT);
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_arguments_exit_2() {
    let port = free_port().to_string();
    let long = "a".repeat(65);
    for version in ["bad version!", "1.0/2", "", "é", long.as_str()] {
        let (status, _, stderr) = run_to_exit(&["--version", version, "--port", &port]);
        assert_eq!(status.code(), Some(2), "{version:?}: {stderr}");
        assert!(stderr.contains("invalid --version"), "{stderr}");
        assert!(stderr.contains("[A-Za-z0-9._-]"), "{stderr}");
    }
    let (status, _, stderr) = run_to_exit(&["--version", "1.0"]);
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("--port is required"), "{stderr}");
    let (status, _, stderr) = run_to_exit(&["--version", "1.0", "--port", "x"]);
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("invalid --port"), "{stderr}");

    let (status, stdout, _) = run_to_exit(&["--help"]);
    assert!(status.success());
    assert!(stdout.contains("--ready-delay-ms"));
}
