//! A byte-bounded LRU of message bodies, keyed by where the body sits in the
//! WAL. Bodies live on disk; this keeps the recent ones hot so most Get and
//! Peek calls never read. Owned by one shard (one core).

use crate::limits::{LARGE_BODY_CACHE_FRACTION, MAX_MESSAGE_BYTES};
use lru::LruCache;
use std::collections::HashSet;
use std::rc::Rc;

/// Bytes each entry costs besides its body: the key, the `Rc` header, the
/// LRU node and its hash slot. Counted so that tiny or empty bodies cannot
/// grow the cache without bound.
pub const ENTRY_OVERHEAD: usize = 96;

/// The cache holds at most one entry per this many bytes of capacity. The
/// LRU's hash table is sized for that count when the cache is made, so it
/// never doubles under load: one doubling of a table of a few hundred
/// thousand entries held the core for tens of milliseconds. Bodies smaller
/// than this fill the entry count before the byte budget.
pub const BYTES_PER_ENTRY_SLOT: usize = 512;

/// Where a body lives: segment and byte offset of the text.
pub type BodyKey = (u64, u64);

pub struct BodyCache {
    lru: LruCache<BodyKey, Rc<[u8]>>,
    /// The entry bound (the LRU's own capacity is twice this).
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
            lru: LruCache::new(table),
            max_entries,
            bytes: 0,
            capacity,
            loading: HashSet::new(),
            hits: 0,
            misses: 0,
        }
    }

    pub fn get(&mut self, key: BodyKey) -> Option<Rc<[u8]>> {
        let hit = self.lru.get(&key).cloned();
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

    pub fn insert(&mut self, key: BodyKey, body: Rc<[u8]>) {
        if !self.admits(&body) {
            return;
        }
        self.bytes += Self::cost(&body);
        // `push` returns the entry it replaced (the LRU's own bound is never
        // reached: ours, below, is half of it).
        if let Some((_, old)) = self.lru.push(key, body) {
            self.bytes -= Self::cost(&old);
        }
        while self.bytes > self.capacity || self.lru.len() > self.max_entries {
            let (_, evicted) = self.lru.pop_lru().expect("bytes > 0 implies entries");
            self.bytes -= Self::cost(&evicted);
        }
    }

    pub fn remove(&mut self, key: BodyKey) {
        self.loading.remove(&key);
        if let Some(old) = self.lru.pop(&key) {
            self.bytes -= Self::cost(&old);
        }
    }

    /// A read of `key` from disk starts.
    pub fn begin_load(&mut self, key: BodyKey) {
        self.loading.insert(key);
    }

    /// The read of `key` finished: cache `body` unless the key was removed
    /// (its message deleted or moved) while the read was in flight.
    pub fn finish_load(&mut self, key: BodyKey, body: Rc<[u8]>) {
        if self.loading.remove(&key) {
            self.insert(key, body);
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
        self.lru.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lru.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_capacity_and_evicts_least_recent() {
        let mut c = BodyCache::new(10 + 2 * ENTRY_OVERHEAD);
        c.insert((1, 0), Rc::from(&b"aaaa"[..]));
        c.insert((1, 4), Rc::from(&b"bbbb"[..]));
        assert!(c.get((1, 0)).is_some()); // (1,4) is now least recent
        c.insert((1, 8), Rc::from(&b"cccc"[..]));
        assert_eq!(c.bytes(), 8 + 2 * ENTRY_OVERHEAD);
        assert!(c.get((1, 4)).is_none());
        assert!(c.get((1, 0)).is_some());
        c.insert((2, 0), Rc::from(&[0u8; 11 + 2 * ENTRY_OVERHEAD][..])); // larger than the cache: not kept
        assert_eq!(c.bytes(), 8 + 2 * ENTRY_OVERHEAD);
        c.remove((1, 0));
        assert_eq!(c.bytes(), 4 + ENTRY_OVERHEAD);
    }

    #[test]
    fn the_entry_bound_evicts_and_keeps_the_byte_count() {
        let mut c = BodyCache::new(64 * BYTES_PER_ENTRY_SLOT);
        for i in 0..200u64 {
            c.insert((1, i), Rc::from(&b"xy"[..]));
        }
        assert_eq!(c.len(), 64, "small bodies stop at the entry bound");
        assert_eq!(c.bytes(), 64 * (2 + ENTRY_OVERHEAD));
        assert!(c.get((1, 199)).is_some() && c.get((1, 0)).is_none());
    }

    #[test]
    fn a_large_body_takes_at_most_a_fraction_of_the_cache() {
        let capacity = 8 << 20;
        let mut c = BodyCache::new(capacity);
        let small: Rc<[u8]> = Rc::from(vec![1u8; MAX_MESSAGE_BYTES]);
        c.insert((1, 0), small);
        assert_eq!(c.len(), 1, "an Azure-sized body is cached as before");
        let fits = capacity / LARGE_BODY_CACHE_FRACTION - ENTRY_OVERHEAD;
        c.insert((1, 1), Rc::from(vec![2u8; fits]));
        assert_eq!(c.len(), 2, "a large body within the fraction is cached");
        c.insert((1, 2), Rc::from(vec![3u8; fits + 1]));
        assert_eq!(c.len(), 2, "a large body above the fraction is not");
        assert!(c.get((1, 2)).is_none() && c.get((1, 0)).is_some());
    }

    #[test]
    fn empty_bodies_cannot_grow_it_without_bound() {
        let mut c = BodyCache::new(64 * 1024);
        for i in 0..100_000 {
            c.insert((1, i), Rc::from(&b""[..]));
        }
        assert!(c.len() <= 64 * 1024 / 64, "{} empty bodies cached", c.len());
        assert!(c.bytes() <= 64 * 1024);
    }
}
