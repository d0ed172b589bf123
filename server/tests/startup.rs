//! Startup and shutdown contract of the binary: clear messages (and exit 1,
//! never a panic) when something must change, the shard count guard, the
//! data-directory lock, --help, and exit 0 after SIGTERM.

use std::process::{Command, Output};

use hematite_tests::proc;

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
        "--in-memory",
        "--max-message-kib",
        "--huge-pages",
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

/// ramfs refuses O_DIRECT on every kernel (tmpfs accepts it since 6.6, so
/// it no longer serves). The server runs in a new user and mount namespace
/// with a ramfs mounted on its data directory, which needs no privileges
/// where unprivileged user namespaces are allowed. A machine without them
/// fails here loudly instead of skipping.
#[test]
fn a_directory_without_o_direct_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_sh(&format!(
        "exec unshare --user --map-root-user --mount sh -c 'mount -t ramfs none {dir} && exec \"$HEMATITE\" --addr 127.0.0.1:{port} --data-dir {dir}'",
        dir = dir.path().display(),
        port = proc::free_port(),
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("unshare:") && !err.contains("mount:"),
        "cannot make a ramfs in a user namespace here, so this check cannot run: {err}"
    );
    fails_with(&out, "does not support O_DIRECT");
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
    // A second server on the same directory is refused, on another port
    // too (on the same one the address check refuses it first).
    let out = proc::command(
        bin().as_ref(),
        proc::free_port(),
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

/// Every core binds with SO_REUSEPORT, which would let a second server on
/// another data directory bind the same port and split the clients with
/// the first: it is refused, on any host of the port. So is an admin
/// address on the queue service's port; one another server holds turns
/// the admin address off, said in the log, rather than sharing it.
#[test]
fn a_second_server_on_the_same_port_is_refused_and_admin_ports_are_not_shared() {
    let (first_dir, second_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (port, admin) = (proc::free_port(), proc::free_port());
    let admin_addr = format!("127.0.0.1:{admin}");
    let io = ["--io-memory-kib", "512", "--shards", "1"];
    let first = proc::spawn_ready(proc::command(
        bin().as_ref(),
        port,
        first_dir.path(),
        &[&io[..], &["--admin-addr", &admin_addr]].concat(),
    ))
    .expect("hematite starts");
    let out = proc::command(bin().as_ref(), port, second_dir.path(), &io)
        .output()
        .unwrap();
    fails_with(&out, "another hematite already serves port");
    // On another host of the same port too (`0.0.0.0` covers every host).
    let out = Command::new(bin())
        .args(["--addr", &format!("0.0.0.0:{port}"), "--data-dir"])
        .arg(second_dir.path())
        .args(io)
        .output()
        .unwrap();
    fails_with(&out, "another hematite already serves port");
    // Refused before anything binds: the queue service's port, on any host.
    for host in ["127.0.0.1", "0.0.0.0", "127.0.0.2"] {
        let other = proc::free_port();
        let out = proc::command(
            bin().as_ref(),
            other,
            second_dir.path(),
            &[&io[..], &["--admin-addr", &format!("{host}:{other}")]].concat(),
        )
        .output()
        .unwrap();
        fails_with(&out, "overlaps --addr");
    }
    // The admin address another server holds: this one serves its queues
    // without one, and says so.
    let mut second = proc::spawn_ready(proc::command(
        bin().as_ref(),
        proc::free_port(),
        second_dir.path(),
        &[&io[..], &["--admin-addr", &admin_addr]].concat(),
    ))
    .expect("a server whose admin address is taken still starts");
    assert!(proc::stop(&mut second).success());
    let mut log = String::new();
    std::io::Read::read_to_string(second.stderr.as_mut().expect("piped"), &mut log).unwrap();
    assert!(
        log.contains("--admin-addr") && log.contains("another hematite already serves port"),
        "{log}"
    );
    stop(first);
}

/// The kernel's view of the process: `THP_enabled` in /proc/PID/status is 0
/// once PR_SET_THP_DISABLE is set (docs/decisions/0006-no-huge-pages.md).
fn thp_enabled(child: &std::process::Child) -> String {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_string())
        .expect("the kernel reports THP_enabled")
}

#[test]
fn huge_pages_are_off_unless_asked_for() {
    // The third case starts with the switch already off (mimalloc sets it
    // before `main` when told to): `--huge-pages` must clear it.
    type Case<'a> = (&'a [&'a str], Option<(&'a str, &'a str)>, &'a str);
    let cases: [Case; 3] = [
        (&[], None, "0"),
        (&["--huge-pages"], None, "1"),
        (&["--huge-pages"], Some(("MIMALLOC_ALLOW_THP", "0")), "1"),
    ];
    for (extra, env, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let port = proc::free_port();
        let mut args = vec!["--shards", "1", "--io-memory-kib", "512"];
        args.extend_from_slice(extra);
        let mut cmd = proc::command(bin().as_ref(), port, dir.path(), &args);
        // Neither the flag's variable nor mimalloc's own switch may decide for the test.
        cmd.env_remove("HEMATITE_HUGE_PAGES").env_remove("MIMALLOC_ALLOW_THP");
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let child = proc::spawn_ready(cmd).expect("hematite starts");
        let got = thp_enabled(&child);
        stop(child);
        assert_eq!(got, want, "with {extra:?} and {env:?}");
    }
}

/// Freed memory is given back by a thread of its own, never by a core
/// (server/src/allocator.rs, `start_purge_thread`): the server runs one.
#[test]
fn the_purge_thread_runs() {
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let cmd = proc::command(
        bin().as_ref(),
        port,
        dir.path(),
        &["--shards", "1", "--io-memory-kib", "512"],
    );
    let child = proc::spawn_ready(cmd).expect("hematite starts");
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", child.id()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    stop(child);
    assert_eq!(
        names.iter().filter(|n| *n == "hematite-purge").count(),
        1,
        "threads: {names:?}"
    );
}
