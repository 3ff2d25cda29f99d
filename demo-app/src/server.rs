//! Accepting connections and serving them with hyper: the connection limit,
//! the timeouts, and what every request of the app gets on its way in (the
//! head limits) and out (`x-version`, the request's log line).

use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
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

use crate::app::App;
use crate::limits;
use crate::log::{self, LoggedByBody, RequestLog};
use crate::refusal::refuse;
use crate::routes;
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
        let (mut stream, peer) = match listener.accept().await {
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
                let idle_timeout = limits.idle_timeout;
                tokio::spawn(connection(stream, peer, app, router, idle_timeout, slot));
            }
            Err(_) => {
                tokio::spawn(async move {
                    // Refused without waiting for a request: drop what the
                    // client already sent, so that closing does not reset.
                    let _ = stream.try_read(&mut [0u8; 8192]);
                    let status = StatusCode::SERVICE_UNAVAILABLE;
                    refuse(
                        &mut stream,
                        &app.version,
                        peer,
                        status,
                        "too many connections",
                    )
                    .await;
                });
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
    let service = {
        let app = Arc::clone(&app);
        // Boxed: hyper hands the socket back (below) only to Unpin services.
        service_fn(move |req| Box::pin(respond(Arc::clone(&app), router.clone(), peer, req)))
    };
    let mut served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout)
        .max_headers(MAX_HEADERS)
        .auto_date_header(false)
        .serve_connection(io, service);
    // Without hyper's shutdown, so that the socket is still ours to answer a
    // stalled request head.
    let outcome = poll_fn(|cx| served.poll_without_shutdown(cx)).await;
    let parts = served.into_parts();
    let mut socket = parts.io.into_inner();
    if let Err(e) = outcome {
        // The timeout is the same whether a head has started or not: only
        // one that has started (and is still buffered) gets an answer.
        if e.is_timeout() && !parts.read_buf.is_empty() {
            let status = StatusCode::REQUEST_TIMEOUT;
            refuse(
                &mut socket,
                &app.version,
                peer,
                status,
                "request head timed out",
            )
            .await;
            return;
        }
        // hyper answered 400, 414 or 431 itself.
        if e.is_parse() {
            log::line(&app.version, format_args!("{peer} - - refused: {e}"));
        }
    }
    let _ = socket.shutdown().await;
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
    let (mut res, note) = match limits::check(&req) {
        Some(refusal) => (refusal.response(), refusal.why),
        None => {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(log.clone());
            (router.oneshot(req).await?, String::new())
        }
    };
    res.headers_mut().insert("x-version", app.x_version.clone());
    if res.extensions().get::<LoggedByBody>().is_none() {
        log.finish(res.status().as_u16(), &note);
    }
    Ok(res)
}
