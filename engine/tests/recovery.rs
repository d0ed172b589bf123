//! Crash and recovery on the simulated disk: clean restarts, lost unsynced
//! writes, torn tails, mid-log corruption, quarantine, poisoning, ENOSPC.

mod common;
use common::*;
use engine::disk::sim::{CrashMode, Faults, SimDisk};
use engine::model::Metadata;
use engine::shard::ShardConfig;
use engine::wal::{segment_name, RecoveryMode};
use engine::{ManualClock, QueueError, Shard, StorageError};
use futures::executor::block_on;
use std::rc::Rc;

fn workload(s: &Shard<SimDisk>, n: usize) {
    block_on(async {
        let _ = s
            .create_queue(ACCT, "work", Metadata(vec![("K".into(), "v".into())]))
            .await;
        for i in 0..n {
            s.put_message(ACCT, "work", format!("message {i} {}", "p".repeat(i % 300)), None, None)
                .await
                .unwrap();
            if i % 3 == 0 {
                let got = s.get_messages(ACCT, "work", Some(2), Some(60)).await.unwrap();
                if let Some(m) = got.first() {
                    if i % 2 == 0 {
                        s.delete_message(ACCT, "work", &m.id.to_string(), &m.pop_receipt)
                            .await
                            .unwrap();
                    } else {
                        s.update_message(
                            ACCT,
                            "work",
                            &m.id.to_string(),
                            &m.pop_receipt,
                            Some(5),
                            Some(format!("upd {i}")),
                        )
                        .await
                        .unwrap();
                    }
                }
            }
        }
    });
}

fn try_open(disk: &SimDisk, clock: &Rc<ManualClock>, cfg: ShardConfig) -> Result<Shard<SimDisk>, StorageError> {
    block_on(Shard::open(disk.clone(), cfg, clock.clone()))
}

#[test]
fn clean_restart_and_power_loss_keep_everything_acknowledged() {
    let (disk, clock, s) = fresh();
    workload(&s, 300);
    let before = block_on(s.dump()).unwrap();
    assert!(s.segment_stats().len() > 1, "the workload should rotate segments");
    drop(s);
    let s = open(&disk, &clock, small_config());
    assert_eq!(block_on(s.dump()).unwrap(), before, "restart on the same disk");
    drop(s);
    for mode in [CrashMode::LoseUnsynced, CrashMode::TearUnsynced { seed: 7 }] {
        let crashed = disk.crash(mode);
        let s = open(&crashed, &clock, small_config());
        assert_eq!(block_on(s.dump()).unwrap(), before, "{mode:?}");
    }
}

#[test]
fn pop_receipts_survive_a_crash() {
    let (disk, clock, s) = fresh();
    let got = block_on(async {
        s.create_queue(ACCT, "que", Metadata::default()).await.unwrap();
        s.put_message(ACCT, "que", "a".into(), None, None).await.unwrap();
        s.get_messages(ACCT, "que", None, Some(300)).await.unwrap().remove(0)
    });
    let s = open(&disk.crash(CrashMode::LoseUnsynced), &clock, small_config());
    block_on(async {
        assert!(
            s.get_messages(ACCT, "que", None, None).await.unwrap().is_empty(),
            "still invisible after the crash"
        );
        let up = s
            .update_message(ACCT, "que", &got.id.to_string(), &got.pop_receipt, Some(0), None)
            .await
            .unwrap();
        let again = s.get_messages(ACCT, "que", None, None).await.unwrap().remove(0);
        assert_eq!(again.dequeue_count, 2);
        assert_eq!(
            s.delete_message(ACCT, "que", &got.id.to_string(), &up.pop_receipt)
                .await,
            Err(QueueError::MessageNotFound)
        );
        s.delete_message(ACCT, "que", &got.id.to_string(), &again.pop_receipt)
            .await
            .unwrap();
    });
}

