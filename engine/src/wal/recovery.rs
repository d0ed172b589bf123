//! Recovery: replay every segment in order, cut a torn tail, refuse anything
//! else that does not validate. The decision table is in
//! docs/STORAGE_FORMAT.md ("Recovery"); the function names below follow it.

use super::frame::{
    body_matches, check_header, FrameHeader, HeaderCheck, HeaderError, SegmentHeader, FRAME_HEADER_LEN,
};
use super::record::{kind, Record};
use super::{align_up, parse_segment_name, segment_name, write_seal, RecordPos, Segment, WalConfig};
use crate::disk::{Disk, DiskFile};
use crate::error::StorageError;
use crate::limits::{MAX_COMMIT_BYTES, MAX_RECORD_BODY, RECOVERY_READ_WINDOW, SEGMENT_HEADER_LEN};
use std::collections::BTreeMap;
use std::io;

/// What to do about corruption that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse to start, naming the file and offset.
    #[default]
    Strict,
    /// Operator override: rename each damaged segment to `*.quarantined`,
    /// lose all of its records, and start with the rest.
    QuarantineCorrupt,
    /// Strict checks that change nothing on disk (no tail seal, no removals):
    /// what the operator's WAL tool uses on a stopped server's directory.
    Inspect,
}

/// What recovery found and did.
#[derive(Debug, Default, Clone)]
pub struct RecoveryReport {
    pub segments_replayed: usize,
    pub commits_replayed: u64,
    pub records_replayed: u64,
    /// A torn last commit that was cut: file, offset, reason.
    pub torn_tail: Option<(String, u64, String)>,
    pub quarantined: Vec<String>,
    pub removed_empty: Vec<String>,
}

pub(crate) struct Recovered<F> {
    pub segments: BTreeMap<u64, Segment<F>>,
    pub next_lsn: u64,
    pub next_seq: u64,
    pub report: RecoveryReport,
}

/// How a segment's frames ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    /// A valid SEGMENT_END frame; `end` is the aligned end after it;
    /// `next_lsn`, if not zero, the LSN the next segment's first commit has.
    Sealed { end: u64, next_lsn: u64 },
    /// All-zero header at a commit boundary.
    Zero { at: u64 },
    /// Something that does not validate, or the file ended mid-commit.
    Bad { at: u64, reason: String },
}

impl Stop {
    fn bad(at: u64, reason: impl ToString) -> Stop {
        Stop::Bad {
            at,
            reason: reason.to_string(),
        }
    }
}

struct Scan {
    stop: Stop,
    /// Aligned end of the last complete commit.
    valid_end: u64,
    last_lsn: u64,
    /// LSN of the first commit's marker, if the segment holds a commit.
    first_lsn: Option<u64>,
    commits: u64,
    records: u64,
}

impl Scan {
    fn has_data(&self) -> bool {
        self.commits > 0 || matches!(self.stop, Stop::Sealed { .. } | Stop::Bad { .. })
    }
}

/// Reads a segment through a window, so bodies spanning reads work and the
/// file is never held in memory whole.
struct Window<'a, F> {
    file: &'a F,
    start: u64,
    buf: Vec<u8>,
}

