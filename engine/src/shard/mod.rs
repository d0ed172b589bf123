//! The `Shard`: one core's queues, their message tables and visibility
//! indexes, and the WAL that makes them durable. Every queue operation is a
//! method here, with Azure's rules and limits (Microsoft's Queue service REST reference, one page per operation).
//!
//! Owned by exactly one core. Methods take `&self` because requests on that
//! core interleave at await points; state changes happen synchronously
//! between awaits, so each operation is atomic with respect to the others.
//!
//! Every mutation follows one pattern ([`Shard::mutate`]): reserve WAL space,
//! then, without awaiting, validate against current state, append the
//! record and apply it to memory; then await the group commit. A response is
//! sent only after the fdatasync that covers it. Reads wait until the newest
//! record that touched their queue is durable, so no answer ever shows state
//! that a crash could take back.

mod compaction;
mod dead_letters;
mod replay;
mod waiters;

use crate::attributes::QueueAttributes;
use crate::body_cache::BodyCache;
use crate::clock::Clock;
use crate::disk::Disk;
use crate::error::{QueueError, StorageError};
use crate::limits::*;
use crate::model::{validate_acl, validate_queue_name, Metadata, PopReceipt, ReceiptText, SignedIdentifier};
use crate::queue::{BodyLoc, Cleared, Message, Queue};
use crate::wal::frame::FRAME_HEADER_LEN;
use crate::wal::record::{Dequeued, MessageState, Record, MESSAGE_STATE_FIXED};
use crate::wal::{segment_name, RecordPos, RecoveryMode, RecoveryReport, SegmentReader, SegmentStat, Wal, WalConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::rc::Rc;
use uuid::Uuid;
use waiters::{Ticket, Waiters};

pub use dead_letters::DeadLetter;

#[derive(Debug, Clone, Copy)]
pub struct ShardConfig {
    pub shard_id: u32,
    /// WAL segment size at which the writer rotates.
    pub segment_bytes: u64,
    /// Bytes of message bodies kept in memory.
    pub body_cache_bytes: usize,
    pub recovery: RecoveryMode,
    /// Azurite compatibility: answer a stale pop receipt with
    /// `PopReceiptMismatch` instead of Azure's `MessageNotFound`.
    pub stale_receipt_is_mismatch: bool,
    /// Seed of the generator of pop-receipt nonces. `None` (production):
    /// seeded from the operating system, so receipts cannot be guessed.
    /// `Some` only for deterministic tests and simulation.
    pub rng_seed: Option<u64>,
    /// How far ahead of now the clock floor is recorded (CLOCK_LEASE_MS by
    /// default): at most one CLOCK record per this many milliseconds, and
    /// after a restart time may start up to this far ahead. Zero records
    /// every new millisecond an answer uses (the model test, which compares
    /// times exactly across restarts).
    pub clock_lease_ms: u64,
    /// How long a message on its way to a dead-letter queue stays hidden
    /// before a later Get Messages retries the move (DEAD_LETTER_LEASE_SECS).
    pub dead_letter_lease_ms: u64,
    /// Largest message text in bytes: `MAX_MESSAGE_BYTES` (Azure's 64 KiB)
    /// by default, up to `MAX_MESSAGE_BYTES_CEILING` (docs/EXTENSIONS.md,
    /// "Larger messages"). Bodies of any size live in the WAL alike.
    pub max_message_bytes: usize,
    /// Zero the next WAL segment ahead of the writer (`WalConfig::zero_ahead`).
    pub zero_ahead: bool,
    /// Messages a compaction rewrite's scan looks at between pauses
    /// (`REWRITE_SCAN_SLICE`; the simulator makes it small, so requests
    /// run in the middle of scans). At least 1.
    pub rewrite_scan_slice: usize,
    /// Group commits taking at least this many milliseconds are logged
    /// (`WalConfig::slow_commit`; `SLOW_COMMIT_MS` by default).
    pub slow_commit_ms: u64,
}

impl ShardConfig {
    pub fn new(shard_id: u32) -> Self {
        ShardConfig {
            shard_id,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            body_cache_bytes: DEFAULT_BODY_CACHE_BYTES,
            recovery: RecoveryMode::Strict,
            stale_receipt_is_mismatch: false,
            rng_seed: None,
            clock_lease_ms: CLOCK_LEASE_MS,
            dead_letter_lease_ms: DEAD_LETTER_LEASE_SECS as u64 * 1000,
            max_message_bytes: MAX_MESSAGE_BYTES,
            zero_ahead: false,
            rewrite_scan_slice: REWRITE_SCAN_SLICE,
            slow_commit_ms: SLOW_COMMIT_MS,
        }
    }

    /// Refuses a configuration the log cannot serve: a message size above
    /// the ceiling, or segments too small for the largest record.
    pub fn validate(&self) -> Result<(), String> {
        if self.rewrite_scan_slice == 0 {
            return Err("a rewrite's scan slice must be at least one message".into());
        }
        if !(1..=MAX_MESSAGE_BYTES_CEILING).contains(&self.max_message_bytes) {
            return Err(format!(
                "the message size limit must be 1 to {MAX_MESSAGE_BYTES_CEILING} bytes, not {}",
                self.max_message_bytes
            ));
        }
        let min = min_segment_bytes(max_append_body(self.max_message_bytes));
        if self.segment_bytes < min {
            return Err(format!(
                "segments of {} bytes cannot hold a message of {} bytes; they must be at least {min} bytes",
                self.segment_bytes, self.max_message_bytes
            ));
        }
        Ok(())
    }
}

/// Create Queue's two successes ("Create Queue").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    New,
    /// It already existed with the same metadata.
    AlreadyExisted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueProperties {
    pub metadata: Metadata,
    pub approximate_message_count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueListing {
    pub name: String,
    pub metadata: Metadata,
}

/// Put Message's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutReceipt {
    pub id: Uuid,
    pub inserted_ms: u64,
    pub expires_ms: u64,
    pub pop_receipt: ReceiptText,
    pub visible_ms: u64,
}

/// A message as Get Messages returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub id: Uuid,
    pub inserted_ms: u64,
    pub expires_ms: u64,
    pub pop_receipt: ReceiptText,
    pub visible_ms: u64,
    pub dequeue_count: u64,
    pub text: String,
}

/// A message as Peek Messages returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeekedMessage {
    pub id: Uuid,
    pub inserted_ms: u64,
    pub expires_ms: u64,
    pub dequeue_count: u64,
    pub text: String,
}

/// Update Message's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateReceipt {
    pub pop_receipt: ReceiptText,
    pub visible_ms: u64,
}

/// What one [`Shard::maintenance`] call did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub expired: u64,
    pub segments_removed: u64,
    pub records_rewritten: u64,
    /// Rewrites that moved nothing: their segment's live records all wait
    /// for the release of cleared messages (`rewrite_candidate`).
    pub futile_rewrites: u64,
    /// Messages the rewrites' scans looked at (`messages_in`).
    pub messages_scanned: u64,
}

/// A full, canonical view of one queue, for tests and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDump {
    pub metadata: Metadata,
    pub acl: Vec<SignedIdentifier>,
    /// Sorted by (visible-at, seq).
    pub messages: Vec<(Message, String)>,
}

/// The queue names of one shard: account, then queue name, to queue id.
/// Two levels, so a lookup borrows the request's names instead of copying
/// both into a key (two allocations per request). Owned by the shard.
#[derive(Default)]
struct Names(BTreeMap<String, BTreeMap<String, u64>>);

impl Names {
    fn get(&self, account: &str, name: &str) -> Option<u64> {
        self.0.get(account)?.get(name).copied()
    }

    fn insert(&mut self, account: String, name: String, qid: u64) {
        self.0.entry(account).or_default().insert(name, qid);
    }

