//! How group commits are scheduled on one core (engine/src/wal/mod.rs,
//! `wait_durable`). Runs the log on the simulated disk under a FIFO
//! executor, as glommio runs a core's tasks: in the order they are woken.

use engine::disk::sim::{Faults, SimDisk};
use engine::wal::record::Record;
use engine::wal::{Wal, WalConfig};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use std::cell::RefCell;
use std::rc::Rc;

fn open(disk: &SimDisk) -> Rc<Wal<SimDisk>> {
    let (wal, _) = futures::executor::block_on(Wal::open(disk.clone(), WalConfig::new(0), 1_000, &mut |_, _| {}))
        .expect("an empty log opens");
    Rc::new(wal)
}

async fn append(wal: &Wal<SimDisk>, qid: u64) -> u64 {
    wal.reserve(1_000).await.expect("room");
    wal.append(&Record::QueueDeleted { qid }).expect("appends").lsn
}

/// When a commit ends, a waiter it does not cover is woken to lead the next
/// one before the waiters it covers resume: those send their answers while
/// the next batch is already being written. Woken the other way round, a
/// commit's worth of answers ran first and the disk sat idle meanwhile.
#[test]
fn the_next_commit_starts_before_the_covered_waiters_resume() {
    let disk = SimDisk::new();
    // A slow fdatasync, so C can append while the first commit is in flight.
    disk.set_faults(Faults {
        sync_yields: 10,
        ..Faults::default()
    });
    let wal = open(&disk);
    let writes_before = disk.stats().writes;
    let seen = Rc::new(RefCell::new(None));
    let order = Rc::new(RefCell::new(Vec::new()));
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    // B appends first and yields, so its record rides in A's commit, and
    // then waits for that commit (covered by it).
    let (w, s, d, o) = (wal.clone(), seen.clone(), disk.clone(), order.clone());
    spawner
        .spawn_local(async move {
            let lsn = append(&w, 1).await;
            futures_lite::future::yield_now().await;
            o.borrow_mut().push("B waits");
            w.wait_durable(lsn).await.expect("durable");
            *s.borrow_mut() = Some(d.stats().writes);
        })
        .expect("spawns");
    // A leads the first commit.
    let w = wal.clone();
    spawner
        .spawn_local(async move {
            let lsn = append(&w, 2).await;
            w.wait_durable(lsn).await.expect("durable");
        })
        .expect("spawns");
    // C appends while that commit is in flight, after B began to wait: it
    // needs the next commit.
    let (w, o) = (wal.clone(), order.clone());
    spawner
        .spawn_local(async move {
            for _ in 0..4 {
                futures_lite::future::yield_now().await;
            }
            o.borrow_mut().push("C waits");
            assert_eq!(w.durable_lsn(), 0, "the first commit is still in flight");
            let lsn = append(&w, 3).await;
            w.wait_durable(lsn).await.expect("durable");
        })
        .expect("spawns");
    pool.run();
    assert_eq!(*order.borrow(), ["B waits", "C waits"], "the scenario ran as designed");
    let writes_when_b_resumed = seen.borrow().expect("B finished");
    assert_eq!(
        writes_when_b_resumed - writes_before,
        2,
        "B resumed before the second commit's write was issued"
    );
    assert_eq!(wal.durable_lsn(), wal.last_lsn(), "everything appended is durable");
}

/// However the waiters interleave, every one of them returns, and only
/// once its record is durable: a waiter woken to lead that finds nothing
/// left to do must not strand the others.
#[test]
fn every_waiter_returns_once_its_record_is_durable() {
    for waiters in 1..12u64 {
        let disk = SimDisk::new();
        let wal = open(&disk);
        let done = Rc::new(RefCell::new(0u64));
        let mut pool = LocalPool::new();
        let spawner = pool.spawner();
        for i in 0..waiters {
            let (w, done) = (wal.clone(), done.clone());
            spawner
                .spawn_local(async move {
                    for _ in 0..i % 3 {
                        futures_lite::future::yield_now().await;
                    }
                    let lsn = append(&w, i).await;
                    if i % 2 == 0 {
                        futures_lite::future::yield_now().await;
                    }
                    w.wait_durable(lsn).await.expect("durable");
                    assert!(w.durable_lsn() >= lsn, "returned before its record was durable");
                    *done.borrow_mut() += 1;
                })
                .expect("spawns");
        }
        pool.run();
        assert_eq!(*done.borrow(), waiters, "a waiter was stranded");
        assert_eq!(wal.durable_lsn(), wal.last_lsn());
    }
}
