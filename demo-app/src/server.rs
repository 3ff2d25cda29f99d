//! Accepting connections and serving them with hyper: the connection limit,
//! the timeouts, and what every response of the app gets on its way out
//! (`x-version`, the request's log line).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::log::{self, LoggedByBody, RequestLog};
use crate::routes::{self, App};
use crate::write_timeout::WriteTimeout;

/// Most header lines accepted in a request (431 beyond, from hyper).
const MAX_HEADERS: usize = 64;

pub struct Limits {
    /// Connections served at once; beyond, 503 and close.
    pub max_connections: usize,
    /// Longest wait for a request head (from the end of the previous
    /// response on a kept-alive connection), and longest blocked write.
    pub idle_timeout: Duration,
}

pub async fn serve(listener: TcpListener, app: Arc<App>, limits: Limits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let router = routes::router(Arc::clone(&app));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                log::line(&app.version, format_args!("accept failed: {e}"));
                // Out of descriptors or similar: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let app = Arc::clone(&app);
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                let router = router.clone();
                tokio::spawn(connection(
                    stream,
                    peer,
                    app,
                    router,
                    limits.idle_timeout,
                    slot,
                ));
            }
            Err(_) => {
                tokio::spawn(reject(stream, peer, app));
            }
        }
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Arc<App>,
    router: Router,
    idle_timeout: Duration,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(WriteTimeout::new(stream, idle_timeout));
    let version = Arc::clone(&app.version);
    let service = service_fn(move |req| respond(Arc::clone(&app), router.clone(), peer, req));
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout)
        .max_headers(MAX_HEADERS)
        .auto_date_header(false)
        .serve_connection(io, service)
        .await;
    match served {
        // hyper answered 400, 414 or 431 itself.
        Err(e) if e.is_parse() => {
            log::line(&version, format_args!("{peer} - - refused: {e}"));
        }
        _ => {}
    }
}

async fn respond(
    app: Arc<App>,
    router: Router,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response, Infallible> {
    let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let log = RequestLog::new(
        Arc::clone(&app.version),
        peer,
        req.method().as_str(),
        target,
    );
    let mut req = req.map(Body::new);
    req.extensions_mut().insert(log.clone());
    let mut res = router.oneshot(req).await?;
    res.headers_mut().insert("x-version", app.x_version.clone());
    if res.extensions().get::<LoggedByBody>().is_none() {
        log.finish(res.status().as_u16(), "");
    }
    Ok(res)
}

/// Refuses a connection over the limit without waiting for its request:
/// whatever the client already sent is drained, a 503 is written within a
/// second, and the connection is closed.
async fn reject(mut stream: TcpStream, peer: SocketAddr, app: Arc<App>) {
    let log = RequestLog::new(Arc::clone(&app.version), peer, "-", "-");
    let _ = stream.try_read(&mut [0u8; 8192]);
    let body = "too many connections\n";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nx-version: {}\r\ncontent-type: text/plain\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        app.version,
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    log.finish(503, "too many connections");
}
