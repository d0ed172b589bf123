//! One queue's in-memory state: the message table, the visibility index
//! ordered by (visible-at, sequence), and the expiry index. Bodies are not
//! here; messages point at them in the WAL. Owned by the shard that owns the
//! queue, so no locks.

use crate::attributes::QueueAttributes;
use crate::limits::MAX_RESPONSE_TEXT_BYTES;
use crate::model::{Metadata, SignedIdentifier};
use crate::run_map::RunMap;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Where a message's text is in the WAL, and the size of the frame holding it
/// (what the message pins in that segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLoc {
    pub seg: u64,
    pub offset: u64,
    pub len: u32,
    pub frame_len: u32,
}

/// Message ids carry the message's sequence number, so finding a message by
/// id is a lookup in the message table and needs no index of its own (an
/// index keyed by random ids was the costliest insert of a put). The id is
/// still a version-4 UUID: 60 random bits in its first half; the second
/// half holds the variant bits and the sequence number masked with a mix of
/// the first half, so ids look random and decoding needs nothing but the
/// id. A message whose id does not decode to its own sequence number (one
/// moved in by a dead-letter move, or written by an earlier version) is
/// found through [`Queue`]'s `foreign_ids` instead.
pub fn message_id(seq: u64, random: u64) -> Uuid {
    if seq > SEQ_IN_ID_MASK {
        // Never in practice (2^62 messages); such a message is foreign.
        return Uuid::from_u64_pair((random & !0xF000) | 0x4000, (1 << 63) | (random & SEQ_IN_ID_MASK));
    }
    let high = (random & !0xF000) | 0x4000;
    Uuid::from_u64_pair(high, (1 << 63) | ((seq ^ mix(high)) & SEQ_IN_ID_MASK))
}

/// The sequence number an id made by [`message_id`] carries. Any other id
/// decodes to some number too, or to none: callers compare the whole id.
pub fn seq_in_id(id: &Uuid) -> Option<u64> {
    let (high, low) = id.as_u64_pair();
    let v4 = (high >> 12) & 0xF == 4 && low >> 62 == 0b10;
    v4.then(|| (low ^ mix(high)) & SEQ_IN_ID_MASK)
}

const SEQ_IN_ID_MASK: u64 = (1 << 62) - 1;
// Every sequence number a shard hands out fits in an id (crate::limits::ID_SPACE).
const _: () = assert!(SEQ_IN_ID_MASK == crate::limits::ID_SPACE - 1);

/// SplitMix64's finalizer: spreads the random half over the sequence half.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub id: Uuid,
    /// Shard-local insertion sequence; breaks visibility ties in insertion order.
    pub seq: u64,
    pub inserted_ms: u64,
    pub expires_ms: u64,
    pub visible_ms: u64,
    pub dequeue_count: u64,
    /// Nonce of the only pop receipt currently valid.
    pub receipt: u64,
    pub body: BodyLoc,
}

/// Messages ordered by when they become visible, ties by insertion order
/// (the order Azurite serves, which clients observe). An ordered map keeps
/// insert, remove and "first visible" at O(log n), so a queue of a million
/// messages dequeues as fast as a queue of ten.
#[derive(Debug, Default, Clone)]
pub struct VisibilityIndex {
    set: RunMap<(u64, u64), ()>,
}

impl VisibilityIndex {
    pub fn insert(&mut self, visible_ms: u64, seq: u64) {
        let held = self.set.insert((visible_ms, seq), ());
        debug_assert!(held.is_none(), "message {seq} indexed twice");
    }

    pub fn remove(&mut self, visible_ms: u64, seq: u64) {
        let found = self.set.remove(&(visible_ms, seq));
        debug_assert!(found.is_some(), "message {seq} missing from the visibility index");
    }

