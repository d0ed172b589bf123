//! Recycled segments (docs/STORAGE_FORMAT.md, "Recycled segments"): a dead
//! segment's file is kept as a spare and reused for a later segment, so the
//! bytes past a reused segment's last commit are an older segment's frames.
//! They must never read as data, crashes anywhere must keep every
//! acknowledged record, and damage inside a reused segment must still be
//! refused.

mod common;
use common::*;
use engine::disk::sim::{CrashMode, SimDisk};
use engine::model::Metadata;
use engine::StorageError;
use engine::{ManualClock, Shard};
use futures::executor::block_on;
use std::rc::Rc;

/// Churn over a small live set, with maintenance, so segments die and their
/// files come back as new segments.
fn churn(s: &Shard<SimDisk>, rounds: u32) {
    block_on(async {
        let _ = s.create_queue(ACCT, "keep", Metadata::default()).await;
        let _ = s.create_queue(ACCT, "churn", Metadata::default()).await;
        for i in 0..20 {
            s.put_message(ACCT, "keep", format!("keep {i}"), None, Some(-1))
                .await
                .unwrap();
        }
        for round in 0..rounds {
            s.put_message(ACCT, "churn", format!("{round} {}", "c".repeat(700)), None, None)
                .await
                .unwrap();
            if round % 2 == 1 {
                for m in s.get_messages(ACCT, "churn", Some(2), None).await.unwrap() {
                    s.delete_message(ACCT, "churn", &m.id.to_string(), &m.pop_receipt)
                        .await
                        .unwrap();
                }
            }
            if round % 32 == 0 {
                s.maintenance().await.unwrap();
            }
        }
    });
}

fn version(disk: &SimDisk, name: &str) -> u32 {
    let b = disk.file_bytes(name).expect("file");
    u32::from_le_bytes(b[8..12].try_into().unwrap())
}

/// Segment files in log order, each with whether its header says recycled.
fn segments(disk: &SimDisk) -> Vec<(String, bool)> {
    let mut names: Vec<String> = disk.file_names().into_iter().filter(|n| n.ends_with(".wal")).collect();
    names.sort();
    names.into_iter().map(|n| (n.clone(), version(disk, &n) == 2)).collect()
}

fn try_open(disk: &SimDisk, clock: &Rc<ManualClock>) -> Result<Shard<SimDisk>, StorageError> {
    block_on(Shard::open(disk.clone(), small_config(), clock.clone()))
}

#[test]
fn reused_files_keep_every_acknowledged_record_across_crashes() {
    let (disk, clock, s) = fresh();
    churn(&s, 3_000);
    let segs = segments(&disk);
    assert!(segs.iter().any(|(_, r)| *r), "churn must reuse files: {segs:?}");
    // The tail is a reused file with an older segment's frames past its end.
    let (tail, recycled) = segs.last().unwrap().clone();
    let bytes = disk.file_bytes(&tail).unwrap();
    assert!(recycled, "{segs:?}");
    assert!(
        bytes[bytes.len() - 4096..].iter().any(|&b| b != 0),
        "stale frames past the tail"
    );
    let spares = disk.file_names().into_iter().filter(|n| n.ends_with(".spare")).count();
    assert!(spares <= engine::limits::MAX_SPARE_SEGMENTS);

    let before = block_on(s.dump()).unwrap();
    drop(s);
    let s = open(&disk, &clock, small_config());
    assert_eq!(block_on(s.dump()).unwrap(), before, "clean restart");
    drop(s);
    for mode in CRASHES {
        let s = open(&disk.crash(mode), &clock, small_config());
        assert_eq!(block_on(s.dump()).unwrap(), before, "{mode:?}");
    }
}

/// Crashes at every point of the churn (after each of the last writes, with
/// unsynced writes lost or torn) recover to a state that holds everything
/// acknowledged: the reopened shard is checked against the dump taken when
/// the crash copy was made, minus what was still in flight (nothing is in
/// flight between awaited calls here, so the dumps must be equal).
#[test]
fn a_crash_between_any_two_requests_of_the_churn_recovers_exactly() {
    let (disk, clock, s) = fresh();
    churn(&s, 1_500);
    for step in 0..60u32 {
        churn_step(&s, step);
        if step % 3 == 0 {
            block_on(s.maintenance()).unwrap();
        }
        let want = block_on(s.dump()).unwrap();
        for mode in [CrashMode::LoseUnsynced, CrashMode::TearUnsynced { seed: step as u64 }] {
            let crashed = disk.crash(mode);
            let got = try_open(&crashed, &clock).unwrap_or_else(|e| panic!("step {step} {mode:?}: {e}"));
            assert_eq!(block_on(got.dump()).unwrap(), want, "step {step} {mode:?}");
        }
    }
}

