//! A shard's segmented write-ahead log: framing ([`frame`]), records
//! ([`record`]), group commit (this file) and recovery ([`recovery`]).
//!
//! Owned by one shard, on one core. State sits in a `RefCell` because
//! requests interleave at await points on that core; nothing here is shared
//! across cores.
//!
//! Write protocol (docs/STORAGE_FORMAT.md, "Commit protocol"):
//! 1. [`Wal::reserve`] makes sure the next segment exists *before* a mutation
//!    is applied, so running out of space refuses a request instead of
//!    poisoning the shard ([`Wal::ready_to_append`] answers `true` when it
//!    would have nothing to do).
//! 2. [`Wal::append`] frames the record into the open batch and returns its
//!    final position; the caller applies the mutation to memory right away,
//!    so memory and log order agree.
//! 3. [`Wal::wait_durable`] returns once an fdatasync covers the record. The
//!    first waiter to find no commit running becomes the leader and writes
//!    and syncs the oldest batch for everyone (raft-engine's write barrier).
//!    A waiter the commit in flight covers waits for its end; a waiter it
//!    does not cover waits to lead the next one, and when a commit ends one
//!    of those is woken *before* the covered waiters, so the next commit is
//!    under way while they send their answers (see [`Wal::lead_commit`]).

pub mod frame;
pub mod record;
pub mod recovery;
pub mod stats;
mod wakeups;

use crate::disk::{write_then_sync, CommitIoError, Disk, DiskFile};
use crate::error::StorageError;
use crate::limits::*;
use frame::{check_header, encode_frame, HeaderCheck, SegmentHeader, FRAME_HEADER_LEN};
use record::Record;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};
use wakeups::Wakeups;

pub use recovery::{RecoveryMode, RecoveryReport};
pub use stats::CommitStats;

/// Bytes of the commit marker frame at the start of every batch.
const COMMIT_FRAME_LEN: usize = FRAME_HEADER_LEN + 8;

pub fn segment_name(seq: u64) -> String {
    format!("{seq:020}.wal")
}

pub fn parse_segment_name(name: &str) -> Option<u64> {
    parse_numbered(name.strip_suffix(".wal")?)
}

/// The name a dead segment's file takes while it waits to be reused. Not a
/// segment name, so recovery never reads it as part of the log.
fn spare_name(seq: u64) -> String {
    format!("{seq:020}.spare")
}

fn parse_spare_name(name: &str) -> Option<u64> {
    parse_numbered(name.strip_suffix(".spare")?)
}

/// The name a dead segment's file takes while it is cut down and deleted
/// (no room for another spare). Neither a segment nor a spare: recovery
/// never reads it and a restart deletes it.
fn discard_name(seq: u64) -> String {
    format!("{seq:020}.discard")
}

fn parse_discard_name(name: &str) -> Option<u64> {
    parse_numbered(name.strip_suffix(".discard")?)
}

/// A random salt whose checksum seed is not `old`.
fn fresh_salt(old: Option<u32>) -> u64 {
    loop {
        let salt: u64 = rand::random();
        if Some(frame::seed_of(salt)) != old {
            return salt;
        }
    }
}

fn parse_numbered(stem: &str) -> Option<u64> {
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit())).then(|| stem.parse().ok())?
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Writes and syncs a SEGMENT_END frame at `at`: the one way a segment is
/// sealed, by the writer at a rotation and by recovery at the tail.
/// `next_lsn` is the rotation's promise (the LSN of the next segment's first
/// commit, already durable), or 0 for a recovery seal, which promises
/// nothing. Returns the aligned length written.
pub(crate) async fn write_seal<F: DiskFile>(
    file: &F,
    header: &SegmentHeader,
    at: u64,
    lsn: u64,
    next_lsn: u64,
) -> std::io::Result<u64> {
    let align = u64::from(header.alignment);
    debug_assert_eq!(at % align, 0, "a seal starts at a commit boundary");
    let mut body = Vec::with_capacity(8);
    Record::SegmentEnd { next_lsn }
        .encode(&mut body)
        .map_err(|e| std::io::Error::other(e.0))?;
    let mut buf = Vec::with_capacity(align as usize);
    encode_frame(&mut buf, header.seed(), record::kind::SEGMENT_END, lsn, &body);
    buf.resize(align_up(buf.len() as u64, align) as usize, 0);
    // Errors pass through unwrapped: their OS code is what turns ENOSPC
    // into `StorageError::NoSpace` for the caller.
    file.write_at(&buf, at).await?;
    file.sync().await?;
    Ok(buf.len() as u64)
}

#[derive(Debug, Clone, Copy)]
pub struct WalConfig {
    pub shard_id: u32,
    /// The writer rotates once a segment holds this many bytes.
    pub segment_bytes: u64,
    pub recovery: RecoveryMode,
    /// Largest record body the writer appends (`limits::max_append_body` of
    /// the shard's message size). Rotation keeps this much room free, and
    /// the segment must be at least `limits::min_segment_bytes` of it.
    /// Reading is bounded by `MAX_RECORD_BODY` instead, whatever this is.
    pub max_append_body: usize,
    /// Write zeros into the prepared segment before the writer gets there,
    /// paced by the writer, so that commits overwrite written blocks
    /// instead of converting unwritten extents (an fdatasync into those
    /// also writes the extent change: 1.6-2x the cost, docs/machine.md).
    /// Off where blocks cost nothing to convert (memory, the simulator's
    /// default), since the zeros would only be memory.
    pub zero_ahead: bool,
    /// A group commit taking at least this long is logged with its split
    /// (`SLOW_COMMIT_MS` by default).
    pub slow_commit: Duration,
}

impl WalConfig {
    pub fn new(shard_id: u32) -> Self {
        WalConfig {
            shard_id,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            recovery: RecoveryMode::Strict,
            max_append_body: MAX_APPEND_BODY,
            zero_ahead: false,
            slow_commit: Duration::from_millis(SLOW_COMMIT_MS),
        }
    }
}

/// Where a record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordPos {
    pub lsn: u64,
    pub seg: u64,
    pub frame_offset: u64,
    pub frame_len: u32,
}

/// A segment as the writer and compaction see it.
pub(crate) struct Segment<F> {
    file: Rc<F>,
    header: SegmentHeader,
    /// Bytes in use (aligned end of the last batch placed in it).
    end: u64,
    sealed: bool,
    /// Records in this segment that current state still needs.
    live_records: u64,
    live_bytes: u64,
}

