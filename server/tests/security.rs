//! The attacks of issue 8 against the real binary, one test each: a request
//! that used to kill a core, signed requests replayed as something else,
//! guessable receipts, a client that never reads, and the smaller holes.
//! docs/SECURITY.md explains the rules these tests hold the server to.
//!
//! `HEMATITE_BIN_UNDER_TEST` runs them against another build (how each was
//! seen to fail before its fix; docs/TESTING.md).

use client::{signed_request, Client, ACCOUNT};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

mod support;
use support::{base64_key, client, Server};

fn status_of(resp: &str) -> u16 {
    resp.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// (text, dequeue count) of every message a peek of 32 shows.
fn peek_all(c: &mut Client, q: &str) -> Vec<(String, String)> {
    let r = c
        .call(
            "GET",
            &format!("/devstoreaccount1/{q}/messages?peekonly=true&numofmessages=32"),
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    client::all_between(&r.body, "MessageText")
        .into_iter()
        .zip(client::all_between(&r.body, "DequeueCount"))
        .collect()
}

fn create_with_message(c: &mut Client, q: &str, text: &str) {
    let r = c.call("PUT", &format!("/devstoreaccount1/{q}"), &[], b"").unwrap();
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    let r = c
        .call(
            "POST",
            &format!("/devstoreaccount1/{q}/messages"),
            &[],
            &client::message_xml(text),
        )
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
}

#[test]
fn an_overflowing_chunk_size_is_refused_and_the_core_keeps_serving() {
    let server = Server::start(&[]);
    let resp = server.raw(b"PUT /devstoreaccount1/qone HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\nffffffffffffffff\r\nBB");
    assert_eq!(status_of(&resp), 413, "{resp}");
    server.healthy();
}

#[test]
fn an_acl_permission_longer_than_a_record_field_is_refused() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.call("PUT", "/devstoreaccount1/aclq", &[], b"").unwrap().status, 201);
    for (start, perm) in [
        ("2026-01-01T00:00:00Z".to_string(), "r".repeat(70_000)),
        ("x".repeat(70_000), "r".into()),
    ] {
        let body = format!(
            "<SignedIdentifiers><SignedIdentifier><Id>p</Id><AccessPolicy><Start>{start}</Start><Permission>{perm}</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>"
        );
        let r = c
            .call("PUT", "/devstoreaccount1/aclq?comp=acl", &[], body.as_bytes())
            .unwrap();
        assert_eq!(r.status, 400, "{}", r.body);
    }
    // Repeated letters are refused too: a permission has one spelling.
    let body = "<SignedIdentifiers><SignedIdentifier><Id>p</Id><AccessPolicy><Permission>rr</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";
    let r = c
        .call("PUT", "/devstoreaccount1/aclq?comp=acl", &[], body.as_bytes())
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    server.healthy();
}

#[test]
fn a_signed_peek_cannot_be_replayed_as_a_get() {
    let server = Server::start(&[]);
    let mut c = server.client();
    create_with_message(&mut c, "replayq", "keep me");
    let peek = server.signed(
        "GET",
        "/devstoreaccount1/replayq/messages?numofmessages=5&peekonly=true",
        b"",
    );
    assert_eq!(status_of(&server.raw(peek.as_bytes())), 200);
    // The same signature over a query that decodes to one name holding the
    // canonical form of both parameters.
    let replay = peek.replacen(
        "?numofmessages=5&peekonly=true",
        "?numofmessages%3A5%0Apeekonly=true",
        1,
    );
    let resp = server.raw(replay.as_bytes());
    assert_eq!(status_of(&resp), 400, "{resp}");
    assert!(resp.contains("InvalidQueryParameterValue"), "{resp}");
    assert_eq!(
        peek_all(&mut c, "replayq"),
        vec![("keep me".to_string(), "0".to_string())]
    );

    // Repeated parameters against a comma list.
    let list = server.signed("GET", "/devstoreaccount1/?comp=list&prefix=b,q", b"");
    let replay = list.replacen("&prefix=b,q", "&prefix=q&prefix=b", 1);
    assert_eq!(status_of(&server.raw(replay.as_bytes())), 400);
    // A control character in a value (refused before any signature check).
    let resp = server
        .raw(b"GET /devstoreaccount1/?comp=list&prefix=a%0Ab HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    assert_eq!(status_of(&resp), 400, "{resp}");
    assert!(resp.contains("InvalidQueryParameterValue"), "{resp}");
}

#[test]
fn a_signed_request_cannot_be_moved_to_another_queue_through_host() {
    let server = Server::start(&[]);
    let mut c = server.client();
    // Queue "messages" and a queue named like the account.
    create_with_message(&mut c, "messages", "in messages");
    create_with_message(&mut c, ACCOUNT, "in the account-named queue");
    let meta = server.signed("GET", "/devstoreaccount1/messages?comp=metadata", b"");
    for host in ["devstoreaccount1.evil.example", "devstoreaccount1.queue.localhost"] {
        let replay = meta.replacen(
            &format!("Host: 127.0.0.1:{}", server.port),
            &format!("Host: {host}:{}", server.port),
            1,
        );
        let resp = server.raw(replay.as_bytes());
        // Either the same resource (metadata of queue "messages") or a refusal.
        assert!(
            status_of(&resp) != 200 || resp.contains("x-ms-approximate-messages-count"),
            "{host}: {resp}"
        );
    }
    assert_eq!(
        peek_all(&mut c, ACCOUNT),
        vec![("in the account-named queue".to_string(), "0".to_string())]
    );
    assert_eq!(
        peek_all(&mut c, "messages"),
        vec![("in messages".to_string(), "0".to_string())]
    );
}

#[test]
fn comp_and_head_on_messages_never_dequeue() {
    let server = Server::start(&[]);
    let mut c = server.client();
    create_with_message(&mut c, "headq", "still here");
    let r = c
        .call("GET", "/devstoreaccount1/headq/messages?comp=metadata", &[], b"")
        .unwrap();
    assert_eq!((r.status, r.code()), (400, "InvalidQueryParameterValue"), "{}", r.body);
    let r = c.call("HEAD", "/devstoreaccount1/headq/messages", &[], b"").unwrap();
    assert_ne!(r.status, 200);
    let r = c
        .call("HEAD", "/devstoreaccount1/headq?comp=metadata", &[], b"")
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        peek_all(&mut c, "headq"),
        vec![("still here".to_string(), "0".to_string())]
    );
}

