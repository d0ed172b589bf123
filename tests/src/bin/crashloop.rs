//! crashloop: the kill -9 soak. Starts the real hematite binary, drives
//! concurrent load with a ledger of acknowledged operations, SIGKILLs it at
//! random moments, restarts it on the same directory and checks every
//! acknowledged operation.
//!
//! Usage: crashloop [--iterations N] [--seconds S] [--workers W] [--seed X]
//!                  [--bin PATH] [--data-dir DIR] [-- extra server flags]

use hematite_tests::crash::{default_bin, run, Config};

fn main() {
    let mut cfg = Config {
        bin: default_bin(),
        data_dir: std::env::temp_dir().join(format!("hematite-crashloop-{}", std::process::id())),
        iterations: 500,
        seconds: None,
        workers: 4,
        seed: rand::random(),
        server_args: vec!["--segment-mib".into(), "1".into()],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--iterations" => cfg.iterations = val().parse().expect("--iterations N"),
            "--seconds" => cfg.seconds = Some(val().parse().expect("--seconds S")),
            "--workers" => cfg.workers = val().parse().expect("--workers W"),
            "--seed" => cfg.seed = val().parse().expect("--seed X"),
            "--bin" => cfg.bin = val().into(),
            "--data-dir" => cfg.data_dir = val().into(),
            "--" => {
                cfg.server_args = args.by_ref().collect();
            }
            "-h" | "--help" => {
                println!(
                    "{}",
                    include_str!("crashloop.rs")
                        .lines()
                        .take_while(|l| l.starts_with("//!"))
                        .map(|l| l.trim_start_matches("//!").trim_start())
                        .collect::<Vec<_>>()
                        .join("\n")
                );
                return;
            }
            other => panic!("unknown argument {other} (see --help)"),
        }
    }
    eprintln!(
        "crashloop: seed {} bin {} data {}",
        cfg.seed,
        cfg.bin.display(),
        cfg.data_dir.display()
    );
    let sum = run(&cfg);
    for v in &sum.violations {
        eprintln!("VIOLATION {v}");
    }
    println!("{}", sum.line());
    let _ = std::fs::remove_dir_all(&cfg.data_dir);
    std::process::exit(if sum.violations.is_empty() { 0 } else { 1 });
}