impl<F> Segment<F> {
    /// A segment recovery kept: sealed (never appended to again), its
    /// records not yet pinned (replay pins what current state needs).
    fn recovered(file: F, header: SegmentHeader, end: u64) -> Self {
        Segment {
            file: Rc::new(file),
            header,
            end,
            sealed: true,
            live_records: 0,
            live_bytes: 0,
        }
    }
}

/// Space accounting of one segment, for compaction and operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStat {
    pub seq: u64,
    pub bytes: u64,
    pub live_records: u64,
    pub live_bytes: u64,
    pub sealed: bool,
}

/// Records waiting for the next group commit.
struct Batch {
    seg: u64,
    base: u64,
    seed: u32,
    /// Set when the batch opens a new segment: the previous segment must be
    /// sealed first with a SEGMENT_END frame at `(prev_seg, at)` with `lsn`.
    seal: Option<Seal>,
    marker_lsn: u64,
    last_lsn: u64,
    records: u32,
    buf: Vec<u8>,
    closed: bool,
}

#[derive(Clone, Copy)]
struct Seal {
    seg: u64,
    at: u64,
    lsn: u64,
}

struct State<F> {
    segments: BTreeMap<u64, Segment<F>>,
    /// A created, durable, empty segment waiting to be rotated into.
    prepared: Option<Segment<F>>,
    preparing: bool,
    /// How far from its start the prepared segment's blocks are written
    /// (the whole segment for a reused one, the header for a new one);
    /// `zero_ahead` writes zeros up to where the writer is soon to come.
    zeroed_to: u64,
    /// The segment a zero write is in flight to: the writer does not write
    /// into it until that write is done, so no zero can land over a commit.
    zeroing: Option<u64>,
    /// Where the next batch goes: the newest segment and its aligned end.
    tail_seg: u64,
    tail_end: u64,
    batches: VecDeque<Batch>,
    next_lsn: u64,
    durable_lsn: u64,
    committing: bool,
    /// The last LSN of the commit in flight (meaningful while `committing`).
    committing_upto: u64,
    poisoned: Option<String>,
    alignment: u64,
    commits: u64,
    stats: CommitStats,
    /// Buffers of written batches, kept for the next ones.
    spare: Vec<Vec<u8>>,
    /// Files of dead segments, renamed to their spare name (durably), to be
    /// reused by the next segments (at most `MAX_SPARE_SEGMENTS`).
    spare_files: Vec<SpareFile<F>>,
    /// Files of dead segments with no room among the spares, renamed to
    /// their discard name (durably), cut down a slice at a time by
    /// `shrink_discarded` and then deleted.
    discarded: Vec<Discarded<F>>,
    /// Where a record's body is encoded before it is framed (reused).
    scratch: Vec<u8>,
}

/// A dead segment's file being cut down before it is deleted: a spare
/// under another name (one not cut yet may still be reused as a spare),
/// cut only once no reader holds it, so no read comes up short.
struct Discarded<F> {
    file: SpareFile<F>,
    /// Bytes it still holds.
    len: u64,
}

/// A dead segment's file waiting to be reused.
struct SpareFile<F> {
    name: String,
    /// Shared with readers that opened the segment while it was live: the
    /// file is reused only once they are all gone.
    file: Rc<F>,
    /// The checksum seed of the segment it held last: the next one must
    /// differ, or that segment's frames would validate again (a CRC's
    /// starting value shifts every checksum by the same amount, so two
    /// segments with one seed accept each other's frames).
    seed: u32,
}

impl<F> SpareFile<F> {
    /// No reader holds the file any more: it may be reused or cut.
    fn unheld(&self) -> bool {
        Rc::strong_count(&self.file) == 1
    }
}

/// The log. See the module docs for the protocol.
pub struct Wal<D: Disk> {
    disk: D,
    cfg: WalConfig,
    st: RefCell<State<D::File>>,
    /// Fired after every commit attempt and every segment preparation.
    changed: Wakeups,
    /// Waiters the commit in flight does not cover: one not yet woken is
    /// woken to lead when a commit ends; when a commit starts, all of them
    /// are moved to `changed` if it covers every LSN appended, or else
    /// woken (to wait on `changed` if it covers them); all are woken if the
    /// log is poisoned. `changed` is woken only by `wake_all`, as
    /// [`Wakeups::hand_over_to`] requires. A
    /// waiter woken to lead that is dropped before it runs passes that
    /// wake-up on to one not yet woken ([`wakeups`]), so the role is never
    /// lost with a task.
    next_leader: Wakeups,
    /// Fired when a zero write ends: a commit into that segment waits for it.
    zero_done: Wakeups,
    /// `ZERO_STEP_BYTES` of zeros when `cfg.zero_ahead`, else empty.
    zeros: Box<[u8]>,
}

/// Held by a step of the log's I/O (a group commit, a segment's
/// preparation, a zero write) while it is in flight. Dropped before
/// [`PoisonIfCancelled::disarm`], the step's future was cancelled mid-I/O
/// and what reached the disk is unknown: the log is poisoned first, so
/// that anyone woken from here on finds it poisoned whatever its waker
/// does, and then `reset` clears the in-flight mark the step set, so no one
/// waits on it for good.
struct PoisonIfCancelled<'a, D: Disk> {
    wal: &'a Wal<D>,
    why: &'static str,
    reset: fn(&Wal<D>),
    armed: bool,
}

impl<'a, D: Disk> PoisonIfCancelled<'a, D> {
    fn new(wal: &'a Wal<D>, why: &'static str, reset: fn(&Wal<D>)) -> Self {
        PoisonIfCancelled {
            wal,
            why,
            reset,
            armed: true,
        }
    }

    /// The step's I/O ended, well or not: nothing to undo on drop.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl<D: Disk> Drop for PoisonIfCancelled<'_, D> {
    fn drop(&mut self) {
        if self.armed {
            self.wal.poison(self.why.into());
            (self.reset)(self.wal);
        }
    }
}

