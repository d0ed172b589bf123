//! The admin address through the real binary (docs/OPERATIONS.md): health
//! and readiness, a Prometheus scrape whose values move with the requests
//! made, and the request log (JSON), which never shows a signature.
//! Poisoned shards turning /readyz to 503 are in faults.rs (they need the
//! fault-injection build).

mod support;
use std::io::{Read, Write};
use support::{admin_get, admin_request, client, proc};

/// The value of one exposition line, by its name and labels exactly.
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
}

/// The sum of a per-shard family over all shards.
fn total(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{shard=")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn health_readiness_and_a_scrape_that_moves_with_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (proc::free_port(), proc::free_port());
    let admin_addr = format!("127.0.0.1:{admin}");
    let cmd = proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        port,
        dir.path(),
        &[
            "--shards",
            "2",
            "--io-memory-kib",
            "512",
            "--admin-addr",
            &admin_addr,
            "--request-log",
            "--log-format",
            "json",
        ],
    );
    let mut child = proc::spawn_ready(cmd).expect("hematite starts");
    let mut tail = proc::StderrTail::attach(&mut child);
    assert!(admin_get(admin, "/healthz").starts_with("HTTP/1.1 200"));
    let ready = admin_get(admin, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200") && ready.contains("ready"), "{ready}");
    assert!(admin_get(admin, "/nothing").starts_with("HTTP/1.1 404"));

    let before = admin_get(admin, "/metrics");
    assert!(before.starts_with("HTTP/1.1 200"), "{before}");
    assert!(before.contains("text/plain; version=0.0.4"), "{before}");
    let put = r#"hematite_requests_total{operation="put_message",status="201"}"#;
    assert_eq!(value(&before, put), None);
    let commits_before = total(&before, "hematite_wal_commits_total");

    let mut c = client::Client::new(port);
    assert_eq!(
        c.call("PUT", "/devstoreaccount1/metricsq", &[], b"").unwrap().status,
        201
    );
    for i in 0..5 {
        let r = c.call(
            "POST",
            "/devstoreaccount1/metricsq/messages",
            &[],
            &client::message_xml(&format!("m{i}")),
        );
        assert_eq!(r.unwrap().status, 201);
    }
    assert_eq!(
        c.call("GET", "/devstoreaccount1/nosuchq?comp=metadata", &[], b"")
            .unwrap()
            .status,
        404
    );
    // A request that cannot be framed is counted too.
    let mut bad = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    bad.write_all(b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = bad.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    let after = admin_get(admin, "/metrics");
    assert_eq!(value(&after, put), Some(5.0), "{after}");
    assert_eq!(
        value(
            &after,
            r#"hematite_requests_total{operation="get_queue_metadata",status="404"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &after,
            r#"hematite_request_duration_seconds_count{operation="put_message"}"#
        ),
        Some(5.0)
    );
    assert!(
        total(&after, "hematite_wal_commits_total") >= commits_before + 6.0,
        "{after}"
    );
    assert_eq!(total(&after, "hematite_messages"), 5.0);
    assert_eq!(total(&after, "hematite_queues"), 1.0);
    assert_eq!(
        value(
            &after,
            r#"hematite_queue_messages{account="devstoreaccount1",queue="metricsq"}"#
        ),
        Some(5.0)
    );
    assert!(value(&after, "hematite_connections_accepted_total").unwrap_or(0.0) >= 1.0);
    assert_eq!(
        value(&after, r#"hematite_requests_total{operation="unframed",status="400"}"#),
        Some(1.0)
    );
    let head = admin_request(admin, "HEAD", "/metrics");
    assert!(
        head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
        "HEAD has no body: {head}"
    );
    let with_body = admin_request(
        admin,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        "",
    );
    assert!(
        with_body.starts_with("HTTP/1.1 400") && with_body.contains("no body"),
        "{with_body}"
    );
    assert!(value(&after, "hematite_request_body_bytes_total").unwrap_or(0.0) > 0.0);
    assert!(after.contains("hematite_wal_fdatasync_seconds_bucket{shard=\"0\",le=\"+Inf\"}"));
    assert!(after.contains("hematite_wal_write_seconds_bucket{shard=\"0\",le=\"+Inf\"}"));
    assert!(after.contains("hematite_wal_commit_seconds_bucket{shard=\"0\",le=\"+Inf\"}"));
    for family in [
        "hematite_compaction_futile_rewrites_total",
        "hematite_compaction_messages_scanned_total",
    ] {
        assert!(
            after.contains(&format!("{family}{{shard=\"0\"}} ")),
            "{family}: {after}"
        );
    }

    // Cleared messages are released by maintenance, a slice per pass, and
    // counted when they are.
    assert_eq!(total(&after, "hematite_messages_released_total"), 0.0, "{after}");
    let cleared = c.call("DELETE", "/devstoreaccount1/metricsq/messages", &[], b"");
    assert_eq!(cleared.unwrap().status, 204);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let scrape = admin_get(admin, "/metrics");
        let released = total(&scrape, "hematite_messages_released_total");
        if released == 5.0 {
            break;
        }
        assert!(released < 5.0, "more released than cleared: {scrape}");
        assert!(
            std::time::Instant::now() < deadline,
            "not released within 10 s: {scrape}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // A SAS request: its signature must not reach the log.
    let sas = hematite_client::service_sas(
        &hematite_client::Credentials::dev(),
        "metricsq",
        "r",
        "2099-01-01T00:00:00Z",
        "2026-10-06",
    );
    let sig = sas.split('&').find_map(|p| p.strip_prefix("sig=")).unwrap().to_string();
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(
        format!("GET /devstoreaccount1/metricsq/messages?peekonly=true&{sas} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut answer = String::new();
    let _ = raw.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    assert!(proc::stop(&mut child).success());
    let log = tail.tail(proc::StderrTail::CAP, true);
    let line = log
        .lines()
        .find(|l| l.contains("hematite_request") && l.contains("put_message"))
        .unwrap_or_else(|| panic!("no request line in the log: {log}"));
    let json: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
    assert_eq!(json["fields"]["status"], 201, "{line}");
    assert!(json["fields"]["latency_us"].is_u64(), "{line}");
    assert!(log.contains("sig=REDACTED"), "{log}");
    assert!(!log.contains(&sig), "the signature reached the log");
}
