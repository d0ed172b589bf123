//! Time as the engine sees it: milliseconds since the Unix epoch, from an
//! injected clock so visibility and TTL tests never sleep.

use futures::future::LocalBoxFuture;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time, and timers on it. Owned by one shard (one
/// core); not `Send`.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// Resolves once the clock reads `ms` or later (long polling's timers).
    fn sleep_until(&self, ms: u64) -> LocalBoxFuture<'static, ()>;
}

/// The real wall clock. Its timers are glommio's, so they work on a
/// glommio executor only (the server's); tests use [`ManualClock`].
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn sleep_until(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        let wait = Duration::from_millis(ms.saturating_sub(self.now_ms()));
        Box::pin(glommio::timer::sleep(wait))
    }
}

/// A clock that moves only when told to. Used by tests and benchmarks; its
/// timers fire when it is moved past them.
#[derive(Debug, Default)]
pub struct ManualClock {
    inner: Rc<Manual>,
}

#[derive(Debug, Default)]
struct Manual {
    now: Cell<u64>,
    timers: RefCell<Vec<(u64, Waker)>>,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        let clock = Self::default();
        clock.inner.now.set(start_ms);
        clock
    }
    pub fn advance_ms(&self, ms: u64) {
        self.set_ms(self.inner.now.get() + ms);
    }
    pub fn set_ms(&self, ms: u64) {
        self.inner.now.set(ms);
        let due: Vec<Waker> = {
            let mut timers = self.inner.timers.borrow_mut();
            let (due, later) = timers.drain(..).partition(|(at, _)| *at <= ms);
            *timers = later;
            due.into_iter().map(|(_, w)| w).collect()
        };
        due.into_iter().for_each(Waker::wake);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.inner.now.get()
    }

    fn sleep_until(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        Box::pin(ManualSleep {
            clock: self.inner.clone(),
            at: ms,
        })
    }
}

struct ManualSleep {
    clock: Rc<Manual>,
    at: u64,
}

impl Future for ManualSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now.get() >= self.at {
            return Poll::Ready(());
        }
        self.clock.timers.borrow_mut().push((self.at, cx.waker().clone()));
        Poll::Pending
    }
}

impl<C: Clock + ?Sized> Clock for std::rc::Rc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
    fn sleep_until(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        (**self).sleep_until(ms)
    }
}
