//! [`RunMap`]: an ordered map kept as sorted runs of up to `RUN` entries,
//! for a queue's message table and its visibility and expiry indexes.
//! Owned, like the queue, by one core.
//!
//! Why not `BTreeMap`: a put appends to all three indexes at their high
//! end (sequence numbers only grow, and so, for messages put alike, do
//! visible-at and expiry times). A `BTreeMap` insert searches every node
//! from the root, and at the high end each node's linear search runs to
//! its last key: the three inserts were 2.4% of a put's samples at c64
//! (docs/benchmarks.md, "Indexes in runs"). Its nodes, split at the middle
//! when the inserts come in order, also stay a little over half full, so a
//! queue that grows grows its index by about twice its entries' size, and
//! every new page is a fault. Here an append looks at the last run only
//! (the outer map's rightmost key, without comparisons on the way down) and
//! pushes onto it; a run that is full gets a successor. Runs fill to the
//! brim when entries come in order.
//!
//! Layout: `runs` maps each run's *floor* to the run. Invariants
//! ([`RunMap::check`]):
//! - a run is never empty and holds at most `RUN` entries, in strictly
//!   increasing key order;
//! - a run's floor is at most its first key, and every key of a run is
//!   below the next run's floor (so the run that may hold `k` is the one
//!   with the greatest floor at most `k`);
//! - two neighbouring runs each under half full are merged (checked when
//!   either loses an entry), so runs average over a quarter full, whatever
//!   the order of removals: the map's memory stays within a small factor
//!   of its entries', as a `BTreeMap`'s does.

use std::collections::{BTreeMap, VecDeque};

/// Entries per run: small enough that an insert or removal in the middle
/// of a run moves little (at most `RUN` entries of a message's 96 bytes),
/// large enough that the outer map is a small fraction of the entries.
const RUN: usize = 32;

/// One sorted run. A deque: removals at the front (the oldest message, the
/// first visible, the first to expire) are the common case and cost no
/// move.
type Run<K, V> = VecDeque<(K, V)>;

#[derive(Debug, Clone)]
pub struct RunMap<K, V> {
    runs: BTreeMap<K, Run<K, V>>,
    len: usize,
}

impl<K, V> Default for RunMap<K, V> {
    fn default() -> Self {
        RunMap {
            runs: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<K: Ord + Copy, V> RunMap<K, V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The run that holds `k` if any run does. The last and the first run
    /// are looked at before a search (each is reached down the outer map's
    /// edge, without a search, and checked with a comparison or two):
    /// a short queue has one run, the messages looked up most are the
    /// newest (just put, just received) and the oldest (deleted in order),
    /// and a search of the floors for a predecessor (`range(..=k)`) costs
    /// about twice a plain lookup.
    fn run_of(&self, k: &K) -> Option<&Run<K, V>> {
        match self.runs.last_key_value() {
            Some((last, run)) if last <= k => return Some(run),
            None => return None,
            Some(_) => {}
        }
        if Self::first_holds(&self.runs, k) {
            return self.runs.first_key_value().map(|(_, run)| run);
        }
        self.runs.range(..=*k).next_back().map(|(_, run)| run)
    }

    /// Whether the first run holds `k`: `k` is at most its last key, and at
    /// least its floor (a `k` below every floor is in no run).
    fn first_holds(runs: &BTreeMap<K, Run<K, V>>, k: &K) -> bool {
        runs.first_key_value()
            .is_some_and(|(floor, run)| floor <= k && run.back().is_some_and(|(b, _)| k <= b))
    }

    /// [`RunMap::run_of`], mutable, with the run's floor. Of `runs`, not
    /// `self`, so the caller may count entries while it holds the run.
    fn run_of_mut<'a>(runs: &'a mut BTreeMap<K, Run<K, V>>, k: &K) -> Option<(K, &'a mut Run<K, V>)> {
        if runs.last_key_value().is_some_and(|(last, _)| last <= k) {
            let last = runs.last_entry()?;
            let floor = *last.key();
            return Some((floor, last.into_mut()));
        }
        if Self::first_holds(runs, k) {
            let first = runs.first_entry()?;
            let floor = *first.key();
            return Some((floor, first.into_mut()));
        }
        runs.range_mut(..=*k).next_back().map(|(f, run)| (*f, run))
    }

    pub fn get(&self, k: &K) -> Option<&V> {
        let run = self.run_of(k)?;
        let at = run.binary_search_by(|(x, _)| x.cmp(k)).ok()?;
        run.get(at).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let (_, run) = Self::run_of_mut(&mut self.runs, k)?;
        let at = run.binary_search_by(|(x, _)| x.cmp(k)).ok()?;
        run.get_mut(at).map(|(_, v)| v)
    }

    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Inserts `v` under `k`; returns the value it replaced.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        // The append: `k` above every key, and room in the last run.
        if let Some(mut last) = self.runs.last_entry() {
            let run = last.get_mut();
            if run.back().is_some_and(|(b, _)| *b < k) {
                if run.len() < RUN {
                    run.push_back((k, v));
                } else {
                    self.runs.insert(k, new_run(k, v));
                }
                self.len += 1;
                return None;
            }
        }
        let Some((_, run)) = Self::run_of_mut(&mut self.runs, &k) else {
            return self.insert_below_all(k, v);
        };
        let at = match run.binary_search_by(|(x, _)| x.cmp(&k)) {
            Ok(at) => {
                let slot = run.get_mut(at).expect("found by the search");
                return Some(std::mem::replace(&mut slot.1, v));
            }
            Err(at) => at,
        };
        self.len += 1;
        if run.len() < RUN {
            run.insert(at, (k, v));
            return None;
        }
        // Full: split before inserting, so no run's buffer grows past
        // `RUN` (a full deque would double).
        let mut upper = split_upper(run);
        match at.checked_sub(RUN / 2) {
            Some(in_upper) if in_upper > 0 => upper.insert(in_upper, (k, v)),
            _ => run.insert(at, (k, v)),
        }
        let upper_floor = upper.front().expect("half of a full run").0;
        self.runs.insert(upper_floor, upper);
        None
    }

