//! The server's hard limits, in one place. Azure's own limits (message size,
//! list page size, …) live in `engine::limits`.

use std::time::Duration;

/// Bytes of request line plus headers.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Number of header fields in one request.
pub const MAX_HEADERS: usize = 100;
/// Largest request body. Azure refuses bodies above this with 413 and
/// `<MaxLimit>131584</MaxLimit>`; no queue operation needs more. With
/// `--max-message-kib` above 64 the limit grows in proportion
/// (`engine::limits::request_body_limit`), and bodies above this one take
/// their bytes from `LARGE_BODY_BUDGET_BYTES`.
pub const MAX_BODY_BYTES: usize = engine::limits::MAX_REQUEST_BODY_BYTES;
/// Bytes of request bodies above `MAX_BODY_BYTES` one core reads at once
/// (only with `--max-message-kib` above 64): 31 bodies of the largest
/// size at 1 MiB messages (2 MiB and 512 bytes each). A body that finds no room is answered 503 `ServerBusy`, which
/// clients retry. Each byte here costs about three in memory (the body, the
/// parsed text, the engine's copy in the commit), so hostile clients on
/// every connection hold at most ~200 MiB per core, instead of their
/// connection count times the body limit.
pub const LARGE_BODY_BUDGET_BYTES: usize = 64 * 1024 * 1024;
/// Elements in one request document. The smallest element (`<a/>`) is 4
/// bytes, so a body within Azure's limit can never reach it; larger bodies
/// (`--max-message-kib`) cannot make a tree bigger than Azure's can: each
/// element costs about 100 bytes parsed, 25 times its size on the wire.
pub const MAX_XML_ELEMENTS: usize = MAX_BODY_BYTES / 4;
/// Messages in one batch request (the extensions in docs/EXTENSIONS.md):
/// as many as one Get Messages may return.
pub const MAX_BATCH_MESSAGES: usize = engine::limits::MAX_NUM_OF_MESSAGES as usize;
/// Open connections per core; more are answered 503 and closed.
/// Default of `--max-connections-per-core`.
pub const MAX_CONNECTIONS_PER_CORE: usize = 4096;
/// A keep-alive connection with no request in flight is closed after this.
/// Default of `--idle-timeout-secs`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// A request must arrive completely (head and body) within this, and a
/// response must be taken by the peer within this.
/// Default of `--request-timeout-secs`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The connection limits an operator may tune, defaulting to the constants
/// above. One copy per core.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub idle_timeout: Duration,
    pub request_timeout: Duration,
    /// Largest request body (`MAX_BODY_BYTES`, or more with `--max-message-kib`).
    pub max_body_bytes: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: MAX_CONNECTIONS_PER_CORE,
            idle_timeout: IDLE_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            max_body_bytes: MAX_BODY_BYTES,
        }
    }
}
/// How often each core checks connection deadlines. A deadline is fixed at
/// the first check after it is set (`conn::Reaper`), so a timeout never
/// fires early and fires up to about two ticks late.
pub const REAPER_TICK: Duration = Duration::from_millis(250);
/// A GET handled for longer than this (a long poll) has its peer checked at
/// every reaper tick: if the peer closed, the request is dropped, so a
/// waiter whose client left does not take the next message.
pub const LONG_REQUEST: Duration = Duration::from_secs(1);
/// A read buffer's first size; it doubles while a request does not fit.
/// A connection with no bytes waiting holds no read buffer (`buffers`).
pub const READ_CHUNK: usize = 16 * 1024;
/// An answer buffer's first capacity: a put's or a metadata answer fits.
pub const ANSWER_CHUNK: usize = 4 * 1024;
/// Idle read and answer buffers each core keeps for its connections
/// (`buffers`). A connection holds one only while it has bytes unread or
/// unwritten, so under load most requests take and give back the same
/// one; the rest cover the few connections caught mid-request (a partial
/// head, a slow reader) without an allocation each. At most 16 × 64 KiB
/// of each kind stays with a core.
pub const MAX_POOLED_BUFFERS: usize = 16;
/// An answer buffer that grew past this (a large Get or Peek) is freed
/// once written, not kept for the next answer.
pub const MAX_POOLED_ANSWER_BYTES: usize = 64 * 1024;
/// A read buffer that grew up to this (requests of up to 64 KiB) goes back
/// to the core's pool as it is, so such requests do not grow a buffer each;
/// one that grew past it (a large body in one piece) is freed, and if
/// at most `READ_CHUNK` pipelined bytes are left in it, they move to a
/// pooled buffer first.
pub const MAX_IDLE_READ_BUFFER: usize = 64 * 1024;
/// A finished request's buffers (method, target, headers) are kept for
/// the core's next request when their capacities add up to at most this
/// (`buffers`): small requests then allocate nothing for them. Its body's buffer
/// is the core's, given back (`http::Body`), so a connection that once
/// sent a large body does not keep it.
pub const MAX_KEPT_REQUEST_BYTES: usize = 8 * 1024;
/// Answered requests each core keeps for the next heads (`buffers`): one
/// for each request in flight at 256 connections, so up to that load none
/// is freed and allocated again (at 256 connections with 64 kept, a put
/// ran 2% more instructions than with each connection keeping its own).
/// At most 256 × `MAX_KEPT_REQUEST_BYTES` (2 MiB) of strings and header
/// spans stays with a core, beside the requests themselves (about 150
/// bytes each); an SDK's request holds about 1.5 KiB.
pub const MAX_POOLED_REQUESTS: usize = 256;
/// Response bytes one connection may queue for pipelined requests before
/// they are written; while they wait to be written, no new request is read.
/// One response may exceed it: a Get or Peek of up to
/// `engine::limits::MAX_RESPONSE_TEXT_BYTES` of text (2 MiB, 32 messages of
/// 64 KiB), escaped, whatever `--max-message-kib` is.
pub const MAX_PENDING_RESPONSE_BYTES: usize = 256 * 1024;
/// Query parameters in one request. Azure's operations read at most a
/// handful (plus a SAS's dozen); the bound keeps duplicate detection and
/// canonicalization cheap for any request that fits the head limit.
pub const MAX_QUERY_PARAMETERS: usize = 64;
/// Characters of a client-supplied value echoed in an error body.
pub const MAX_ECHOED_CHARS: usize = 256;
/// Longest chunk-size line (size, extensions and CRLF) of a chunked body.
pub const MAX_CHUNK_LINE_BYTES: usize = 1024;
/// Requests in flight from other cores that one core serves at a time
/// (bounded mesh channels give back-pressure beyond this).
pub const MESH_CHANNEL_CAPACITY: usize = 1024;
/// Clock skew allowed for Shared Key requests ("Authorize with Shared Key": 15 minutes).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);
/// How long before a SAS's `st` it is already accepted, for the caller's
/// clock running ahead of ours (the service allows a little skew).
pub const SAS_START_SKEW_SECS: i64 = 300;
/// SAS signatures each core remembers as verified (`auth::sas_verifies_lines`);
/// the set is emptied when full. Entries longer than
/// `MAX_CACHED_SAS_ENTRY_BYTES` are not kept (a typical one is about 350
/// bytes: two keys, a signature and the string to sign) and each is keyed
/// by its signature (a part of it), so the set holds at most 2 MiB per core.
pub const MAX_CACHED_SAS_SIGNATURES: usize = 1024;
pub const MAX_CACHED_SAS_ENTRY_BYTES: usize = 1024;
/// Request targets a connection keeps parsed (`addressing::TargetCache`):
/// enough for a client's put, get and peek URLs beside one that never
/// repeats (a delete's).
pub const TARGET_CACHE_SLOTS: usize = 4;
/// Longest request target and `Host` (together) a connection keeps; a SAS
/// URL is about 300 bytes.
pub const MAX_CACHED_TARGET_BYTES: usize = 1024;
/// Most query parameters of a target kept parsed (a SAS has nine to
/// twelve), which bounds the parse's allocations: with the two limits
/// above, a connection's cache holds at most about 32 KiB (a SAS
/// client's, a few KiB).
pub const MAX_CACHED_TARGET_PARAMETERS: usize = 16;
/// Longest `x-ms-client-request-id` echoed back.
pub const MAX_CLIENT_REQUEST_ID: usize = 1024;
/// How often each core proves to the main thread that it still runs.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// A heartbeat this late is logged: the core did not get back to its
/// timers, so it held every request on it for about as long.
pub const LATE_CORE: Duration = Duration::from_millis(40);
/// A core whose heartbeat stands still this long is stuck (a deadlock, an
/// endless loop, a hung io_uring): the process exits so a supervisor
/// restarts it, as for a panic (decision 0004).
pub const SHARD_STALL_LIMIT: Duration = Duration::from_secs(10);
/// How long a SIGTERM drain may take before the process gives up on it.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(20);
/// Lingering close: after a connection's last answer (a refused body, a
/// `Connection: close`), what the peer still sends is read and dropped for
/// at most this long and this many bytes, so that closing a socket with
/// unread data (which makes the kernel send a reset) cannot destroy the
/// answer before the client has read it.
pub const LINGER_TIME: Duration = Duration::from_secs(2);
pub const LINGER_BYTES: usize = 2 * 1024 * 1024;
/// How often each core runs engine maintenance (expiry, compaction).
pub const MAINTENANCE_INTERVAL: Duration = Duration::from_millis(50);
/// How often the purge thread gives freed memory back to the kernel
/// (`allocator::start_purge_thread`). It replaces mimalloc's own purge
/// delay (1 s), and is well inside it, so that while the thread keeps up a
/// core's allocations never find a purge due and make it themselves.
pub const PURGE_INTERVAL: Duration = Duration::from_millis(100);