impl<'a, F: DiskFile> Window<'a, F> {
    fn new(file: &'a F) -> Self {
        Window {
            file,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// `len` bytes at `pos`, or `None` if the file ends first.
    async fn get(&mut self, pos: u64, len: usize) -> io::Result<Option<&[u8]>> {
        let have = pos >= self.start && pos + len as u64 <= self.start + self.buf.len() as u64;
        if !have {
            self.buf = self.file.read_at(pos, len.max(RECOVERY_READ_WINDOW)).await?;
            self.start = pos;
            if self.buf.len() < len {
                return Ok(None);
            }
        }
        let off = (pos - self.start) as usize;
        Ok(Some(&self.buf[off..off + len]))
    }
}

/// Scans one segment's commits. With `apply`, every complete commit's records
/// are applied as soon as the whole commit has validated.
async fn scan<F: DiskFile>(
    file: &F,
    header: &SegmentHeader,
    prev_lsn: u64,
    mut apply: Option<&mut (dyn FnMut(Record, RecordPos) + '_)>,
) -> io::Result<Scan> {
    let seed = header.seed();
    let mut w = Window::new(file);
    let mut pos = SEGMENT_HEADER_LEN;
    let mut last = prev_lsn.max(header.base_lsn.saturating_sub(1));
    let (mut commits, mut records) = (0, 0);
    let mut first_lsn = None;
    let stop = loop {
        let Some(h) = w.get(pos, FRAME_HEADER_LEN).await? else {
            // The file ends exactly at a commit boundary only if preallocation
            // was lost; treat it like zeros.
            break Stop::Zero { at: pos };
        };
        let fh = match check_header(seed, h) {
            HeaderCheck::Zero => break Stop::Zero { at: pos },
            // A recycled file holds the old segment's frames past the last
            // commit, where a fresh one holds zeros: read them as zeros.
            // (Damage to an acknowledged commit is still found: the later
            // commit, or the next segment's first LSN, says one is missing.)
            HeaderCheck::Invalid(_) if header.recycled => break Stop::Zero { at: pos },
            HeaderCheck::Invalid(why) => break Stop::bad(pos, why),
            HeaderCheck::Valid(fh) => fh,
        };
        if let Err(stop) = follows(pos, &fh, last, commits > 0) {
            break stop;
        }
        match fh.kind {
            kind::SEGMENT_END => match read_seal(&mut w, header, pos, &fh).await? {
                Ok(stop) => {
                    last = fh.lsn;
                    break stop;
                }
                Err(stop) => break stop,
            },
            kind::COMMIT => {}
            other => break Stop::bad(pos, format!("expected a commit marker, found frame kind {other}")),
        }
        let commit = match read_commit(&mut w, header, pos, &fh).await? {
            Ok(c) => c,
            Err(stop) => break stop,
        };
        commits += 1;
        records += commit.records.len() as u64;
        first_lsn.get_or_insert(fh.lsn);
        last = commit.last_lsn;
        pos = align_up(pos + commit.len, u64::from(header.alignment));
        if let Some(apply) = apply.as_deref_mut() {
            for (r, p) in commit.records {
                apply(r, p);
            }
        }
    };
    Ok(Scan {
        stop,
        valid_end: pos,
        last_lsn: last,
        first_lsn,
        commits,
        records,
    })
}

/// Checks that the frame at `pos` (a commit marker or a seal) takes the right
/// LSN after `last`.
///
/// Inside a segment LSNs run without gaps: each commit's marker, and the
/// seal, take the LSN after the previous commit's last record (the writer
/// opens a batch only once the previous one is closed, and recovery seals a
/// tail with the LSN after its last). A seal first in a segment (a tail whose
/// only commit was torn) follows the previous segment's last LSN the same
/// way. A frame that skips LSNs is a write that landed in the wrong place (a
/// newer commit or seal over an older commit): accepting it would drop every
/// commit in between without a trace.
fn follows(pos: u64, fh: &FrameHeader, last: u64, after_a_commit: bool) -> Result<(), Stop> {
    if fh.lsn <= last {
        return Err(Stop::bad(pos, format!("LSN {} does not follow {last}", fh.lsn)));
    }
    let directly = after_a_commit || fh.kind == kind::SEGMENT_END;
    if directly && fh.lsn != last.saturating_add(1) {
        return Err(Stop::bad(
            pos,
            format!("LSN {} skips from {last}: commits in between are missing", fh.lsn),
        ));
    }
    Ok(())
}

/// Reads the SEGMENT_END frame whose header is at `pos`.
async fn read_seal<F: DiskFile>(
    w: &mut Window<'_, F>,
    header: &SegmentHeader,
    pos: u64,
    fh: &FrameHeader,
) -> io::Result<Result<Stop, Stop>> {
    let malformed = || Stop::bad(pos, "malformed segment-end frame");
    let len = fh.body_len as usize;
    let body = w.get(pos + FRAME_HEADER_LEN as u64, len).await?.unwrap_or(&[]);
    if !matches!(len, 0 | 8) || !body_matches(header.seed(), fh, body) {
        return Ok(Err(malformed()));
    }
    let Ok(Record::SegmentEnd { next_lsn }) = Record::decode(kind::SEGMENT_END, body) else {
        return Ok(Err(malformed()));
    };
    Ok(Ok(Stop::Sealed {
        end: align_up(pos + (FRAME_HEADER_LEN + len) as u64, u64::from(header.alignment)),
        next_lsn,
    }))
}

/// One commit that validated whole.
struct Commit {
    /// Bytes from the marker to the end of the last record, padding excluded.
    len: u64,
    last_lsn: u64,
    records: Vec<(Record, RecordPos)>,
}

/// Reads and validates the commit whose marker header is at `pos`. Every
/// frame is checked before any is returned: a commit is all or nothing.
async fn read_commit<F: DiskFile>(
    w: &mut Window<'_, F>,
    header: &SegmentHeader,
    pos: u64,
    marker: &FrameHeader,
) -> io::Result<Result<Commit, Stop>> {
    let seed = header.seed();
    // The commit marker: how long the commit is and how many records follow.
    let marker_len = FRAME_HEADER_LEN + marker.body_len as usize;
    let Some(m) = w.get(pos, marker_len).await? else {
        return Ok(Err(Stop::bad(pos, "file ends inside a commit marker")));
    };
    let body = &m[FRAME_HEADER_LEN..];
    let (len, count) = match body_matches(seed, marker, body).then(|| Record::decode(kind::COMMIT, body)) {
        Some(Ok(Record::Commit { len, records })) => (len as usize, records),
        _ => return Ok(Err(Stop::bad(pos, "commit marker body does not validate"))),
    };
    if len < marker_len || len > MAX_COMMIT_BYTES + FRAME_HEADER_LEN * 2 + MAX_RECORD_BODY {
        return Ok(Err(Stop::bad(pos, format!("implausible commit length {len}"))));
    }
    let Some(bytes) = w.get(pos, len).await? else {
        return Ok(Err(Stop::bad(pos, "file ends inside a commit (torn write)")));
    };
    // The count comes from disk: no more frames than the commit's bytes hold.
    let mut records = Vec::with_capacity((count as usize).min(len / FRAME_HEADER_LEN));
    let mut off = marker_len;
    let mut lsn = marker.lsn;
    for _ in 0..count {
        let at = pos + off as u64;
        if off + FRAME_HEADER_LEN > len {
            return Ok(Err(Stop::bad(at, "commit holds fewer frames than its marker says")));
        }
        let fh = match check_header(seed, &bytes[off..]) {
            HeaderCheck::Valid(fh) => fh,
            HeaderCheck::Zero => return Ok(Err(Stop::bad(at, "zeros inside a commit (torn write)"))),
            HeaderCheck::Invalid(why) => return Ok(Err(Stop::bad(at, why))),
        };
        let end = off + FRAME_HEADER_LEN + fh.body_len as usize;
        if end > len || !body_matches(seed, &fh, &bytes[off + FRAME_HEADER_LEN..end]) {
            return Ok(Err(Stop::bad(at, "record body checksum mismatch")));
        }
        if fh.lsn <= lsn {
            return Ok(Err(Stop::bad(at, format!("LSN {} does not follow {lsn}", fh.lsn))));
        }
        let record = match Record::decode(fh.kind, &bytes[off + FRAME_HEADER_LEN..end]) {
            Ok(r) => r,
            Err(e) => return Ok(Err(Stop::bad(at, format!("undecodable record: {}", e.0)))),
        };
        let at_pos = RecordPos {
            lsn: fh.lsn,
            seg: header.seq,
            frame_offset: at,
            frame_len: (end - off) as u32,
        };
        records.push((record, at_pos));
        lsn = fh.lsn;
        off = end;
    }
    if off != len {
        return Ok(Err(Stop::bad(
            pos + off as u64,
            "commit length does not match its frames",
        )));
    }
    Ok(Ok(Commit {
        len: len as u64,
        last_lsn: lsn,
        records,
    }))
}

/// Looks for a valid commit or segment-end frame newer than `after_lsn` at any
/// aligned offset from `from` on: proof that damage is not a torn tail.
async fn later_commit<F: DiskFile>(
    file: &F,
    header: &SegmentHeader,
    from: u64,
    after_lsn: u64,
) -> io::Result<Option<u64>> {
    let align = header.alignment as u64;
    let seed = header.seed();
    let mut pos = align_up(from, align);
    loop {
        let chunk = file.read_at(pos, RECOVERY_READ_WINDOW).await?;
        if chunk.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let mut off = 0usize;
        while off + FRAME_HEADER_LEN <= chunk.len() {
            if let HeaderCheck::Valid(fh) = check_header(seed, &chunk[off..]) {
                if matches!(fh.kind, kind::COMMIT | kind::SEGMENT_END) && fh.lsn > after_lsn {
                    return Ok(Some(pos + off as u64));
                }
            }
            off += align as usize;
        }
        pos += off as u64;
    }
}

struct Found<F> {
    seq: u64,
    name: String,
    file: F,
    header: Option<SegmentHeader>,
}

/// Checks and replays a WAL directory without changing it: the same
/// decisions as startup in strict mode, reported instead of acted on.
pub async fn inspect<D: Disk>(
    disk: &D,
    shard_id: u32,
    apply: &mut dyn FnMut(Record, RecordPos),
) -> Result<RecoveryReport, StorageError> {
    let cfg = WalConfig {
        recovery: RecoveryMode::Inspect,
        ..WalConfig::new(shard_id)
    };
    Ok(recover(disk, cfg, apply).await?.report)
}

/// Recovers a WAL directory in place, as startup would (cutting a torn tail,
/// or with `QuarantineCorrupt` setting damaged segments aside), without
/// opening it for writes. The operator's `repair` command.
pub async fn repair<D: Disk>(disk: &D, shard_id: u32, mode: RecoveryMode) -> Result<RecoveryReport, StorageError> {
    let cfg = WalConfig {
        recovery: mode,
        ..WalConfig::new(shard_id)
    };
    Ok(recover(disk, cfg, &mut |_, _| {}).await?.report)
}

/// Startup's recovery, in the phases of docs/STORAGE_FORMAT.md ("Recovery"):
/// list the segments, read their headers, scan their commits, judge how each
/// scan ended against the decision table, then keep, seal, quarantine or
/// remove.
pub(crate) async fn recover<D: Disk>(
    disk: &D,
    cfg: WalConfig,
    apply: &mut dyn FnMut(Record, RecordPos),
) -> Result<Recovered<D::File>, StorageError> {
    let r = Recovery { disk, cfg };
    let strict = r.strict();
    // Make whatever the directory holds durable before trusting it.
    if !r.read_only() {
        disk.sync_dir().await.map_err(|e| r.io(".", e))?;
    }
    let seqs = r.list_segments().await?;
    let mut report = RecoveryReport::default();
    let found = r.read_headers(&seqs, &mut report).await?;
    // In strict mode the scan also applies: any later error aborts startup,
    // so applying early is harmless and saves a second pass.
    let scans = r
        .scan_segments(&found, if strict { Some(&mut *apply) } else { None })
        .await?;
    let verdict = r.judge(&found, &scans, &mut report).await?;
    if !strict {
        r.apply_survivors(&found, &verdict.quarantine, apply).await?;
        r.quarantine_damaged(&found, &verdict.quarantine, &mut report).await?;
    }
    let mut next_lsn = verdict.last_lsn(&scans) + 1;
    let mut segments = BTreeMap::new();
    let mut removed = Vec::new();
    for (i, (f, s)) in found.into_iter().zip(scans).enumerate() {
        if verdict.quarantine.contains(&i) {
            continue;
        }
        // Everything up to the last segment with data stays (an unused
        // segment before it is harmless and keeps the sequence contiguous);
        // empty segments after it go, and their numbers are reused.
        let keep = verdict.last_with_data.is_some_and(|l| i <= l);
        let (Some(h), Some(s), true) = (f.header, s, keep) else {
            if keep {
                return Err(r.corrupt(&f.name, 0, "segment header is blank but later segments hold data"));
            }
            removed.push(f.name);
            continue;
        };
        let end = match s.stop {
            Stop::Sealed { end, .. } => end,
            // A segment cut short by a crash between its successor's first
            // commit and its own seal stays as it is: a seal written now
            // would carry an LSN above its successor's.
            _ if r.read_only() || verdict.tail != Some(i) => s.valid_end,
            // Seal the recovered tail where its valid data ends; it is never
            // appended to again.
            _ => {
                let sealed = write_seal(&f.file, &h, s.valid_end, next_lsn, 0)
                    .await
                    .map_err(|e| r.io(&f.name, e))?;
                next_lsn += 1;
                s.valid_end + sealed
            }
        };
        report.segments_replayed += 1;
        report.commits_replayed += s.commits;
        report.records_replayed += s.records;
        segments.insert(f.seq, Segment::recovered(f.file, h, end));
    }
    r.remove_unused(removed, &mut report).await?;
    if let Some((file, at, why)) = &report.torn_tail {
        tracing::warn!("cut a torn tail in {file} at offset {at}: {why}");
    }
    let next_seq = match segments.keys().next_back() {
        Some(last) => last + 1,
        None => seqs.last().map_or(1, |s| s + 1),
    };
    Ok(Recovered {
        segments,
        next_lsn,
        next_seq,
        report,
    })
}

/// One recovery run's directory and settings.
struct Recovery<'a, D> {
    disk: &'a D,
    cfg: WalConfig,
}

/// How each segment was judged.
struct Verdict {
    /// Index of the last segment holding data: the only one allowed to end
    /// without a SEGMENT_END.
    last_with_data: Option<usize>,
    /// Index of the log's tail, to be sealed (and cut, if torn).
    tail: Option<usize>,
    /// Indices of damaged segments (only ever filled outside strict mode).
    quarantine: Vec<usize>,
}

impl Verdict {
    /// The newest LSN of the segments that stay. Empty segments after the
    /// last one holding data are removed and do not count: their scan
    /// reports the LSN before their header's base, which may lie above every
    /// durable record, and sealing the tail above it would leave a gap in the
    /// tail's LSNs, which the scan refuses (a gap means a misplaced write).
    fn last_lsn(&self, scans: &[Option<Scan>]) -> u64 {
        scans
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.quarantine.contains(i) && self.last_with_data.is_some_and(|l| *i <= l))
            .filter_map(|(_, s)| s.as_ref().map(|s| s.last_lsn))
            .max()
            .unwrap_or(0)
    }

    fn set_aside(&mut self, i: usize) {
        if !self.quarantine.contains(&i) {
            self.quarantine.push(i);
        }
    }
}

/// What the decision table says about one segment.
enum Judged {
    Fine,
    /// The log's tail; `torn` is the cut, if its last commit was torn.
    Tail {
        torn: Option<(u64, String)>,
    },
    /// This segment is damaged at `at`.
    Damaged {
        at: u64,
        reason: String,
    },
    /// The next segment is damaged (named at offset 4096); `exists` is false
    /// when it is missing or blank, so there is nothing to set aside.
    NextDamaged {
        reason: String,
        exists: bool,
    },
}

impl<D: Disk> Recovery<'_, D> {
    fn strict(&self) -> bool {
        self.cfg.recovery != RecoveryMode::QuarantineCorrupt
    }

