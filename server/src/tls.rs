//! HTTPS: rustls's sans-I/O server connection driven over our own socket,
//! so the HTTP layer (`conn`, `http`) runs unchanged on a decrypted stream.
//!
//! Each core builds its own [`rustls::ServerConfig`] from the same PEM files
//! (`--cert`, `--key`): the config holds a session cache behind a lock, and
//! no lock is shared between cores. A [`TlsStream`] belongs to the
//! connection task that accepted it, on that core.
//!
//! Plain HTTP sent to the TLS port is answered with one `400` in plain text
//! saying the port speaks HTTPS, then closed; any other handshake failure
//! closes the connection. Both are an I/O error to the caller, never a
//! panic. The handshake happens inside the first read, so the connection's
//! idle and request deadlines (the reaper) bound it like any slow request.

use futures_lite::{AsyncRead, AsyncWrite};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConnection;
use std::io::{self, Read, Write};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// Ciphertext read from the socket in one go.
const TLS_READ_CHUNK: usize = 16 * 1024 + 256;
/// Encrypted bytes queued for the socket before a write waits: bounds a
/// connection's send buffer like MAX_PENDING_RESPONSE_BYTES bounds its
/// plaintext.
const MAX_QUEUED_TLS_BYTES: usize = 256 * 1024;

/// The certificate chain and key, read once at startup and checked, so a
/// bad file stops the server with a message instead of failing handshakes.
#[derive(Clone)]
pub struct Identity {
    certs: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

impl Identity {
    pub fn load(cert: &Path, key: &Path) -> Result<Identity, String> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("--cert {}: {e}", cert.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("--cert {}: {e}", cert.display()))?;
        if certs.is_empty() {
            return Err(format!("--cert {}: no PEM certificate in the file", cert.display()));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--key {}: {e}", key.display()))?;
        let id = Identity {
            certs,
            key: Arc::new(key),
        };
        id.server_config()?;
        Ok(id)
    }

    /// A config for one core: TLS 1.2 and 1.3 with rustls's safe defaults,
    /// no client certificates, HTTP/1.1 only.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(self.certs.clone(), self.key.clone_key())
            .map_err(|e| format!("--cert/--key: {e}"))?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// A server-side TLS connection over `S`. Owned by its connection's task.
pub struct TlsStream<S> {
    io: S,
    tls: ServerConnection,
    /// Ciphertext read but not yet taken by rustls.
    incoming: Vec<u8>,
    /// Ciphertext rustls produced, not yet written to the socket.
    outgoing: Vec<u8>,
    /// Whether the first bytes were looked at (plain HTTP is refused).
    sniffed: bool,
    /// The peer sent close_notify or closed the socket.
    eof: bool,
}

impl<S> TlsStream<S> {
    pub fn new(io: S, cfg: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let tls = ServerConnection::new(cfg).map_err(io::Error::other)?;
        Ok(TlsStream {
            io,
            tls,
            incoming: Vec::new(),
            outgoing: Vec::new(),
            sniffed: false,
            eof: false,
        })
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// What a plain-HTTP client gets on the TLS port (before the connection closes).
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 52\r\nConnection: close\r\n\r\nThis port speaks HTTPS; send the request over TLS.\r\n";

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    /// Moves rustls's pending ciphertext into `outgoing`.
    fn take_tls_output(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            self.tls.write_tls(&mut self.outgoing)?;
        }
        Ok(())
    }

    /// Writes `outgoing` to the socket until it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.outgoing.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.outgoing))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.outgoing.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// Reads ciphertext from the socket and feeds it to rustls. `Ok(false)`
    /// at end of file.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        if self.incoming.is_empty() {
            let mut chunk = [0u8; TLS_READ_CHUNK];
            let n = ready!(Pin::new(&mut self.io).poll_read(cx, &mut chunk))?;
            if n == 0 {
                return Poll::Ready(Ok(false));
            }
            self.incoming.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
        if !self.sniffed {
            self.sniffed = true;
            // Every TLS connection opens with a handshake record (0x16);
            // an ASCII letter is a plain HTTP method.
            if self.incoming.first().is_some_and(u8::is_ascii_alphabetic) {
                self.incoming.clear();
                self.outgoing.extend_from_slice(PLAIN_HTTP_ANSWER);
                let _ = ready!(self.poll_drain(cx));
                return Poll::Ready(Err(invalid("plain HTTP sent to the HTTPS port")));
            }
        }
        let mut rest = self.incoming.as_slice();
        let taken = self.tls.read_tls(&mut rest)?;
        self.incoming.drain(..taken);
        self.tls.process_new_packets().map_err(|e| {
            // The alert rustls queued for the peer goes out before the close.
            let _ = self.take_tls_output();
            invalid(e)
        })?;
        Poll::Ready(Ok(true))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match this.tls.reader().read(buf) {
                Ok(n) if n > 0 || buf.is_empty() => return Poll::Ready(Ok(n)),
                // A clean close_notify: end of the plaintext stream.
                Ok(_) => return Poll::Ready(Ok(0)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if this.eof {
                return Poll::Ready(Ok(0));
            }
            // Handshake messages (and alerts) go out before more is read:
            // the peer waits for them.
            this.take_tls_output()?;
            ready!(this.poll_drain(cx))?;
            match ready!(this.poll_fill(cx)) {
                Ok(true) => {}
                Ok(false) => {
                    this.eof = true;
                }
                Err(e) => {
                    let _ = this.poll_drain(cx);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.outgoing.len() >= MAX_QUEUED_TLS_BYTES {
            ready!(this.poll_drain(cx))?;
        }
        let n = this.tls.writer().write(data)?;
        this.take_tls_output()?;
        // Accepted: what is not on the socket yet goes at the next write
        // or flush (a pending drain has registered the waker already).
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        if n == 0 && !data.is_empty() {
            // rustls's own buffer is full: wait for the socket.
            ready!(this.poll_drain(cx))?;
            return Poll::Ready(Ok(this.tls.writer().write(data)?));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.take_tls_output()?;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // No alert before a handshake: after the plain-HTTP answer it would
        // be junk past its Content-Length.
        if !this.tls.is_handshaking() {
            this.tls.send_close_notify();
        }
        this.take_tls_output()?;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_close(cx)
    }
}
