//! The application routes. See the crate README for the contract.
//!
//! | route                                   | answer                                   |
//! |-----------------------------------------|------------------------------------------|
//! | `GET <ready-path>` (default `/ready`)   | 503 `not ready\n`, then 200 `ready\n`    |
//! | `GET /version`                          | 200, body exactly `V`                    |
//! | `GET /`                                 | 200, body `V\n`                          |
//! | `GET /stream?lines=N&interval_ms=M`     | 200 chunked, one chunk `V i/N\n` a line  |
//! | other path                              | 404                                      |
//! | known path, method not GET/HEAD         | 405 with `allow: GET, HEAD`              |
//!
//! `HEAD` is answered like `GET` without the body (axum drops it).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::header::{HeaderValue, ALLOW};
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use crate::app::{text, App};
use crate::stream;

/// Paths that `--ready-path` may not shadow.
pub const BUILTIN_PATHS: [&str; 3] = ["/", "/version", "/stream"];

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(root).fallback(not_allowed))
        .route("/version", get(version).fallback(not_allowed))
        .route("/stream", get(stream::stream).fallback(not_allowed))
        // The ready path is not a route: `--ready-path` may hold characters
        // that axum's path syntax reserves (`{`, `*`, ...).
        .fallback(ready_or_not_found)
        .with_state(app)
}

async fn root(State(app): State<Arc<App>>) -> Response {
    text(StatusCode::OK, format!("{}\n", app.version))
}

async fn version(State(app): State<Arc<App>>) -> Response {
    text(StatusCode::OK, app.version.to_string())
}

async fn not_allowed() -> Response {
    let mut res = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    res.headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    res
}

async fn ready_or_not_found(State(app): State<Arc<App>>, method: Method, uri: Uri) -> Response {
    if uri.path() != app.ready_path {
        text(StatusCode::NOT_FOUND, "not found\n")
    } else if method != Method::GET && method != Method::HEAD {
        not_allowed().await
    } else if Instant::now() >= app.ready_at {
        text(StatusCode::OK, "ready\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
    use axum::http::{HeaderMap, Request, Version};
    use tower::ServiceExt;

    use super::*;
    use crate::log::RequestLog;

    fn app(ready_in: Duration) -> Arc<App> {
        Arc::new(App {
            version: "1.5.0".into(),
            x_version: HeaderValue::from_static("1.5.0"),
            ready_path: "/pret".into(),
            ready_at: Instant::now() + ready_in,
        })
    }

    /// Runs one request through the router, as the server does.
    fn run_as(
        app: &Arc<App>,
        method: &str,
        target: &str,
        version: Version,
    ) -> (StatusCode, HeaderMap, String) {
        let mut req = Request::builder()
            .method(method)
            .uri(target)
            .version(version)
            .body(Body::empty())
            .unwrap();
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let log = RequestLog::new(Arc::clone(&app.version), peer, method, target);
        req.extensions_mut().insert(log);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let res = router(Arc::clone(app)).oneshot(req).await.unwrap();
            let (parts, body) = res.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            (
                parts.status,
                parts.headers,
                String::from_utf8(body.to_vec()).unwrap(),
            )
        })
    }

    fn run(app: &Arc<App>, method: &str, target: &str) -> (StatusCode, HeaderMap, String) {
        run_as(app, method, target, Version::HTTP_11)
    }

    #[test]
    fn routes_answer() {
        let a = app(Duration::ZERO);
        let (status, headers, body) = run(&a, "GET", "/version");
        assert_eq!((status, body.as_str()), (StatusCode::OK, "1.5.0"));
        assert_eq!(headers[CONTENT_TYPE], "text/plain");
        assert_eq!(run(&a, "GET", "/?x=1").2, "1.5.0\n");
        assert_eq!(run(&a, "GET", "/pret").0, StatusCode::OK);
        assert_eq!(run(&a, "GET", "/ready").0, StatusCode::NOT_FOUND);
        assert_eq!(run(&a, "GET", "/stream?lines=x").0, StatusCode::BAD_REQUEST);
        for path in ["/version", "/", "/stream", "/pret"] {
            let (status, headers, _) = run(&a, "DELETE", path);
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{path}");
            assert_eq!(headers[ALLOW], "GET, HEAD", "{path}");
        }
        assert_eq!(run(&a, "DELETE", "/nope").0, StatusCode::NOT_FOUND);
        let (status, headers, body) = run(&a, "HEAD", "/version");
        assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
        assert_eq!(headers[CONTENT_LENGTH], "5");

        let late = app(Duration::from_secs(3600));
        let (status, _, body) = run(&late, "GET", "/pret");
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
        );
    }

    #[test]
    fn stream_bodies() {
        let a = app(Duration::ZERO);
        let (status, headers, body) = run(&a, "GET", "/stream?lines=2&interval_ms=0");
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "1.5.0 1/2\n1.5.0 2/2\n")
        );
        assert_eq!(headers[CACHE_CONTROL], "no-store");
        assert!(
            headers.get(CONTENT_LENGTH).is_none(),
            "chunked for HTTP/1.1"
        );

        let (_, headers, body) =
            run_as(&a, "GET", "/stream?lines=2&interval_ms=0", Version::HTTP_10);
        assert_eq!(headers[CONTENT_LENGTH], "20");
        assert_eq!(body, "1.5.0 1/2\n1.5.0 2/2\n");

        let (status, headers, body) = run(&a, "HEAD", "/stream?lines=2&interval_ms=60000");
        assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
        assert!(
            headers.get(CONTENT_LENGTH).is_none(),
            "not announced as empty"
        );
    }
}
