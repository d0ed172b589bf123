//! Recovery: replay every segment in order, cut a torn tail, refuse anything
//! else that does not validate. The decision table is in
//! docs/STORAGE_FORMAT.md ("Recovery"); the function names below follow it.

use super::frame::{body_matches, check_header, HeaderCheck, HeaderError, SegmentHeader, FRAME_HEADER_LEN};
use super::record::{kind, Record};
use super::{align_up, encode_frame, parse_segment_name, segment_name, RecordPos, Segment, WalConfig};
use crate::disk::{Disk, DiskFile};
use crate::error::StorageError;
use crate::limits::{MAX_COMMIT_BYTES, MAX_RECORD_BODY, RECOVERY_READ_WINDOW, SEGMENT_HEADER_LEN};
use std::collections::BTreeMap;
use std::io;
use std::rc::Rc;

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
    mut apply: Option<&mut dyn FnMut(Record, RecordPos)>,
) -> io::Result<Scan> {
    let seed = header.seed();
    let align = header.alignment as u64;
    let mut w = Window::new(file);
    let mut pos = SEGMENT_HEADER_LEN;
    let mut last = prev_lsn.max(header.base_lsn.saturating_sub(1));
    let (mut commits, mut records) = (0, 0);
    let mut first_lsn = None;
    let bad = |at: u64, reason: String| Stop::Bad { at, reason };
    let stop = loop {
        let Some(h) = w.get(pos, FRAME_HEADER_LEN).await? else {
            // The file ends exactly at a commit boundary only if preallocation
            // was lost; treat it like zeros.
            break Stop::Zero { at: pos };
        };
        let fh = match check_header(seed, h) {
            HeaderCheck::Zero => break Stop::Zero { at: pos },
            HeaderCheck::Invalid(why) => break bad(pos, why.to_string()),
            HeaderCheck::Valid(fh) => fh,
        };
        if fh.lsn <= last {
            break bad(pos, format!("LSN {} does not follow {last}", fh.lsn));
        }
        // Inside a segment LSNs run without gaps: each commit's marker, and
        // the seal, take the LSN after the previous commit's last record
        // (the writer opens a batch only once the previous one is closed,
        // and recovery seals a tail with the LSN after its last). A seal
        // first in a segment (a tail whose only commit was torn) follows the
        // previous segment's last LSN the same way. A frame that skips LSNs
        // is a write that landed in the wrong place (a newer commit or seal
        // over an older commit): accepting it would drop every commit in
        // between without a trace.
        let follows_directly = commits > 0 || fh.kind == kind::SEGMENT_END;
        if follows_directly && fh.lsn != last.saturating_add(1) {
            break bad(
                pos,
                format!("LSN {} skips from {last}: commits in between are missing", fh.lsn),
            );
        }
        match fh.kind {
            kind::SEGMENT_END => {
                let len = fh.body_len as usize;
                let body = w.get(pos + FRAME_HEADER_LEN as u64, len).await?.unwrap_or(&[]);
                let next_lsn = match (len, body_matches(seed, &fh, body)) {
                    (0 | 8, true) => match Record::decode(kind::SEGMENT_END, body) {
                        Ok(Record::SegmentEnd { next_lsn }) => next_lsn,
                        _ => break bad(pos, "malformed segment-end frame".into()),
                    },
                    _ => break bad(pos, "malformed segment-end frame".into()),
                };
                last = fh.lsn;
                break Stop::Sealed {
                    end: align_up(pos + (FRAME_HEADER_LEN + len) as u64, align),
                    next_lsn,
                };
            }
            kind::COMMIT => {}
            other => break bad(pos, format!("expected a commit marker, found frame kind {other}")),
        }
        // The commit marker: how long the commit is and how many records follow.
        let marker_len = FRAME_HEADER_LEN + fh.body_len as usize;
        let Some(m) = w.get(pos, marker_len).await? else {
            break bad(pos, "file ends inside a commit marker".into());
        };
        let body = &m[FRAME_HEADER_LEN..];
        let (len, count) = match body_matches(seed, &fh, body).then(|| Record::decode(kind::COMMIT, body)) {
            Some(Ok(Record::Commit { len, records })) => (len as usize, records),
            _ => break bad(pos, "commit marker body does not validate".into()),
        };
        if len < marker_len || len > MAX_COMMIT_BYTES + FRAME_HEADER_LEN * 2 + MAX_RECORD_BODY {
            break bad(pos, format!("implausible commit length {len}"));
        }
        let marker_lsn = fh.lsn;
        let Some(commit) = w.get(pos, len).await? else {
            break bad(pos, "file ends inside a commit (torn write)".into());
        };
        // Validate every frame before applying any: a commit is all or nothing.
        let mut recs = Vec::with_capacity(count as usize);
        let mut off = marker_len;
        let mut lsn = marker_lsn;
        let mut problem = None;
        for _ in 0..count {
            let at = pos + off as u64;
            if off + FRAME_HEADER_LEN > len {
                problem = Some((at, "commit holds fewer frames than its marker says".to_string()));
                break;
            }
            let fh = match check_header(seed, &commit[off..]) {
                HeaderCheck::Valid(fh) => fh,
                HeaderCheck::Zero => {
                    problem = Some((at, "zeros inside a commit (torn write)".into()));
                    break;
                }
                HeaderCheck::Invalid(why) => {
                    problem = Some((at, why.to_string()));
                    break;
                }
            };
            let end = off + FRAME_HEADER_LEN + fh.body_len as usize;
            if end > len || !body_matches(seed, &fh, &commit[off + FRAME_HEADER_LEN..end.min(len)]) {
                problem = Some((at, "record body checksum mismatch".into()));
                break;
            }
            if fh.lsn <= lsn {
                problem = Some((at, format!("LSN {} does not follow {lsn}", fh.lsn)));
                break;
            }
            match Record::decode(fh.kind, &commit[off + FRAME_HEADER_LEN..end]) {
                Ok(r) => recs.push((
                    r,
                    RecordPos {
                        lsn: fh.lsn,
                        seg: header.seq,
                        frame_offset: at,
                        frame_len: (end - off) as u32,
                    },
                )),
                Err(e) => {
                    problem = Some((at, format!("undecodable record: {}", e.0)));
                    break;
                }
            }
            lsn = fh.lsn;
            off = end;
        }
        if problem.is_none() && off != len {
            problem = Some((pos + off as u64, "commit length does not match its frames".into()));
        }
        if let Some((at, reason)) = problem {
            break bad(at, reason);
        }
        if let Some(apply) = apply.as_deref_mut() {
            for (r, p) in recs {
                apply(r, p);
            }
        }
        commits += 1;
        records += count as u64;
        first_lsn.get_or_insert(marker_lsn);
        last = lsn;
        pos = align_up(pos + len as u64, align);
    };
    let valid_end = match &stop {
        Stop::Sealed { .. } => pos,
        _ => pos,
    };
    Ok(Scan {
        stop,
        valid_end,
        last_lsn: last,
        first_lsn,
        commits,
        records,
    })
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
        shard_id,
        segment_bytes: crate::limits::DEFAULT_SEGMENT_BYTES,
        recovery: RecoveryMode::Inspect,
    };
    Ok(recover(disk, cfg, apply).await?.report)
}