impl<D: Disk> Wal<D> {
    /// Recovers the log in `disk`, feeding every durable record to `apply` in
    /// LSN order, then opens a fresh segment for new writes.
    pub async fn open(
        disk: D,
        cfg: WalConfig,
        now_ms: u64,
        apply: &mut dyn FnMut(Record, RecordPos),
    ) -> Result<(Self, RecoveryReport), StorageError> {
        let min = min_segment_bytes(cfg.max_append_body);
        assert!(
            cfg.segment_bytes >= min && cfg.max_append_body <= MAX_RECORD_BODY,
            "segment size below {min}, or records above {MAX_RECORD_BODY} bytes"
        );
        let rec = recovery::recover(&disk, cfg, apply).await?;
        let wal = Wal {
            disk,
            cfg,
            st: RefCell::new(State {
                segments: rec.segments,
                prepared: None,
                preparing: false,
                zeroed_to: 0,
                zeroing: None,
                tail_seg: rec.next_seq - 1,
                tail_end: SEGMENT_HEADER_LEN,
                batches: VecDeque::new(),
                next_lsn: rec.next_lsn,
                durable_lsn: rec.next_lsn - 1,
                committing: false,
                committing_upto: 0,
                poisoned: None,
                alignment: 512,
                commits: 0,
                stats: CommitStats::default(),
                spare: Vec::new(),
                spare_files: Vec::new(),
                discarded: Vec::new(),
                scratch: Vec::new(),
            }),
            changed: Wakeups::default(),
            next_leader: Wakeups::default(),
            zero_done: Wakeups::default(),
            zeros: vec![0u8; if cfg.zero_ahead { ZERO_STEP_BYTES as usize } else { 0 }].into_boxed_slice(),
        };
        wal.adopt_spares(rec.next_lsn == 1).await?;
        // Every start writes into a segment of its own: a recovered segment is
        // sealed and never appended to again.
        wal.prepare(now_ms).await?;
        let mut st = wal.st.borrow_mut();
        let seg = st.prepared.take().expect("just prepared");
        st.alignment = seg.file.alignment();
        st.tail_seg = seg.header.seq;
        st.tail_end = SEGMENT_HEADER_LEN;
        st.segments.insert(seg.header.seq, seg);
        drop(st);
        Ok((wal, rec.report))
    }

    /// Raises the writer's record limit to `max_append_body` (never lowers
    /// it): for records already in the log that compaction must be able to
    /// rewrite. Call before any append, with a segment size that fits it.
    pub(crate) fn keep_room_for(&mut self, max_append_body: usize) {
        let body = max_append_body.min(MAX_RECORD_BODY);
        debug_assert!(self.cfg.segment_bytes >= min_segment_bytes(body));
        self.cfg.max_append_body = self.cfg.max_append_body.max(body);
    }

    pub fn durable_lsn(&self) -> u64 {
        self.st.borrow().durable_lsn
    }

    /// The LSN of the newest appended record.
    pub fn last_lsn(&self) -> u64 {
        self.st.borrow().next_lsn - 1
    }

    /// Why the log refuses writes, once an I/O failure poisoned it.
    pub fn poisoned(&self) -> Option<String> {
        self.st.borrow().poisoned.clone()
    }

    /// What the group commits did since open.
    pub fn commit_stats(&self) -> CommitStats {
        self.st.borrow().stats.clone()
    }

    /// Number of group commits (write + fdatasync) done since open.
    pub fn commits(&self) -> u64 {
        self.st.borrow().commits
    }

    fn poison(&self, why: String) {
        let mut st = self.st.borrow_mut();
        if st.poisoned.is_none() {
            tracing::error!(shard = self.cfg.shard_id, "WAL poisoned: {why}");
            st.poisoned = Some(why);
        }
        drop(st);
        self.changed.wake_all();
        self.next_leader.wake_all();
    }

    /// Does `len` more bytes from `base` stay within the segment, leaving
    /// room for its SEGMENT_END? Batches never cross a segment's end, so
    /// every write lands in the space fallocated when the segment was made.
    fn fits(&self, st: &State<D::File>, base: u64, len: usize) -> bool {
        let usable = self.cfg.segment_bytes.saturating_sub(st.alignment);
        align_up(base + len as u64, st.alignment) <= usable
    }

    /// Could the next appends (one record of any size, and a clock record
    /// beside it) have to open a new segment?
    fn rotation_due(&self, st: &State<D::File>) -> bool {
        let end = match st.batches.back() {
            Some(b) if !b.closed => b.base + b.buf.len() as u64,
            _ => st.tail_end,
        };
        !self.fits(
            st,
            end,
            COMMIT_FRAME_LEN + 2 * FRAME_HEADER_LEN + self.cfg.max_append_body + 8,
        )
    }

    /// Ensures the next [`Wal::append`] can place its record (and one clock
    /// record): refuses when poisoned, and creates the next segment if a
    /// rotation could be needed.
    pub async fn reserve(&self, now_ms: u64) -> Result<(), StorageError> {
        loop {
            if self.ready_to_append()? {
                return Ok(());
            }
            let wait = self.st.borrow().preparing.then(|| self.changed.listen());
            match wait {
                Some(listener) => listener.await,
                // Boxed, as the commit is in `wait_durable`: a rare step
                // whose state would otherwise sit in every mutation's future.
                None => Box::pin(self.prepare(now_ms)).await?,
            }
        }
    }

    /// Whether [`Wal::reserve`] would return at once: the log is not
    /// poisoned (an error if it is) and the next append needs no new
    /// segment, or has one ready. A caller that sees `true` skips the
    /// reservation's await, and with it a second reading of the clock; it
    /// must then append with no await in between, as after `reserve`.
    pub fn ready_to_append(&self) -> Result<bool, StorageError> {
        let st = self.st.borrow();
        if let Some(why) = &st.poisoned {
            return Err(StorageError::Poisoned(why.clone()));
        }
        Ok(!self.rotation_due(&st) || st.prepared.is_some())
    }

    /// Creates the next segment durably: file (a spare one if there is one),
    /// preallocation, header, fdatasync, directory fsync. Only then may
    /// records go into it.
    async fn prepare(&self, now_ms: u64) -> Result<(), StorageError> {
        let (seq, base_lsn, spare) = {
            let mut st = self.st.borrow_mut();
            if st.prepared.is_some() || st.preparing {
                return Ok(());
            }
            st.preparing = true;
            (
                st.tail_seg + 1,
                st.next_lsn,
                Self::take_spare(&mut st, self.cfg.segment_bytes),
            )
        };
        // Dropped mid-I/O, this would leave `preparing` set and every later
        // rotation waiting on `changed` for good; poisoning wakes the
        // waiters, and they see it.
        let mut guard = PoisonIfCancelled::new(self, "a segment's preparation was cancelled mid-write", |wal| {
            wal.st.borrow_mut().preparing = false;
        });
        let name = segment_name(seq);
        let started = Instant::now();
        let recycled = spare.is_some();
        let result = self.make_segment(&name, seq, base_lsn, now_ms, spare).await;
        guard.disarm();
        tracing::debug!(
            shard = self.cfg.shard_id,
            ms = started.elapsed().as_millis() as u64,
            recycled,
            "prepared segment {name}"
        );
        let mut st = self.st.borrow_mut();
        st.preparing = false;
        let out = match result {
            Ok((file, header)) => {
                st.zeroed_to = if recycled || !self.cfg.zero_ahead {
                    self.cfg.segment_bytes
                } else {
                    SEGMENT_HEADER_LEN
                };
                st.prepared = Some(Segment {
                    file,
                    header,
                    end: SEGMENT_HEADER_LEN,
                    sealed: false,
                    live_records: 0,
                    live_bytes: 0,
                });
                Ok(())
            }
            Err(e) => Err(e),
        };
        drop(st);
        self.changed.wake_all();
        out
    }

