//! hematite-wal on real files: check, dump, stats, and repair, including
//! injected corruption (found with file and offset) and a torn tail.

use engine::disk::std_fs::StdDisk;
use engine::model::Metadata;
use engine::shard::ShardConfig;
use engine::{Shard, SystemClock};
use futures::executor::block_on;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::rc::Rc;

fn tool(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hematite-wal"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Two server "lifetimes" on one shard directory, so the first segment is
/// sealed and later ones follow it.
fn build(dir: &Path) {
    let shard = dir.join("shard-000");
    std::fs::create_dir_all(&shard).unwrap();
    for round in 0..2 {
        let mut cfg = ShardConfig::new(0);
        cfg.segment_bytes = engine::limits::MIN_SEGMENT_BYTES;
        let s = block_on(Shard::open(StdDisk::new(&shard), cfg, Rc::new(SystemClock))).unwrap();
        block_on(async {
            let _ = s
                .create_queue("devstoreaccount1", "toolq", Metadata(vec![("K".into(), "v".into())]))
                .await;
            for i in 0..40 {
                s.put_message(
                    "devstoreaccount1",
                    "toolq",
                    format!("r{round}-m{i}-{}", "x".repeat(900)),
                    None,
                    Some(-1),
                )
                .await
                .unwrap();
            }
        });
    }
}

#[test]
fn check_dump_stats_on_a_healthy_directory() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let out = tool(&["check", dir.path().to_str().unwrap()], "");
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).starts_with("OK "), "{}", text(&out));
    let out = tool(&["dump", dir.path().to_str().unwrap()], "");
    let dump = text(&out);
    assert!(
        dump.contains("QUEUE_DEFINED") && dump.contains("devstoreaccount1/toolq"),
        "{dump}"
    );
    assert_eq!(dump.matches("MESSAGE_PUT").count(), 80);
    let out = tool(&["stats", dir.path().join("shard-000").to_str().unwrap()], "");
    let stats = text(&out);
    assert!(
        stats.contains("devstoreaccount1/toolq") && stats.contains("80"),
        "{stats}"
    );
    assert!(stats.contains("live bytes"));
}

#[test]
fn check_finds_injected_corruption_and_repair_quarantines_it() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let seg1 = dir.path().join("shard-000").join("00000000000000000001.wal");
    let mut bytes = std::fs::read(&seg1).unwrap();
    bytes[4096 + 40] ^= 0x20;
    std::fs::write(&seg1, &bytes).unwrap();
    let out = tool(&["check", dir.path().to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(1));
    let report = text(&out);
    assert!(
        report.contains("BAD") && report.contains("00000000000000000001.wal") && report.contains("offset 4128"),
        "{report}"
    );
    // repair asks first; anything but "yes" changes nothing
    let out = tool(&["repair", dir.path().to_str().unwrap(), "--quarantine"], "no\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(seg1.exists());
    let out = tool(&["repair", dir.path().to_str().unwrap(), "--quarantine", "--yes"], "");
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("quarantined 00000000000000000001.wal"));
    let out = tool(&["check", dir.path().to_str().unwrap()], "");
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn a_torn_tail_is_reported_and_cut() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let shard = dir.path().join("shard-000");
    let mut segs: Vec<_> = std::fs::read_dir(&shard)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segs.sort();
    // the newest segment holding data: zero the end of its last commit
    let last = segs
        .iter()
        .rev()
        .find(|p| std::fs::read(p).unwrap()[4096..].iter().any(|&b| b != 0))
        .unwrap()
        .clone();
    let mut bytes = std::fs::read(&last).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    for b in &mut bytes[end - 300..=end] {
        *b = 0;
    }
    std::fs::write(&last, &bytes).unwrap();
    let out = tool(&["check", dir.path().to_str().unwrap()], "");
    assert!(out.status.success(), "a torn tail is not corruption: {}", text(&out));
    assert!(text(&out).contains("torn tail"), "{}", text(&out));
    let out = tool(&["repair", dir.path().to_str().unwrap(), "--cut-tail", "--yes"], "");
    assert!(text(&out).contains("cut the torn tail"), "{}", text(&out));
    let out = tool(&["check", dir.path().to_str().unwrap()], "");
    assert!(
        out.status.success() && !text(&out).contains("torn tail"),
        "{}",
        text(&out)
    );
}
