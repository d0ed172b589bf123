//! CI's kill -9 run: at least 25 cycles against the real binary, with small
//! WAL segments so rotation happens under the kills. Longer soaks: the
//! `crashloop` binary (`--iterations`, `--seconds`).

use hematite_tests::crash::{default_bin, run, Config};

#[test]
fn kill9_cycles_lose_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let seed: u64 = std::env::var("CRASHLOOP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let cfg = Config {
        bin: default_bin(),
        data_dir: dir.path().to_path_buf(),
        iterations: std::env::var("CRASHLOOP_ITERATIONS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(25),
        seconds: None,
        workers: 3,
        seed,
        server_args: vec![
            "--segment-mib".into(),
            "1".into(),
            "--io-memory-kib".into(),
            "512".into(),
        ],
    };
    let sum = run(&cfg);
    println!("{} (seed {seed})", sum.line());
    assert!(sum.cycles >= cfg.iterations, "only {} cycles ran", sum.cycles);
    assert!(
        sum.violations.is_empty(),
        "seed {seed}: {} violations; the first ones: {:#?}",
        sum.violations.len(),
        &sum.violations[..sum.violations.len().min(20)]
    );
    // Every kind of check ran at least once (each is a count of facts that
    // would have been a violation had the server got them wrong).
    let f = sum.facts;
    for (kind, n) in [
        ("acknowledged receipts", f.receipts),
        ("acknowledged messages", f.messages),
        ("messages invisible past a restart", f.invisible),
        ("expired messages", f.expired),
        ("unexpired messages with a TTL", f.unexpired),
        ("deleted or cleared messages", f.removed),
        ("queue definitions", f.queues),
        ("operations in flight at a kill", f.pending),
    ] {
        assert!(n > 0, "seed {seed}: no {kind} were checked");
    }
}

/// The helpers the harness relies on tell a kill from an exit on its own.
#[test]
fn kill9_reports_an_exit_it_did_not_cause() {
    use std::process::{Command, Stdio};
    let mut exits = Command::new("sh")
        .args(["-c", "echo dying >&2; exit 70"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tail = hematite_tests::proc::StderrTail::attach(&mut exits);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let err = hematite_tests::proc::kill9_checked(&mut exits).unwrap_err();
    assert!(err.contains("exited on its own (exit status 70)"), "{err}");
    assert_eq!(tail.tail(100, true), "dying\n");
    let mut runs = Command::new("sleep").arg("30").spawn().unwrap();
    let status = hematite_tests::proc::kill9_checked(&mut runs).expect("killed by SIGKILL");
    assert_eq!(hematite_tests::proc::describe(status), "killed by signal 9");
}

/// A server started by a test that then panics, before anything stops it,
/// does not outlive the test: a server left running holds its port and a
/// CPU through every later test and measurement.
#[test]
fn a_child_dies_with_the_thread_that_started_it() {
    use std::process::Command;
    let (tx, rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hematite ready; exec sleep 60"]);
        let child = hematite_tests::proc::spawn_ready(cmd).expect("the stand-in starts");
        tx.send(child.id()).unwrap();
        // Neither stopped nor waited for: what a failing test leaves.
        std::mem::forget(child);
        panic!("the test fails before its server is stopped");
    });
    assert!(test.join().is_err(), "the thread panicked");
    let pid = i32::try_from(rx.recv().unwrap()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut status = 0;
        // SAFETY: reaping our own child, without blocking.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
                "the child ended with wait status {status:#x}, not by SIGKILL"
            );
            return;
        }
        assert_eq!(got, 0, "waitpid: {}", std::io::Error::last_os_error());
        if std::time::Instant::now() > deadline {
            // SAFETY: our own child, which outlived the test: end it here.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child outlived the thread that started it by 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
