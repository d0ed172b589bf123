//! The operator's WAL tool, for a stopped server's data directory.
//!
//! # Layout
//! - [`shards`]: finds the WAL directories (one per shard) under a path.
//! - [`check`], [`dump`], [`stats`], [`repair`]: the commands; each writes
//!   its report to a `String` so the binary prints it and tests read it.
//!
//! Everything here is single-threaded and offline: it reads segments with
//! plain `std::fs` (`engine::disk::std_fs`), never through io_uring.

use engine::disk::std_fs::StdDisk;
use engine::wal::frame::SegmentHeader;
use engine::wal::record::Record;
use engine::wal::recovery::{inspect, repair as recover_in_place};
use engine::wal::{parse_segment_name, RecordPos, RecoveryMode};
use futures::executor::block_on;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// A WAL directory and the shard it belongs to.
pub struct ShardDir {
    pub path: PathBuf,
    pub shard_id: u32,
}

/// The shard directories under `path`: `path` itself if it holds segments,
/// else its `shard-NNN` children.
pub fn shards(path: &Path) -> Result<Vec<ShardDir>, String> {
    let has_segments = |p: &Path| -> bool {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .any(|e| e.file_name().to_str().and_then(parse_segment_name).is_some())
            })
            .unwrap_or(false)
    };
    let mut dirs = Vec::new();
    if has_segments(path) {
        dirs.push(path.to_path_buf());
    } else {
        let rd = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut children: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir() && has_segments(p))
            .collect();
        children.sort();
        dirs.extend(children);
    }
    if dirs.is_empty() {
        return Err(format!(
            "{}: no WAL segments here or in its shard-NNN directories",
            path.display()
        ));
    }
    dirs.into_iter()
        .map(|p| {
            Ok(ShardDir {
                shard_id: shard_id_of(&p)?,
                path: p,
            })
        })
        .collect()
}

/// The shard id recorded in the directory's first readable segment header.
fn shard_id_of(dir: &Path) -> Result<u32, String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| parse_segment_name(n).is_some())
        .collect();
    names.sort();
    for n in names {
        let bytes = std::fs::read(dir.join(&n)).map_err(|e| format!("{n}: {e}"))?;
        if let Ok(h) = SegmentHeader::decode(&bytes[..bytes.len().min(4096)]) {
            return Ok(h.shard_id);
        }
    }
    Err(format!("{}: no segment has a valid header", dir.display()))
}

/// `check`: verifies every segment. Returns the report and whether all is well.
pub fn check(path: &Path) -> Result<(String, bool), String> {
    let mut out = String::new();
    let mut ok = true;
    for s in shards(path)? {
        let disk = StdDisk::new(&s.path);
        match block_on(inspect(&disk, s.shard_id, &mut |_, _| {})) {
            Ok(r) => {
                let _ = write!(
                    out,
                    "OK {}: {} segments, {} commits, {} records",
                    s.path.display(),
                    r.segments_replayed,
                    r.commits_replayed,
                    r.records_replayed
                );
                if let Some((file, off, why)) = &r.torn_tail {
                    let _ = write!(
                        out,
                        "; torn tail in {file} at offset {off} ({why}): startup will cut it"
                    );
                }
                out.push('\n');
            }
            Err(e) => {
                ok = false;
                let _ = writeln!(out, "BAD {}: {e}", s.path.display());
            }
        }
    }
    Ok((out, ok))
}

fn describe(rec: &Record) -> String {
    let uuid = |b: &[u8; 16]| uuid::Uuid::from_bytes(*b).to_string();
    match rec {
        Record::QueueDefined {
            qid,
            account,
            name,
            metadata,
            acl,
        } => {
            format!(
                "QUEUE_DEFINED qid={qid} {account}/{name} metadata={:?} acl={:?}",
                metadata.0,
                acl.iter().map(|a| &a.id).collect::<Vec<_>>()
            )
        }
        Record::QueueDeleted { qid } => format!("QUEUE_DELETED qid={qid}"),
        Record::QueueCleared { qid } => format!("QUEUE_CLEARED qid={qid}"),
        Record::MessagePut(m) | Record::MessageRewritten(m) | Record::MessageReplaced(m) => {
            let kind = match rec {
                Record::MessagePut(_) => "MESSAGE_PUT",
                Record::MessageRewritten(_) => "MESSAGE_REWRITTEN",
                _ => "MESSAGE_REPLACED",
            };
            format!(
                "{kind} qid={} seq={} id={} visible={} expires={} dequeues={} bytes={}",
                m.qid,
                m.seq,
                uuid(&m.id),
                m.visible_ms,
                m.expires_ms,
                m.dequeue_count,
                m.body.len()
            )
        }
        Record::MessagesDequeued {
            qid,
            visible_ms,
            entries,
        } => format!(
            "MESSAGES_DEQUEUED qid={qid} visible={visible_ms} seqs={:?}",
            entries.iter().map(|e| (e.seq, e.dequeue_count)).collect::<Vec<_>>()
        ),
        Record::MessageVisibility {
            qid, seq, visible_ms, ..
        } => format!("MESSAGE_VISIBILITY qid={qid} seq={seq} visible={visible_ms}"),
        Record::MessageDeleted { qid, seq } => format!("MESSAGE_DELETED qid={qid} seq={seq}"),
        Record::Clock { floor_ms } => format!("CLOCK floor={floor_ms}"),
        Record::Commit { .. } | Record::SegmentEnd { .. } => String::new(),
    }
}

