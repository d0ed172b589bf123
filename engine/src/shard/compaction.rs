//! Background work on a shard: expiry, preparing the next segment, and
//! compaction (deleting dead segments from the front of the log and
//! rewriting the live records of old, mostly dead ones). See
//! docs/STORAGE_FORMAT.md, "Compaction".

use super::*;

impl<D: Disk> Shard<D> {
    /// Purges expired messages, prepares the next segment ahead of time, and
    /// reclaims disk: deletes dead segments and rewrites the live records of
    /// old, mostly dead ones. Call it periodically from a background task.
    pub async fn maintenance(&self) -> Result<MaintenanceReport, StorageError> {
        let mut report = MaintenanceReport::default();
        if self.compacting.replace(true) {
            return Ok(report);
        }
        // First, and whatever the rest of the pass meets: a full disk
        // (failing `prepare_ahead`) or a corrupt body (failing a rewrite)
        // must not keep discarded segments' space from being freed. A
        // failed step is logged here, so the pass's own report and error
        // still reach the caller; the file is left to the next startup.
        for _ in 0..DISCARD_STEPS_PER_PASS {
            match self.wal.shrink_discarded().await {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::error!(shard = self.cfg.shard_id, "freeing a discarded segment: {e}");
                    break;
                }
            }
        }
        let result = async {
            // Purging at a time the log has not recorded would let a
            // restart with an earlier clock bring the messages back.
            let reserved = self.reserve_for_read().await;
            let now = {
                let mut st = self.st.borrow_mut();
                let (now, _) = self.read_time(&mut st, reserved);
                for q in st.queues.values_mut() {
                    report.expired += self.purge(q, now);
                }
                now
            };
            // On a full disk the next file cannot be made, but the release
            // and the dead segments' removal (a rename to a spare needs no
            // space) are what makes room: they run first, and the error
            // is returned after them.
            let prepared = self.wal.prepare_ahead(now).await;
            // Only ever saves time: a failure is logged, not the pass's.
            if let Err(e) = self.wal.zero_ahead().await {
                tracing::error!(shard = self.cfg.shard_id, "zeroing the next segment: {e}");
            }
            self.release_cleared_slice();
            loop {
                if self.wal.remove_oldest_if_dead().await? {
                    report.segments_removed += 1;
                    continue;
                }
                let Some(seg) = self.rewrite_candidate() else { break };
                let (rewritten, scanned) = self.rewrite_segment(seg).await?;
                report.messages_scanned += scanned;
                report.records_rewritten += rewritten;
                // Records still pinned by cleared messages not yet released
                // cannot be moved; stop, and leave the segment to die.
                if rewritten == 0 {
                    report.futile_rewrites += 1;
                    self.futile_rewrite.set(Some(seg));
                    break;
                }
            }
            prepared.map(|()| report)
        }
        .await;
        self.compacting.set(false);
        self.check_live_accounting();
        result
    }

    /// Debug builds: the WAL's live-record counts, kept by hand with a
    /// pin/unpin at every state change, equal what current state actually
    /// references. One forgotten unpin silently stops compaction from
    /// freeing disk; one forgotten pin lets it delete a segment still
    /// needed. Linear in the messages, so it runs after each maintenance
    /// pass rather than after every mutation, and is skipped for
    /// shards holding more than `ACCOUNTING_CHECK_MAX_MESSAGES`.
    pub(super) fn check_live_accounting(&self) {
        const ACCOUNTING_CHECK_MAX_MESSAGES: usize = 200_000;
        if !cfg!(debug_assertions) || self.message_count() > ACCOUNTING_CHECK_MAX_MESSAGES {
            return;
        }
        let st = self.st.borrow();
        let mut want: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut add = |seg: u64, len: u32| {
            let e = want.entry(seg).or_default();
            e.0 += 1;
            e.1 += u64::from(len);
        };
        if let Some((seg, len)) = st.clock_pos {
            add(seg, len);
        }
        for q in st.queues.values() {
            add(q.def_seg, q.def_frame_len);
            for m in q.messages() {
                add(m.body.seg, m.body.frame_len);
            }
        }
        for m in st.cleared.iter().flat_map(Cleared::messages) {
            add(m.body.seg, m.body.frame_len);
        }
        for s in self.wal.segment_stats() {
            let (records, bytes) = want.remove(&s.seq).unwrap_or_default();
            assert_eq!(
                (s.live_records, s.live_bytes),
                (records, bytes),
                "segment {} live accounting drifted from state",
                s.seq
            );
        }
        assert!(
            want.is_empty(),
            "state references segments the WAL no longer has: {want:?}"
        );
    }

    /// Releases up to `RELEASE_SLICE` of the messages Clear Messages and
    /// Delete Queue took out of their queues: unpins their records and drops
    /// their cached bodies. One slice per maintenance pass, so clearing a
    /// queue of millions never holds the core in one step
    /// (docs/benchmarks.md, "Where the stalls came from"). A yield between
    /// slices would not do: glommio runs a task that yields again before it
    /// polls timers and sockets, until its 100 ms preemption timer fires.
    ///
    /// Oldest first, and `RELEASE_SLICE` messages across entries: the
    /// newest entry first, or one entry a pass, let a client clearing
    /// queues more often than the passes run keep an old deletion's
    /// records, and the oldest segment with them, pinned for good.
    pub(super) fn release_cleared_slice(&self) {
        let mut st = self.st.borrow_mut();
        let mut budget = RELEASE_SLICE;
        let mut count = 0u64;
        while budget > 0 {
            let Some(c) = st.cleared.front_mut() else { break };
            let released = c.pop_some(budget);
            budget = budget.saturating_sub(released.len().max(1));
            count = count.saturating_add(released.len() as u64);
            for m in released {
                self.unpin_message(&m);
            }
            if c.is_empty() {
                st.cleared.pop_front();
            }
        }
        self.released.set(self.released.get().saturating_add(count));
    }

    /// The oldest sealed segment, if rewriting its live records is worth it:
    /// it is mostly dead, or the log has grown well past the live data.
    ///
    /// Never the segment whose last rewrite moved nothing: every live
    /// record left in it belongs to a cleared message awaiting release
    /// (nothing else pins a record, and no record becomes live in an old
    /// segment again), so it can only die. Retrying it scanned every live
    /// message each pass to find nothing, for the seconds a deleted queue
    /// of 650k messages took to release, holding the core for milliseconds
    /// each time (docs/benchmarks.md, "The open loop after a deleted queue").
    fn rewrite_candidate(&self) -> Option<u64> {
        let stats = self.wal.segment_stats();
        let oldest = stats.first().filter(|s| s.sealed && s.live_records > 0)?;
        if self.futile_rewrite.get() == Some(oldest.seq) {
            return None;
        }
        let total: u64 = stats.iter().map(|s| s.bytes).sum();
        let live: u64 = stats.iter().map(|s| s.live_bytes).sum();
        let mostly_dead = oldest.live_bytes * 100 <= oldest.bytes * COMPACTION_LIVE_PERCENT;
        let bloated = total > COMPACTION_SPACE_FACTOR * live + self.cfg.segment_bytes;
        // Each rewrite moves at most half a segment (or happens only when the
        // log is bloated), so write amplification stays bounded.
        (mostly_dead || bloated).then_some(oldest.seq)
    }

    /// The live messages whose bodies are in `seg`, by queue and sequence
    /// number. Every message of the queues whose floor admits `seg` is
    /// looked at, so the scan lets the executor poll its I/O after each
    /// `rewrite_scan_slice` messages: in one go it held the core for 17 ms
    /// at 400k messages, and every commit with it. Between slices messages
    /// come and go, which the result survives: a new message is never in
    /// `seg` (sealed: nothing is written to it again), and one deleted or
    /// moved since is skipped by the rewrite's own check of each message.
    async fn messages_in(&self, seg: u64) -> (Vec<(u64, u64, BodyLoc)>, u64) {
        // Only the queues whose floor admits a body in `seg`: after a
        // deleted queue, whose segments are each tried once as they become
        // the oldest, the live queues written after it are skipped whole.
        let mut qids: Vec<u64> = {
            let st = self.st.borrow();
            st.queues
                .values()
                .filter(|q| q.body_seg_floor() <= seg)
                .map(|q| q.qid)
                .collect()
        };
        qids.sort_unstable();
        let mut found = Vec::new();
        let mut scanned = 0u64;
        // `validate` refuses 0, which would never move past a message.
        let slice = self.cfg.rewrite_scan_slice.max(1);
        let mut budget = slice;
        for qid in qids {
            let (mut from, mut lowest) = (0, u64::MAX);
            loop {
                // Where this queue's scan stopped with the slice spent.
                let stopped_at = {
                    let mut st = self.st.borrow_mut();
                    let Some(q) = st.queues.get_mut(&qid) else { break };
                    let mut stopped_at = None;
                    for m in q.messages_from(from) {
                        if budget == 0 {
                            stopped_at = Some(m.seq);
                            break;
                        }
                        budget = budget.saturating_sub(1);
                        scanned = scanned.saturating_add(1);
                        lowest = lowest.min(m.body.seg);
                        if m.body.seg == seg {
                            found.push((qid, m.seq, m.body));
                        }
                    }
                    if stopped_at.is_none() {
                        // The whole queue seen: `lowest` bounds every body
                        // it holds now, since bodies only move to the head.
                        q.set_body_seg_floor(lowest);
                    }
                    stopped_at
                };
                if budget == 0 {
                    budget = slice;
                    self.clock.pause_for_io().await;
                }
                match stopped_at {
                    Some(seq) => from = seq,
                    None => break,
                }
            }
        }
        (found, scanned)
    }

    /// Rewrites every live record of `seg` at the head of the log.
    /// Returns the records rewritten and the messages its scan looked at.
    async fn rewrite_segment(&self, seg: u64) -> Result<(u64, u64), StorageError> {
        self.wal.reserve(self.now()).await?;
        let mut rewritten = self.rewrite_clock(seg)?;
        // Queue definitions first: they are small and need no reads.
        // Sorted, so the log's layout does not depend on hash order and a
        // simulation seed replays exactly.
        let mut qids: Vec<u64> = self
            .st
            .borrow()
            .queues
            .values()
            .filter(|q| q.def_seg == seg)
            .map(|q| q.qid)
            .collect();
        qids.sort_unstable();
        for qid in qids {
            self.wal.reserve(self.now()).await?;
            let mut st = self.st.borrow_mut();
            let Some(q) = st.queues.get_mut(&qid).filter(|q| q.def_seg == seg) else {
                continue;
            };
            write_definition(&self.wal, q, true)?;
            rewritten += 1;
        }
        let (found, scanned) = self.messages_in(seg).await;
        // Bodies in the cache are rewritten without an await that suspends
        // (`reserve` is ready at once between rotations), so without a
        // pause a rewrite of 16k cached records ran as one stretch, and
        // answers waited up to 32 ms (docs/benchmarks.md, "The ceiling
        // dropped bodies", the rewrite in the open loop). The simulator's
        // small scan slice makes the slice small here too, so its seeds
        // interleave requests with the moves as well.
        let slice = REWRITE_RECORD_SLICE.min(self.cfg.rewrite_scan_slice).max(1);
        let mut budget = slice;
        for (qid, seq, loc) in found {
            if budget == 0 {
                budget = slice;
                self.clock.pause_for_io().await;
            }
            budget = budget.saturating_sub(1);
            let Some(src) = self.source_of(loc) else { continue };
            // Never rewrite what could not be verified: a corrupt body would
            // be laundered under a fresh checksum and the evidence deleted.
            // The error stops compaction; the segment stays for the operator.
            let (body, cached) = match src {
                BodySource::Cached(b) => (b.clone(), Some(b)),
                BodySource::Disk(r, loc) => (Rc::from(self.read_text(&r, loc).await?), None),
            };
            self.wal.reserve(self.now()).await?;
            let mut st = self.st.borrow_mut();
            // Skip it if it was deleted or changed while we read.
            let Some(q) = st.queues.get_mut(&qid) else { continue };
            let Some(m) = q.get(seq).filter(|m| m.body == loc).cloned() else {
                continue;
            };
            let state = state_of(qid, &m, body);
            let pos = self.wal.append(&Record::MessageRewritten(state.clone()))?;
            let fresh = message_from_state(&state, pos);
            self.wal.unpin(m.body.seg, m.body.frame_len);
            self.wal.pin(fresh.body.seg, fresh.body.frame_len);
            q.set_body(seq, fresh.body);
            q.last_lsn = pos.lsn;
            // The cache follows the body to its new place; the old key would
            // only hold memory until evicted.
            let mut cache = self.cache.borrow_mut();
            cache.remove((m.body.seg, m.body.offset));
            if let Some(b) = cached {
                cache.insert_appended((fresh.body.seg, fresh.body.offset), b);
            }
            rewritten += 1;
        }
        self.wal.wait_durable(self.wal.last_lsn()).await?;
        Ok((rewritten, scanned))
    }

    /// Rewrites the shard's CLOCK record at the head of the log if it sits in
    /// `seg`, so compaction never loses the floor.
    fn rewrite_clock(&self, seg: u64) -> Result<u64, StorageError> {
        let mut st = self.st.borrow_mut();
        match st.clock_pos {
            Some((s, _)) if s == seg => {
                let floor = st.clock_floor;
                self.write_clock(&mut st, floor)?;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::disk::sim::SimDisk;
    use futures::executor::block_on;

    /// The sliced scan finds what one pass over every message finds, for
    /// every segment and slice size, with slices ending inside a queue, at
    /// a queue's end, and across empty queues.
    #[test]
    fn the_sliced_scan_finds_what_one_pass_finds() {
        block_on(async {
            let clock = Rc::new(ManualClock::new(1_800_000_000_000));
            let mut cfg = ShardConfig::new(0);
            cfg.segment_bytes = MIN_SEGMENT_BYTES;
            let mut s = Shard::open(SimDisk::new(), cfg, clock).await.unwrap();
            let text = "t".repeat(3000);
            for (q, n) in [("qa1", 40), ("empty", 0), ("qb1", 7), ("qc1", 1), ("qd1", 90)] {
                s.create_queue("acct", q, Metadata::default()).await.unwrap();
                for _ in 0..n {
                    s.put_message("acct", q, text.clone(), None, None).await.unwrap();
                }
            }
            let segs: Vec<u64> = s.segment_stats().iter().map(|x| x.seq).collect();
            assert!(segs.len() > 3, "the test needs several segments");
            let one_pass = |s: &Shard<SimDisk>, seg: u64| {
                let st = s.st.borrow();
                let mut all: Vec<(u64, u64, BodyLoc)> = st
                    .queues
                    .values()
                    .flat_map(|q| {
                        q.messages()
                            .filter(|m| m.body.seg == seg)
                            .map(move |m| (q.qid, m.seq, m.body))
                    })
                    .collect();
                all.sort_unstable_by_key(|&(qid, seq, _)| (qid, seq));
                all
            };
            // Twice per slice size: the first scans set the queues' floors,
            // the second skips queues by them; then again with the oldest
            // messages deleted, so floors are stale until scanned.
            for round in 0..2 {
                if round == 1 {
                    for q in ["qa1", "qd1"] {
                        for m in s.get_messages("acct", q, Some(32), None).await.unwrap() {
                            s.delete_message("acct", q, &m.id.to_string(), &m.pop_receipt)
                                .await
                                .unwrap();
                        }
                    }
                }
                for slice in [1, 2, 3, 7, 40, 41, 1000] {
                    s.cfg.rewrite_scan_slice = slice;
                    for _ in 0..2 {
                        for &seg in &segs {
                            let want = one_pass(&s, seg);
                            assert_eq!(s.messages_in(seg).await.0, want, "segment {seg}, slice {slice}");
                        }
                    }
                }
            }
        });
    }
}
