//! Replay: how each WAL record rebuilds a shard's state at startup.
//! Recovery (`wal::recovery`) reads and verifies the records; this applies
//! them, in log order, to the state the shard then serves from.

use super::*;

impl State {
    /// The queue a replayed message record belongs to, defined or not yet.
    fn replay_queue(&mut self, qid: u64) -> &mut Queue {
        match self.queues.get_mut(&qid) {
            Some(q) => q,
            None => self
                .orphans
                .entry(qid)
                .or_insert_with(|| Queue::new(qid, String::new(), String::new(), Metadata::default())),
        }
    }

    /// A queue's whole definition: creates the queue (adopting the records
    /// of its messages seen before it, which compaction may have rewritten
    /// earlier in the log) or replaces its metadata and policies.
    fn replay_queue_defined(
        &mut self,
        qid: u64,
        account: String,
        name: String,
        metadata: Metadata,
        acl: Vec<SignedIdentifier>,
        pos: RecordPos,
    ) {
        let orphans = &mut self.orphans;
        let q = self.queues.entry(qid).or_insert_with(|| {
            let mut q = orphans
                .remove(&qid)
                .unwrap_or_else(|| Queue::new(qid, String::new(), String::new(), Metadata::default()));
            q.account = account.clone();
            q.name = name.clone();
            q
        });
        q.set_metadata(metadata);
        q.acl = acl;
        q.def_seg = pos.seg;
        q.def_frame_len = pos.frame_len;
        self.names.insert(account, name, qid);
    }

    /// Applies one replayed record.
    pub(super) fn replay(&mut self, rec: Record, pos: RecordPos) {
        // Saturating: values come from disk (they passed their checksums,
        // but a bug must not turn into an overflow here).
        let bump = |next: &mut u64, v: u64| *next = (*next).max(v.saturating_add(1));
        match rec {
            Record::QueueDefined {
                qid,
                account,
                name,
                metadata,
                acl,
            } => {
                bump(&mut self.next_id, qid);
                self.replay_queue_defined(qid, account, name, metadata, acl, pos);
            }
            Record::QueueDeleted { qid } => {
                self.orphans.remove(&qid);
                if let Some(q) = self.queues.remove(&qid) {
                    self.names.remove(&q.account, &q.name);
                }
            }
            Record::MessagePut(m) | Record::MessageRewritten(m) | Record::MessageReplaced(m) => {
                // Receipts are random nonces, not ids: they do not move next_id.
                for v in [m.qid, m.seq] {
                    bump(&mut self.next_id, v);
                }
                self.replay_queue(m.qid).upsert(message_from_state(&m, pos));
            }
            Record::MessagesDequeued {
                qid,
                visible_ms,
                entries,
            } => {
                let q = self.replay_queue(qid);
                for e in entries {
                    if q.get(e.seq).is_some() {
                        q.set_visibility(e.seq, visible_ms, e.receipt, Some(e.dequeue_count));
                    }
                }
            }
            Record::MessageVisibility {
                qid,
                seq,
                visible_ms,
                receipt,
            } => {
                let q = self.replay_queue(qid);
                if q.get(seq).is_some() {
                    q.set_visibility(seq, visible_ms, receipt, None);
                }
            }
            Record::MessageDeleted { qid, seq } => {
                self.replay_queue(qid).remove(seq);
            }
            Record::QueueCleared { qid } => {
                self.replay_queue(qid).clear();
            }
            Record::Clock { floor_ms } => {
                if floor_ms >= self.clock_floor {
                    self.clock_floor = floor_ms;
                    self.clock_pos = Some((pos.seg, pos.frame_len));
                }
            }
            Record::Commit { .. } | Record::SegmentEnd { .. } => {
                unreachable!("recovery passes only state records")
            }
        }
    }
}
