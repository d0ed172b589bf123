//! Hematite's extensions in the engine (docs/EXTENSIONS.md): queue
//! attributes from reserved metadata keys, long polling, and dead-letter
//! moves, on the simulated disk with a manual clock whose timers fire only
//! when a test moves it.

mod common;
use common::*;
use engine::disk::sim::{CrashMode, SimDisk};
use engine::model::Metadata;
use engine::{QueueError, Shard};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use std::cell::RefCell;
use std::rc::Rc;

fn md(pairs: &[(&str, &str)]) -> Metadata {
    Metadata(pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect())
}

type Got = Rc<RefCell<Option<Result<Vec<String>, QueueError>>>>;

/// Starts a long-polling Get of one message on `pool`; its texts land in
/// the returned cell when it answers.
fn poll_for(pool: &LocalPool, s: &Rc<Shard<SimDisk>>, queue: &'static str, wait: Option<u64>) -> Got {
    let got: Got = Rc::default();
    let (s, out) = (s.clone(), got.clone());
    pool.spawner()
        .spawn_local(async move {
            let r = s
                .receive_messages(ACCT, queue, Some(1), Some(30), wait, 60_000, std::future::pending())
                .await;
            *out.borrow_mut() = Some(r.map(|v| v.into_iter().map(|m| m.text).collect()));
        })
        .unwrap();
    got
}

fn texts(g: &Got) -> Option<Vec<String>> {
    g.borrow().as_ref().map(|r| r.clone().expect("the get succeeds"))
}

#[test]
fn reserved_keys_are_checked_on_create_and_set() {
    let (_d, _c, s) = fresh();
    block_on(async {
        let bad = s
            .create_queue(ACCT, "work", md(&[("hematite_receive_wait_seconds", "21")]))
            .await;
        assert!(
            matches!(&bad, Err(QueueError::InvalidQueueAttribute { key, .. }) if key == "hematite_receive_wait_seconds"),
            "{bad:?}"
        );
        s.create_queue(ACCT, "work", md(&[])).await.unwrap();
        let bad = s
            .set_metadata(ACCT, "work", md(&[("hematite_max_dequeue_count", "3")]))
            .await;
        assert!(matches!(bad, Err(QueueError::InvalidQueueAttribute { .. })), "{bad:?}");
        let good = md(&[
            ("hematite_max_dequeue_count", "3"),
            ("hematite_dead_letter_queue", "work-dlq"),
        ]);
        s.set_metadata(ACCT, "work", good.clone()).await.unwrap();
        // Stored and returned like any metadata.
        assert_eq!(s.get_properties(ACCT, "work").await.unwrap().metadata, good);
    });
}

#[test]
fn a_long_poll_answers_when_a_message_is_put_and_waiters_go_in_arrival_order() {
    let (_d, _c, s) = fresh();
    let s = Rc::new(s);
    let mut pool = LocalPool::new();
    block_on(s.create_queue(ACCT, "work", md(&[]))).unwrap();
    let first = poll_for(&pool, &s, "work", Some(20));
    pool.run_until_stalled();
    let second = poll_for(&pool, &s, "work", Some(20));
    pool.run_until_stalled();
    assert_eq!(texts(&first), None, "an empty queue makes the get wait");
    block_on(s.put_message(ACCT, "work", "one".into(), None, None)).unwrap();
    pool.run_until_stalled();
    assert_eq!(texts(&first), Some(vec!["one".to_string()]), "the first waiter gets it");
    assert_eq!(texts(&second), None, "one message goes to one waiter");
    block_on(s.put_message(ACCT, "work", "two".into(), None, None)).unwrap();
    pool.run_until_stalled();
    assert_eq!(texts(&second), Some(vec!["two".to_string()]));
}