    /// The file of segment `name`, durable and empty: a new one (created and
    /// preallocated) or a spare (every spare is a whole segment long: a dead
    /// segment of this run, or checked when adopted at startup). Its header
    /// is written and synced *before* a spare takes the segment's name, so
    /// the name never shows the old segment's header (the old frames behind
    /// it do not validate under the new salt); then the directory is synced.
    /// A reused file is opened again by its new name: a handle resolves some
    /// calls (glommio's file_size) by the name it was opened with. On
    /// failure the file is removed under either name.
    async fn make_segment(
        &self,
        name: &str,
        seq: u64,
        base_lsn: u64,
        now_ms: u64,
        spare: Option<SpareFile<D::File>>,
    ) -> Result<(Rc<D::File>, SegmentHeader), StorageError> {
        let io = |e| StorageError::io(self.disk.describe(name), e);
        let (file, from, old_seed) = match spare {
            Some(s) => {
                debug_assert!(s.unheld(), "a spare in use by a reader");
                (s.file, Some(s.name), Some(s.seed))
            }
            None => (Rc::new(self.disk.create(name).await.map_err(io)?), None, None),
        };
        let header = SegmentHeader {
            alignment: file.alignment() as u32,
            shard_id: self.cfg.shard_id,
            seq,
            base_lsn,
            salt: fresh_salt(old_seed),
            created_ms: now_ms,
            recycled: from.is_some(),
        };
        let made = async {
            if from.is_none() {
                file.allocate(self.cfg.segment_bytes).await?;
            }
            file.write_at(&header.encode(), 0).await?;
            file.sync().await?;
            if let Some(from) = &from {
                self.disk.rename(from, name).await?;
            }
            self.disk.sync_dir().await?;
            match from {
                Some(_) => Ok(Rc::new(self.disk.open(name).await?)),
                None => Ok(file),
            }
        }
        .await;
        match made {
            Ok(file) => Ok((file, header)),
            Err(e) => {
                if let Some(from) = &from {
                    let _ = self.disk.remove(from).await;
                }
                let _ = self.disk.remove(name).await;
                Err(io(e))
            }
        }
    }

    /// A spare file no reader holds any more, if there is one; else a
    /// discarded segment not cut yet (a whole segment's file, as good as a
    /// spare, and on a full disk the only space there is).
    fn take_spare(st: &mut State<D::File>, segment_bytes: u64) -> Option<SpareFile<D::File>> {
        if let Some(i) = st.spare_files.iter().position(SpareFile::unheld) {
            return Some(st.spare_files.swap_remove(i));
        }
        let i = st
            .discarded
            .iter()
            .position(|d| d.file.unheld() && d.len >= segment_bytes)?;
        Some(st.discarded.swap_remove(i).file)
    }

    /// Takes up the spare files a previous run left (up to
    /// `MAX_SPARE_SEGMENTS`; the rest are deleted). `log_is_empty`: recovery
    /// found no record, so LSNs start again from the bottom and a spare's
    /// old frames could carry LSNs the new segments will use: such spares
    /// are deleted too. (With any record left, the log's LSNs already lie
    /// above every frame in a spare, which died before the segments that
    /// remain were made, and a segment accepts only LSNs from its base up.)
    async fn adopt_spares(&self, log_is_empty: bool) -> Result<(), StorageError> {
        let names = self
            .disk
            .list()
            .await
            .map_err(|e| StorageError::io(self.disk.describe("."), e))?;
        let (discards, names): (Vec<String>, Vec<String>) = names
            .into_iter()
            .filter(|n| parse_spare_name(n).is_some() || parse_discard_name(n).is_some())
            .partition(|n| parse_discard_name(n).is_some());
        let mut names = names;
        names.sort();
        let mut removed = false;
        // A previous run's discarded segments, however far it cut them.
        for name in discards {
            let io = |e| StorageError::io(self.disk.describe(&name), e);
            self.disk.remove(&name).await.map_err(io)?;
            removed = true;
        }
        for name in names {
            let io = |e| StorageError::io(self.disk.describe(&name), e);
            let wanted =
                !log_is_empty && self.disk.keeps_spares() && self.st.borrow().spare_files.len() < MAX_SPARE_SEGMENTS;
            let file = self.disk.open(&name).await.map_err(io)?;
            // Only whole segments, with a header to learn the old seed from.
            let seed = if wanted && file.size().await.map_err(io)? >= self.cfg.segment_bytes {
                let head = file.read_at(0, SEGMENT_HEADER_LEN as usize).await.map_err(io)?;
                SegmentHeader::decode(&head).ok().map(|h| h.seed())
            } else {
                None
            };
            match seed {
                Some(seed) => self.st.borrow_mut().spare_files.push(SpareFile {
                    name,
                    file: Rc::new(file),
                    seed,
                }),
                None => {
                    drop(file);
                    self.disk.remove(&name).await.map_err(io)?;
                    removed = true;
                }
            }
        }
        if removed {
            self.disk
                .sync_dir()
                .await
                .map_err(|e| StorageError::io(self.disk.describe("."), e))?;
        }
        Ok(())
    }

    /// Frames `rec` into the open batch and returns where it will be on disk.
    /// Call [`Wal::reserve`] first (or see [`Wal::ready_to_append`] answer
    /// `true`), with no await in between. A record that
    /// cannot be encoded is refused here and nothing is appended.
    pub fn append(&self, rec: &Record) -> Result<RecordPos, StorageError> {
        let mut st = self.st.borrow_mut();
        if let Some(why) = &st.poisoned {
            return Err(StorageError::Poisoned(why.clone()));
        }
        let mut body = std::mem::take(&mut st.scratch);
        body.clear();
        let out = match rec.encode(&mut body) {
            Ok(()) => self.place(&mut st, rec.kind(), &body),
            Err(e) => Err(StorageError::Unencodable(e.0)),
        };
        st.scratch = body;
        out
    }

