//! Logical WAL records: what a frame's body means. Encoding is little endian
//! with length-prefixed strings; decoding never panics on hostile bytes.
//!
//! Decoding reads bytes from disk and encoding writes lengths that came from
//! requests, so the module denies unchecked arithmetic, indexing and
//! panicking unwraps (docs/SECURITY.md): a bad length is an error, never a
//! panic inside `Wal::append`.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::string_slice
)]

use crate::model::{Metadata, SignedIdentifier};
use std::rc::Rc;

/// Frame kinds. The numbers are part of the on-disk format.
pub mod kind {
    /// First frame of every group commit: how long the commit is.
    pub const COMMIT: u8 = 1;
    /// Last frame of a sealed segment.
    pub const SEGMENT_END: u8 = 2;
    pub const QUEUE_DEFINED: u8 = 10;
    pub const QUEUE_DELETED: u8 = 11;
    pub const MESSAGE_PUT: u8 = 20;
    pub const MESSAGE_REWRITTEN: u8 = 21;
    pub const MESSAGE_REPLACED: u8 = 22;
    pub const MESSAGES_DEQUEUED: u8 = 23;
    pub const MESSAGE_VISIBILITY: u8 = 24;
    pub const MESSAGE_DELETED: u8 = 25;
    pub const QUEUE_CLEARED: u8 = 26;
    /// The shard's clock floor: time never goes below this after a restart.
    pub const CLOCK: u8 = 27;
}

/// The complete state of one message. Any record that gives a message a new
/// body carries all of it, so the message can be rebuilt from this record
/// alone once older segments are gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageState {
    pub qid: u64,
    pub seq: u64,
    pub id: [u8; 16],
    pub inserted_ms: u64,
    pub expires_ms: u64,
    pub visible_ms: u64,
    pub dequeue_count: u64,
    pub receipt: u64,
    /// Shared with the body cache: a put's text is copied once into this
    /// and then only into its WAL frame.
    pub body: Rc<[u8]>,
}

