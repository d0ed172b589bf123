//! walbench: drives one engine shard on the real glommio `DmaFile` disk, with
//! no HTTP, to measure the durable write path.
//!
//! ```text
//! walbench sync-paths [--dir D] [--seconds S] [--writers N]...
//!     Durable 1 KiB puts from N concurrent writers, once per fdatasync path
//!     (blocking pool, io_uring), side by side: ops/s, p50/p99/max, commits.
//! walbench churn [--dir D] [--gib G] [--segment-mib M]
//! (both take --prealloc zero|fallocate; default fallocate)
//!     Put/get/delete traffic of G GiB over a small live set, with periodic
//!     maintenance; prints WAL size against live data and checks the bound
//!     10 x live + 2 segments + the spare segments kept for reuse.
//! ```

use engine::disk::dma::{DmaDisk, Preallocation, SyncPath};
use engine::model::Metadata;
use engine::shard::ShardConfig;
use engine::{Shard, SystemClock};
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

const ACCT: &str = "devstoreaccount1";

struct Args {
    cmd: String,
    dir: PathBuf,
    seconds: u64,
    writers: Vec<usize>,
    gib: f64,
    segment_mib: u64,
    prealloc: Preallocation,
}

fn parse() -> Args {
    let mut a = Args {
        cmd: String::new(),
        dir: PathBuf::from("./walbench-data"),
        seconds: 5,
        writers: vec![],
        gib: 2.0,
        segment_mib: 64,
        prealloc: Preallocation::Fallocate,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--dir" => a.dir = PathBuf::from(val()),
            "--seconds" => a.seconds = val().parse().expect("--seconds N"),
            "--writers" => a.writers.push(val().parse().expect("--writers N")),
            "--gib" => a.gib = val().parse().expect("--gib G"),
            "--segment-mib" => a.segment_mib = val().parse().expect("--segment-mib M"),
            "--prealloc" => {
                a.prealloc = match val().as_str() {
                    "zero" => Preallocation::ZeroFill,
                    "fallocate" => Preallocation::Fallocate,
                    other => panic!("--prealloc zero|fallocate, not {other}"),
                }
            }
            "-h" | "--help" => {
                let doc = include_str!("walbench.rs");
                for line in doc.lines().take_while(|l| l.starts_with("//!")) {
                    println!(
                        "{}",
                        line.trim_start_matches("//!")
                            .trim_start_matches(' ')
                            .trim_start_matches("```text")
                            .trim_start_matches("```")
                    );
                }
                std::process::exit(0);
            }
            c if a.cmd.is_empty() => a.cmd = c.to_string(),
            other => panic!("unknown argument {other}"),
        }
    }
    if a.writers.is_empty() {
        a.writers = vec![1, 16, 64, 256];
    }
    a
}

fn executor<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    f: impl FnOnce() -> F + Send + 'static,
) -> T {
    LocalExecutorBuilder::new(Placement::Fixed(1))
        .io_memory(2 << 20)
        .spawn(move || async move { f().await })
        .expect("executor")
        .join()
        .expect("join")
}

async fn open(dir: &Path, sync: SyncPath, segment_mib: u64, prealloc: Preallocation) -> Rc<Shard<DmaDisk>> {
    let _ = std::fs::remove_dir_all(dir);
    let disk = DmaDisk::open(dir, sync)
        .await
        .expect("open data dir")
        .with_preallocation(prealloc);
    let mut cfg = ShardConfig::new(0);
    cfg.segment_bytes = segment_mib << 20;
    Rc::new(Shard::open(disk, cfg, Rc::new(SystemClock)).await.expect("open shard"))
}