/// Recovers a WAL directory in place, as startup would (cutting a torn tail,
/// or with `QuarantineCorrupt` setting damaged segments aside), without
/// opening it for writes. The operator's `repair` command.
pub async fn repair<D: Disk>(disk: &D, shard_id: u32, mode: RecoveryMode) -> Result<RecoveryReport, StorageError> {
    let cfg = WalConfig {
        shard_id,
        segment_bytes: crate::limits::DEFAULT_SEGMENT_BYTES,
        recovery: mode,
    };
    Ok(recover(disk, cfg, &mut |_, _| {}).await?.report)
}

pub(crate) async fn recover<D: Disk>(
    disk: &D,
    cfg: WalConfig,
    apply: &mut dyn FnMut(Record, RecordPos),
) -> Result<Recovered<D::File>, StorageError> {
    let io_err = |name: &str, e: io::Error| StorageError::io(disk.describe(name), e);
    let read_only = cfg.recovery == RecoveryMode::Inspect;
    // Make whatever the directory holds durable before trusting it.
    if !read_only {
        disk.sync_dir().await.map_err(|e| io_err(".", e))?;
    }
    let names = disk.list().await.map_err(|e| io_err(".", e))?;
    let mut seqs: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
    seqs.sort_unstable();
    let quarantined_before: Vec<u64> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".quarantined").and_then(parse_segment_name))
        .collect();
    let mut report = RecoveryReport::default();
    let strict = cfg.recovery != RecoveryMode::QuarantineCorrupt;
    let corrupt = |file: &str, offset: u64, reason: String| StorageError::Corruption {
        file: disk.describe(file),
        offset,
        reason,
    };

    // Segments are deleted oldest first, so the survivors must be contiguous
    // (a gap is only allowed where an operator quarantined a segment).
    for pair in seqs.windows(2) {
        for missing in pair[0] + 1..pair[1] {
            if !quarantined_before.contains(&missing) {
                return Err(corrupt(
                    &segment_name(missing),
                    0,
                    "segment is missing from the middle of the log".into(),
                ));
            }
        }
    }

    let mut found = Vec::with_capacity(seqs.len());
    for &seq in &seqs {
        let name = segment_name(seq);
        let file = disk.open(&name).await.map_err(|e| io_err(&name, e))?;
        let head = file
            .read_at(0, SEGMENT_HEADER_LEN as usize)
            .await
            .map_err(|e| io_err(&name, e))?;
        let header = match SegmentHeader::decode(&head) {
            Ok(h) => {
                if h.shard_id != cfg.shard_id {
                    return Err(StorageError::Mismatch(format!(
                        "{} belongs to shard {}, not shard {}",
                        disk.describe(&name),
                        h.shard_id,
                        cfg.shard_id
                    )));
                }
                if h.seq != seq {
                    return Err(corrupt(
                        &name,
                        16,
                        format!("header says segment {} but the file name says {seq}", h.seq),
                    ));
                }
                Some(h)
            }
            // A segment whose creation never finished: fine if nothing follows the header.
            Err(HeaderError::Blank) => {
                let size = file.size().await.map_err(|e| io_err(&name, e))?;
                let mut pos = 0;
                while pos < size {
                    let chunk = file
                        .read_at(pos, RECOVERY_READ_WINDOW)
                        .await
                        .map_err(|e| io_err(&name, e))?;
                    if let Some(i) = chunk.iter().position(|&b| b != 0) {
                        return Err(corrupt(
                            &name,
                            pos + i as u64,
                            "segment header is blank but data follows".into(),
                        ));
                    }
                    if chunk.is_empty() {
                        break;
                    }
                    pos += chunk.len() as u64;
                }
                None
            }
            Err(HeaderError::Invalid(why)) => {
                if strict {
                    return Err(corrupt(&name, 0, why));
                }
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

    // Pass 1 classifies every segment (and, in strict mode, also applies:
    // any error aborts startup, so applying early is harmless).
    let mut scans: Vec<Option<Scan>> = Vec::with_capacity(found.len());
    let mut prev_lsn = 0;
    for f in &found {
        let Some(h) = &f.header else {
            scans.push(None);
            continue;
        };
        let mut s = scan(&f.file, h, prev_lsn, if strict { Some(&mut *apply) } else { None })
            .await
            .map_err(|e| io_err(&f.name, e))?;
        // Zeros where the first commit should be are an unused segment only
        // if nothing valid follows them; otherwise the segment was used and
        // its first commit is lost.
        if let (Stop::Zero { at }, 0) = (&s.stop, s.commits) {
            let later = later_commit(&f.file, h, at + h.alignment as u64, prev_lsn)
                .await
                .map_err(|e| io_err(&f.name, e))?;
            if let Some(next) = later {
                s.stop = Stop::Bad {
                    at: *at,
                    reason: format!("zeros where the first commit should be; a valid commit follows at offset {next}"),
                };
            }
        }
        prev_lsn = s.last_lsn;
        scans.push(Some(s));
    }
    // Only the last segment holding data may end without a SEGMENT_END.
    let last_with_data = scans.iter().rposition(|s| s.as_ref().is_some_and(Scan::has_data));
    let mut quarantine = Vec::new();
    let mut tail: Option<usize> = None;
    for (i, s) in scans.iter().enumerate() {
        let Some(s) = s else { continue };
        let f = &found[i];
        let h = f.header.as_ref().expect("scanned segments have headers");
        let next = scans.get(i + 1).and_then(|n| n.as_ref());
        let problem = match &s.stop {
            // A recovery seal takes the LSN after the segment's last record,
            // and the segment that startup opened begins right after it.
            Stop::Sealed { next_lsn: 0, .. } => match next.and_then(|n| n.first_lsn) {
                Some(first) if first != s.last_lsn + 1 => {
                    let file = segment_name(f.seq + 1);
                    let reason = format!(
                        "{} was sealed at LSN {}, but the next segment begins with commit {first}: commits are missing",
                        f.name, s.last_lsn
                    );
                    if strict {
                        return Err(corrupt(&file, SEGMENT_HEADER_LEN, reason));
                    }
                    if !quarantine.contains(&(i + 1)) {
                        quarantine.push(i + 1);
                    }
                    None
                }
                _ => None,
            },
            // A rotation seal is written only after the next segment's first
            // commit is durable, and names it: that commit must be there.
            Stop::Sealed { next_lsn, .. } => match next.map(|n| n.first_lsn) {
                Some(Some(first)) if first == *next_lsn => None,
                found => {
                    let (file, why) = match found {
                        None => (segment_name(f.seq + 1), "is missing or has a blank header".to_string()),
                        Some(None) => (segment_name(f.seq + 1), "holds no commit".to_string()),
                        Some(Some(first)) => (segment_name(f.seq + 1), format!("begins with commit {first}")),
                    };
                    let reason = format!(
                        "{} says the next segment begins with commit {next_lsn}, but it {why}: a used segment reads as empty",
                        f.name
                    );
                    if strict {
                        return Err(corrupt(&file, SEGMENT_HEADER_LEN, reason));
                    }
                    // The damaged segment is the next one; quarantine it.
                    if found.is_some() && !quarantine.contains(&(i + 1)) {
                        quarantine.push(i + 1);
                    }
                    None
                }
            },
            // After the last segment holding data: prepared, never used.
            _ if last_with_data.is_none_or(|l| i > l) => None,
            stop if Some(i) != last_with_data => {
                if s.commits == 0 {
                    // Only the tail is ever empty when its successor is made:
                    // a segment before data that reads as empty lost its commits.
                    let at = match stop {
                        Stop::Bad { at, .. } | Stop::Zero { at } => *at,
                        Stop::Sealed { .. } => unreachable!(),
                    };
                    Some((
                        at,
                        "a used segment reads as empty: it holds no commit, but later segments hold data".to_string(),
                    ))
                } else if matches!(stop, Stop::Zero { .. })
                    && next.is_some_and(|n| {
                        // The rotation's first commit is durable and names
                        // LSN last + 2 (the seal never written took last + 1) ...
                        n.first_lsn == Some(s.last_lsn + 2)
                            // ... or it tore (nothing in it was acknowledged:
                            // answers wait for the seal) and is the log's
                            // torn tail ...
                            || (n.commits == 0
                                && matches!(n.stop, Stop::Bad { .. })
                                && last_with_data == Some(i + 1))
                            // ... or a later start sealed that torn segment
                            // empty, with the LSN after this one's last.
                            || (n.commits == 0
                                && matches!(n.stop, Stop::Sealed { next_lsn: 0, .. })
                                && n.last_lsn == s.last_lsn + 1)
                    })
                    && later_commit(&f.file, h, s.valid_end + h.alignment as u64, s.last_lsn)
                        .await
                        .map_err(|e| io_err(&f.name, e))?
                        .is_none()
                {
                    // Power failed after (or while) the next segment's first
                    // commit was written and before this one's seal (which
                    // would have taken LSN last + 1): nothing acknowledged is
                    // missing in between. Only if no
                    // valid newer frame follows the zeros in this file: one
                    // that does proves the segment went on, so the zeros are
                    // a lost or misplaced write, not a seal never written.
                    None
                } else {
                    let (at, why) = match stop {
                        Stop::Bad { at, reason } => (*at, reason.clone()),
                        Stop::Zero { at } => (*at, "segment ends without a segment-end frame".into()),
                        Stop::Sealed { .. } => unreachable!(),
                    };
                    Some((
                        at,
                        format!("{why}; later segments hold data, so this is not a torn tail"),
                    ))
                }
            }
            stop => {
                // The tail: damage here is a torn last write unless a valid
                // newer commit follows it.
                let from = s.valid_end + h.alignment as u64;
                let later = later_commit(&f.file, h, from, s.last_lsn)
                    .await
                    .map_err(|e| io_err(&f.name, e))?;
                match (stop, later) {
                    (Stop::Bad { at, reason }, Some(next)) => Some((
                        *at,
                        format!("{reason}; a valid commit follows at offset {next}, so this is not a torn tail"),
                    )),
                    (Stop::Zero { at }, Some(next)) => Some((
                        *at,
                        format!("zeros where a commit should be; a valid commit follows at offset {next}"),
                    )),
                    (Stop::Bad { at, reason }, None) => {
                        report.torn_tail = Some((disk.describe(&f.name), *at, reason.clone()));
                        tail = Some(i);
                        None
                    }
                    _ => {
                        tail = Some(i);
                        None
                    }
                }
            }
        };
        if let Some((at, reason)) = problem {
            if strict {
                return Err(corrupt(&f.name, at, reason));
            }
            if !quarantine.contains(&i) {
                quarantine.push(i);
            }
        }
    }

    if !strict {
        // Pass 2: apply the segments that stay.
        let mut prev_lsn = 0;
        for (i, f) in found.iter().enumerate() {
            let (Some(h), false) = (&f.header, quarantine.contains(&i)) else {
                continue;
            };
            let s = scan(&f.file, h, prev_lsn, Some(&mut *apply))
                .await
                .map_err(|e| io_err(&f.name, e))?;
            prev_lsn = s.last_lsn;
        }
        for &i in &quarantine {
            let f = &found[i];
            let to = format!("{}.quarantined", f.name);
            disk.rename(&f.name, &to).await.map_err(|e| io_err(&f.name, e))?;
            tracing::warn!(
                "quarantined damaged WAL segment {} as {to}; its records are lost",
                disk.describe(&f.name)
            );
            report.quarantined.push(f.name.clone());
        }
    }

    // The newest LSN of the segments that stay. Empty segments after the
    // last one holding data are removed below and do not count: their scan
    // reports the LSN before their header's base, which may lie above every
    // durable record, and sealing the tail above it would leave a gap in the
    // tail's LSNs, which the scan refuses (a gap means a misplaced write).
    let last_lsn = scans
        .iter()
        .enumerate()
        .filter(|(i, _)| !quarantine.contains(i) && last_with_data.is_some_and(|l| *i <= l))
        .filter_map(|(_, s)| s.as_ref().map(|s| s.last_lsn))
        .max()
        .unwrap_or(0);
    let mut next_lsn = last_lsn + 1;

    let mut segments = BTreeMap::new();
    let mut removed = Vec::new();
    for (i, (f, s)) in found.into_iter().zip(scans).enumerate() {
        if quarantine.contains(&i) {
            continue;
        }
        // Everything up to the last segment with data stays (an unused
        // segment before it is harmless and keeps the sequence contiguous);
        // empty segments after it go, and their numbers are reused.
        let keep = last_with_data.is_some_and(|l| i <= l);
        let (Some(h), Some(s), true) = (f.header, s, keep) else {
            if keep {
                return Err(corrupt(
                    &f.name,
                    0,
                    "segment header is blank but later segments hold data".into(),
                ));
            }
            removed.push(f.name);
            continue;
        };
        let end = match s.stop {
            Stop::Sealed { end, .. } => end,
            // A segment cut short by a crash between its successor's first
            // commit and its own seal stays as it is: a seal written now
            // would carry an LSN above its successor's.
            _ if read_only || tail != Some(i) => s.valid_end,
            _ => {
                // Seal the recovered tail where its valid data ends; never append to it again.
                let mut buf = Vec::new();
                encode_frame(&mut buf, h.seed(), kind::SEGMENT_END, next_lsn, &[]);
                next_lsn += 1;
                buf.resize(align_up(buf.len() as u64, h.alignment as u64) as usize, 0);
                f.file
                    .write_at(&buf, s.valid_end)
                    .await
                    .map_err(|e| io_err(&f.name, e))?;
                f.file.sync().await.map_err(|e| io_err(&f.name, e))?;
                s.valid_end + buf.len() as u64
            }
        };
        report.segments_replayed += 1;
        report.commits_replayed += s.commits;
        report.records_replayed += s.records;
        segments.insert(
            f.seq,
            Segment {
                file: Rc::new(f.file),
                header: h,
                end,
                sealed: true,
                live_records: 0,
                live_bytes: 0,
            },
        );
    }
    if !removed.is_empty() && !read_only {
        for name in &removed {
            disk.remove(name).await.map_err(|e| io_err(name, e))?;
        }
        disk.sync_dir().await.map_err(|e| io_err(".", e))?;
        report.removed_empty = removed;
    }
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
