//! A byte-bounded LRU of message bodies, keyed by where the body sits in the
//! WAL. Bodies live on disk; this keeps the recent ones hot so most Get and
//! Peek calls never read. Owned by one shard (one core).

use lru::LruCache;
use std::rc::Rc;

/// Where a body lives: segment and byte offset of the text.
pub type BodyKey = (u64, u64);

pub struct BodyCache {
    lru: LruCache<BodyKey, Rc<[u8]>>,
    bytes: usize,
    capacity: usize,
    pub hits: u64,
    pub misses: u64,
}

impl BodyCache {
    pub fn new(capacity: usize) -> Self {
        BodyCache {
            lru: LruCache::unbounded(),
            bytes: 0,
            capacity,
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

    pub fn insert(&mut self, key: BodyKey, body: Rc<[u8]>) {
        if body.len() > self.capacity {
            return;
        }
        self.bytes += body.len();
        if let Some(old) = self.lru.put(key, body) {
            self.bytes -= old.len();
        }
        while self.bytes > self.capacity {
            let (_, evicted) = self.lru.pop_lru().expect("bytes > 0 implies entries");
            self.bytes -= evicted.len();
        }
    }

    pub fn remove(&mut self, key: BodyKey) {
        if let Some(old) = self.lru.pop(&key) {
            self.bytes -= old.len();
        }
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
        let mut c = BodyCache::new(10);
        c.insert((1, 0), Rc::from(&b"aaaa"[..]));
        c.insert((1, 4), Rc::from(&b"bbbb"[..]));
        assert!(c.get((1, 0)).is_some()); // (1,4) is now least recent
        c.insert((1, 8), Rc::from(&b"cccc"[..]));
        assert_eq!(c.bytes(), 8);
        assert!(c.get((1, 4)).is_none());
        assert!(c.get((1, 0)).is_some());
        c.insert((2, 0), Rc::from(&[0u8; 11][..])); // larger than the cache: not kept
        assert_eq!(c.bytes(), 8);
        c.remove((1, 0));
        assert_eq!(c.bytes(), 4);
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
