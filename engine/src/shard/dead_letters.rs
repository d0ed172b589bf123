//! Dead-letter queues (docs/EXTENSIONS.md, "Dead-letter queues"): a
//! message already delivered `hematite_max_dequeue_count` times is moved to
//! the queue `hematite_dead_letter_queue` names, instead of being
//! delivered again.
//!
//! The move spans two queues that may live on two shards, so it is three
//! durable steps, each safe to lose in a crash:
//! 1. Get Messages *sets the message aside* on its own shard: it hides it
//!    for the dead-letter lease under a fresh receipt (one record) and
//!    queues a [`Pending`] move in memory.
//! 2. The server's mover takes it ([`Shard::next_dead_letter`]) and puts a
//!    copy, with the original id, text, insertion and expiry times and
//!    dequeue count, into the dead-letter queue on its shard
//!    ([`Shard::put_dead_letter`]). The put is idempotent by message id.
//! 3. Only once that copy is durable does the mover delete the original
//!    ([`Shard::finish_dead_letter`]), and only if it still holds the
//!    receipt of step 1.
//!
//! A crash before step 3 is durable leaves the original in place; its lease
//! runs out, a later Get sets it aside again, and step 2 finds the copy
//! already there. The one duplicate possible: the copy was already taken
//! out of the dead-letter queue (deleted) before the retry, which then puts
//! it again, under the same message id. Nothing is ever lost: the original
//! goes only after a durable copy exists.

use super::*;

/// A move queued by Get Messages; owned by the source queue's shard.
pub(super) struct Pending {
    qid: u64,
    seq: u64,
    /// The receipt the message was hidden under: if it changed, the move
    /// was superseded (or the message is gone) and is dropped.
    receipt: u64,
    /// The set-aside record. The move starts only once it is durable: a
    /// copy made durable on another shard while a crash can still take the
    /// set-aside back would let the receipt from before the move work
    /// again (simulator seed 207, engine/tests/dead_letter_crashes.rs).
    lsn: u64,
}

/// A message on its way to a dead-letter queue: plain data, so it can
/// cross to the core that owns the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub account: String,
    /// The queue it leaves, and the one it goes to (same account).
    pub from: String,
    pub to: String,
    pub id: Uuid,
    pub inserted_ms: u64,
    pub expires_ms: u64,
    pub dequeue_count: u64,
    pub text: String,
    /// Where the original is, and the receipt it was set aside under.
    pub qid: u64,
    pub seq: u64,
    pub receipt: u64,
}

impl<D: Disk> Shard<D> {
    /// Step 1, inside Get Messages: hides the messages `seqs` of `q` for the
    /// lease under fresh receipts (their dequeue counts unchanged) and queues
    /// their moves. Returns the LSN of the record.
    pub(super) fn set_aside(&self, q: &mut Queue, wal: &Wal<D>, now: u64, seqs: &[u64]) -> Result<u64, QueueError> {
        let hidden_until = now.saturating_add(self.cfg.dead_letter_lease_ms).min(EXPIRY_NEVER_MS);
        let entries: Vec<Dequeued> = seqs
            .iter()
            .map(|&seq| Dequeued {
                seq,
                dequeue_count: q.get(seq).expect("visible message exists").dequeue_count,
                receipt: self.nonce(),
            })
            .collect();
        let pos = wal.append(&Record::MessagesDequeued {
            qid: q.qid,
            visible_ms: hidden_until,
            entries: entries.clone(),
        })?;
        q.last_lsn = pos.lsn;
        let mut dead = self.dead.borrow_mut();
        for e in entries {
            q.set_visibility(e.seq, hidden_until, e.receipt, None);
            dead.push_back(Pending {
                qid: q.qid,
                seq: e.seq,
                receipt: e.receipt,
                lsn: pos.lsn,
            });
        }
        drop(dead);
        self.dead_ready.notify(usize::MAX);
        Ok(pos.lsn)
    }

    /// Step 2's input: the next message set aside on this shard, with its
    /// text, waiting for one if there is none. Moves whose message has gone
    /// or changed receipt since are skipped. `None` once the shard stops.
    pub async fn next_dead_letter(&self) -> Option<DeadLetter> {
        loop {
            if let Some(dl) = self.try_next_dead_letter().await {
                return Some(dl);
            }
            if self.waiters.closed() {
                return None;
            }
            let listener = self.dead_ready.listen();
            if self.dead.borrow().is_empty() && !self.waiters.closed() {
                listener.await;
            }
        }
    }

