//! Time as the engine sees it: milliseconds since the Unix epoch, from an
//! injected clock so visibility and TTL tests never sleep.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time. Owned by one shard (one core); not `Send`.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to. Used by tests and benchmarks.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Cell<u64>,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        Self {
            now: Cell::new(start_ms),
        }
    }
    pub fn advance_ms(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
    }
    pub fn set_ms(&self, ms: u64) {
        self.now.set(ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.get()
    }
}

impl<C: Clock + ?Sized> Clock for std::rc::Rc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}
