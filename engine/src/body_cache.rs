//! A byte-bounded cache of message bodies, keyed by where the body sits in
//! the WAL. Bodies live on disk; this keeps the recent ones hot so most Get
//! and Peek calls never read. Owned by one shard (one core).
//!
//! Two parts share one byte budget:
//! - **Appended bodies**, in WAL order: every body this run writes (a put,
//!   an update's new text, a compaction rewrite) lands at the log's tail,
//!   so its key is larger than every key before it. They sit in a deque
//!   that a put pushes at the back and eviction pops at the front: no hash,
//!   no node per body, and what is evicted is the oldest write. A lookup is
//!   a binary search. This is the path of every put, which under a put-heavy
//!   load was a hash insert, a node allocation and a cold LRU eviction each
//!   (about 530 ns per put at 40k puts/s; docs/benchmarks.md, "Appended
//!   bodies in WAL order").
//!   The deque's slots, the empty ones of removed bodies included, are
//!   bounded (`max_entries`), so an appended body leaves the cache at the
//!   latest that many appends later, even with bytes to spare: a message
//!   kept while many others come and go is read from disk when it is
//!   finally fetched (and then kept in the LRU).
//! - **Loaded bodies**, read back from disk by a Get or Peek, in an LRU.
//!
//! When the budget is exceeded, loaded bodies go first while they hold more
//! than half of it (or nothing appended is left), appended ones otherwise:
//! neither part can starve the other.

use crate::limits::{LARGE_BODY_CACHE_FRACTION, MAX_MESSAGE_BYTES};
use lru::LruCache;
use std::collections::{HashSet, VecDeque};
use std::rc::Rc;

/// Bytes each entry costs besides its body: the key, the `Rc` header, and
/// the LRU node and its hash slot (a loaded body) or its deque slot (an
/// appended one, less). Counted so that tiny or empty bodies cannot grow
/// the cache without bound.
pub const ENTRY_OVERHEAD: usize = 96;

/// The cache holds at most one entry per this many bytes of capacity, in
/// each part. The LRU's hash table and the appended deque are sized for
/// that count when the cache is made, so neither grows under load: one
/// doubling of a table of a few hundred thousand entries held the core for
/// tens of milliseconds. Bodies smaller than this fill the entry count
/// before the byte budget.
pub const BYTES_PER_ENTRY_SLOT: usize = 512;

/// Where a body lives: segment and byte offset of the text.
pub type BodyKey = (u64, u64);

pub struct BodyCache {
    /// Appended bodies, keys strictly increasing from front to back. A body
    /// removed (its message deleted or moved) leaves an empty slot, popped
    /// once it reaches the front; the slots, empty ones included, are
    /// bounded by `max_entries`.
    appended: VecDeque<(BodyKey, Option<Rc<[u8]>>)>,
    /// Bodies in `appended` (its slots that are not empty).
    appended_bodies: usize,
    /// Loaded bodies.
    lru: LruCache<BodyKey, Rc<[u8]>>,
    /// Bytes of `lru`'s entries (`bytes` counts both parts).
    lru_bytes: usize,
    /// The entry bound of each part (the LRU's own capacity is twice this).
    max_entries: usize,
    bytes: usize,
    capacity: usize,
    /// Keys being read from disk; `remove` cancels their insert.
    loading: HashSet<BodyKey>,
    pub hits: u64,
    pub misses: u64,
}

impl BodyCache {
    pub fn new(capacity: usize) -> Self {
        // At least a few slots, so a tiny cache is bounded by bytes.
        let max_entries = (capacity / BYTES_PER_ENTRY_SLOT).max(64);
        // The table gets room for twice the entries it will hold: removals
        // leave tombstones, and a table more than half full when they use
        // up its free slots grows (doubles) instead of rehashing in place.
        let table = std::num::NonZeroUsize::new(max_entries.saturating_mul(2)).unwrap_or(std::num::NonZeroUsize::MIN);
        BodyCache {
            appended: VecDeque::with_capacity(max_entries),
            appended_bodies: 0,
            lru: LruCache::new(table),
            lru_bytes: 0,
            max_entries,
            bytes: 0,
            capacity,
            loading: HashSet::new(),
            hits: 0,
            misses: 0,
        }
    }

    /// The slot of `key` in `appended`, if it has one.
    fn slot(&self, key: BodyKey) -> Option<usize> {
        let (front, back) = (self.appended.front()?.0, self.appended.back()?.0);
        if key < front || key > back {
            return None;
        }
        self.appended.binary_search_by(|(k, _)| k.cmp(&key)).ok()
    }

