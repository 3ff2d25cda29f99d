//! The one backend server of the tests and benchmarks, on hyper: 200 and a fixed body.
//! [`Backend::start`] also echoes the request as the backend saw it and serves one request
//! per connection; [`Backend::keep_alive`] answers many requests per connection (HAProxy
//! reuses them, so under load the backend is not what limits the rate).

use std::convert::Infallible;
use std::io;
use std::net::TcpListener as StdListener;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use http_body_util::BodyExt;
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// What the edge told the backend about the client, echoed so tests can check the real-IP
/// and forwarding logic: answer header, request header.
const ECHOED: [(&str, &str); 5] = [
    ("x-seen-real-ip", "x-real-ip"),
    ("x-seen-forwarded-proto", "x-forwarded-proto"),
    ("x-seen-forwarded-port", "x-forwarded-port"),
    ("x-seen-cf-connecting-ip", "cf-connecting-ip"),
    ("x-seen-true-client-ip", "true-client-ip"),
];

/// Real HAProxy heads carry up to its own bound of 101 headers; hyper's default is 100.
const MAX_HEADERS: usize = 1024;

/// What a recording backend received: each request's body, in order.
pub type Recorded = Arc<Mutex<Vec<Vec<u8>>>>;

/// How a backend answers.
#[derive(Clone)]
enum Mode {
    /// Echo the request in `x-seen-*` headers and close after one answer.
    Echo,
    /// A plain answer; the connection stays open for the next request.
    KeepAlive,
    /// 404 with an empty body, and close.
    NotFound,
    /// Keeps each request's body (a webhook receiver) and answers 200.
    Record(Recorded),
}

/// A backend server on 127.0.0.1 answering every request with 200 and a fixed body. It runs
/// on its own thread; drop stops it and closes its listener and connections.
pub struct Backend {
    pub port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Backend {
    /// Echoes the request (`x-seen-*` headers, lower-cased as received) and answers with
    /// `connection: close`, so each connection serves one request.
    pub fn start(body: &str) -> Backend {
        Backend::spawn(body, Mode::Echo).expect("start a backend on 127.0.0.1")
    }

    /// A webhook receiver: keeps the body of every request it gets, answers 200.
    pub fn recording() -> (Backend, Recorded) {
        let bodies = Recorded::default();
        let backend = Backend::spawn("ok", Mode::Record(bodies.clone()))
            .expect("start a recording backend on 127.0.0.1");
        (backend, bodies)
    }

    /// Answers many requests per connection, without the echo.
    pub fn keep_alive(body: &str) -> io::Result<Backend> {
        Backend::spawn(body, Mode::KeepAlive)
    }

    /// Answers every request with 404 (an app whose answers count as errors).
    pub fn not_found() -> Backend {
        Backend::spawn("", Mode::NotFound).expect("start a backend on 127.0.0.1")
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(body: &str, mode: Mode) -> io::Result<Backend> {
        let listener = StdListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let body: Arc<str> = body.into();
        let thread = thread::spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => drop(tokio::spawn(accept_all(listener, body, mode))),
                    Err(e) => eprintln!("backend on port {port}: {e}"),
                }
                let _ = stopped.await;
            });
            // Dropping the runtime cancels the accept loop and every connection's task,
            // closing their sockets.
        });
        Ok(Backend {
            port,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_all(listener: TcpListener, body: Arc<str>, mode: Mode) {
    let mut http = http1::Builder::new();
    http.max_headers(MAX_HEADERS).auto_date_header(false);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (body, mode) = (body.clone(), mode.clone());
        let answer = move |request: Request<hyper::body::Incoming>| {
            let (body, mode) = (body.clone(), mode.clone());
            async move {
                let response = match mode {
                    Mode::Echo => echo(&request, &body),
                    Mode::KeepAlive => plain(&body),
                    Mode::NotFound => not_found(),
                    Mode::Record(bodies) => {
                        let got = request.into_body().collect().await;
                        let bytes = got.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
                        bodies.lock().unwrap_or_else(|e| e.into_inner()).push(bytes);
                        plain(&body)
                    }
                };
                Ok::<_, Infallible>(response)
            }
        };
        let connection = http.serve_connection(TokioIo::new(stream), service_fn(answer));
        tokio::spawn(connection);
    }
}

fn plain(body: &str) -> Response<String> {
    let mut response = Response::new(body.to_string());
    let text = HeaderValue::from_static("text/plain");
    response.headers_mut().insert(CONTENT_TYPE, text);
    response
}

fn not_found() -> Response<String> {
    let mut response = Response::new(String::new());
    *response.status_mut() = hyper::StatusCode::NOT_FOUND;
    let close = HeaderValue::from_static("close");
    response.headers_mut().insert(CONNECTION, close);
    response
}

/// 200 with the request echoed, every value lower-cased.
fn echo<B>(request: &Request<B>, body: &str) -> Response<String> {
    let mut response = Response::new(body.to_string());
    let answer = response.headers_mut();
    // The request line as the backend received it (method, normalised URI, version).
    let line = format!(
        "{} {} {:?}",
        request.method(),
        request.uri(),
        request.version()
    );
    answer.insert("x-seen-request-line", lowered(line.as_bytes()));
    // Every X-Request-Id, comma-joined: a client's own must never arrive next to the edge's.
    let ids: Vec<String> = request
        .headers()
        .get_all("x-request-id")
        .iter()
        .map(|v| text(v.as_bytes()))
        .collect();
    answer.insert("x-seen-request-id", lowered(ids.join(",").as_bytes()));
    for (seen, name) in ECHOED {
        answer.insert(seen, first(request.headers(), name));
    }
    answer.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The first `name` header's value, lower-cased; empty when there is none.
fn first(headers: &HeaderMap, name: &str) -> HeaderValue {
    let value = headers.get(name).map_or(&[][..], HeaderValue::as_bytes);
    lowered(value)
}

fn text(value: &[u8]) -> String {
    String::from_utf8_lossy(value).trim().to_lowercase()
}

fn lowered(value: &[u8]) -> HeaderValue {
    HeaderValue::from_str(&text(value)).unwrap_or_else(|_| HeaderValue::from_static(""))
}
