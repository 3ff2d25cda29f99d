//! TLS on the API (`[api] tls_cert`, `tls_key`, `client_ca`; docs/access.md): the rustls
//! server configuration, its certificate read again when its files change (a renewed one is
//! served without a restart), and a listener whose handshakes run beside the accept loop, so a
//! slow or silent client never holds up the others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::settings::ApiTls;

/// A handshake not done by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handshaken but not yet taken by the server.
const BACKLOG: usize = 64;

#[derive(Debug, thiserror::Error)]
#[error("[api] {key} = {path}: {message}")]
pub struct TlsSettingsError {
    key: &'static str,
    path: String,
    message: String,
}

fn refused<'a>(key: &'static str, path: &'a Path) -> impl Fn(String) -> TlsSettingsError + 'a {
    move |message| TlsSettingsError {
        key,
        path: path.display().to_string(),
        message,
    }
}

/// The server configuration of `[api]`'s files: read and checked at start, so a wrong file is
/// an error before anything runs.
pub fn server_config(tls: &ApiTls) -> Result<Arc<ServerConfig>, TlsSettingsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cert = ReloadingCert::new(&tls.cert, &tls.key, provider.clone())?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| refused("tls_cert", &tls.cert)(e.to_string()))?;
    let builder = match &tls.client_ca {
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca, provider)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(cert));
    // The API speaks HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Client certificates signed by the CAs of `ca` are required.
fn client_verifier(
    ca: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsSettingsError> {
    let certs = CertificateDer::pem_file_iter(ca)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| refused("client_ca", ca)(format!("cannot read PEM certificates: {e}")))?;
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(refused("client_ca", ca)(
            "holds no usable CA certificate".into(),
        ));
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| refused("client_ca", ca)(e.to_string()))
}

/// The certificate chain and key of `cert` and `key` (PEM; they may be one file, as the
/// certificates hapctl manages are: `live/certs/NAME.pem`), checked to go together.
fn load(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsSettingsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| {
            refused("tls_cert", cert)(format!("cannot read a PEM certificate chain: {e}"))
        })?;
    if chain.is_empty() {
        return Err(refused("tls_cert", cert)("holds no certificate".into()));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        refused("tls_key", key)(format!(
            "cannot read a PEM private key (PKCS#8, PKCS#1 or SEC1, unencrypted): {e}"
        ))
    })?;
    let certified = CertifiedKey::from_der(chain, der, provider).map_err(|e| {
        refused("tls_key", key)(format!("does not go with the certificate of tls_cert: {e}"))
    })?;
    Ok(Arc::new(certified))
}

/// When the two files were last written (`None`: unreadable now).
fn stamps(cert: &Path, key: &Path) -> [Option<SystemTime>; 2] {
    [cert, key].map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// The API's certificate, loaded again on the first handshake after its files changed. Files
/// that do not load (half written, a key for another certificate) keep the last good pair
/// serving, and are tried again when they change again.
#[derive(Debug)]
struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<([Option<SystemTime>; 2], Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    fn new(
        cert: &Path,
        key: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<ReloadingCert, TlsSettingsError> {
        let seen = stamps(cert, key);
        let loaded = load(cert, key, &provider)?;
        Ok(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: Mutex::new((seen, loaded)),
        })
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let now = stamps(&self.cert, &self.key);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if now != current.0 {
            current.0 = now;
            match load(&self.cert, &self.key, &self.provider) {
                Ok(loaded) => {
                    tracing::info!(
                        "API: serving the new certificate of {}",
                        self.cert.display()
                    );
                    current.1 = loaded;
                }
                Err(e) => tracing::warn!("API: keeping the previous certificate: {e}"),
            }
        }
        Some(current.1.clone())
    }
}

/// Accepts TCP connections and hands over those whose TLS handshake succeeded.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp` (on the current tokio runtime).
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(BACKLOG);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tracing::warn!("API: cannot accept a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (tx, acceptor) = (tx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::info!("API: TLS handshake from {peer} refused: {e}"),
                        Err(_) => tracing::info!("API: TLS handshake from {peer} timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(pair) => pair,
            // The accept loop never ends while the listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