    /// `k` is below every run's floor: it joins the first run, whose floor
    /// moves down to it (or starts the first run).
    fn insert_below_all(&mut self, k: K, v: V) -> Option<V> {
        self.len += 1;
        let Some((_, mut first)) = self.runs.pop_first() else {
            self.runs.insert(k, new_run(k, v));
            return None;
        };
        if first.len() == RUN {
            let upper = split_upper(&mut first);
            let upper_floor = upper.front().expect("half of a full run").0;
            self.runs.insert(upper_floor, upper);
        }
        first.push_front((k, v));
        self.runs.insert(k, first);
        None
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        let (floor, run) = Self::run_of_mut(&mut self.runs, k)?;
        let at = run.binary_search_by(|(x, _)| x.cmp(k)).ok()?;
        let (_, v) = run.remove(at).expect("found by the search");
        let left = run.len();
        self.len -= 1;
        if left < RUN / 2 {
            self.after_removal(floor);
        }
        Some(v)
    }

    /// The smallest entry.
    pub fn first(&self) -> Option<(&K, &V)> {
        let (_, run) = self.runs.first_key_value()?;
        run.front().map(|(k, v)| (k, v))
    }

    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let mut first = self.runs.first_entry()?;
        let floor = *first.key();
        let out = first.get_mut().pop_front().expect("runs are never empty");
        let left = first.get().len();
        self.len -= 1;
        if left < RUN / 2 {
            self.after_removal(floor);
        }
        Some(out)
    }

    /// Keeps the invariants after the run at `floor` lost an entry and is
    /// under half full (the callers look first: a run at least half full
    /// needs nothing, and this costs a lookup): an empty run goes, and one
    /// under half full is merged with a neighbour the two fit in,
    /// repeatedly, since a merged run may still be under half full beside
    /// another.
    fn after_removal(&mut self, mut floor: K) {
        loop {
            let len = self.runs.get(&floor).map_or(0, VecDeque::len);
            if len == 0 {
                self.runs.remove(&floor);
                return;
            }
            if len >= RUN / 2 || self.runs.len() == 1 {
                return;
            }
            let next = self.runs.range(floor..).nth(1).map(|(f, r)| (*f, r.len()));
            let prev = self.runs.range(..floor).next_back().map(|(f, r)| (*f, r.len()));
            match (prev, next) {
                // Into the previous run: its floor stays below every key.
                (Some((p, plen)), _) if plen + len <= RUN => {
                    let mut run = self.runs.remove(&floor).expect("the run exists");
                    self.runs.get_mut(&p).expect("the previous run exists").append(&mut run);
                    floor = p;
                }
                // The next run into this one.
                (_, Some((n, nlen))) if nlen + len <= RUN => {
                    let mut run = self.runs.remove(&n).expect("the next run exists");
                    self.runs.get_mut(&floor).expect("the run exists").append(&mut run);
                }
                _ => return,
            }
        }
    }

    /// Entries from the first key at least `from`, in order.
    pub fn range_from(&self, from: K) -> impl Iterator<Item = (&K, &V)> + '_ {
        // The run that may hold `from`, or the first run if all are above.
        let start = self.runs.range(..=from).next_back().map(|(f, _)| *f);
        let runs = match start {
            Some(f) => self.runs.range(f..),
            None => self.runs.range(..),
        };
        runs.flat_map(|(_, run)| run.iter())
            .skip_while(move |(k, _)| *k < from)
            .map(|(k, v)| (k, v))
    }

    /// Entries with keys up to `to`, in order.
    pub fn range_to(&self, to: K) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.runs
            .range(..=to)
            .flat_map(|(_, run)| run.iter())
            .take_while(move |(k, _)| *k <= to)
            .map(|(k, v)| (k, v))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.runs.values().flat_map(|run| run.iter()).map(|(k, v)| (k, v))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    pub fn into_values(self) -> impl Iterator<Item = V> {
        self.runs.into_values().flat_map(|run| run.into_iter().map(|(_, v)| v))
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Asserts the invariants in the module's comment (tests, checks).
    pub fn check(&self) {
        let mut count = 0usize;
        let mut last_key: Option<K> = None;
        let mut prev_short = false;
        for (floor, run) in &self.runs {
            assert!(!run.is_empty(), "an empty run");
            assert!(run.len() <= RUN, "a run over {RUN}");
            if let Some(last) = last_key {
                assert!(last < *floor, "a key at or above the next run's floor");
            }
            let first = run.front().expect("not empty").0;
            assert!(*floor <= first, "a run's floor above its first key");
            assert!(
                run.iter().zip(run.iter().skip(1)).all(|(a, b)| a.0 < b.0),
                "a run out of order"
            );
            let short = run.len() < RUN / 2;
            // An occupancy rule, not a structural one: checked in test
            // builds only, so that a change to the merge policy cannot stop
            // a recovery that `Queue::check_invariants` runs in release.
            debug_assert!(!(short && prev_short), "two neighbouring runs under half full");
            debug_assert!(run.capacity() <= RUN, "a run's buffer grew past {RUN}");
            prev_short = short;
            last_key = run.back().map(|(k, _)| *k);
            count += run.len();
        }
        assert_eq!(count, self.len, "the count of entries");
    }
}

