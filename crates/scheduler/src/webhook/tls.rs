//! TLS for the webhook server: a certificate that can be swapped while serving ([`CertStore`]), and a
//! listener that hands axum connections whose handshake is done ([`TlsListener`]). Handshakes run on
//! their own tasks with a deadline, so a slow or silent client never holds up the others.

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::debug;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate the server presents; empty until the first one is loaded (handshakes fail until
/// then).
#[derive(Debug, Default)]
pub struct CertStore {
    current: RwLock<Option<Loaded>>,
}

#[derive(Debug)]
struct Loaded {
    /// The PEM text it was made from, to tell a change from the same certificate read again.
    pem: String,
    key: Arc<CertifiedKey>,
}

impl CertStore {
    /// Serves `cert_pem` (the certificate, then any chain) with `key_pem` from the next handshake on.
    /// Returns whether anything changed.
    ///
    /// # Errors
    /// When the PEM text holds no certificate or no usable private key (RSA, ECDSA or Ed25519, PKCS #8,
    /// PKCS #1 or SEC1).
    pub fn load(&self, cert_pem: &str, key_pem: &str) -> Result<bool, String> {
        let pem = format!("{cert_pem}{key_pem}");
        if self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|l| l.pem == pem)
        {
            return Ok(false);
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("reading the certificate: {e}"))?;
        if chain.is_empty() {
            return Err("the certificate PEM holds no certificate".to_owned());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| format!("reading the private key: {e}"))?;
        let signer = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| format!("unusable private key: {e}"))?;
        let certified = Arc::new(CertifiedKey::new(chain, signer));
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Loaded { pem, key: certified });
        Ok(true)
    }

    /// Whether a certificate is loaded.
    #[must_use]
    pub fn is_loaded(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|l| Arc::clone(&l.key))
    }
}

/// The server's TLS settings: TLS 1.2 and 1.3 with ring's safe defaults, HTTP/1.1, the certificate of
/// `store`.
///
/// # Errors
/// Never with ring's provider; kept for the builder's signature.
pub fn server_config(store: Arc<CertStore>) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepted connections after their handshake, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Listens on `tcp`, handshaking each connection on a task of its own.
    #[must_use]
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        let local = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, ready) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        debug!(error = %e, "webhook accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "webhook TLS handshake failed"),
                        Err(_) => debug!(%peer, "webhook TLS handshake timed out"),
                    }
                });
            }
        });
        Self {
            ready,
            local,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task ended (it never does while the listener lives): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
