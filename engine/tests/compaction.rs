//! Compaction bounds the disk: heavy put/get/delete traffic over a small live
//! set leaves only a few segments, and live data survives the rewrites.

mod common;
use common::*;
use engine::disk::sim::CrashMode;
use engine::limits::{MAX_SPARE_SEGMENTS, MIN_SEGMENT_BYTES};
use engine::model::Metadata;
use futures::executor::block_on;

#[test]
fn churn_over_a_small_live_set_keeps_the_wal_small() {
    let (disk, clock, s) = fresh();
    let body = "b".repeat(1024);
    let mut traffic = 0u64;
    block_on(async {
        s.create_queue(ACCT, "keep", Metadata(vec![("Pinned".into(), "yes".into())]))
            .await
            .unwrap();
        s.create_queue(ACCT, "churn", Metadata::default()).await.unwrap();
        // Long-lived messages written first, so they sit in the oldest segment.
        for i in 0..20 {
            s.put_message(ACCT, "keep", format!("keep {i}"), None, Some(-1))
                .await
                .unwrap();
        }
        for round in 0..12_000u32 {
            s.put_message(ACCT, "churn", body.clone(), None, None).await.unwrap();
            traffic += body.len() as u64;
            if round % 2 == 1 {
                for m in s.get_messages(ACCT, "churn", Some(2), None).await.unwrap() {
                    s.delete_message(ACCT, "churn", &m.id.to_string(), &m.pop_receipt)
                        .await
                        .unwrap();
                }
            }
            if round % 64 == 0 {
                s.maintenance().await.unwrap();
            }
        }
        s.maintenance().await.unwrap();
    });
    let stats = s.segment_stats();
    let live: u64 = stats.iter().map(|x| x.live_bytes).sum();
    let total = disk.total_bytes();
    println!(
        "traffic {} MiB, live {} KiB, WAL {} KiB in {} segments",
        traffic >> 20,
        live >> 10,
        total >> 10,
        stats.len()
    );
    assert!(
        // docs/TESTING.md: within 10 × live + 2 segments, plus the spare
        // files kept for reuse.
        total <= 10 * live + (2 + MAX_SPARE_SEGMENTS as u64) * MIN_SEGMENT_BYTES,
        "WAL {total} bytes for {live} live bytes"
    );
    // Everything live is intact, before and after a crash.
    let dump = block_on(s.dump()).unwrap();
    let keep = &dump[&(ACCT.to_string(), "keep".to_string())];
    assert_eq!(keep.metadata, Metadata(vec![("Pinned".into(), "yes".into())]));
    assert_eq!(keep.messages.len(), 20);
    drop(s);
    let s2 = open(&disk.crash(CrashMode::LoseUnsynced), &clock, small_config());
    assert_eq!(block_on(s2.dump()).unwrap(), dump);
}

/// `--in-memory`: the same shard on the memory disk. Churn leaves only the
/// live data and a couple of segments in memory (compaction frees the
/// deleted bodies), and the answers are the engine's own.
#[test]
fn churn_on_the_memory_disk_keeps_memory_bounded() {
    use engine::disk::mem::MemDisk;
    use engine::{ManualClock, Shard};
    use std::rc::Rc;
    let disk = MemDisk::new();
    let clock = Rc::new(ManualClock::new(T0));
    let s = block_on(Shard::open(disk.clone(), small_config(), clock.clone())).unwrap();
    let body = "m".repeat(4096);
    let mut peak = 0;
    block_on(async {
        s.create_queue(ACCT, "keep", Metadata::default()).await.unwrap();
        s.create_queue(ACCT, "churn", Metadata::default()).await.unwrap();
        for i in 0..20 {
            s.put_message(ACCT, "keep", format!("keep {i}"), None, Some(-1))
                .await
                .unwrap();
        }
        for round in 0..4_000u32 {
            s.put_message(ACCT, "churn", body.clone(), None, None).await.unwrap();
            for m in s.get_messages(ACCT, "churn", Some(1), None).await.unwrap() {
                s.delete_message(ACCT, "churn", &m.id.to_string(), &m.pop_receipt)
                    .await
                    .unwrap();
            }
            if round % 16 == 0 {
                s.maintenance().await.unwrap();
                peak = peak.max(disk.bytes_in_use());
            }
        }
        s.maintenance().await.unwrap();
    });
    let in_use = disk.bytes_in_use();
    println!(
        "16 MiB of traffic; memory disk peak {} KiB, now {} KiB",
        peak >> 10,
        in_use >> 10
    );
    assert!(
        peak <= 4 * MIN_SEGMENT_BYTES && in_use <= 3 * MIN_SEGMENT_BYTES,
        "memory disk holds {in_use} bytes (peak {peak}) for 20 small live messages"
    );
    let dump = block_on(s.dump()).unwrap();
    let keep = &dump[&(ACCT.to_string(), "keep".to_string())];
    assert_eq!(
        keep.messages.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
        (0..20).map(|i| format!("keep {i}")).collect::<Vec<_>>()
    );
    assert!(dump[&(ACCT.to_string(), "churn".to_string())].messages.is_empty());
}

