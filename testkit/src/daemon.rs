//! The API daemon under test (`hapctl serve` as a child process of the test) and its calls
//! through the kit's client ([`http`]): one request per connection, JSON bodies parsed.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use hapctl::haproxy::{CliSocket, RuntimeMap};
use serde_json::Value;

use super::http::{self, HttpResponse};
use super::{free_port, Edge};

/// What the API answered.
#[derive(Debug, Clone)]
pub struct ApiResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text (de-chunked).
    pub text: String,
    /// The body parsed as JSON; `Null` when it is not JSON.
    pub json: Value,
}

impl From<HttpResponse> for ApiResponse {
    fn from(answer: HttpResponse) -> ApiResponse {
        let text = answer.text();
        ApiResponse {
            status: answer.status,
            headers: answer.headers,
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    }
}

impl ApiResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        http::header(&self.headers, name)
    }

    /// `error.code` of the API's error shape ("" when absent).
    pub fn error_code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    /// `error.field` of the API's error shape ("" when absent or null).
    pub fn error_field(&self) -> &str {
        self.json["error"]["field"].as_str().unwrap_or("")
    }
}

/// One HTTP/1.1 request to `127.0.0.1:port`. `Err` for a transport failure (refused, reset
/// before any answer, timeout).
pub fn http_call(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    content_type: Option<&str>,
    token: Option<&str>,
) -> Result<ApiResponse, String> {
    http_call_with(
        port,
        method,
        path,
        body,
        content_type,
        token.map(|t| format!("Bearer {t}")).as_deref(),
        Duration::from_secs(60),
    )
}

/// [`http_call`] with a raw `Authorization` value and a read timeout.
pub fn http_call_with(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    content_type: Option<&str>,
    authorization: Option<&str>,
    read_timeout: Duration,
) -> Result<ApiResponse, String> {
    let mut headers = Vec::new();
    if let Some(ct) = content_type {
        headers.push(("Content-Type", ct));
    }
    if let Some(auth) = authorization {
        headers.push(("Authorization", auth));
    }
    http_request(port, method, path, &headers, body, read_timeout)
}

/// One HTTP/1.1 request to `127.0.0.1:port` with these headers (`Host` defaults to the
/// address; `Content-Length` and `Connection: close` are added).
pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    read_timeout: Duration,
) -> Result<ApiResponse, String> {
    let default_host = format!("127.0.0.1:{port}");
    let host = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or(default_host.as_str(), |(_, v)| v);
    let others: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
        .copied()
        .collect();
    let raw = http::raw_request(method, path, host, &others, Some(body.unwrap_or_default()));
    http_send_raw(port, &raw, read_timeout)
}

/// How to reach a running daemon; cheap to clone into threads.
#[derive(Debug, Clone)]
pub struct ApiClient {
    pub port: u16,
    pub token: String,
}

impl ApiClient {
    /// A request with the right token and, when there is a body, `application/json`.
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<ApiResponse, String> {
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
        http_call(
            self.port,
            method,
            path,
            bytes.as_deref(),
            bytes.as_ref().map(|_| "application/json"),
            Some(&self.token),
        )
    }

    /// [`ApiClient::try_call`], panicking on a transport failure.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> ApiResponse {
        self.try_call(method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn get(&self, path: &str) -> ApiResponse {
        self.call("GET", path, None)
    }

    /// A request with the right token and raw bytes / content type.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        content_type: Option<&str>,
    ) -> ApiResponse {
        http_call(
            self.port,
            method,
            path,
            body,
            content_type,
            Some(&self.token),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// The keys of `GET /v1/blocked-ips`, every page (the database, expired entries left out).
    pub fn blocked_keys(&self) -> BTreeSet<String> {
        let mut keys = BTreeSet::new();
        let mut path = "/v1/blocked-ips?limit=10000".to_string();
        loop {
            let r = self.get(&path);
            assert_eq!(r.status, 200, "{r:?}");
            let page = r.json["blocks"]
                .as_array()
                .unwrap_or_else(|| panic!("not a page: {r:?}"));
            keys.extend(
                page.iter()
                    .map(|b| b["key"].as_str().expect("a block's key").to_string()),
            );
            match r.json["next"].as_str() {
                Some(next) => {
                    path = format!(
                        "/v1/blocked-ips?limit=10000&after={}",
                        next.replace('/', "%2F")
                    )
                }
                None => return keys,
            }
        }
    }

    /// The names of `GET /v1/domains`.
    pub fn domain_names(&self) -> BTreeSet<String> {
        let r = self.get("/v1/domains");
        assert_eq!(r.status, 200, "{r:?}");
        r.json
            .as_array()
            .unwrap_or_else(|| panic!("not a list: {r:?}"))
            .iter()
            .map(|d| d["domain"].as_str().expect("a domain's name").to_string())
            .collect()
    }
}

/// How `hapctl serve` is started: extra arguments, extra environment, and how long it may
/// take to answer `/health`.
#[derive(Debug, Clone, Copy)]
pub struct Serve<'a> {
    /// More arguments for `serve` (e.g. `--no-auth`).
    pub args: &'a [&'a str],
    /// Environment for the daemon alone, over the edge's.
    pub env: &'a [(&'a str, &'a str)],
    pub bound: Duration,
}

