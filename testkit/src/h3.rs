//! HTTP/3 requests, as a browser makes them to the edge: QUIC (quinn) and HTTP/3 (h3) on the
//! kit's TLS settings (any certificate accepted, so that the served one can be read), every
//! request bounded in time.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Buf;

/// Bound on one request, from the first packet to the end of the body.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long the close may take: its packets go out at once; the drain that follows (three
/// probe timeouts) is not waited for.
const CLOSE_WAIT: Duration = Duration::from_millis(25);

/// An HTTP/3 answer.
#[derive(Debug, Clone)]
pub struct H3Response {
    pub status: u16,
    /// Names lowercase, as HTTP/3 sends them.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The certificate chain the edge served, leaf first (DER).
    pub chain: Vec<Vec<u8>>,
}

impl H3Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::http::header(&self.headers, name)
    }
}

/// `GET https://host/path` over HTTP/3 to `127.0.0.1:port` (UDP), from `source` (another
/// loopback address, e.g. 127.0.0.2) when given.
pub fn h3_get(
    source: Option<Ipv4Addr>,
    port: u16,
    host: &str,
    path: &str,
) -> Result<H3Response, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the HTTP/3 client: {e}"))?;
    let from = IpAddr::V4(source.unwrap_or(Ipv4Addr::LOCALHOST));
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    runtime.block_on(async {
        match tokio::time::timeout(TIMEOUT, get(from, to, host, path)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no HTTP/3 answer from {to} within {TIMEOUT:?}")),
        }
    })
}

async fn get(from: IpAddr, to: SocketAddr, host: &str, path: &str) -> Result<H3Response, String> {
    let fail =
        |what: &'static str| move |e: String| format!("HTTP/3 to {to} (SNI {host}): {what}: {e}");
    let mut endpoint = quinn::Endpoint::client(SocketAddr::new(from, 0))
        .map_err(|e| fail("client socket")(e.to_string()))?;
    endpoint.set_default_client_config(client_config()?);
    let connection = endpoint
        .connect(to, host)
        .map_err(|e| fail("connect")(e.to_string()))?
        .await
        .map_err(|e| fail("QUIC handshake")(e.to_string()))?;
    let chain = served_chain(&connection);
    let (mut driver, mut requests) = h3::client::new(h3_quinn::Connection::new(connection))
        .await
        .map_err(|e| fail("HTTP/3 setup")(e.to_string()))?;
    let driving = tokio::spawn(async move {
        std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let request = http::Request::get(format!("https://{host}{path}"))
        .body(())
        .map_err(|e| fail("request")(e.to_string()))?;
    let mut stream = requests
        .send_request(request)
        .await
        .map_err(|e| fail("send")(e.to_string()))?;
    stream
        .finish()
        .await
        .map_err(|e| fail("send")(e.to_string()))?;
    let head = stream
        .recv_response()
        .await
        .map_err(|e| fail("response")(e.to_string()))?;
    let mut body = Vec::new();
    while let Some(mut chunk) = stream
        .recv_data()
        .await
        .map_err(|e| fail("body")(e.to_string()))?
    {
        while chunk.has_remaining() {
            let part = chunk.chunk();
            body.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    drop(requests);
    driving.abort();
    // Closed as a browser closes it: HAProxy gets the acknowledgement of its last packets and
    // the close. A client that vanished instead leaves HAProxy retransmitting, and its access
    // log line waits for the idle timeout.
    endpoint.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
    let headers = head
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    Ok(H3Response {
        status: head.status().as_u16(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        chain,
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
