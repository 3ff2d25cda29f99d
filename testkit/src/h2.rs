//! HTTP/2 over TLS to the edge, as a browser speaks it on TCP: one TLS connection (the kit's
//! TLS settings, ALPN h2) kept open, requests one after another on it, through hyper's HTTP/2
//! client; every step bounded in time.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::rt::{header_pairs, runtime, Answer, Peer};

/// Bound on the connection (TCP, TLS, HTTP/2 settings), and on one request from its sending
/// to the end of the body.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One TLS connection to the edge speaking HTTP/2, closed on drop.
pub struct H2Client {
    requests: http2::SendRequest<Empty<Bytes>>,
    driving: tokio::task::JoinHandle<()>,
    peer: Peer,
    // Last: the connection's task and socket go before their runtime.
    runtime: tokio::runtime::Runtime,
}

impl H2Client {
    /// Connects to `127.0.0.1:port` (TCP) with SNI `host`; an error unless the edge agrees
    /// to HTTP/2.
    pub fn connect(port: u16, host: &str) -> Result<H2Client, String> {
        let runtime = runtime("HTTP/2")?;
        let peer = Peer::loopback("HTTP/2", port, host);
        let (requests, driving) = peer.within(&runtime, TIMEOUT, connect(&peer))?;
        Ok(H2Client {
            requests,
            driving,
            peer,
            runtime,
        })
    }

    /// `GET https://host/path` on the kept connection.
    pub fn get(&mut self, path: &str) -> Result<Answer, String> {
        let request = get(&mut self.requests, &self.peer, path);
        self.peer.within(&self.runtime, TIMEOUT, request)
    }
}

impl Drop for H2Client {
    fn drop(&mut self) {
        self.driving.abort();
    }
}

async fn connect(
    peer: &Peer,
) -> Result<
    (
        http2::SendRequest<Empty<Bytes>>,
        tokio::task::JoinHandle<()>,
    ),
    String,
> {
    let tcp = tokio::net::TcpStream::connect(peer.to)
        .await
        .map_err(|e| peer.failed("connect", e))?;
    tcp.set_nodelay(true)
        .map_err(|e| peer.failed("TCP_NODELAY", e))?;
    let mut config = hapctl::tls::probe::client_config(None);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls::pki_types::ServerName::try_from(peer.host.clone())
        .map_err(|e| peer.failed("server name", e))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| peer.failed("TLS handshake", e))?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(peer.failed(
            "ALPN",
            "the edge did not agree to h2 (check `alpn h2` on the HTTPS bind)",
        ));
    }
    let (requests, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
        .await
        .map_err(|e| peer.failed("HTTP/2 setup", e))?;
    let driving = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((requests, driving))
}

async fn get(
    requests: &mut http2::SendRequest<Empty<Bytes>>,
    peer: &Peer,
    path: &str,
) -> Result<Answer, String> {
    let request = http::Request::get(format!("https://{}{path}", peer.host))
        .body(Empty::new())
        .map_err(|e| peer.failed("request", e))?;
    requests
        .ready()
        .await
        .map_err(|e| peer.failed("connection", e))?;
    let answer = requests
        .send_request(request)
        .await
        .map_err(|e| peer.failed("send", e))?;
    let status = answer.status().as_u16();
    let headers = header_pairs(answer.headers());
    let body = answer
        .into_body()
        .collect()
        .await
        .map_err(|e| peer.failed("body", e))?
        .to_bytes();
    Ok(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
