//! The record frame and the segment header, byte for byte
//! (docs/STORAGE_FORMAT.md is the prose version of this file).
//!
//! ```text
//! segment header (SEGMENT_HEADER_LEN bytes, only the first 60 used, rest zero)
//!   0  magic      [u8; 8] = "HEMATWAL"
//!   8  version    u32   1, or 2 when a flag is set
//!  12  shard_id   u32
//!  16  seq        u64   segment sequence number, also in the file name
//!  24  base_lsn   u64   every LSN in the segment is >= this
//!  32  salt       u64   random per segment; seeds every checksum inside it
//!  40  created_ms u64
//!  48  alignment  u32   device block size commits were aligned to
//!  version 1:
//!  52  crc        u32   crc32 of bytes 0..52
//!  version 2:
//!  52  flags      u32   bit 0: recycled (the file held an older segment)
//!  56  crc        u32   crc32 of bytes 0..56
//!
//! frame (little endian, FRAME_HEADER_LEN = 24)
//!   0  header_crc u32   crc32 of bytes 4..24, seeded from the salt
//!   4  body_len   u32
//!   8  kind       u8
//!   9  flags      u8    zero
//!  10  reserved   u16   zero
//!  12  lsn        u64
//!  20  body_crc   u32   crc32 of the body, seeded from the salt
//!  24  body       [u8; body_len]
//! ```
//! The header crc is checked before `body_len` is believed, so a torn length
//! never sends the reader off into the weeds.

use crate::limits::{MAX_RECORD_BODY, SEGMENT_HEADER_LEN};

pub const MAGIC: [u8; 8] = *b"HEMATWAL";
/// The newest header version this build writes and reads. A header with no
/// flag set is still written as version 1, so a log that never recycled a
/// file stays readable by builds that predate version 2.
pub const FORMAT_VERSION: u32 = 2;
pub const FRAME_HEADER_LEN: usize = 24;
const SEGMENT_HEADER_USED: usize = 60;
/// Header flag: the segment reuses the file of a dead one, so the bytes past
/// its last commit are the old segment's frames, not zeros (they never
/// validate: another salt seeded them).
const FLAG_RECYCLED: u32 = 1;

/// The fixed fields at the start of every segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub shard_id: u32,
    pub seq: u64,
    pub base_lsn: u64,
    pub salt: u64,
    pub created_ms: u64,
    /// Every commit starts at a multiple of this.
    pub alignment: u32,
    /// The file held an older segment (docs/STORAGE_FORMAT.md, "Recycled
    /// segments"): recovery reads a frame that does not validate at a
    /// commit boundary as the end of the data, as it reads zeros.
    pub recycled: bool,
}

/// Why a segment header did not validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// All zero (or too short): a segment whose creation never completed.
    Blank,
    Invalid(String),
}