/// The 8-byte nonce of a receipt (base64url of nonce then sequence number).
fn nonce_of(receipt: &str) -> u64 {
    use base64::Engine;
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(receipt)
        .unwrap();
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

#[test]
fn pop_receipts_carry_unpredictable_bits() {
    let server = Server::start(&[]);
    let mut c = server.client();
    create_with_message(&mut c, "receiptq", "m");
    let mut nonces = Vec::new();
    for _ in 0..20 {
        let r = c
            .call(
                "GET",
                "/devstoreaccount1/receiptq/messages?visibilitytimeout=1",
                &[],
                b"",
            )
            .unwrap();
        let receipt = client::all_between(&r.body, "PopReceipt").pop().expect("a message");
        nonces.push(nonce_of(&receipt));
        // Update it visible again, so the next get sees it.
        let id = client::all_between(&r.body, "MessageId").pop().unwrap();
        let r = c
            .call(
                "PUT",
                &format!("/devstoreaccount1/receiptq/messages/{id}?popreceipt={receipt}&visibilitytimeout=0"),
                &[],
                b"",
            )
            .unwrap();
        assert_eq!(r.status, 204, "{}", r.body);
        let next = r.header("x-ms-popreceipt").unwrap().to_string();
        nonces.push(nonce_of(&next));
    }
    // A counter differs by small steps; 64 random bits almost never come
    // within 2^32 of each other (chance about 2^-31 per pair).
    for w in nonces.windows(2) {
        assert!(
            w[0].abs_diff(w[1]) > 1 << 32,
            "receipt nonces look sequential: {nonces:x?}"
        );
    }
}

#[test]
fn a_client_that_never_reads_is_cut_off_and_memory_stays_bounded() {
    let server = Server::start(&["--request-timeout-secs", "2"]);
    let mut c = server.client();
    // 32 messages of 64 KiB of quotes: each peek answers about 2 MiB or more.
    assert_eq!(c.call("PUT", "/devstoreaccount1/bigq", &[], b"").unwrap().status, 201);
    let text = "\"".repeat(64 * 1024);
    for _ in 0..32 {
        let r = c
            .call(
                "POST",
                "/devstoreaccount1/bigq/messages",
                &[],
                &client::message_xml(&text),
            )
            .unwrap();
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let before = server.rss_kib();
    let key = base64_key();
    let one = signed_request(
        server.port,
        &key,
        "GET",
        "/devstoreaccount1/bigq/messages?peekonly=true&numofmessages=32",
        &[],
        b"",
    )
    .unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let start = Instant::now();
    let mut sent = 0;
    while sent < 200 && start.elapsed() < Duration::from_secs(4) {
        if s.write_all(&one).is_err() {
            break;
        }
        sent += 1;
    }
    std::thread::sleep(Duration::from_secs(4));
    let during = server.rss_kib();
    assert!(
        during < before + 64 * 1024,
        "{sent} pipelined peeks nobody reads grew memory by {} KiB",
        during.saturating_sub(before)
    );
    // The write deadline has passed: the server has given up on this peer.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let cut = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                break false
            }
            Err(_) => break true,
        }
    };
    assert!(cut, "the connection is still open after {total} bytes");
    server.healthy();
}

#[test]
fn sas_permissions_with_unknown_or_repeated_letters_are_refused() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.call("PUT", "/devstoreaccount1/sasq", &[], b"").unwrap().status, 201);
    let creds = hematite_client::Credentials::dev();
    for sp in ["rr", "rz", "rap"] {
        let sas = hematite_client::sign::service_sas(&creds, "sasq", sp, "2099-01-01T00:00:00Z", "2026-10-06");
        let req = format!(
            "GET /devstoreaccount1/sasq/messages?peekonly=true&{sas} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        );
        let resp = server.raw(req.as_bytes());
        let want = if sp == "rap" { 200 } else { 403 };
        assert_eq!(status_of(&resp), want, "sp={sp}: {resp}");
    }
}