#[test]
fn a_long_poll_answers_when_a_visibility_timeout_runs_out() {
    let (_d, clock, s) = fresh();
    let s = Rc::new(s);
    let mut pool = LocalPool::new();
    block_on(s.create_queue(ACCT, "work", md(&[]))).unwrap();
    block_on(s.put_message(ACCT, "work", "later".into(), Some(5), None)).unwrap();
    let got = poll_for(&pool, &s, "work", Some(20));
    pool.run_until_stalled();
    assert_eq!(texts(&got), None);
    clock.advance_ms(4_999);
    pool.run_until_stalled();
    assert_eq!(texts(&got), None, "not visible yet");
    clock.advance_ms(1);
    pool.run_until_stalled();
    assert_eq!(
        texts(&got),
        Some(vec!["later".to_string()]),
        "answered the moment it became visible"
    );
}

#[test]
fn an_update_to_visibility_zero_wakes_a_waiter() {
    let (_d, _c, s) = fresh();
    let s = Rc::new(s);
    let mut pool = LocalPool::new();
    block_on(s.create_queue(ACCT, "work", md(&[]))).unwrap();
    block_on(s.put_message(ACCT, "work", "m".into(), None, None)).unwrap();
    let taken = block_on(s.get_messages(ACCT, "work", None, Some(300))).unwrap();
    let got = poll_for(&pool, &s, "work", Some(20));
    pool.run_until_stalled();
    assert_eq!(texts(&got), None);
    block_on(s.update_message(
        ACCT,
        "work",
        &taken[0].id.to_string(),
        &taken[0].pop_receipt,
        Some(0),
        None,
    ))
    .unwrap();
    pool.run_until_stalled();
    assert_eq!(texts(&got), Some(vec!["m".to_string()]));
}

#[test]
fn the_wait_ends_empty_at_its_deadline_at_shutdown_and_when_the_queue_goes() {
    let (_d, clock, s) = fresh();
    let s = Rc::new(s);
    let mut pool = LocalPool::new();
    block_on(s.create_queue(ACCT, "work", md(&[("hematite_receive_wait_seconds", "3")]))).unwrap();
    // The queue's attribute applies when the request names no wait.
    let by_attribute = poll_for(&pool, &s, "work", None);
    let no_wait = poll_for(&pool, &s, "work", Some(0));
    pool.run_until_stalled();
    assert_eq!(
        texts(&no_wait),
        Some(vec![]),
        "a request's 0 overrides the queue's wait"
    );
    assert_eq!(texts(&by_attribute), None);
    clock.advance_ms(3_000);
    pool.run_until_stalled();
    assert_eq!(texts(&by_attribute), Some(vec![]), "empty at the deadline");

    let deleted = poll_for(&pool, &s, "work", Some(20));
    pool.run_until_stalled();
    block_on(s.delete_queue(ACCT, "work")).unwrap();
    pool.run_until_stalled();
    assert!(
        matches!(&*deleted.borrow(), Some(Err(QueueError::QueueNotFound))),
        "a waiter on a deleted queue hears so at once"
    );

    block_on(s.create_queue(ACCT, "work", md(&[]))).unwrap();
    let at_shutdown = poll_for(&pool, &s, "work", Some(20));
    pool.run_until_stalled();
    s.stop_waiting();
    pool.run_until_stalled();
    assert_eq!(texts(&at_shutdown), Some(vec![]), "drained with an empty answer");
}

#[test]
fn a_waiter_that_leaves_passes_its_wake_up_on() {
    let (_d, _c, s) = fresh();
    let s = Rc::new(s);
    let mut pool = LocalPool::new();
    block_on(s.create_queue(ACCT, "work", md(&[]))).unwrap();
    // The first waiter is a future we hold, so we can drop it (its
    // connection closed) after it was woken but before it ran.
    let mut first = Box::pin(s.receive_messages(ACCT, "work", Some(1), None, Some(20), 60_000, std::future::pending()));
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(first.as_mut().poll(&mut cx).is_pending());
    let second = poll_for(&pool, &s, "work", Some(20));
    pool.run_until_stalled();
    block_on(s.put_message(ACCT, "work", "m".into(), None, None)).unwrap();
    drop(first);
    pool.run_until_stalled();
    assert_eq!(
        texts(&second),
        Some(vec!["m".to_string()]),
        "the wake-up went to the next waiter"
    );
}

use std::future::Future;

fn redrive(max: &str) -> Metadata {
    md(&[
        ("hematite_max_dequeue_count", max),
        ("hematite_dead_letter_queue", "dlq"),
    ])
}