    fn read_only(&self) -> bool {
        self.cfg.recovery == RecoveryMode::Inspect
    }

    fn io(&self, name: &str, e: io::Error) -> StorageError {
        StorageError::io(self.disk.describe(name), e)
    }

    fn corrupt(&self, file: &str, offset: u64, reason: impl ToString) -> StorageError {
        StorageError::Corruption {
            file: self.disk.describe(file),
            offset,
            reason: reason.to_string(),
        }
    }

    /// The segment numbers in the directory, checked to be contiguous:
    /// segments are deleted oldest first, so a gap is allowed only where an
    /// operator quarantined a segment.
    async fn list_segments(&self) -> Result<Vec<u64>, StorageError> {
        let names = self.disk.list().await.map_err(|e| self.io(".", e))?;
        let mut seqs: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
        seqs.sort_unstable();
        let quarantined: Vec<u64> = names
            .iter()
            .filter_map(|n| n.strip_suffix(".quarantined").and_then(parse_segment_name))
            .collect();
        for pair in seqs.windows(2) {
            if let Some(missing) = (pair[0] + 1..pair[1]).find(|m| !quarantined.contains(m)) {
                return Err(self.corrupt(
                    &segment_name(missing),
                    0,
                    "segment is missing from the middle of the log",
                ));
            }
        }
        Ok(seqs)
    }

