//! Long polling: Get Messages calls waiting on an empty queue
//! (docs/EXTENSIONS.md, "Long polling"). Owned by the shard, so by one core.
//!
//! Each waiter holds a ticket in its queue's line, numbered in arrival
//! order. Whatever makes a message visible wakes waiters in ticket order,
//! as many as there are visible messages; a woken waiter runs an ordinary
//! Get Messages, so a message still goes to one caller only. Only the head
//! of the line sleeps until the queue's next invisible message becomes
//! visible (an expiring visibility timeout has no event of its own); the
//! others sleep until their deadline, so a thousand waiters do not all
//! wake for one message. A waiter that leaves while woken, or while at the
//! head, hands the wake-up to the next in line, so a message never sits
//! visible while someone waits for it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub(crate) struct Waiters {
    next_ticket: Cell<u64>,
    /// Queue id → its line, by ticket.
    lines: RefCell<HashMap<u64, BTreeMap<u64, Rc<Slot>>>>,
    /// Set at shutdown: every waiter answers at once, and none waits again.
    closed: Cell<bool>,
}

#[derive(Default)]
pub(crate) struct Slot {
    woken: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Slot {
    fn wake(&self) {
        self.woken.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// A place in a queue's line; leaving the line is dropping it.
pub(crate) struct Ticket {
    waiters: Rc<Waiters>,
    pub(crate) qid: u64,
    number: u64,
    slot: Rc<Slot>,
}

impl Waiters {
    pub(crate) fn join(self: &Rc<Self>, qid: u64) -> Ticket {
        let number = self.next_ticket.get();
        self.next_ticket.set(number + 1);
        let slot = Rc::new(Slot::default());
        self.lines
            .borrow_mut()
            .entry(qid)
            .or_default()
            .insert(number, slot.clone());
        Ticket {
            waiters: self.clone(),
            qid,
            number,
            slot,
        }
    }

    /// How many wait on queue `qid` (zero costs one hash lookup, so every
    /// put can ask).
    pub(crate) fn count(&self, qid: u64) -> usize {
        self.lines.borrow().get(&qid).map_or(0, BTreeMap::len)
    }

    /// Makes sure at least `k` waiters of `qid` are awake, earliest tickets
    /// first.
    pub(crate) fn wake(&self, qid: u64, k: usize) {
        let lines = self.lines.borrow();
        let Some(line) = lines.get(&qid) else { return };
        let mut awake = line.values().filter(|s| s.woken.get()).count();
        for slot in line.values() {
            if awake >= k {
                break;
            }
            if !slot.woken.get() {
                slot.wake();
                awake += 1;
            }
        }
    }

    /// Wakes the head of `qid`'s line, so it looks at the queue again (the
    /// next visible-at time moved earlier, or the head changed).
    pub(crate) fn wake_head(&self, qid: u64) {
        if let Some(slot) = self.lines.borrow().get(&qid).and_then(|l| l.values().next()) {
            slot.wake();
        }
    }

    /// Wakes every waiter of `qid` (its queue is gone).
    pub(crate) fn wake_all(&self, qid: u64) {
        if let Some(line) = self.lines.borrow().get(&qid) {
            line.values().for_each(|s| s.wake());
        }
    }

    /// Shutdown: every waiter answers now, and no one waits from here on.
    pub(crate) fn close(&self) {
        self.closed.set(true);
        for line in self.lines.borrow().values() {
            line.values().for_each(|s| s.wake());
        }
    }

    pub(crate) fn closed(&self) -> bool {
        self.closed.get()
    }
}

impl Ticket {
    pub(crate) fn is_head(&self) -> bool {
        let lines = self.waiters.lines.borrow();
        lines.get(&self.qid).and_then(|l| l.keys().next()) == Some(&self.number)
    }

    /// Waits until woken or until `timer` fires, whichever is first.
    pub(crate) async fn wait(&self, timer: Pin<Box<dyn Future<Output = ()>>>) {
        let woken = Woken { slot: &self.slot };
        futures::future::select(woken, timer).await;
        // Awake either way: a wake-up that raced the timer is used now.
        self.slot.woken.set(false);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let was_head = self.is_head();
        let mut lines = self.waiters.lines.borrow_mut();
        if let Some(line) = lines.get_mut(&self.qid) {
            line.remove(&self.number);
            if line.is_empty() {
                lines.remove(&self.qid);
            }
        }
        drop(lines);
        // A wake-up this waiter did not use, or the head's duty of watching
        // the next visible-at time, passes to the next in line.
        if self.slot.woken.get() || was_head {
            self.waiters.wake_head(self.qid);
        }
    }
}

struct Woken<'a> {
    slot: &'a Slot,
}

impl Future for Woken<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.slot.woken.get() {
            return Poll::Ready(());
        }
        *self.slot.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}
