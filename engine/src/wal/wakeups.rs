//! A wake-up list for the tasks of one core: the part of `event_listener`
//! the commit protocol uses (listen, wake every listener, wake one more),
//! plus one it lacks (hand the waiting listeners to another list unwoken),
//! without its atomics and lock. The log is owned by one shard, so nothing
//! here is shared across threads; the thread-safe list was about a thousand
//! instructions of every put (two listeners per put, two notifications per
//! commit; docs/benchmarks.md).
//!
//! The one subtle rule is `event_listener`'s for an *additional*
//! notification: a listener woken by [`Wakeups::wake_one_more`] that is
//! dropped before it observed the wake-up passes it on to the next listener,
//! so a role handed out that way (leading the next commit) is never lost
//! with a task that went away.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Listeners waiting on one condition. Owned by the shard's log.
#[derive(Default)]
pub struct Wakeups {
    /// Listeners not yet woken, earliest first. A listener dropped before
    /// its wake-up stays here, marked, until the next [`Wakeups::wake_all`]
    /// takes it out or [`Wakeups::wake_one_more`] skips it.
    waiting: RefCell<VecDeque<Rc<Slot>>>,
    /// The list `wake_all` emptied, kept for its capacity: a wake-up per
    /// commit must not allocate a new list.
    spare: RefCell<VecDeque<Rc<Slot>>>,
    /// Slots whose listener is gone and that no list holds, reset, for the
    /// next [`Wakeups::listen`]: two allocations of every put.
    free: RefCell<Vec<Rc<Slot>>>,
}

#[derive(Default)]
struct Slot {
    state: Cell<SlotState>,
    waker: Cell<Option<Waker>>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
enum SlotState {
    #[default]
    Waiting,
    /// Woken by `wake_all`.
    Woken,
    /// Woken by `wake_one_more`: passed on if dropped before observed.
    WokenOne,
    /// The wake-up was returned by the listener's future.
    Observed,
    /// Dropped while waiting.
    Gone,
}

impl Wakeups {
    /// Registers a listener now: a wake-up after this call reaches it even
    /// if it is first polled later.
    pub fn listen(&self) -> Listener<'_> {
        let slot = self.free.borrow_mut().pop().unwrap_or_default();
        debug_assert!(
            Rc::strong_count(&slot) == 1 && slot.state.get() == SlotState::Waiting,
            "a reused slot is held by nobody and reset"
        );
        self.waiting.borrow_mut().push_back(slot.clone());
        Listener { event: self, slot }
    }

    /// Wakes every listener registered so far.
    pub fn wake_all(&self) {
        let mut woken = std::mem::take(&mut *self.spare.borrow_mut());
        std::mem::swap(&mut woken, &mut *self.waiting.borrow_mut());
        for slot in woken.drain(..).filter(|s| s.state.get() != SlotState::Gone) {
            slot.wake(SlotState::Woken);
        }
        *self.spare.borrow_mut() = woken;
    }

    /// Moves every listener not yet woken to the end of `to`'s list, in
    /// order, waking none: they now wait for `to`'s next wake-up instead.
    /// The group commit's leader uses it when its commit covers everyone
    /// waiting to lead, who would otherwise each run once only to listen
    /// again, a whole poll of a connection's future a put (docs/benchmarks.md,
    /// "A wake-up fewer a put"). `to` must be woken only by
    /// [`Wakeups::wake_all`]: a listener woken by `to.wake_one_more()` and
    /// dropped unobserved would pass that wake-up on in this list.
    pub fn hand_over_to(&self, to: &Wakeups) {
        assert!(!std::ptr::eq(self, to), "a list is handed over to another");
        let mut from = self.waiting.borrow_mut();
        // A slot whose listener is gone is dropped here, as `wake_all`
        // would: no one waits on it.
        to.waiting
            .borrow_mut()
            .extend(from.drain(..).filter(|s| s.state.get() != SlotState::Gone));
    }

    /// Wakes the earliest listener not yet woken, if there is one.
    pub fn wake_one_more(&self) {
        loop {
            // The borrow ends with the statement: a waker may run code that
            // listens again (glommio's only schedules, but nothing relies on it).
            let next = self.waiting.borrow_mut().pop_front();
            match next {
                None => return,
                Some(slot) if slot.state.get() == SlotState::Gone => continue,
                Some(slot) => return slot.wake(SlotState::WokenOne),
            }
        }
    }
}

impl Slot {
    fn wake(&self, how: SlotState) {
        debug_assert_eq!(self.state.get(), SlotState::Waiting, "a listener is woken once");
        self.state.set(how);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// One registered wait; resolves once woken.
pub struct Listener<'a> {
    event: &'a Wakeups,
    slot: Rc<Slot>,
}

impl Future for Listener<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.slot.state.get() {
            SlotState::Woken | SlotState::WokenOne | SlotState::Observed => {
                self.slot.state.set(SlotState::Observed);
                Poll::Ready(())
            }
            SlotState::Waiting | SlotState::Gone => {
                let waker = match self.slot.waker.take() {
                    Some(w) if w.will_wake(cx.waker()) => w,
                    _ => cx.waker().clone(),
                };
                self.slot.waker.set(Some(waker));
                Poll::Pending
            }
        }
    }
}

