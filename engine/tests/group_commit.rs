//! How group commits are scheduled on one core (engine/src/wal/mod.rs,
//! `wait_durable`). Runs the log on the simulated disk under a FIFO
//! executor, as glommio runs a core's tasks: in the order they are woken.

use engine::disk::sim::{CrashMode, Faults, SimDisk};
use engine::wal::record::{MessageState, Record};
use engine::wal::{Wal, WalConfig};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

fn open(disk: &SimDisk) -> Rc<Wal<SimDisk>> {
    let (wal, _) = futures::executor::block_on(Wal::open(disk.clone(), WalConfig::new(0), 1_000, &mut |_, _| {}))
        .expect("an empty log opens");
    Rc::new(wal)
}

async fn append(wal: &Wal<SimDisk>, qid: u64) -> u64 {
    append_record(wal, &Record::QueueDeleted { qid }).await
}

async fn append_record(wal: &Wal<SimDisk>, rec: &Record) -> u64 {
    wal.reserve(1_000).await.expect("room");
    wal.append(rec).expect("appends").lsn
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
/// once its record is durable: a crash at the moment it returns (the disk's
/// durable image then) still recovers the record. A waiter woken to lead
/// that finds nothing left to do must not strand the others.
#[test]
fn every_waiter_returns_once_its_record_is_durable() {
    for waiters in 1..12u64 {
        let disk = SimDisk::new();
        let wal = open(&disk);
        let returned = Rc::new(RefCell::new(Vec::new()));
        let mut pool = LocalPool::new();
        let spawner = pool.spawner();
        for i in 0..waiters {
            let (w, d, returned) = (wal.clone(), disk.clone(), returned.clone());
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
                    returned.borrow_mut().push((lsn, d.crash(CrashMode::LoseUnsynced)));
                })
                .expect("spawns");
        }
        pool.run();
        assert_eq!(returned.borrow().len() as u64, waiters, "a waiter was stranded");
        assert_eq!(wal.durable_lsn(), wal.last_lsn());
        for (lsn, image) in returned.borrow().iter() {
            let mut recovered = Vec::new();
            futures::executor::block_on(Wal::open(image.clone(), WalConfig::new(0), 1_000, &mut |_, pos| {
                recovered.push(pos.lsn)
            }))
            .expect("the crash image recovers");
            assert!(
                recovered.contains(lsn),
                "LSN {lsn} was answered but a crash then lost it"
            );
        }
    }
}

/// A future polled by hand, with a waker that records being woken: the
/// test decides which task runs when, as a busy core might.
struct Probe {
    fut: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
    woken: Arc<AtomicBool>,
    done: bool,
}

struct Flag(Arc<AtomicBool>);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Probe {
    fn new(fut: impl std::future::Future<Output = ()> + 'static) -> Self {
        Probe {
            fut: Box::pin(fut),
            woken: Arc::new(AtomicBool::new(false)),
            done: false,
        }
    }

    /// Polls once; true when the future finished.
    fn poll(&mut self) -> bool {
        self.woken.store(false, Ordering::SeqCst);
        let waker = Waker::from(Arc::new(Flag(self.woken.clone())));
        self.done = self.fut.as_mut().poll(&mut Context::from_waker(&waker)).is_ready();
        self.done
    }

    fn run_to_end(&mut self) {
        for _ in 0..1_000 {
            if self.poll() {
                return;
            }
        }
        panic!("did not finish");
    }

    fn woken(&self) -> bool {
        self.woken.load(Ordering::SeqCst)
    }
}

/// A small record appended, and a task (not yet polled) waiting for it.
fn waiter(wal: &Rc<Wal<SimDisk>>, qid: u64) -> Probe {
    waiter_for(wal, Record::QueueDeleted { qid })
}

/// `rec` appended, and a task (not yet polled) waiting for it.
fn waiter_for(wal: &Rc<Wal<SimDisk>>, rec: Record) -> Probe {
    let w = wal.clone();
    let lsn = futures::executor::block_on(append_record(&w, &rec));
    Probe::new(async move { w.wait_durable(lsn).await.expect("durable") })
}