#[test]
fn failed_fdatasync_poisons_and_acknowledges_nothing() {
    let (disk, clock, s) = fresh();
    workload(&s, 50);
    let before = block_on(s.dump()).unwrap();
    disk.set_faults(Faults {
        fail_sync_after: Some(0),
        ..Default::default()
    });
    let e = block_on(s.put_message(ACCT, "work", "never acked".into(), None, None)).unwrap_err();
    assert_eq!(e.code(), "InternalError");
    assert!(e.to_string().contains("internal error"), "{e}");
    disk.set_faults(Faults::default());
    // poisoned: every later mutation is refused with a reason, even though the disk works again
    let e = block_on(s.put_message(ACCT, "work", "x".into(), None, None)).unwrap_err();
    match &e {
        QueueError::Internal { reason } => {
            assert!(reason.contains("poisoned") && reason.contains("fdatasync"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    drop(s);
    for mode in CRASHES {
        let s = open(&disk.crash(mode), &clock, small_config());
        let after = block_on(s.dump()).unwrap();
        let msgs = &after[&(ACCT.to_string(), "work".to_string())].messages;
        let extra = msgs.iter().filter(|(_, t)| t == "never acked").count();
        // the unacknowledged put may or may not be there; everything acknowledged is
        let mut expected = before.clone();
        if extra == 1 {
            let q = expected.get_mut(&(ACCT.to_string(), "work".to_string())).unwrap();
            let m = msgs.iter().find(|(_, t)| t == "never acked").unwrap().clone();
            q.messages.push(m);
            q.messages.sort_by_key(|(m, _)| (m.visible_ms, m.seq));
        }
        assert_eq!(after, expected, "{mode:?}");
    }
}

#[test]
fn torn_tail_is_cut_at_every_offset() {
    // Build a log, then cut the last segment at every sector boundary (and a
    // few odd offsets): recovery must always succeed with a prefix of the
    // acknowledged commits, never more, never an error.
    let (disk, clock, s) = fresh();
    block_on(s.create_queue(ACCT, "que", Metadata::default())).unwrap();
    let mut acked = Vec::new();
    for i in 0..40 {
        block_on(s.put_message(ACCT, "que", format!("m{i}"), None, Some(-1))).unwrap();
        acked.push(format!("m{i}"));
    }
    drop(s);
    let last = disk
        .file_names()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .max()
        .unwrap();
    let bytes = disk.file_bytes(&last).unwrap();
    let data_end = bytes.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let mut offsets: Vec<u64> = (4096..data_end + 512).step_by(512).collect();
    offsets.extend([4097, 4100, 4200, data_end - 1, data_end - 3]);
    for cut in offsets {
        let d = disk.crash(CrashMode::LoseUnsynced);
        let len = bytes.len() as u64;
        if cut < len {
            d.overwrite(&last, cut, &vec![0u8; (len - cut) as usize]);
        }
        let s = try_open(&d, &clock, small_config()).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let dump = block_on(s.dump()).unwrap();
        let texts: Vec<String> = dump
            .get(&(ACCT.to_string(), "que".to_string()))
            .map(|q| q.messages.iter().map(|(_, t)| t.clone()).collect())
            .unwrap_or_default();
        assert_eq!(texts[..], acked[..texts.len()], "cut at {cut} must leave a prefix");
        if cut >= data_end {
            assert_eq!(texts.len(), acked.len());
        }
    }
}

#[test]
fn mid_log_bit_flip_is_refused_with_file_and_offset() {
    let (disk, clock, s) = fresh();
    workload(&s, 400);
    drop(s);
    let names: Vec<String> = disk.file_names().into_iter().filter(|n| n.ends_with(".wal")).collect();
    assert!(names.len() >= 3);
    let victim = &names[0];
    // Inside the first commit's second frame (padding after a commit is
    // covered by no checksum, and flipping it loses nothing).
    let offset = 4096 + 40;
    disk.corrupt(victim, offset, 0x10);
    let e = try_open(&disk, &clock, small_config()).err().expect("must refuse");
    let msg = e.to_string();
    assert!(matches!(e, StorageError::Corruption { .. }), "{msg}");
    assert!(msg.contains(victim.as_str()), "names the file: {msg}");
    assert!(
        msg.contains("at offset 4128"),
        "names the offset of the damaged frame: {msg}"
    );

    // The operator override sets the segment aside and starts.
    let mut cfg = small_config();
    cfg.recovery = RecoveryMode::QuarantineCorrupt;
    let s = try_open(&disk, &clock, cfg).expect("quarantine starts anyway");
    assert_eq!(s.recovery_report().quarantined, vec![victim.clone()]);
    assert!(disk.file_names().contains(&format!("{victim}.quarantined")));
    drop(s);
    // and the next strict start is clean
    try_open(&disk, &clock, small_config()).expect("strict start after quarantine");
}

#[test]
fn every_byte_flip_in_a_sealed_segment_is_detected() {
    let (disk, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", Metadata::default()).await.unwrap();
        for i in 0..6 {
            s.put_message(ACCT, "que", format!("m{i}"), None, None).await.unwrap();
        }
    });
    drop(s);
    // After a restart the first segment is sealed and a new one follows.
    let s = open(&disk, &clock, small_config());
    block_on(s.put_message(ACCT, "que", "later".into(), None, None)).unwrap();
    drop(s);
    let first = segment_name(1);
    // What a restart without any flip shows: a harmless flip must show
    // exactly this (texts, dequeue counts, visibility, receipts).
    let baseline = block_on(open(&disk.crash(CrashMode::LoseUnsynced), &clock, small_config()).dump()).unwrap();
    let bytes = disk.file_bytes(&first).unwrap();
    let data_end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    for off in 0..data_end {
        let d = disk.crash(CrashMode::LoseUnsynced);
        d.corrupt(&first, off as u64, 0x01);
        match try_open(&d, &clock, small_config()) {
            Err(StorageError::Corruption { .. }) => {}
            Err(other) => panic!("flip at {off}: unexpected error {other}"),
            Ok(s) => {
                // Only bytes that no checksum covers may be flipped harmlessly:
                // padding after a commit, and unused header bytes.
                let dump = block_on(s.dump()).unwrap();
                assert_eq!(dump, baseline, "flip at {off} changed data silently");
            }
        }
    }
}

#[test]
fn disk_full_refuses_writes_keeps_reads_and_recovers() {
    let (disk, _clock, s) = fresh();
    block_on(s.create_queue(ACCT, "que", Metadata::default())).unwrap();
    disk.set_faults(Faults {
        no_space: true,
        ..Default::default()
    });
    // Fill the current segment; the rotation needs a new file, which fails.
    let mut refused = None;
    for i in 0..200 {
        match block_on(s.put_message(ACCT, "que", format!("{i}{}", "x".repeat(1000)), None, None)) {
            Ok(_) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (n, e) = refused.expect("puts must be refused once the segment is full");
    assert_eq!(e.code(), "ServerBusy", "{e}");
    // The reason names the disk's answer, so an operator sees why.
    match &e {
        QueueError::ServerBusy { reason } => assert!(reason.contains("space"), "{reason}"),
        other => panic!("not ServerBusy: {other}"),
    }
    // reads still work
    assert_eq!(
        block_on(s.get_properties(ACCT, "que"))
            .unwrap()
            .approximate_message_count,
        n as u64
    );
    assert_eq!(block_on(s.peek_messages(ACCT, "que", Some(1))).unwrap().len(), 1);
    // space comes back: writes resume
    disk.set_faults(Faults::default());
    block_on(s.put_message(ACCT, "que", "after".into(), None, None)).unwrap();
}

#[test]
fn shard_id_mismatch_is_refused() {
    let (disk, clock, s) = fresh();
    workload(&s, 5);
    drop(s);
    let mut cfg = small_config();
    cfg.shard_id = 1;
    let e = try_open(&disk, &clock, cfg).err().unwrap();
    assert!(matches!(e, StorageError::Mismatch(_)), "{e}");
}

#[test]
fn every_failing_sync_and_write_point_keeps_the_acknowledged_prefix() {
    // Fail the k-th fdatasync (or write) during a workload that rotates
    // segments, then lose power with torn unsynced writes, for every k.
    // Whatever failed was never acknowledged; everything acknowledged before
    // it must come back, in order, and at most the one failed put besides.
    for k in 0..160u64 {
        for fail_write in [false, true] {
            let (disk, clock, s) = fresh();
            block_on(s.create_queue(ACCT, "que", Metadata::default())).unwrap();
            let faults = if fail_write {
                Faults {
                    fail_write_after: Some(k),
                    ..Default::default()
                }
            } else {
                Faults {
                    fail_sync_after: Some(k),
                    ..Default::default()
                }
            };
            disk.set_faults(faults);
            let mut acked = Vec::new();
            let mut failed = None;
            for i in 0..400 {
                let text = format!("{i:04}{}", "r".repeat(900));
                match block_on(s.put_message(ACCT, "que", text.clone(), None, Some(-1))) {
                    Ok(_) => acked.push(text),
                    Err(e) => {
                        assert_eq!(e.code(), "InternalError", "k={k}: {e}");
                        failed = Some(text);
                        break;
                    }
                }
            }
            disk.set_faults(Faults::default());
            drop(s);
            let s = open(&disk.crash(CrashMode::TearUnsynced { seed: k }), &clock, small_config());
            let dump = block_on(s.dump()).unwrap();
            let got: Vec<String> = dump[&(ACCT.to_string(), "que".to_string())]
                .messages
                .iter()
                .map(|(_, t)| t.clone())
                .collect();
            assert!(
                got.len() >= acked.len(),
                "k={k} write={fail_write}: lost acknowledged puts"
            );
            assert_eq!(got[..acked.len()], acked[..], "k={k} write={fail_write}");
            assert!(got.len() <= acked.len() + 1);
            if got.len() == acked.len() + 1 {
                assert_eq!(Some(&got[acked.len()]), failed.as_ref());
            }
        }
    }
}

/// A checksum-valid record that names an id no shard can hand out (only a
/// crafted or foreign log, or a bug, holds one) is refused at recovery. A
/// log just below the bound opens, and once its last id is used the next
/// request is refused with an error: the id counter never wraps onto ids in
/// use, and nothing panics.
#[test]
fn a_log_naming_an_impossible_id_is_refused() {
    use engine::limits::ID_SPACE;
    use engine::wal::record::{MessageState, Record};
    use engine::wal::{Wal, WalConfig};
    for (seq, refused) in [(ID_SPACE - 2, false), (ID_SPACE - 1, true), (u64::MAX, true)] {
        let disk = SimDisk::new();
        block_on(async {
            let (wal, _) = Wal::open(disk.clone(), WalConfig::new(0), T0, &mut |_, _| {})
                .await
                .expect("opens");
            wal.reserve(T0).await.expect("room");
            let state = MessageState {
                qid: 1,
                seq,
                id: [0; 16],
                inserted_ms: T0,
                expires_ms: T0 + 1_000,
                visible_ms: T0,
                dequeue_count: 0,
                receipt: 0,
                body: Rc::from(&b"x"[..]),
            };
            let lsn = wal.append(&Record::MessagePut(state)).expect("appends").lsn;
            wal.wait_durable(lsn).await.expect("durable");
        });
        let clock = Rc::new(ManualClock::new(T0));
        match block_on(Shard::open(disk, ShardConfig::new(0), clock)) {
            Err(StorageError::Mismatch(why)) if refused => assert!(why.contains("not this server's counter"), "{why}"),
            Ok(s) if !refused => block_on(async {
                s.create_queue(ACCT, "last", Metadata::default())
                    .await
                    .expect("the last id is handed out");
                match s.create_queue(ACCT, "beyond", Metadata::default()).await {
                    Err(QueueError::Internal { reason }) => assert!(reason.contains("exhausted"), "{reason}"),
                    other => panic!("an id beyond the space: {other:?}"),
                }
            }),
            Err(e) => panic!("seq {seq}: {e}"),
            Ok(_) => panic!("seq {seq}: a log naming an impossible id was opened"),
        }
    }
}