    fn place(&self, st: &mut State<D::File>, kind: u8, body: &[u8]) -> Result<RecordPos, StorageError> {
        if body.len() > self.cfg.max_append_body {
            return Err(StorageError::Unencodable(format!(
                "a record body of {} bytes exceeds the {}-byte limit",
                body.len(),
                self.cfg.max_append_body
            )));
        }
        let frame_len = FRAME_HEADER_LEN + body.len();
        let need_new = match st.batches.back() {
            Some(b) => b.closed || b.buf.len() >= MAX_COMMIT_BYTES || !self.fits(st, b.base, b.buf.len() + frame_len),
            None => true,
        };
        if need_new {
            Self::close_open_batch(st);
            let rotate = !self.fits(st, st.tail_end, COMMIT_FRAME_LEN + frame_len);
            self.open_batch(st, rotate)?;
        }
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        let Some(b) = st.batches.back_mut() else {
            unreachable!("a batch was just opened");
        };
        let frame_offset = b.base + b.buf.len() as u64;
        encode_frame(&mut b.buf, b.seed, kind, lsn, body);
        b.last_lsn = lsn;
        b.records += 1;
        debug_assert!(
            b.base + b.buf.len() as u64 <= self.cfg.segment_bytes,
            "a batch crosses its segment's end"
        );
        Ok(RecordPos {
            lsn,
            seg: b.seg,
            frame_offset,
            frame_len: frame_len as u32,
        })
    }

    /// Closes the open batch, if any: its padded size fixes where the next starts.
    fn close_open_batch(st: &mut State<D::File>) {
        let align = st.alignment;
        if let Some(b) = st.batches.back_mut().filter(|b| !b.closed) {
            b.closed = true;
            st.tail_end = align_up(b.base + b.buf.len() as u64, align);
        }
    }

    fn open_batch(&self, st: &mut State<D::File>, rotate: bool) -> Result<(), StorageError> {
        let mut seal = None;
        if rotate {
            let seg = st.prepared.take().ok_or_else(|| {
                StorageError::Poisoned("internal: rotation without a prepared segment (reserve not called)".into())
            })?;
            seal = Some(Seal {
                seg: st.tail_seg,
                at: st.tail_end,
                lsn: st.next_lsn,
            });
            st.next_lsn += 1;
            assert_eq!(seg.header.seq, st.tail_seg + 1, "segments rotate in sequence");
            st.tail_seg = seg.header.seq;
            st.tail_end = SEGMENT_HEADER_LEN;
            st.segments.insert(seg.header.seq, seg);
        }
        let seg = &st.segments[&st.tail_seg];
        let seed = seg.header.seed();
        let marker_lsn = st.next_lsn;
        st.next_lsn += 1;
        // Reuse a written batch's buffer: no allocation per commit.
        let mut buf = st.spare.pop().unwrap_or_else(|| Vec::with_capacity(64 * 1024));
        buf.clear();
        buf.resize(COMMIT_FRAME_LEN, 0);
        st.batches.push_back(Batch {
            seg: st.tail_seg,
            base: st.tail_end,
            seed,
            seal,
            marker_lsn,
            last_lsn: marker_lsn,
            records: 0,
            buf,
            closed: false,
        });
        Ok(())
    }

    /// Returns once `lsn` is durable, leading group commits as needed.
    pub async fn wait_durable(&self, lsn: u64) -> Result<(), StorageError> {
        // A wait for an LSN never appended would hang while commits run
        // (and panic below only once none does): refuse it at the door.
        assert!(
            lsn <= self.last_lsn(),
            "waiting for LSN {lsn}, but the last appended is {}",
            self.last_lsn()
        );
        loop {
            let step = {
                let mut st = self.st.borrow_mut();
                if st.durable_lsn >= lsn {
                    return Ok(());
                }
                if let Some(why) = &st.poisoned {
                    return Err(StorageError::Poisoned(why.clone()));
                }
                if st.committing {
                    // Covered by the commit in flight: wait for its end.
                    // Not covered: wait to be chosen to lead the next one.
                    if lsn <= st.committing_upto {
                        Err(self.changed.listen())
                    } else {
                        Err(self.next_leader.listen())
                    }
                } else {
                    if st.batches.len() == 1 {
                        Self::close_open_batch(&mut st);
                    }
                    let Some(batch) = st.batches.pop_front() else {
                        panic!("lsn {lsn} is not durable ({}) and no batch holds it", st.durable_lsn);
                    };
                    debug_assert!(batch.closed, "only closed batches are written");
                    debug_assert!(batch.last_lsn > st.durable_lsn, "a batch is written once");
                    st.committing = true;
                    st.committing_upto = batch.last_lsn;
                    // Every waiter's LSN was appended, so when this batch
                    // ends at the last LSN appended, it covers them all.
                    let covers_all = st.next_lsn - 1 == batch.last_lsn;
                    Ok((batch, covers_all))
                }
            };
            let listener = match step {
                Ok((batch, covers_all)) => {
                    // Whoever waited to lead now waits for this commit's
                    // end if it covers them, or again to lead the one
                    // after. When it covers all of them (the usual case:
                    // the open batch was just closed), they are moved to
                    // `changed` unwoken; otherwise each is woken to check,
                    // so the ones it does not cover stay in `next_leader`,
                    // where the earliest is woken first when it ends.
                    if covers_all {
                        self.next_leader.hand_over_to(&self.changed);
                    } else {
                        self.next_leader.wake_all();
                    }
                    // Boxed: one allocation per group commit keeps the
                    // commit's state (1,368 bytes of futures down to the
                    // blocking pool, by `-Zprint-type-sizes`) out of every
                    // mutation's future, and so out of every connection's;
                    // a test bounds the size (docs/benchmarks.md, "Whole-
                    // program optimization and smaller futures").
                    Box::pin(self.lead_commit(batch)).await;
                    continue;
                }
                Err(listener) => listener,
            };
            // Registering and the checks above run with no await between
            // them, so this cannot fire today; it keeps a wake-up from being
            // lost if an await ever comes between them.
            {
                let st = self.st.borrow();
                if st.durable_lsn >= lsn || st.poisoned.is_some() || !st.committing {
                    continue;
                }
            }
            listener.await;
        }
    }