impl SegmentHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SEGMENT_HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[12..16].copy_from_slice(&self.shard_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.base_lsn.to_le_bytes());
        b[32..40].copy_from_slice(&self.salt.to_le_bytes());
        b[40..48].copy_from_slice(&self.created_ms.to_le_bytes());
        b[48..52].copy_from_slice(&self.alignment.to_le_bytes());
        if self.recycled {
            b[8..12].copy_from_slice(&2u32.to_le_bytes());
            b[52..56].copy_from_slice(&FLAG_RECYCLED.to_le_bytes());
            let crc = crc32fast::hash(&b[0..56]);
            b[56..60].copy_from_slice(&crc.to_le_bytes());
        } else {
            b[8..12].copy_from_slice(&1u32.to_le_bytes());
            let crc = crc32fast::hash(&b[0..52]);
            b[52..56].copy_from_slice(&crc.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, HeaderError> {
        if b.len() < SEGMENT_HEADER_USED || b[..SEGMENT_HEADER_USED].iter().all(|&x| x == 0) {
            return Err(HeaderError::Blank);
        }
        if b[0..8] != MAGIC {
            return Err(HeaderError::Invalid("bad magic".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        // The version decides where the checksum is; it is believed only
        // once that checksum matches.
        let (covered, flags) = match u32_at(8) {
            1 => (52, 0),
            2 => (56, u32_at(52)),
            version => {
                return Err(HeaderError::Invalid(format!(
                    "format version {version}, this build reads 1 to {FORMAT_VERSION}"
                )))
            }
        };
        if u32_at(covered) != crc32fast::hash(&b[0..covered]) {
            return Err(HeaderError::Invalid("segment header checksum mismatch".into()));
        }
        if flags & !FLAG_RECYCLED != 0 {
            return Err(HeaderError::Invalid(format!("unknown segment header flags {flags:#x}")));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let alignment = u32::from_le_bytes(b[48..52].try_into().expect("4 bytes"));
        if !alignment.is_power_of_two() || !(512..=4096).contains(&alignment) {
            return Err(HeaderError::Invalid(format!("implausible alignment {alignment}")));
        }
        Ok(SegmentHeader {
            alignment,
            shard_id: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            seq: u64_at(16),
            base_lsn: u64_at(24),
            salt: u64_at(32),
            created_ms: u64_at(40),
            recycled: flags & FLAG_RECYCLED != 0,
        })
    }

    /// The checksum seed for frames in this segment.
    pub fn seed(&self) -> u32 {
        seed_of(self.salt)
    }
}

pub fn seed_of(salt: u64) -> u32 {
    (salt as u32) ^ ((salt >> 32) as u32)
}

fn crc_seeded(seed: u32, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    h.update(data);
    h.finalize()
}

/// Appends one frame to `out`.
///
/// The body's checksum is computed from `body`, not from its copy in `out`:
/// the same bytes, but `body` is the caller's small buffer, just written
/// and in cache, while the frame lands in a large batch buffer last touched
/// a few commits ago. Read back right after the copy, those fresh lines
/// made framing a 1 KiB message 2.4 times slower on average than with the
/// checksum taken over the source (the time-stamp counter read around this
/// function in a put at 64 connections: 320-1,220 ticks a frame, about 650
/// on average, against a steady 240-380; docs/benchmarks.md, "The frame's
/// checksum taken from its source").
pub fn encode_frame(out: &mut Vec<u8>, seed: u32, kind: u8, lsn: u64, body: &[u8]) {
    assert!(
        body.len() <= MAX_RECORD_BODY,
        "record body of {} bytes exceeds the frame limit",
        body.len()
    );
    let mut h = [0u8; FRAME_HEADER_LEN];
    h[4..8].copy_from_slice(&(body.len() as u32).to_le_bytes());
    h[8] = kind;
    h[12..20].copy_from_slice(&lsn.to_le_bytes());
    h[20..24].copy_from_slice(&crc_seeded(seed, body).to_le_bytes());
    let hcrc = crc_seeded(seed, &h[4..24]);
    h[0..4].copy_from_slice(&hcrc.to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(body);
}

/// A frame header that passed its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub body_len: u32,
    pub kind: u8,
    pub lsn: u64,
    pub body_crc: u32,
}

/// What the bytes at a frame position are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderCheck {
    /// Every header byte is zero: padding or the end of the data.
    Zero,
    Valid(FrameHeader),
    Invalid(&'static str),
}

pub fn check_header(seed: u32, h: &[u8]) -> HeaderCheck {
    debug_assert!(h.len() >= FRAME_HEADER_LEN);
    let h = &h[..FRAME_HEADER_LEN];
    if h.iter().all(|&b| b == 0) {
        return HeaderCheck::Zero;
    }
    let stored = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
    if stored != crc_seeded(seed, &h[4..24]) {
        return HeaderCheck::Invalid("frame header checksum mismatch");
    }
    let body_len = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
    if body_len as usize > MAX_RECORD_BODY {
        return HeaderCheck::Invalid("frame length over the limit");
    }
    if h[9] != 0 || h[10] != 0 || h[11] != 0 {
        return HeaderCheck::Invalid("reserved frame bytes are not zero");
    }
    HeaderCheck::Valid(FrameHeader {
        body_len,
        kind: h[8],
        lsn: u64::from_le_bytes(h[12..20].try_into().expect("8 bytes")),
        body_crc: u32::from_le_bytes(h[20..24].try_into().expect("4 bytes")),
    })
}

pub fn body_matches(seed: u32, header: &FrameHeader, body: &[u8]) -> bool {
    body.len() == header.body_len as usize && crc_seeded(seed, body) == header.body_crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_every_bit_flip_is_caught() {
        let seed = seed_of(0x1234_5678_9abc_def0);
        let mut out = Vec::new();
        encode_frame(&mut out, seed, 7, 42, b"hello world");
        let HeaderCheck::Valid(h) = check_header(seed, &out) else {
            panic!()
        };
        assert_eq!((h.kind, h.lsn, h.body_len), (7, 42, 11));
        assert!(body_matches(seed, &h, &out[FRAME_HEADER_LEN..]));
        for byte in 0..out.len() {
            for bit in 0..8 {
                let mut c = out.clone();
                c[byte] ^= 1 << bit;
                let ok = match check_header(seed, &c) {
                    HeaderCheck::Valid(h) => body_matches(seed, &h, &c[FRAME_HEADER_LEN..]),
                    _ => false,
                };
                assert!(!ok, "flip of byte {byte} bit {bit} went unnoticed");
            }
        }
        // a frame written under another salt (stale bytes of a reused file) never validates
        assert!(!matches!(check_header(seed_of(99), &out), HeaderCheck::Valid(_)));
        assert_eq!(check_header(seed, &[0u8; 24]), HeaderCheck::Zero);
    }

    /// The frame's bytes are the on-disk format: a log written by an older
    /// build must still read. These were computed apart from this code,
    /// from the layout at the top of this file and zlib's CRC-32 (Python's
    /// `zlib.crc32(data, seed)`).
    #[test]
    fn a_frame_is_the_documented_bytes() {
        let seed = seed_of(0x1234_5678_9abc_def0);
        let mut out = vec![0xEE];
        encode_frame(&mut out, seed, 7, 42, b"hello world");
        let header = [
            0x59, 0x22, 0xa6, 0xac, 0x0b, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x92, 0xb0, 0xe9, 0x68,
        ];
        assert_eq!(out[0], 0xEE, "what was in the buffer stays");
        assert_eq!(out[1..1 + FRAME_HEADER_LEN], header);
        assert_eq!(&out[1 + FRAME_HEADER_LEN..], b"hello world");
    }

    #[test]
    fn segment_header_round_trip() {
        let h = SegmentHeader {
            shard_id: 3,
            seq: 9,
            base_lsn: 100,
            salt: 77,
            created_ms: 5,
            alignment: 512,
            recycled: false,
        };
        let b = h.encode();
        assert_eq!(b.len() as u64, SEGMENT_HEADER_LEN);
        assert_eq!(
            u32::from_le_bytes(b[8..12].try_into().unwrap()),
            1,
            "no flag: still version 1"
        );
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        assert_eq!(SegmentHeader::decode(&[0u8; 4096]), Err(HeaderError::Blank));
        let mut c = b.clone();
        c[20] ^= 1;
        assert!(matches!(SegmentHeader::decode(&c), Err(HeaderError::Invalid(_))));
        // version 2 carries the recycled flag under a checksum that covers it
        let r = SegmentHeader { recycled: true, ..h };
        let b2 = r.encode();
        assert_eq!(u32::from_le_bytes(b2[8..12].try_into().unwrap()), 2);
        assert_eq!(SegmentHeader::decode(&b2), Ok(r));
        for byte in [8, 52, 53, 56] {
            let mut c = b2.clone();
            c[byte] ^= 1;
            assert!(
                matches!(SegmentHeader::decode(&c), Err(HeaderError::Invalid(_))),
                "byte {byte}"
            );
        }
        // a version-1 header never reads as recycled, whatever follows its checksum
        let mut c = b.clone();
        c[56] = 0xff;
        assert_eq!(SegmentHeader::decode(&c), Ok(h));
    }
}
