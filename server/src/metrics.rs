//! Prometheus metrics, served on the admin address (`admin`).
//!
//! Thread-per-core all the way: each core counts its own requests in a
//! thread-local [`CoreCounters`] (plain integers, no atomics, no lock on
//! the hot path). A scrape asks every core for a [`CoreSnapshot`] over the
//! channel mesh, as any cross-core work goes, and merges them here. The
//! text exposition format (Prometheus's "Exposition formats", version
//! 0.0.4) is written directly: the crates for it are built around global
//! registries of shared atomic metrics, which is what this design avoids.
//!
//! docs/OPERATIONS.md lists every metric, what it means and which alerts
//! to set on it.

use engine::wal::stats::Log2Histogram;
use engine::wal::{CommitStats, SegmentStat};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Upper bounds, in seconds, of the request-latency buckets.
pub const LATENCY_BUCKETS_S: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0,
];
/// Queues shown by name (the deepest); the rest only in the totals, so a
/// million queues never make a million series.
pub const TOP_QUEUES: usize = 20;

/// A latency histogram with [`LATENCY_BUCKETS_S`] (the last slot: +Inf).
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    buckets: [u64; LATENCY_BUCKETS_S.len() + 1],
    count: u64,
    sum_s: f64,
}

impl Histogram {
    fn record(&mut self, secs: f64) {
        let i = LATENCY_BUCKETS_S.partition_point(|b| *b < secs);
        if let Some(b) = self.buckets.get_mut(i) {
            *b = b.saturating_add(1);
        }
        self.count = self.count.saturating_add(1);
        self.sum_s += secs;
    }

    fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(o.buckets.iter()) {
            *a = a.saturating_add(*b);
        }
        self.count = self.count.saturating_add(o.count);
        self.sum_s += o.sum_s;
    }
}

/// One core's counters. Owned by that core's thread; copied out at a scrape.
#[derive(Debug, Clone, Default)]
pub struct CoreCounters {
    /// Answers by (operation, status), and latencies by operation, in the
    /// order first seen: a core answers a few dozen pairs at most, and
    /// most requests the same as the one before, so each is looked up from
    /// the entry the last request used ([`CoreCounters::last`]). Two
    /// lookups by name in ordered maps were about 90 ns of a put
    /// (docs/benchmarks.md, "The frame's checksum taken from its source").
    /// A scrape merges them by name.
    pub requests: Vec<((&'static str, u16), u64)>,
    pub latency: Vec<(&'static str, Histogram)>,
    /// Where the last request's entries are in `requests` and `latency`.
    last: (usize, usize),
    /// Request and response body bytes.
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connections_open: u64,
    pub connections_accepted: u64,
    pub expired: u64,
    pub segments_removed: u64,
    pub records_rewritten: u64,
    pub futile_rewrites: u64,
    pub messages_scanned: u64,
    pub messages_released: u64,
}

thread_local! {
    static CORE: RefCell<CoreCounters> = RefCell::default();
}

/// Counts one answered request on this core.
pub fn record_request(operation: &'static str, status: u16, took: Duration, bytes_in: usize, bytes_out: usize) {
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        let c = &mut *c;
        let (last_request, last_latency) = c.last;
        let i = slot_of(&mut c.requests, last_request, (operation, status), |k| {
            same_name(k.0, operation) && k.1 == status
        });
        let j = slot_of(&mut c.latency, last_latency, operation, |k| same_name(k, operation));
        c.last = (i, j);
        if let Some((_, n)) = c.requests.get_mut(i) {
            *n = n.saturating_add(1);
        }
        if let Some((_, h)) = c.latency.get_mut(j) {
            h.record(took.as_secs_f64());
        }
        c.bytes_in = c.bytes_in.saturating_add(bytes_in as u64);
        c.bytes_out = c.bytes_out.saturating_add(bytes_out as u64);
    });
}

/// The index in `v` of the entry whose key `is` `key`, tried first at
/// `hint`, appended (with a default value) if there is none.
fn slot_of<K, V: Default>(v: &mut Vec<(K, V)>, hint: usize, key: K, is: impl Fn(&K) -> bool) -> usize {
    if v.get(hint).is_some_and(|(k, _)| is(k)) {
        return hint;
    }
    if let Some(i) = v.iter().position(|(k, _)| is(k)) {
        return i;
    }
    v.push((key, V::default()));
    v.len() - 1
}

/// Operation names are literals: the same address is the same name, and
/// only another address needs the text compared.
fn same_name(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

pub fn connection_opened() {
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        c.connections_open = c.connections_open.saturating_add(1);
        c.connections_accepted = c.connections_accepted.saturating_add(1);
    });
}