    async fn lead_commit(&self, batch: Batch) {
        let mut guard = PoisonIfCancelled::new(self, "a group commit was cancelled mid-write", |wal| {
            wal.st.borrow_mut().committing = false;
        });
        let started = Instant::now();
        // Whether a zero write was in flight at any point of this commit (at
        // its start, or begun since): the device holds some commits' writes
        // for tens or hundreds of milliseconds, and the slow-commit line
        // says whether zeros were beside them (docs/benchmarks.md, "The
        // same minute on both servers").
        let zeros_before = {
            let st = self.st.borrow();
            (st.zeroing.is_some(), st.stats.zero_steps)
        };
        let result = self.write_batch(batch).await;
        guard.disarm();
        let took = started.elapsed();
        let mut st = self.st.borrow_mut();
        st.committing = false;
        st.stats.commits += 1;
        st.stats.total.record(took);
        // A failed commit poisons the log and says so itself; its split
        // was never recorded, so only successful commits are reported here.
        if took >= self.cfg.slow_commit && result.is_ok() {
            let (write, sync, records, sealed) = st.stats.last;
            let zeros_beside = zeros_before.0 || st.stats.zero_steps != zeros_before.1;
            tracing::warn!(
                shard = self.cfg.shard_id,
                ms = took.as_millis() as u64,
                write_us = write.as_micros() as u64,
                fdatasync_us = sync.as_micros() as u64,
                records,
                rotation = sealed,
                zeros_beside,
                "slow group commit"
            );
        }
        match result {
            Ok(last) => {
                debug_assert!(last > st.durable_lsn, "durable LSN must advance");
                st.durable_lsn = last;
                st.commits += 1;
                drop(st);
                // The next leader first: tasks run in the order they are
                // woken, so the next batch's write goes out before the
                // covered waiters send their answers, instead of after
                // them (docs/benchmarks.md, "Group commit on a busy core").
                // One *additional* waiter: one woken earlier and not yet
                // run may find its record durable by now and return
                // without leading, and must not stand for the waiter that
                // still needs a commit (the simulator's seed 0 deadlocked
                // with event-listener's plain `notify(1)`, which counts it).
                self.next_leader.wake_one_more();
                self.changed.wake_all();
            }
            Err(why) => {
                drop(st);
                self.poison(why);
            }
        }
    }

    async fn write_batch(&self, mut b: Batch) -> Result<u64, String> {
        // A zero write may still be in flight to a segment the writer has
        // just rotated into: it must land before the commit does.
        let mut waited = false;
        loop {
            let wait = (self.st.borrow().zeroing == Some(b.seg)).then(|| self.zero_done.listen());
            match wait {
                Some(l) => {
                    self.st.borrow_mut().stats.zero_waits += 1;
                    waited = true;
                    l.await;
                }
                None => break,
            }
        }
        // A zero write cancelled in flight poisons the log: it may still
        // land, so nothing may be written after it.
        if let Some(why) = self.st.borrow().poisoned.clone().filter(|_| waited) {
            return Err(why);
        }
        let (file, align) = {
            let st = self.st.borrow();
            (st.segments[&b.seg].file.clone(), st.alignment)
        };
        // Fill in the commit marker now that the batch is complete.
        let mut marker = Vec::with_capacity(COMMIT_FRAME_LEN);
        let mut body = Vec::with_capacity(8);
        Record::Commit {
            len: b.buf.len() as u32,
            records: b.records,
        }
        .encode(&mut body)
        .map_err(|e| e.0)?;
        encode_frame(&mut marker, b.seed, record::kind::COMMIT, b.marker_lsn, &body);
        debug_assert_eq!(marker.len(), COMMIT_FRAME_LEN);
        b.buf[..COMMIT_FRAME_LEN].copy_from_slice(&marker);
        let padded = align_up(b.buf.len() as u64, align) as usize;
        b.buf.resize(padded, 0);
        let io = if padded >= ONE_HOP_COMMIT_BYTES {
            let (buf, io) = file.write_and_sync_owned(std::mem::take(&mut b.buf), b.base).await;
            b.buf = buf;
            io
        } else {
            write_then_sync(&*file, &b.buf, b.base).await
        };
        // The segment's name is formatted only for an error: it was about
        // 1,600 instructions a commit.
        let took = io.map_err(|e| match e {
            CommitIoError::Write(e) => format!("{}: write at {} failed: {e}", segment_name(b.seg), b.base),
            CommitIoError::Sync(e) => format!("{}: fdatasync failed: {e}", segment_name(b.seg)),
        })?;
        {
            let mut st = self.st.borrow_mut();
            let stats = &mut st.stats;
            stats.write.record(took.write);
            stats.sync.record(took.sync);
            stats.last = (took.write, took.sync, b.records, b.seal.is_some());
            stats.one_job += u64::from(took.one_job);
            stats.records += u64::from(b.records);
            stats.bytes += padded as u64;
            stats.max_records = stats.max_records.max(u64::from(b.records));
        }
        // The previous segment is sealed only once the first commit of this
        // one is durable, and its SEGMENT_END names that commit: a sealed
        // segment thus proves its successor was used, so recovery can tell a
        // lost first commit from a segment that was prepared and never used
        // (docs/STORAGE_FORMAT.md, "Recovery"). Nothing is acknowledged
        // before the seal is durable too.
        if let Some(seal) = b.seal {
            let (old, header) = {
                let st = self.st.borrow();
                let s = &st.segments[&seal.seg];
                (s.file.clone(), s.header)
            };
            let sealed_len = write_seal(&*old, &header, seal.at, seal.lsn, b.marker_lsn)
                .await
                .map_err(|e| format!("sealing {}: {e}", segment_name(seal.seg)))?;
            let mut st = self.st.borrow_mut();
            let s = st.segments.get_mut(&seal.seg).expect("sealed segment exists");
            s.sealed = true;
            s.end = seal.at + sealed_len;
        }
        let mut st = self.st.borrow_mut();
        let s = st.segments.get_mut(&b.seg).expect("segment of a batch exists");
        s.end = s.end.max(b.base + padded as u64);
        if st.spare.len() < 4 && b.buf.capacity() <= 2 * MAX_COMMIT_BYTES {
            st.spare.push(b.buf);
        }
        Ok(b.last_lsn)
    }

    /// Marks a record in `seg` as needed by current state.
    pub fn pin(&self, seg: u64, bytes: u32) {
        let mut st = self.st.borrow_mut();
        let s = st
            .segments
            .get_mut(&seg)
            .expect("pinning a record in a missing segment");
        s.live_records += 1;
        s.live_bytes += bytes as u64;
    }

