//! A seeded single-threaded executor: tasks in a map, wakers mark tasks
//! ready, and each step polls one ready task chosen by the simulation's RNG.
//! So tasks interleave at every await point in an order the seed fixes.

use rand::rngs::StdRng;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

pub type BoxFut = Pin<Box<dyn Future<Output = ()>>>;

/// What a task is, so a crash can cancel the tasks of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    pub shard: usize,
    /// The checker's op id; `None` for maintenance.
    pub op: Option<u64>,
}

struct Flag {
    id: u64,
    ready: Arc<Mutex<BTreeSet<u64>>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().expect("one thread").insert(self.id);
    }
}

#[derive(Default)]
pub struct Exec {
    /// Each task with the number of times it was polled.
    tasks: BTreeMap<u64, (Tag, BoxFut, u64)>,
    // Ids are never reused, so a stale wake of a finished task is ignored.
    ready: Arc<Mutex<BTreeSet<u64>>>,
    next: u64,
}

impl Exec {
    pub fn spawn(&mut self, tag: Tag, fut: BoxFut) {
        let id = self.next;
        self.next += 1;
        self.tasks.insert(id, (tag, fut, 0));
        self.ready.lock().expect("one thread").insert(id);
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.lock().expect("one thread").is_empty()
    }

    /// Requests (not maintenance) and how often each was polled so far.
    pub fn polls(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.tasks.values().filter_map(|(t, _, n)| t.op.map(|op| (op, *n)))
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Polls one ready task picked by `rng`. Returns false if none was ready.
    pub fn step(&mut self, rng: &mut StdRng) -> bool {
        let id = {
            let mut ready = self.ready.lock().expect("one thread");
            if ready.is_empty() {
                return false;
            }
            let i = rng.gen_range(0..ready.len());
            let id = *ready.iter().nth(i).expect("index in range");
            ready.remove(&id);
            id
        };
        let Some((_, fut, polls)) = self.tasks.get_mut(&id) else {
            return true;
        };
        *polls += 1;
        let waker = Waker::from(Arc::new(Flag {
            id,
            ready: self.ready.clone(),
        }));
        let mut cx = Context::from_waker(&waker);
        if let Poll::Ready(()) = fut.as_mut().poll(&mut cx) {
            self.tasks.remove(&id);
        }
        true
    }

    /// Drops every task of `shard` (a crash): returns their op ids.
    pub fn cancel_shard(&mut self, shard: usize) -> Vec<Option<u64>> {
        let ids: Vec<u64> = self
            .tasks
            .iter()
            .filter(|(_, (t, _, _))| t.shard == shard)
            .map(|(&id, _)| id)
            .collect();
        let mut out = Vec::new();
        for id in ids {
            let (tag, fut, _) = self.tasks.remove(&id).expect("listed");
            drop(fut);
            out.push(tag.op);
        }
        out
    }
}