    /// Opens every segment and checks its header: it must validate, belong to
    /// this shard and match its file name. A blank header (creation never
    /// finished) is accepted only over an all-zero file.
    async fn read_headers(
        &self,
        seqs: &[u64],
        report: &mut RecoveryReport,
    ) -> Result<Vec<Found<D::File>>, StorageError> {
        let mut found = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            let name = segment_name(seq);
            let file = self.disk.open(&name).await.map_err(|e| self.io(&name, e))?;
            let head = file
                .read_at(0, SEGMENT_HEADER_LEN as usize)
                .await
                .map_err(|e| self.io(&name, e))?;
            let header = match SegmentHeader::decode(&head) {
                Ok(h) if h.shard_id != self.cfg.shard_id => {
                    return Err(StorageError::Mismatch(format!(
                        "{} belongs to shard {}, not shard {}",
                        self.disk.describe(&name),
                        h.shard_id,
                        self.cfg.shard_id
                    )));
                }
                Ok(h) if h.seq != seq => {
                    let why = format!("header says segment {} but the file name says {seq}", h.seq);
                    return Err(self.corrupt(&name, 16, why));
                }
                Ok(h) => Some(h),
                Err(HeaderError::Blank) => {
                    self.blank_segment_is_empty(&name, &file).await?;
                    None
                }
                Err(HeaderError::Invalid(why)) if self.strict() => return Err(self.corrupt(&name, 0, why)),
                Err(HeaderError::Invalid(_)) => {
                    report.quarantined.push(name.clone());
                    continue;
                }
            };
            found.push(Found {
                seq,
                name,
                file,
                header,
            });
        }
        Ok(found)
    }

    /// A segment whose creation never finished is fine only if nothing
    /// follows its blank header.
    async fn blank_segment_is_empty(&self, name: &str, file: &D::File) -> Result<(), StorageError> {
        let size = file.size().await.map_err(|e| self.io(name, e))?;
        let mut pos = 0;
        while pos < size {
            let chunk = file
                .read_at(pos, RECOVERY_READ_WINDOW)
                .await
                .map_err(|e| self.io(name, e))?;
            if let Some(i) = chunk.iter().position(|&b| b != 0) {
                return Err(self.corrupt(name, pos + i as u64, "segment header is blank but data follows"));
            }
            if chunk.is_empty() {
                break;
            }
            pos += chunk.len() as u64;
        }
        Ok(())
    }

    /// Scans every segment with a header, in order, each continuing the
    /// previous one's LSNs.
    async fn scan_segments(
        &self,
        found: &[Found<D::File>],
        mut apply: Option<&mut dyn FnMut(Record, RecordPos)>,
    ) -> Result<Vec<Option<Scan>>, StorageError> {
        let mut scans = Vec::with_capacity(found.len());
        let mut prev_lsn = 0;
        for f in found {
            let Some(h) = &f.header else {
                scans.push(None);
                continue;
            };
            let mut s = scan(&f.file, h, prev_lsn, apply.as_deref_mut())
                .await
                .map_err(|e| self.io(&f.name, e))?;
            self.first_commit_zeroed(f, h, prev_lsn, &mut s).await?;
            prev_lsn = s.last_lsn;
            scans.push(Some(s));
        }
        Ok(scans)
    }

    /// Table row "zeros at offset 4096 (no commit), a valid commit later in
    /// the same file": zeros where the first commit should be are an unused
    /// segment only if nothing valid follows them; otherwise the segment was
    /// used and its first commit is lost.
    async fn first_commit_zeroed(
        &self,
        f: &Found<D::File>,
        h: &SegmentHeader,
        prev_lsn: u64,
        s: &mut Scan,
    ) -> Result<(), StorageError> {
        let (Stop::Zero { at }, 0) = (&s.stop, s.commits) else {
            return Ok(());
        };
        let later = later_commit(&f.file, h, at + u64::from(h.alignment), prev_lsn)
            .await
            .map_err(|e| self.io(&f.name, e))?;
        if let Some(next) = later {
            s.stop = Stop::bad(
                *at,
                format!("zeros where the first commit should be; a valid commit follows at offset {next}"),
            );
        }
        Ok(())
    }

    /// Applies the decision table to every scanned segment. Strict modes
    /// return the first damage as an error; quarantine mode collects it.
    async fn judge(
        &self,
        found: &[Found<D::File>],
        scans: &[Option<Scan>],
        report: &mut RecoveryReport,
    ) -> Result<Verdict, StorageError> {
        let mut verdict = Verdict {
            last_with_data: scans.iter().rposition(|s| s.as_ref().is_some_and(Scan::has_data)),
            tail: None,
            quarantine: Vec::new(),
        };
        for (i, (f, s)) in found.iter().zip(scans).enumerate() {
            let (Some(s), Some(h)) = (s, &f.header) else { continue };
            let next = scans.get(i + 1).and_then(|n| n.as_ref());
            let judged = match &s.stop {
                Stop::Sealed { next_lsn: 0, .. } => after_recovery_seal(f, s, next),
                Stop::Sealed { next_lsn, .. } => after_rotation_seal(f, *next_lsn, next),
                // After the last segment holding data: prepared, never used.
                _ if verdict.last_with_data.is_none_or(|l| i > l) => Judged::Fine,
                _ if Some(i) != verdict.last_with_data => {
                    self.mid_log(f, h, s, next, verdict.last_with_data == Some(i + 1))
                        .await?
                }
                _ => self.tail(f, h, s).await?,
            };
            match judged {
                Judged::Fine => {}
                Judged::Tail { torn } => {
                    if let Some((at, reason)) = torn {
                        report.torn_tail = Some((self.disk.describe(&f.name), at, reason));
                    }
                    verdict.tail = Some(i);
                }
                Judged::Damaged { at, reason } if self.strict() => return Err(self.corrupt(&f.name, at, reason)),
                Judged::Damaged { .. } => verdict.set_aside(i),
                Judged::NextDamaged { reason, .. } if self.strict() => {
                    return Err(self.corrupt(&segment_name(f.seq + 1), SEGMENT_HEADER_LEN, reason));
                }
                Judged::NextDamaged { exists, .. } => {
                    if exists {
                        verdict.set_aside(i + 1);
                    }
                }
            }
        }
        Ok(verdict)
    }

    /// A segment before the last one holding data that ends without a seal.
    /// Table rows "before the last segment holding data".
    async fn mid_log(
        &self,
        f: &Found<D::File>,
        h: &SegmentHeader,
        s: &Scan,
        next: Option<&Scan>,
        next_is_tail: bool,
    ) -> Result<Judged, StorageError> {
        let (at, why) = match &s.stop {
            Stop::Bad { at, reason } => (*at, reason.clone()),
            Stop::Zero { at } => (*at, "segment ends without a segment-end frame".to_string()),
            Stop::Sealed { .. } => return Ok(Judged::Fine),
        };
        if s.commits == 0 {
            // Only the tail is ever empty when its successor is made: a
            // segment before data that reads as empty lost its commits.
            let reason = "a used segment reads as empty: it holds no commit, but later segments hold data";
            return Ok(Judged::Damaged {
                at,
                reason: reason.into(),
            });
        }
        if matches!(s.stop, Stop::Zero { .. })
            && seal_never_written(s, next, next_is_tail)
            && later_commit(&f.file, h, s.valid_end + u64::from(h.alignment), s.last_lsn)
                .await
                .map_err(|e| self.io(&f.name, e))?
                .is_none()
        {
            // Power failed after (or while) the next segment's first commit
            // was written and before this one's seal (which would have taken
            // LSN last + 1): nothing acknowledged is missing in between. Only
            // if no valid newer frame follows the zeros in this file: one
            // that does proves the segment went on, so the zeros are a lost
            // or misplaced write, not a seal never written.
            return Ok(Judged::Fine);
        }
        Ok(Judged::Damaged {
            at,
            reason: format!("{why}; later segments hold data, so this is not a torn tail"),
        })
    }

    /// The last segment holding data: damage here is a torn last write
    /// unless a valid newer commit follows it.
    async fn tail(&self, f: &Found<D::File>, h: &SegmentHeader, s: &Scan) -> Result<Judged, StorageError> {
        let from = s.valid_end + u64::from(h.alignment);
        let later = later_commit(&f.file, h, from, s.last_lsn)
            .await
            .map_err(|e| self.io(&f.name, e))?;
        Ok(match (&s.stop, later) {
            (Stop::Bad { at, reason }, Some(next)) => Judged::Damaged {
                at: *at,
                reason: format!("{reason}; a valid commit follows at offset {next}, so this is not a torn tail"),
            },
            (Stop::Zero { at }, Some(next)) => Judged::Damaged {
                at: *at,
                reason: format!("zeros where a commit should be; a valid commit follows at offset {next}"),
            },
            (Stop::Bad { at, reason }, None) => Judged::Tail {
                torn: Some((*at, reason.clone())),
            },
            _ => Judged::Tail { torn: None },
        })
    }

    /// Quarantine mode's second pass: applies the segments that stay.
    async fn apply_survivors(
        &self,
        found: &[Found<D::File>],
        quarantine: &[usize],
        apply: &mut dyn FnMut(Record, RecordPos),
    ) -> Result<(), StorageError> {
        let mut prev_lsn = 0;
        for (i, f) in found.iter().enumerate() {
            let (Some(h), false) = (&f.header, quarantine.contains(&i)) else {
                continue;
            };
            let s = scan(&f.file, h, prev_lsn, Some(&mut *apply))
                .await
                .map_err(|e| self.io(&f.name, e))?;
            prev_lsn = s.last_lsn;
        }
        Ok(())
    }

    /// Renames each damaged segment to `*.quarantined`.
    async fn quarantine_damaged(
        &self,
        found: &[Found<D::File>],
        quarantine: &[usize],
        report: &mut RecoveryReport,
    ) -> Result<(), StorageError> {
        for f in quarantine.iter().filter_map(|&i| found.get(i)) {
            let to = format!("{}.quarantined", f.name);
            self.disk.rename(&f.name, &to).await.map_err(|e| self.io(&f.name, e))?;
            tracing::warn!(
                "quarantined damaged WAL segment {} as {to}; its records are lost",
                self.disk.describe(&f.name)
            );
            report.quarantined.push(f.name.clone());
        }
        Ok(())
    }

    /// Removes the unused segments after the log's end (unless inspecting).
    async fn remove_unused(&self, removed: Vec<String>, report: &mut RecoveryReport) -> Result<(), StorageError> {
        if removed.is_empty() || self.read_only() {
            return Ok(());
        }
        for name in &removed {
            self.disk.remove(name).await.map_err(|e| self.io(name, e))?;
        }
        self.disk.sync_dir().await.map_err(|e| self.io(".", e))?;
        report.removed_empty = removed;
        Ok(())
    }
}

