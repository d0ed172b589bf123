//! Every limit Hematite enforces, in one place.
//!
//! Azure's limits come from Microsoft's Queue service REST reference; the
//! engine's own limits are sized for the machine in docs/machine.md. Other modules refer
//! to these constants instead of repeating numbers.

/// Largest message text, in UTF-8 bytes of the unescaped `MessageText`
/// ("Put Message"): Azure's limit, and the default of
/// `ShardConfig::max_message_bytes` (`--max-message-kib 64`).
pub const MAX_MESSAGE_BYTES: usize = 65_536;
/// The largest `ShardConfig::max_message_bytes` (`--max-message-kib 1024`,
/// SQS's limit; docs/EXTENSIONS.md). The WAL's frame limit is sized for it,
/// whatever the configured size, so a log written with large messages is
/// read by every configuration.
pub const MAX_MESSAGE_BYTES_CEILING: usize = 1024 * 1024;
/// Largest whole request body Azure accepts on Put/Update Message ("Put
/// Message"; the server reports it as `MaxLimit`).
pub const MAX_REQUEST_BODY_BYTES: usize = 131_584;
/// The request body limit that goes with a message size limit, in Azure's
/// proportion: twice the text (room for escaping) plus 512 bytes of XML.
pub const fn request_body_limit(max_message_bytes: usize) -> usize {
    max_message_bytes.saturating_mul(2).saturating_add(512)
}
const _: () = assert!(request_body_limit(MAX_MESSAGE_BYTES) == MAX_REQUEST_BODY_BYTES);
/// Text bytes one Get or Peek Messages answer carries at most: Azure's
/// largest answer (32 messages of 64 KiB). With Azure's message size it
/// never binds; with larger messages a Get returns fewer than asked (at
/// least one), so an answer's memory stays what Azure's limits make it.
pub const MAX_RESPONSE_TEXT_BYTES: usize = MAX_NUM_OF_MESSAGES as usize * MAX_MESSAGE_BYTES;
/// `numofmessages` range for Get and Peek Messages.
pub const MIN_NUM_OF_MESSAGES: i64 = 1;
pub const MAX_NUM_OF_MESSAGES: i64 = 32;
/// Longest visibility timeout, in seconds (7 days).
pub const MAX_VISIBILITY_TIMEOUT_SECS: i64 = 604_800;
/// Get Messages' default visibility timeout, in seconds.
pub const DEFAULT_GET_VISIBILITY_TIMEOUT_SECS: i64 = 30;
/// Default message TTL, in seconds (7 days).
pub const DEFAULT_MESSAGE_TTL_SECS: i64 = 604_800;
/// Largest finite TTL (any positive int32 since 2017-07-29).
pub const MAX_MESSAGE_TTL_SECS: i64 = i32::MAX as i64;
/// The instant Azure shows for messages that never expire: 9999-12-31T23:59:59Z,
/// in milliseconds since the Unix epoch. Enormous finite TTLs are capped here too.
pub const EXPIRY_NEVER_MS: u64 = 253_402_300_799_000;
/// Longest long-poll wait a queue or a request may ask for, in seconds
/// (docs/EXTENSIONS.md; SQS's ReceiveMessageWaitTimeSeconds has the same cap).
pub const MAX_RECEIVE_WAIT_SECS: u64 = 20;
/// Largest `hematite_max_dequeue_count` (SQS's maxReceiveCount has the same cap).
pub const MAX_DEAD_LETTER_DEQUEUE_COUNT: u64 = 1_000;
/// A message on its way to the dead-letter queue is hidden this long: if the
/// move does not finish (a crash, the dead-letter queue gone), the message
/// becomes visible again afterwards and the next Get Messages retries it.
pub const DEAD_LETTER_LEASE_SECS: i64 = 30;
/// Visible messages one Get Messages looks at, at most, for deliverable
/// ones among those bound for the dead-letter queue.
pub const MAX_GET_SCAN: usize = 1_024;
/// Dead-letter queues a chain may pass through (each may have its own):
/// setting a dead-letter queue follows the chain this far to refuse cycles.
pub const MAX_DEAD_LETTER_CHAIN: usize = 8;
/// Messages a Get Messages sets aside for the dead-letter queue at most, on
/// top of the ones it delivers: bounds the work of one request.
pub const MAX_DEAD_LETTERS_PER_GET: usize = 32;
/// Queue name length ("Naming Queues and Metadata").
pub const MIN_QUEUE_NAME_LEN: usize = 3;
pub const MAX_QUEUE_NAME_LEN: usize = 63;
/// Total metadata size, names plus values ("Naming Queues and Metadata").
pub const MAX_METADATA_BYTES: usize = 8_192;
/// Stored access policies per queue, and the length of their ids ("Set Queue ACL").
pub const MAX_SIGNED_IDENTIFIERS: usize = 5;
pub const MAX_SIGNED_IDENTIFIER_ID_LEN: usize = 64;
/// List Queues page size: default and cap ("List Queues").
pub const MAX_LIST_RESULTS: usize = 5_000;