impl Drop for Listener<'_> {
    fn drop(&mut self) {
        match self.slot.state.get() {
            SlotState::Waiting => {
                // Its task may be gone; the list keeps only the slot.
                self.slot.state.set(SlotState::Gone);
                drop(self.slot.waker.take());
            }
            SlotState::WokenOne => self.event.wake_one_more(),
            SlotState::Woken | SlotState::Observed | SlotState::Gone => {}
        }
        // Held by nothing but this listener (no list still has it, which
        // is the case once it was woken): reused. A slot some list still
        // holds (dropped while waiting) is freed with the list's reference.
        if Rc::strong_count(&self.slot) == 1 {
            // Dropped after the borrow ends: dropping a waker may drop a
            // task, and with it other listeners of this list.
            let waker = self.slot.waker.take();
            self.slot.state.set(SlotState::Waiting);
            {
                let mut free = self.event.free.borrow_mut();
                if free.len() < crate::limits::MAX_KEPT_WAKEUP_SLOTS {
                    free.push(self.slot.clone());
                }
            }
            drop(waker);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn poll(l: &mut Listener<'_>, waker: &Waker) -> bool {
        Pin::new(l).poll(&mut Context::from_waker(waker)).is_ready()
    }

    #[test]
    fn wake_all_reaches_only_the_listeners_registered_before_it() {
        let ev = Wakeups::default();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let (mut a, mut b) = (ev.listen(), ev.listen());
        assert!(!poll(&mut a, &waker));
        ev.wake_all();
        let mut c = ev.listen();
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "only a had a waker to wake");
        assert!(
            poll(&mut a, &waker) && poll(&mut b, &waker),
            "b was woken before its first poll"
        );
        assert!(!poll(&mut c, &waker));
    }

    #[test]
    fn a_slot_is_reused_only_once_no_list_holds_it() {
        let ev = Wakeups::default();
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut a = ev.listen();
        let b = ev.listen();
        assert!(!poll(&mut a, &waker));
        drop(b); // still in the list, marked gone: not reusable
        assert!(ev.free.borrow().is_empty());
        ev.wake_all();
        assert!(poll(&mut a, &waker));
        drop(a); // woken, out of the list: reused, reset
        assert_eq!(ev.free.borrow().len(), 1);
        let mut c = ev.listen();
        assert!(ev.free.borrow().is_empty());
        assert!(!poll(&mut c, &waker), "a reused slot starts waiting");
        ev.wake_all();
        assert!(poll(&mut c, &waker));
    }

    #[test]
    fn a_handed_over_listener_waits_for_the_other_lists_wake_up() {
        let (from, to) = (Wakeups::default(), Wakeups::default());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut a = from.listen();
        let gone = from.listen();
        let mut b = to.listen();
        assert!(!poll(&mut a, &waker) && !poll(&mut b, &waker));
        drop(gone);
        from.hand_over_to(&to);
        assert!(from.waiting.borrow().is_empty());
        assert_eq!(to.waiting.borrow().len(), 2, "the gone listener is not carried over");
        from.wake_all();
        from.wake_one_more();
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "nothing woke a");
        assert!(!poll(&mut a, &waker));
        to.wake_all();
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
        assert!(poll(&mut a, &waker) && poll(&mut b, &waker));
        drop(a);
        assert_eq!(
            from.free.borrow().len(),
            1,
            "a's slot is reused by the list it listened on"
        );
    }

    #[test]
    fn wake_one_more_goes_in_order_and_skips_dropped_listeners() {
        let ev = Wakeups::default();
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let a = ev.listen();
        let mut b = ev.listen();
        let mut c = ev.listen();
        drop(a);
        ev.wake_one_more();
        assert!(poll(&mut b, &waker), "a was gone: b is next");
        assert!(!poll(&mut c, &waker));
        ev.wake_one_more();
        assert!(poll(&mut c, &waker));
        ev.wake_one_more(); // nobody left: nothing happens
        assert!(ev.waiting.borrow().is_empty());
    }

    #[test]
    fn a_wake_up_to_one_that_is_dropped_unobserved_passes_to_the_next() {
        let ev = Wakeups::default();
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let a = ev.listen();
        let mut b = ev.listen();
        ev.wake_one_more();
        assert!(!poll(&mut b, &waker), "a holds the wake-up");
        drop(a);
        assert!(poll(&mut b, &waker), "a's wake-up went to b");
        // An observed wake-up is not passed on.
        let mut c = ev.listen();
        let mut d = ev.listen();
        ev.wake_one_more();
        assert!(poll(&mut c, &waker));
        drop(c);
        assert!(!poll(&mut d, &waker));
        // Nor is one from `wake_all`.
        let e = ev.listen();
        ev.wake_all();
        let mut f = ev.listen();
        drop(e);
        assert!(!poll(&mut f, &waker));
        drop(d);
    }
}
