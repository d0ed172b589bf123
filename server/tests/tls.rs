//! HTTPS through the real binary (`--cert`/`--key`, the test CA in
//! tests/certs): a signed request over TLS, plain HTTP sent to the TLS
//! port, broken and stalled handshakes, and hostile HTTP inside TLS. After
//! each the server must still answer a good request.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

mod support;
use support::{proc, Server};

/// A server with HTTPS and short timeouts (stalled handshakes end fast).
fn start(extra: &[&str]) -> Server {
    let mut args = vec!["--idle-timeout-secs", "2", "--request-timeout-secs", "2"];
    args.extend_from_slice(extra);
    Server::start_tls(&args)
}

fn tcp(server: &Server) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn signed_requests_work_over_tls_and_plain_http_is_told_to_use_it() {
    let server = start(&[]);
    server.healthy();
    let mut plain = tcp(&server);
    plain
        .write_all(b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = plain.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.contains("speaks HTTPS"), "{out}");
    server.healthy();
}

#[test]
fn broken_and_stalled_handshakes_are_closed_and_the_server_survives() {
    let server = start(&[]);
    // A handshake record full of junk, a truncated one, random bytes.
    let junk: [&[u8]; 4] = [
        &[0x16, 0x03, 0x01, 0x00, 0x40, 0xff, 0xff, 0xff, 0xff, 0xff],
        &[0x16, 0x03, 0x01, 0xff, 0xff],
        &[0x16; 4096],
        &[0x00, 0x01, 0x02, 0x03, 0x80, 0x81],
    ];
    for bytes in junk {
        let mut s = tcp(&server);
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
    let mut silent = tcp(&server);
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = silent.read_to_end(&mut out);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "a silent client held its connection {waited:?}"
    );
    server.healthy();
}

#[test]
fn hostile_http_inside_tls_gets_the_same_answers() {
    let server = start(&[]);
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
        let out = server.raw(bytes);
        assert!(
            out.starts_with(want),
            "{want} expected, got {}",
            out.lines().next().unwrap_or("")
        );
        server.healthy();
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

    let server = start(&["--oauth", "basic"]);
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
    let ok = server.raw(request(token(now + 600)).as_bytes());
    assert!(ok.starts_with("HTTP/1.1 201"), "{ok}");
    let expired = server.raw(request(token(now - 10)).as_bytes());
    assert!(expired.starts_with("HTTP/1.1 401"), "{expired}");
    assert!(expired.contains("WWW-Authenticate: Bearer"), "{expired}");
    assert!(expired.contains("expired"), "{expired}");
}