/// Bytes reserved at the start of each segment for its header. One 4 KiB block,
/// so records start aligned for any device block size up to 4 KiB.
pub const SEGMENT_HEADER_LEN: u64 = 4096;
/// Largest record body the WAL will frame. A full-state message record is the
/// biggest: up to `MAX_MESSAGE_BYTES_CEILING` of text plus ids and times.
/// Anything larger on disk is corruption.
pub const MAX_RECORD_BODY: usize = MAX_MESSAGE_BYTES_CEILING + 64 * 1024;
const _: () = assert!(max_append_body(MAX_MESSAGE_BYTES_CEILING) <= MAX_RECORD_BODY);
/// Dead segments kept as spare files for the next rotations instead of
/// being deleted (docs/STORAGE_FORMAT.md, "Recycled segments"): commits into
/// a reused file overwrite written blocks, and no deletion (a discard on this
/// machine's ext4) runs beside the commits. Each spare holds one segment's
/// disk space.
pub const MAX_SPARE_SEGMENTS: usize = 2;
/// A dead segment with no room among the spares is freed this much at a
/// time (a shrink of the file), then deleted. Deleting a 64 MiB segment at
/// once took 14-20 ms on this machine's ext4 mounted with `discard`, all of
/// it on the blocking thread that commits wait for; 1 MiB steps took 0.3 ms
/// on average and 1.6 ms at most (docs/benchmarks.md, "The open loop after
/// a deleted queue").
pub const DISCARD_STEP_BYTES: u64 = 1024 * 1024;
/// Shrink steps per maintenance pass: 4 MiB a pass, at most 80 MiB/s with a
/// pass every 50 ms (less, counting the pass's own time), about what one
/// shard's 1 KiB puts write (55-78 MB/s). A writer that needs a file
/// meanwhile takes up a discarded one not cut yet as a spare.
pub const DISCARD_STEPS_PER_PASS: usize = 4;