fn pct(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn sync_paths(a: &Args) {
    println!(
        "{:<14} {:>8} {:>10} {:>9} {:>9} {:>9} {:>10}",
        "sync path", "writers", "ops/s", "p50 us", "p99 us", "max us", "commits/s"
    );
    for &writers in &a.writers {
        for sync in [SyncPath::BlockingPool, SyncPath::Uring] {
            let (dir, secs, seg, pre) = (a.dir.clone(), a.seconds, a.segment_mib, a.prealloc);
            let (ops, lat, commits) = executor(move || async move {
                let s = open(&dir, sync, seg, pre).await;
                s.create_queue(ACCT, "bench", Metadata::default()).await.unwrap();
                let lat = Rc::new(RefCell::new(Vec::<u32>::new()));
                let deadline = Instant::now() + Duration::from_secs(secs);
                let c0 = s.wal().commits();
                let tasks: Vec<_> = (0..writers)
                    .map(|_| {
                        let (s, lat) = (s.clone(), lat.clone());
                        glommio::spawn_local(async move {
                            let body = "x".repeat(1024);
                            while Instant::now() < deadline {
                                let t = Instant::now();
                                s.put_message(ACCT, "bench", body.clone(), None, None).await.unwrap();
                                lat.borrow_mut().push(t.elapsed().as_micros() as u32);
                            }
                        })
                    })
                    .collect();
                // Background maintenance, as the server runs it: creates the
                // next segment ahead of time, so rotations do not wait for it.
                let m = s.clone();
                let maint = glommio::spawn_local(async move {
                    while Instant::now() < deadline {
                        m.maintenance().await.unwrap();
                        glommio::timer::sleep(Duration::from_millis(10)).await;
                    }
                });
                for t in tasks {
                    t.await;
                }
                maint.await;
                let commits = s.wal().commits() - c0;
                let mut v = lat.borrow().clone();
                v.sort_unstable();
                let _ = std::fs::remove_dir_all(&dir);
                (v.len(), v, commits)
            });
            let secs = a.seconds as f64;
            println!(
                "{:<14} {:>8} {:>10.0} {:>9} {:>9} {:>9} {:>10.0}",
                format!("{sync:?}"),
                writers,
                ops as f64 / secs,
                pct(&lat, 0.50),
                pct(&lat, 0.99),
                lat.last().copied().unwrap_or(0),
                commits as f64 / secs
            );
        }
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn churn(a: &Args) {
    let (dir, gib, seg, pre) = (a.dir.clone(), a.gib, a.segment_mib, a.prealloc);
    executor(move || async move {
        let s = open(&dir, SyncPath::BlockingPool, seg, pre).await;
        s.create_queue(ACCT, "churn", Metadata::default()).await.unwrap();
        let body = "c".repeat(1024);
        let target = (gib * (1u64 << 30) as f64) as u64;
        let started = Instant::now();
        let (mut traffic, mut max_dir) = (0u64, 0u64);
        let mut round = 0u64;
        // A standing backlog of ~1,000 messages (about 1 MiB live).
        for _ in 0..1000 {
            s.put_message(ACCT, "churn", body.clone(), None, Some(-1))
                .await
                .unwrap();
        }
        while traffic < target {
            // Producers and consumers run concurrently, as from many clients,
            // so their records share group commits.
            let puts: Vec<_> = (0..32)
                .map(|_| {
                    let (s, body) = (s.clone(), body.clone());
                    glommio::spawn_local(
                        async move { s.put_message(ACCT, "churn", body, None, Some(-1)).await.unwrap() },
                    )
                })
                .collect();
            for p in puts {
                p.await;
            }
            traffic += 32 * 1024;
            let got = s.get_messages(ACCT, "churn", Some(32), Some(30)).await.unwrap();
            let deletes: Vec<_> = got
                .into_iter()
                .map(|m| {
                    let s = s.clone();
                    glommio::spawn_local(async move {
                        s.delete_message(ACCT, "churn", &m.id.to_string(), &m.pop_receipt)
                            .await
                            .unwrap()
                    })
                })
                .collect();
            for d in deletes {
                d.await;
            }
            round += 1;
            if round.is_multiple_of(64) {
                s.maintenance().await.unwrap();
                max_dir = max_dir.max(dir_bytes(&dir));
            }
            if round.is_multiple_of(8192) {
                eprintln!(
                    "  {:.2} GiB written, WAL dir {} MiB",
                    traffic as f64 / (1u64 << 30) as f64,
                    dir_bytes(&dir) >> 20
                );
            }
        }
        s.maintenance().await.unwrap();
        let stats = s.segment_stats();
        let live: u64 = stats.iter().map(|x| x.live_bytes).sum();
        let on_disk = dir_bytes(&dir);
        let bound = 10 * live + (2 + engine::limits::MAX_SPARE_SEGMENTS as u64) * (seg << 20);
        println!(
            "churn: {:.2} GiB of puts in {:.1}s; live {} KiB in {} messages; WAL dir {} MiB now (max seen {} MiB) in {} segments; bound 10 x live + 2 segments + spares = {} MiB -> {}",
            traffic as f64 / (1u64 << 30) as f64,
            started.elapsed().as_secs_f64(),
            live >> 10,
            s.get_properties(ACCT, "churn").await.unwrap().approximate_message_count,
            on_disk >> 20,
            max_dir >> 20,
            stats.len(),
            bound >> 20,
            if on_disk <= bound { "within bound" } else { "OVER BOUND" }
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(on_disk <= bound, "WAL directory exceeds its bound");
    });
}

fn main() {
    let a = parse();
    match a.cmd.as_str() {
        "sync-paths" => sync_paths(&a),
        "churn" => churn(&a),
        _ => {
            eprintln!("usage: walbench sync-paths|churn [options]  (walbench --help)");
            std::process::exit(2);
        }
    }
}