    /// Sequence numbers visible at `now`, earliest first.
    pub fn visible(&self, now_ms: u64) -> impl Iterator<Item = u64> + '_ {
        self.set.range_to((now_ms, u64::MAX)).map(|(&(_, seq), ())| seq)
    }

    /// The earliest visible-at time after `now_ms`.
    pub fn first_after(&self, now_ms: u64) -> Option<u64> {
        self.set
            .range_from((now_ms.saturating_add(1), 0))
            .next()
            .map(|(&(t, _), ())| t)
    }

    /// The earliest entry, visible or not.
    pub fn first(&self) -> Option<(u64, u64)> {
        self.set.first().map(|(&k, ())| k)
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

/// Messages taken out of a queue by Clear Messages or Delete Queue whose
/// records are still pinned and whose bodies may still be cached; owned by
/// the shard until released (`Shard::release_cleared`).
#[derive(Default)]
pub struct Cleared {
    messages: RunMap<u64, Message>,
    visibility: RunMap<(u64, u64), ()>,
    expiry: RunMap<(u64, u64), ()>,
    foreign_ids: BTreeMap<Uuid, u64>,
}

impl Cleared {
    /// Takes up to `n` messages out, and frees as many index entries.
    pub fn pop_some(&mut self, n: usize) -> Vec<Message> {
        for _ in 0..n {
            let a = self.visibility.pop_first().is_some();
            let b = self.expiry.pop_first().is_some();
            let c = self.foreign_ids.pop_first().is_some();
            if !(a || b || c) {
                break;
            }
        }
        std::iter::from_fn(|| self.messages.pop_first().map(|(_, m)| m))
            .take(n)
            .collect()
    }

    /// The messages not yet released.
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        self.messages.values()
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.visibility.is_empty() && self.expiry.is_empty() && self.foreign_ids.is_empty()
    }
}

pub struct Queue {
    pub qid: u64,
    pub account: String,
    pub name: String,
    /// Set only through [`Queue::set_metadata`], which keeps `attrs` in step.
    pub metadata: Metadata,
    /// What the reserved `hematite_` keys of `metadata` ask for.
    pub attrs: QueueAttributes,
    pub acl: Vec<SignedIdentifier>,
    /// Segment and frame size of the latest QueueDefined record.
    pub def_seg: u64,
    pub def_frame_len: u32,
    /// LSN of the newest record that touched this queue; reads wait for it to
    /// be durable so they never show state a crash could take back.
    pub last_lsn: u64,
    // Ordered maps, not hash maps: a hash map doubles its table in one
    // step, and for a queue of a million messages that step (allocating,
    // faulting in and rehashing tens of MiB) held the core for 50-500 ms
    // (docs/benchmarks.md, "Where the stalls came from"). A `RunMap` grows
    // a run at a time; sequence numbers only increase, so inserts append.
    messages: RunMap<u64, Message>,
    /// Only the messages whose id does not carry their sequence number
    /// ([`message_id`]): usually none.
    foreign_ids: BTreeMap<Uuid, u64>,
    visibility: VisibilityIndex,
    expiry: RunMap<(u64, u64), ()>,
    /// No message of this queue has its body in a segment below this one.
    /// A lower bound: lowered as bodies are indexed, never raised by a
    /// removal, and raised by a compaction scan to the lowest body segment
    /// it saw ([`Queue::set_body_seg_floor`]), so that scans for an old
    /// segment skip the queues that cannot hold any of it. A floor above a
    /// body would never lose it (the record stays pinned), but compaction
    /// would stop freeing the log at that segment.
    body_seg_floor: u64,
}

impl Queue {
    pub fn new(qid: u64, account: String, name: String, metadata: Metadata) -> Self {
        let attrs = QueueAttributes::of_stored(&name, &metadata);
        Queue {
            qid,
            account,
            name,
            metadata,
            attrs,
            acl: Vec::new(),
            def_seg: 0,
            def_frame_len: 0,
            last_lsn: 0,
            messages: RunMap::default(),
            foreign_ids: BTreeMap::new(),
            visibility: VisibilityIndex::default(),
            body_seg_floor: u64::MAX,
            expiry: RunMap::default(),
        }
    }