fn churn_step(s: &Shard<SimDisk>, step: u32) {
    block_on(async {
        for i in 0..40 {
            s.put_message(ACCT, "churn", format!("{step}.{i} {}", "s".repeat(900)), None, None)
                .await
                .unwrap();
        }
        for m in s.get_messages(ACCT, "churn", Some(32), None).await.unwrap() {
            s.delete_message(ACCT, "churn", &m.id.to_string(), &m.pop_receipt)
                .await
                .unwrap();
        }
    });
}

/// A reused segment's first commit destroyed (zeros, or garbage that reads
/// like an old frame) while later commits exist: refused, not read as the
/// end of the data.
#[test]
fn damage_to_a_commit_inside_a_reused_segment_is_refused() {
    for garbage in [false, true] {
        let (disk, clock, s) = fresh();
        churn(&s, 3_000);
        drop(s);
        let segs = segments(&disk);
        // A reused segment that is not the tail: later segments hold data.
        let (victim, _) = segs[..segs.len() - 1]
            .iter()
            .find(|(_, r)| *r)
            .unwrap_or_else(|| panic!("no reused segment before the tail: {segs:?}"))
            .clone();
        let fill: Vec<u8> = if garbage {
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect()
        } else {
            vec![0; 4096]
        };
        disk.overwrite(&victim, 4096, &fill);
        let e = try_open(&disk, &clock).err().expect("must refuse");
        assert!(matches!(e, StorageError::Corruption { .. }), "{e}");
        assert!(e.to_string().contains(&victim), "names the file: {e}");
    }
}

/// The tail is a reused file and its *middle* commit is destroyed: a valid
/// commit after it proves the damage is not the end of the log.
#[test]
fn damage_in_the_middle_of_a_reused_tail_is_refused() {
    let (disk, clock, s) = fresh();
    churn(&s, 3_000);
    // A few more commits into the tail, then a clean stop.
    for step in 0..3 {
        churn_step(&s, step);
    }
    drop(s);
    let segs = segments(&disk);
    // The newest segment holding commits (startup opens an empty one after it).
    let (victim, recycled) = segs
        .iter()
        .rev()
        .find(|(n, _)| {
            let b = disk.file_bytes(n).unwrap();
            b.len() > 8192 && b[4096..4120].iter().any(|&x| x != 0)
        })
        .unwrap()
        .clone();
    assert!(recycled, "{segs:?}");
    disk.overwrite(&victim, 8192, &[0u8; 4096]);
    let e = try_open(&disk, &clock).err().expect("must refuse");
    assert!(matches!(e, StorageError::Corruption { .. }), "{e}");
}

/// A restart with larger segments: the smaller segments of the earlier run
/// die and are deleted, not kept, since a reused file must hold a whole
/// segment (a write past the reserved space could fail on a full disk in
/// the middle of a commit).
#[test]
fn segments_of_a_smaller_size_are_not_reused() {
    let (disk, clock, s) = fresh();
    churn(&s, 1_500);
    drop(s);
    let mut big = small_config();
    big.segment_bytes *= 2;
    let s = block_on(Shard::open(disk.clone(), big, clock.clone())).unwrap();
    assert!(
        disk.file_names().iter().all(|n| !n.ends_with(".spare")),
        "spares of the smaller size are deleted at startup"
    );
    churn(&s, 4_000);
    assert_eq!(
        disk.stats().writes_past_allocation,
        0,
        "no commit wrote past its reserved space"
    );
    for n in disk.file_names().into_iter().filter(|n| n.ends_with(".spare")) {
        let len = disk.file_bytes(&n).unwrap().len() as u64;
        assert!(len >= big.segment_bytes, "{n} holds {len} bytes");
    }
    assert!(
        segments(&disk).iter().any(|(_, r)| *r),
        "segments of the new size are reused"
    );
}

/// A log with no record left starts its LSNs again from 1, while spares
/// from before hold frames with higher LSNs: they are deleted, not reused
/// (docs/STORAGE_FORMAT.md, "Recycled segments"). In service the latest
/// CLOCK record always stays live, so only a directory whose segments were
/// taken away gets here; the test takes them away.
#[test]
fn a_log_without_records_deletes_its_spares() {
    use engine::disk::Disk;
    let (disk, clock, s) = fresh();
    churn(&s, 3_000);
    drop(s);
    assert!(disk.file_names().iter().any(|n| n.ends_with(".spare")));
    for n in disk.file_names().into_iter().filter(|n| n.ends_with(".wal")) {
        block_on(disk.remove(&n)).unwrap();
    }
    let s = open(&disk, &clock, small_config());
    assert_eq!(s.recovery_report().commits_replayed, 0);
    let names = disk.file_names();
    assert!(names.iter().all(|n| !n.ends_with(".spare")), "{names:?}");
    assert!(
        segments(&disk).iter().all(|(_, recycled)| !recycled),
        "the new log's first segment is a new file: {:?}",
        segments(&disk)
    );
    // and the fresh log works and reuses its own dead segments later
    churn(&s, 3_000);
    assert!(segments(&disk).iter().any(|(_, r)| *r));
}