/// A waiter woken to lead may run only after another commit covered its
/// record, and then return without leading. The waiter that still needs a
/// commit must be woken regardless: counting the first one as "the" next
/// leader (event-listener's `notify(1)`) left it waiting for ever with no
/// commit in flight (the simulator's seed 0 found it).
#[test]
fn a_waiter_woken_to_lead_that_finds_its_record_durable_strands_no_one() {
    let disk = SimDisk::new();
    let wal = open(&disk);
    // L leads commit 1 and stops inside its fdatasync.
    let mut l = waiter(&wal, 1);
    assert!(!l.poll(), "commit 1 in flight");
    // A needs the next commit: it waits to lead.
    let mut a = waiter(&wal, 2);
    assert!(!a.poll());
    // Commit 1 ends and wakes A to lead, but A does not run yet.
    l.run_to_end();
    assert!(a.woken(), "A was chosen to lead");
    // M runs first and leads commit 2, which covers A's record.
    let mut m = waiter(&wal, 3);
    assert!(!m.poll(), "commit 2 in flight");
    // C arrives during commit 2 and waits to lead commit 3.
    let mut c = waiter(&wal, 4);
    assert!(!c.poll());
    // Commit 2 ends; A, still not run, finds its record durable.
    m.run_to_end();
    assert!(a.poll(), "A's record is durable");
    assert!(
        c.woken(),
        "C needs a commit and nobody is left to lead it, yet C was never woken"
    );
    c.run_to_end();
    assert_eq!(wal.durable_lsn(), wal.last_lsn());
}

/// Every mutation awaits `reserve` and `wait_durable`, so their futures sit
/// inside every request's and every connection's future. Their rare steps
/// (preparing a segment, leading a group commit: over a kilobyte of state
/// each on the real disk) are boxed to keep them out; an await that holds
/// a large local again would fail this (docs/benchmarks.md, "Whole-program
/// optimization and smaller futures").
#[test]
fn the_per_mutation_futures_stay_small() {
    let disk = SimDisk::new();
    let wal = open(&disk);
    let reserve = wal.reserve(1_000);
    let durable = wal.wait_durable(1);
    assert!(
        std::mem::size_of_val(&reserve) <= 256,
        "reserve: {} bytes",
        std::mem::size_of_val(&reserve)
    );
    assert!(
        std::mem::size_of_val(&durable) <= 256,
        "wait_durable: {} bytes",
        std::mem::size_of_val(&durable)
    );
}

/// A segment's preparation dropped while its writes are in flight leaves
/// the disk in an unknown state: the log is poisoned, and the next
/// `reserve` says so at once. Before, the `preparing` flag stayed set and
/// every later rotation waited on `changed` for good.
#[test]
fn a_segment_preparation_dropped_mid_write_poisons_the_log() {
    let disk = SimDisk::new();
    let mut cfg = WalConfig::new(0);
    cfg.max_append_body = 250 * 1024;
    cfg.segment_bytes = engine::limits::min_segment_bytes(cfg.max_append_body);
    let (wal, _) =
        futures::executor::block_on(Wal::open(disk.clone(), cfg, 1_000, &mut |_, _| {})).expect("an empty log opens");
    let wal = Rc::new(wal);
    // A record of 16 KiB leaves less room than the largest record needs:
    // the next `reserve` prepares the next segment.
    let big = Record::QueueDefined {
        qid: 1,
        account: "a".into(),
        name: "q".repeat(16 * 1024),
        metadata: Default::default(),
        acl: Vec::new(),
    };
    futures::executor::block_on(async {
        wal.reserve(1_000).await.expect("room");
        let lsn = wal.append(&big).expect("appends").lsn;
        wal.wait_durable(lsn).await.expect("durable");
    });
    disk.set_faults(Faults {
        sync_yields: 1,
        ..Faults::default()
    });
    let w = wal.clone();
    let mut first = Probe::new(async move {
        let _ = w.reserve(1_000).await;
    });
    assert!(!first.poll(), "the preparation waits in an fdatasync");
    assert!(wal.poisoned().is_none());
    drop(first);
    assert!(
        wal.poisoned().is_some(),
        "a preparation dropped mid-write poisons the log"
    );
    let w = wal.clone();
    let mut second = Probe::new(async move {
        let r = w.reserve(1_000).await;
        assert!(matches!(r, Err(engine::error::StorageError::Poisoned(_))), "{r:?}");
    });
    assert!(second.poll(), "the next reserve returns at once");
}