    /// Replaces the metadata and the attributes its reserved keys give.
    pub fn set_metadata(&mut self, metadata: Metadata) {
        self.attrs = QueueAttributes::of_stored(&self.name, &metadata);
        self.metadata = metadata;
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// When the next invisible message becomes visible, if any is
    /// invisible at `now`: a long poll sleeps until then.
    pub fn next_visible_after(&self, now_ms: u64) -> Option<u64> {
        self.visibility.first_after(now_ms)
    }

    pub fn get(&self, seq: u64) -> Option<&Message> {
        self.messages.get(&seq)
    }

    pub fn find(&self, id: &Uuid) -> Option<&Message> {
        let own = seq_in_id(id)
            .and_then(|seq| self.messages.get(&seq))
            .filter(|m| m.id == *id);
        own.or_else(|| self.foreign_ids.get(id).and_then(|s| self.messages.get(s)))
    }

    /// Whether `m`'s id is not the one [`message_id`] made for its sequence number.
    fn is_foreign(m: &Message) -> bool {
        seq_in_id(&m.id) != Some(m.seq)
    }

    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        self.messages.values()
    }

    /// Whether no message's body is below the floor (linear; for checks).
    pub fn floor_holds(&self) -> bool {
        self.messages.values().all(|m| m.body.seg >= self.body_seg_floor)
    }

    /// The messages from sequence number `seq` on, in order.
    pub fn messages_from(&self, seq: u64) -> impl Iterator<Item = &Message> {
        self.messages.range_from(seq).map(|(_, m)| m)
    }

    /// The queue's floor: no message's body is in a segment below it.
    pub fn body_seg_floor(&self) -> u64 {
        self.body_seg_floor
    }

    /// Raises the floor to `min`, the lowest body segment a scan of every
    /// message found (`u64::MAX` for none). Bodies only ever move to the
    /// log's head, so a minimum seen over a scan with pauses is still a
    /// lower bound when it ends.
    pub fn set_body_seg_floor(&mut self, min: u64) {
        debug_assert!(
            min >= self.body_seg_floor,
            "floor {} lowered to {min}",
            self.body_seg_floor
        );
        self.body_seg_floor = self.body_seg_floor.max(min);
        // Linear: only for queues small enough not to undo the scan's
        // slices (as `State::check_invariants`); the simulator checks every
        // queue with `floor_holds`, in release builds too.
        debug_assert!(
            self.messages.len() > 10_000 || self.floor_holds(),
            "floor {min} above a message's body"
        );
    }

    /// Inserts or replaces a message; returns the replaced one.
    pub fn upsert(&mut self, m: Message) -> Option<Message> {
        let old = self.remove(m.seq);
        self.index(m);
        old
    }

    /// Inserts a message with a fresh sequence number (a put, a dead-letter
    /// move): no message can hold it, so the lookup and removal `upsert`
    /// starts with are skipped (a miss in the message table on every put).
    pub fn insert_new(&mut self, m: Message) {
        debug_assert!(!self.messages.contains_key(&m.seq), "sequence number {} reused", m.seq);
        self.index(m);
    }

    fn index(&mut self, m: Message) {
        if cfg!(debug_assertions) {
            assert!(self.find(&m.id).is_none(), "id index: id {} held twice", m.id);
        }
        self.visibility.insert(m.visible_ms, m.seq);
        let held = self.expiry.insert((m.expires_ms, m.seq), ());
        debug_assert!(held.is_none(), "message {} in the expiry index twice", m.seq);
        if Self::is_foreign(&m) {
            self.foreign_ids.insert(m.id, m.seq);
        }
        self.body_seg_floor = self.body_seg_floor.min(m.body.seg);
        let seq = m.seq;
        let replaced = self.messages.insert(seq, m);
        assert!(replaced.is_none(), "message {seq} indexed over another");
        self.check_sizes();
    }

    /// The cheap part of [`Queue::check_invariants`], run at every
    /// transition in debug and test builds: all indexes hold every message.
    fn check_sizes(&self) {
        if cfg!(debug_assertions) {
            assert_eq!(self.messages.len(), self.visibility.len(), "visibility index size");
            assert_eq!(self.messages.len(), self.expiry.len(), "expiry index size");
            assert!(self.foreign_ids.len() <= self.messages.len(), "id index size");
        }
    }

    pub fn remove(&mut self, seq: u64) -> Option<Message> {
        let m = self.messages.remove(&seq)?;
        self.visibility.remove(m.visible_ms, seq);
        self.expiry.remove(&(m.expires_ms, seq));
        if Self::is_foreign(&m) {
            self.foreign_ids.remove(&m.id);
        }
        self.check_sizes();
        Some(m)
    }