/// The background release takes the oldest deletion first: newer clears
/// of a whole slice's worth every pass must not keep an older deletion's
/// messages, and the oldest segments with them, pinned for good, as
/// releasing the newest entry first did.
#[test]
fn frequent_clears_do_not_starve_an_older_deletion() {
    use engine::limits::RELEASE_SLICE;
    let (_disk, _clock, s) = fresh();
    let n = 3 * RELEASE_SLICE;
    let texts = |from: usize, k: usize| (from..from + k).map(|i| format!("m{i}")).collect::<Vec<_>>();
    let last_of_big = block_on(async {
        s.create_queue(ACCT, "big", Metadata::default()).await.unwrap();
        for at in (0..n).step_by(32) {
            s.put_messages(ACCT, "big", texts(at, 32), None, None).await.unwrap();
        }
        s.delete_queue(ACCT, "big").await.unwrap();
        let last_of_big = s.segment_stats().last().unwrap().seq;
        s.create_queue(ACCT, "tiny", Metadata::default()).await.unwrap();
        for _ in 0..n / RELEASE_SLICE + 1 {
            for at in (0..RELEASE_SLICE).step_by(32) {
                s.put_messages(ACCT, "tiny", texts(at, 32), None, None).await.unwrap();
            }
            s.clear_messages(ACCT, "tiny").await.unwrap();
            s.maintenance().await.unwrap();
        }
        last_of_big
    });
    let oldest = s.segment_stats().first().unwrap().seq;
    assert!(
        oldest >= last_of_big,
        "segment {oldest} still held by the deleted queue (its records end in {last_of_big})"
    );
}