/// Zeros written into the prepared segment per write when the log zeroes
/// ahead (`WalConfig::zero_ahead`), one write after each commit: small,
/// so that no commit's fdatasync finds much more than its own data waiting
/// in the device's cache. Zeroing a whole 64 MiB segment at its creation
/// gave the open-loop put a p99 of 5.8-47.3 ms against 3.3-6.0 ms without
/// (docs/decisions/0003-segment-preallocation.md).
pub const ZERO_STEP_BYTES: u64 = 256 * 1024;
/// Queue ids and message sequence numbers come from one counter per shard,
/// one per queue or message: 2^62 of them take 146,000 years at a million
/// a second. A log whose counter would start at or beyond this (it names id
/// `ID_SPACE - 1` or more) is refused at recovery, and the counter refuses
/// to go past it, so it never wraps onto ids in use.
pub const ID_SPACE: u64 = 1 << 62;
/// Default segment size at which the writer rotates.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Largest record body the writer appends with Azure's message size: a full
/// message state (76 bytes plus 64 KiB of text) or a queue definition (8 KiB
/// of metadata with its length fields, five access policies, names) both fit
/// well within it. Anything larger is refused with an error before it is
/// appended.
pub const MAX_APPEND_BODY: usize = 80 * 1024;
/// What a record body may hold besides a message's text, with room to spare.
const APPEND_BODY_SLACK: usize = MAX_APPEND_BODY - MAX_MESSAGE_BYTES;
/// The writer's limit for a shard whose messages hold up to
/// `max_message_bytes`: never below `MAX_APPEND_BODY`, so queue definitions
/// always fit.
pub const fn max_append_body(max_message_bytes: usize) -> usize {
    let for_messages = max_message_bytes.saturating_add(APPEND_BODY_SLACK);
    if for_messages > MAX_APPEND_BODY {
        for_messages
    } else {
        MAX_APPEND_BODY
    }
}
/// Smallest segment size accepted (tests use small segments to exercise
/// rotation). It must hold the header, one commit of the largest record (with
/// a clock record beside it) and the SEGMENT_END, each padded to 4 KiB, so a
/// fresh segment always has room and no batch ever crosses the end.
pub const MIN_SEGMENT_BYTES: u64 = 128 * 1024;
/// The smallest segment for records of up to `max_append_body` bytes (see
/// `MIN_SEGMENT_BYTES`): 128 KiB with Azure's message size, a little over
/// 1 MiB with 1 MiB messages.
pub const fn min_segment_bytes(max_append_body: usize) -> u64 {
    let need = (max_append_body as u64).saturating_add(SEGMENT_HEADER_LEN + 2 * 4096 + 4 * 1024);
    if need > MIN_SEGMENT_BYTES {
        need
    } else {
        MIN_SEGMENT_BYTES
    }
}
const _: () = assert!(min_segment_bytes(MAX_APPEND_BODY) == MIN_SEGMENT_BYTES);
/// Longest `Start` / `Expiry` of a stored access policy: an ISO 8601 time
/// (`2030-01-01T00:00:00.0000000Z` is 28 characters).
pub const MAX_ACL_TIME_LEN: usize = 64;
/// A stored access policy's permission: the letters r, a, u, p, each at most once ("Create a service SAS").
pub const ACL_PERMISSION_LETTERS: &str = "raup";
/// How far ahead of the current time the shard records its clock floor
/// (a CLOCK record), so at most one such record is written per this many
/// milliseconds. After a restart the clock may start up to this far ahead.
pub const CLOCK_LEASE_MS: u64 = 1_000;
/// Default size of the per-shard message body cache.
pub const DEFAULT_BODY_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// A body larger than Azure's message size is cached only if it costs at
/// most this fraction (1/N) of the cache: one Get of large messages must not
/// flush a small cache of everything else. Azure-sized bodies keep the plain
/// rule (cached if they fit at all).
pub const LARGE_BODY_CACHE_FRACTION: usize = 16;
/// A group commit closes its batch at this many bytes; later records wait for
/// the next commit. Bounds the size of one write and of one DMA buffer.
pub const MAX_COMMIT_BYTES: usize = 4 * 1024 * 1024;
/// A commit of at least this many bytes (a busy core's: about 30 records
/// of 1 KiB at 64 connections) writes and fdatasyncs in one job on the
/// blocking pool, as the reference server does; a smaller one, what a core
/// with time to spare commits, takes the two steps through the executor
/// (docs/benchmarks.md, "Group commit on a busy core": the one-job commit
/// was faster under load, and raised the open-loop p99 when used for every
/// commit).
pub const ONE_HOP_COMMIT_BYTES: usize = 16 * 1024;
/// Recovery reads segments in windows of this size.
pub const RECOVERY_READ_WINDOW: usize = 1024 * 1024;
/// Compaction: the WAL may hold this many times the live bytes (plus one
/// segment of slack) before the oldest segment is rewritten regardless of how
/// much of it is still live.
pub const COMPACTION_SPACE_FACTOR: u64 = 4;
/// Compaction: a sealed segment whose live fraction is at or below this
/// (percent) is rewritten as soon as it is the oldest one.
pub const COMPACTION_LIVE_PERCENT: u64 = 50;

/// A group commit taking this long is logged by default: it holds every
/// request that waits for it (docs/benchmarks.md, "Where the stalls came
/// from"). `--slow-commit-ms` sets another threshold (bench/compare logs
/// from 10 ms, to place the tails of an open-loop run).
pub const SLOW_COMMIT_MS: u64 = 50;

/// Messages released per maintenance pass after Clear Messages or Delete
/// Queue: a millisecond or two of work, then the core serves others.
pub const RELEASE_SLICE: usize = 4096;

/// Messages a compaction rewrite looks at before it lets other tasks run.
/// Finding a segment's live messages reads every message of the shard
/// (17 ms for about 400k at once, the commits waiting behind it: see
/// docs/benchmarks.md, "A rewrite's scan in slices").
pub const REWRITE_SCAN_SLICE: usize = 8192;

/// Records a compaction rewrite moves before it lets other tasks run. A
/// record whose body is cached is rewritten with nothing to wait for: one
/// pass moved 16,417 in 44 ms of wall time (commits included, so at most
/// 2.7 µs each), and answers waited up to 32 ms behind it. 512 is at most
/// about 1.4 ms at a time (docs/benchmarks.md, "The ceiling dropped
/// bodies").
pub const REWRITE_RECORD_SLICE: usize = 512;

/// Wake-up slots a log's wait list keeps for reuse (`wal::wakeups`): each
/// durable mutation listens twice, and a fresh slot was an allocation and a
/// free each time. More than one per connection waiting on a commit is
/// never needed; beyond this, spent slots are freed. About 40 bytes each.
pub const MAX_KEPT_WAKEUP_SLOTS: usize = 1_024;