/// A waiter that waits to lead and is covered by the commit the next
/// leader starts is not woken by that start: it would run only to listen
/// again (a poll of a whole connection's future, every put at load). It is
/// woken once, when the commit covering it ends.
#[test]
fn a_waiter_covered_by_the_commit_that_starts_is_woken_only_at_its_end() {
    let disk = SimDisk::new();
    let wal = open(&disk);
    // L leads commit 1 and stops inside it.
    let mut l = waiter(&wal, 1);
    assert!(!l.poll(), "commit 1 in flight");
    // A and B need the next commit: both wait to lead.
    let mut a = waiter(&wal, 2);
    let mut b = waiter(&wal, 3);
    assert!(!a.poll() && !b.poll());
    // Commit 1 ends and wakes A, the earliest, to lead; not B.
    l.run_to_end();
    assert!(a.woken() && !b.woken());
    // A leads commit 2, which holds B's record too: B is not woken.
    assert!(!a.poll(), "commit 2 in flight");
    assert!(!b.woken(), "B was woken by a commit start that covers it");
    // Commit 2 ends: now B is woken, and its record is durable.
    a.run_to_end();
    assert!(b.woken(), "B was not woken when the commit covering it ended");
    assert!(b.poll(), "B's record is durable");
    assert_eq!(wal.durable_lsn(), wal.last_lsn());
}

/// When the commit that starts does not cover everyone waiting to lead
/// (the open batch filled, so later records wait in a batch behind it),
/// they are all woken to check, so the ones it does not cover listen to
/// lead again and the earliest is woken first when it ends (handed over
/// with the rest, they would still be woken by its end, but with no one
/// chosen to lead ahead of the covered waiters' answers).
#[test]
fn waiters_a_starting_commit_does_not_cover_are_woken_to_check() {
    let disk = SimDisk::new();
    let wal = open(&disk);
    let big = |qid: u64| {
        let m = MessageState {
            qid,
            seq: qid,
            id: [0; 16],
            inserted_ms: 0,
            expires_ms: 0,
            visible_ms: 0,
            dequeue_count: 0,
            receipt: 0,
            body: vec![7u8; BIG].into(),
        };
        waiter_for(&wal, Record::MessagePut(m))
    };
    const BIG: usize = 60_000;
    let mut l = big(1);
    assert!(!l.poll(), "commit 1 in flight");
    // More than one batch's bytes (MAX_COMMIT_BYTES) appended meanwhile.
    let mut waiters: Vec<Probe> = (2..2 + 8 * 1024 * 1024 / BIG as u64).map(big).collect();
    for p in &mut waiters {
        assert!(!p.poll());
    }
    l.run_to_end();
    let (first, rest) = waiters.split_first_mut().expect("waiters");
    assert!(first.woken() && rest.iter().all(|p| !p.woken()), "one is woken to lead");
    assert!(!first.poll(), "commit 2 in flight");
    assert!(
        rest.iter().all(|p| p.woken()),
        "commit 2 holds only the first batch, yet the waiters were not woken to check"
    );
    for _ in 0..10_000 {
        let mut ran = false;
        for p in waiters.iter_mut().filter(|p| !p.done && p.woken()) {
            p.poll();
            ran = true;
        }
        if !ran {
            break;
        }
    }
    assert!(waiters.iter().all(|p| p.done), "a waiter was stranded");
    assert_eq!(wal.durable_lsn(), wal.last_lsn());
}