/// A rewrite's scan for the oldest segment's live messages pauses every
/// `rewrite_scan_slice` messages (docs/benchmarks.md, "A rewrite's scan in
/// slices"). Requests that run in those pauses delete messages the scan has
/// already collected and put new ones; the rewrite must move exactly the
/// survivors, and a crash after it must lose nothing.
#[test]
fn requests_between_a_rewrites_scan_slices_lose_nothing() {
    use std::cell::Cell;
    use std::collections::BTreeSet;
    let mut cfg = small_config();
    cfg.rewrite_scan_slice = 3;
    let (disk, clock, s) = fresh_with(cfg);
    let filler = "f".repeat(2048);
    let mut keep: BTreeSet<String> = BTreeSet::new();
    block_on(async {
        for q in ["keep", "churn"] {
            s.create_queue(ACCT, q, Metadata::default()).await.unwrap();
        }
        // The kept messages sit among filler in the oldest segments; the
        // filler then goes, so those segments are mostly dead.
        for i in 0..400 {
            let text = format!("keep {i}");
            s.put_message(ACCT, "keep", text.clone(), None, Some(-1)).await.unwrap();
            keep.insert(text);
            s.put_message(ACCT, "churn", filler.clone(), None, None).await.unwrap();
        }
        s.clear_messages(ACCT, "churn").await.unwrap();
    });
    assert!(s.segment_stats().len() > 2, "the test needs several segments");
    let oldest_before = s.segment_stats().first().unwrap().seq;
    let done = Cell::new(false);
    let (steps_during, mut rewritten) = (Cell::new(0u32), 0u64);
    block_on(async {
        let compact = async {
            let mut moved = 0;
            for _ in 0..4 {
                moved += s.maintenance().await.unwrap().records_rewritten;
            }
            done.set(true);
            moved
        };
        let requests = async {
            for j in 0..200 {
                if done.get() {
                    break;
                }
                for m in s.get_messages(ACCT, "keep", Some(2), Some(3600)).await.unwrap() {
                    s.delete_message(ACCT, "keep", &m.id.to_string(), &m.pop_receipt)
                        .await
                        .unwrap();
                    assert!(keep.remove(&m.text), "{} came back", m.text);
                }
                let text = format!("new {j}");
                s.put_message(ACCT, "keep", text.clone(), None, Some(-1)).await.unwrap();
                keep.insert(text);
                steps_during.set(steps_during.get() + 1);
            }
        };
        let (moved, ()) = futures::join!(compact, requests);
        rewritten = moved;
    });
    assert!(rewritten > 0, "no rewrite ran");
    assert!(steps_during.get() > 0, "no request ran while compaction did");
    // A message the scan missed would pin its segment: nothing lost, but
    // the disk not freed either.
    let oldest_after = s.segment_stats().first().unwrap().seq;
    assert!(oldest_after > oldest_before, "segment {oldest_before} was not freed");
    let texts = |s: &engine::Shard<_>| -> BTreeSet<String> {
        let dump = block_on(s.dump()).unwrap();
        dump[&(ACCT.to_string(), "keep".to_string())]
            .messages
            .iter()
            .map(|(_, t)| t.clone())
            .collect()
    };
    let before = texts(&s);
    assert_eq!(before, keep);
    drop(s);
    let s2 = open(&disk.crash(CrashMode::LoseUnsynced), &clock, {
        let mut c = small_config();
        c.rewrite_scan_slice = 3;
        c
    });
    assert_eq!(texts(&s2), before);
}

/// A deleted queue spanning many segments costs one rewrite that moves
/// nothing, not one per maintenance pass of its release: each such try
/// scans every live message of the shard (docs/benchmarks.md, "A
/// rewrite's scan in slices"). After the release the deleted queue's
/// segments are all gone, and the live queue is whole.
#[test]
fn a_deleted_queue_costs_one_futile_rewrite() {
    use engine::limits::RELEASE_SLICE;
    let (_disk, _clock, s) = fresh();
    let texts = |k: usize| (0..k).map(|i| format!("{i:0>200}")).collect::<Vec<_>>();
    let mut futile = 0;
    block_on(async {
        s.create_queue(ACCT, "gone", Metadata::default()).await.unwrap();
        s.create_queue(ACCT, "live", Metadata::default()).await.unwrap();
        for _ in 0..8 * RELEASE_SLICE / 32 {
            s.put_messages(ACCT, "gone", texts(32), None, None).await.unwrap();
        }
        for _ in 0..4 {
            s.put_messages(ACCT, "live", texts(32), None, Some(-1)).await.unwrap();
        }
        s.delete_queue(ACCT, "gone").await.unwrap();
        assert!(s.segment_stats().len() > 20, "the test needs many segments");
        // The release takes eight passes, each ending inside a segment.
        for _ in 0..12 {
            futile += s.maintenance().await.unwrap().futile_rewrites;
        }
    });
    assert!(futile <= 1, "{futile} futile rewrites");
    assert!(
        s.segment_stats().len() <= 3,
        "{} segments left",
        s.segment_stats().len()
    );
    let dump = block_on(s.dump()).unwrap();
    assert_eq!(dump[&(ACCT.to_string(), "live".to_string())].messages.len(), 128);
}