/// A run of one entry, with room for `RUN`: it would otherwise reallocate
/// as appends grow it.
fn new_run<K, V>(k: K, v: V) -> Run<K, V> {
    let mut run = VecDeque::with_capacity(RUN);
    run.push_back((k, v));
    run
}

/// The upper half of a full run, taken out as a run of its own (with room
/// for `RUN`). Its floor is its first key: above every key left in the
/// lower half, and below the next run's floor, as the full run's keys were.
fn split_upper<K, V>(run: &mut Run<K, V>) -> Run<K, V> {
    debug_assert_eq!(run.len(), RUN, "only a full run is split");
    let mut upper = VecDeque::with_capacity(RUN);
    upper.extend(run.drain(RUN / 2..));
    upper
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        /// A key just above the largest: the append path.
        Append(u8),
        /// The key at this index (modulo the count) of those held.
        RemoveHeld(u16),
        /// Any key, most often one not held.
        Remove(u16),
        PopFirst,
        Get(u16),
        SetValue(u16, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k % 2048, v)),
            5 => (1..4u8).prop_map(Op::Append),
            5 => any::<u16>().prop_map(Op::RemoveHeld),
            1 => any::<u16>().prop_map(|k| Op::Remove(k % 2048)),
            1 => Just(Op::PopFirst),
            1 => any::<u16>().prop_map(|k| Op::Get(k % 2048)),
            1 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::SetValue(k % 2048, v)),
        ]
    }

    /// The map against the model: the invariants, the entries, and both
    /// ranges from every place a run boundary makes interesting (each
    /// floor, just below it, just past each run's last key) and `probe`.
    fn same(map: &RunMap<u16, u32>, model: &BTreeMap<u16, u32>, probe: u16) -> Result<(), TestCaseError> {
        map.check();
        prop_assert_eq!(map.len(), model.len());
        prop_assert!(map
            .iter()
            .map(|(k, v)| (*k, *v))
            .eq(model.iter().map(|(k, v)| (*k, *v))));
        prop_assert_eq!(
            map.first().map(|(k, v)| (*k, *v)),
            model.first_key_value().map(|(k, v)| (*k, *v))
        );
        let mut probes = vec![probe, 0, u16::MAX];
        for (floor, run) in &map.runs {
            probes.extend([*floor, floor.saturating_sub(1)]);
            probes.extend(run.back().map(|(k, _)| k.saturating_add(1)));
        }
        for p in probes {
            prop_assert!(map.range_from(p).map(|(k, _)| *k).eq(model.range(p..).map(|(k, _)| *k)));
            prop_assert!(map.range_to(p).map(|(k, _)| *k).eq(model.range(..=p).map(|(k, _)| *k)));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every operation answers as a `BTreeMap`'s does, and the
        /// invariants and ranges hold after each.
        #[test]
        fn behaves_as_an_ordered_map(ops in proptest::collection::vec(op(), 1..600), probe in any::<u16>()) {
            let mut map = RunMap::default();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(map.insert(k, v), model.insert(k, v)),
                    Op::Append(d) => {
                        let k = model.last_key_value().map_or(0, |(k, _)| *k).saturating_add(u16::from(d));
                        prop_assert_eq!(map.insert(k, u32::from(d)), model.insert(k, u32::from(d)));
                    }
                    Op::RemoveHeld(i) => {
                        let held = model.keys().nth(usize::from(i) % model.len().max(1)).copied();
                        if let Some(k) = held {
                            prop_assert_eq!(map.remove(&k), model.remove(&k));
                        }
                    }
                    Op::Remove(k) => prop_assert_eq!(map.remove(&k), model.remove(&k)),
                    Op::PopFirst => prop_assert_eq!(map.pop_first(), model.pop_first()),
                    Op::Get(k) => {
                        prop_assert_eq!(map.get(&k), model.get(&k));
                        prop_assert_eq!(map.contains_key(&k), model.contains_key(&k));
                    }
                    Op::SetValue(k, v) => {
                        if let Some(x) = map.get_mut(&k) {
                            *x = v;
                        }
                        if let Some(x) = model.get_mut(&k) {
                            *x = v;
                        }
                    }
                }
                same(&map, &model, probe)?;
            }
        }
    }

    /// Keys in order fill runs to the brim; removed in any order, the runs
    /// stay more than a quarter full on average.
    #[test]
    fn runs_stay_full_enough() {
        let mut map = RunMap::default();
        for k in 0..10_000u32 {
            map.insert(k, ());
        }
        map.check();
        assert_eq!(map.runs.len(), 10_000 / RUN + 1);
        // Remove all but every 7th key: a sparse survivor pattern.
        for k in 0..10_000u32 {
            if k % 7 != 0 {
                map.remove(&k);
            }
        }
        map.check();
        let runs = map.runs.len();
        assert!(map.len() * 4 >= runs * RUN, "{} entries in {runs} runs", map.len());
        // And drained from the front, as consumers drain a queue.
        while map.pop_first().is_some() {
            map.check();
        }
        assert!(map.runs.is_empty());
    }

    /// The sparsest shape the merge rule allows: full runs cut to one entry
    /// and to half, alternately (16, 1, 16, 1, …), is still over a quarter
    /// full, and inserts into the middle of full runs never grow a run's
    /// buffer past `RUN` (`check`).
    #[test]
    fn the_sparsest_shape_is_over_a_quarter_full() {
        let runs = 64u32;
        let run = RUN as u32;
        let mut map = RunMap::default();
        for k in 0..runs * run {
            map.insert(k * 2, ());
        }
        assert_eq!(map.runs.len(), runs as usize);
        for r in 0..runs {
            let keep = if r % 2 == 1 { 1 } else { run / 2 };
            for i in keep..run {
                map.remove(&((r * run + i) * 2));
            }
        }
        map.check();
        assert!(
            map.len() * 4 >= map.runs.len() * RUN,
            "{} entries in {} runs",
            map.len(),
            map.runs.len()
        );
        // Odd keys into the middle of every run, until each has split.
        for k in 0..runs * run {
            map.insert(k * 2 + 1, ());
            map.check();
        }
    }
}
