//! Hostile clients against the real binary: slow dribbling, many idle
//! connections, the per-core connection limit, hostile XML and auth headers,
//! huge query strings, garbage pipelined after a good request. After each the
//! server must answer a normal request correctly, and its memory stays bounded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

mod support;
use support::{client, Server};

fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_slow_client_is_cut_off() {
    let server = Server::start(&["--request-timeout-secs", "2"]);
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let request = b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    s.write_all(&request[..1]).unwrap();
    let start = Instant::now();
    let mut closed = false;
    for b in &request[1..] {
        std::thread::sleep(Duration::from_millis(400));
        if s.write_all(std::slice::from_ref(b)).is_err() {
            closed = true;
            break;
        }
        if start.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    assert!(
        closed || closed_within(&mut s, Duration::from_secs(3)),
        "a dribbling client must be disconnected"
    );
    assert!(start.elapsed() < Duration::from_secs(8));
    server.healthy();
}

#[test]
fn thousands_of_idle_connections_stay_bounded_and_are_reaped() {
    let server = Server::start(&["--idle-timeout-secs", "2"]);
    let before = server.rss_kib();
    // 2000, unless this process may not open that many sockets.
    let nofile = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur as usize
    };
    let n = 2000.min(nofile.saturating_sub(200));
    let mut idle: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    server.healthy();
    let during = server.rss_kib();
    assert!(
        during < before + 128 * 1024,
        "2000 idle connections took {} KiB",
        during - before
    );
    std::thread::sleep(Duration::from_millis(2600));
    let mut reaped = 0;
    for s in idle.iter_mut().take(50) {
        if closed_within(s, Duration::from_secs(2)) {
            reaped += 1;
        }
    }
    assert_eq!(reaped, 50, "idle connections are closed after the idle timeout");
    server.healthy();
}

#[test]
fn connections_over_the_limit_get_503() {
    let server = Server::start(&["--max-connections-per-core", "20"]);
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(TcpStream::connect(("127.0.0.1", server.port)).unwrap());
    }
    std::thread::sleep(Duration::from_millis(200));
    let resp = server.raw(b"GET / HTTP/1.1\r\n\r\n");
    assert!(
        resp.starts_with("HTTP/1.1 503") && resp.contains("ServerBusy"),
        "{resp}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    server.healthy();
}

#[test]
fn hostile_bodies_headers_and_queries() {
    hostile_inputs(&Server::start(&[]));
}

/// The same hostile inputs inside TLS.
#[test]
fn hostile_bodies_headers_and_queries_over_tls() {
    hostile_inputs(&Server::start_tls(&[]));
}

/// A client that dribbles its TLS handshake is cut off at the idle
/// timeout: the handshake happens inside the first read, under its deadline.
#[test]
fn a_dribbled_tls_handshake_is_cut_off() {
    let server = Server::start_tls(&["--idle-timeout-secs", "2"]);
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let start = Instant::now();
    let mut closed = false;
    // A TLS handshake record header, then its body a byte at a time.
    for b in [0x16u8, 0x03, 0x01, 0x02, 0x00].iter().chain([0x01u8; 40].iter()) {
        std::thread::sleep(Duration::from_millis(200));
        if s.write_all(std::slice::from_ref(b)).is_err() || start.elapsed() > Duration::from_secs(6) {
            closed = true;
            break;
        }
    }
    assert!(
        closed || closed_within(&mut s, Duration::from_secs(3)),
        "a dribbling handshake must be cut off"
    );
    assert!(start.elapsed() < Duration::from_secs(9));
    server.healthy();
}

