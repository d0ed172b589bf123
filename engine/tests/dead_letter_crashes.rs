//! Dead-letter moves against crashes at the worst moments, one shard for
//! the queue and one for its dead-letter queue (as on two cores).

mod common;
use common::*;
use engine::disk::sim::{CrashMode, SimDisk};
use engine::model::Metadata;
use futures::executor::block_on;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll};

fn md(pairs: &[(&str, &str)]) -> Metadata {
    Metadata(pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect())
}

/// Simulator seed 207 (and 5139, 5344 and 7661 of 10,000): a move was
/// handed to the mover while the Get's set-aside record was still in its
/// group commit; the copy became durable on the other shard, the set-aside
/// did not (power cut, or the commit failed and the shard poisoned
/// itself). After the restart the message is back under the receipt the
/// client got before, which works again: an Update is acknowledged and
/// then lost (the retried move finds the stale copy and deletes the
/// updated original), a Delete is acknowledged while the copy lives on.
#[test]
fn a_move_is_handed_out_only_once_its_set_aside_is_durable() {
    let clock = Rc::new(engine::ManualClock::new(T0));
    let (sd, td) = (SimDisk::new(), SimDisk::new());
    let s = open(&sd, &clock, small_config());
    let t = open(&td, &clock, small_config());
    block_on(async {
        t.create_queue(ACCT, "dlq", md(&[])).await.unwrap();
        let redrive = md(&[
            ("hematite_max_dequeue_count", "1"),
            ("hematite_dead_letter_queue", "dlq"),
        ]);
        s.create_queue(ACCT, "work", redrive).await.unwrap();
        s.put_message(ACCT, "work", "v1".into(), None, None).await.unwrap();
    });
    let got = block_on(s.get_messages(ACCT, "work", None, Some(1))).unwrap().remove(0);
    clock.advance_ms(2_000);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    // The Get that sets it aside, stopped while its record is committed.
    let mut get = Box::pin(s.get_messages(ACCT, "work", None, Some(1)));
    assert!(get.as_mut().poll(&mut cx).is_pending());
    let taken = match pin!(s.try_next_dead_letter()).poll(&mut cx) {
        Poll::Ready(Some(dl)) => Some(dl),
        Poll::Ready(None) => panic!("the move is lost"),
        Poll::Pending => None,
    };
    if let Some(dl) = &taken {
        block_on(t.put_dead_letter(dl)).unwrap();
    }
    // Power cut of the queue's shard before its commit.
    drop(get);
    drop(s);
    let s = open(&sd.crash(CrashMode::LoseUnsynced), &clock, small_config());
    let update = block_on(s.update_message(
        ACCT,
        "work",
        &got.id.to_string(),
        &got.pop_receipt,
        Some(0),
        Some("v2".into()),
    ));
    let copies = block_on(t.peek_messages(ACCT, "dlq", Some(32))).unwrap();
    assert!(
        update.is_err() || copies.is_empty(),
        "the copy is durable in the dead-letter queue ({:?}) but its set-aside was lost: the client's receipt \
         from before the move worked again ({update:?})",
        copies.iter().map(|c| &c.text).collect::<Vec<_>>()
    );
}