    fn remove(&mut self, account: &str, name: &str) {
        if let Some(queues) = self.0.get_mut(account) {
            queues.remove(name);
            if queues.is_empty() {
                self.0.remove(account);
            }
        }
    }

    /// The queues of `account` named `start` or after, in name order.
    fn from<'a>(&'a self, account: &str, start: &'a str) -> impl Iterator<Item = (&'a String, &'a u64)> + 'a {
        use std::ops::Bound;
        self.0
            .get(account)
            .into_iter()
            .flat_map(move |queues| queues.range::<str, _>((Bound::Included(start), Bound::Unbounded)))
    }
}

struct State {
    /// Looked up on every request; a seeded fast hash (ids are ours, not a
    /// request's).
    queues: foldhash::HashMap<u64, Queue>,
    names: Names,
    /// Source of queue ids and message sequence numbers (receipt nonces are
    /// random). Recovered as one more than the largest seen.
    next_id: u64,
    /// Every answer so far was computed at a time at or below this; it is in
    /// the log (a CLOCK record at `clock_pos`, LSN `clock_lsn`), so after a
    /// restart time starts here even if the wall clock stepped back.
    clock_floor: u64,
    clock_lsn: u64,
    clock_pos: Option<(u64, u32)>,
    /// During replay only: messages of queues whose definition has not been
    /// seen yet. Compaction rewrites a queue's definition at the head of the
    /// log, after records of its messages, so those come first on replay.
    orphans: foldhash::HashMap<u64, Queue>,
    /// Messages cleared or deleted with their queue, still pinned, released
    /// a slice at a time by maintenance (`release_cleared`).
    cleared: VecDeque<Cleared>,
}

impl State {
    /// Hands a queue's taken messages to the background release. An empty
    /// take is dropped: an entry per Clear Messages of an empty queue would
    /// only lengthen the list the release walks.
    fn push_cleared(&mut self, c: Cleared) {
        if !c.is_empty() {
            self.cleared.push_back(c);
        }
    }

    /// The next queue id or message sequence number. One per queue or
    /// message never reaches `ID_SPACE`; a log that starts near it (refused
    /// at recovery from `ID_SPACE` on) refuses the request instead of
    /// wrapping the counter onto ids in use.
    fn id(&mut self) -> Result<u64, QueueError> {
        let id = self.next_id;
        if id >= ID_SPACE {
            return Err(QueueError::Internal {
                reason: format!("the shard's id space ({ID_SPACE} ids) is exhausted"),
            });
        }
        self.next_id += 1;
        Ok(id)
    }

    /// Every queue's indexes agree. Run after every mutation in debug and
    /// test builds; queues above 10,000 messages are skipped there, because
    /// the check is linear and a debug server under load would crawl.
    fn check_invariants(&self) {
        for q in self.queues.values().filter(|q| q.len() <= 10_000) {
            q.check_invariants();
        }
    }

    fn lookup(&self, account: &str, name: &str) -> Option<u64> {
        self.names.get(account, name)
    }

    fn queue_mut(&mut self, account: &str, name: &str) -> Result<&mut Queue, QueueError> {
        let qid = self.lookup(account, name).ok_or(QueueError::QueueNotFound)?;
        Ok(self.queues.get_mut(&qid).expect("named queue exists"))
    }
}

fn message_from_state(m: &MessageState, pos: RecordPos) -> Message {
    Message {
        id: Uuid::from_bytes(m.id),
        seq: m.seq,
        inserted_ms: m.inserted_ms,
        expires_ms: m.expires_ms,
        visible_ms: m.visible_ms,
        dequeue_count: m.dequeue_count,
        receipt: m.receipt,
        body: BodyLoc {
            seg: pos.seg,
            offset: pos.frame_offset + (FRAME_HEADER_LEN + MESSAGE_STATE_FIXED) as u64,
            len: m.body.len() as u32,
            frame_len: pos.frame_len,
        },
    }
}

fn state_of(qid: u64, m: &Message, body: Rc<[u8]>) -> MessageState {
    MessageState {
        qid,
        seq: m.seq,
        id: *m.id.as_bytes(),
        inserted_ms: m.inserted_ms,
        expires_ms: m.expires_ms,
        visible_ms: m.visible_ms,
        dequeue_count: m.dequeue_count,
        receipt: m.receipt,
        body,
    }
}

/// Appends a QUEUE_DEFINED record with the queue's whole current definition
/// and moves the queue's pin to it (`replaces`: the queue already had one).
fn write_definition<D: Disk>(wal: &Wal<D>, q: &mut Queue, replaces: bool) -> Result<RecordPos, StorageError> {
    let (metadata, acl) = (q.metadata.clone(), q.acl.clone());
    write_new_definition(wal, q, metadata, acl, replaces)
}

/// Appends a QUEUE_DEFINED record with `metadata` and `acl`, and only once
/// it is appended makes them the queue's: a record that cannot be appended
/// leaves the queue as it was.
fn write_new_definition<D: Disk>(
    wal: &Wal<D>,
    q: &mut Queue,
    metadata: Metadata,
    acl: Vec<SignedIdentifier>,
    replaces: bool,
) -> Result<RecordPos, StorageError> {
    let rec = Record::QueueDefined {
        qid: q.qid,
        account: q.account.clone(),
        name: q.name.clone(),
        metadata,
        acl,
    };
    let pos = wal.append(&rec)?;
    let Record::QueueDefined { metadata, acl, .. } = rec else {
        unreachable!("built above")
    };
    q.set_metadata(metadata);
    q.acl = acl;
    if replaces {
        wal.unpin(q.def_seg, q.def_frame_len);
    }
    wal.pin(pos.seg, pos.frame_len);
    q.def_seg = pos.seg;
    q.def_frame_len = pos.frame_len;
    q.last_lsn = pos.lsn;
    Ok(pos)
}

/// `numofmessages` for Get and Peek: default 1, range 1–32.
fn check_count(n: Option<i64>) -> Result<usize, QueueError> {
    Ok(check_range(
        "numofmessages",
        n.unwrap_or(1),
        MIN_NUM_OF_MESSAGES,
        MAX_NUM_OF_MESSAGES,
    )? as usize)
}

fn check_range(name: &'static str, v: i64, min: i64, max: i64) -> Result<i64, QueueError> {
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(QueueError::out_of_range(name, v, min, max))
    }
}

/// A message text within the shard's limit (`max_message_bytes`).
fn check_text(text: &str, max_message_bytes: usize) -> Result<(), QueueError> {
    if text.len() > max_message_bytes {
        return Err(QueueError::RequestBodyTooLarge {
            max_limit: max_message_bytes,
        });
    }
    Ok(())
}

fn secs_after(now_ms: u64, secs: i64) -> u64 {
    now_ms.saturating_add(secs as u64 * 1000).min(EXPIRY_NEVER_MS)
}

/// A body to return: either already in memory, or where to read it.
enum BodySource<F> {
    Cached(Rc<[u8]>),
    // The file handle is taken while the message is known live, so the read
    // works even if compaction removes the segment in the meantime.
    Disk(SegmentReader<F>, BodyLoc),
}

pub struct Shard<D: Disk> {
    wal: Wal<D>,
    clock: Rc<dyn Clock>,
    cfg: ShardConfig,
    st: RefCell<State>,
    cache: RefCell<BodyCache>,
    recovery: RecoveryReport,
    compacting: Cell<bool>,
    /// Messages of cleared or deleted queues released since the server last
    /// asked (`take_released`): outside the pass's report, because a pass
    /// that fails later (a full disk) has still released them.
    released: Cell<u64>,
    /// The segment whose last rewrite moved nothing (`rewrite_candidate`).
    futile_rewrite: Cell<Option<u64>>,
    /// Pop-receipt nonces: 64 bits each from a CSPRNG, so a receipt cannot
    /// be derived from another one or from a message id.
    rng: RefCell<StdRng>,
    /// The latest time any operation used: time never goes backwards.
    last_time: Cell<u64>,
    /// Get Messages calls waiting for a message (long polling).
    waiters: Rc<Waiters>,
    /// Messages set aside for a dead-letter queue, hidden for the lease,
    /// waiting for the server's mover ([`Shard::next_dead_letter`]). Lost
    /// in a crash on purpose: the lease runs out and a Get retries.
    dead: RefCell<VecDeque<dead_letters::Pending>>,
    dead_ready: event_listener::Event,
}