    /// The opposite of [`Wal::pin`].
    pub fn unpin(&self, seg: u64, bytes: u32) {
        let mut st = self.st.borrow_mut();
        let s = st
            .segments
            .get_mut(&seg)
            .expect("unpinning a record in a missing segment");
        assert!(
            s.live_records > 0 && s.live_bytes >= bytes as u64,
            "segment {seg} live count underflow"
        );
        s.live_records -= 1;
        s.live_bytes -= bytes as u64;
    }

    pub fn segment_stats(&self) -> Vec<SegmentStat> {
        let st = self.st.borrow();
        st.segments
            .iter()
            .map(|(&seq, s)| SegmentStat {
                seq,
                bytes: s.end,
                live_records: s.live_records,
                live_bytes: s.live_bytes,
                sealed: s.sealed,
            })
            .collect()
    }

    /// Deletes the oldest segment if it is sealed and nothing in it is live.
    /// Only the oldest may go: tombstones in a segment refer to records in
    /// older ones, so deleting out of order could resurrect deleted messages.
    pub async fn remove_oldest_if_dead(&self) -> Result<bool, StorageError> {
        let candidate = {
            let st = self.st.borrow();
            match st.segments.iter().next() {
                Some((&seq, s)) if s.sealed && s.live_records == 0 && seq != st.tail_seg => Some(seq),
                _ => None,
            }
        };
        let Some(seq) = candidate else { return Ok(false) };
        // The records that made it dead must be durable before it disappears.
        let last = self.last_lsn();
        self.wait_durable(last).await?;
        let (file, seed, room) = {
            let mut st = self.st.borrow_mut();
            let s = st
                .segments
                .remove(&seq)
                .expect("the candidate is still the oldest segment");
            assert!(s.live_records == 0 && s.sealed, "a dead sealed segment stays dead");
            let room = st.spare_files.len() < MAX_SPARE_SEGMENTS;
            (s.file, s.header.seed(), room)
        };
        let name = segment_name(seq);
        let io = |e| StorageError::io(self.disk.describe(&name), e);
        let started = Instant::now();
        // In memory a deletion frees memory at once and costs nothing more.
        if !self.disk.keeps_spares() {
            drop(file);
            self.disk.remove(&name).await.map_err(io)?;
            return Ok(true);
        }
        let len = file.size().await.map_err(io)?;
        // Only a whole segment is worth keeping: one made by a run with
        // smaller segments would grow past its reserved space when reused,
        // and a full disk would then fail a commit instead of a rotation.
        let keep = room && len >= self.cfg.segment_bytes;
        if keep {
            // Durable before the file is reused: a crash must never find the
            // segment's name on a file whose header was rewritten.
            let spare = spare_name(seq);
            self.disk.rename(&name, &spare).await.map_err(io)?;
            self.disk.sync_dir().await.map_err(io)?;
            self.st.borrow_mut().spare_files.push(SpareFile {
                name: spare,
                file,
                seed,
            });
        } else {
            // Not deleted here: freeing a whole segment's blocks in one step
            // held the blocking thread, and the commits queued behind it,
            // 14-20 ms on a disk mounted with `discard` (docs/benchmarks.md,
            // "The open loop after a deleted queue"). Out of the log first,
            // durably, so a crash never finds a cut file under a segment's
            // name; then `shrink_discarded` frees it a slice at a time.
            let discard = discard_name(seq);
            self.disk.rename(&name, &discard).await.map_err(io)?;
            self.disk.sync_dir().await.map_err(io)?;
            self.st.borrow_mut().discarded.push(Discarded {
                file: SpareFile {
                    name: discard,
                    file,
                    seed,
                },
                len,
            });
        }
        tracing::debug!(
            shard = self.cfg.shard_id,
            ms = started.elapsed().as_millis() as u64,
            kept_as_spare = keep,
            "removed dead segment {name}"
        );
        Ok(true)
    }

    /// One step of freeing a discarded segment's disk: cuts one file no
    /// reader holds by `DISCARD_STEP_BYTES`, or deletes it once empty.
    /// False when there is nothing to do. Each step is its own job on the
    /// blocking thread, so a commit waits behind one step at most.
    pub async fn shrink_discarded(&self) -> Result<bool, StorageError> {
        // Out of the list while it is cut, so a rotation cannot take it up
        // as a whole spare meanwhile (`take_spare`). A step that fails, or
        // never finishes, leaves the file to the next startup. The
        // shortest first: one file is cut to the end before the next, and
        // the others stay whole for reuse.
        let mut d = {
            let mut st = self.st.borrow_mut();
            let Some((i, _)) = st
                .discarded
                .iter()
                .enumerate()
                .filter(|(_, d)| d.file.unheld())
                .min_by_key(|(_, d)| d.len)
            else {
                return Ok(false);
            };
            st.discarded.swap_remove(i)
        };
        let io = |name: &str, e| StorageError::io(self.disk.describe(name), e);
        if d.len > 0 {
            let to = d.len.saturating_sub(DISCARD_STEP_BYTES);
            self.disk
                .shrink(&d.file.name, to)
                .await
                .map_err(|e| io(&d.file.name, e))?;
            d.len = to;
            self.st.borrow_mut().discarded.push(d);
            return Ok(true);
        }
        let SpareFile { name, file, .. } = d.file;
        drop(file);
        // No directory sync: a file a crash brings back is deleted at startup.
        self.disk.remove(&name).await.map_err(|e| io(&name, e))?;
        Ok(true)
    }

    /// Creates the next segment ahead of time once the current one is three
    /// quarters full, so rotation does not wait for file creation (later
    /// would risk the wait; earlier keeps an extra empty segment on disk
    /// longer). A quarter full when zeroing ahead: the zeros need the time.
    pub async fn prepare_ahead(&self, now_ms: u64) -> Result<(), StorageError> {
        let from = if self.cfg.zero_ahead { 1 } else { 3 };
        let due = {
            let st = self.st.borrow();
            st.prepared.is_none()
                && !st.preparing
                && st.tail_end >= self.cfg.segment_bytes / 4 * from
                && st.poisoned.is_none()
        };
        if due {
            self.prepare(now_ms).await?;
        }
        Ok(())
    }

