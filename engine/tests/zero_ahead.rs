//! Zeroing ahead (`WalConfig::zero_ahead`, docs/STORAGE_FORMAT.md "Zeroed
//! ahead"): the log writes zeros into the prepared segment before the
//! writer gets there, so commits overwrite written blocks. The zeros must
//! cover the segment before it is used, and must never land over a commit.

mod common;
use common::*;
use engine::disk::sim::{CrashMode, Faults, SimDisk};
use engine::limits::SEGMENT_HEADER_LEN;
use engine::model::Metadata;
use engine::shard::ShardConfig;
use engine::{ManualClock, Shard};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use std::cell::Cell;
use std::rc::Rc;

fn zeroing(on: bool) -> ShardConfig {
    let mut cfg = small_config();
    cfg.zero_ahead = on;
    cfg
}

/// Segment files in log order.
fn segments(disk: &SimDisk) -> Vec<String> {
    let mut names: Vec<String> = disk.file_names().into_iter().filter(|n| n.ends_with(".wal")).collect();
    names.sort();
    names
}

/// Puts with a maintenance pass every few puts (as the server's timer
/// would run it) until the log has `n` segments.
fn fill(s: &Shard<SimDisk>, disk: &SimDisk, n: usize) -> u32 {
    block_on(async {
        let _ = s.create_queue(ACCT, "zeroq", Metadata::default()).await;
        let mut puts = 0;
        while segments(disk).len() < n {
            s.put_message(ACCT, "zeroq", format!("{puts} {}", "z".repeat(900)), None, Some(-1))
                .await
                .unwrap();
            puts += 1;
            if puts % 4 == 0 {
                s.maintenance().await.unwrap();
            }
        }
        puts
    })
}

/// Every segment after the first is zeroed whole before the writer gets
/// to it (the pacing finishes the prepared segment while the current one
/// is three quarters full, and maintenance runs often enough here), and
/// the zeros land over no header and no commit: a restart finds every put.
#[test]
fn segments_are_zeroed_before_the_writer_reaches_them() {
    for on in [true, false] {
        let (disk, clock, s) = fresh_with(zeroing(on));
        let puts = fill(&s, &disk, 6);
        let seg = small_config().segment_bytes;
        let zeroed = s.commit_stats().zeroed_bytes;
        // The first segment is made at open, before any writing; zeroing
        // stops at a rotation, so four segments' worth of zeros means the
        // second to the fifth were (about) whole when the writer came (the
        // sixth is the writer's or the prepared one).
        if on {
            assert!(zeroed >= 4 * (seg - SEGMENT_HEADER_LEN), "zeroed {zeroed} bytes");
        } else {
            assert_eq!(zeroed, 0);
        }
        drop(s);
        let s = open(&disk, &clock, zeroing(on));
        let count = block_on(s.get_properties(ACCT, "zeroq"))
            .unwrap()
            .approximate_message_count;
        assert_eq!(count, u64::from(puts), "every put after a restart (zeroing {on})");
    }
}

/// A zero write still in flight when the writer rotates into its segment
/// must land before the first commit there, or it wipes that commit. The
/// simulated zero writes take many turns here while each fdatasync takes
/// one, so the writer overtakes them; every acknowledged message must then
/// survive a restart.
#[test]
fn a_zero_write_in_flight_lands_before_the_commits_of_its_segment() {
    for crash in [None, Some(CrashMode::LoseUnsynced)] {
        let disk = SimDisk::new();
        let clock = Rc::new(ManualClock::new(T0));
        let s = Rc::new(open(&disk, &clock, zeroing(true)));
        disk.set_faults(Faults {
            sync_yields: 1,
            zero_write_yields: 400,
            ..Faults::default()
        });
        block_on(s.create_queue(ACCT, "zeroq", Metadata::default())).unwrap();
        let acked = Rc::new(Cell::new(0u32));
        let mut pool = LocalPool::new();
        let spawner = pool.spawner();
        let (w, a, d) = (s.clone(), acked.clone(), disk.clone());
        spawner
            .spawn_local(async move {
                while segments(&d).len() < 7 {
                    let i = a.get();
                    w.put_message(ACCT, "zeroq", format!("{i} {}", "y".repeat(900)), None, Some(-1))
                        .await
                        .unwrap();
                    a.set(i + 1);
                }
            })
            .unwrap();
        let (m, d) = (s.clone(), disk.clone());
        spawner
            .spawn_local(async move {
                while segments(&d).len() < 7 {
                    m.maintenance().await.unwrap();
                    futures_lite::future::yield_now().await;
                }
            })
            .unwrap();
        pool.run();
        let stats = s.commit_stats();
        assert!(
            stats.zero_waits > 0,
            "a commit met a zero write in flight to its segment"
        );
        assert!(stats.zeroed_bytes > 0);
        let n = acked.get();
        drop(s);
        let disk = match crash {
            Some(mode) => disk.crash(mode),
            None => disk,
        };
        disk.set_faults(Faults::default());
        let s = open(&disk, &clock, zeroing(true));
        let count = block_on(s.get_properties(ACCT, "zeroq"))
            .unwrap()
            .approximate_message_count;
        assert_eq!(count, u64::from(n), "every acknowledged put survives ({crash:?})");
    }
}