/// Dequeues the queue's one message and lets its visibility timeout run out.
fn deliver_once(s: &Shard<SimDisk>, clock: &ManualClockRef) -> usize {
    let got = block_on(s.get_messages(ACCT, "work", None, Some(1))).unwrap();
    clock.advance_ms(1_000);
    got.len()
}

type ManualClockRef = Rc<engine::ManualClock>;

/// A queue `work` with dead-letter queue `dlq` after `max` deliveries,
/// holding one message, "poison".
fn poisoned(s: &Shard<SimDisk>, max: &str) {
    block_on(async {
        s.create_queue(ACCT, "dlq", md(&[])).await.unwrap();
        s.create_queue(ACCT, "work", redrive(max)).await.unwrap();
        s.put_message(ACCT, "work", "poison".into(), None, None).await.unwrap();
    });
}

fn count(s: &Shard<SimDisk>, queue: &str) -> u64 {
    block_on(s.get_properties(ACCT, queue))
        .unwrap()
        .approximate_message_count
}

#[test]
fn a_message_delivered_too_often_moves_with_its_id_times_and_count() {
    let (_d, clock, s) = fresh();
    poisoned(&s, "2");
    let original = block_on(s.peek_messages(ACCT, "work", None)).unwrap().remove(0);
    assert_eq!(deliver_once(&s, &clock), 1);
    assert_eq!(deliver_once(&s, &clock), 1);
    assert_eq!(deliver_once(&s, &clock), 0, "the third delivery is refused");
    assert!(
        block_on(s.peek_messages(ACCT, "work", None)).unwrap().is_empty(),
        "hidden while it moves"
    );
    let dl = block_on(s.next_dead_letter()).expect("a move is pending");
    assert_eq!(
        (dl.from.as_str(), dl.to.as_str(), dl.text.as_str()),
        ("work", "dlq", "poison")
    );
    block_on(s.put_dead_letter(&dl)).unwrap();
    block_on(s.finish_dead_letter(&dl)).unwrap();
    let moved = block_on(s.peek_messages(ACCT, "dlq", None)).unwrap();
    assert_eq!(moved.len(), 1);
    assert_eq!(
        (
            moved[0].id,
            moved[0].inserted_ms,
            moved[0].expires_ms,
            moved[0].dequeue_count
        ),
        (original.id, original.inserted_ms, original.expires_ms, 2)
    );
    assert_eq!(count(&s, "work"), 0);
}

#[test]
fn a_move_cut_short_by_a_crash_loses_nothing_and_repeats_without_a_second_copy() {
    let (disk, clock, s) = fresh();
    poisoned(&s, "1");
    assert_eq!(deliver_once(&s, &clock), 1);
    assert_eq!(deliver_once(&s, &clock), 0);
    let dl = block_on(s.next_dead_letter()).unwrap();
    block_on(s.put_dead_letter(&dl)).unwrap();
    // Power cut between the durable copy and the delete of the original.
    drop(s);
    let s = open(&disk.crash(CrashMode::LoseUnsynced), &clock, small_config());
    assert_eq!(deliver_once(&s, &clock), 0, "still hidden by its lease");
    clock.advance_ms(engine::limits::DEAD_LETTER_LEASE_SECS as u64 * 1000);
    assert_eq!(deliver_once(&s, &clock), 0, "set aside again, not delivered");
    let again = block_on(s.next_dead_letter()).unwrap();
    assert_eq!(again.id, dl.id);
    block_on(s.put_dead_letter(&again)).unwrap();
    // The superseded first move finds a different receipt and does nothing.
    block_on(s.finish_dead_letter(&dl)).unwrap();
    assert_eq!(count(&s, "work"), 1);
    block_on(s.finish_dead_letter(&again)).unwrap();
    assert_eq!(count(&s, "work"), 0);
    let copies = block_on(s.peek_messages(ACCT, "dlq", Some(32))).unwrap();
    assert_eq!(copies.len(), 1, "the copy already there is not put twice");
    assert_eq!(copies[0].id, dl.id);
}