    /// Writes zeros into the prepared segment, up to `ZERO_STEP_BYTES` a
    /// write, towards where the writer's progress asks for when the pass
    /// begins ([`Wal::zero_target`]): at that pace the prepared segment is
    /// all written by the time the current one is three quarters full,
    /// unless commits outgrow the steps (one per commit, so commits of over
    /// 128 KiB on average leave part of it unwritten). Its commits are then
    /// overwrites (`WalConfig::zero_ahead`). What is not zeroed when the
    /// writer rotates stays as it was, unwritten extents that read as
    /// zeros, so this only ever saves time. A failed write gives the
    /// segment up (the writer's own commits will meet a failing device).
    pub async fn zero_ahead(&self) -> Result<(), StorageError> {
        if !self.cfg.zero_ahead {
            return Ok(());
        }
        // The pass stops where the writer stood when it began: under
        // steady load the target keeps rising, and the rest of maintenance
        // (expiry, release, removals) must not wait for a rotation.
        let target = self.zero_target();
        loop {
            // While commits run, one zero write after each commit ends:
            // every fdatasync then carries at most one step of zeros beside
            // its own data, not a burst (a commit in flight always ends, or
            // poisons the log). With none in flight, back to back.
            let commit = self.st.borrow().committing.then(|| self.changed.listen());
            if let Some(ended) = commit {
                ended.await;
            }
            let Some((file, seq, pos, len)) = self.next_zero_step(target) else {
                return Ok(());
            };
            let written = self.write_zeros(&file, pos, len).await;
            let still = self.zero_step_done(seq, pos, len, written.is_ok());
            written.map_err(|e| StorageError::io(self.disk.describe(&segment_name(seq)), e))?;
            if !still {
                return Ok(());
            }
        }
    }

    /// How far the prepared segment should be written by now: twice the
    /// current segment's fill past its first quarter, aligned down.
    fn zero_target(&self) -> u64 {
        let st = self.st.borrow();
        let seg = self.cfg.segment_bytes;
        let align = st.alignment.max(1);
        st.tail_end.saturating_sub(seg / 4).saturating_mul(2).min(seg) / align * align
    }

    /// The next zero write towards `target`, marked in flight; `None` when
    /// there is nothing to do (no prepared segment, the log poisoned, the
    /// target reached).
    fn next_zero_step(&self, target: u64) -> Option<(Rc<D::File>, u64, u64, u64)> {
        let mut st = self.st.borrow_mut();
        let align = st.alignment.max(1);
        // One zero write at a time: `zeroing` names one segment, and the
        // commit's wait relies on it (maintenance runs one pass at a time).
        if st.poisoned.is_some() || st.zeroing.is_some() || st.zeroed_to >= target {
            return None;
        }
        let len = (target - st.zeroed_to).min(ZERO_STEP_BYTES) / align * align;
        let p = st.prepared.as_ref().filter(|_| len > 0)?;
        let step = (p.file.clone(), p.header.seq, st.zeroed_to, len);
        assert!(step.2 >= SEGMENT_HEADER_LEN, "zeros over a segment header");
        st.zeroing = Some(step.1);
        st.stats.zero_steps += 1;
        Some(step)
    }

    /// One zero write. Dropped in flight, it could still land at any time,
    /// over a commit once the segment is the writer's: the log is poisoned,
    /// and a commit waiting for this write then sees that and writes nothing.
    async fn write_zeros(&self, file: &D::File, pos: u64, len: u64) -> std::io::Result<()> {
        let mut guard = PoisonIfCancelled::new(self, "a zero write was cancelled in flight", |wal| {
            wal.st.borrow_mut().zeroing = None;
            wal.zero_done.wake_all();
        });
        let zeros = self.zeros.get(..len as usize).unwrap_or_default();
        let written = file.write_zeros(zeros, pos).await;
        guard.disarm();
        written
    }

    /// Books a zero write's end and wakes a commit waiting for it. Returns
    /// whether segment `seq` is still the prepared one (the writer may have
    /// rotated into it meanwhile: zeroing stops there). A failed write
    /// gives the segment up for zeroing.
    fn zero_step_done(&self, seq: u64, pos: u64, len: u64, ok: bool) -> bool {
        let mut st = self.st.borrow_mut();
        debug_assert_eq!(st.zeroing, Some(seq), "the zero write in flight");
        st.zeroing = None;
        let still = st.prepared.as_ref().is_some_and(|p| p.header.seq == seq);
        if still {
            st.zeroed_to = if ok { pos + len } else { self.cfg.segment_bytes };
        }
        if ok {
            st.stats.zeroed_bytes += len;
        }
        drop(st);
        self.zero_done.wake_all();
        still
    }
}

/// A segment opened for reading record bodies: the file handle (taken while
/// the record is known live, so the read works even if compaction removes
/// the segment meanwhile) and the seed its checksums use.
pub struct SegmentReader<F> {
    pub seg: u64,
    file: Rc<F>,
    seed: u32,
}

impl<D: Disk> Wal<D> {
    pub fn segment_reader(&self, seg: u64) -> Option<SegmentReader<D::File>> {
        self.st.borrow().segments.get(&seg).map(|s| SegmentReader {
            seg,
            file: s.file.clone(),
            seed: s.header.seed(),
        })
    }

    /// Reads the frame of `frame_len` bytes at `frame_offset` and returns its
    /// body, after checking the frame's header and body checksums. A mismatch
    /// is a `Corruption` error naming the file and offset: never data.
    pub async fn read_record(
        &self,
        r: &SegmentReader<D::File>,
        frame_offset: u64,
        frame_len: u32,
    ) -> Result<Vec<u8>, StorageError> {
        let name = segment_name(r.seg);
        let corrupt = |reason: String| StorageError::Corruption {
            file: self.disk.describe(&name),
            offset: frame_offset,
            reason,
        };
        let mut data = r
            .file
            .read_at(frame_offset, frame_len as usize)
            .await
            .map_err(|e| StorageError::io(self.disk.describe(&name), e))?;
        if data.len() != frame_len as usize || data.len() < FRAME_HEADER_LEN {
            return Err(corrupt(format!("short read: {} of {frame_len} bytes", data.len())));
        }
        let fh = match check_header(r.seed, &data) {
            HeaderCheck::Valid(fh) => fh,
            HeaderCheck::Zero => return Err(corrupt("frame header reads as zeros".into())),
            HeaderCheck::Invalid(why) => return Err(corrupt(why.into())),
        };
        let body = data.split_off(FRAME_HEADER_LEN);
        if !frame::body_matches(r.seed, &fh, &body) {
            return Err(corrupt("record body checksum mismatch".into()));
        }
        Ok(body)
    }
}
