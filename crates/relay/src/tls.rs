//! TLS for outgoing connections, one set-up for the relay's upstreams and the OTLP exporter:
//! rustls with the webpki roots plus the certificates of an optional CA file, HTTP/1.1.
//!
//! A CA file that cannot be read, is not PEM, holds no certificate or holds one rustls will
//! not take as a root is a start error for both: a root asked for and silently left out would
//! only show up later as failed handshakes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// Why a CA file was refused. Shows the path, never the file's content.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    #[error("reading the CA file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA file {} is not a PEM certificate file ({reason})", path.display())]
    NotPem { path: PathBuf, reason: String },
    #[error("the CA file {} holds no certificate", path.display())]
    Empty { path: PathBuf },
    #[error("the CA file {} holds a certificate that cannot be a root ({reason})", path.display())]
    Unusable { path: PathBuf, reason: String },
}

/// Why the TLS set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    CaFile(#[from] CaFileError),
    #[error("setting up TLS: {0}")]
    Setup(#[from] rustls::Error),
}

/// Extra root certificates, read from a CA file and each checked to be usable as a root.
#[derive(Debug, Clone, Default)]
pub struct ExtraRoots(Vec<CertificateDer<'static>>);

impl ExtraRoots {
    /// No extra roots: the webpki roots only.
    pub fn none() -> Self {
        ExtraRoots::default()
    }

    /// Reads every certificate of the PEM file at `path`.
    pub fn read(path: &Path) -> Result<Self, CaFileError> {
        let pem = std::fs::read(path).map_err(|source| CaFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|e| CaFileError::NotPem {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(CaFileError::Empty {
                path: path.to_path_buf(),
            });
        }
        // Checked now, so that the error names the file at start.
        let mut roots = rustls::RootCertStore::empty();
        for cert in &certs {
            roots.add(cert.clone()).map_err(|e| CaFileError::Unusable {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        }
        Ok(ExtraRoots(certs))
    }

    /// Reads `path` if given.
    pub fn read_optional(path: Option<&Path>) -> Result<Self, CaFileError> {
        path.map_or_else(|| Ok(ExtraRoots::none()), ExtraRoots::read)
    }

    /// The roots of all of `sets`.
    pub fn merge(sets: Vec<ExtraRoots>) -> Self {
        ExtraRoots(sets.into_iter().flat_map(|s| s.0).collect())
    }

    fn store(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in &self.0 {
            // Each was added to a store once already in `read`.
            let _ = roots.add(cert.clone());
        }
        roots
    }
}

/// The rustls client configuration for these roots (ring, safe default protocol versions),
/// offering `http/1.1` by ALPN: a server (or a load balancer in front of one) that picks by
/// ALPN then knows what follows, and one that insists on ALPN does not refuse the handshake.
/// (hyper-rustls's builder leaves ALPN empty for an HTTP/1-only connector, so the connector
/// is made from this configuration directly.)
pub(crate) fn client_config(roots: &ExtraRoots) -> Result<rustls::ClientConfig, TlsError> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots.store())
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::store(Arc::new(TicketStock::default()));
    Ok(config)
}

/// TLS 1.3 session tickets kept per server, for the upstream connections to come.
const TICKETS_PER_SERVER: usize = 64;
/// Servers whose tickets are kept (the mounts' upstreams are a handful).
const TICKET_SERVERS: usize = 32;

/// Where upstream TLS sessions are kept for resumption: rustls's in-memory store for
/// everything but TLS 1.3 tickets, of which it keeps [`TICKETS_PER_SERVER`] a server where
/// rustls keeps 8.
///
/// A ticket resumes one connection (rustls hands each out once, as RFC 8446 §C.4 asks), and
/// a server sends one or two with every connection. Eight are gone at the first burst of
/// parallel model requests (subagents launched together, several sessions at once): every
/// connection past the eighth paid a full handshake, a certificate chain checked and a
/// round of key exchange, before its first byte. A stock of 64 refills between bursts from the
/// tickets the connections bring, at a few KiB a ticket: in the relay bench's TLS rows 61 % and
/// 86 % of new upstream connections resumed, against 39 % and 62 % with rustls's own store
/// (docs/performance.md, "Upstream TLS sessions").
#[derive(Debug)]
struct TicketStock {
    others: rustls::client::ClientSessionMemoryCache,
    tls13: std::sync::Mutex<
        std::collections::HashMap<
            rustls_pki_types::ServerName<'static>,
            std::collections::VecDeque<rustls::client::Tls13ClientSessionValue>,
        >,
    >,
}

impl Default for TicketStock {
    fn default() -> Self {
        TicketStock {
            others: rustls::client::ClientSessionMemoryCache::new(TICKET_SERVERS),
            tls13: Default::default(),
        }
    }
}

impl rustls::client::ClientSessionStore for TicketStock {
    fn set_kx_hint(
        &self,
        server: rustls_pki_types::ServerName<'static>,
        group: rustls::NamedGroup,
    ) {
        self.others.set_kx_hint(server, group)
    }

    fn kx_hint(&self, server: &rustls_pki_types::ServerName<'_>) -> Option<rustls::NamedGroup> {
        self.others.kx_hint(server)
    }

    fn set_tls12_session(
        &self,
        server: rustls_pki_types::ServerName<'static>,
        value: rustls::client::Tls12ClientSessionValue,
    ) {
        self.others.set_tls12_session(server, value)
    }

    fn tls12_session(
        &self,
        server: &rustls_pki_types::ServerName<'_>,
    ) -> Option<rustls::client::Tls12ClientSessionValue> {
        self.others.tls12_session(server)
    }

    fn remove_tls12_session(&self, server: &rustls_pki_types::ServerName<'static>) {
        self.others.remove_tls12_session(server)
    }

    fn insert_tls13_ticket(
        &self,
        server: rustls_pki_types::ServerName<'static>,
        value: rustls::client::Tls13ClientSessionValue,
    ) {
        let mut servers = self.tls13.lock().unwrap_or_else(|e| e.into_inner());
        if !servers.contains_key(&server) && servers.len() >= TICKET_SERVERS {
            // Past the bound a server's tickets make room (any: mounts are few).
            let evicted = servers.keys().next().cloned();
            if let Some(evicted) = evicted {
                servers.remove(&evicted);
            }
        }
        let tickets = servers.entry(server).or_default();
        if tickets.len() >= TICKETS_PER_SERVER {
            tickets.pop_front();
        }
        tickets.push_back(value);
    }

    fn take_tls13_ticket(
        &self,
        server: &rustls_pki_types::ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        // The newest first: the oldest are the nearest to expiring.
        let mut servers = self.tls13.lock().unwrap_or_else(|e| e.into_inner());
        servers.get_mut(server).and_then(|t| t.pop_back())
    }
}

/// An HTTP/1.1 connector that speaks `https` with these roots and plain `http` otherwise,
/// with `TCP_NODELAY` and the given connect timeout.
pub fn https_connector(
    roots: &ExtraRoots,
    connect_timeout: Duration,
) -> Result<HttpsConnector<HttpConnector>, TlsError> {
    let tls = client_config(roots)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    Ok(HttpsConnector::from((http, tls)))
}

/// The roots each upstream is checked against: every upstream the platform's roots and the
/// unscoped extra roots; an upstream named in `scoped` (by its authority, `host:port` as its
/// mount's URL has it) its own extra roots too, and no other upstream those.
#[derive(Debug, Clone, Default)]
pub struct UpstreamRoots {
    pub all: ExtraRoots,
    pub scoped: Vec<(String, ExtraRoots)>,
}

/// The upstream connector: TLS (or plain `http`) with the roots [`UpstreamRoots`] gives each
/// upstream. A CA given for one mount (a local test upstream, a company gateway) is then never
/// trusted for the others, `api.anthropic.com` included.
#[derive(Clone)]
pub struct UpstreamConnector {
    all: HttpsConnector<HttpConnector>,
    scoped: Arc<Vec<(String, HttpsConnector<HttpConnector>)>>,
}

impl UpstreamConnector {
    pub fn new(roots: &UpstreamRoots, connect_timeout: Duration) -> Result<Self, TlsError> {
        let scoped = roots
            .scoped
            .iter()
            .map(|(authority, extra)| {
                let both = ExtraRoots(roots.all.0.iter().chain(&extra.0).cloned().collect());
                Ok((
                    authority.to_ascii_lowercase(),
                    https_connector(&both, connect_timeout)?,
                ))
            })
            .collect::<Result<Vec<_>, TlsError>>()?;
        Ok(UpstreamConnector {
            all: https_connector(&roots.all, connect_timeout)?,
            scoped: Arc::new(scoped),
        })
    }

    fn for_uri(&self, uri: &http::Uri) -> &HttpsConnector<HttpConnector> {
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        self.scoped
            .iter()
            .find(|(a, _)| a.eq_ignore_ascii_case(authority))
            .map_or(&self.all, |(_, c)| c)
    }
}

type Connected = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Uri> for UpstreamConnector {
    type Response = Connected;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Connected, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each call clones the connector it picks and waits for that one to be ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let mut connector = self.for_uri(&uri).clone();
        Box::pin(async move {
            std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
            connector.call(uri).await
        })
    }
}

#[cfg(test)]
mod tests {
    /// 30 connections one after another, then 20 at once, to a server that issues stateless
    /// tickets: every one of the 20 resumes (rustls's own store, 8 tickets, resumed 8).
    #[tokio::test]
    async fn a_burst_of_upstream_connections_resumes_from_the_ticket_stock() {
        use rustls_pki_types::pem::PemObject;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let pki = testkit::pki();
        let mut server = (*pki.server).clone();
        server.ticketer = rustls::crypto::ring::Ticketer::new().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let resumed = Arc::new(AtomicUsize::new(0));
        let counted = resumed.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, counted) = (acceptor.clone(), counted.clone());
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    // A byte, so that the client reads past the tickets sent after the
                    // handshake.
                    let _ = tls.write_all(b"x").await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        let ca = rustls_pki_types::CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap();
        let roots = super::ExtraRoots(vec![ca]);
        let connector =
            tokio_rustls::TlsConnector::from(Arc::new(super::client_config(&roots).unwrap()));
        let connect = || {
            let connector = connector.clone();
            async move {
                use tokio::io::AsyncReadExt;
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                let mut tls = connector.connect(name, tcp).await.unwrap();
                let mut byte = [0u8; 1];
                tls.read_exact(&mut byte).await.unwrap();
            }
        };
        for _ in 0..30 {
            connect().await;
        }
        let before = resumed.load(Ordering::SeqCst);
        let burst: Vec<_> = (0..20).map(|_| tokio::spawn(connect())).collect();
        for c in burst {
            c.await.unwrap();
        }
        assert_eq!(resumed.load(Ordering::SeqCst) - before, 20);
    }

    use super::*;

    #[test]
    fn upstream_tls_offers_http_1_1_by_alpn() {
        let config = client_config(&ExtraRoots::none()).unwrap();
        assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_it() {
        let e = ExtraRoots::read(Path::new("/nonexistent/ca.pem")).unwrap_err();
        assert!(matches!(e, CaFileError::Read { .. }));
        assert!(e.to_string().contains("/nonexistent/ca.pem"));
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.pem");
        std::fs::write(&p, "not a certificate\n").unwrap();
        assert!(matches!(
            ExtraRoots::read(&p),
            Err(CaFileError::Empty { .. })
        ));
    }

    #[test]
    fn a_certificate_that_is_not_der_is_refused_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.pem");
        // Valid PEM armour around bytes that are no certificate.
        std::fs::write(
            &p,
            "-----BEGIN CERTIFICATE-----\nAAECAwQFBgcICQ==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = ExtraRoots::read(&p).unwrap_err();
        assert!(matches!(e, CaFileError::Unusable { .. }), "{e:?}");
        assert!(!e.to_string().contains("AAECAwQF"), "no content echoed");
    }
}
