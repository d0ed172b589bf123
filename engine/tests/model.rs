//! Model-based property test: random sequences of queue and message
//! operations, clock advances, maintenance, crashes (unsynced writes lost or
//! torn) and restarts, run against the shard on the simulated disk and
//! against a plain reference model. Every answer must match the model, and
//! after every crash the recovered state must equal the model's durable state.
//!
//! `PROPTEST_CASES` sets the number of sequences (default 1000).

mod common;

/// Times are compared exactly across restarts, so the clock floor is
/// recorded without a lease (a lease may start the clock up to that far
/// ahead after a restart; the regression tests cover that).
fn model_config() -> engine::shard::ShardConfig {
    let mut cfg = common::small_config();
    cfg.clock_lease_ms = 0;
    cfg
}
use common::*;
use engine::disk::sim::{CrashMode, Faults, SimDisk};
use engine::limits::EXPIRY_NEVER_MS;
use engine::model::Metadata;
use engine::shard::Created;
use engine::{ManualClock, QueueError, Shard};
use futures::executor::block_on;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::rc::Rc;
use uuid::Uuid;

const QUEUES: [&str; 3] = ["qa0", "qb1", "qc2"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize, u8),
    DeleteQueue(usize),
    SetMeta(usize, u8),
    Put {
        q: usize,
        len: usize,
        vt: i64,
        ttl: i64,
    },
    Get {
        q: usize,
        n: i64,
        vt: i64,
    },
    Peek {
        q: usize,
        n: i64,
    },
    Delete {
        q: usize,
        k: usize,
        stale: bool,
    },
    Update {
        q: usize,
        k: usize,
        vt: i64,
        text: bool,
        stale: bool,
    },
    Clear(usize),
    Advance(u64),
    Maintenance,
    Crash {
        tear: bool,
        seed: u64,
    },
    Restart,
    FailedPut {
        q: usize,
        seed: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let q = 0..QUEUES.len();
    prop_oneof![
        2 => (q.clone(), 0u8..2).prop_map(|(q, m)| Op::Create(q, m)),
        1 => q.clone().prop_map(Op::DeleteQueue),
        1 => (q.clone(), 0u8..3).prop_map(|(q, m)| Op::SetMeta(q, m)),
        8 => (q.clone(), 0usize..3000, prop_oneof![Just(0i64), Just(0), Just(5)], prop_oneof![Just(-1i64), Just(20), Just(1000)])
            .prop_map(|(q, len, vt, ttl)| Op::Put { q, len, vt, ttl }),
        4 => (q.clone(), 1i64..5, 1i64..30).prop_map(|(q, n, vt)| Op::Get { q, n, vt }),
        2 => (q.clone(), 1i64..5).prop_map(|(q, n)| Op::Peek { q, n }),
        3 => (q.clone(), any::<usize>(), any::<bool>()).prop_map(|(q, k, stale)| Op::Delete { q, k, stale }),
        3 => (q.clone(), any::<usize>(), 0i64..30, any::<bool>(), any::<bool>())
            .prop_map(|(q, k, vt, text, stale)| Op::Update { q, k, vt, text, stale }),
        1 => q.clone().prop_map(Op::Clear),
        3 => prop_oneof![Just(0u64), 1u64..40_000].prop_map(Op::Advance),
        1 => Just(Op::Maintenance),
        1 => (any::<bool>(), any::<u64>()).prop_map(|(tear, seed)| Op::Crash { tear, seed }),
        1 => Just(Op::Restart),
        1 => (q, any::<u64>()).prop_map(|(q, seed)| Op::FailedPut { q, seed }),
    ]
}

#[derive(Debug, Clone, PartialEq)]
struct MMsg {
    id: Uuid,
    text: String,
    inserted: u64,
    expires: u64,
    visible: u64,
    dq: u64,
    receipt: Option<String>,
    stale: Option<String>,
    order: u64,
}