/// A deleted queue leaves more dead segments than there is room for spares.
/// None is deleted whole: each is renamed out of the log, cut down a slice
/// at a time across maintenance passes, and deleted empty, because deleting
/// a whole segment at once held the blocking thread, and the commits behind
/// it, 14-20 ms on a disk mounted with `discard` (docs/benchmarks.md, "The
/// open loop after a deleted queue"). A crash midway loses nothing and the
/// restart deletes what was left.
#[test]
fn dead_segments_beyond_the_spares_are_freed_a_slice_at_a_time() {
    use engine::limits::{DISCARD_STEPS_PER_PASS, DISCARD_STEP_BYTES, MAX_SPARE_SEGMENTS};
    let mut cfg = small_config();
    cfg.segment_bytes = 4 * DISCARD_STEP_BYTES;
    let (disk, clock, s) = fresh_with(cfg);
    let body = "d".repeat(48 * 1024);
    block_on(async {
        s.create_queue(ACCT, "keep", Metadata::default()).await.unwrap();
        s.put_message(ACCT, "keep", "kept".into(), None, Some(-1))
            .await
            .unwrap();
        s.create_queue(ACCT, "gone", Metadata::default()).await.unwrap();
        // About seven segments' worth.
        for _ in 0..600 {
            s.put_message(ACCT, "gone", body.clone(), None, None).await.unwrap();
        }
        s.delete_queue(ACCT, "gone").await.unwrap();
    });
    let named = |d: &SimDisk, suffix: &str| d.file_names().into_iter().filter(|n| n.ends_with(suffix)).count();
    let mut passes = 0;
    let mut crashed_midway = None;
    loop {
        let before = disk.total_bytes();
        block_on(s.maintenance()).unwrap();
        passes += 1;
        let freed = before.saturating_sub(disk.total_bytes());
        assert!(
            freed <= DISCARD_STEPS_PER_PASS as u64 * DISCARD_STEP_BYTES,
            "pass {passes} freed {freed} bytes at once"
        );
        if crashed_midway.is_none() && named(&disk, ".discard") > 0 && passes > 3 {
            crashed_midway = Some(disk.crash(CrashMode::LoseUnsynced));
        }
        if named(&disk, ".discard") == 0 && passes > 3 {
            break;
        }
        assert!(passes < 10_000, "discarded segments never went away");
    }
    assert_eq!(
        disk.stats().largest_removed,
        0,
        "a file was deleted with blocks still in it"
    );
    assert!(named(&disk, ".spare") <= MAX_SPARE_SEGMENTS);
    let crashed = crashed_midway.expect("the run had discarded segments to crash among");
    assert!(named(&crashed, ".discard") > 0);
    let want = block_on(s.dump()).unwrap();
    drop(s);
    let again = open(&crashed, &clock, cfg);
    assert_eq!(block_on(again.dump()).unwrap(), want);
    assert_eq!(
        named(&crashed, ".discard"),
        0,
        "the restart deletes a previous run's discards"
    );
}

/// With no spare free, the writer takes up a discarded segment not cut yet
/// rather than a new file: it is a whole segment's file, and on a full disk
/// the only space there is.
#[test]
fn discarded_segments_not_cut_yet_are_reused() {
    let mut cfg = small_config();
    cfg.segment_bytes = 4 * engine::limits::DISCARD_STEP_BYTES;
    let (disk, _clock, s) = fresh_with(cfg);
    let body = "r".repeat(48 * 1024);
    let discards = |d: &SimDisk| d.file_names().into_iter().filter(|n| n.ends_with(".discard")).count();
    block_on(async {
        s.create_queue(ACCT, "gone", Metadata::default()).await.unwrap();
        for _ in 0..600 {
            s.put_message(ACCT, "gone", body.clone(), None, None).await.unwrap();
        }
        s.delete_queue(ACCT, "gone").await.unwrap();
        s.maintenance().await.unwrap();
    });
    let before = discards(&disk);
    assert!(before >= 3, "the deleted queue left {before} discarded segments");
    let fresh_before = segments(&disk).iter().filter(|(_, recycled)| !recycled).count();
    block_on(async {
        s.create_queue(ACCT, "next", Metadata::default()).await.unwrap();
        // Four segments' worth, with no maintenance pass to cut anything.
        for _ in 0..340 {
            s.put_message(ACCT, "next", body.clone(), None, None).await.unwrap();
        }
    });
    assert!(
        discards(&disk) <= before - 2,
        "{} discarded segments left of {before}: none reused",
        discards(&disk)
    );
    let fresh_after = segments(&disk).iter().filter(|(_, recycled)| !recycled).count();
    assert!(
        fresh_after <= fresh_before,
        "new files made while whole discards waited"
    );
}