impl Serve<'static> {
    /// No extra argument or environment; `/health` within `bound`.
    pub fn within(bound: Duration) -> Serve<'static> {
        Serve {
            args: &[],
            env: &[],
            bound,
        }
    }
}

/// `hapctl serve` running against an [`Edge`]'s state dir, as a child of the test. Stopped on
/// drop (SIGTERM, then SIGKILL). Declare it after the `Edge` so it is dropped first.
pub struct Daemon {
    child: Option<Child>,
    pub client: ApiClient,
    pub log: PathBuf,
    /// From spawn to the first `GET /health` answering 200 (zero until then).
    pub startup: Duration,
    spawned: Instant,
}

impl std::ops::Deref for Daemon {
    type Target = ApiClient;
    fn deref(&self) -> &ApiClient {
        &self.client
    }
}

impl Daemon {
    /// Starts `serve` on a free loopback port and waits until `GET /health` answers 200.
    pub fn start(edge: &Edge) -> Daemon {
        Daemon::start_with(edge, &[])
    }

    /// [`Daemon::start`] with more arguments for `serve` (e.g. `--no-auth`).
    pub fn start_with(edge: &Edge, extra: &[&str]) -> Daemon {
        let serve = Serve {
            args: extra,
            ..Serve::within(Duration::from_secs(30))
        };
        Daemon::try_start(edge, &serve).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Starts `serve` on a free loopback port and waits until `GET /health` answers 200.
    /// A port something outside the tests took between `free_port`'s probe and this bind is
    /// tried again on a new one.
    pub fn try_start(edge: &Edge, serve: &Serve) -> anyhow::Result<Daemon> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut daemon = Daemon::try_spawn(edge, free_port(), serve.args, serve.env)?;
            match daemon.healthy_within(serve.bound) {
                Ok(()) => return Ok(daemon),
                Err(why) if tries < 5 && why.contains("Address already in use") => {}
                Err(why) => anyhow::bail!("{why}"),
            }
        }
    }

    /// Starts `serve --listen 127.0.0.1:port` without waiting.
    pub fn spawn(edge: &Edge, port: u16, extra: &[&str]) -> Daemon {
        Daemon::try_spawn(edge, port, extra, &[]).unwrap_or_else(|e| panic!("{e:#}"))
    }

    fn try_spawn(
        edge: &Edge,
        port: u16,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Daemon> {
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec!["serve", "--listen", &listen];
        args.extend_from_slice(extra);
        let log = edge.path(&format!("serve-{port}.log"));
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let token = std::fs::read_to_string(edge.path("api-token"))
            .context("the API token file written by hapctl init")?
            .trim()
            .to_string();
        let mut cmd = edge.command(&args);
        cmd.envs(env.iter().copied())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let spawned = Instant::now();
        let child = cmd.spawn().context("spawn hapctl serve")?;
        Ok(Daemon {
            child: Some(child),
            client: ApiClient { port, token },
            log,
            startup: Duration::ZERO,
            spawned,
        })
    }

    /// Polls `GET /health` (no token) until it answers 200.
    pub fn wait_healthy(&mut self, timeout: Duration) {
        if let Err(why) = self.healthy_within(timeout) {
            panic!("{why}");
        }
    }

    /// [`Daemon::wait_healthy`], saying why not instead of panicking.
    fn healthy_within(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                self.child = None;
                return Err(format!(
                    "hapctl serve exited ({status}) before answering /health:\n{}",
                    self.log_text()
                ));
            }
            let last = match http_call_with(
                self.port,
                "GET",
                "/health",
                None,
                None,
                None,
                Duration::from_secs(5),
            ) {
                Ok(r) if r.status == 200 => {
                    self.startup = self.spawned.elapsed();
                    return Ok(());
                }
                Ok(r) => format!("{} {}", r.status, r.text),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "hapctl serve never answered /health with 200 within {timeout:?}; last: {last}\n{}",
                    self.log_text()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn client(&self) -> ApiClient {
        self.client.clone()
    }

    pub fn pid(&self) -> i32 {
        self.running_pid().expect("the daemon runs")
    }

    /// The daemon's PID while it runs (not yet reaped).
    pub fn running_pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    pub fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// Waits for the daemon to exit; `None` if it still runs after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        self.wait_exit(Duration::from_secs(10))
            .expect("the daemon exits on SIGKILL");
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Daemon {
    /// SIGTERM, then SIGKILL if it is still there after 5 s; nothing once it exited.
    pub fn stop(&mut self) {
        if self.child.is_none() {
            return;
        }
        self.signal(libc::SIGTERM);
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            self.signal(libc::SIGKILL);
            let _ = self.wait_exit(Duration::from_secs(5));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            super::print_tail("the daemon's log", &self.log, 60);
        }
        self.stop();
    }
}

/// The keys the edge's blocked map files hold: the base map (`live/maps/blocked.map`) and the
/// delta map beside it, which HAProxy matches together.
pub fn blocked_map_file_keys(edge: &Edge) -> BTreeSet<String> {
    BLOCKED_MAPS
        .iter()
        .flat_map(|m| {
            std::fs::read_to_string(edge.path(m))
                .unwrap_or_default()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The two blocked maps, base and delta.
pub const BLOCKED_MAPS: [&str; 2] = ["live/maps/blocked.map", "live/maps/blocked-delta.map"];

/// The keys of both blocked maps as the current worker holds them (`@1 show map` through the
/// master socket); no key may be there twice.
pub fn runtime_blocked_keys(edge: &Edge) -> BTreeSet<String> {
    let mut keys = Vec::new();
    for m in BLOCKED_MAPS {
        let map = RuntimeMap::new(
            CliSocket::new(edge.path("run/master.sock"), Duration::from_secs(5)),
            edge.path(m).display().to_string(),
        );
        keys.extend(map.keys().expect("show map through the master socket"));
    }
    let set: BTreeSet<String> = keys.iter().cloned().collect();
    assert_eq!(
        set.len(),
        keys.len(),
        "the runtime maps hold duplicate keys: {keys:?}"
    );
    set
}

/// Sends `raw` (a whole request, head and body, exactly as given: nothing is added) to
/// `127.0.0.1:port` and parses the answer. For requests [`http_request`] cannot make: chunked
/// bodies, a `Content-Length` that lies, several of them.
pub fn http_send_raw(port: u16, raw: &[u8], read_timeout: Duration) -> Result<ApiResponse, String> {
    let stream = http::connect(None, port)?;
    http::exchange(stream, raw, read_timeout).map(ApiResponse::from)
}

/// One request over TLS to `127.0.0.1:port`, verified for `server_name` by `config` (which
/// also carries the client certificate, if any): the kit's request and answer over a rustls
/// stream. `Err` for a refused handshake as for a transport failure.
pub fn https_request(
    port: u16,
    config: std::sync::Arc<rustls::ClientConfig>,
    server_name: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<ApiResponse, String> {
    use std::io::Write;
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| format!("server name {server_name}: {e}"))?;
    let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let sock = http::connect(None, port)?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .and_then(|_| sock.set_write_timeout(Some(Duration::from_secs(30))))
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let raw = http::raw_request(method, path, server_name, headers, None);
    tls.write_all(&raw)
        .and_then(|_| tls.flush())
        .map_err(|e| format!("TLS: {e}"))?;
    http::read_response(&mut tls).map(ApiResponse::from)
}

/// `bytes` percent-encoded for one path segment: everything but the unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) becomes `%HH`, so `/`, `%`, `?`, `#`, controls and non-ASCII bytes
/// all stay inside the segment.
pub fn percent_encode_segment(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One operation of the API's OpenAPI document.
#[derive(Debug, Clone)]
pub struct ApiRoute {
    /// Upper case: `POST`.
    pub method: String,
    /// As documented, with `{param}` placeholders.
    pub path: String,
    /// The JSON Schema of the request body, when the route takes one.
    pub body: Option<Value>,
}

impl ApiRoute {
    /// The names of the path's `{param}` placeholders.
    pub fn params(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(String::from)
            .collect()
    }
}

impl ApiClient {
    /// Every operation of `GET /openapi.json`, sorted by path then method.
    pub fn routes(&self) -> Vec<ApiRoute> {
        let r = self.get("/openapi.json");
        assert_eq!(r.status, 200, "GET /openapi.json: {r:?}");
        let paths = r.json["paths"]
            .as_object()
            .unwrap_or_else(|| panic!("/openapi.json has no paths: {}", r.text));
        let mut routes = Vec::new();
        for (path, ops) in paths {
            for (method, op) in ops.as_object().into_iter().flatten() {
                routes.push(ApiRoute {
                    method: method.to_ascii_uppercase(),
                    path: path.clone(),
                    body: op
                        .pointer("/requestBody/content/application~1json/schema")
                        .cloned(),
                });
            }
        }
        routes.sort_by(|a, b| (&a.path, &a.method).cmp(&(&b.path, &b.method)));
        routes
    }

    /// The operations of [`ApiClient::routes`] whose method changes state (POST, PUT, PATCH,
    /// DELETE).
    pub fn mutating_routes(&self) -> Vec<ApiRoute> {
        self.routes()
            .into_iter()
            .filter(|r| matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
            .collect()
    }

    /// One request with the right token, these extra headers, and `body` as is (no content
    /// type unless given in `headers`).
    pub fn request(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
        read_timeout: Duration,
    ) -> Result<ApiResponse, String> {
        let bearer = format!("Bearer {}", self.token);
        let mut all = vec![("Authorization", bearer.as_str())];
        all.extend_from_slice(headers);
        http_request(self.port, method, target, &all, body, read_timeout)
    }
}
