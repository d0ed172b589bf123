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
    assert!(sum.checked > 0, "nothing was checked");
    assert!(sum.violations.is_empty(), "seed {seed}: {:#?}", sum.violations);
}