    pub fn get(&mut self, key: BodyKey) -> Option<Rc<[u8]>> {
        let hit = match self.slot(key) {
            Some(at) => self.appended.get(at).and_then(|(_, b)| b.clone()),
            None => self.lru.get(&key).cloned(),
        };
        if hit.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        hit
    }

    fn cost(body: &[u8]) -> usize {
        body.len() + ENTRY_OVERHEAD
    }

    /// Whether a body may enter the cache: it fits, and a body larger than
    /// Azure's message size (only with `--max-message-kib` above 64) costs
    /// at most 1/`LARGE_BODY_CACHE_FRACTION` of it, so a Get of a few large
    /// messages cannot flush everything else.
    fn admits(&self, body: &[u8]) -> bool {
        let cost = Self::cost(body);
        cost <= self.capacity && (body.len() <= MAX_MESSAGE_BYTES || cost <= self.capacity / LARGE_BODY_CACHE_FRACTION)
    }

    /// Caches a body just appended to the WAL at `key`, which is past every
    /// key appended before it (the log only grows at its tail).
    pub fn insert_appended(&mut self, key: BodyKey, body: Rc<[u8]>) {
        if let Some((last, _)) = self.appended.back() {
            assert!(*last < key, "appended keys increase: {last:?} then {key:?}");
        }
        if !self.admits(&body) {
            return;
        }
        if self.appended.len() >= self.max_entries {
            self.pop_appended();
        }
        self.bytes += Self::cost(&body);
        self.appended.push_back((key, Some(body)));
        self.appended_bodies += 1;
        self.evict();
    }

    /// Caches a body loaded from disk.
    fn insert_loaded(&mut self, key: BodyKey, body: Rc<[u8]>) {
        if !self.admits(&body) || self.slot(key).is_some() {
            return;
        }
        let cost = Self::cost(&body);
        self.bytes += cost;
        self.lru_bytes += cost;
        // `push` returns the entry it replaced (the LRU's own bound is never
        // reached: ours, below, is half of it).
        if let Some((_, old)) = self.lru.push(key, body) {
            self.forget_loaded(&old);
        }
        if self.lru.len() > self.max_entries {
            self.pop_loaded();
        }
        self.evict();
    }

    /// Evicts until the budget holds: loaded bodies first while they hold
    /// more than half of it or nothing appended is left.
    fn evict(&mut self) {
        while self.bytes > self.capacity {
            let loaded_first = self.lru_bytes > self.capacity / 2 || self.appended_bodies == 0;
            if loaded_first {
                self.pop_loaded();
            } else {
                self.pop_appended();
            }
        }
    }

    /// Drops the least recently used loaded body.
    fn pop_loaded(&mut self) {
        let (_, evicted) = self.lru.pop_lru().expect("called only while loaded bodies are cached");
        self.forget_loaded(&evicted);
    }

    /// Drops the oldest appended slot, and the empty slots behind it.
    fn pop_appended(&mut self) {
        if let Some((_, Some(evicted))) = self.appended.pop_front() {
            self.forget_appended(&evicted);
        }
        self.pop_empty_front();
        if let Some((_, Some(next))) = self.appended.front() {
            prefetch_header(next);
        }
        // The slot `SLOT_LOOKAHEAD` places behind the front (that many
        // evictions from now when no slot is empty): the deque's front was
        // written as long ago as the bodies it holds, so reading the next
        // slot (above, and in `pop_empty_front`) missed the cache the way the
        // body's counts did. Under a put load one eviction per put moves the
        // front one 32-byte slot, two to a cache line.
        if let Some(ahead) = self.appended.get(SLOT_LOOKAHEAD) {
            prefetch(std::ptr::from_ref(ahead).cast());
        }
    }

    fn pop_empty_front(&mut self) {
        while self.appended.front().is_some_and(|(_, b)| b.is_none()) {
            self.appended.pop_front();
        }
    }

    pub fn remove(&mut self, key: BodyKey) {
        self.loading.remove(&key);
        if let Some(at) = self.slot(key) {
            if let Some(old) = self.appended.get_mut(at).and_then(|(_, b)| b.take()) {
                self.forget_appended(&old);
            }
            self.pop_empty_front();
        } else if let Some(old) = self.lru.pop(&key) {
            self.forget_loaded(&old);
        }
    }

