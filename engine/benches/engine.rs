//! Micro-benchmarks of the engine's hot pieces: record encode/decode, the
//! visibility index, the indexes' put-and-delete flow against a `BTreeSet`, and
//! group commit on the simulated disk.
//! Run: `cargo bench -p hematite-engine`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use engine::disk::sim::SimDisk;
use engine::model::Metadata;
use engine::queue::VisibilityIndex;
use engine::shard::ShardConfig;
use engine::wal::frame::{body_matches, check_header, encode_frame, seed_of, HeaderCheck, FRAME_HEADER_LEN};
use engine::wal::record::{MessageState, Record};
use engine::{ManualClock, Shard};
use futures::executor::block_on;
use std::rc::Rc;

fn put_record(len: usize) -> Record {
    Record::MessagePut(MessageState {
        qid: 1,
        seq: 2,
        id: [9; 16],
        inserted_ms: 1,
        expires_ms: 2,
        visible_ms: 3,
        dequeue_count: 0,
        receipt: 4,
        body: vec![b'x'; len].into(),
    })
}

fn records(c: &mut Criterion) {
    let mut g = c.benchmark_group("wal_record");
    let rec = put_record(1024);
    let seed = seed_of(0xfeed);
    let mut framed = Vec::new();
    let mut body = Vec::new();
    rec.encode(&mut body).unwrap();
    encode_frame(&mut framed, seed, rec.kind(), 7, &body);
    g.throughput(Throughput::Bytes(framed.len() as u64));
    g.bench_function("encode_1KiB_put", |b| {
        let mut out = Vec::with_capacity(2048);
        let mut body = Vec::with_capacity(2048);
        b.iter(|| {
            out.clear();
            body.clear();
            rec.encode(&mut body).unwrap();
            encode_frame(&mut out, seed, rec.kind(), 7, &body);
            out.len()
        })
    });
    g.bench_function("decode_1KiB_put", |b| {
        b.iter(|| {
            let HeaderCheck::Valid(h) = check_header(seed, &framed) else {
                panic!()
            };
            assert!(body_matches(seed, &h, &framed[FRAME_HEADER_LEN..]));
            Record::decode(h.kind, &framed[FRAME_HEADER_LEN..]).unwrap()
        })
    });
    g.finish();
}

fn visibility(c: &mut Criterion) {
    let mut g = c.benchmark_group("visibility_index");
    for size in [10usize, 10_000, 1_000_000] {
        let mut idx = VisibilityIndex::default();
        for i in 0..size as u64 {
            idx.insert(i % 1000, i);
        }
        let mut next = size as u64;
        // One dequeue: take the earliest message, make it visible 30 s later.
        g.bench_function(format!("pop_reinsert_{size}"), |b| {
            b.iter(|| {
                let (vis, seq) = idx.first().unwrap();
                idx.remove(vis, seq);
                idx.insert(vis + 30_000, seq);
                seq
            })
        });
        g.bench_function(format!("insert_remove_{size}"), |b| {
            b.iter(|| {
                next += 1;
                idx.insert(500, u64::MAX - next);
                idx.remove(500, u64::MAX - next);
            })
        });
    }
    g.finish();
}

/// A queue's steady flow, one put and one delete, on an index of `size`
/// entries: an insert above every key and a removal of the smallest, in
/// the `RunMap` the queue keeps its indexes in and in the `BTreeSet` it
/// replaced, side by side (docs/benchmarks.md, "Indexes in runs").
fn index_flow(c: &mut Criterion) {
    let mut g = c.benchmark_group("index_flow");
    for size in [10u64, 10_000, 1_000_000] {
        let mut runs = engine::run_map::RunMap::default();
        let mut tree = std::collections::BTreeSet::new();
        for i in 0..size {
            runs.insert((i, i), ());
            tree.insert((i, i));
        }
        let mut next = size;
        g.bench_function(format!("run_map_{size}"), |b| {
            b.iter(|| {
                next += 1;
                runs.insert((next, next), ());
                runs.pop_first()
            })
        });
        let mut next = size;
        g.bench_function(format!("btree_set_{size}"), |b| {
            b.iter(|| {
                next += 1;
                tree.insert((next, next));
                tree.pop_first()
            })
        });
    }
    g.finish();
}

fn group_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("group_commit_sim");
    for writers in [1usize, 64] {
        g.throughput(Throughput::Elements(writers as u64));
        g.bench_function(format!("{writers}_concurrent_1KiB_puts"), |b| {
            b.iter_batched(
                || {
                    let disk = SimDisk::new();
                    let mut cfg = ShardConfig::new(0);
                    cfg.segment_bytes = 4 << 20;
                    let s = block_on(Shard::open(disk, cfg, Rc::new(ManualClock::new(1)))).unwrap();
                    block_on(s.create_queue("acct", "bench", Metadata::default())).unwrap();
                    s
                },
                |s| {
                    let puts = (0..writers).map(|_| s.put_message("acct", "bench", "x".repeat(1024), None, None));
                    block_on(futures::future::join_all(puts));
                    // Returned, so the shard (and its simulated disk) is dropped outside the timing.
                    s
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, records, visibility, index_flow, group_commit);
criterion_main!(benches);