impl<D: Disk> Shard<D> {
    /// Recovers the shard from `disk` and opens it for requests.
    pub async fn open(disk: D, cfg: ShardConfig, clock: Rc<dyn Clock>) -> Result<Self, StorageError> {
        cfg.validate().map_err(StorageError::Config)?;
        let mut state = State {
            queues: Default::default(),
            names: Names::default(),
            next_id: 1,
            clock_floor: 0,
            clock_lsn: 0,
            clock_pos: None,
            orphans: Default::default(),
            cleared: VecDeque::new(),
        };
        let wal_cfg = WalConfig {
            shard_id: cfg.shard_id,
            segment_bytes: cfg.segment_bytes,
            recovery: cfg.recovery,
            max_append_body: max_append_body(cfg.max_message_bytes),
            zero_ahead: cfg.zero_ahead,
            slow_commit: std::time::Duration::from_millis(cfg.slow_commit_ms),
        };
        let (mut wal, report) =
            Wal::open(disk, wal_cfg, clock.now_ms(), &mut |rec, pos| state.replay(rec, pos)).await?;
        // Messages of queues that were never (re)defined belong to deleted queues.
        state.orphans.clear();
        if state.next_id >= ID_SPACE {
            return Err(StorageError::Mismatch(format!(
                "the log names a queue or message id of {} or more, beyond the {} ids a shard hands out one per queue or message: a crafted or foreign log, or a bug, not this server's counter. Restore the data directory from a backup, or move it aside to start empty",
                ID_SPACE - 1,
                ID_SPACE - 1
            )));
        }
        // Expired messages need no record: drop those expired by the recorded
        // clock floor (every answer given before the restart was at or below
        // it, so none of them can come back). Later ones go once an operation
        // has recorded a later time. Then every live record pins its segment.
        let now = state.clock_floor;
        if let Some((seg, len)) = state.clock_pos {
            wal.pin(seg, len);
        }
        let mut largest = 0usize;
        for q in state.queues.values_mut() {
            q.purge_expired(now);
            q.check_invariants();
            wal.pin(q.def_seg, q.def_frame_len);
            for m in q.messages() {
                wal.pin(m.body.seg, m.body.frame_len);
                largest = largest.max(m.body.len as usize);
            }
        }
        // Messages stored under a larger `max_message_bytes` than this start
        // has: new ones are held to the new limit, but compaction must still
        // be able to move the old ones, so the writer keeps room for them.
        if largest > cfg.max_message_bytes {
            let need = max_append_body(largest);
            if cfg.segment_bytes < min_segment_bytes(need) {
                return Err(StorageError::Config(format!(
                    "the log holds a message of {largest} bytes, and segments of {} bytes cannot hold it; they must be at least {} bytes",
                    cfg.segment_bytes,
                    min_segment_bytes(need)
                )));
            }
            tracing::warn!(
                shard = cfg.shard_id,
                largest,
                limit = cfg.max_message_bytes,
                "the log holds messages above the message size limit (stored with a larger one); they stay readable"
            );
            wal.keep_room_for(need);
        }
        tracing::info!(
            shard = cfg.shard_id,
            queues = state.queues.len(),
            segments = report.segments_replayed,
            records = report.records_replayed,
            "shard recovered"
        );
        Ok(Shard {
            wal,
            clock,
            cfg,
            st: RefCell::new(state),
            cache: RefCell::new(BodyCache::new(cfg.body_cache_bytes)),
            recovery: report,
            compacting: Cell::new(false),
            released: Cell::new(0),
            futile_rewrite: Cell::new(None),
            rng: RefCell::new(match cfg.rng_seed {
                Some(seed) => StdRng::seed_from_u64(seed),
                None => StdRng::from_entropy(),
            }),
            last_time: Cell::new(now),
            waiters: Rc::default(),
            dead: RefCell::default(),
            dead_ready: event_listener::Event::new(),
        })
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub fn wal(&self) -> &Wal<D> {
        &self.wal
    }

    pub fn config(&self) -> &ShardConfig {
        &self.cfg
    }

    /// The wall clock, but never earlier than any time used before (in this
    /// process, or before a restart through the recorded floor).
    fn now(&self) -> u64 {
        let t = self.clock.now_ms().max(self.last_time.get());
        self.last_time.set(t);
        t
    }

    fn nonce(&self) -> u64 {
        self.rng.borrow_mut().gen()
    }

    /// Makes sure the log records a time at or above `now` before an answer
    /// computed at `now` is given: appends a CLOCK record `CLOCK_LEASE_MS`
    /// ahead when `now` has passed the floor. Returns the LSN to wait for.
    /// Call after [`Wal::reserve`] (or [`Wal::ready_to_append`] answering
    /// `true`), with no await in between.
    fn cover_time(&self, st: &mut State, now: u64) -> Result<u64, StorageError> {
        if now <= st.clock_floor {
            return Ok(st.clock_lsn);
        }
        let floor = now.saturating_add(self.cfg.clock_lease_ms);
        self.write_clock(st, floor)
    }

    fn write_clock(&self, st: &mut State, floor: u64) -> Result<u64, StorageError> {
        let pos = self.wal.append(&Record::Clock { floor_ms: floor })?;
        if let Some((seg, len)) = st.clock_pos.replace((pos.seg, pos.frame_len)) {
            self.wal.unpin(seg, len);
        }
        self.wal.pin(pos.seg, pos.frame_len);
        st.clock_floor = floor;
        st.clock_lsn = pos.lsn;
        Ok(pos.lsn)
    }

    /// The time a read answers at, and the LSN that makes it safe: the wall
    /// clock if it can be recorded, else the recorded floor (while the log
    /// cannot take a CLOCK record, e.g. the disk is full, time stands still
    /// for the queues instead of moving past what a restart would know).
    fn read_time(&self, st: &mut State, reserved: bool) -> (u64, u64) {
        let now = self.now();
        if now <= st.clock_floor {
            return (now, st.clock_lsn);
        }
        if reserved {
            if let Ok(lsn) = self.cover_time(st, now) {
                return (now, lsn);
            }
        }
        (st.clock_floor, st.clock_lsn)
    }

    /// Reserves log space if a read will need a CLOCK record; `false` if it
    /// cannot have one.
    async fn reserve_for_read(&self) -> bool {
        let now = self.clock.now_ms().max(self.last_time.get());
        if now <= self.st.borrow().clock_floor {
            return true;
        }
        self.wal.reserve(now).await.is_ok()
    }

    /// Runs one mutation: reserve, then (synchronously) validate + append +
    /// apply in `f`, which returns its answer and the LSN to wait for; then
    /// wait for the group commit that makes it durable. An error is answered
    /// only once everything appended before it is durable too: it may depend
    /// on pending state (a retried Delete finding the first one's tombstone),
    /// and must not be taken back by a crash any more than a success.
    async fn mutate<T>(
        &self,
        f: impl FnOnce(&mut State, &Wal<D>, u64) -> Result<(T, u64), QueueError>,
    ) -> Result<T, QueueError> {
        let mut now = self.now();
        if !self.wal.ready_to_append()? {
            self.wal.reserve(now).await?;
            // The reservation waited (for a new segment): time moved on.
            now = self.now();
        }
        let result = {
            let mut st = self.st.borrow_mut();
            let clock_lsn = self.cover_time(&mut st, now)?;
            let r = f(&mut st, &self.wal, now);
            if cfg!(debug_assertions) {
                st.check_invariants();
            }
            r.map(|(out, lsn)| (out, lsn.max(clock_lsn)))
                .map_err(|e| (e, self.wal.last_lsn()))
        };
        match result {
            Ok((out, lsn)) => {
                self.wal.wait_durable(lsn).await?;
                Ok(out)
            }
            Err((e, last)) => {
                self.wal.wait_durable(last).await?;
                Err(e)
            }
        }
    }

    /// Waits until everything a read of `qid` could show is durable.
    async fn settle(&self, lsn: u64) -> Result<(), QueueError> {
        self.wal.wait_durable(lsn).await.map_err(QueueError::from)
    }

    fn unpin_message(&self, m: &Message) {
        self.wal.unpin(m.body.seg, m.body.frame_len);
        self.cache.borrow_mut().remove((m.body.seg, m.body.offset));
    }

    fn purge(&self, q: &mut Queue, now: u64) -> u64 {
        let gone = q.purge_expired(now);
        for m in &gone {
            self.unpin_message(m);
        }
        gone.len() as u64
    }

    // ----- queues -----

    pub async fn create_queue(&self, account: &str, name: &str, metadata: Metadata) -> Result<Created, QueueError> {
        validate_queue_name(name)?;
        metadata.validate()?;
        QueueAttributes::parse(name, &metadata)?;
        let existing = {
            let st = self.st.borrow();
            st.lookup(account, name).map(|qid| {
                let q = &st.queues[&qid];
                (q.metadata.equivalent(&metadata), q.last_lsn)
            })
        };
        if let Some((same, lsn)) = existing {
            self.settle(lsn).await?;
            return if same {
                Ok(Created::AlreadyExisted)
            } else {
                Err(QueueError::QueueAlreadyExists)
            };
        }
        let account = account.to_string();
        let name = name.to_string();
        let created = self
            .mutate(|st, wal, _| {
                // Someone may have created it while we waited for space.
                if let Some(qid) = st.lookup(&account, &name) {
                    let q = &st.queues[&qid];
                    let out = if q.metadata.equivalent(&metadata) {
                        Ok(Created::AlreadyExisted)
                    } else {
                        Err(QueueError::QueueAlreadyExists)
                    };
                    return Ok((out, q.last_lsn));
                }
                let qid = st.id()?;
                let mut q = Queue::new(qid, account.clone(), name.clone(), metadata);
                let pos = write_definition(wal, &mut q, false)?;
                st.queues.insert(qid, q);
                st.names.insert(account, name, qid);
                Ok((Ok(Created::New), pos.lsn))
            })
            .await?;
        created
    }

    pub async fn delete_queue(&self, account: &str, name: &str) -> Result<(), QueueError> {
        self.mutate(|st, wal, _| {
            let qid = st.lookup(account, name).ok_or(QueueError::QueueNotFound)?;
            let pos = wal.append(&Record::QueueDeleted { qid })?;
            let mut q = st.queues.remove(&qid).expect("named queue exists");
            st.names.remove(&q.account, &q.name);
            self.waiters.wake_all(qid);
            wal.unpin(q.def_seg, q.def_frame_len);
            st.push_cleared(q.take_all());
            Ok(((), pos.lsn))
        })
        .await
    }

    /// Replaces a queue's metadata and/or access policies with one full
    /// QueueDefined record, so the queue's definition is always in one record.
    /// The queue is changed only after the record is appended: a record that
    /// cannot be appended leaves memory and log in agreement.
    async fn redefine(
        &self,
        account: &str,
        name: &str,
        change: impl FnOnce(&mut Metadata, &mut Vec<SignedIdentifier>),
    ) -> Result<(), QueueError> {
        self.mutate(|st, wal, _| {
            let q = st.queue_mut(account, name)?;
            let (mut metadata, mut acl) = (q.metadata.clone(), q.acl.clone());
            change(&mut metadata, &mut acl);
            let pos = write_new_definition(wal, q, metadata, acl, true)?;
            Ok(((), pos.lsn))
        })
        .await
    }

    pub async fn set_metadata(&self, account: &str, name: &str, metadata: Metadata) -> Result<(), QueueError> {
        metadata.validate()?;
        QueueAttributes::parse(name, &metadata)?;
        self.redefine(account, name, |m, _| *m = metadata).await
    }

    pub async fn set_acl(&self, account: &str, name: &str, acl: Vec<SignedIdentifier>) -> Result<(), QueueError> {
        validate_acl(&acl)?;
        self.redefine(account, name, |_, a| *a = acl).await
    }

    /// Reads a queue: the answer is captured synchronously, then the read
    /// waits until everything it depends on is durable (the queue's newest
    /// record, or for a missing queue everything appended so far, since its
    /// deletion may be pending) and only then replies. One wait, so a steady
    /// stream of writes cannot starve it.
    async fn read_queue<T>(
        &self,
        account: &str,
        name: &str,
        f: impl FnOnce(&mut Queue, u64) -> T,
    ) -> Result<T, QueueError> {
        let reserved = self.reserve_for_read().await;
        let (out, lsn) = {
            let mut st = self.st.borrow_mut();
            let (now, clock_lsn) = self.read_time(&mut st, reserved);
            match st.lookup(account, name) {
                Some(qid) => {
                    let q = st.queues.get_mut(&qid).expect("named queue exists");
                    self.purge(q, now);
                    (Ok(f(q, now)), q.last_lsn.max(clock_lsn))
                }
                None => (Err(QueueError::QueueNotFound), self.wal.last_lsn()),
            }
        };
        self.settle(lsn).await?;
        out
    }

    pub async fn get_properties(&self, account: &str, name: &str) -> Result<QueueProperties, QueueError> {
        self.read_queue(account, name, |q, _| QueueProperties {
            metadata: q.metadata.clone(),
            approximate_message_count: q.len() as u64,
        })
        .await
    }

    pub async fn get_acl(&self, account: &str, name: &str) -> Result<Vec<SignedIdentifier>, QueueError> {
        self.read_queue(account, name, |q, _| q.acl.clone()).await
    }

    /// Queues of `account` whose names start with `prefix` and are `>= from`,
    /// in name order, at most `max`. Also returns whether more follow. The
    /// server merges the pages of all shards ("List Queues").
    pub async fn list_queues(
        &self,
        account: &str,
        prefix: &str,
        from: Option<&str>,
        max: usize,
    ) -> Result<(Vec<QueueListing>, bool), QueueError> {
        // Captured now, durable before the reply: the answer depends on every
        // queue's existence and metadata, so it waits for everything appended.
        let (page, lsn) = self.list_page(account, prefix, from, max);
        self.settle(lsn).await?;
        Ok(page)
    }

    fn list_page(
        &self,
        account: &str,
        prefix: &str,
        from: Option<&str>,
        max: usize,
    ) -> ((Vec<QueueListing>, bool), u64) {
        let lsn = self.wal.last_lsn();
        let st = self.st.borrow();
        let start = match from {
            Some(f) if f > prefix => f.to_string(),
            _ => prefix.to_string(),
        };
        let mut out = Vec::new();
        for (name, qid) in st.names.from(account, &start) {
            if !name.starts_with(prefix) {
                break;
            }
            if out.len() == max {
                return ((out, true), lsn);
            }
            out.push(QueueListing {
                name: name.clone(),
                metadata: st.queues[qid].metadata.clone(),
            });
        }
        ((out, false), lsn)
    }

    // ----- messages -----

    pub async fn put_message(
        &self,
        account: &str,
        name: &str,
        text: String,
        visibility_timeout: Option<i64>,
        ttl: Option<i64>,
    ) -> Result<PutReceipt, QueueError> {
        self.put_shared_message(account, name, Rc::from(text), visibility_timeout, ttl)
            .await
    }

    /// [`Shard::put_message`] with the text already where the body cache
    /// keeps it: the server parses a put's text straight into an `Rc`, one
    /// allocation and copy of the body where a `String` then an `Rc` made two.
    pub async fn put_shared_message(
        &self,
        account: &str,
        name: &str,
        text: Rc<str>,
        visibility_timeout: Option<i64>,
        ttl: Option<i64>,
    ) -> Result<PutReceipt, QueueError> {
        check_text(&text, self.cfg.max_message_bytes)?;
        let (vt, ttl) = check_put_times(visibility_timeout, ttl)?;
        let body: Rc<[u8]> = Rc::from(text);
        self.mutate(|st, wal, now| {
            let qid = st.lookup(account, name).ok_or(QueueError::QueueNotFound)?;
            self.put_one(st, wal, now, qid, body, vt, ttl)
        })
        .await
    }

    /// Put Message for several messages of one queue (Hematite's Put
    /// Message Batch): every valid message is appended in one synchronous
    /// step, so one group commit covers them all; a message Put Message
    /// would refuse is answered with that error on its own. The times apply
    /// to every message; invalid times refuse the whole batch.
    pub async fn put_messages(
        &self,
        account: &str,
        name: &str,
        texts: Vec<String>,
        visibility_timeout: Option<i64>,
        ttl: Option<i64>,
    ) -> Result<Vec<Result<PutReceipt, QueueError>>, QueueError> {
        let (vt, ttl) = check_put_times(visibility_timeout, ttl)?;
        self.mutate(|st, wal, now| {
            let qid = st.lookup(account, name).ok_or(QueueError::QueueNotFound)?;
            let out = texts
                .into_iter()
                .map(|text| {
                    check_text(&text, self.cfg.max_message_bytes)?;
                    let (receipt, _) = self.put_one(st, wal, now, qid, Rc::from(text.into_bytes()), vt, ttl)?;
                    Ok(receipt)
                })
                .collect();
            Ok((out, wal.last_lsn()))
        })
        .await
    }

    /// Appends one new message to queue `qid`, indexes it and caches its
    /// body. Returns its receipt and the LSN of its record.
    #[allow(clippy::too_many_arguments)] // the parts of one put, all needed
    fn put_one(
        &self,
        st: &mut State,
        wal: &Wal<D>,
        now: u64,
        qid: u64,
        body: Rc<[u8]>,
        vt: i64,
        ttl: i64,
    ) -> Result<(PutReceipt, u64), QueueError> {
        let seq = st.id()?;
        let receipt = self.nonce();
        let id = crate::queue::message_id(seq, self.nonce());
        let expires_ms = if ttl == -1 {
            EXPIRY_NEVER_MS
        } else {
            secs_after(now, ttl)
        };
        let state = MessageState {
            qid,
            seq,
            id: *id.as_bytes(),
            inserted_ms: now,
            expires_ms,
            visible_ms: secs_after(now, vt),
            dequeue_count: 0,
            receipt,
            body,
        };
        let (m, lsn) = self.insert(st, wal, now, state)?;
        let out = PutReceipt {
            id: m.id,
            inserted_ms: m.inserted_ms,
            expires_ms: m.expires_ms,
            pop_receipt: PopReceipt { nonce: receipt, seq }.encode(),
            visible_ms: m.visible_ms,
        };
        Ok((out, lsn))
    }

    /// Appends a new message record, indexes the message, caches its body
    /// and wakes whoever waits for it. Returns the message and its LSN.
    fn insert(
        &self,
        st: &mut State,
        wal: &Wal<D>,
        now: u64,
        state: MessageState,
    ) -> Result<(Message, u64), QueueError> {
        let rec = Record::MessagePut(state);
        let pos = wal.append(&rec)?;
        let Record::MessagePut(state) = rec else {
            unreachable!("built above")
        };
        let m = message_from_state(&state, pos);
        wal.pin(m.body.seg, m.body.frame_len);
        self.cache
            .borrow_mut()
            .insert_appended((m.body.seg, m.body.offset), state.body.clone());
        let q = st.queues.get_mut(&state.qid).expect("named queue exists");
        q.last_lsn = pos.lsn;
        let before = self.next_visible_if_watched(q, now);
        q.insert_new(m.clone());
        self.poke(q, now, before);
        Ok((m, pos.lsn))
    }

    /// Replaces message `old` of `q` by `next` with a new text: one
    /// MessageReplaced record holding the whole state, the old record
    /// released, the new body cached. Returns the record's position.
    fn replace(
        &self,
        q: &mut Queue,
        wal: &Wal<D>,
        old: &Message,
        next: Message,
        body: Rc<[u8]>,
    ) -> Result<RecordPos, QueueError> {
        let rec = Record::MessageReplaced(state_of(q.qid, &next, body.clone()));
        let pos = wal.append(&rec)?;
        let Record::MessageReplaced(state) = rec else {
            unreachable!("built above")
        };
        let fresh = message_from_state(&state, pos);
        self.unpin_message(old);
        wal.pin(fresh.body.seg, fresh.body.frame_len);
        self.cache
            .borrow_mut()
            .insert_appended((fresh.body.seg, fresh.body.offset), body);
        q.upsert(fresh);
        Ok(pos)
    }

    /// The queue's next visible-at time after `now`, when long pollers
    /// wait on it (else `None`, at the cost of one hash lookup): what
    /// [`Shard::poke`] compares against after a change.
    fn next_visible_if_watched(&self, q: &Queue, now: u64) -> Option<u64> {
        if self.waiters.count(q.qid) == 0 {
            return None;
        }
        q.next_visible_after(now)
    }

    /// Wakes the long pollers of `q` that a change at `now` concerns: one
    /// per message now visible, and the head of the line if the next
    /// visible-at time moved earlier than `before` (the head sleeps until
    /// then).
    fn poke(&self, q: &Queue, now: u64, before: Option<u64>) {
        let waiting = self.waiters.count(q.qid);
        if waiting == 0 {
            return;
        }
        let visible = q.visible_seqs(now).take(waiting).count();
        if visible > 0 {
            self.waiters.wake(q.qid, visible);
        }
        let after = q.next_visible_after(now);
        if after.is_some() && (before.is_none() || after < before) {
            self.waiters.wake_head(q.qid);
        }
    }

    /// Get Messages: up to `n` visible messages, each made invisible
    /// for `visibility_timeout` seconds with a new pop receipt and one more
    /// dequeue. Durable before it returns, so a receipt handed out survives a crash.
    /// Never waits; [`Shard::receive_messages`] is the long-polling form.
    pub async fn get_messages(
        &self,
        account: &str,
        name: &str,
        n: Option<i64>,
        visibility_timeout: Option<i64>,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.receive_messages(account, name, n, visibility_timeout, Some(0), 0, std::future::pending())
            .await
    }

    /// Get Messages with long polling (docs/EXTENSIONS.md): on an empty
    /// queue, waits up to `wait_secs` (the request's), else the queue's
    /// `hematite_receive_wait_seconds`, and never longer than `max_wait_ms`
    /// (the server's request timeout), for a message to become visible.
    /// Answers empty at the deadline, when the shard stops, or when
    /// `cancel` resolves (the caller went away). `cancel` only ends the
    /// wait: a step that has begun runs to its end, because the log's
    /// group commit must never be abandoned half-way.
    #[allow(clippy::too_many_arguments)] // Get Messages' parameters, the wait's bounds, and its cancellation
    pub async fn receive_messages(
        &self,
        account: &str,
        name: &str,
        n: Option<i64>,
        visibility_timeout: Option<i64>,
        wait_secs: Option<u64>,
        max_wait_ms: u64,
        cancel: impl Future<Output = ()>,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let n = check_count(n)?;
        let vt = check_range(
            "visibilitytimeout",
            visibility_timeout.unwrap_or(DEFAULT_GET_VISIBILITY_TIMEOUT_SECS),
            1,
            MAX_VISIBILITY_TIMEOUT_SECS,
        )?;
        // The wait is measured on the monotonic clock, so a wall clock
        // stepping back cannot stretch it; visible-at times are wall-clock
        // times and only shorten a sleep.
        let start = self.clock.monotonic_ms();
        let mut cancel = std::pin::pin!(cancel);
        let mut ticket: Option<Ticket> = None;
        loop {
            // Joins the line before looking, so that a message put while
            // the look waits for durability wakes this waiter.
            let plan = self.wait_plan(account, name, wait_secs, max_wait_ms);
            ticket = match (ticket.take(), plan) {
                (Some(t), Some((qid, _))) if t.qid == qid => Some(t),
                (_, Some((qid, wait_ms))) if wait_ms > 0 => Some(self.waiters.join(qid)),
                _ => None,
            };
            let (picked, hint) = self.dequeue(account, name, n, vt).await?;
            if !picked.is_empty() {
                return self.deliver(picked).await;
            }
            let wait_ms = plan.map_or(0, |(_, w)| w);
            let left = start.saturating_add(wait_ms).saturating_sub(self.clock.monotonic_ms());
            let Some(t) = ticket.as_ref().filter(|_| left > 0 && !self.waiters.closed()) else {
                return Ok(Vec::new());
            };
            if hint.set_aside > 0 || t.qid != hint.qid {
                // Messages went to the dead-letter queue (deliverable ones
                // may follow them), or the queue was replaced meanwhile:
                // look again before sleeping.
                continue;
            }
            let sleep = match hint.next_visible {
                Some(v) if t.is_head() => left.min(v.saturating_sub(self.now())),
                _ => left,
            };
            let woken = std::pin::pin!(t.wait(self.clock.sleep_ms(sleep)));
            if let futures::future::Either::Right(_) = futures::future::select(woken, cancel.as_mut()).await {
                return Ok(Vec::new());
            }
        }
    }

    /// The queue a long poll would wait on, and for how long at most:
    /// `None` for a missing queue.
    fn wait_plan(&self, account: &str, name: &str, wait_secs: Option<u64>, max_wait_ms: u64) -> Option<(u64, u64)> {
        let st = self.st.borrow();
        let qid = st.lookup(account, name)?;
        let secs = wait_secs.unwrap_or(st.queues[&qid].attrs.receive_wait_secs);
        Some((qid, secs.saturating_mul(1000).min(max_wait_ms)))
    }

    /// One Get Messages step: takes up to `n` visible messages (setting
    /// aside for the dead-letter queue those delivered too often), durably.
    /// An empty answer comes with what a long poll needs to wait.
    async fn dequeue(
        &self,
        account: &str,
        name: &str,
        n: usize,
        vt: i64,
    ) -> Result<(Vec<(Message, BodySource<D::File>)>, WaitHint), QueueError> {
        self.mutate(|st, wal, now| {
            let qid = st.lookup(account, name).ok_or(QueueError::QueueNotFound)?;
            let q = st.queues.get_mut(&qid).expect("named queue exists");
            self.purge(q, now);
            let before = self.next_visible_if_watched(q, now);
            let (seqs, dead) = pick(q, now, n);
            let mut lsn = q.last_lsn;
            if !dead.is_empty() {
                lsn = self.set_aside(q, wal, now, &dead)?;
            }
            let mut out = Vec::with_capacity(seqs.len());
            if !seqs.is_empty() {
                let visible_ms = secs_after(now, vt);
                let entries: Vec<Dequeued> = seqs
                    .iter()
                    .map(|&seq| Dequeued {
                        seq,
                        dequeue_count: q.get(seq).expect("visible message exists").dequeue_count + 1,
                        receipt: self.nonce(),
                    })
                    .collect();
                let pos = wal.append(&Record::MessagesDequeued {
                    qid,
                    visible_ms,
                    entries: entries.clone(),
                })?;
                q.last_lsn = pos.lsn;
                lsn = pos.lsn;
                for e in &entries {
                    q.set_visibility(e.seq, visible_ms, e.receipt, Some(e.dequeue_count));
                    let m = q.get(e.seq).expect("message exists").clone();
                    out.push((m, self.body_source(e.seq, q)));
                }
            }
            self.poke(q, now, before);
            let hint = WaitHint {
                qid,
                set_aside: dead.len(),
                next_visible: q.next_visible_after(now),
            };
            Ok(((out, hint), lsn))
        })
        .await
    }

    /// Loads the bodies of dequeued messages and builds the answer.
    async fn deliver(&self, picked: Vec<(Message, BodySource<D::File>)>) -> Result<Vec<ReceivedMessage>, QueueError> {
        let (msgs, srcs): (Vec<Message>, Vec<BodySource<D::File>>) = picked.into_iter().unzip();
        let texts = self.load_all(srcs).await?;
        let mut out = Vec::with_capacity(msgs.len());
        for (m, text) in msgs.into_iter().zip(texts) {
            out.push(ReceivedMessage {
                id: m.id,
                inserted_ms: m.inserted_ms,
                expires_ms: m.expires_ms,
                pop_receipt: PopReceipt {
                    nonce: m.receipt,
                    seq: m.seq,
                }
                .encode(),
                visible_ms: m.visible_ms,
                dequeue_count: m.dequeue_count,
                text,
            });
        }
        Ok(out)
    }

    /// Stops every long poll (each answers empty at once) and the
    /// dead-letter mover ([`Shard::next_dead_letter`] returns `None`): the
    /// server is shutting down.
    pub fn stop_waiting(&self) {
        self.waiters.close();
        self.dead_ready.notify(usize::MAX);
    }

    /// Where to get the body at `loc`: the cache, or its segment's file
    /// (`None` if the segment is gone).
    fn source_of(&self, loc: BodyLoc) -> Option<BodySource<D::File>> {
        match self.cache.borrow_mut().get((loc.seg, loc.offset)) {
            Some(b) => Some(BodySource::Cached(b)),
            None => self.wal.segment_reader(loc.seg).map(|r| BodySource::Disk(r, loc)),
        }
    }

    /// Where a read gets a live message's body. A disk read is registered
    /// with the cache here, in the same synchronous step that saw the
    /// message live, not when the load starts: a read waits for durability
    /// between the two, and a delete in that gap must find the load to
    /// cancel, or the dead message's body would go back into the cache.
    /// (A source that is never loaded leaves its key registered until the
    /// message goes; a later finished load of a live body is then cached,
    /// which is right.)
    fn body_source(&self, seq: u64, q: &Queue) -> BodySource<D::File> {
        let src = self
            .source_of(q.get(seq).expect("message exists").body)
            .expect("a live message's segment exists");
        if let BodySource::Disk(_, loc) = &src {
            self.cache.borrow_mut().begin_load((loc.seg, loc.offset));
        }
        src
    }

    /// Loads several bodies with their disk reads in flight together: a Get
    /// or Peek of 32 cold messages costs about one read's latency, not 32.
    async fn load_all(&self, srcs: Vec<BodySource<D::File>>) -> Result<Vec<String>, QueueError> {
        futures::future::try_join_all(srcs.into_iter().map(|src| self.load(src))).await
    }

    async fn load(&self, src: BodySource<D::File>) -> Result<String, QueueError> {
        let bytes = match src {
            BodySource::Cached(b) => b,
            BodySource::Disk(r, loc) => {
                let key = (loc.seg, loc.offset);
                // The load was registered when the source was captured
                // (body_source): a delete since then, or while the read is in
                // flight, cancels the insert below.
                let read = self.read_text(&r, loc).await;
                let mut cache = self.cache.borrow_mut();
                match read {
                    Ok(data) => {
                        let b: Rc<[u8]> = Rc::from(data);
                        cache.finish_load(key, b.clone());
                        b
                    }
                    Err(e) => {
                        cache.abort_load(key);
                        return Err(e.into());
                    }
                }
            }
        };
        // Text came in as a String and passed its checksum: invalid UTF-8
        // here means a bug or corruption, and is never papered over.
        String::from_utf8(bytes.to_vec()).map_err(|_| QueueError::Internal {
            reason: "message text is not UTF-8 although its checksum matched".into(),
        })
    }

    /// Reads a message's text from its record on disk, verifying the
    /// record's checksums first.
    async fn read_text(&self, r: &SegmentReader<D::File>, loc: BodyLoc) -> Result<Vec<u8>, StorageError> {
        let fixed = (FRAME_HEADER_LEN + MESSAGE_STATE_FIXED) as u64;
        let frame_offset = loc.offset.checked_sub(fixed).ok_or_else(|| StorageError::Corruption {
            file: segment_name(loc.seg),
            offset: loc.offset,
            reason: "message text offset lies inside the segment header".into(),
        })?;
        let body = self.wal.read_record(r, frame_offset, loc.frame_len).await?;
        match body.get(MESSAGE_STATE_FIXED..) {
            Some(text) if text.len() == loc.len as usize => Ok(text.to_vec()),
            _ => Err(StorageError::Corruption {
                file: segment_name(loc.seg),
                offset: frame_offset,
                reason: format!("record holds no message text of {} bytes", loc.len),
            }),
        }
    }

    /// Peek Messages: visible messages, no side effects.
    pub async fn peek_messages(
        &self,
        account: &str,
        name: &str,
        n: Option<i64>,
    ) -> Result<Vec<PeekedMessage>, QueueError> {
        let n = check_count(n)?;
        let picked = self
            .read_queue(account, name, |q, now| {
                q.visible(now, n)
                    .into_iter()
                    .map(|seq| {
                        (
                            q.get(seq).expect("visible message exists").clone(),
                            self.body_source(seq, q),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .await?;
        let (msgs, srcs): (Vec<Message>, Vec<BodySource<D::File>>) = picked.into_iter().unzip();
        let texts = self.load_all(srcs).await?;
        let mut out = Vec::with_capacity(msgs.len());
        for (m, text) in msgs.into_iter().zip(texts) {
            out.push(PeekedMessage {
                id: m.id,
                inserted_ms: m.inserted_ms,
                expires_ms: m.expires_ms,
                dequeue_count: m.dequeue_count,
                text,
            });
        }
        Ok(out)
    }

    /// Finds a message by id and checks the receipt is its current one ("Delete Message", "Update Message").
    fn find_with_receipt(&self, q: &Queue, id: &str, receipt: &PopReceipt) -> Result<u64, QueueError> {
        let id = Uuid::parse_str(id).map_err(|_| QueueError::MessageNotFound)?;
        let m = q.find(&id).ok_or(QueueError::MessageNotFound)?;
        if m.receipt != receipt.nonce || m.seq != receipt.seq {
            return Err(if self.cfg.stale_receipt_is_mismatch {
                QueueError::PopReceiptMismatch
            } else {
                QueueError::MessageNotFound
            });
        }
        Ok(m.seq)
    }

    pub async fn delete_message(
        &self,
        account: &str,
        name: &str,
        id: &str,
        pop_receipt: &str,
    ) -> Result<(), QueueError> {
        let receipt = PopReceipt::decode(pop_receipt)?;
        self.mutate(|st, wal, now| {
            let q = st.queue_mut(account, name)?;
            self.purge(q, now);
            let lsn = self.delete_one(q, wal, id, &receipt)?;
            Ok(((), lsn))
        })
        .await
    }

    /// Appends the deletion of the message `id` holding `receipt`, removes
    /// it from `q` and releases its record. Returns the deletion's LSN.
    fn delete_one(&self, q: &mut Queue, wal: &Wal<D>, id: &str, receipt: &PopReceipt) -> Result<u64, QueueError> {
        let seq = self.find_with_receipt(q, id, receipt)?;
        let pos = wal.append(&Record::MessageDeleted { qid: q.qid, seq })?;
        q.last_lsn = pos.lsn;
        let m = q.remove(seq).expect("found message exists");
        self.unpin_message(&m);
        Ok(pos.lsn)
    }

    /// Delete Message for several messages of one queue (Hematite's Delete
    /// Message Batch): every delete is appended in one synchronous step, so
    /// one group commit covers them all, and each succeeds or fails on its
    /// own exactly as [`Shard::delete_message`] would. The answer waits for
    /// everything appended before it, failures included.
    pub async fn delete_messages(
        &self,
        account: &str,
        name: &str,
        items: &[(String, String)],
    ) -> Result<Vec<Result<(), QueueError>>, QueueError> {
        let receipts: Vec<_> = items.iter().map(|(_, r)| PopReceipt::decode(r)).collect();
        self.mutate(|st, wal, now| {
            let q = st.queue_mut(account, name)?;
            self.purge(q, now);
            let out = items
                .iter()
                .zip(receipts)
                .map(|((id, _), r)| self.delete_one(q, wal, id, &r?).map(|_| ()))
                .collect();
            Ok((out, wal.last_lsn()))
        })
        .await
    }

    /// Update Message: new visibility, optionally new text, new receipt.
    pub async fn update_message(
        &self,
        account: &str,
        name: &str,
        id: &str,
        pop_receipt: &str,
        visibility_timeout: Option<i64>,
        text: Option<String>,
    ) -> Result<UpdateReceipt, QueueError> {
        let receipt = PopReceipt::decode(pop_receipt)?;
        let vt = visibility_timeout.ok_or(QueueError::MissingRequiredQueryParameter {
            name: "visibilitytimeout",
        })?;
        let vt = check_range("visibilitytimeout", vt, 0, MAX_VISIBILITY_TIMEOUT_SECS)?;
        if let Some(t) = &text {
            check_text(t, self.cfg.max_message_bytes)?;
        }
        self.mutate(|st, wal, now| {
            let nonce = self.nonce();
            let q = st.queue_mut(account, name)?;
            self.purge(q, now);
            let seq = self.find_with_receipt(q, id, &receipt)?;
            let visible_ms = secs_after(now, vt);
            let m = q.get(seq).expect("found message exists").clone();
            if visible_ms > m.expires_ms {
                return Err(QueueError::InvalidQueryParameterValue {
                    name: "visibilitytimeout",
                    value: vt.to_string(),
                    reason: "The visibility timeout would extend past the message's expiration time.".into(),
                });
            }
            let before = self.next_visible_if_watched(q, now);
            let pos = match text {
                Some(text) => {
                    let mut next = m.clone();
                    next.visible_ms = visible_ms;
                    next.receipt = nonce;
                    self.replace(q, wal, &m, next, Rc::from(text.into_bytes()))?
                }
                None => {
                    let pos = wal.append(&Record::MessageVisibility {
                        qid: q.qid,
                        seq,
                        visible_ms,
                        receipt: nonce,
                    })?;
                    q.set_visibility(seq, visible_ms, nonce, None);
                    pos
                }
            };
            q.last_lsn = pos.lsn;
            self.poke(q, now, before);
            Ok((
                UpdateReceipt {
                    pop_receipt: PopReceipt { nonce, seq }.encode(),
                    visible_ms,
                },
                pos.lsn,
            ))
        })
        .await
    }

    pub async fn clear_messages(&self, account: &str, name: &str) -> Result<(), QueueError> {
        self.mutate(|st, wal, _| {
            let q = st.queue_mut(account, name)?;
            let pos = wal.append(&Record::QueueCleared { qid: q.qid })?;
            q.last_lsn = pos.lsn;
            let cleared = q.take_all();
            st.push_cleared(cleared);
            Ok(((), pos.lsn))
        })
        .await
    }

    // ----- inspection -----

    /// Messages of cleared or deleted queues that maintenance released
    /// (their memory freed) since the last call; the count restarts at 0.
    /// The server exports the count (`hematite_messages_released_total`).
    pub fn take_released(&self) -> u64 {
        self.released.take()
    }

    /// What the shard's group commits did since it opened.
    pub fn commit_stats(&self) -> crate::wal::CommitStats {
        self.wal.commit_stats()
    }

    pub fn segment_stats(&self) -> Vec<SegmentStat> {
        self.wal.segment_stats()
    }

    pub fn cache_stats(&self) -> (u64, u64, usize) {
        let c = self.cache.borrow();
        (c.hits, c.misses, c.bytes())
    }

    /// Queues and messages on this shard, and the `top` deepest queues as
    /// (account, queue, approximate message count), deepest first: what the
    /// operator's metrics show, bounded however many queues there are.
    pub fn queue_depths(&self, top: usize) -> (u64, u64, Vec<(String, String, u64)>) {
        let st = self.st.borrow();
        let mut deepest: Vec<(String, String, u64)> = Vec::with_capacity(top.saturating_add(1));
        let mut messages = 0u64;
        for q in st.queues.values() {
            let len = q.len() as u64;
            messages = messages.saturating_add(len);
            if deepest.len() < top || deepest.last().is_some_and(|d| d.2 < len) {
                let at = deepest.partition_point(|d| d.2 >= len);
                deepest.insert(at, (q.account.clone(), q.name.clone(), len));
                deepest.truncate(top);
            }
        }
        (st.queues.len() as u64, messages, deepest)
    }

    /// Number of bodies in the cache.
    pub fn cache_len(&self) -> usize {
        self.cache.borrow().len()
    }

    /// Messages held in memory (expired ones not yet purged included): the
    /// cache may only hold bodies of these, which the simulator checks.
    pub fn message_count(&self) -> usize {
        let st = self.st.borrow();
        let cleared: usize = st.cleared.iter().map(Cleared::len).sum();
        st.queues.values().map(|q| q.len()).sum::<usize>() + cleared
    }

    /// The queues whose body-segment floor is above one of their bodies
    /// (`Queue::body_seg_floor`). Linear in the messages; for the simulator,
    /// which checks it in release builds too.
    pub fn queues_below_their_floor(&self) -> Vec<String> {
        let st = self.st.borrow();
        let mut bad: Vec<String> = st
            .queues
            .values()
            .filter(|q| !q.floor_holds())
            .map(|q| format!("{}/{}", q.account, q.name))
            .collect();
        bad.sort_unstable();
        bad
    }

    /// Every queue with every message and its text, in canonical order.
    /// Reads bodies from disk; meant for tests and tools, not the hot path.
    pub async fn dump(&self) -> Result<BTreeMap<(String, String), QueueDump>, QueueError> {
        self.settle(self.wal.last_lsn()).await?;
        let now = self.now();
        let mut pending = Vec::new();
        {
            let mut st = self.st.borrow_mut();
            for q in st.queues.values_mut() {
                self.purge(q, now);
                q.check_invariants();
            }
            // In name order, so the bodies load (and enter the cache) in the
            // same order on every run: a simulation seed replays exactly.
            let mut queues: Vec<&Queue> = st.queues.values().collect();
            queues.sort_unstable_by(|a, b| (&a.account, &a.name).cmp(&(&b.account, &b.name)));
            for q in queues {
                let mut msgs: Vec<Message> = q.messages().cloned().collect();
                msgs.sort_by_key(|m| (m.visible_ms, m.seq));
                let srcs = msgs.iter().map(|m| self.body_source(m.seq, q)).collect::<Vec<_>>();
                pending.push((
                    (q.account.clone(), q.name.clone()),
                    q.metadata.clone(),
                    q.acl.clone(),
                    msgs,
                    srcs,
                ));
            }
        }
        let mut out = BTreeMap::new();
        for (key, metadata, acl, msgs, srcs) in pending {
            let mut messages = Vec::with_capacity(msgs.len());
            for (m, src) in msgs.into_iter().zip(srcs) {
                messages.push((m, self.load(src).await?));
            }
            out.insert(
                key,
                QueueDump {
                    metadata,
                    acl,
                    messages,
                },
            );
        }
        Ok(out)
    }
}

/// What an empty Get Messages tells a long poll about its queue.
struct WaitHint {
    qid: u64,
    /// Messages this step set aside for the dead-letter queue.
    set_aside: usize,
    /// When the next invisible message becomes visible.
    next_visible: Option<u64>,
}

/// The messages a Get Messages takes, in visibility order: up to `n` to
/// deliver, and, when the queue has a dead-letter queue, those already
/// delivered `hematite_max_dequeue_count` times, to set aside instead (at
/// most MAX_DEAD_LETTERS_PER_GET). Deliverable messages behind more dead
/// ones than that are still found, within MAX_GET_SCAN visible messages,
/// so one request's work stays bounded.
fn pick(q: &Queue, now: u64, n: usize) -> (Vec<u64>, Vec<u64>) {
    let limit = q.attrs.redrive.as_ref().map(|r| r.max_dequeue_count);
    let (mut deliver, mut dead) = (Vec::with_capacity(n), Vec::new());
    // At most MAX_RESPONSE_TEXT_BYTES of text per answer, as Queue::visible
    // (the first message always goes).
    let mut text = 0usize;
    for seq in q.visible_seqs(now).take(MAX_GET_SCAN) {
        if deliver.len() == n {
            break;
        }
        let m = q.get(seq).expect("visible message exists");
        match limit {
            Some(k) if m.dequeue_count >= k => {
                if dead.len() < MAX_DEAD_LETTERS_PER_GET {
                    dead.push(seq);
                }
            }
            _ => {
                text = text.saturating_add(m.body.len as usize);
                if !deliver.is_empty() && text > MAX_RESPONSE_TEXT_BYTES {
                    break;
                }
                deliver.push(seq);
            }
        }
    }
    (deliver, dead)
}

/// Put Message's `visibilitytimeout` (default 0) and `messagettl` (default
/// seven days; -1 for never), checked as the service checks them.
fn check_put_times(visibility_timeout: Option<i64>, ttl: Option<i64>) -> Result<(i64, i64), QueueError> {
    let vt = check_range(
        "visibilitytimeout",
        visibility_timeout.unwrap_or(0),
        0,
        MAX_VISIBILITY_TIMEOUT_SECS,
    )?;
    let ttl = ttl.unwrap_or(DEFAULT_MESSAGE_TTL_SECS);
    if ttl != -1 && !(1..=MAX_MESSAGE_TTL_SECS).contains(&ttl) {
        return Err(QueueError::InvalidQueryParameterValue {
            name: "messagettl",
            value: ttl.to_string(),
            reason: "Value must be greater than or equal to 1, or -1 to indicate an infinite TTL.".into(),
        });
    }
    if ttl != -1 && vt >= ttl {
        return Err(QueueError::InvalidQueryParameterValue {
            name: "visibilitytimeout",
            value: vt.to_string(),
            reason: "messagettl must be greater than visibilitytimeout.".into(),
        });
    }
    Ok((vt, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::disk::sim::SimDisk;
    use futures::executor::block_on;

    #[test]
    fn a_definition_that_cannot_be_appended_leaves_the_queue_unchanged() {
        block_on(async {
            let clock = Rc::new(ManualClock::new(1_800_000_000_000));
            let s = Shard::open(SimDisk::new(), ShardConfig::new(0), clock).await.unwrap();
            s.create_queue("acct", "que", Metadata::default()).await.unwrap();
            // Past validation (which refuses it), straight to redefine: the
            // record cannot be encoded, so the append fails.
            let huge = SignedIdentifier {
                id: "p".into(),
                permission: Some("r".repeat(70_000)),
                ..Default::default()
            };
            let r = s.redefine("acct", "que", |_, acl| *acl = vec![huge]).await;
            assert!(matches!(r, Err(QueueError::Internal { .. })), "{r:?}");
            assert!(
                s.get_acl("acct", "que").await.unwrap().is_empty(),
                "memory changed without a record"
            );
        });
    }
}
