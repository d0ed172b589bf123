//! WAL decoding on arbitrary bytes: frame headers, record bodies and segment
//! headers must validate or be refused, never panic or over-allocate.
#![no_main]

use engine::wal::frame::{body_matches, check_header, seed_of, HeaderCheck, SegmentHeader, FRAME_HEADER_LEN};
use engine::wal::record::Record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = SegmentHeader::decode(data);
    if let Some((&kind, body)) = data.split_first() {
        let _ = Record::decode(kind, body);
    }
    if data.len() >= FRAME_HEADER_LEN {
        for seed in [0, seed_of(0x1234_5678)] {
            if let HeaderCheck::Valid(h) = check_header(seed, data) {
                let body = &data[FRAME_HEADER_LEN..];
                if body_matches(seed, &h, body) {
                    let _ = Record::decode(h.kind, body);
                }
            }
        }
    }
});
