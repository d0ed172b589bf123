//! Startup and shutdown contract of the binary: clear messages (and exit 1,
//! never a panic) when something must change, the shard count guard, the
//! data-directory lock, --help, and exit 0 after SIGTERM.

use std::process::{Command, Output};

#[path = "../../tests/src/proc.rs"]
#[allow(dead_code)] // each test file uses part of the shared helpers
mod proc;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_hematite")
}

fn run_sh(script: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("HEMATITE", bin())
        .output()
        .unwrap()
}

fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--addr",
        "--data-dir",
        "--shards",
        "--account",
        "--segment-mib",
        "--body-cache-mib",
        "--fdatasync",
        "--io-memory-kib",
        "--quarantine-corrupt-segments",
        "--azurite-receipt-errors",
        "HEMATITE_ADDR",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn low_memlock_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_sh(&format!(
        "ulimit -l 64 && exec \"$HEMATITE\" --addr 127.0.0.1:{} --data-dir {}",
        proc::free_port(),
        dir.path().display()
    ));
    fails_with(&out, "ulimit -l");
}

#[test]
fn a_directory_without_o_direct_is_explained() {
    if !std::path::Path::new("/dev/shm").is_dir() {
        eprintln!("skipped: no /dev/shm (tmpfs) on this machine");
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    // tmpfs supports O_DIRECT since Linux 6.6; then there is nothing to refuse here.
    use std::os::unix::fs::OpenOptionsExt;
    let probe = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(dir.path().join("p"));
    if probe.is_ok() {
        eprintln!("skipped: this kernel's tmpfs accepts O_DIRECT");
        return;
    }
    let out = Command::new(bin())
        .args([
            "--addr",
            &format!("127.0.0.1:{}", proc::free_port()),
            "--data-dir",
            dir.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    fails_with(&out, "O_DIRECT");
}

#[test]
fn bad_accounts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args([
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--account",
            "acct:not*base64",
        ])
        .output()
        .unwrap();
    fails_with(&out, "base64");
}

fn start(dir: &std::path::Path, port: u16, shards: &str) -> std::process::Child {
    proc::spawn_ready(proc::command(
        bin().as_ref(),
        port,
        dir,
        &["--shards", shards, "--io-memory-kib", "512"],
    ))
    .expect("hematite starts")
}

fn stop(mut child: std::process::Child) {
    assert!(proc::stop(&mut child).success(), "exit 0 after SIGTERM");
}

#[test]
fn shard_count_is_fixed_and_the_directory_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let first = start(dir.path(), port, "1");
    // A second server on the same directory is refused (SO_REUSEPORT would let it bind).
    let out = proc::command(
        bin().as_ref(),
        port,
        dir.path(),
        &["--shards", "1", "--io-memory-kib", "512"],
    )
    .output()
    .unwrap();
    fails_with(&out, "in use by another hematite");
    stop(first);
    let out = proc::command(
        bin().as_ref(),
        port,
        dir.path(),
        &["--shards", "2", "--io-memory-kib", "512"],
    )
    .output()
    .unwrap();
    fails_with(&out, "--shards 1");
    // and the right count starts again
    stop(start(dir.path(), port, "1"));
}
