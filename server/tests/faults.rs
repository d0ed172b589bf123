//! Disk faults on the real backend (built with `--features fault-injection`):
//! a failing fdatasync poisons the shard, answers 5xx and acknowledges
//! nothing more, and a restart keeps everything acknowledged; a full disk
//! refuses writes with 503 while reads work, and writes resume once space is
//! back. Run by tools/test-all with the feature on.

use client::Client;
use std::io::Read;
use std::process::Child;

mod support;
use support::{admin_get, proc};

use hematite_tests::client;

fn start(dir: &std::path::Path, port: u16, env: &[(&str, String)]) -> Child {
    let mut cmd = proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        port,
        dir,
        &["--shards", "1", "--io-memory-kib", "512", "--segment-mib", "1"],
    );
    for (k, v) in env {
        cmd.env(k, v);
    }
    proc::spawn_ready(cmd).expect("hematite starts")
}

fn put(c: &mut Client, q: &str, text: &str) -> u16 {
    let body = client::message_xml(text);
    c.call(
        "POST",
        &format!("/devstoreaccount1/{q}/messages?messagettl=-1"),
        &[],
        &body,
    )
    .map(|r| r.status)
    .unwrap_or(0)
}

#[test]
fn failed_fdatasync_poisons_answers_5xx_and_loses_nothing_acknowledged() {
    sync_fault_poisons(0);
}

/// The same with 20 KiB messages: every commit is at least 16 KiB, so its
/// write and fdatasync run as one job on the blocking pool, and the fault
/// strikes between the two inside it (docs/decisions/0002-fdatasync-path.md).
#[test]
fn a_failed_fdatasync_in_a_one_job_commit_poisons_the_same_way() {
    sync_fault_poisons(20 * 1024);
}

/// Puts texts `m{i}` padded with `pad` bytes until an injected fdatasync
/// failure, then checks the poisoning and, after a restart, that exactly
/// the acknowledged puts are there.
fn sync_fault_poisons(pad: usize) {
    let text = |i: usize| format!("m{i}{}", "p".repeat(pad));
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let admin = proc::free_port();
    let mut server = start(
        dir.path(),
        port,
        &[
            ("HEMATITE_FAULT_SYNC_AFTER", "40".into()),
            ("HEMATITE_ADMIN_ADDR", format!("127.0.0.1:{admin}")),
        ],
    );
    let mut c = Client::new(port);
    assert_eq!(c.call("PUT", "/devstoreaccount1/faultq", &[], b"").unwrap().status, 201);
    assert!(admin_get(admin, "/readyz").starts_with("HTTP/1.1 200"));
    let mut acked = Vec::new();
    let mut failure = None;
    for i in 0..200 {
        let text = text(i);
        match put(&mut c, "faultq", &text) {
            201 => acked.push(text),
            status => {
                failure = Some(status);
                break;
            }
        }
    }
    assert_eq!(failure, Some(500), "a failed fdatasync must answer 500");
    // poisoned: later writes are refused too, with InternalError
    let r = c
        .call(
            "POST",
            "/devstoreaccount1/faultq/messages",
            &[],
            b"<QueueMessage><MessageText>x</MessageText></QueueMessage>",
        )
        .unwrap();
    assert_eq!((r.status, r.code()), (500, "InternalError"));
    // The readiness probe says so, with the reason.
    let ready = admin_get(admin, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(ready.contains("shard 0 is poisoned"), "{ready}");
    assert!(
        admin_get(admin, "/healthz").starts_with("HTTP/1.1 200"),
        "the process still answers"
    );
    let metrics = admin_get(admin, "/metrics");
    assert!(metrics.contains("hematite_shard_poisoned{shard=\"0\"} 1"), "{metrics}");
    // Large puts went through the one-job path before the fault; small ones never do.
    let one_job: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hematite_wal_one_job_commits_total{shard=\"0\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no one-job counter: {metrics}"));
    assert_eq!(
        one_job > 0,
        pad > 0,
        "{one_job} one-job commits with {pad} bytes of padding"
    );
    proc::kill9(&mut server);
    let mut err = String::new();
    server.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(
        err.contains("poisoned") && err.contains("fdatasync"),
        "the log says why: {err}"
    );
    // Restart without faults: every acknowledged put is there, in order.
    // Peek shows at most 32, so drain with Get (each message once, since
    // the visibility timeout outlasts the test) and compare the whole list.
    let mut server = start(dir.path(), port, &[]);
    let mut c = Client::new(port);
    let mut texts = Vec::new();
    loop {
        let r = c
            .call(
                "GET",
                "/devstoreaccount1/faultq/messages?numofmessages=32&visibilitytimeout=600",
                &[],
                b"",
            )
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let batch = client::all_between(&r.body, "MessageText");
        if batch.is_empty() {
            break;
        }
        texts.extend(batch);
    }
    // The put that failed may or may not have reached the disk: it was never
    // acknowledged, so it may be there, as the last message, or not.
    let unacked = text(acked.len());
    if texts.len() == acked.len() + 1 {
        assert_eq!(texts.last(), Some(&unacked), "only the unacknowledged put may be extra");
        texts.pop();
    }
    assert_eq!(texts, acked, "every acknowledged put, in order, and nothing else");
    assert!(proc::stop(&mut server).success());
}

/// A server whose fault switch `var` names a flag file (not there yet),
/// with queue `q` created: the temporary directory, the flag, the data
/// directory, the port, the client and the process.
fn flagged(
    var: &str,
    q: &str,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    u16,
    Client,
    Child,
) {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("flag");
    let data = dir.path().join("data");
    let port = proc::free_port();
    let server = start(&data, port, &[(var, flag.display().to_string())]);
    let mut c = Client::new(port);
    assert_eq!(
        c.call("PUT", &format!("/devstoreaccount1/{q}"), &[], b"")
            .unwrap()
            .status,
        201
    );
    (dir, flag, data, port, c, server)
}

