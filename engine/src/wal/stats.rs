//! Group-commit statistics of one shard's log: how many commits, how big,
//! and how long their write and fdatasync took. They explain latency tails
//! (docs/benchmarks.md, "Where the stalls came from") and feed the
//! operator's metrics. Owned by the shard's core, like the log.
//!
//! Durations are wall-clock (`Instant`), not the injected clock: they
//! describe the device, and never decide anything.

use std::time::Duration;

/// Buckets of the latency histograms: bucket `i` counts durations in
/// `[2^(i-1), 2^i)` µs (bucket 0: under 1 µs); the last is open-ended
/// (about 8.4 s and over).
pub const LATENCY_BUCKETS: usize = 24;

/// A power-of-two latency histogram, cheap enough for every commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log2Histogram {
    pub buckets: [u64; LATENCY_BUCKETS],
    pub count: u64,
    pub sum_us: u64,
    pub max_us: u64,
}

impl Log2Histogram {
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let bucket = (u64::BITS - us.leading_zeros()) as usize;
        self.buckets[bucket.min(LATENCY_BUCKETS - 1)] += 1;
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
    }

    /// Upper bound (µs) of the bucket holding quantile `q` (0..=1).
    pub fn quantile_upper_us(&self, q: f64) -> u64 {
        let want = ((self.count as f64) * q).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want.max(1) {
                return 1u64 << i;
            }
        }
        self.max_us
    }
}

/// What one shard's group commits did since the log opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitStats {
    pub commits: u64,
    /// Records written (commit markers and seals not counted).
    pub records: u64,
    /// Bytes written, padding included.
    pub bytes: u64,
    /// The largest commit, in records.
    pub max_records: u64,
    /// Commits whose write and fdatasync ran as one job off the executor:
    /// those of at least `ONE_HOP_COMMIT_BYTES` on a disk that can (the
    /// real one with its fdatasync on the blocking pool, the default).
    pub one_job: u64,
    /// Zeros written ahead into prepared segments (`WalConfig::zero_ahead`).
    pub zeroed_bytes: u64,
    /// Zero writes begun, whether or not they succeeded.
    pub zero_steps: u64,
    /// Commits that waited for a zero write still in flight to their
    /// segment (one at most after a rotation; see `Wal::zero_ahead`).
    pub zero_waits: u64,
    /// The data write of each commit (through io_uring, or `pwrite` on the
    /// blocking pool for a one-job commit).
    pub write: Log2Histogram,
    /// The fdatasync of each commit (seal writes at rotation excluded).
    pub sync: Log2Histogram,
    /// Whole commits: write, fdatasync and any rotation seal.
    pub total: Log2Histogram,
    /// The latest commit: write and fdatasync times, records, and whether
    /// it sealed the previous segment (for the slow-commit log line).
    pub last: (Duration, Duration, u32, bool),
}