#[derive(Debug, Clone, Default)]
struct MQueue {
    metadata: Metadata,
    msgs: Vec<MMsg>,
}

#[derive(Default)]
struct Model {
    queues: BTreeMap<String, MQueue>,
    order: u64,
}

impl Model {
    fn purge(&mut self, now: u64) {
        for q in self.queues.values_mut() {
            q.msgs.retain(|m| m.expires > now);
        }
    }
    fn visible(&self, q: &str, now: u64, n: usize) -> Vec<usize> {
        let mq = &self.queues[q];
        let mut idx: Vec<usize> = (0..mq.msgs.len()).filter(|&i| mq.msgs[i].visible <= now).collect();
        idx.sort_by_key(|&i| (mq.msgs[i].visible, mq.msgs[i].order));
        idx.truncate(n);
        idx
    }
}

fn meta(m: u8) -> Metadata {
    match m {
        0 => Metadata::default(),
        1 => Metadata(vec![("Color".into(), "red".into())]),
        _ => Metadata(vec![("Color".into(), "blue".into()), ("n".into(), "2".into())]),
    }
}

/// The recovered (or live) shard must hold exactly what the model holds.
fn compare(s: &Shard<SimDisk>, model: &mut Model, now: u64) {
    model.purge(now);
    let dump = block_on(s.dump()).expect("dump");
    let names: Vec<&String> = dump.keys().map(|(_, n)| n).collect();
    let model_names: Vec<&String> = model.queues.keys().collect();
    assert_eq!(names, model_names, "queue sets differ");
    for ((_, name), qd) in &dump {
        let mq = model.queues.get_mut(name).unwrap();
        assert_eq!(qd.metadata, mq.metadata, "metadata of {name}");
        mq.msgs.sort_by_key(|m| (m.visible, m.order));
        let got: Vec<_> = qd
            .messages
            .iter()
            .map(|(m, t)| {
                (
                    m.id,
                    t.clone(),
                    m.inserted_ms,
                    m.expires_ms,
                    m.visible_ms,
                    m.dequeue_count,
                )
            })
            .collect();
        let want: Vec<_> = mq
            .msgs
            .iter()
            .map(|m| (m.id, m.text.clone(), m.inserted, m.expires, m.visible, m.dq))
            .collect();
        assert_eq!(got, want, "messages of {name}");
    }
}