pub fn connection_closed() {
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        c.connections_open = c.connections_open.saturating_sub(1);
    });
}

/// Counts what one maintenance pass did on this core.
pub fn record_maintenance(r: &engine::shard::MaintenanceReport) {
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        c.expired = c.expired.saturating_add(r.expired);
        c.segments_removed = c.segments_removed.saturating_add(r.segments_removed);
        c.records_rewritten = c.records_rewritten.saturating_add(r.records_rewritten);
        c.futile_rewrites = c.futile_rewrites.saturating_add(r.futile_rewrites);
        c.messages_scanned = c.messages_scanned.saturating_add(r.messages_scanned);
    });
}

/// Counts messages of cleared or deleted queues that maintenance released
/// on this core (`Shard::take_released`).
pub fn record_released(n: u64) {
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        c.messages_released = c.messages_released.saturating_add(n);
    });
}

/// Everything one core reports to a scrape. Plain data: it crosses cores.
#[derive(Debug, Clone)]
pub struct CoreSnapshot {
    pub shard: usize,
    pub counters: CoreCounters,
    pub commits: CommitStats,
    pub segments: Vec<SegmentStat>,
    /// Body cache hits, misses and bytes held.
    pub cache: (u64, u64, usize),
    /// Queues, messages, and the deepest queues (account, queue, messages).
    pub queues: (u64, u64, Vec<(String, String, u64)>),
    pub poisoned: Option<String>,
}

impl CoreSnapshot {
    /// This core's snapshot; runs on the core that owns `shard`.
    pub fn take<D: engine::disk::Disk>(shard_index: usize, shard: &engine::Shard<D>) -> CoreSnapshot {
        CoreSnapshot {
            shard: shard_index,
            counters: CORE.with(|c| c.borrow().clone()),
            commits: shard.commit_stats(),
            segments: shard.segment_stats(),
            cache: shard.cache_stats(),
            queues: shard.queue_depths(TOP_QUEUES),
            poisoned: shard.wal().poisoned(),
        }
    }
}