    /// The counters' side of a loaded body leaving the LRU: the one place
    /// that lowers `lru_bytes`, so it cannot drift from `bytes`.
    fn forget_loaded(&mut self, body: &[u8]) {
        let cost = Self::cost(body);
        self.bytes -= cost;
        self.lru_bytes -= cost;
    }

    /// The counters' side of an appended body leaving its slot.
    fn forget_appended(&mut self, body: &[u8]) {
        self.bytes -= Self::cost(body);
        self.appended_bodies -= 1;
    }

    /// A read of `key` from disk starts.
    pub fn begin_load(&mut self, key: BodyKey) {
        self.loading.insert(key);
    }

    /// The read of `key` finished: cache `body` unless the key was removed
    /// (its message deleted or moved) while the read was in flight.
    pub fn finish_load(&mut self, key: BodyKey, body: Rc<[u8]>) {
        if self.loading.remove(&key) {
            self.insert_loaded(key, body);
        }
    }

    pub fn abort_load(&mut self, key: BodyKey) {
        self.loading.remove(&key);
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of cached bodies.
    pub fn len(&self) -> usize {
        self.appended_bodies + self.lru.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Starts loading the reference counts of `body`, the next appended body to
/// be evicted, so that its eviction (a put or so later) finds them in cache.
/// Written long ago, that body is cold, and with 4 KiB pages under a
/// hypervisor its page is too: the eviction's decrement of the count missed
/// the TLB and the cache, and `pop_appended` took 1.9% of a put load's
/// samples, half of that since (docs/benchmarks.md, "Zeros written from one
/// buffer, the next eviction prefetched").
#[inline]
fn prefetch_header(body: &Rc<[u8]>) {
    // The counts sit just before the bytes `as_ptr` points at, in the same
    // allocation. Only an address is computed; nothing is dereferenced.
    prefetch(
        Rc::as_ptr(body)
            .cast::<i8>()
            .wrapping_sub(2 * std::mem::size_of::<usize>()),
    );
}

/// How many slots behind the deque's front `pop_appended` prefetches: far
/// enough that the line is in cache when the front reaches it (a put's
/// other work runs between evictions), near enough that it is still there.
const SLOT_LOOKAHEAD: usize = 8;

/// Starts loading the cache line at `at` into the cache.
#[inline]
fn prefetch(at: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it is
    // part of the architecture's baseline). It is a hint besides: it reads
    // nothing the program can see and cannot fault, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(b: &[u8]) -> Rc<[u8]> {
        Rc::from(b)
    }

    #[test]
    fn appended_bodies_stay_within_capacity_and_the_oldest_write_goes_first() {
        let mut c = BodyCache::new(10 + 2 * ENTRY_OVERHEAD);
        c.insert_appended((1, 0), body(b"aaaa"));
        c.insert_appended((1, 4), body(b"bbbb"));
        assert!(c.get((1, 0)).is_some()); // a read does not keep it longer
        c.insert_appended((1, 8), body(b"cccc"));
        assert_eq!(c.bytes(), 8 + 2 * ENTRY_OVERHEAD);
        assert!(c.get((1, 0)).is_none());
        assert!(c.get((1, 4)).is_some() && c.get((1, 8)).is_some());
        c.insert_appended((2, 0), body(&[0u8; 11 + 2 * ENTRY_OVERHEAD])); // larger than the cache: not kept
        assert_eq!(c.bytes(), 8 + 2 * ENTRY_OVERHEAD);
        assert!(c.get((2, 0)).is_none());
        c.remove((1, 4));
        assert_eq!(c.bytes(), 4 + ENTRY_OVERHEAD);
        assert_eq!(c.len(), 1);
        assert!(c.get((1, 4)).is_none() && c.get((1, 8)).is_some());
    }

    #[test]
    #[should_panic(expected = "appended keys increase")]
    fn an_append_behind_the_last_one_is_a_broken_invariant() {
        let mut c = BodyCache::new(1 << 20);
        c.insert_appended((2, 0), body(b"x"));
        c.insert_appended((1, 9), body(b"y"));
    }

    #[test]
    fn removed_slots_do_not_pile_up() {
        let mut c = BodyCache::new(64 * BYTES_PER_ENTRY_SLOT);
        // A message that stays while 10,000 after it come and go: the slots
        // stay bounded, and the survivor is evicted to keep them so.
        c.insert_appended((1, 0), body(b"stays"));
        for i in 1..10_000u64 {
            c.insert_appended((1, i * 8), body(b"goes"));
            c.remove((1, i * 8));
        }
        assert!(c.appended.len() <= 64, "{} slots", c.appended.len());
        assert_eq!(c.len(), 0);
        assert_eq!(c.bytes(), 0);
        // Removed in order, nothing is left behind.
        for i in 10_000..20_000u64 {
            c.insert_appended((1, i * 8), body(b"goes"));
            c.remove((1, i * 8));
            assert!(c.appended.is_empty());
        }
    }

    #[test]
    fn the_entry_bound_evicts_and_keeps_the_byte_count() {
        let mut c = BodyCache::new(64 * BYTES_PER_ENTRY_SLOT);
        for i in 0..200u64 {
            c.insert_appended((1, i), body(b"xy"));
        }
        assert_eq!(c.len(), 64, "small bodies stop at the entry bound");
        assert_eq!(c.bytes(), 64 * (2 + ENTRY_OVERHEAD));
        assert!(c.get((1, 199)).is_some() && c.get((1, 0)).is_none());
        for i in 0..200u64 {
            c.begin_load((0, i));
            c.finish_load((0, i), body(b"xy"));
        }
        assert_eq!(c.lru.len(), 64, "loaded bodies too");
        assert_eq!(c.bytes(), 128 * (2 + ENTRY_OVERHEAD));
    }

    #[test]
    fn a_large_body_takes_at_most_a_fraction_of_the_cache() {
        let capacity = 8 << 20;
        let mut c = BodyCache::new(capacity);
        c.insert_appended((1, 0), Rc::from(vec![1u8; MAX_MESSAGE_BYTES]));
        assert_eq!(c.len(), 1, "an Azure-sized body is cached as before");
        let fits = capacity / LARGE_BODY_CACHE_FRACTION - ENTRY_OVERHEAD;
        c.insert_appended((1, 1), Rc::from(vec![2u8; fits]));
        assert_eq!(c.len(), 2, "a large body within the fraction is cached");
        c.insert_appended((1, 2), Rc::from(vec![3u8; fits + 1]));
        c.begin_load((0, 2));
        c.finish_load((0, 2), Rc::from(vec![3u8; fits + 1]));
        assert_eq!(c.len(), 2, "a large body above the fraction is not, appended or loaded");
        assert!(c.get((1, 2)).is_none() && c.get((1, 0)).is_some());
    }

    #[test]
    fn empty_bodies_cannot_grow_it_without_bound() {
        let mut c = BodyCache::new(64 * 1024);
        for i in 0..100_000 {
            c.insert_appended((1, i), body(b""));
            c.begin_load((0, i));
            c.finish_load((0, i), body(b""));
        }
        assert!(c.len() <= 2 * 64 * 1024 / 512, "{} empty bodies cached", c.len());
        assert!(c.bytes() <= 64 * 1024);
    }

    #[test]
    fn loaded_and_appended_bodies_share_the_budget_without_starving_each_other() {
        let each = 100 + ENTRY_OVERHEAD;
        let mut c = BodyCache::new(10 * each);
        for i in 0..10u64 {
            c.begin_load((0, i));
            c.finish_load((0, i), Rc::from(vec![0u8; 100]));
        }
        assert_eq!(c.bytes(), 10 * each);
        // Appends push loaded bodies out, least recently used first, until
        // each part holds half.
        assert!(c.get((0, 0)).is_some());
        for i in 0..10u64 {
            c.insert_appended((1, i), Rc::from(vec![1u8; 100]));
        }
        assert_eq!(c.lru.len(), 5);
        assert_eq!(c.appended_bodies, 5);
        assert!(c.get((0, 0)).is_some(), "the loaded body read last stayed");
        assert!(c.get((1, 9)).is_some() && c.get((1, 4)).is_none());
        // A load beyond its half pushes out a loaded body, not an append.
        c.begin_load((0, 20));
        c.finish_load((0, 20), Rc::from(vec![2u8; 100]));
        assert_eq!((c.lru.len(), c.appended_bodies), (5, 5));
        assert!(c.get((1, 5)).is_some() && c.get((0, 20)).is_some());
        assert_eq!(c.bytes(), 10 * each);
    }

    #[test]
    fn a_load_cancelled_by_a_remove_is_not_cached() {
        let mut c = BodyCache::new(1 << 20);
        c.begin_load((0, 1));
        c.remove((0, 1));
        c.finish_load((0, 1), body(b"dead"));
        assert!(c.get((0, 1)).is_none());
        assert!(c.is_empty());
    }
}