fn run(ops: Vec<Op>) {
    let clock = Rc::new(ManualClock::new(T0));
    let mut disk = SimDisk::new();
    let mut s = open(&disk, &clock, model_config());
    let mut model = Model::default();
    let mut text_no = 0u64;
    for op in ops {
        let now = clock.now_ms_();
        model.purge(now);
        match op {
            Op::Create(q, m) => {
                let name = QUEUES[q];
                let r = block_on(s.create_queue(ACCT, name, meta(m)));
                match model.queues.get(name) {
                    None => {
                        assert_eq!(r, Ok(Created::New));
                        model.queues.insert(
                            name.into(),
                            MQueue {
                                metadata: meta(m),
                                msgs: vec![],
                            },
                        );
                    }
                    Some(mq) if mq.metadata.equivalent(&meta(m)) => assert_eq!(r, Ok(Created::AlreadyExisted)),
                    Some(_) => assert_eq!(r, Err(QueueError::QueueAlreadyExists)),
                }
            }
            Op::DeleteQueue(q) => {
                let r = block_on(s.delete_queue(ACCT, QUEUES[q]));
                assert_eq!(r.is_ok(), model.queues.remove(QUEUES[q]).is_some());
            }
            Op::SetMeta(q, m) => {
                let r = block_on(s.set_metadata(ACCT, QUEUES[q], meta(m)));
                match model.queues.get_mut(QUEUES[q]) {
                    Some(mq) => {
                        r.unwrap();
                        mq.metadata = meta(m);
                    }
                    None => assert_eq!(r, Err(QueueError::QueueNotFound)),
                }
            }
            Op::Put { q, len, vt, ttl } => {
                text_no += 1;
                let text = format!("{text_no}:{}", "t".repeat(len));
                let r = block_on(s.put_message(ACCT, QUEUES[q], text.clone(), Some(vt), Some(ttl)));
                let invalid = ttl != -1 && vt >= ttl;
                match model.queues.get_mut(QUEUES[q]) {
                    None => assert_eq!(r.unwrap_err(), QueueError::QueueNotFound),
                    Some(_) if invalid => assert_eq!(r.unwrap_err().code(), "InvalidQueryParameterValue"),
                    Some(mq) => {
                        let p = r.unwrap();
                        let expires = if ttl == -1 {
                            EXPIRY_NEVER_MS
                        } else {
                            now + ttl as u64 * 1000
                        };
                        assert_eq!(
                            (p.inserted_ms, p.expires_ms, p.visible_ms),
                            (now, expires, now + vt as u64 * 1000)
                        );
                        model.order += 1;
                        mq.msgs.push(MMsg {
                            id: p.id,
                            text,
                            inserted: now,
                            expires,
                            visible: p.visible_ms,
                            dq: 0,
                            receipt: Some(p.pop_receipt.to_string()),
                            stale: None,
                            order: model.order,
                        });
                    }
                }
            }
            Op::Get { q, n, vt } => {
                let r = block_on(s.get_messages(ACCT, QUEUES[q], Some(n), Some(vt)));
                if !model.queues.contains_key(QUEUES[q]) {
                    assert_eq!(r.unwrap_err(), QueueError::QueueNotFound);
                    continue;
                }
                let want = model.visible(QUEUES[q], now, n as usize);
                let got = r.unwrap();
                let mq = model.queues.get_mut(QUEUES[q]).unwrap();
                assert_eq!(
                    got.iter().map(|m| m.id).collect::<Vec<_>>(),
                    want.iter().map(|&i| mq.msgs[i].id).collect::<Vec<_>>()
                );
                for (g, &i) in got.iter().zip(&want) {
                    let m = &mut mq.msgs[i];
                    m.dq += 1;
                    m.visible = now + vt as u64 * 1000;
                    m.stale = m.receipt.replace(g.pop_receipt.to_string());
                    assert_eq!((g.dequeue_count, g.visible_ms, &g.text), (m.dq, m.visible, &m.text));
                }
            }
            Op::Peek { q, n } => {
                let r = block_on(s.peek_messages(ACCT, QUEUES[q], Some(n)));
                match model.queues.get(QUEUES[q]) {
                    None => assert_eq!(r.unwrap_err(), QueueError::QueueNotFound),
                    Some(mq) => {
                        let want: Vec<_> = model
                            .visible(QUEUES[q], now, n as usize)
                            .into_iter()
                            .map(|i| (mq.msgs[i].id, mq.msgs[i].text.clone(), mq.msgs[i].dq))
                            .collect();
                        let got: Vec<_> = r
                            .unwrap()
                            .into_iter()
                            .map(|m| (m.id, m.text, m.dequeue_count))
                            .collect();
                        assert_eq!(got, want);
                    }
                }
            }
            Op::Delete { q, k, stale } | Op::Update { q, k, stale, .. } => {
                let Some(mq) = model.queues.get_mut(QUEUES[q]) else {
                    continue;
                };
                if mq.msgs.is_empty() {
                    continue;
                }
                let i = k % mq.msgs.len();
                let m = mq.msgs[i].clone();
                let receipt = if stale { m.stale.clone() } else { m.receipt.clone() };
                let Some(receipt) = receipt else { continue };
                let current = Some(&receipt) == m.receipt.as_ref();
                let id = m.id.to_string();
                if let Op::Update { vt, text, .. } = op {
                    let new_text = text.then(|| format!("updated {text_no}"));
                    let r = block_on(s.update_message(ACCT, QUEUES[q], &id, &receipt, Some(vt), new_text.clone()));
                    if !current {
                        assert_eq!(r, Err(QueueError::MessageNotFound));
                    } else if now + vt as u64 * 1000 > m.expires {
                        assert_eq!(r.unwrap_err().code(), "InvalidQueryParameterValue");
                    } else {
                        let u = r.unwrap();
                        let mm = &mut mq.msgs[i];
                        mm.visible = now + vt as u64 * 1000;
                        assert_eq!(u.visible_ms, mm.visible);
                        mm.stale = mm.receipt.replace(u.pop_receipt.to_string());
                        if let Some(t) = new_text {
                            mm.text = t;
                        }
                    }
                } else {
                    let r = block_on(s.delete_message(ACCT, QUEUES[q], &id, &receipt));
                    if current {
                        r.unwrap();
                        mq.msgs.remove(i);
                    } else {
                        assert_eq!(r, Err(QueueError::MessageNotFound));
                    }
                }
            }
            Op::Clear(q) => {
                let r = block_on(s.clear_messages(ACCT, QUEUES[q]));
                match model.queues.get_mut(QUEUES[q]) {
                    Some(mq) => {
                        r.unwrap();
                        mq.msgs.clear();
                    }
                    None => assert_eq!(r, Err(QueueError::QueueNotFound)),
                }
            }
            Op::Advance(ms) => clock.advance_ms(ms),
            Op::Maintenance => {
                block_on(s.maintenance()).unwrap();
            }
            Op::Restart => {
                drop(s);
                s = open(&disk, &clock, model_config());
                compare(&s, &mut model, now);
            }
            Op::Crash { tear, seed } => {
                drop(s);
                disk = disk.crash(if tear {
                    CrashMode::TearUnsynced { seed }
                } else {
                    CrashMode::LoseUnsynced
                });
                s = open(&disk, &clock, model_config());
                compare(&s, &mut model, now);
            }
            Op::FailedPut { q, seed } => {
                if !model.queues.contains_key(QUEUES[q]) {
                    continue;
                }
                text_no += 1;
                let text = format!("{text_no}:unacknowledged");
                disk.set_faults(Faults {
                    fail_sync_after: Some(0),
                    ..Default::default()
                });
                let r = block_on(s.put_message(ACCT, QUEUES[q], text.clone(), None, Some(-1)));
                assert_eq!(r.unwrap_err().code(), "InternalError");
                disk.set_faults(Faults::default());
                drop(s);
                disk = disk.crash(CrashMode::TearUnsynced { seed });
                s = open(&disk, &clock, model_config());
                // The put was never acknowledged: it may or may not have survived.
                let dump = block_on(s.dump()).unwrap();
                if let Some((m, _)) = dump[&(ACCT.to_string(), QUEUES[q].to_string())]
                    .messages
                    .iter()
                    .find(|(_, t)| *t == text)
                {
                    assert_eq!(
                        (m.inserted_ms, m.expires_ms, m.visible_ms, m.dequeue_count),
                        (now, EXPIRY_NEVER_MS, now, 0)
                    );
                    model.order += 1;
                    model.queues.get_mut(QUEUES[q]).unwrap().msgs.push(MMsg {
                        id: m.id,
                        text,
                        inserted: now,
                        expires: EXPIRY_NEVER_MS,
                        visible: now,
                        dq: 0,
                        receipt: None,
                        stale: None,
                        order: model.order,
                    });
                }
                compare(&s, &mut model, now);
            }
        }
    }
    drop(s);
    let s = open(&disk.crash(CrashMode::LoseUnsynced), &clock, model_config());
    compare(&s, &mut model, clock.now_ms_());
}

trait NowExt {
    fn now_ms_(&self) -> u64;
}
impl NowExt for Rc<ManualClock> {
    fn now_ms_(&self) -> u64 {
        engine::Clock::now_ms(&**self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]
    #[test]
    fn shard_matches_model_across_crashes(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops);
    }
}