#[test]
fn a_missing_dead_letter_queue_keeps_the_message_at_home() {
    let (_d, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "work", redrive("1")).await.unwrap();
        s.put_message(ACCT, "work", "poison".into(), None, None).await.unwrap();
    });
    assert_eq!(deliver_once(&s, &clock), 1);
    assert_eq!(deliver_once(&s, &clock), 0);
    let dl = block_on(s.next_dead_letter()).unwrap();
    assert_eq!(block_on(s.put_dead_letter(&dl)), Err(QueueError::QueueNotFound));
    assert_eq!(count(&s, "work"), 1);
}

#[test]
fn a_copy_that_is_itself_leaving_does_not_count_as_moved() {
    // work → dlq → work: a cycle the server refuses when set, but racing
    // metadata changes could still make one. The original in `work` is on
    // its way out; a move from `dlq` back into `work` must not be taken as
    // done because `work` "already holds" it, or both copies could go.
    let (_d, clock, s) = fresh();
    poisoned(&s, "1");
    assert_eq!(deliver_once(&s, &clock), 1);
    assert_eq!(deliver_once(&s, &clock), 0);
    let out = block_on(s.next_dead_letter()).unwrap();
    block_on(s.put_dead_letter(&out)).unwrap();
    let back = engine::shard::DeadLetter {
        from: "dlq".into(),
        to: "work".into(),
        ..out.clone()
    };
    assert!(
        matches!(block_on(s.put_dead_letter(&back)), Err(QueueError::ServerBusy { .. })),
        "the original in work is leaving: refused, so dlq keeps its copy"
    );
    block_on(s.finish_dead_letter(&out)).unwrap();
    assert_eq!(block_on(s.peek_messages(ACCT, "dlq", None)).unwrap().len(), 1);
}

#[test]
fn a_wall_clock_stepping_back_does_not_stretch_a_wait() {
    let (_d, clock, s) = fresh();
    let s = Rc::new(s);
    let mut pool = LocalPool::new();
    block_on(s.create_queue(ACCT, "work", md(&[]))).unwrap();
    let got = poll_for(&pool, &s, "work", Some(3));
    pool.run_until_stalled();
    clock.set_ms(T0 - 3_600_000);
    clock.advance_ms(3_000);
    pool.run_until_stalled();
    assert_eq!(texts(&got), Some(vec![]), "3 s passed, whatever the wall clock says");
}

#[test]
fn a_put_while_the_first_look_waits_for_durability_is_not_missed() {
    let (_d, clock, s) = fresh();
    let s = Rc::new(s);
    let mut pool = LocalPool::new();
    block_on(s.create_queue(ACCT, "work", md(&[]))).unwrap();
    // Past the recorded clock floor: the poll's first look appends a CLOCK
    // record and waits for it to be durable; the put lands in that wait.
    clock.advance_ms(5_000);
    let got = poll_for(&pool, &s, "work", Some(20));
    let put = s.clone();
    pool.spawner()
        .spawn_local(async move {
            put.put_message(ACCT, "work", "early".into(), None, None).await.unwrap();
        })
        .unwrap();
    pool.run_until_stalled();
    assert_eq!(texts(&got), Some(vec!["early".to_string()]));
}

#[test]
fn deliverable_messages_behind_many_dead_ones_are_still_delivered() {
    let (_d, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "dlq", md(&[])).await.unwrap();
        s.create_queue(ACCT, "work", md(&[])).await.unwrap();
        for i in 0..40 {
            s.put_message(ACCT, "work", format!("old{i}"), None, None)
                .await
                .unwrap();
        }
        assert_eq!(s.get_messages(ACCT, "work", Some(32), Some(1)).await.unwrap().len(), 32);
        assert_eq!(s.get_messages(ACCT, "work", Some(32), Some(1)).await.unwrap().len(), 8);
        s.set_metadata(ACCT, "work", redrive("1")).await.unwrap();
    });
    clock.advance_ms(1_000);
    block_on(s.put_message(ACCT, "work", "fresh".into(), None, None)).unwrap();
    let got = block_on(s.get_messages(ACCT, "work", Some(1), None)).unwrap();
    assert_eq!(got.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), ["fresh"]);
}