#[test]
fn a_star_cors_rule_never_allows_credentials() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let props = "<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders>*</AllowedHeaders><ExposedHeaders>*</ExposedHeaders><MaxAgeInSeconds>5</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";
    let r = c
        .call(
            "PUT",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[],
            props.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 202, "{}", r.body);
    let resp = server.raw(b"OPTIONS /devstoreaccount1/q HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nAccess-Control-Request-Method: GET\r\nConnection: close\r\n\r\n");
    assert_eq!(status_of(&resp), 200, "{resp}");
    assert!(resp.contains("Access-Control-Allow-Origin: *\r\n"), "{resp}");
    assert!(!resp.contains("Access-Control-Allow-Credentials"), "{resp}");
}

#[test]
fn http11_requests_need_exactly_one_host() {
    let server = Server::start(&[]);
    let none = server.raw(b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&none), 400, "{none}");
    let two = server.raw(b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: devstoreaccount1.queue.localhost\r\n\r\n");
    assert_eq!(status_of(&two), 400, "{two}");
    server.healthy();
}

/// Review finding: a chunked body has no Content-Length, so a captured
/// bodiless request could carry any body. Shared Key now signs the body's
/// real length.
#[test]
fn a_body_added_to_a_signed_bodiless_request_is_refused() {
    let server = Server::start(&[]);
    let mut c = server.client();
    create_with_message(&mut c, "chunkq", "original");
    let r = c
        .call("GET", "/devstoreaccount1/chunkq/messages?visibilitytimeout=1", &[], b"")
        .unwrap();
    let id = client::all_between(&r.body, "MessageId").pop().unwrap();
    let receipt = client::all_between(&r.body, "PopReceipt").pop().unwrap();
    // A visibility-only update: no body, signed as such.
    let update = server.signed(
        "PUT",
        &format!("/devstoreaccount1/chunkq/messages/{id}?popreceipt={receipt}&visibilitytimeout=0"),
        b"",
    );
    let evil = b"<QueueMessage><MessageText>evil</MessageText></QueueMessage>";
    let replay = update.replacen("Content-Length: 0\r\n", "Transfer-Encoding: chunked\r\n", 1);
    let mut raw = replay.into_bytes();
    raw.extend_from_slice(format!("{:x}\r\n", evil.len()).as_bytes());
    raw.extend_from_slice(evil);
    raw.extend_from_slice(b"\r\n0\r\n\r\n");
    let resp = server.raw(&raw);
    assert_eq!(status_of(&resp), 403, "{resp}");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        peek_all(&mut c, "chunkq"),
        vec![("original".to_string(), "1".to_string())]
    );
}

/// Review finding: duplicate detection and canonicalization were quadratic
/// in the number of query parameters; one unauthenticated request of about
/// 8,000 names held a core for most of a second.
#[test]
fn a_query_with_thousands_of_parameters_is_refused_at_once() {
    let server = Server::start(&[]);
    // 4,096 distinct names in 16 KiB: well inside the head limit.
    let names: Vec<String> = (0..4096).map(|i| format!("{i:03x}")).collect();
    let req = format!(
        "GET /devstoreaccount1/q?{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        names.join("&")
    );
    let start = Instant::now();
    let resp = server.raw(req.as_bytes());
    assert_eq!(status_of(&resp), 400, "{}", &resp[..resp.len().min(300)]);
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    server.healthy();
}

/// Review finding: error bodies echoed U+FFFE, which XML 1.0 forbids.
#[test]
fn error_bodies_stay_well_formed_xml() {
    let server = Server::start(&[]);
    let resp =
        server.raw(b"GET /devstoreaccount1/q?%EF%BF%BE%3A=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    assert_eq!(status_of(&resp), 400, "{resp}");
    assert!(!resp.contains('\u{FFFE}'), "{resp}");
    // Long values are echoed only in part.
    let long = format!(
        "GET /devstoreaccount1/q?comp={} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        "z".repeat(20_000)
    );
    let resp = server.raw(long.as_bytes());
    assert!(resp.len() < 4_000, "an error echoed {} bytes", resp.len());
}

#[test]
fn a_cors_rule_with_star_among_origins_never_allows_credentials() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let props = "<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>http://a.example,*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders>*</AllowedHeaders><ExposedHeaders>*</ExposedHeaders><MaxAgeInSeconds>5</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";
    let r = c
        .call(
            "PUT",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[],
            props.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 202, "{}", r.body);
    let r = c
        .call(
            "GET",
            "/devstoreaccount1/?comp=list",
            &[("Origin", "http://evil.example")],
            b"",
        )
        .unwrap();
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some("*"));
    assert_eq!(r.header("Access-Control-Allow-Credentials"), None);
}