/// The exposition text for all cores.
pub fn render(cores: &[CoreSnapshot]) -> String {
    let mut out = String::with_capacity(16 * 1024);
    render_requests(&mut out, cores);
    render_shards(&mut out, cores);
    render_queues(&mut out, cores);
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn render_requests(out: &mut String, cores: &[CoreSnapshot]) {
    let mut requests: BTreeMap<(&str, u16), u64> = BTreeMap::new();
    let mut latency: BTreeMap<&str, Histogram> = BTreeMap::new();
    let mut total = CoreCounters::default();
    for c in cores {
        for (k, v) in &c.counters.requests {
            let n = requests.entry(*k).or_default();
            *n = n.saturating_add(*v);
        }
        for (k, h) in &c.counters.latency {
            latency.entry(k).or_default().merge(h);
        }
        total.bytes_in = total.bytes_in.saturating_add(c.counters.bytes_in);
        total.bytes_out = total.bytes_out.saturating_add(c.counters.bytes_out);
        total.connections_open = total.connections_open.saturating_add(c.counters.connections_open);
        total.connections_accepted = total
            .connections_accepted
            .saturating_add(c.counters.connections_accepted);
    }
    header(
        out,
        "hematite_requests_total",
        "counter",
        "Requests answered, by operation and HTTP status.",
    );
    for ((op, status), n) in &requests {
        let _ = writeln!(
            out,
            "hematite_requests_total{{operation=\"{op}\",status=\"{status}\"}} {n}"
        );
    }
    header(
        out,
        "hematite_request_duration_seconds",
        "histogram",
        "Time from a whole request read to its answer written to the buffer, by operation.",
    );
    for (op, h) in &latency {
        let mut cumulative = 0u64;
        for (i, n) in h.buckets.iter().enumerate() {
            cumulative = cumulative.saturating_add(*n);
            let le = LATENCY_BUCKETS_S.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "hematite_request_duration_seconds_bucket{{operation=\"{op}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "hematite_request_duration_seconds_sum{{operation=\"{op}\"}} {}",
            h.sum_s
        );
        let _ = writeln!(
            out,
            "hematite_request_duration_seconds_count{{operation=\"{op}\"}} {}",
            h.count
        );
    }
    header(
        out,
        "hematite_request_body_bytes_total",
        "counter",
        "Request body bytes received.",
    );
    let _ = writeln!(out, "hematite_request_body_bytes_total {}", total.bytes_in);
    header(
        out,
        "hematite_response_body_bytes_total",
        "counter",
        "Response body bytes sent.",
    );
    let _ = writeln!(out, "hematite_response_body_bytes_total {}", total.bytes_out);
    header(
        out,
        "hematite_connections_open",
        "gauge",
        "Client connections open now.",
    );
    let _ = writeln!(out, "hematite_connections_open {}", total.connections_open);
    header(
        out,
        "hematite_connections_accepted_total",
        "counter",
        "Client connections accepted.",
    );
    let _ = writeln!(
        out,
        "hematite_connections_accepted_total {}",
        total.connections_accepted
    );
}

/// One per-shard series family, a value per core.
fn per_shard(
    out: &mut String,
    cores: &[CoreSnapshot],
    name: &str,
    kind: &str,
    help: &str,
    value: impl Fn(&CoreSnapshot) -> String,
) {
    header(out, name, kind, help);
    for c in cores {
        let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", c.shard, value(c));
    }
}

fn render_shards(out: &mut String, cores: &[CoreSnapshot]) {
    per_shard(
        out,
        cores,
        "hematite_wal_commits_total",
        "counter",
        "Group commits (one write and one fdatasync each).",
        |c| c.commits.commits.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_wal_records_total",
        "counter",
        "Records made durable by group commits; divided by commits, the records per commit.",
        |c| c.commits.records.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_wal_one_job_commits_total",
        "counter",
        "Group commits large enough to write and fdatasync in one job on the blocking pool.",
        |c| c.commits.one_job.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_wal_zeroed_bytes_total",
        "counter",
        "Zeros written into the next segment ahead of the writer, so its commits overwrite written blocks.",
        |c| c.commits.zeroed_bytes.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_wal_written_bytes_total",
        "counter",
        "Bytes written to the log, padding included.",
        |c| c.commits.bytes.to_string(),
    );
    type Pick = fn(&CoreSnapshot) -> &Log2Histogram;
    let histograms: [(&str, &str, Pick); 3] = [
        (
            "hematite_wal_fdatasync_seconds",
            "fdatasync time of each group commit.",
            |c| &c.commits.sync,
        ),
        (
            "hematite_wal_write_seconds",
            "Data write (O_DIRECT, io_uring) of each group commit.",
            |c| &c.commits.write,
        ),
        (
            "hematite_wal_commit_seconds",
            "Each group commit attempt, failed ones included: write, fdatasync and a rotation's seal.",
            |c| &c.commits.total,
        ),
    ];
    for (name, help, pick) in histograms {
        header(out, name, "histogram", help);
        for c in cores {
            log2_histogram(out, name, c.shard, pick(c));
        }
    }
    per_shard(
        out,
        cores,
        "hematite_wal_segments",
        "gauge",
        "Log segment files.",
        |c| c.segments.len().to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_wal_live_bytes",
        "gauge",
        "Bytes of log records still needed.",
        |c| c.segments.iter().map(|s| s.live_bytes).sum::<u64>().to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_wal_dead_bytes",
        "gauge",
        "Bytes of log records compaction may reclaim.",
        |c| {
            c.segments
                .iter()
                .map(|s| s.bytes.saturating_sub(s.live_bytes))
                .sum::<u64>()
                .to_string()
        },
    );
    per_shard(
        out,
        cores,
        "hematite_compaction_records_rewritten_total",
        "counter",
        "Live records compaction moved out of old segments.",
        |c| c.counters.records_rewritten.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_compaction_segments_removed_total",
        "counter",
        "Segments compaction removed.",
        |c| c.counters.segments_removed.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_compaction_futile_rewrites_total",
        "counter",
        "Rewrites that moved nothing: every live record left in the segment waits for the release of cleared messages.",
        |c| c.counters.futile_rewrites.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_compaction_messages_scanned_total",
        "counter",
        "Messages compaction's scans looked at to find a segment's live records.",
        |c| c.counters.messages_scanned.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_messages_released_total",
        "counter",
        "Messages of cleared or deleted queues whose records and memory maintenance released.",
        |c| c.counters.messages_released.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_messages_expired_total",
        "counter",
        "Messages removed by their time to live.",
        |c| c.counters.expired.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_body_cache_hits_total",
        "counter",
        "Message bodies served from memory.",
        |c| c.cache.0.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_body_cache_misses_total",
        "counter",
        "Message bodies read from the log.",
        |c| c.cache.1.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_body_cache_bytes",
        "gauge",
        "Bytes of message bodies held in memory.",
        |c| c.cache.2.to_string(),
    );
    per_shard(
        out,
        cores,
        "hematite_shard_poisoned",
        "gauge",
        "1 if the shard refuses writes after an I/O failure (restart it).",
        |c| u8::from(c.poisoned.is_some()).to_string(),
    );
}

/// A power-of-two microsecond histogram as a Prometheus histogram in seconds.
fn log2_histogram(out: &mut String, name: &str, shard: usize, h: &Log2Histogram) {
    let mut cumulative = 0u64;
    let last = h.buckets.len().saturating_sub(1);
    for (i, n) in h.buckets.iter().enumerate() {
        cumulative = cumulative.saturating_add(*n);
        let le = if i == last {
            "+Inf".to_string()
        } else {
            // Bucket i holds durations under 2^i µs.
            ((1u64 << i) as f64 / 1e6).to_string()
        };
        let _ = writeln!(out, "{name}_bucket{{shard=\"{shard}\",le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_sum{{shard=\"{shard}\"}} {}", h.sum_us as f64 / 1e6);
    let _ = writeln!(out, "{name}_count{{shard=\"{shard}\"}} {}", h.count);
}

fn render_queues(out: &mut String, cores: &[CoreSnapshot]) {
    per_shard(out, cores, "hematite_queues", "gauge", "Queues.", |c| {
        c.queues.0.to_string()
    });
    per_shard(
        out,
        cores,
        "hematite_messages",
        "gauge",
        "Messages stored (approximate, as Get Queue Metadata counts them).",
        |c| c.queues.1.to_string(),
    );
    let mut deepest: Vec<&(String, String, u64)> = cores.iter().flat_map(|c| c.queues.2.iter()).collect();
    deepest.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
    deepest.truncate(TOP_QUEUES);
    header(
        out,
        "hematite_queue_messages",
        "gauge",
        "Approximate message count of the deepest queues (at most 20; the rest are in hematite_messages).",
    );
    for (account, queue, n) in deepest {
        let _ = writeln!(
            out,
            "hematite_queue_messages{{account=\"{}\",queue=\"{}\"}} {n}",
            label(account),
            label(queue)
        );
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts land on their (operation, status) whatever order requests
    /// come in, and a name at another address is the same name once merged.
    #[test]
    fn requests_are_counted_by_operation_and_status() {
        let other_put: &'static str = String::from("put").leak();
        for (op, status) in [
            ("put", 201),
            ("put", 201),
            ("get", 200),
            ("put", 404),
            (other_put, 201),
            ("put", 201),
        ] {
            record_request(op, status, Duration::from_micros(300), 1, 2);
        }
        let c = CORE.with(|c| c.borrow().clone());
        let mut requests: BTreeMap<(&str, u16), u64> = BTreeMap::new();
        for ((op, status), n) in &c.requests {
            *requests.entry((*op, *status)).or_default() += n;
        }
        let want: BTreeMap<(&str, u16), u64> = [(("get", 200), 1), (("put", 201), 4), (("put", 404), 1)].into();
        assert_eq!(requests, want);
        let mut latency: BTreeMap<&str, u64> = BTreeMap::new();
        for (op, h) in &c.latency {
            *latency.entry(*op).or_default() += h.count;
        }
        assert_eq!(latency, [("get", 1), ("put", 5)].into());
        assert_eq!((c.bytes_in, c.bytes_out), (6, 12));
    }
}
