//! HTTPS through the real binary (`--cert`/`--key`, the test CA in
//! tests/certs): a signed request over TLS, plain HTTP sent to the TLS
//! port, broken and stalled handshakes, and hostile HTTP inside TLS. After
//! each the server must still answer a good request.

use hematite_tests::{client, proc};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn certs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/certs")
}

struct TlsServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl TlsServer {
    fn start(extra: &[&str]) -> TlsServer {
        let dir = tempfile::tempdir().unwrap();
        let port = proc::free_port();
        let (cert, key) = (certs().join("server.pem"), certs().join("server.key"));
        let mut args = vec![
            "--shards",
            "1",
            "--io-memory-kib",
            "512",
            "--idle-timeout-secs",
            "2",
            "--request-timeout-secs",
            "2",
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let cmd = proc::command(env!("CARGO_BIN_EXE_hematite").as_ref(), port, dir.path(), &args);
        let child = proc::spawn_ready(cmd).expect("hematite starts with TLS");
        TlsServer { child, port, _dir: dir }
    }

    fn tcp(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends `bytes` over a fresh TLS connection and reads until the server closes.
    fn tls_exchange(&self, bytes: &[u8]) -> String {
        let conn = rustls::ClientConnection::new(client_config(), ServerName::try_from("127.0.0.1").unwrap()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, self.tcp());
        tls.write_all(bytes).unwrap();
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A signed List Queues over TLS answers 200.
    fn assert_healthy(&self) {
        let req = client::signed_request(
            self.port,
            &base64_key(),
            "GET",
            "/devstoreaccount1/?comp=list",
            &[("Connection", "close")],
            b"",
        )
        .unwrap();
        let resp = self.tls_exchange(&req);
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "server unhealthy over TLS: {resp}");
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let status = proc::stop(&mut self.child);
        assert!(
            status.success() || std::thread::panicking(),
            "hematite exited with {status}"
        );
    }
}

fn base64_key() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(client::KEY).unwrap()
}

fn client_config() -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(certs().join("ca.pem")).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[test]
fn signed_requests_work_over_tls_and_plain_http_is_told_to_use_it() {
    let server = TlsServer::start(&[]);
    server.assert_healthy();
    let mut plain = server.tcp();
    plain
        .write_all(b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = plain.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.contains("speaks HTTPS"), "{out}");
    server.assert_healthy();
}

#[test]
fn broken_and_stalled_handshakes_are_closed_and_the_server_survives() {
    let server = TlsServer::start(&[]);
    // A handshake record full of junk, a truncated one, random bytes.
    let junk: [&[u8]; 4] = [
        &[0x16, 0x03, 0x01, 0x00, 0x40, 0xff, 0xff, 0xff, 0xff, 0xff],
        &[0x16, 0x03, 0x01, 0xff, 0xff],
        &[0x16; 4096],
        &[0x00, 0x01, 0x02, 0x03, 0x80, 0x81],
    ];
    for bytes in junk {
        let mut s = server.tcp();
        s.write_all(bytes).unwrap();
        let started = Instant::now();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "a broken handshake was held open"
        );
    }
    // A client that connects and says nothing is cut off at the idle timeout.
    let mut silent = server.tcp();
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = silent.read_to_end(&mut out);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "a silent client held its connection {waited:?}"
    );
    server.assert_healthy();
}

#[test]
fn hostile_http_inside_tls_gets_the_same_answers() {
    let server = TlsServer::start(&[]);
    let huge_head = format!(
        "GET /devstoreaccount1/q HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let cases: [(&[u8], &str); 4] = [
        (huge_head.as_bytes(), "HTTP/1.1 431"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", "HTTP/1.1 400"),
        (b"POST /devstoreaccount1/q/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n", "HTTP/1.1 400"),
        (b"\x00\x01garbage\r\n\r\n", "HTTP/1.1 400"),
    ];
    for (bytes, want) in cases {
        let out = server.tls_exchange(bytes);
        assert!(
            out.starts_with(want),
            "{want} expected, got {}",
            out.lines().next().unwrap_or("")
        );
        server.assert_healthy();
    }
}

#[test]
fn oauth_needs_tls_and_accepts_a_storage_token_over_it() {
    // Without a certificate the flag is refused with a reason.
    let dir = tempfile::tempdir().unwrap();
    let cmd = proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        proc::free_port(),
        dir.path(),
        &["--shards", "1", "--oauth", "basic"],
    );
    let err = proc::spawn_ready(cmd).expect_err("--oauth without TLS must not start");
    assert!(err.contains("needs HTTPS"), "{err}");

    let server = TlsServer::start(&["--oauth", "basic"]);
    use base64::Engine;
    let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = |exp: u64| {
        let claims = format!(
            r#"{{"aud":"https://storage.azure.com/","iss":"https://sts.windows.net/t/","iat":{now},"nbf":{},"exp":{exp}}}"#,
            now - 60
        );
        format!("{}.{}.x", b64(r#"{"alg":"RS256"}"#), b64(&claims))
    };
    let request = |tok: String| {
        format!(
            "PUT /devstoreaccount1/oauthq HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-version: 2026-10-06\r\nAuthorization: Bearer {tok}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    };
    let ok = server.tls_exchange(request(token(now + 600)).as_bytes());
    assert!(ok.starts_with("HTTP/1.1 201"), "{ok}");
    let expired = server.tls_exchange(request(token(now - 10)).as_bytes());
    assert!(expired.starts_with("HTTP/1.1 401"), "{expired}");
    assert!(expired.contains("WWW-Authenticate: Bearer"), "{expired}");
    assert!(expired.contains("expired"), "{expired}");
}
