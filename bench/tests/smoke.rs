//! A few seconds of hematite-bench against the real server, so the load
//! generator cannot rot: every workload runs, answers parse, nothing errors.

use hematite_tests::proc;
use std::path::PathBuf;
use std::process::Command;

fn hematite() -> PathBuf {
    // Built by the same `cargo test --workspace` (the server's own tests need it).
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_hematite-bench"));
    let candidate = bench.with_file_name("hematite");
    if candidate.exists() {
        return candidate;
    }
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "hematite-server"])
        .status()
        .unwrap();
    assert!(status.success());
    candidate
}

#[test]
fn every_workload_runs_against_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = proc::spawn_ready(proc::command(
        &hematite(),
        port,
        dir.path(),
        &["--shards", "1", "--io-memory-kib", "512"],
    ))
    .unwrap();
    for (workload, extra) in [
        ("put", vec![]),
        ("cycle", vec![]),
        ("peek", vec!["--prefill", "50", "--batch", "32"]),
        ("drain", vec!["--prefill", "50"]),
        ("update", vec![]),
        ("meta", vec![]),
        ("mix", vec!["--queues", "3", "--rate", "300"]),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hematite-bench"))
            .args([
                "--endpoint",
                &format!("http://127.0.0.1:{port}/devstoreaccount1"),
                "--workload",
                workload,
                "--connections",
                "4",
                "--duration",
                "0.6",
                "--warmup",
                "0.2",
            ])
            .args(&extra)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{workload}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json = stdout.lines().last().unwrap();
        assert!(
            json.starts_with('{') && json.contains("\"ops_per_sec\""),
            "{workload}: {json}"
        );
        assert!(json.contains("\"errors\":{}"), "{workload} had errors: {json}");
        assert!(stdout.contains("p99"), "{workload}: the human table is printed");
    }
    assert!(proc::stop(&mut server).success());
}
