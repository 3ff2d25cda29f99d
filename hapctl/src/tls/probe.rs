//! A real TLS handshake with SNI against the edge, to see which certificate it serves.
//!
//! The install path trusts nothing it did not see: after the runtime API says a certificate is
//! committed, a handshake through the HTTPS bind must present the new serial.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot connect to the HTTPS bind {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("TLS handshake with {addr} (SNI {sni}) failed: {message}")]
    Handshake {
        addr: SocketAddr,
        sni: String,
        message: String,
    },
    #[error("{0:?} cannot be sent as SNI")]
    BadName(String),
}

/// What the handshake showed.
#[derive(Debug, Clone)]
pub struct Served {
    /// The chain the server sent, leaf first (DER).
    pub chain: Vec<Vec<u8>>,
    /// The negotiated ALPN protocol, if any.
    pub alpn: Option<String>,
}

/// Reads whatever certificate is served: the install path checks serials, not trust.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A client configuration: verifying against `roots` as a browser would, or, without roots,
/// accepting any certificate (to read it). ALPN offers h2 and http/1.1.
pub fn client_config(roots: Option<RootCertStore>) -> ClientConfig {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports the default versions");
    let mut config = match roots {
        Some(roots) => builder.with_root_certificates(roots).with_no_client_auth(),
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// A handshake that accepts any certificate (to read it).
pub fn handshake(addr: SocketAddr, sni: &str, timeout: Duration) -> Result<Served, ProbeError> {
    run(addr, sni, timeout, client_config(None))
}

/// A handshake that must verify against `roots` for `sni`, as a browser would.
pub fn verified_handshake(
    addr: SocketAddr,
    sni: &str,
    roots: RootCertStore,
    timeout: Duration,
) -> Result<Served, ProbeError> {
    run(addr, sni, timeout, client_config(Some(roots)))
}

fn run(
    addr: SocketAddr,
    sni: &str,
    timeout: Duration,
    config: ClientConfig,
) -> Result<Served, ProbeError> {
    let name =
        ServerName::try_from(sni.to_string()).map_err(|_| ProbeError::BadName(sni.into()))?;
    let connect = |source| ProbeError::Connect { addr, source };
    let mut sock = TcpStream::connect_timeout(&addr, timeout).map_err(connect)?;
    sock.set_read_timeout(Some(timeout)).map_err(connect)?;
    sock.set_write_timeout(Some(timeout)).map_err(connect)?;
    let failed = |message: String| ProbeError::Handshake {
        addr,
        sni: sni.to_string(),
        message,
    };
    let mut conn =
        ClientConnection::new(Arc::new(config), name).map_err(|e| failed(e.to_string()))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| failed(e.to_string()))?;
    }
    let chain = conn
        .peer_certificates()
        .map(|c| c.iter().map(|d| d.as_ref().to_vec()).collect())
        .unwrap_or_default();
    let alpn = conn
        .alpn_protocol()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    conn.send_close_notify();
    let _ = conn.complete_io(&mut sock);
    Ok(Served { chain, alpn })
}

/// The address a local client reaches `bind` on (a wildcard bind is reached on loopback).
pub fn local_addr(bind: SocketAddr) -> SocketAddr {
    let ip = match bind.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, bind.port())
}