/// Table row "any segment sealed by recovery": a recovery seal takes the LSN
/// after the segment's last record, and the segment that startup opened
/// begins right after it.
fn after_recovery_seal<F>(f: &Found<F>, s: &Scan, next: Option<&Scan>) -> Judged {
    match next.and_then(|n| n.first_lsn) {
        Some(first) if first != s.last_lsn + 1 => Judged::NextDamaged {
            reason: format!(
                "{} was sealed at LSN {}, but the next segment begins with commit {first}: commits are missing",
                f.name, s.last_lsn
            ),
            exists: true,
        },
        _ => Judged::Fine,
    }
}

/// Table row "its predecessor's rotation seal names commit n": a rotation
/// seal is written only after the next segment's first commit is durable,
/// and names it, so that commit must be there.
fn after_rotation_seal<F>(f: &Found<F>, next_lsn: u64, next: Option<&Scan>) -> Judged {
    let why = match next.map(|n| n.first_lsn) {
        Some(Some(first)) if first == next_lsn => return Judged::Fine,
        None => "is missing or has a blank header".to_string(),
        Some(None) => "holds no commit".to_string(),
        Some(Some(first)) => format!("begins with commit {first}"),
    };
    Judged::NextDamaged {
        reason: format!(
            "{} says the next segment begins with commit {next_lsn}, but it {why}: a used segment reads as empty",
            f.name
        ),
        exists: next.is_some(),
    }
}

/// Table row "zeros at a commit boundary after its last commit, LSN L": the
/// next segment shows that the rotation happened and only this segment's
/// seal is missing. Either its first commit is durable and names LSN L + 2
/// (the seal never written took L + 1), or it tore (nothing in it was
/// acknowledged: answers wait for the seal) and is the log's torn tail, or a
/// later start sealed that torn segment empty, with the LSN after this one's
/// last.
fn seal_never_written(s: &Scan, next: Option<&Scan>, next_is_tail: bool) -> bool {
    next.is_some_and(|n| {
        n.first_lsn == Some(s.last_lsn + 2)
            || (n.commits == 0 && matches!(n.stop, Stop::Bad { .. }) && next_is_tail)
            || (n.commits == 0 && matches!(n.stop, Stop::Sealed { next_lsn: 0, .. }) && n.last_lsn == s.last_lsn + 1)
    })
}
