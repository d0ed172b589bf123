//! What the binary-level test files share: the shared process and client
//! helpers (by path: the end-to-end crate depends on this one), and a test
//! server on a temporary directory. Not a test target itself.
#![allow(dead_code)] // each test file uses part of it

use client::{signed_request, Client, KEY};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::Duration;

pub use hematite_tests::proc;

pub use hematite_tests::client;

pub struct Server {
    pub child: Child,
    pub port: u16,
    /// The server serves HTTPS (tests/certs); `raw` and `healthy` use TLS.
    pub tls: bool,
    _dir: tempfile::TempDir,
}

/// The test certificates (tests/certs).
pub fn certs() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/certs")
}

/// A rustls client that trusts the test CA.
pub fn tls_client_config() -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_file(certs().join("ca.pem")).unwrap())
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        Self::launch(extra, false)
    }

    /// The same server, serving HTTPS with the test certificate.
    pub fn start_tls(extra: &[&str]) -> Server {
        Self::launch(extra, true)
    }

    fn launch(extra: &[&str], tls: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let port = proc::free_port();
        let (cert, key) = (certs().join("server.pem"), certs().join("server.key"));
        let mut args = vec!["--shards", "1", "--io-memory-kib", "512"];
        if tls {
            args.extend(["--cert", cert.to_str().unwrap(), "--key", key.to_str().unwrap()]);
        }
        args.extend_from_slice(extra);
        let bin = std::env::var("HEMATITE_BIN_UNDER_TEST").unwrap_or_else(|_| env!("CARGO_BIN_EXE_hematite").into());
        let cmd = proc::command(bin.as_ref(), port, dir.path(), &args);
        let child = proc::spawn_ready(cmd).expect("hematite starts");
        Server {
            child,
            port,
            tls,
            _dir: dir,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(self.port)
    }

    /// A fresh connection answers a signed request.
    pub fn healthy(&self) {
        if self.tls {
            let resp = self.raw(self.signed("GET", "/devstoreaccount1/?comp=list", b"").as_bytes());
            assert!(resp.starts_with("HTTP/1.1 200"), "unhealthy over TLS: {resp}");
            return;
        }
        let mut c = self.client();
        c.call("GET", "/devstoreaccount1/?comp=list", &[], b"")
            .map(|r| assert_eq!(r.status, 200, "{}", r.body))
            .expect("the server still answers on a new connection");
    }

    /// Sends raw bytes on a new connection and reads until the server closes
    /// (or 10 s pass).
    pub fn raw(&self, bytes: &[u8]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        if self.tls {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let conn = rustls::ClientConnection::new(tls_client_config(), name).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, s);
            tls.write_all(bytes).unwrap();
            let _ = tls.read_to_end(&mut out);
        } else {
            s.write_all(bytes).unwrap();
            let _ = s.read_to_end(&mut out);
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// A request signed for `target`, as bytes, with `Connection: close`.
    pub fn signed(&self, method: &str, target: &str, body: &[u8]) -> String {
        String::from_utf8(self.signed_bytes(method, target, body)).unwrap()
    }

    /// The same as bytes (for bodies that are not UTF-8).
    pub fn signed_bytes(&self, method: &str, target: &str, body: &[u8]) -> Vec<u8> {
        let key = base64_key();
        signed_request(self.port, &key, method, target, &[("Connection", "close")], body).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let status = proc::stop(&mut self.child);
        assert!(status.success() || std::thread::panicking(), "exit {status}");
    }
}

/// The development key, decoded.
pub fn base64_key() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(KEY).unwrap()
}

/// `method path` on the admin address (`--admin-addr`), the whole answer;
/// with an empty path, `method` is the whole request.
pub fn admin_request(port: u16, method: &str, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let req = if path.is_empty() {
        method.to_string()
    } else {
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n")
    };
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A GET on the admin address.
pub fn admin_get(port: u16, path: &str) -> String {
    admin_request(port, "GET", path)
}
