//! CI's kill -9 run: at least 25 cycles against the real binary, with small
//! WAL segments so rotation happens under the kills. Longer soaks: the
//! `crashloop` binary (`--iterations`, `--seconds`).

use e2e::crash::{default_bin, run, Config};

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
    assert!(sum.violations.is_empty(), "seed {seed}: {:#?}", sum.violations);
}
