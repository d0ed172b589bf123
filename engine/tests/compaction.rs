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
                // A delete every fourth step: enough to remove messages the
                // scan has collected, few enough that the oldest segment
                // still has messages to move.
                let taken = if j % 4 == 0 {
                    s.get_messages(ACCT, "keep", Some(1), Some(3600)).await.unwrap()
                } else {
                    Vec::new()
                };
                for m in taken {
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
    // More than the two queue definitions: messages moved.
    assert!(rewritten > 10, "{rewritten} records rewritten");
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

/// The segments of a deleted queue become the oldest one after another as
/// its release goes, and each is tried once for a rewrite that can move
/// nothing. Those tries must not read the live queues written after it:
/// each used to scan every live message of the shard (docs/benchmarks.md,
/// "A rewrite's scan in slices"), one scan per segment of the deleted queue.
#[test]
fn a_deleted_queues_segments_are_tried_without_reading_later_queues() {
    use engine::limits::RELEASE_SLICE;
    let (_disk, _clock, s) = fresh();
    let texts = |k: usize| (0..k).map(|i| format!("{i:0>200}")).collect::<Vec<_>>();
    let (mut futile, mut scanned) = (0, 0);
    block_on(async {
        s.create_queue(ACCT, "gone", Metadata::default()).await.unwrap();
        s.create_queue(ACCT, "live", Metadata::default()).await.unwrap();
        for _ in 0..8 * RELEASE_SLICE / 32 {
            s.put_messages(ACCT, "gone", texts(32), None, None).await.unwrap();
        }
        for _ in 0..32 {
            s.put_messages(ACCT, "live", texts(32), None, Some(-1)).await.unwrap();
        }
        s.delete_queue(ACCT, "gone").await.unwrap();
        assert!(s.segment_stats().len() > 20, "the test needs many segments");
        // The release takes eight passes, each ending inside a segment.
        for _ in 0..12 {
            let r = s.maintenance().await.unwrap();
            futile += r.futile_rewrites;
            scanned += r.messages_scanned;
        }
    });
    assert!(
        futile >= 2,
        "{futile} futile rewrites: the test no longer tries the deleted segments"
    );
    // One scan of the live queue at most, when its first segment (shared
    // with the deleted queue's last) is rewritten; without the queues'
    // floors every futile try read all 1,024.
    assert!(
        scanned <= 1024,
        "{scanned} messages scanned by the rewrites of 12 passes, {futile} of them futile"
    );
    assert!(
        s.segment_stats().len() <= 4,
        "{} segments left",
        s.segment_stats().len()
    );
    let dump = block_on(s.dump()).unwrap();
    assert_eq!(dump[&(ACCT.to_string(), "live".to_string())].messages.len(), 1024);
}

/// A deleted queue whose segments also hold a live queue's messages is
/// freed as its release goes: each segment's live records are rewritten as
/// soon as its share of the deleted queue is released, not at the end.
#[test]
fn a_deleted_queue_mixed_with_a_live_one_is_freed_as_it_is_released() {
    use engine::limits::RELEASE_SLICE;
    let (_disk, _clock, s) = fresh();
    let texts = |k: usize| (0..k).map(|i| format!("{i:0>200}")).collect::<Vec<_>>();
    let mut counts = Vec::new();
    let mut rewritten = 0;
    block_on(async {
        s.create_queue(ACCT, "gone", Metadata::default()).await.unwrap();
        s.create_queue(ACCT, "live", Metadata::default()).await.unwrap();
        for i in 0..8 * RELEASE_SLICE / 32 {
            s.put_messages(ACCT, "gone", texts(32), None, None).await.unwrap();
            if i % 2 == 0 {
                s.put_message(ACCT, "live", format!("live {i}"), None, Some(-1))
                    .await
                    .unwrap();
            }
        }
        s.delete_queue(ACCT, "gone").await.unwrap();
        counts.push(s.segment_stats().len());
        for _ in 0..12 {
            rewritten += s.maintenance().await.unwrap().records_rewritten;
            counts.push(s.segment_stats().len());
        }
    });
    assert!(counts[0] > 20, "the test needs many segments");
    // Half-way through the release, about half of the log is gone.
    assert!(counts[4] * 10 <= counts[0] * 7, "segments by pass: {counts:?}");
    // The live messages, not only the queues' definitions, were moved.
    assert!(rewritten >= 256, "{rewritten} records rewritten");
    assert!(counts[12] <= 3, "segments by pass: {counts:?}");
    let dump = block_on(s.dump()).unwrap();
    assert_eq!(
        dump[&(ACCT.to_string(), "live".to_string())].messages.len(),
        8 * RELEASE_SLICE / 64
    );
}

/// Maintenance counts the messages of cleared and deleted queues it
/// releases, `RELEASE_SLICE` a pass, oldest first, for the server to give
/// their memory back to the kernel (`Shard::take_released`,
/// server/src/allocator.rs); the count restarts at each call.
#[test]
fn released_messages_are_counted_a_slice_per_pass() {
    use engine::limits::RELEASE_SLICE;
    let (_disk, _clock, s) = fresh();
    let extra = 100;
    block_on(async {
        s.create_queue(ACCT, "gone", Metadata::default()).await.unwrap();
        for _ in 0..RELEASE_SLICE + extra {
            s.put_message(ACCT, "gone", "m".into(), None, None).await.unwrap();
        }
        s.create_queue(ACCT, "cleared", Metadata::default()).await.unwrap();
        for _ in 0..3 {
            s.put_message(ACCT, "cleared", "c".into(), None, None).await.unwrap();
        }
        s.delete_queue(ACCT, "gone").await.unwrap();
        s.clear_messages(ACCT, "cleared").await.unwrap();
    });
    assert_eq!(s.take_released(), 0, "nothing is released before a pass");
    block_on(s.maintenance()).unwrap();
    assert_eq!(s.take_released(), RELEASE_SLICE as u64);
    assert_eq!(s.take_released(), 0, "the count restarts");
    block_on(s.maintenance()).unwrap();
    assert_eq!(s.take_released(), extra as u64 + 3);
    block_on(s.maintenance()).unwrap();
    assert_eq!(s.take_released(), 0);
}
