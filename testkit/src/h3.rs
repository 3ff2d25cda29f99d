//! HTTP/3 requests, as a browser makes them to the edge: QUIC (quinn) and HTTP/3 (h3) on the
//! kit's TLS settings (any certificate accepted, so that the served one can be read), every
//! step bounded in time. [`H3Client`] keeps one connection for many requests; [`h3_get`] is
//! one request on a connection of its own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};

use crate::rt::{header_pairs, runtime, Answer, Peer};

/// Bound on the handshake, and on one request from its first packet to the end of the body.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long the close may take: its packets go out at once; the drain that follows (three
/// probe timeouts) is not waited for.
const CLOSE_WAIT: Duration = Duration::from_millis(25);

/// An HTTP/3 answer, and the certificate chain the edge served on its connection.
#[derive(Debug, Clone)]
pub struct H3Response {
    pub answer: Answer,
    /// Leaf first (DER).
    pub chain: Arc<Vec<Vec<u8>>>,
}

impl std::ops::Deref for H3Response {
    type Target = Answer;

    fn deref(&self) -> &Answer {
        &self.answer
    }
}

/// `GET https://host/path` over HTTP/3 to `127.0.0.1:port` (UDP), from `source` (another
/// loopback address, e.g. 127.0.0.2) when given, on a connection of its own, closed after.
pub fn h3_get(
    source: Option<Ipv4Addr>,
    port: u16,
    host: &str,
    path: &str,
) -> Result<H3Response, String> {
    H3Client::connect(source, port, host)?.get(path)
}

type Requests = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One QUIC connection to the edge kept open, requests one after another on it; closed on
/// drop as a browser closes it.
pub struct H3Client {
    endpoint: quinn::Endpoint,
    requests: Requests,
    driving: tokio::task::JoinHandle<()>,
    chain: Arc<Vec<Vec<u8>>>,
    peer: Peer,
    // Last: the connection's tasks and sockets go before their runtime.
    runtime: tokio::runtime::Runtime,
}

impl H3Client {
    /// Connects to `127.0.0.1:port` (UDP) with SNI `host`, from `source` when given.
    pub fn connect(source: Option<Ipv4Addr>, port: u16, host: &str) -> Result<H3Client, String> {
        let runtime = runtime("HTTP/3")?;
        let from = IpAddr::V4(source.unwrap_or(Ipv4Addr::LOCALHOST));
        let peer = Peer::loopback("HTTP/3", port, host);
        let (endpoint, requests, driving, chain) =
            peer.within(&runtime, TIMEOUT, connect(from, &peer))?;
        Ok(H3Client {
            endpoint,
            requests,
            driving,
            chain: Arc::new(chain),
            peer,
            runtime,
        })
    }

    /// `GET https://host/path` on the kept connection.
    pub fn get(&mut self, path: &str) -> Result<H3Response, String> {
        let request = get(&mut self.requests, &self.peer, path);
        Ok(H3Response {
            answer: self.peer.within(&self.runtime, TIMEOUT, request)?,
            chain: self.chain.clone(),
        })
    }
}

impl Drop for H3Client {
    // HAProxy gets the acknowledgement of its last packets and the close. A client that
    // vanished instead leaves HAProxy retransmitting, and its access log line waits for the
    // idle timeout.
    fn drop(&mut self) {
        self.driving.abort();
        self.endpoint.close(0u32.into(), b"done");
        let idle = self.endpoint.wait_idle();
        let _ = self
            .runtime
            .block_on(async { tokio::time::timeout(CLOSE_WAIT, idle).await });
    }
}

type Connected = (
    quinn::Endpoint,
    Requests,
    tokio::task::JoinHandle<()>,
    Vec<Vec<u8>>,
);

async fn connect(from: IpAddr, peer: &Peer) -> Result<Connected, String> {
    let mut endpoint = quinn::Endpoint::client(SocketAddr::new(from, 0))
        .map_err(|e| peer.failed("client socket", e))?;
    endpoint.set_default_client_config(client_config()?);
    let connection = endpoint
        .connect(peer.to, &peer.host)
        .map_err(|e| peer.failed("connect", e))?
        .await
        .map_err(|e| peer.failed("QUIC handshake", e))?;
    let chain = served_chain(&connection);
    let (mut driver, requests) = h3::client::new(h3_quinn::Connection::new(connection))
        .await
        .map_err(|e| peer.failed("HTTP/3 setup", e))?;
    let driving = tokio::spawn(async move {
        std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok((endpoint, requests, driving, chain))
}

async fn get(requests: &mut Requests, peer: &Peer, path: &str) -> Result<Answer, String> {
    let request = http::Request::get(format!("https://{}{path}", peer.host))
        .body(())
        .map_err(|e| peer.failed("request", e))?;
    let mut stream = requests
        .send_request(request)
        .await
        .map_err(|e| peer.failed("send", e))?;
    stream.finish().await.map_err(|e| peer.failed("send", e))?;
    let head = stream
        .recv_response()
        .await
        .map_err(|e| peer.failed("response", e))?;
    let mut body = Vec::new();
    while let Some(mut chunk) = stream
        .recv_data()
        .await
        .map_err(|e| peer.failed("body", e))?
    {
        while chunk.has_remaining() {
            let part = chunk.chunk();
            body.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    Ok(Answer {
        status: head.status().as_u16(),
        headers: header_pairs(head.headers()),
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn client_config() -> Result<quinn::ClientConfig, String> {
    let mut tls = hapctl::tls::probe::client_config(None);
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| format!("TLS settings for QUIC: {e}"))?;
    Ok(quinn::ClientConfig::new(Arc::new(quic)))
}

fn served_chain(connection: &quinn::Connection) -> Vec<Vec<u8>> {
    connection
        .peer_identity()
        .and_then(|id| {
            id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .map(|chain| chain.iter().map(|c| c.to_vec()).collect())
        .unwrap_or_default()
}