/// Puts 8 KB messages into `q` until one is refused (1 MiB segments: a
/// rotation within about 130 of them): how many were acknowledged, and
/// the refusal's status.
fn put_until_refused(c: &mut Client, q: &str) -> (usize, Option<u16>) {
    let big = "b".repeat(8000);
    let mut acked = 0;
    for i in 0..1000 {
        match put(c, q, &format!("{i}{big}")) {
            201 => acked += 1,
            s => return (acked, Some(s)),
        }
    }
    (acked, None)
}

#[test]
fn a_full_disk_refuses_writes_keeps_reads_and_recovers() {
    let (_dir, flag, _, _, mut c, mut server) = flagged("HEMATITE_FAULT_ENOSPC_FILE", "fullq");
    std::fs::write(&flag, b"").unwrap();
    let (_, refused) = put_until_refused(&mut c, "fullq");
    assert_eq!(refused, Some(503), "writes are refused once no new segment fits");
    let r = c
        .call("GET", "/devstoreaccount1/fullq/messages?peekonly=true", &[], b"")
        .unwrap();
    assert_eq!(r.status, 200, "reads still work");
    let r = c
        .call("GET", "/devstoreaccount1/fullq?comp=metadata", &[], b"")
        .unwrap();
    assert_eq!(r.status, 200);
    std::fs::remove_file(&flag).unwrap();
    assert_eq!(put(&mut c, "fullq", "after"), 201, "writes resume once space is back");
    assert!(proc::stop(&mut server).success());
}

/// A file that cannot be fully opened once created (here the descriptor
/// for the blocking pool: EMFILE) must not stay behind: the next segment
/// would be created under the same name and fail with EEXIST until a
/// restart. Writes are refused while descriptors run out, resume once they
/// are back, and nothing acknowledged is lost.
#[test]
fn running_out_of_descriptors_at_a_rotation_refuses_writes_and_recovers() {
    let (_dir, flag, data, port, mut c, mut server) = flagged("HEMATITE_FAULT_EMFILE_FILE", "fdq");
    std::fs::write(&flag, b"").unwrap();
    let (mut acked, refused) = put_until_refused(&mut c, "fdq");
    assert_eq!(
        refused,
        Some(500),
        "writes are refused once no new segment can be opened"
    );
    let r = c
        .call("GET", "/devstoreaccount1/fdq/messages?peekonly=true", &[], b"")
        .unwrap();
    assert_eq!(r.status, 200, "reads still work");
    std::fs::remove_file(&flag).unwrap();
    let big = "b".repeat(8000);
    for i in 0..300 {
        assert_eq!(
            put(&mut c, "fdq", &format!("after{i}{big}")),
            201,
            "writes resume (put {i})"
        );
        acked += 1;
    }
    proc::kill9(&mut server);
    let mut server = start(&data, port, &[]);
    let mut c = Client::new(port);
    let r = c.call("GET", "/devstoreaccount1/fdq?comp=metadata", &[], b"").unwrap();
    assert_eq!(r.status, 200);
    let count: usize = r
        .header("x-ms-approximate-messages-count")
        .and_then(|v| v.parse().ok())
        .expect("a message count");
    assert_eq!(count, acked, "every acknowledged put survives the restart");
    assert!(proc::stop(&mut server).success());
}

#[test]
fn a_panicking_shard_stops_the_whole_process_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let cmd = proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        port,
        dir.path(),
        &["--shards", "2", "--io-memory-kib", "512"],
    );
    let mut server = proc::spawn_ready(cmd).expect("hematite starts");
    let mut c = Client::new(port);
    // The panic happens on whichever core accepted the connection; the
    // other core is alive and must not keep the process half up.
    let _ = c.call(
        "GET",
        "/devstoreaccount1/?comp=list",
        &[("x-hematite-fault", "panic")],
        b"",
    );
    let since = std::time::Instant::now();
    let status = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break s;
        }
        assert!(
            since.elapsed() < std::time::Duration::from_secs(1),
            "the process is still running after a shard panicked"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(server::runtime::EXIT_SHARD_DIED), "{status}");
    let mut err = String::new();
    server.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(
        err.contains("panic") && err.contains("stopped after startup"),
        "the log says why: {err}"
    );
    // A restart recovers and serves.
    let cmd = proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        port,
        dir.path(),
        &["--shards", "2", "--io-memory-kib", "512"],
    );
    let mut server = proc::spawn_ready(cmd).expect("hematite restarts");
    assert_eq!(
        Client::new(port)
            .call("GET", "/devstoreaccount1/?comp=list", &[], b"")
            .unwrap()
            .status,
        200
    );
    assert!(proc::stop(&mut server).success());
}

#[test]
fn a_stuck_shard_stops_the_whole_process() {
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let cmd = proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        port,
        dir.path(),
        &["--shards", "1", "--io-memory-kib", "512"],
    );
    let mut server = proc::spawn_ready(cmd).expect("hematite starts");
    // The request blocks its core's thread forever: no panic, no exit.
    let sent = std::time::Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"GET /devstoreaccount1/?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nx-hematite-fault: hang\r\n\r\n",
    )
    .unwrap();
    let limit = server::limits::SHARD_STALL_LIMIT + std::time::Duration::from_secs(3);
    let status = loop {
        if let Some(st) = server.try_wait().unwrap() {
            break st;
        }
        assert!(
            sent.elapsed() < limit,
            "a stuck core kept the process up for {:?}",
            sent.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(server::runtime::EXIT_SHARD_DIED), "{status}");
    let mut err = String::new();
    server.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("made no progress"), "the log says why: {err}");
}