/// Hostile XML bodies, auth headers, a huge query and pipelined garbage;
/// the server answers each as it should and stays healthy.
fn hostile_inputs(server: &Server) {
    let put = server.raw(server.signed("PUT", "/devstoreaccount1/hostileq", b"").as_bytes());
    assert!(put.starts_with("HTTP/1.1 201"), "{put}");
    let deep = format!("{}x{}", "<a>".repeat(10_000), "</a>".repeat(10_000));
    let bomb = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><QueueMessage><MessageText>&lol2;</MessageText></QueueMessage>"#;
    let external = r#"<!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><QueueMessage><MessageText>&xxe;</MessageText></QueueMessage>"#;
    let bodies: Vec<Vec<u8>> = vec![
        deep.into_bytes(),
        bomb.as_bytes().to_vec(),
        external.as_bytes().to_vec(),
        b"<QueueMessage><MessageText>\xff\xfe</MessageText></QueueMessage>".to_vec(),
        b"<QueueMessage><MessageText>unterminated".to_vec(),
    ];
    for body in bodies {
        let r = server.raw(&server.signed_bytes("POST", "/devstoreaccount1/hostileq/messages", &body));
        assert!(
            r.starts_with("HTTP/1.1 400") && r.contains("x-ms-error-code: InvalidXmlDocument"),
            "{}: {r}",
            String::from_utf8_lossy(&body[..body.len().min(60)])
        );
    }
    server.healthy();
    let resp = server.raw(b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: SharedKey devstoreaccount1:!!!not-base64!!!\r\nx-ms-date: Sun, 22 Nov 2026 10:43:06 GMT\r\nConnection: close\r\n\r\n");
    assert!(
        resp.starts_with("HTTP/1.1 403") && resp.contains("AuthenticationFailed"),
        "{resp}"
    );
    let resp = server.raw(b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: SharedKey nocolon\r\nConnection: close\r\n\r\n");
    assert!(
        resp.starts_with("HTTP/1.1 400") && resp.contains("InvalidAuthenticationInfo"),
        "{resp}"
    );
    let huge = format!(
        "GET /devstoreaccount1/?comp=list&x={} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "q".repeat(100_000)
    );
    assert!(server.raw(huge.as_bytes()).starts_with("HTTP/1.1 431"));
    let resp = server.raw(b"OPTIONS /devstoreaccount1/q HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://x\r\nAccess-Control-Request-Method: GET\r\n\r\n\x00\x01\x02garbage\r\n\r\n");
    assert!(
        resp.starts_with("HTTP/1.1 403") && resp.contains("HTTP/1.1 400"),
        "a good request then pipelined garbage: {resp}"
    );
    server.healthy();
}

/// `--max-message-kib 1024`: 256 connections each announcing a 2 MiB body.
/// A core reads at most `LARGE_BODY_BUDGET_BYTES` (64 MiB) of such bodies at
/// once: the first 32 may send theirs, every other one is answered 503
/// `ServerBusy` from its head alone. Memory stays within the budget, and
/// once the connections go, the budget is whole again.
#[test]
fn large_bodies_on_256_connections_stay_within_the_core_budget() {
    const BODY: usize = 2 * 1024 * 1024 + 512; // the request limit at 1 MiB messages
    const BUDGET_BODIES: usize = 64 * 1024 * 1024 / BODY;
    let server = Server::start(&["--max-message-kib", "1024"]);
    let mut c = client::Client::new(server.port);
    assert_eq!(c.call("PUT", "/devstoreaccount1/largeq", &[], b"").unwrap().status, 201);
    let before = server.rss_kib();
    let head =
        format!("POST /devstoreaccount1/largeq/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {BODY}\r\n\r\n");
    let mut conns: Vec<TcpStream> = (0..256)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (mut busy, mut reading) = (0, Vec::new());
    for mut s in conns.drain(..) {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(n) if n > 0 => {
                let text = String::from_utf8_lossy(&buf[..n]);
                assert!(
                    text.starts_with("HTTP/1.1 503") && text.contains("ServerBusy"),
                    "{text}"
                );
                busy += 1;
            }
            _ => reading.push(s),
        }
    }
    assert_eq!(reading.len(), BUDGET_BODIES, "{busy} refused");
    // The admitted ones send all but the last byte of their bodies, and wait.
    let chunk = vec![b'a'; BODY - 1];
    for s in reading.iter_mut() {
        s.write_all(&chunk).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let during = server.rss_kib();
    println!(
        "{busy} refused, {} bodies read: RSS +{} KiB",
        reading.len(),
        during - before
    );
    assert!(
        during < before + 128 * 1024,
        "{} bodies of 2 MiB held {} KiB",
        reading.len(),
        during - before
    );
    server.healthy();
    drop(reading);
    // The budget comes back: a 1 MiB message goes in (after a retry or two
    // while the server notices the closed connections).
    let text = "m".repeat(1024 * 1024);
    let body = client::message_xml(&text);
    let mut status = 0;
    for _ in 0..50 {
        let mut c = client::Client::new(server.port);
        status = c
            .call("POST", "/devstoreaccount1/largeq/messages", &[], &body)
            .map_or(0, |r| r.status);
        if status == 201 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status, 201);
}