/// Bytes of a `MessageState` body before the text; lets the writer compute
/// where the text lands on disk.
pub const MESSAGE_STATE_FIXED: usize = 8 * 2 + 16 + 8 * 5 + 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dequeued {
    pub seq: u64,
    pub dequeue_count: u64,
    pub receipt: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Commit {
        len: u32,
        records: u32,
    },
    /// `next_lsn`: when not zero, the LSN of the first commit of the next
    /// segment, which was durable before this frame was written. Zero when
    /// recovery sealed the segment (no promise about the next one).
    SegmentEnd {
        next_lsn: u64,
    },
    QueueDefined {
        qid: u64,
        account: String,
        name: String,
        metadata: Metadata,
        acl: Vec<SignedIdentifier>,
    },
    QueueDeleted {
        qid: u64,
    },
    MessagePut(MessageState),
    MessageRewritten(MessageState),
    MessageReplaced(MessageState),
    MessagesDequeued {
        qid: u64,
        visible_ms: u64,
        entries: Vec<Dequeued>,
    },
    MessageVisibility {
        qid: u64,
        seq: u64,
        visible_ms: u64,
        receipt: u64,
    },
    MessageDeleted {
        qid: u64,
        seq: u64,
    },
    QueueCleared {
        qid: u64,
    },
    /// Every answer given so far was computed at a time at or below
    /// `floor_ms`; after a restart the shard's clock starts there.
    Clock {
        floor_ms: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

/// A record that cannot be encoded (a string or list longer than its length
/// field). Validation should refuse such input first; this is the backstop
/// that turns a missed limit into an error instead of a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError(pub String);

impl Record {
    pub fn kind(&self) -> u8 {
        match self {
            Record::Commit { .. } => kind::COMMIT,
            Record::SegmentEnd { .. } => kind::SEGMENT_END,
            Record::QueueDefined { .. } => kind::QUEUE_DEFINED,
            Record::QueueDeleted { .. } => kind::QUEUE_DELETED,
            Record::MessagePut(_) => kind::MESSAGE_PUT,
            Record::MessageRewritten(_) => kind::MESSAGE_REWRITTEN,
            Record::MessageReplaced(_) => kind::MESSAGE_REPLACED,
            Record::MessagesDequeued { .. } => kind::MESSAGES_DEQUEUED,
            Record::MessageVisibility { .. } => kind::MESSAGE_VISIBILITY,
            Record::MessageDeleted { .. } => kind::MESSAGE_DELETED,
            Record::QueueCleared { .. } => kind::QUEUE_CLEARED,
            Record::Clock { .. } => kind::CLOCK,
        }
    }

    /// Appends the record's body to `out`. On error `out` may hold part of
    /// the body; the caller discards it.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let mut w = Writer(out);
        match self {
            Record::Commit { len, records } => {
                w.u32(*len);
                w.u32(*records);
            }
            Record::SegmentEnd { next_lsn } => {
                // Written only when there is a promise to record, so a
                // recovery seal keeps the old, empty body.
                if *next_lsn != 0 {
                    w.u64(*next_lsn);
                }
            }
            Record::QueueDefined {
                qid,
                account,
                name,
                metadata,
                acl,
            } => {
                w.u64(*qid);
                w.str(account)?;
                w.str(name)?;
                w.count16(metadata.0.len(), "metadata pairs")?;
                for (k, v) in &metadata.0 {
                    w.str(k)?;
                    w.str(v)?;
                }
                w.count16(acl.len(), "signed identifiers")?;
                for si in acl {
                    w.str(&si.id)?;
                    for f in [&si.start, &si.expiry, &si.permission] {
                        w.opt_str(f.as_deref())?;
                    }
                }
            }
            Record::QueueDeleted { qid } | Record::QueueCleared { qid } => w.u64(*qid),
            Record::MessagePut(m) | Record::MessageRewritten(m) | Record::MessageReplaced(m) => {
                w.u64(m.qid);
                w.u64(m.seq);
                w.0.extend_from_slice(&m.id);
                for v in [m.inserted_ms, m.expires_ms, m.visible_ms, m.dequeue_count, m.receipt] {
                    w.u64(v);
                }
                w.count32(m.body.len(), "message text bytes")?;
                w.0.extend_from_slice(&m.body);
            }
            Record::MessagesDequeued {
                qid,
                visible_ms,
                entries,
            } => {
                w.u64(*qid);
                w.u64(*visible_ms);
                w.count32(entries.len(), "dequeue entries")?;
                for e in entries {
                    w.u64(e.seq);
                    w.u64(e.dequeue_count);
                    w.u64(e.receipt);
                }
            }
            Record::MessageVisibility {
                qid,
                seq,
                visible_ms,
                receipt,
            } => {
                for v in [*qid, *seq, *visible_ms, *receipt] {
                    w.u64(v);
                }
            }
            Record::MessageDeleted { qid, seq } => {
                w.u64(*qid);
                w.u64(*seq);
            }
            Record::Clock { floor_ms } => w.u64(*floor_ms),
        }
        Ok(())
    }

    pub fn decode(kind: u8, body: &[u8]) -> Result<Record, DecodeError> {
        let mut r = Reader(body);
        let rec = match kind {
            kind::COMMIT => Record::Commit {
                len: r.u32()?,
                records: r.u32()?,
            },
            kind::SEGMENT_END => Record::SegmentEnd {
                next_lsn: if r.0.is_empty() { 0 } else { r.u64()? },
            },
            kind::CLOCK => Record::Clock { floor_ms: r.u64()? },
            kind::QUEUE_DEFINED => r.queue_defined()?,
            kind::QUEUE_DELETED => Record::QueueDeleted { qid: r.u64()? },
            kind::QUEUE_CLEARED => Record::QueueCleared { qid: r.u64()? },
            kind::MESSAGE_PUT => Record::MessagePut(r.message_state()?),
            kind::MESSAGE_REWRITTEN => Record::MessageRewritten(r.message_state()?),
            kind::MESSAGE_REPLACED => Record::MessageReplaced(r.message_state()?),
            kind::MESSAGES_DEQUEUED => r.messages_dequeued()?,
            kind::MESSAGE_VISIBILITY => Record::MessageVisibility {
                qid: r.u64()?,
                seq: r.u64()?,
                visible_ms: r.u64()?,
                receipt: r.u64()?,
            },
            kind::MESSAGE_DELETED => Record::MessageDeleted {
                qid: r.u64()?,
                seq: r.u64()?,
            },
            _ => return Err(DecodeError("unknown record kind")),
        };
        if !r.0.is_empty() {
            return Err(DecodeError("trailing bytes after the record"));
        }
        Ok(rec)
    }
}

struct Writer<'a>(&'a mut Vec<u8>);
impl Writer<'_> {
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn count16(&mut self, n: usize, what: &str) -> Result<(), EncodeError> {
        let n = u16::try_from(n).map_err(|_| EncodeError(format!("{n} {what} do not fit a record")))?;
        self.u16(n);
        Ok(())
    }
    fn count32(&mut self, n: usize, what: &str) -> Result<(), EncodeError> {
        let n = u32::try_from(n).map_err(|_| EncodeError(format!("{n} {what} do not fit a record")))?;
        self.u32(n);
        Ok(())
    }
    fn str(&mut self, s: &str) -> Result<(), EncodeError> {
        let len = u16::try_from(s.len())
            .map_err(|_| EncodeError(format!("a string of {} bytes does not fit a record", s.len())))?;
        self.u16(len);
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
    fn opt_str(&mut self, s: Option<&str>) -> Result<(), EncodeError> {
        match s {
            None => self.0.push(0),
            Some(s) => {
                self.0.push(1);
                self.str(s)?;
            }
        }
        Ok(())
    }
}

