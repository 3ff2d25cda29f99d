//! Answers written by hand on the socket where hyper has no request to
//! answer: a connection over the limit (503) and a request head that stalled
//! (408, which hyper does not send: it only closes the connection).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::log::RequestLog;

/// Longest time spent writing a refusal: the peer may not be reading.
const WRITE_LIMIT: Duration = Duration::from_secs(1);

/// Writes `status` with `why` as its body, closes the connection, and logs
/// it as a request with neither method nor target.
pub async fn refuse<W: AsyncWrite + Unpin>(
    io: &mut W,
    version: &Arc<str>,
    peer: SocketAddr,
    status: StatusCode,
    why: &str,
) {
    let log = RequestLog::new(Arc::clone(version), peer, "-", "-");
    let answer = format!(
        "HTTP/1.1 {} {}\r\nx-version: {version}\r\ncontent-type: text/plain\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{why}\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        why.len() + 1,
    );
    let _ = tokio::time::timeout(WRITE_LIMIT, async {
        io.write_all(answer.as_bytes()).await?;
        io.shutdown().await
    })
    .await;
    log.finish(status.as_u16(), why);
}
