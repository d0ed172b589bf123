//! Time as the engine sees it: milliseconds since the Unix epoch, from an
//! injected clock so visibility and TTL tests never sleep.

use futures::future::LocalBoxFuture;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time, and timers on it. Owned by one shard (one
/// core); not `Send`.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// Milliseconds on a clock that never goes back (wall-clock steps do
    /// not move it): what bounds a long poll's wait.
    fn monotonic_ms(&self) -> u64;
    /// Resolves once `ms` milliseconds have passed on the monotonic clock
    /// (long polling's timers).
    fn sleep_ms(&self, ms: u64) -> LocalBoxFuture<'static, ()>;
    /// Lets the executor poll its I/O and timers before the caller goes
    /// on: for long background work done in slices. A plain yield does not
    /// do that on glommio, which runs a task that yields again before it
    /// polls anything, until its 100 ms preemption timer fires.
    fn pause_for_io(&self) -> LocalBoxFuture<'static, ()>;
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

    fn monotonic_ms(&self) -> u64 {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    fn sleep_ms(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        Box::pin(glommio::timer::sleep(Duration::from_millis(ms)))
    }

    fn pause_for_io(&self) -> LocalBoxFuture<'static, ()> {
        // A timer, not a yield: the task is not runnable until the reactor
        // has polled, so everything runnable and every completion goes
        // first. Short, because a pause costs the caller this much each time.
        Box::pin(async {
            glommio::timer::sleep(PAUSE_FOR_IO).await;
        })
    }
}

/// How long [`SystemClock::pause_for_io`] waits at least.
const PAUSE_FOR_IO: Duration = Duration::from_micros(50);

/// A clock that moves only when told to. Used by tests and benchmarks; its
/// timers fire when it is moved past them.
#[derive(Debug, Default)]
pub struct ManualClock {
    inner: Rc<Manual>,
}

#[derive(Debug, Default)]
struct Manual {
    now: Cell<u64>,
    /// Moves forward by every forward step of `now`, and not back with it.
    monotonic: Cell<u64>,
    /// Timers on the monotonic clock.
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
        let forward = ms.saturating_sub(self.inner.now.get());
        self.inner.now.set(ms);
        let mono = self.inner.monotonic.get().saturating_add(forward);
        self.inner.monotonic.set(mono);
        let due: Vec<Waker> = {
            let mut timers = self.inner.timers.borrow_mut();
            let (due, later) = timers.drain(..).partition(|(at, _)| *at <= mono);
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

    fn monotonic_ms(&self) -> u64 {
        self.inner.monotonic.get()
    }

    fn pause_for_io(&self) -> LocalBoxFuture<'static, ()> {
        // Time stands still here; a yield lets the other tasks run.
        Box::pin(futures_lite::future::yield_now())
    }

    fn sleep_ms(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        Box::pin(ManualSleep {
            clock: self.inner.clone(),
            at: self.inner.monotonic.get().saturating_add(ms),
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
        if self.clock.monotonic.get() >= self.at {
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
    fn monotonic_ms(&self) -> u64 {
        (**self).monotonic_ms()
    }
    fn sleep_ms(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        (**self).sleep_ms(ms)
    }
    fn pause_for_io(&self) -> LocalBoxFuture<'static, ()> {
        (**self).pause_for_io()
    }
}