struct Reader<'a>(&'a [u8]);

/// The bodies with more than a few fields, one method per record layout
/// (docs/STORAGE_FORMAT.md, "Record kinds").
impl Reader<'_> {
    fn queue_defined(&mut self) -> Result<Record, DecodeError> {
        let qid = self.u64()?;
        let account = self.str()?;
        let name = self.str()?;
        let n = self.u16()?;
        // Capacities are capped: counts come from disk.
        let mut md = Vec::with_capacity(n.min(64) as usize);
        for _ in 0..n {
            md.push((self.str()?, self.str()?));
        }
        let n = self.u16()?;
        let mut acl = Vec::with_capacity(n.min(8) as usize);
        for _ in 0..n {
            acl.push(SignedIdentifier {
                id: self.str()?,
                start: self.opt_str()?,
                expiry: self.opt_str()?,
                permission: self.opt_str()?,
            });
        }
        Ok(Record::QueueDefined {
            qid,
            account,
            name,
            metadata: Metadata(md),
            acl,
        })
    }

    fn message_state(&mut self) -> Result<MessageState, DecodeError> {
        Ok(MessageState {
            qid: self.u64()?,
            seq: self.u64()?,
            id: self.bytes(16)?.try_into().map_err(|_| DecodeError("id"))?,
            inserted_ms: self.u64()?,
            expires_ms: self.u64()?,
            visible_ms: self.u64()?,
            dequeue_count: self.u64()?,
            receipt: self.u64()?,
            body: {
                let n = self.u32()? as usize;
                Rc::from(self.bytes(n)?)
            },
        })
    }

    fn messages_dequeued(&mut self) -> Result<Record, DecodeError> {
        let qid = self.u64()?;
        let visible_ms = self.u64()?;
        let n = self.u32()? as usize;
        // Each entry is 24 bytes; a count the body cannot hold is refused
        // before it sizes an allocation.
        if n > self.0.len() / 24 {
            return Err(DecodeError("dequeue entry count exceeds the body"));
        }
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push(Dequeued {
                seq: self.u64()?,
                dequeue_count: self.u64()?,
                receipt: self.u64()?,
            });
        }
        Ok(Record::MessagesDequeued {
            qid,
            visible_ms,
            entries,
        })
    }
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError("record body is truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    /// Exactly `N` bytes, as an array.
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.bytes(N)?
            .try_into()
            .map_err(|_| DecodeError("record body is truncated"))
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(u8::from_le_bytes(self.array()?))
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let n = self.u16()? as usize;
        String::from_utf8(self.bytes(n)?.to_vec()).map_err(|_| DecodeError("string is not UTF-8"))
    }
    fn opt_str(&mut self) -> Result<Option<String>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.str()?)),
            _ => Err(DecodeError("bad option tag")),
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;

    fn samples() -> Vec<Record> {
        let m = MessageState {
            qid: 1,
            seq: 2,
            id: [7; 16],
            inserted_ms: 3,
            expires_ms: 4,
            visible_ms: 5,
            dequeue_count: 6,
            receipt: 7,
            body: b"text <&>".to_vec().into(),
        };
        vec![
            Record::Commit { len: 100, records: 3 },
            Record::SegmentEnd { next_lsn: 0 },
            Record::SegmentEnd { next_lsn: 12 },
            Record::Clock { floor_ms: 99 },
            Record::QueueDefined {
                qid: 9,
                account: "devstoreaccount1".into(),
                name: "q1".into(),
                metadata: Metadata(vec![("Foo".into(), "bar".into())]),
                acl: vec![SignedIdentifier {
                    id: "p".into(),
                    start: None,
                    expiry: Some("2030-01-01T00:00:00.0000000Z".into()),
                    permission: Some("raup".into()),
                }],
            },
            Record::QueueDeleted { qid: 9 },
            Record::QueueCleared { qid: 9 },
            Record::MessagePut(m.clone()),
            Record::MessageRewritten(m.clone()),
            Record::MessageReplaced(m),
            Record::MessagesDequeued {
                qid: 1,
                visible_ms: 10,
                entries: vec![Dequeued {
                    seq: 1,
                    dequeue_count: 2,
                    receipt: 3,
                }],
            },
            Record::MessageVisibility {
                qid: 1,
                seq: 2,
                visible_ms: 3,
                receipt: 4,
            },
            Record::MessageDeleted { qid: 1, seq: 2 },
        ]
    }

    #[test]
    fn every_record_round_trips_and_truncations_fail_cleanly() {
        for rec in samples() {
            let mut b = Vec::new();
            rec.encode(&mut b).unwrap();
            assert_eq!(Record::decode(rec.kind(), &b), Ok(rec.clone()));
            for cut in 0..b.len() {
                let empty_seal = cut == 0 && rec.kind() == kind::SEGMENT_END;
                assert!(Record::decode(rec.kind(), &b[..cut]).is_err() || cut == b.len() || empty_seal);
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(Record::decode(rec.kind(), &longer).is_err());
        }
        assert!(Record::decode(200, &[]).is_err());
    }

    #[test]
    fn message_state_fixed_prefix_is_exact() {
        let m = MessageState {
            qid: 1,
            seq: 2,
            id: [0; 16],
            inserted_ms: 0,
            expires_ms: 0,
            visible_ms: 0,
            dequeue_count: 0,
            receipt: 0,
            body: b"abc".to_vec().into(),
        };
        let mut b = Vec::new();
        Record::MessagePut(m).encode(&mut b).unwrap();
        assert_eq!(b.len(), MESSAGE_STATE_FIXED + 3);
        assert_eq!(&b[MESSAGE_STATE_FIXED..], b"abc");
    }

    #[test]
    fn an_oversized_string_is_an_error_not_a_panic() {
        let rec = Record::QueueDefined {
            qid: 1,
            account: "a".into(),
            name: "q".into(),
            metadata: Metadata::default(),
            acl: vec![SignedIdentifier {
                id: "p".into(),
                permission: Some("r".repeat(70_000)),
                ..Default::default()
            }],
        };
        assert!(rec.encode(&mut Vec::new()).is_err());
    }
}
