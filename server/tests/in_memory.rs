//! `--in-memory` through the real binary: it serves (several shards, the
//! mesh, service properties, compaction) without creating anything on disk,
//! starts empty every time, and refuses to be combined with `--data-dir`.

use hematite_tests::client::{all_between, message_xml, Client};
use hematite_tests::proc;
use std::process::{Child, Command};

/// The binary under test (`HEMATITE_BIN_UNDER_TEST`, as in `support`, or this build's).
fn bin() -> String {
    std::env::var("HEMATITE_BIN_UNDER_TEST").unwrap_or_else(|_| env!("CARGO_BIN_EXE_hematite").into())
}

/// The binary in memory, run from `cwd`, with `extra` flags.
fn start(cwd: &std::path::Path, port: u16, extra: &[&str]) -> Child {
    let mut cmd = Command::new(bin());
    cmd.current_dir(cwd)
        .args([
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--in-memory",
            "--io-memory-kib",
            "512",
        ])
        .args(extra);
    proc::spawn_ready(cmd).expect("hematite starts in memory")
}

fn ok(c: &mut Client, method: &str, target: &str, body: &[u8], want: u16) -> String {
    let r = c.call(method, target, &[], body).expect("an answer");
    assert_eq!(r.status, want, "{method} {target}: {}", r.body);
    r.body
}

#[test]
fn in_memory_serves_creates_nothing_and_forgets_everything() {
    let cwd = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let mut child = start(cwd.path(), port, &["--shards", "2"]);
    let mut c = Client::new(port);
    // Queues on both shards (the mesh forwards to the other one).
    for q in ["memq1", "memq2", "memq3", "memq4"] {
        ok(&mut c, "PUT", &format!("/devstoreaccount1/{q}"), b"", 201);
        for i in 0..3 {
            let body = message_xml(&format!("{q} message {i} <&>"));
            ok(&mut c, "POST", &format!("/devstoreaccount1/{q}/messages"), &body, 201);
        }
    }
    let big = "b".repeat(65_536);
    ok(
        &mut c,
        "POST",
        "/devstoreaccount1/memq1/messages",
        &message_xml(&big),
        201,
    );
    let got = ok(
        &mut c,
        "GET",
        "/devstoreaccount1/memq2/messages?numofmessages=32",
        b"",
        200,
    );
    assert_eq!(
        all_between(&got, "MessageText"),
        (0..3).map(|i| format!("memq2 message {i} <&>")).collect::<Vec<_>>()
    );
    for (id, receipt) in all_between(&got, "MessageId")
        .into_iter()
        .zip(all_between(&got, "PopReceipt"))
    {
        let target = format!(
            "/devstoreaccount1/memq2/messages/{id}?popreceipt={}",
            receipt.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D")
        );
        ok(&mut c, "DELETE", &target, b"", 204);
    }
    let peeked = ok(
        &mut c,
        "GET",
        "/devstoreaccount1/memq1/messages?peekonly=true&numofmessages=32",
        b"",
        200,
    );
    let texts = all_between(&peeked, "MessageText");
    assert_eq!(texts.len(), 4);
    assert_eq!(texts[3], big);
    let emptied = ok(
        &mut c,
        "GET",
        "/devstoreaccount1/memq2/messages?peekonly=true",
        b"",
        200,
    );
    assert!(all_between(&emptied, "MessageText").is_empty(), "{emptied}");
    // Service properties live in memory too.
    let props = b"<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>http://a.example</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>5</MaxAgeInSeconds><ExposedHeaders></ExposedHeaders><AllowedHeaders></AllowedHeaders></CorsRule></Cors></StorageServiceProperties>";
    ok(
        &mut c,
        "PUT",
        "/devstoreaccount1/?restype=service&comp=properties",
        props,
        202,
    );
    let got = ok(
        &mut c,
        "GET",
        "/devstoreaccount1/?restype=service&comp=properties",
        b"",
        200,
    );
    assert!(got.contains("http://a.example"), "{got}");
    let listed = ok(&mut c, "GET", "/devstoreaccount1/?comp=list", b"", 200);
    assert_eq!(all_between(&listed, "Name"), ["memq1", "memq2", "memq3", "memq4"]);
    drop(c);
    let status = proc::stop(&mut child);
    assert!(status.success(), "{}", proc::describe(status));
    let left: Vec<_> = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "--in-memory created {left:?} in its working directory");
    // A restart starts empty: nothing survives.
    let mut child = start(cwd.path(), port, &["--shards", "2"]);
    let mut c = Client::new(port);
    let listed = ok(&mut c, "GET", "/devstoreaccount1/?comp=list", b"", 200);
    assert!(all_between(&listed, "Name").is_empty(), "{listed}");
    let got = ok(
        &mut c,
        "GET",
        "/devstoreaccount1/?restype=service&comp=properties",
        b"",
        200,
    );
    assert!(!got.contains("http://a.example"), "{got}");
    drop(c);
    assert!(proc::stop(&mut child).success());
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
}

#[test]
fn a_second_in_memory_server_on_the_same_address_is_refused() {
    let cwd = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let mut first = start(cwd.path(), port, &["--shards", "1"]);
    let out = Command::new(bin())
        .current_dir(cwd.path())
        .args(["--addr", &format!("127.0.0.1:{port}"), "--in-memory", "--shards", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("another hematite already serves port"), "{err}");
    assert!(proc::stop(&mut first).success());
}

#[test]
fn in_memory_with_a_data_dir_is_refused() {
    let cwd = tempfile::tempdir().unwrap();
    for env in [None, Some(("HEMATITE_DATA_DIR", "./data"))] {
        let mut cmd = Command::new(bin());
        cmd.current_dir(cwd.path()).arg("--in-memory");
        match env {
            Some((k, v)) => cmd.env(k, v),
            None => cmd.args(["--data-dir", "./data"]),
        };
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started: {err}");
        assert!(err.contains("'--in-memory' cannot be used with '--data-dir"), "{err}");
        assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
    }
}

#[test]
fn a_segment_too_small_for_the_message_size_is_refused() {
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .current_dir(cwd.path())
        .args(["--in-memory", "--max-message-kib", "1024", "--segment-mib", "1"])
        .args(["--addr", &format!("127.0.0.1:{}", proc::free_port())])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--max-message-kib 1024") && err.contains("must be at least"),
        "{err}"
    );
}