/// `dump`: every durable record as one line: segment, offset, LSN, what it is.
pub fn dump(path: &Path) -> Result<String, String> {
    let mut out = String::new();
    for s in shards(path)? {
        let _ = writeln!(out, "# {} (shard {})", s.path.display(), s.shard_id);
        let disk = StdDisk::new(&s.path);
        let r = block_on(inspect(&disk, s.shard_id, &mut |rec: Record, pos: RecordPos| {
            let _ = writeln!(
                out,
                "seg={} off={} lsn={} {}",
                pos.seg,
                pos.frame_offset,
                pos.lsn,
                describe(&rec)
            );
        }));
        if let Err(e) = r {
            let _ = writeln!(out, "# stopped: {e}");
        }
    }
    Ok(out)
}

/// `stats`: bytes, records and live bytes per segment; messages per queue.
pub fn stats(path: &Path) -> Result<String, String> {
    let mut out = String::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    for s in shards(path)? {
        let _ = writeln!(out, "# {} (shard {})", s.path.display(), s.shard_id);
        // (qid) -> (name, def seg, def len); (qid, seq) -> (seg, len, expires)
        let mut queues: BTreeMap<u64, (String, u64, u32)> = BTreeMap::new();
        let mut msgs: BTreeMap<(u64, u64), (u64, u32, u64)> = BTreeMap::new();
        let mut per_seg: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let disk = StdDisk::new(&s.path);
        let r = block_on(inspect(&disk, s.shard_id, &mut |rec: Record, pos: RecordPos| {
            let e = per_seg.entry(pos.seg).or_default();
            e.0 += 1;
            e.1 += pos.frame_len as u64;
            match rec {
                Record::QueueDefined { qid, account, name, .. } => {
                    queues.insert(qid, (format!("{account}/{name}"), pos.seg, pos.frame_len));
                }
                Record::QueueDeleted { qid } => {
                    queues.remove(&qid);
                    msgs.retain(|(q, _), _| *q != qid);
                }
                Record::QueueCleared { qid } => msgs.retain(|(q, _), _| *q != qid),
                Record::MessagePut(m) | Record::MessageRewritten(m) | Record::MessageReplaced(m) => {
                    msgs.insert((m.qid, m.seq), (pos.seg, pos.frame_len, m.expires_ms));
                }
                Record::MessageDeleted { qid, seq } => {
                    msgs.remove(&(qid, seq));
                }
                _ => {}
            }
        }));
        if let Err(e) = r {
            let _ = writeln!(out, "# stopped: {e}");
            continue;
        }
        msgs.retain(|(q, _), (_, _, exp)| queues.contains_key(q) && *exp > now);
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for (_, seg, len) in queues.values() {
            *live.entry(*seg).or_default() += *len as u64;
        }
        for (seg, len, _) in msgs.values() {
            *live.entry(*seg).or_default() += *len as u64;
        }
        let _ = writeln!(
            out,
            "{:>20} {:>10} {:>14} {:>14} {:>6}",
            "segment", "records", "record bytes", "live bytes", "live%"
        );
        for (seg, (records, bytes)) in &per_seg {
            let l = live.get(seg).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{seg:>20} {records:>10} {bytes:>14} {l:>14} {:>5}%",
                if *bytes > 0 { l * 100 / bytes } else { 0 }
            );
        }
        let _ = writeln!(out, "{:>40} {:>10}", "queue", "messages");
        for (qid, (name, _, _)) in &queues {
            let n = msgs.keys().filter(|(q, _)| q == qid).count();
            let _ = writeln!(out, "{name:>40} {n:>10}");
        }
    }
    Ok(out)
}

/// `repair`: cut torn tails (`quarantine = false`) or set damaged segments
/// aside (`quarantine = true`, their records are lost), in place.
pub fn repair(path: &Path, quarantine: bool) -> Result<String, String> {
    let mut out = String::new();
    let mode = if quarantine {
        RecoveryMode::QuarantineCorrupt
    } else {
        RecoveryMode::Strict
    };
    for s in shards(path)? {
        let disk = StdDisk::new(&s.path);
        match block_on(recover_in_place(&disk, s.shard_id, mode)) {
            Ok(r) => {
                let _ = write!(out, "repaired {}", s.path.display());
                if let Some((file, off, _)) = &r.torn_tail {
                    let _ = write!(out, "; cut the torn tail of {file} at offset {off}");
                }
                for q in &r.quarantined {
                    let _ = write!(out, "; quarantined {q} (its records are lost)");
                }
                out.push('\n');
            }
            Err(e) => return Err(format!("{}: {e}", s.path.display())),
        }
    }
    Ok(out)
}
