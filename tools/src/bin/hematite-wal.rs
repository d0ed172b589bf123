//! hematite-wal: inspect and repair a stopped server's write-ahead logs.
//!
//! Usage:
//!   hematite-wal check  PATH    verify every segment; report the first bad offset
//!   hematite-wal dump   PATH    every durable record, one per line
//!   hematite-wal stats  PATH    bytes, records and live bytes per segment; messages per queue
//!   hematite-wal repair PATH (--cut-tail | --quarantine) [--yes]
//!                               cut a torn tail, or set damaged segments aside
//!
//! PATH is a data directory (with shard-NNN/ inside) or one shard's directory.
//! Stop the server first: the tool reads the files directly.

use std::io::BufRead;
use std::path::PathBuf;

fn usage() -> ! {
    let doc = include_str!("hematite-wal.rs");
    for l in doc.lines().take_while(|l| l.starts_with("//!")) {
        eprintln!("{}", l.trim_start_matches("//!").strip_prefix(' ').unwrap_or(""));
    }
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") || args.len() < 2 {
        usage();
    }
    let path = PathBuf::from(&args[1]);
    let result = match args[0].as_str() {
        "check" => hematite_tools::check(&path).map(|(text, ok)| {
            print!("{text}");
            if !ok {
                std::process::exit(1);
            }
        }),
        "dump" => hematite_tools::dump(&path).map(|t| print!("{t}")),
        "stats" => hematite_tools::stats(&path).map(|t| print!("{t}")),
        "repair" => {
            let quarantine = args.iter().any(|a| a == "--quarantine");
            let cut = args.iter().any(|a| a == "--cut-tail");
            if quarantine == cut {
                eprintln!("repair needs exactly one of --cut-tail or --quarantine");
                std::process::exit(2);
            }
            if !args.iter().any(|a| a == "--yes") {
                let what = if quarantine {
                    "rename damaged segments to *.quarantined, LOSING THEIR RECORDS"
                } else {
                    "cut torn tails"
                };
                eprintln!("This will {what} in {}. Type 'yes' to go on:", path.display());
                let mut line = String::new();
                let _ = std::io::stdin().lock().read_line(&mut line);
                if line.trim() != "yes" {
                    eprintln!("nothing changed");
                    std::process::exit(1);
                }
            }
            hematite_tools::repair(&path, quarantine).map(|t| print!("{t}"))
        }
        _ => usage(),
    };
    if let Err(e) = result {
        eprintln!("hematite-wal: {e}");
        std::process::exit(1);
    }
}