    /// [`Shard::next_dead_letter`] without the wait: `None` at once when no
    /// move is pending (or the shard stops). For a caller that must not
    /// park on the shard's event, such as the deterministic simulator,
    /// whose scheduler takes a task that waits with nothing to wake it for
    /// a deadlock.
    pub async fn try_next_dead_letter(&self) -> Option<DeadLetter> {
        loop {
            if self.waiters.closed() {
                return None;
            }
            let p = self.dead.borrow_mut().pop_front()?;
            // Once the log is poisoned the set-aside may never be durable:
            // the move is dropped, and the message stays where it is.
            if self.wal.wait_durable(p.lsn).await.is_err() {
                continue;
            }
            let Some((dl, src)) = self.capture_dead_letter(&p) else {
                continue;
            };
            match self.load(src).await {
                Ok(text) => return Some(DeadLetter { text, ..dl }),
                // The message stays hidden until its lease runs out; then a
                // Get sets it aside again and the read is retried.
                Err(e) => {
                    tracing::warn!(queue = %dl.from, id = %dl.id, error = %e, "dead-letter move: reading the message failed")
                }
            }
        }
    }

    /// The move `p` describes, if its message is still there under the
    /// receipt it was set aside with, and where its text is.
    fn capture_dead_letter(&self, p: &Pending) -> Option<(DeadLetter, BodySource<D::File>)> {
        let st = self.st.borrow();
        let q = st.queues.get(&p.qid)?;
        let m = q.get(p.seq).filter(|m| m.receipt == p.receipt)?;
        let to = q.attrs.redrive.as_ref()?.dead_letter_queue.clone();
        let dl = DeadLetter {
            account: q.account.clone(),
            from: q.name.clone(),
            to,
            id: m.id,
            inserted_ms: m.inserted_ms,
            expires_ms: m.expires_ms,
            dequeue_count: m.dequeue_count,
            text: String::new(),
            qid: p.qid,
            seq: p.seq,
            receipt: p.receipt,
        };
        Some((dl, self.body_source(p.seq, q)))
    }

    /// Step 2, on the dead-letter queue's shard: puts the copy, visible now,
    /// durably. If the queue already holds a message with that id (an
    /// earlier try of this move), that copy is left as it is, unless it is
    /// one this queue would itself set aside: then the move is refused for
    /// now, so the original stays. If the message has expired
    /// meanwhile, nothing is put (it would be gone anyway).
    pub async fn put_dead_letter(&self, dl: &DeadLetter) -> Result<(), QueueError> {
        let body: Rc<[u8]> = Rc::from(dl.text.as_bytes());
        self.mutate(|st, wal, now| {
            let qid = st.lookup(&dl.account, &dl.to).ok_or(QueueError::QueueNotFound)?;
            let q = &st.queues[&qid];
            if let Some(held) = q.find(&dl.id) {
                // The copy held here may itself be on its way out (dead-letter
                // queues that chain back, or a cycle made by racing metadata
                // changes): if this queue would set it aside, the source must
                // not delete its original on the strength of it.
                if q.attrs
                    .redrive
                    .as_ref()
                    .is_some_and(|r| held.dequeue_count >= r.max_dequeue_count)
                {
                    return Err(QueueError::ServerBusy {
                        reason: format!(
                            "message {} is itself leaving queue {}; the move is retried later",
                            dl.id, dl.to
                        ),
                    });
                }
                // An earlier try of this move left this copy, and consumers
                // of this queue may have received or updated it since: it
                // is left exactly as it is (overwriting it could undo an
                // acknowledged Update, or change a text a consumer holds).
                return Ok(((), q.last_lsn));
            }
            if dl.expires_ms <= now {
                return Ok(((), q.last_lsn));
            }
            let state = MessageState {
                qid,
                seq: st.id()?,
                id: *dl.id.as_bytes(),
                inserted_ms: dl.inserted_ms,
                expires_ms: dl.expires_ms,
                visible_ms: now,
                dequeue_count: dl.dequeue_count,
                receipt: self.nonce(),
                body,
            };
            let (_, lsn) = self.insert(st, wal, now, state)?;
            Ok(((), lsn))
        })
        .await
    }

    /// Step 3, on the source's shard, after the copy is durable: deletes
    /// the original if it still holds the receipt it was set aside with.
    pub async fn finish_dead_letter(&self, dl: &DeadLetter) -> Result<(), QueueError> {
        self.mutate(|st, wal, _| {
            let Some(q) = st.queues.get_mut(&dl.qid) else {
                return Ok(((), wal.last_lsn()));
            };
            if q.get(dl.seq).is_none_or(|m| m.receipt != dl.receipt) {
                return Ok(((), q.last_lsn));
            }
            let pos = wal.append(&Record::MessageDeleted {
                qid: dl.qid,
                seq: dl.seq,
            })?;
            q.last_lsn = pos.lsn;
            let m = q.remove(dl.seq).expect("message exists");
            self.unpin_message(&m);
            Ok(((), pos.lsn))
        })
        .await
    }
}