    /// Changes when a message becomes visible and its current receipt.
    pub fn set_visibility(&mut self, seq: u64, visible_ms: u64, receipt: u64, dequeue_count: Option<u64>) {
        let m = self.messages.get_mut(&seq).expect("message exists");
        self.visibility.remove(m.visible_ms, seq);
        m.visible_ms = visible_ms;
        m.receipt = receipt;
        if let Some(c) = dequeue_count {
            assert!(c >= m.dequeue_count, "dequeue count of message {seq} went backwards");
            m.dequeue_count = c;
        }
        self.visibility.insert(visible_ms, seq);
    }

    pub fn set_body(&mut self, seq: u64, body: BodyLoc) {
        self.body_seg_floor = self.body_seg_floor.min(body.seg);
        self.messages.get_mut(&seq).expect("message exists").body = body;
    }

    /// Removes every message that has expired by `now`, returning them.
    pub fn purge_expired(&mut self, now_ms: u64) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some((&(exp, seq), ())) = self.expiry.first() {
            if exp > now_ms {
                break;
            }
            out.push(self.remove(seq).expect("indexed message exists"));
        }
        out
    }

    /// Up to `n` visible messages at `now`, earliest first, whose texts
    /// total at most `MAX_RESPONSE_TEXT_BYTES` (the first one always
    /// counts, whatever its size). With Azure's message size the byte bound
    /// never binds (32 × 64 KiB is exactly it); with larger messages it keeps
    /// one Get or Peek answer as large as Azure's largest, and no larger
    /// (docs/EXTENSIONS.md, "Larger messages"). The order stays: the
    /// message that does not fit ends the list, none after it is taken.
    /// Call [`Queue::purge_expired`] first so none of them has expired.
    pub fn visible(&self, now_ms: u64, n: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(n.min(64));
        let mut text = 0usize;
        for seq in self.visibility.visible(now_ms) {
            if out.len() >= n {
                break;
            }
            let len = self.messages.get(&seq).map_or(0, |m| m.body.len as usize);
            text = text.saturating_add(len);
            if !out.is_empty() && text > MAX_RESPONSE_TEXT_BYTES {
                break;
            }
            out.push(seq);
        }
        out
    }

    /// Every message visible at `now`, earliest first, lazily.
    pub fn visible_seqs(&self, now_ms: u64) -> impl Iterator<Item = u64> + '_ {
        self.visibility.visible(now_ms)
    }

    pub fn clear(&mut self) -> Vec<Message> {
        self.visibility = VisibilityIndex::default();
        self.expiry.clear();
        self.foreign_ids.clear();
        std::mem::take(&mut self.messages).into_values().collect()
    }

    /// Empties the queue in O(1): its messages and indexes move, whole, into
    /// the returned [`Cleared`], to be released a slice at a time. Clear
    /// Messages on a queue of a million messages must not hold the core for
    /// as long as releasing each one takes.
    pub fn take_all(&mut self) -> Cleared {
        Cleared {
            messages: std::mem::take(&mut self.messages),
            visibility: std::mem::take(&mut self.visibility).set,
            expiry: std::mem::take(&mut self.expiry),
            foreign_ids: std::mem::take(&mut self.foreign_ids),
        }
    }

    /// Invariant check used by tests and after recovery.
    pub fn check_invariants(&self) {
        self.messages.check();
        self.visibility.set.check();
        self.expiry.check();
        assert_eq!(self.messages.len(), self.visibility.len(), "visibility index size");
        assert_eq!(self.messages.len(), self.expiry.len(), "expiry index size");
        let mut foreign = 0;
        for m in self.messages.values() {
            if Self::is_foreign(m) {
                foreign += 1;
                assert_eq!(self.foreign_ids.get(&m.id), Some(&m.seq), "foreign id indexed");
            }
            assert_eq!(self.find(&m.id).map(|f| f.seq), Some(m.seq), "found by id");
            assert!(self.expiry.contains_key(&(m.expires_ms, m.seq)));
        }
        assert_eq!(self.foreign_ids.len(), foreign, "id index size");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, visible: u64, expires: u64) -> Message {
        Message {
            id: Uuid::from_u64_pair(0, seq),
            seq,
            inserted_ms: 0,
            expires_ms: expires,
            visible_ms: visible,
            dequeue_count: 0,
            receipt: seq,
            body: BodyLoc {
                seg: 1,
                offset: 0,
                len: 0,
                frame_len: 0,
            },
        }
    }

    #[test]
    fn message_ids_carry_their_sequence_number() {
        for seq in [0, 1, 2, 1 << 40, SEQ_IN_ID_MASK - 1, SEQ_IN_ID_MASK] {
            for random in [0, 1, u64::MAX, 0x0123_4567_89ab_cdef] {
                let id = message_id(seq, random);
                assert_eq!(id.get_version_num(), 4);
                assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
                assert_eq!(seq_in_id(&id), Some(seq), "{id}");
            }
        }
        // Past the mask the id is random-only, and does not claim the number.
        assert_ne!(seq_in_id(&message_id(SEQ_IN_ID_MASK + 1, 7)), Some(SEQ_IN_ID_MASK + 1));
    }

    #[test]
    fn messages_are_found_by_own_and_foreign_ids() {
        let mut q = Queue::new(1, "a".into(), "q".into(), Metadata::default());
        let own = |seq: u64| Message {
            id: message_id(seq, seq.wrapping_mul(77)),
            ..msg(seq, 0, 100)
        };
        q.upsert(own(1));
        q.upsert(own(2));
        // Foreign: a plain id, and a v4 id that decodes to message 1's number
        // (a dead-letter copy whose id another shard made for its number 1).
        let plain = msg(3, 0, 100);
        let lookalike = Message {
            id: message_id(1, 12345),
            ..msg(4, 0, 100)
        };
        q.upsert(plain.clone());
        q.upsert(lookalike.clone());
        q.check_invariants();
        assert_eq!(q.foreign_ids.len(), 2);
        for m in [own(1), own(2), plain.clone(), lookalike.clone()] {
            assert_eq!(q.find(&m.id).map(|f| f.seq), Some(m.seq));
        }
        // A made-up id that decodes to a held number is not that message.
        assert!(q.find(&message_id(2, 999)).is_none());
        assert!(q.find(&Uuid::from_u64_pair(9, 9)).is_none());
        q.remove(4);
        q.remove(1);
        q.check_invariants();
        assert!(q.find(&lookalike.id).is_none());
        assert_eq!(q.foreign_ids.len(), 1);
        assert_eq!(q.find(&own(2).id).map(|f| f.seq), Some(2));
    }

    #[test]
    fn visible_order_is_visible_at_then_sequence() {
        let mut q = Queue::new(1, "a".into(), "q".into(), Metadata::default());
        q.upsert(msg(3, 10, 100));
        q.upsert(msg(1, 20, 100));
        q.upsert(msg(2, 10, 100));
        q.upsert(msg(4, 50, 100));
        assert_eq!(q.visible(20, 10), vec![2, 3, 1]);
        assert_eq!(q.visible(20, 2), vec![2, 3]);
        assert_eq!(q.visible(5, 10), Vec::<u64>::new());
        q.set_visibility(2, 30, 9, Some(1));
        assert_eq!(q.visible(30, 10), vec![3, 1, 2]);
        q.check_invariants();
    }

    #[test]
    fn expiry_purges_exactly_the_expired() {
        let mut q = Queue::new(1, "a".into(), "q".into(), Metadata::default());
        q.upsert(msg(1, 0, 50));
        q.upsert(msg(2, 0, 60));
        q.upsert(msg(3, 0, 70));
        let gone: Vec<u64> = q.purge_expired(60).iter().map(|m| m.seq).collect();
        assert_eq!(gone, vec![1, 2]);
        assert_eq!(q.len(), 1);
        q.check_invariants();
    }

    #[test]
    #[should_panic(expected = "id index")]
    fn a_transition_that_breaks_an_index_is_caught_where_it_happens() {
        // Two messages with one id: the id index loses one. The check must
        // fire at the transition, not at the next open.
        let mut q = Queue::new(1, "a".into(), "q".into(), Metadata::default());
        q.upsert(msg(1, 0, 100));
        let mut twin = msg(2, 0, 100);
        twin.id = Uuid::from_u64_pair(0, 1);
        q.upsert(twin);
    }
}
