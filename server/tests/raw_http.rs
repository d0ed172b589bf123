//! The HTTP layer over raw TCP against the real binary: keep-alive,
//! pipelining, Connection: close, HTTP/1.0, Expect: 100-continue, chunked
//! bodies, HEAD, and malformed or oversized requests. After every bad
//! request the server must still answer a good one.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::Duration;

use hematite_tests::client;

use hematite_tests::proc;

struct TestServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl TestServer {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = proc::free_port();
        let cmd = proc::command(
            env!("CARGO_BIN_EXE_hematite").as_ref(),
            port,
            dir.path(),
            &["--shards", "1", "--io-memory-kib", "512"],
        );
        let child = proc::spawn_ready(cmd).expect("hematite starts");
        TestServer { child, port, _dir: dir }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends raw bytes on a fresh connection and reads until the server closes.
    fn exchange(&self, raw: &[u8]) -> String {
        let mut s = self.connect();
        s.write_all(raw).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A signed request's bytes.
    fn signed(&self, method: &str, target: &str, extra: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
        client::signed_request(self.port, &base64_decode(client::KEY), method, target, extra, body).unwrap()
    }

    /// The server still serves a normal, signed request correctly.
    fn assert_healthy(&self) {
        let resp = self.exchange(
            &[
                self.signed("GET", "/devstoreaccount1/?comp=list", &[("Connection", "close")], b""),
                vec![],
            ]
            .concat(),
        );
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "server unhealthy: {resp}");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let status = proc::stop(&mut self.child);
        assert!(
            status.success() || std::thread::panicking(),
            "hematite exited with {status}"
        );
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn statuses(resp: &str) -> Vec<u16> {
    resp.match_indices("HTTP/1.1 ")
        .map(|(i, _)| resp[i + 9..i + 12].parse().unwrap())
        .collect()
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let s = TestServer::start();
    let mut raw = Vec::new();
    raw.extend(s.signed(
        "PUT",
        "/devstoreaccount1/pipeq",
        &[("x-ms-client-request-id", "one")],
        b"",
    ));
    raw.extend(s.signed(
        "POST",
        "/devstoreaccount1/pipeq/messages",
        &[("x-ms-client-request-id", "two")],
        b"<QueueMessage><MessageText>p</MessageText></QueueMessage>",
    ));
    raw.extend(s.signed(
        "GET",
        "/devstoreaccount1/pipeq/messages?peekonly=true",
        &[("x-ms-client-request-id", "three"), ("Connection", "close")],
        b"",
    ));
    let resp = s.exchange(&raw);
    assert_eq!(statuses(&resp), vec![201, 201, 200], "{resp}");
    let (a, b, c) = (
        resp.find("one").unwrap(),
        resp.find("two").unwrap(),
        resp.find("three").unwrap(),
    );
    assert!(a < b && b < c);
    assert!(resp.contains("<MessageText>p</MessageText>"));
}

#[test]
fn keep_alive_close_and_http10() {
    let s = TestServer::start();
    let mut c = s.connect();
    for _ in 0..3 {
        c.write_all(&s.signed("GET", "/devstoreaccount1/?comp=list", &[], b""))
            .unwrap();
        let mut buf = vec![0u8; 8192];
        let n = c.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    }
    let resp = s.exchange(b"GET /devstoreaccount1/?comp=list HTTP/1.0\r\nHost: x\r\n\r\n");
    assert!(
        resp.starts_with("HTTP/1.1 403") && resp.contains("Connection: close"),
        "{resp}"
    );
}

#[test]
fn expect_continue_and_chunked_bodies() {
    let s = TestServer::start();
    s.exchange(&s.signed("PUT", "/devstoreaccount1/chunkq", &[("Connection", "close")], b""));
    let body = b"<QueueMessage><MessageText>chunky</MessageText></QueueMessage>";
    let mut chunked = Vec::new();
    for part in body.chunks(10) {
        chunked.extend(format!("{:x}\r\n", part.len()).into_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut head = s.signed(
        "POST",
        "/devstoreaccount1/chunkq/messages",
        &[
            ("Transfer-Encoding", "chunked"),
            ("Expect", "100-continue"),
            ("Connection", "close"),
        ],
        body,
    );
    let mut c = s.connect();
    c.write_all(&head).unwrap();
    let mut buf = vec![0u8; 64];
    let n = c.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"HTTP/1.1 100 Continue\r\n\r\n");
    c.write_all(&chunked).unwrap();
    let mut rest = String::new();
    c.read_to_string(&mut rest).unwrap();
    assert!(rest.starts_with("HTTP/1.1 201"), "{rest}");
    head.clear();
    let peek = s.exchange(&s.signed(
        "GET",
        "/devstoreaccount1/chunkq/messages?peekonly=true",
        &[("Connection", "close")],
        b"",
    ));
    assert!(peek.contains("<MessageText>chunky</MessageText>"));
}

#[test]
fn head_has_no_body() {
    let s = TestServer::start();
    s.exchange(&s.signed("PUT", "/devstoreaccount1/headq", &[("Connection", "close")], b""));
    let resp = s.exchange(&s.signed(
        "HEAD",
        "/devstoreaccount1/nosuchq?comp=metadata",
        &[("Connection", "close")],
        b"",
    ));
    assert!(
        resp.starts_with("HTTP/1.1 404") && resp.contains("x-ms-error-code: QueueNotFound"),
        "{resp}"
    );
    assert!(resp.ends_with("\r\n\r\n"), "HEAD must not carry a body: {resp}");
}

#[test]
fn malformed_and_oversized_requests_get_answers_and_the_server_survives() {
    let s = TestServer::start();
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (
            b"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello".to_vec(),
            400,
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n".to_vec(), 400),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc".to_vec(),
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nnothex\r\n".to_vec(),
            400,
        ),
        (
            format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(40_000)).into_bytes(),
            431,
        ),
        (
            format!("GET / HTTP/1.1\r\n{}\r\n", "X-H: 1\r\n".repeat(150)).into_bytes(),
            431,
        ),
        (
            b"POST /devstoreaccount1/q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200000\r\n\r\n".to_vec(),
            413,
        ),
        (
            b"GET /devstoreaccount1/%zz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_vec(),
            400,
        ),
        (
            b"GET /devstoreaccount1/../etc/passwd HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_vec(),
            400,
        ),
        (
            b"GET /devstoreaccount1/\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_vec(),
            400,
        ),
    ];
    for (raw, want) in cases {
        let resp = s.exchange(&raw);
        assert_eq!(
            statuses(&resp).first(),
            Some(&want),
            "{} -> {resp}",
            String::from_utf8_lossy(&raw[..raw.len().min(80)])
        );
        assert!(resp.contains("x-ms-error-code:"), "{resp}");
        s.assert_healthy();
    }
    let resp =
        s.exchange(b"POST /devstoreaccount1/q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200000\r\n\r\n");
    assert!(resp.contains("<MaxLimit>131584</MaxLimit>"));
    // A body shorter than declared, then the client gives up: no answer owed, no harm done.
    let mut c = s.connect();
    c.write_all(b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nshort")
        .unwrap();
    drop(c);
    s.assert_healthy();
}

/// Issue 9.8: two Set Service Properties at once, each changing a different
/// group, must both land (each merges into the value the other stored).
#[test]
fn concurrent_set_service_properties_lose_no_update() {
    let server = TestServer::start();
    let logging = |on: bool| {
        format!("<StorageServiceProperties><Logging><Version>1.0</Version><Delete>{on}</Delete><Read>false</Read><Write>false</Write><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging></StorageServiceProperties>")
    };
    let cors = |n: usize| {
        format!("<StorageServiceProperties><Cors>{}</Cors></StorageServiceProperties>", "<CorsRule><AllowedOrigins>http://a.example</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders></AllowedHeaders><ExposedHeaders></ExposedHeaders><MaxAgeInSeconds>1</MaxAgeInSeconds></CorsRule>".repeat(n))
    };
    let target = "/devstoreaccount1/?restype=service&comp=properties";
    for round in 0..20 {
        let mut c = client::Client::new(server.port);
        assert_eq!(
            c.call("PUT", target, &[], logging(false).as_bytes()).unwrap().status,
            202
        );
        assert_eq!(c.call("PUT", target, &[], cors(0).as_bytes()).unwrap().status, 202);
        let a = server.signed("PUT", target, &[("Connection", "close")], logging(true).as_bytes());
        let b = server.signed("PUT", target, &[("Connection", "close")], cors(1).as_bytes());
        let (mut sa, mut sb) = (server.connect(), server.connect());
        sa.write_all(&a).unwrap();
        sb.write_all(&b).unwrap();
        for s in [&mut sa, &mut sb] {
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            assert!(out.starts_with(b"HTTP/1.1 202"), "{}", String::from_utf8_lossy(&out));
        }
        let props = c.call("GET", target, &[], b"").unwrap().body;
        assert!(
            props.contains("<Delete>true</Delete>") && props.contains("http://a.example"),
            "round {round}: one of two concurrent updates was lost: {props}"
        );
    }
}

/// Delete Message Batch (docs/EXTENSIONS.md): one answer per message, in
/// order; only the messages whose receipts match are gone.
#[test]
fn delete_message_batch_answers_each_message_in_order() {
    let server = TestServer::start();
    let mut c = client::Client::new(server.port);
    assert_eq!(c.call("PUT", "/devstoreaccount1/batchq", &[], b"").unwrap().status, 201);
    for i in 0..3 {
        let put = c.call(
            "POST",
            "/devstoreaccount1/batchq/messages",
            &[],
            &client::message_xml(&format!("m{i}")),
        );
        assert_eq!(put.unwrap().status, 201);
    }
    let got = c
        .call(
            "GET",
            "/devstoreaccount1/batchq/messages?numofmessages=3&visibilitytimeout=1",
            &[],
            b"",
        )
        .unwrap();
    let ids = client::all_between(&got.body, "MessageId");
    let receipts = client::all_between(&got.body, "PopReceipt");
    assert_eq!(ids.len(), 3, "{}", got.body);
    let entry = |id: &str, receipt: &str| {
        format!("<Message><MessageId>{id}</MessageId><PopReceipt>{receipt}</PopReceipt></Message>")
    };
    let body = format!(
        "<BatchDelete>{}{}{}{}</BatchDelete>",
        entry(&ids[0], &receipts[0]),
        entry(&ids[1], &receipts[0]), // another message's receipt: 404, as Delete Message
        entry("00000000-0000-0000-0000-000000000000", &receipts[2]),
        entry(&ids[2], &receipts[2]),
    );
    let target = "/devstoreaccount1/batchq/messages?comp=batchdelete";
    let r = c.call("POST", target, &[], body.as_bytes()).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        client::all_between(&r.body, "Status"),
        ["204", "404", "404", "204"],
        "{}",
        r.body
    );
    assert_eq!(
        client::all_between(&r.body, "Code"),
        ["MessageNotFound", "MessageNotFound"],
        "{}",
        r.body
    );
    assert_eq!(client::all_between(&r.body, "MessageId")[0], ids[0]);
    // Once visible again, only the message with the wrong receipt is left.
    std::thread::sleep(Duration::from_millis(1100));
    let left = c
        .call(
            "GET",
            "/devstoreaccount1/batchq/messages?numofmessages=32&peekonly=true",
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(client::all_between(&left.body, "MessageText"), ["m1"], "{}", left.body);
    // Empty, oversized and GET batches are refused.
    let empty = c.call("POST", target, &[], b"<BatchDelete></BatchDelete>").unwrap();
    assert_eq!(empty.status, 400);
    let big = format!("<BatchDelete>{}</BatchDelete>", entry(&ids[0], &receipts[0]).repeat(33));
    assert_eq!(c.call("POST", target, &[], big.as_bytes()).unwrap().status, 400);
    assert_eq!(c.call("GET", target, &[], b"").unwrap().status, 400);
}

/// Put Message Batch (docs/EXTENSIONS.md): one entry per message, in order;
/// a message Put Message would refuse is refused alone.
#[test]
fn put_message_batch_answers_each_message_in_order() {
    let server = TestServer::start();
    let mut c = client::Client::new(server.port);
    assert_eq!(c.call("PUT", "/devstoreaccount1/batchp", &[], b"").unwrap().status, 201);
    let big = "x".repeat(70_000); // over Put Message's 64 KiB
    let body = format!(
        "<QueueMessageBatch>{}</QueueMessageBatch>",
        ["first", big.as_str(), "third"]
            .iter()
            .map(|t| format!("<QueueMessage><MessageText>{t}</MessageText></QueueMessage>"))
            .collect::<String>()
    );
    let target = "/devstoreaccount1/batchp/messages?comp=batch&messagettl=600";
    let r = c.call("POST", target, &[], body.as_bytes()).unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        client::all_between(&r.body, "Status"),
        ["201", "413", "201"],
        "{}",
        r.body
    );
    assert_eq!(client::all_between(&r.body, "MessageId").len(), 2);
    assert_eq!(client::all_between(&r.body, "PopReceipt").len(), 2);
    let got = c
        .call(
            "GET",
            "/devstoreaccount1/batchp/messages?numofmessages=32&peekonly=true",
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(
        client::all_between(&got.body, "MessageText"),
        ["first", "third"],
        "{}",
        got.body
    );
    // Whole-batch refusals: bad times, an empty batch, a missing queue.
    let bad_ttl = "/devstoreaccount1/batchp/messages?comp=batch&messagettl=0";
    assert_eq!(c.call("POST", bad_ttl, &[], body.as_bytes()).unwrap().status, 400);
    let empty = c.call("POST", target, &[], b"<QueueMessageBatch/>").unwrap();
    assert_eq!(empty.status, 400);
    let missing = "/devstoreaccount1/nosuchq/messages?comp=batch";
    assert_eq!(c.call("POST", missing, &[], body.as_bytes()).unwrap().status, 404);
}

/// Long polling over raw HTTP (docs/EXTENSIONS.md): a Get Messages with
/// `x-hematite-wait-seconds` waits on an empty queue, answers as soon as a
/// message is put, and at shutdown answers empty instead of holding the
/// drain. Two shards, so the waiter may sit on another core than its
/// connection.
#[test]
fn long_poll_answers_on_put_and_is_drained_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let cmd = proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        port,
        dir.path(),
        &["--shards", "2", "--io-memory-kib", "512"],
    );
    let mut child = proc::spawn_ready(cmd).expect("hematite starts");
    let mut c = client::Client::new(port);
    assert_eq!(c.call("PUT", "/devstoreaccount1/pollq", &[], b"").unwrap().status, 201);
    let wait = move |secs: &'static str| {
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let r = client::Client::new(port)
                .call(
                    "GET",
                    "/devstoreaccount1/pollq/messages",
                    &[("x-hematite-wait-seconds", secs)],
                    b"",
                )
                .unwrap();
            (r, started.elapsed())
        })
    };
    let waiter = wait("10");
    std::thread::sleep(Duration::from_millis(400));
    let put = c.call(
        "POST",
        "/devstoreaccount1/pollq/messages",
        &[],
        &client::message_xml("hello"),
    );
    assert_eq!(put.unwrap().status, 201);
    let (got, took) = waiter.join().unwrap();
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(client::all_between(&got.body, "MessageText"), ["hello"], "{}", got.body);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );

    let bad = c.call(
        "GET",
        "/devstoreaccount1/pollq/messages",
        &[("x-hematite-wait-seconds", "21")],
        b"",
    );
    assert_eq!(bad.unwrap().code(), "InvalidHeaderValue");

    let waiter = wait("20");
    std::thread::sleep(Duration::from_millis(400));
    let stopped = std::time::Instant::now();
    let status = proc::stop(&mut child);
    let (got, _) = waiter.join().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "the drain waited for the long poll"
    );
    assert_eq!(got.status, 200, "{}", got.body);
    assert!(client::all_between(&got.body, "MessageText").is_empty(), "{}", got.body);
}
