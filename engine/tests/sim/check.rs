//! The checker: Azure queue semantics against every acknowledged answer.
//!
//! Only answers are facts. A request cancelled by a crash, or answered 500
//! (the shard poisoned itself), may or may not have happened. Requests run
//! concurrently, so the checker never assumes an order between two requests
//! whose lifetimes overlap: it works on intervals of scheduler steps
//! (`issue` .. `end`).
//!
//! A *register* (a queue's metadata, its ACL, a message's existence, a
//! message's text) is a set of writes with their intervals. A value may be
//! read at time [s, c] if some write of it was issued before c and is not
//! *dominated*: no acknowledged write ended before s that was issued after
//! it ended (which would have overwritten it for sure). Every answer a read
//! gave is durable, so it is recorded as an acknowledged write of what it saw
//! ("nothing a read observed disappears after a crash").
//!
//! Pop receipts are ordered by version: a Put's is (0, 0), a Get's (dequeue
//! count, 0), an Update's (d, k + 1) for the (d, k) it consumed. A receipt
//! older than the newest acknowledged one must never work again; the newest
//! must work while nothing else could have touched the message.
//!
//! Dead-letter queues: the simulator's movers are clients too, and their
//! three steps are operations here (`MoveNext`, `MovePut`, `MoveFinish`).
//! A message moved to its queue's dead-letter queue is two messages to the
//! checker: the original (key `putno`) and its copy (key `putno | COPY`),
//! each with its own registers, so "in transit" is simply a state where
//! either, both or (only if a client removed it) neither is present. A
//! put of the copy is an acknowledged write of "present"; the finishing
//! delete of the original is a write of "absent" that may not have
//! happened (it does nothing if the move was superseded). The copy's
//! dequeue count may go back, and a count may be handed out twice, only
//! across a put that may have made a fresh copy after the old one may
//! have been removed: the one duplicate the design allows.

use engine::attributes::QueueAttributes;
use engine::model::{Metadata, SignedIdentifier};
use engine::shard::{
    Created, DeadLetter, PeekedMessage, PutReceipt, QueueDump, QueueListing, QueueProperties, ReceivedMessage,
    UpdateReceipt,
};
use engine::QueueError;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

pub type QKey = (String, String);
pub type Meta = Vec<(String, String)>;
pub type Acl = Vec<SignedIdentifier>;

/// Set in the key of a message's dead-letter copy (`putno | COPY`); client
/// puts are numbered far below it.
pub const COPY: u64 = 1 << 62;

/// The put a message key belongs to (the original's key).
pub fn base(mk: u64) -> u64 {
    mk & !COPY
}

/// How violations and the trace name a message: `m7`, or `m7'` for its
/// dead-letter copy.
pub fn label(mk: u64) -> String {
    if mk & COPY != 0 {
        format!("m{}'", base(mk))
    } else {
        format!("m{mk}")
    }
}

#[derive(Debug, Clone)]
pub enum Op {
    CreateQueue {
        q: QKey,
        meta: Meta,
    },
    DeleteQueue {
        q: QKey,
    },
    SetMeta {
        q: QKey,
        meta: Meta,
    },
    GetProps {
        q: QKey,
    },
    SetAcl {
        q: QKey,
        acl: Acl,
    },
    GetAcl {
        q: QKey,
    },
    List {
        shard: usize,
        account: String,
        prefix: String,
        from: Option<String>,
        max: usize,
    },
    Put {
        q: QKey,
        putno: u64,
        text: String,
        vt: i64,
        ttl: i64,
    },
    Get {
        q: QKey,
        n: i64,
        vt: i64,
    },
    Peek {
        q: QKey,
        n: i64,
    },
    Update {
        q: QKey,
        putno: u64,
        id: Uuid,
        receipt: String,
        vt: i64,
        text: Option<String>,
    },
    Delete {
        q: QKey,
        putno: u64,
        id: Uuid,
        receipt: String,
    },
    /// Delete with a receipt guessed from others (issue 8 B).
    Guess {
        q: QKey,
        putno: u64,
        id: Uuid,
        receipt: String,
    },
    Clear {
        q: QKey,
    },
    /// A mover's step 1: the next message set aside on `shard`, if any
    /// (`Shard::try_next_dead_letter`).
    MoveNext {
        shard: usize,
    },
    /// Step 2: the copy `putno` (a `COPY` key) put into the dead-letter
    /// queue `q`, for the message a `MoveNext` issued at step `taken` took.
    MovePut {
        q: QKey,
        putno: u64,
        dl: DeadLetter,
        taken: u64,
    },
    /// Step 3: the original `putno` deleted from its queue `q` if it still
    /// holds the receipt it was set aside with.
    MoveFinish {
        q: QKey,
        putno: u64,
        dl: DeadLetter,
    },
}

impl Op {
    pub fn queue(&self) -> Option<&QKey> {
        use Op::*;
        match self {
            CreateQueue { q, .. } | DeleteQueue { q } | SetMeta { q, .. } | GetProps { q } | SetAcl { q, .. } => {
                Some(q)
            }
            GetAcl { q } | Put { q, .. } | Get { q, .. } | Peek { q, .. } | Update { q, .. } | Delete { q, .. } => {
                Some(q)
            }
            Guess { q, .. } | Clear { q } | MovePut { q, .. } | MoveFinish { q, .. } => Some(q),
            List { .. } | MoveNext { .. } => None,
        }
    }

    /// A short description for the trace: no uuids (they are random), so
    /// the trace of a seed is the same on every run.
    pub fn brief(&self) -> String {
        use Op::*;
        match self {
            CreateQueue { q, meta } => format!("create {}/{} meta={}", q.0, q.1, meta.len()),
            DeleteQueue { q } => format!("delete-queue {}/{}", q.0, q.1),
            SetMeta { q, meta } => format!("set-meta {}/{} {}", q.0, q.1, meta.len()),
            GetProps { q } => format!("get-props {}/{}", q.0, q.1),
            SetAcl { q, acl } => format!("set-acl {}/{} {}", q.0, q.1, acl.len()),
            GetAcl { q } => format!("get-acl {}/{}", q.0, q.1),
            List {
                shard,
                account,
                prefix,
                from,
                max,
            } => {
                format!("list s{shard} {account} prefix={prefix:?} from={from:?} max={max}")
            }
            Put {
                q,
                putno,
                text,
                vt,
                ttl,
            } => format!(
                "put {}/{} {} len={} vt={vt} ttl={ttl}",
                q.0,
                q.1,
                label(*putno),
                text.len()
            ),
            Get { q, n, vt } => format!("get {}/{} n={n} vt={vt}", q.0, q.1),
            Peek { q, n } => format!("peek {}/{} n={n}", q.0, q.1),
            Update { q, putno, vt, text, .. } => {
                format!(
                    "update {}/{} {} vt={vt} text={}",
                    q.0,
                    q.1,
                    label(*putno),
                    text.is_some()
                )
            }
            Delete { q, putno, .. } => format!("delete {}/{} {}", q.0, q.1, label(*putno)),
            Guess { q, putno, .. } => format!("guess-delete {}/{} {}", q.0, q.1, label(*putno)),
            Clear { q } => format!("clear {}/{}", q.0, q.1),
            MoveNext { shard } => format!("move-next s{shard}"),
            MovePut { q, putno, dl, .. } => {
                format!("move-put {}/{} {} dq={}", q.0, q.1, label(*putno), dl.dequeue_count)
            }
            MoveFinish { q, putno, .. } => format!("move-finish {}/{} {}", q.0, q.1, label(*putno)),
        }
    }
}

#[derive(Debug)]
pub enum Outcome {
    Created(Result<Created, QueueError>),
    Unit(Result<(), QueueError>),
    Props(Result<QueueProperties, QueueError>),
    Acl(Result<Acl, QueueError>),
    List(Result<(Vec<QueueListing>, bool), QueueError>),
    Put(Result<PutReceipt, QueueError>),
    Got(Result<Vec<ReceivedMessage>, QueueError>),
    Peeked(Result<Vec<PeekedMessage>, QueueError>),
    Updated(Result<UpdateReceipt, QueueError>),
    /// A mover's step 1: never an error (a failed read skips the move).
    Next(Option<DeadLetter>),
}

impl Outcome {
    fn error(&self) -> Option<&QueueError> {
        match self {
            Outcome::Created(Err(e))
            | Outcome::Unit(Err(e))
            | Outcome::Props(Err(e))
            | Outcome::Acl(Err(e))
            | Outcome::List(Err(e))
            | Outcome::Put(Err(e))
            | Outcome::Got(Err(e))
            | Outcome::Peeked(Err(e))
            | Outcome::Updated(Err(e)) => Some(e),
            _ => None,
        }
    }

    pub fn brief(&self) -> String {
        match self.error() {
            Some(e) => e.code().to_string(),
            None => match self {
                Outcome::Got(Ok(v)) => format!(
                    "ok {} msgs {:?}",
                    v.len(),
                    v.iter().map(|m| m.dequeue_count).collect::<Vec<_>>()
                ),
                Outcome::Peeked(Ok(v)) => format!("ok {} msgs", v.len()),
                Outcome::List(Ok((v, more))) => format!("ok {} queues more={more}", v.len()),
                Outcome::Created(Ok(c)) => format!("ok {c:?}"),
                Outcome::Next(Some(dl)) => format!(
                    "ok {} {}->{} dq={}",
                    parse_putno(&dl.text).map_or("?".into(), label),
                    dl.from,
                    dl.to,
                    dl.dequeue_count
                ),
                Outcome::Next(None) => "none".into(),
                _ => "ok".into(),
            },
        }
    }
}

// ----- registers -----

#[derive(Debug, Clone)]
struct W<T> {
    v: T,
    issue: u64,
    end: Option<u64>,
    acked: bool,
}

fn dominated<T>(w: &W<T>, all: &[&W<T>], s: u64) -> bool {
    let Some(end) = w.end else { return false };
    all.iter()
        .any(|w2| w2.acked && w2.end.is_some_and(|d| d < s) && w2.issue > end)
}

fn allowed<'a, T>(all: &[&'a W<T>], s: u64, c: u64) -> Vec<&'a T> {
    all.iter()
        .filter(|w| w.issue < c && !dominated(w, all, s))
        .map(|w| &w.v)
        .collect()
}

#[derive(Debug, Clone)]
struct Reg<T> {
    ws: BTreeMap<u64, W<T>>,
}

impl<T: Clone + PartialEq + std::fmt::Debug> Reg<T> {
    fn new(init: T) -> Self {
        let mut ws = BTreeMap::new();
        ws.insert(
            0,
            W {
                v: init,
                issue: 0,
                end: Some(0),
                acked: true,
            },
        );
        Reg { ws }
    }
    fn empty() -> Self {
        Reg { ws: BTreeMap::new() }
    }
    fn begin(&mut self, id: u64, v: T, step: u64) {
        self.ws.insert(
            id,
            W {
                v,
                issue: step,
                end: None,
                acked: false,
            },
        );
    }
    fn ack(&mut self, id: u64, step: u64) {
        if let Some(w) = self.ws.get_mut(&id) {
            w.end = Some(step);
            w.acked = true;
        }
    }
    fn fail(&mut self, id: u64) {
        self.ws.remove(&id);
    }
    fn indeterminate(&mut self, id: u64, step: u64) {
        if let Some(w) = self.ws.get_mut(&id) {
            w.end = Some(step);
        }
    }
    fn all(&self) -> Vec<&W<T>> {
        self.ws.values().collect()
    }
    /// Values a read over [s, c] may see.
    fn allowed(&self, s: u64, c: u64) -> Vec<T> {
        allowed(&self.all(), s, c).into_iter().cloned().collect()
    }
    /// Records a durable observation of `v` over [s, c].
    fn observed(&mut self, id: u64, v: T, s: u64, c: u64) {
        self.ws.insert(
            id,
            W {
                v,
                issue: s,
                end: Some(c),
                acked: true,
            },
        );
    }
    /// Drops writes no read issued at or after `horizon` may see.
    fn prune(&mut self, horizon: u64) {
        let all = self.all();
        let dead: Vec<u64> = self
            .ws
            .iter()
            .filter(|(_, w)| dominated(w, &all, horizon))
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            self.ws.remove(&id);
        }
    }
}

// ----- facts -----

type Ver = (u64, u64);
type Span = (u64, Option<u64>);

struct QFacts {
    shard: usize,
    meta: Reg<Option<Meta>>,
    acl: Reg<Option<Acl>>,
    /// Clear Messages and Delete Queue: writes of "absent" to every message.
    clears: BTreeMap<u64, W<bool>>,
    /// Gets whose answer is unknown (in flight, or cancelled/failed).
    gets: BTreeMap<u64, Span>,
    /// Answered Gets of a queue that may have a dead-letter queue: each may
    /// have set aside, under a receipt no client saw, a message it did not
    /// return.
    aside: BTreeMap<u64, Span>,
    /// Message keys: client puts, and dead-letter copies moved here.
    msgs: BTreeSet<u64>,
}

struct MFacts {
    q: QKey,
    id: Option<Uuid>,
    expires: Option<u64>,
    /// The TTL the put asked for (-1: never expires).
    ttl: i64,
    presence: Reg<bool>,
    text: Reg<String>,
    /// Insertion time, from Put's answer or the first read showing it.
    inserted: Option<u64>,
    /// (steps the observation began and completed, dequeue count seen).
    dq_obs: Vec<(u64, u64, u64)>,
    /// Dequeue counts acknowledged Gets handed out, with their spans.
    get_dqs: Vec<(u64, u64, u64)>,
    /// Of a copy: the movers' puts of it, which may each have made a fresh
    /// copy (its dequeue count back to the original's) if the previous
    /// one was removed, and the lowest dequeue count any of them carried.
    puts: BTreeMap<u64, Span>,
    put_dq: Option<u64>,
    /// Of an original: the movers' finishing deletes (not client removals).
    finishes: BTreeSet<u64>,
    /// Of an original: the step each receipt was answered at, and the moves
    /// whose copy is durable: (step the move took it, step its put was
    /// acknowledged).
    answered: BTreeMap<String, u64>,
    moved: Vec<(u64, u64)>,
    receipts: BTreeMap<String, Ver>,
    /// Newest acknowledged receipt: version, step it was answered, the
    /// visibility it set, the receipt.
    newest: Option<(Ver, u64, u64, String)>,
    /// The step the request that answered the newest receipt began.
    newest_from: u64,
    /// Receipts answered 404 MessageNotFound, with the step.
    dead: BTreeMap<String, u64>,
    /// Updates, deletes and gets that returned this message.
    changers: BTreeMap<u64, Span>,
    refused: bool,
}

impl MFacts {
    fn new(q: QKey, ttl: i64, presence: Reg<bool>, text: Reg<String>) -> Self {
        MFacts {
            q,
            id: None,
            expires: None,
            ttl,
            presence,
            text,
            inserted: None,
            dq_obs: Vec::new(),
            get_dqs: Vec::new(),
            receipts: BTreeMap::new(),
            newest: None,
            newest_from: 0,
            dead: BTreeMap::new(),
            changers: BTreeMap::new(),
            refused: false,
            puts: BTreeMap::new(),
            put_dq: None,
            finishes: BTreeSet::new(),
            answered: BTreeMap::new(),
            moved: Vec::new(),
        }
    }

    /// Whether anything but a move (a client's delete, a clear or a queue
    /// deletion of `clears`) may have removed the message.
    fn client_removable(&self, clears: &BTreeMap<u64, W<bool>>) -> bool {
        let since = self
            .presence
            .ws
            .values()
            .filter(|w| w.v)
            .map(|w| w.issue)
            .min()
            .unwrap_or(0);
        self.presence
            .ws
            .iter()
            .any(|(id, w)| !w.v && *id != 0 && *id < SYNTH_BASE && !self.finishes.contains(id))
            || clears.values().any(|w| w.end.is_none_or(|e| e >= since))
    }

    fn may_have_expired(&self, ub: u64) -> bool {
        // (An expiry never answered is unknown: only a TTL of -1 rules
        // expiry out.)
        match self.expires {
            Some(x) => x <= ub,
            None => self.ttl != -1,
        }
    }
}

/// Ids of the checker's own register writes (observations) start here.
const SYNTH_BASE: u64 = 1 << 60;

struct Pending {
    op: Op,
    shard: usize,
    issue: u64,
    /// Lower bound of the time the engine answers at.
    lb: u64,
    /// The shard's recorded time floor when the request was issued.
    floor: u64,
    clock_epoch: u64,
    /// The newest receipt's version when the request was issued, and the
    /// step the request that answered it began.
    newest_at_issue: Option<(Ver, u64)>,
    dead_at_issue: bool,
}

/// What faults a shard may be under: errors are accepted only then.
#[derive(Debug, Default, Clone)]
pub struct ShardFaults {
    /// An fdatasync or write error was armed since this instance opened.
    pub poison: bool,
    /// ENOSPC was armed since this instance opened.
    pub no_space: bool,
    /// A transient read fault was armed since this instance opened.
    pub read_fault: bool,
    /// Damage injected into the shard's files: the file's identity
    /// (`SimDisk::file_id`: the engine may rename it after the damage), the
    /// disk's write mark then, and the damaged bytes' offset and length.
    /// Forgotten at a restart once a later write covered them
    /// (`SimDisk::overwritten_since`): a reused file's new life is clean.
    pub corrupt_files: BTreeSet<(u64, usize, u64, u64)>,
}

impl ShardFaults {
    pub fn errors_expected(&self) -> bool {
        self.poison || self.read_fault || !self.corrupt_files.is_empty()
    }
}

pub struct Checker {
    pending: BTreeMap<u64, Pending>,
    /// Requests answered 500 (the shard poisoned itself): what they wrote
    /// may still reach the disk, so their fate is open until the shard
    /// restarts.
    limbo: BTreeMap<u64, Pending>,
    queues: BTreeMap<QKey, QFacts>,
    msgs: BTreeMap<u64, MFacts>,
    by_id: HashMap<Uuid, u64>,
    /// Per shard: every acknowledged mutation's time is recorded in the log,
    /// so the shard's time never again goes below this.
    time_lb: Vec<u64>,
    pub faults: Vec<ShardFaults>,
    max_clock: u64,
    lease: u64,
    clock: u64,
    clock_epoch: u64,
    synth: u64,
    /// Queue -> its dead-letter queue, for the queues the run may give one.
    targets: BTreeMap<QKey, QKey>,
    /// Per shard: the step of its latest recovery and the messages found.
    dumped: Vec<Option<(u64, BTreeSet<u64>)>>,
    pub violations: Vec<String>,
    pub acked: u64,
    pub indeterminate: u64,
    pub errors: u64,
    /// Dead-letter copies shown by reads and recoveries.
    pub copies_seen: u64,
    /// Messages Gets handed out from a queue whose every possible state had
    /// a maximum dequeue count (so the count limit was checked).
    pub limit_checked: u64,
}

pub fn parse_putno(text: &str) -> Option<u64> {
    text.strip_prefix('m')?.split(':').next()?.parse().ok()
}

impl Checker {
    pub fn new(shards: usize, clock: u64, lease: u64) -> Self {
        Checker {
            pending: BTreeMap::new(),
            limbo: BTreeMap::new(),
            queues: BTreeMap::new(),
            msgs: BTreeMap::new(),
            by_id: HashMap::new(),
            time_lb: vec![0; shards],
            faults: vec![ShardFaults::default(); shards],
            max_clock: clock,
            lease,
            clock,
            clock_epoch: 0,
            synth: SYNTH_BASE,
            targets: BTreeMap::new(),
            dumped: vec![None; shards],
            violations: Vec::new(),
            acked: 0,
            indeterminate: 0,
            errors: 0,
            copies_seen: 0,
            limit_checked: 0,
        }
    }

    /// The dead-letter queue each queue may be given (the run never names
    /// another one for it).
    pub fn set_targets(&mut self, targets: BTreeMap<QKey, QKey>) {
        self.targets = targets;
    }

    /// Whether the checker knows put `putno` (a mover's capture names it).
    pub fn knows(&self, putno: u64) -> bool {
        self.msgs.contains_key(&putno)
    }

    fn violation(&mut self, s: String) {
        self.violations.push(s);
    }

    fn time_ub(&self) -> u64 {
        self.max_clock + self.lease + 1
    }

    pub fn clock_set(&mut self, now: u64) {
        if now < self.clock {
            self.clock_epoch += 1;
        }
        self.clock = now;
        self.max_clock = self.max_clock.max(now);
    }

    fn synth_id(&mut self) -> u64 {
        self.synth += 1;
        self.synth
    }

    /// Messages a client could address: (putno, queue, id, receipts newest first).
    pub fn addressable(&self, q: &QKey) -> Vec<(u64, Uuid, Vec<String>)> {
        let Some(qf) = self.queues.get(q) else {
            return Vec::new();
        };
        qf.msgs
            .iter()
            .filter_map(|p| {
                let m = &self.msgs[p];
                let id = m.id?;
                let mut rs: Vec<(&Ver, &String)> = m.receipts.iter().map(|(r, v)| (v, r)).collect();
                rs.sort();
                rs.reverse();
                (!rs.is_empty()).then(|| (*p, id, rs.into_iter().map(|(_, r)| r.clone()).collect()))
            })
            .collect()
    }

    /// The largest receipt nonce seen on queues of `shard` (for guessing).
    pub fn max_nonce(&self, shard: usize) -> Option<u64> {
        self.msgs
            .values()
            .filter(|m| self.queues.get(&m.q).is_some_and(|q| q.shard == shard))
            .flat_map(|m| m.receipts.keys())
            .filter_map(|r| engine::model::PopReceipt::decode(r).ok().map(|p| p.nonce))
            .max()
    }

    fn queue(&mut self, q: &QKey, shard: usize) -> &mut QFacts {
        self.queues.entry(q.clone()).or_insert_with(|| QFacts {
            shard,
            meta: Reg::new(None),
            acl: Reg::new(None),
            clears: BTreeMap::new(),
            gets: BTreeMap::new(),
            aside: BTreeMap::new(),
            msgs: BTreeSet::new(),
        })
    }

    pub fn issue(&mut self, id: u64, op: Op, shard: usize, step: u64) {
        let mut newest_at_issue = None;
        let mut dead_at_issue = false;
        if let Some(q) = op.queue() {
            self.queue(q, shard);
        }
        match &op {
            Op::CreateQueue { q, meta } => {
                let qf = self.queues.get_mut(q).expect("made above");
                qf.meta.begin(id, Some(meta.clone()), step);
                qf.acl.begin(id, Some(Vec::new()), step);
            }
            Op::DeleteQueue { q } => {
                let qf = self.queues.get_mut(q).expect("made above");
                qf.meta.begin(id, None, step);
                qf.acl.begin(id, None, step);
                qf.clears.insert(
                    id,
                    W {
                        v: false,
                        issue: step,
                        end: None,
                        acked: false,
                    },
                );
            }
            Op::Clear { q } => {
                let qf = self.queues.get_mut(q).expect("made above");
                qf.clears.insert(
                    id,
                    W {
                        v: false,
                        issue: step,
                        end: None,
                        acked: false,
                    },
                );
            }
            Op::SetMeta { q, meta } => {
                self.queues
                    .get_mut(q)
                    .expect("made above")
                    .meta
                    .begin(id, Some(meta.clone()), step)
            }
            Op::SetAcl { q, acl } => self
                .queues
                .get_mut(q)
                .expect("made above")
                .acl
                .begin(id, Some(acl.clone()), step),
            Op::Put {
                q, putno, text, ttl, ..
            } => {
                self.queues.get_mut(q).expect("made above").msgs.insert(*putno);
                let mut presence = Reg::new(false);
                presence.begin(id, true, step);
                let mut t = Reg::empty();
                t.begin(id, text.clone(), step);
                self.msgs.insert(*putno, MFacts::new(q.clone(), *ttl, presence, t));
            }
            Op::Get { q, .. } => {
                self.queues
                    .get_mut(q)
                    .expect("made above")
                    .gets
                    .insert(id, (step, None));
            }
            Op::Update {
                putno, receipt, text, ..
            } => {
                let m = self.msgs.get_mut(putno).expect("known message");
                m.changers.insert(id, (step, None));
                if let Some(t) = text {
                    m.text.begin(id, t.clone(), step);
                }
                newest_at_issue = m.newest.as_ref().map(|n| (n.0, m.newest_from));
                dead_at_issue = m.dead.contains_key(receipt);
            }
            Op::Delete { putno, receipt, .. } | Op::Guess { putno, receipt, .. } => {
                let m = self.msgs.get_mut(putno).expect("known message");
                m.changers.insert(id, (step, None));
                m.presence.begin(id, false, step);
                newest_at_issue = m.newest.as_ref().map(|n| (n.0, m.newest_from));
                dead_at_issue = m.dead.contains_key(receipt);
            }
            Op::MovePut { q, putno, dl, .. } => {
                let orig = &self.msgs[&base(*putno)];
                let (ttl, expires, inserted) = (orig.ttl, orig.expires, orig.inserted);
                self.queues.get_mut(q).expect("made above").msgs.insert(*putno);
                let m = self.msgs.entry(*putno).or_insert_with(|| {
                    let mut m = MFacts::new(q.clone(), ttl, Reg::new(false), Reg::empty());
                    m.id = Some(dl.id);
                    m.expires = expires;
                    m.inserted = inserted;
                    m
                });
                m.presence.begin(id, true, step);
                m.text.begin(id, dl.text.clone(), step);
                m.changers.insert(id, (step, None));
                m.puts.insert(id, (step, None));
                m.put_dq = Some(m.put_dq.map_or(dl.dequeue_count, |d| d.min(dl.dequeue_count)));
            }
            Op::MoveFinish { putno, .. } => {
                let m = self.msgs.get_mut(putno).expect("known message");
                m.presence.begin(id, false, step);
                m.changers.insert(id, (step, None));
                m.finishes.insert(id);
            }
            Op::GetProps { .. } | Op::GetAcl { .. } | Op::List { .. } | Op::Peek { .. } | Op::MoveNext { .. } => {}
        }
        let lb = self.time_lb[shard].max(self.clock);
        self.pending.insert(
            id,
            Pending {
                op,
                shard,
                issue: step,
                lb,
                floor: self.time_lb[shard],
                clock_epoch: self.clock_epoch,
                newest_at_issue,
                dead_at_issue,
            },
        );
    }

    /// A shard restarted: the requests answered 500 on it are decided now.
    pub fn shard_restarted(&mut self, shard: usize, step: u64) {
        let ids: Vec<u64> = self
            .limbo
            .iter()
            .filter(|(_, p)| p.shard == shard)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let p = self.limbo.remove(&id).expect("listed");
            self.forget(id, &p, step);
        }
    }

    /// The request was cancelled by a crash: it may or may not have happened.
    pub fn indeterminate(&mut self, id: u64, step: u64) {
        let Some(p) = self.pending.remove(&id) else { return };
        self.indeterminate += 1;
        self.forget(id, &p, step);
    }

    fn forget(&mut self, id: u64, p: &Pending, step: u64) {
        let q = p.op.queue().cloned();
        if let Some(qf) = q.as_ref().and_then(|q| self.queues.get_mut(q)) {
            qf.meta.indeterminate(id, step);
            qf.acl.indeterminate(id, step);
            if let Some(w) = qf.clears.get_mut(&id) {
                w.end = Some(step);
            }
            if let Some(g) = qf.gets.get_mut(&id) {
                g.1 = Some(step);
            }
        }
        match &p.op {
            Op::Put { putno, .. }
            | Op::Update { putno, .. }
            | Op::Delete { putno, .. }
            | Op::Guess { putno, .. }
            | Op::MovePut { putno, .. }
            | Op::MoveFinish { putno, .. } => {
                let m = self.msgs.get_mut(putno).expect("known message");
                m.presence.indeterminate(id, step);
                m.text.indeterminate(id, step);
                if let Some(c) = m.changers.get_mut(&id) {
                    c.1 = Some(step);
                }
                if let Some(c) = m.puts.get_mut(&id) {
                    c.1 = Some(step);
                }
            }
            _ => {}
        }
    }

    /// The request definitely changed nothing (refused before any change).
    fn cancel(&mut self, id: u64, p: &Pending) {
        if let Some(qf) = p.op.queue().and_then(|q| self.queues.get_mut(q)) {
            qf.meta.fail(id);
            qf.acl.fail(id);
            qf.clears.remove(&id);
            qf.gets.remove(&id);
        }
        match &p.op {
            Op::Put { putno, .. }
            | Op::Update { putno, .. }
            | Op::Delete { putno, .. }
            | Op::Guess { putno, .. }
            | Op::MovePut { putno, .. }
            | Op::MoveFinish { putno, .. } => {
                let m = self.msgs.get_mut(putno).expect("known message");
                m.presence.fail(id);
                m.text.fail(id);
                m.changers.remove(&id);
                m.puts.remove(&id);
                m.finishes.remove(&id);
                if matches!(p.op, Op::Put { .. }) {
                    m.refused = true;
                }
            }
            _ => {}
        }
    }

    fn bump_time(&mut self, p: &Pending) {
        if p.clock_epoch == self.clock_epoch {
            let t = &mut self.time_lb[p.shard];
            *t = (*t).max(p.lb);
        }
    }

    fn lb(&self, p: &Pending) -> u64 {
        if p.clock_epoch == self.clock_epoch {
            p.lb
        } else {
            p.floor
        }
    }

    /// The queue was observed to exist (with metadata satisfying `pred`) or
    /// not, over [s, c].
    fn observe_queue(&mut self, q: &QKey, s: u64, c: u64, what: &str, pred: impl Fn(&Option<Meta>) -> bool) {
        let Some(qf) = self.queues.get(q) else { return };
        let allowed = qf.meta.allowed(s, c);
        if !allowed.iter().any(&pred) {
            self.violation(format!(
                "{what}: queue {}/{} observed in a state no acknowledged history allows; allowed {allowed:?}",
                q.0, q.1
            ));
        }
    }

    fn observe_meta_exact(&mut self, q: &QKey, v: Option<Meta>, s: u64, c: u64, what: &str) {
        let vv = v.clone();
        self.observe_queue(q, s, c, what, |x| *x == vv);
        let id = self.synth_id();
        if let Some(qf) = self.queues.get_mut(q) {
            qf.meta.observed(id, v, s, c);
        }
    }

    fn observe_acl_exact(&mut self, q: &QKey, v: Option<Acl>, s: u64, c: u64, what: &str) {
        let Some(qf) = self.queues.get(q) else { return };
        let allowed = qf.acl.allowed(s, c);
        if !allowed.contains(&v) {
            self.violation(format!(
                "{what}: ACL of {}/{} is {v:?}; acknowledged history allows only {allowed:?}",
                q.0, q.1
            ));
        }
        let id = self.synth_id();
        self.queues.get_mut(q).expect("known").acl.observed(id, v, s, c);
    }

    fn queue_missing(&mut self, q: &QKey, s: u64, c: u64, what: &str) {
        self.observe_meta_exact(q, None, s, c, what);
        self.observe_acl_exact(q, None, s, c, what);
    }

    fn presence_writes<'a>(&'a self, m: &'a MFacts) -> Vec<&'a W<bool>> {
        let mut all: Vec<&W<bool>> = m.presence.ws.values().collect();
        if let Some(qf) = self.queues.get(&m.q) {
            all.extend(qf.clears.values());
        }
        all
    }

    /// Nothing but `me` could have changed the message's receipt since step `e`.
    fn quiet(&self, m: &MFacts, e: u64, me: u64) -> bool {
        // `>=`: a request cancelled by a crash in the very step that
        // answered `e` may have been applied after it.
        let after = |end: &Option<u64>| end.is_none_or(|d| d >= e);
        let qf = &self.queues[&m.q];
        // Once delivered, a message of a queue with a dead-letter queue may
        // be set aside by any Get, under a receipt no answer shows.
        let aside = self.targets.contains_key(&m.q) && m.dq_obs.iter().any(|o| o.2 >= 1);
        let touched = m.changers.iter().any(|(id, (_, end))| *id != me && after(end))
            || qf.gets.iter().any(|(id, (_, end))| *id != me && after(end))
            || qf.clears.iter().any(|(id, w)| *id != me && after(&w.end))
            || (aside && qf.aside.iter().any(|(id, (_, end))| *id != me && after(end)));
        !touched
    }

    /// The most deliveries a Get over [s, c] may make of one message of
    /// `q`: `Some(k)` if every state its metadata may be in then gives it a
    /// dead-letter queue (the largest k of those), else `None`.
    fn dequeue_limit(&self, q: &QKey, s: u64, c: u64) -> Option<u64> {
        let mut most = None;
        for meta in self.queues.get(q)?.meta.allowed(s, c).into_iter().flatten() {
            let attrs = QueueAttributes::parse(&q.1, &Metadata(meta)).ok()?;
            let k = attrs.redrive?.max_dequeue_count;
            most = Some(most.unwrap_or(0).max(k));
        }
        most
    }

    /// The message of queue `q` that put `putno` shows as: the original if
    /// `q` is its queue, its dead-letter copy if `q` is its dead-letter
    /// queue and a mover put one there.
    fn resolve(&mut self, putno: u64, q: &QKey, what: &str) -> Option<u64> {
        if self.msgs[&putno].q == *q {
            return Some(putno);
        }
        if self.msgs.get(&(putno | COPY)).is_some_and(|m| m.q == *q) {
            self.copies_seen += 1;
            return Some(putno | COPY);
        }
        let src = &self.msgs[&putno].q;
        if self.targets.get(src) == Some(q) {
            self.violation(format!(
                "{what}: m{putno} is in its dead-letter queue {}/{} though no mover ever put it there",
                q.0, q.1
            ));
        } else {
            self.violation(format!("{what}: m{putno} came from another queue"));
        }
        None
    }

    /// A mover took `dl` from `shard` over [s, c]: the message as it was set
    /// aside. Not a durable observation (the set-aside may still be in
    /// flight, and a crash may take it back), so it is checked against what
    /// may be current and not recorded.
    fn captured(&mut self, dl: &DeadLetter, shard: usize, s: u64, c: u64, what: &str) {
        let Some(putno) = self.identify(dl.id, &dl.text, what) else {
            return;
        };
        let src = (dl.account.clone(), dl.from.clone());
        let m = &self.msgs[&putno];
        let mut bad = Vec::new();
        if m.q != src {
            bad.push(format!("took m{putno} from {}, but it was put in {}", dl.from, m.q.1));
        } else if self.targets.get(&src) != Some(&(dl.account.clone(), dl.to.clone())) {
            bad.push(format!(
                "moves m{putno} to {}, which its queue never named as dead-letter queue",
                dl.to
            ));
        }
        if self.queues.get(&src).is_none_or(|qf| qf.shard != shard) {
            bad.push(format!(
                "took m{putno} on shard {shard}, which does not own {}",
                dl.from
            ));
        }
        if m.refused {
            bad.push(format!("took m{putno}, whose put was refused (503)"));
        }
        if !allowed(&self.presence_writes(m), s, c).contains(&&true) {
            bad.push(format!(
                "took m{putno} for a move although an acknowledged delete or clear removed it"
            ));
        }
        if m.expires.is_some_and(|x| x != dl.expires_ms) || m.inserted.is_some_and(|x| x != dl.inserted_ms) {
            bad.push(format!("took m{putno} with another insertion or expiry time"));
        }
        if !m.text.allowed(s, c).contains(&dl.text) {
            bad.push(format!("took m{putno} with a text no acknowledged history allows"));
        }
        let floor = self.dq_floor(putno, s, c);
        if dl.dequeue_count < floor.max(1) {
            bad.push(format!(
                "took m{putno} with dequeue count {} although {floor} was seen (and a move needs one delivery)",
                dl.dequeue_count
            ));
        }
        for b in bad {
            self.violation(format!("{what}: {b}"));
        }
        // Times are fixed at the put: learning them here is safe.
        let m = self.msgs.get_mut(&putno).expect("known");
        m.expires.get_or_insert(dl.expires_ms);
        m.inserted.get_or_insert(dl.inserted_ms);
    }

    /// The highest dequeue count seen of `mk` before a read over [s, c].
    /// A copy's count goes back to the original's when a mover puts a
    /// fresh copy after the old one was removed: observations a possible
    /// re-put separates from the read (before its effect, so by `c`) do
    /// not count.
    fn dq_floor(&self, mk: u64, s: u64, c: u64) -> u64 {
        let m = &self.msgs[&mk];
        // An observation took effect at or after the step it began: a
        // re-put may follow it even if it completed later.
        m.dq_obs
            .iter()
            .filter(|(b, d, _)| *d < s && !self.may_regen(m, *b, c))
            .map(|(_, _, v)| *v)
            .max()
            .unwrap_or(0)
    }

    /// A mover may have put a fresh copy `m` between steps `after` and
    /// `before`: a put of it may take effect in that window, after a
    /// removal of the old copy that may also fall in it. Never for an
    /// original (no mover puts those).
    fn may_regen(&self, m: &MFacts, after: u64, before: u64) -> bool {
        m.puts.values().any(|&(issue, end)| {
            let put_by = end.unwrap_or(u64::MAX).min(before);
            issue < before
                && end.is_none_or(|e| e > after)
                && self
                    .presence_writes(m)
                    .iter()
                    .any(|w| !w.v && w.issue < put_by && w.end.is_none_or(|e| e > after))
        })
    }

    /// Identifies a message a read returned, by id and text.
    fn identify(&mut self, id: Uuid, text: &str, what: &str) -> Option<u64> {
        let Some(putno) = parse_putno(text) else {
            let shown: String = text.chars().take(40).collect();
            self.violation(format!(
                "{what}: served text {shown:?} that no client ever wrote (corrupt data served)"
            ));
            return None;
        };
        let Some(m) = self.msgs.get_mut(&putno) else {
            self.violation(format!("{what}: served message m{putno} that was never put"));
            return None;
        };
        match m.id {
            Some(known) if known != id => {
                self.violation(format!("{what}: m{putno} served under another message id"));
                return None;
            }
            Some(_) => {}
            None => {
                m.id = Some(id);
                self.by_id.insert(id, putno);
            }
        }
        Some(putno)
    }

    /// A read over [s, c] (at a time >= lb) showed message `mk` (an
    /// original or a dead-letter copy) with `text`, `dq` and its times.
    fn shown(
        &mut self,
        mk: u64,
        (text, dq, expires, inserted): (&str, u64, u64, u64),
        strict_dq: bool,
        (s, c, lb): (u64, u64, u64),
        what: &str,
    ) {
        let name = label(mk);
        let mut bad = Vec::new();
        // A copy keeps the original's times: both are checked against
        // what either showed.
        for k in [base(mk), mk] {
            let m = self.msgs.get_mut(&k).expect("known");
            if m.expires.is_some_and(|x| x != expires) || m.inserted.is_some_and(|x| x != inserted) {
                bad.push(format!(
                    "{name} expiry or insertion time changed (now {expires}, {inserted}; was {:?}, {:?})",
                    m.expires, m.inserted
                ));
            }
            m.expires = Some(expires);
            m.inserted = Some(inserted);
        }
        if self.msgs[&base(mk)].refused {
            bad.push(format!("{name} was refused (503) but appeared"));
        }
        let m = &self.msgs[&mk];
        if !allowed(&self.presence_writes(m), s, c).contains(&&true) {
            bad.push(format!(
                "{name} is shown although an acknowledged delete or clear removed it"
            ));
        }
        if m.expires.is_some_and(|x| x <= lb) {
            bad.push(format!(
                "{name} expired at {} but is shown at a time >= {lb}",
                m.expires.unwrap_or(0)
            ));
        }
        let texts = m.text.allowed(s, c);
        if !texts.iter().any(|t| t == text) {
            let shown: String = text.chars().take(40).collect();
            bad.push(format!(
                "{name} has text {shown:?}, which no acknowledged history allows"
            ));
        }
        let floor = self.dq_floor(mk, s, c);
        if dq < floor || (strict_dq && dq <= floor) {
            bad.push(format!("{name} dequeue count went back: {dq} after {floor} was seen"));
        }
        // A copy starts with the count its original was moved with.
        if m.put_dq.is_some_and(|d| dq < d || (strict_dq && dq <= d)) {
            bad.push(format!(
                "{name} shows dequeue count {dq}, below the {:?} its move carried",
                m.put_dq
            ));
        }
        for b in bad {
            self.violation(format!("{what}: {b}"));
        }
        let (i1, i2) = (self.synth_id(), self.synth_id());
        let m = self.msgs.get_mut(&mk).expect("known");
        m.presence.observed(i1, true, s, c);
        m.text.observed(i2, text.to_string(), s, c);
        m.dq_obs.push((s, c, dq));
    }

    /// A message shown by Get or Peek while it must be invisible.
    /// (The newest receipt must have been answered before the read began,
    /// and nothing may have touched the message since.)
    fn check_visible(&mut self, putno: u64, me: u64, s: u64, what: &str) {
        let m = &self.msgs[&putno];
        if let Some((_, e, vis, _)) = &m.newest {
            if *e < s && *vis > self.time_ub() && self.quiet(m, *e, me) {
                let v = format!("{what}: {} handed out while invisible until {vis}", label(putno));
                self.violation(v);
            }
        }
    }

    fn set_newest(&mut self, putno: u64, ver: Ver, receipt: &str, vis: u64, (from, step): (u64, u64)) {
        let m = self.msgs.get_mut(&putno).expect("known");
        m.receipts.insert(receipt.to_string(), ver);
        m.answered.entry(receipt.to_string()).or_insert(step);
        // A re-put copy starts its versions again: if one may have been put
        // since the newest receipt, which receipt is newest is unknown, and
        // the rules that need it wait for the next one.
        let regen = putno & COPY != 0 && self.may_regen(&self.msgs[&putno], self.msgs[&putno].newest_from, step);
        let m = self.msgs.get_mut(&putno).expect("known");
        if regen && m.newest.as_ref().is_some_and(|n| ver <= n.0) {
            m.newest = None;
        } else if m.newest.as_ref().is_none_or(|n| ver > n.0) {
            m.newest_from = from;
            m.newest = Some((ver, step, vis, receipt.to_string()));
        }
    }

    /// Forgets writes that no pending or future read may see any more.
    fn prune(&mut self, step: u64) {
        let horizon = self
            .pending
            .values()
            .chain(self.limbo.values())
            .map(|p| p.issue)
            .min()
            .unwrap_or(step);
        for qf in self.queues.values_mut() {
            qf.meta.prune(horizon);
            qf.acl.prune(horizon);
        }
        for m in self.msgs.values_mut() {
            m.text.prune(horizon);
        }
    }

    pub fn complete(&mut self, id: u64, out: Outcome, step: u64) {
        if step.is_multiple_of(64) {
            self.prune(step);
        }
        let Some(p) = self.pending.remove(&id) else { return };
        let what = format!("step {step}: {} -> {}", p.op.brief(), out.brief());
        let (s, c) = (p.issue, step);
        if let Some(e) = out.error() {
            self.errors += 1;
            match e {
                QueueError::Internal { .. } => {
                    if !self.faults[p.shard].errors_expected() {
                        self.violation(format!(
                            "{what}: an internal error without any fault that allows one: {e}"
                        ));
                    }
                    self.limbo.insert(id, p);
                    return;
                }
                QueueError::ServerBusy { .. } => {
                    if !self.faults[p.shard].no_space {
                        self.violation(format!("{what}: ServerBusy without a full disk: {e}"));
                    }
                    self.cancel(id, &p);
                    return;
                }
                _ => {}
            }
        } else {
            self.acked += 1;
        }
        let not_found = |o: &Outcome| o.error() == Some(&QueueError::QueueNotFound);
        if not_found(&out) {
            self.cancel(id, &p);
            let q = p.op.queue().expect("queue op").clone();
            self.queue_missing(&q, s, c, &what);
            return;
        }
        match (&p.op, out) {
            (Op::CreateQueue { q, meta }, Outcome::Created(r)) => match r {
                Ok(Created::New) => {
                    let qf = self.queues.get_mut(q).expect("known");
                    qf.meta.ack(id, c);
                    qf.acl.ack(id, c);
                    self.bump_time(&p);
                }
                Ok(Created::AlreadyExisted) | Err(QueueError::QueueAlreadyExists) => {
                    let same = r.is_ok();
                    self.cancel(id, &p);
                    let want = Metadata(meta.clone());
                    self.observe_queue(q, s, c, &what, |v| {
                        v.as_ref()
                            .is_some_and(|m| Metadata(m.clone()).equivalent(&want) == same)
                    });
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::DeleteQueue { q }, Outcome::Unit(r)) => match r {
                Ok(()) => {
                    let qf = self.queues.get_mut(q).expect("known");
                    qf.meta.ack(id, c);
                    qf.acl.ack(id, c);
                    if let Some(w) = qf.clears.get_mut(&id) {
                        w.end = Some(c);
                        w.acked = true;
                    }
                    self.bump_time(&p);
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::SetMeta { q, .. }, Outcome::Unit(r)) => match r {
                Ok(()) => {
                    self.queues.get_mut(q).expect("known").meta.ack(id, c);
                    self.bump_time(&p);
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::SetAcl { q, .. }, Outcome::Unit(r)) => match r {
                Ok(()) => {
                    self.queues.get_mut(q).expect("known").acl.ack(id, c);
                    self.bump_time(&p);
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::GetProps { q }, Outcome::Props(r)) => match r {
                Ok(props) => self.observe_meta_exact(q, Some(props.metadata.0), s, c, &what),
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::GetAcl { q }, Outcome::Acl(r)) => match r {
                Ok(acl) => self.observe_acl_exact(q, Some(acl), s, c, &what),
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (
                Op::List {
                    shard,
                    account,
                    prefix,
                    from,
                    ..
                },
                Outcome::List(r),
            ) => match r {
                Ok((items, more)) => {
                    let start = match from {
                        Some(f) if f.as_str() > prefix.as_str() => f.clone(),
                        _ => prefix.clone(),
                    };
                    let last = items.last().map(|l| l.name.clone());
                    for it in &items {
                        let key = (account.clone(), it.name.clone());
                        if self.queues.get(&key).is_none_or(|qf| qf.shard != *shard) {
                            self.violation(format!("{what}: listed {} which was never created here", it.name));
                            continue;
                        }
                        self.observe_meta_exact(&key, Some(it.metadata.0.clone()), s, c, &what);
                    }
                    let unlisted: Vec<QKey> = self
                        .queues
                        .iter()
                        .filter(|(k, qf)| {
                            qf.shard == *shard
                                && k.0 == *account
                                && k.1.starts_with(prefix.as_str())
                                && k.1 >= start
                                && !(more && last.as_ref().is_some_and(|l| k.1 > *l))
                                && !items.iter().any(|i| i.name == k.1)
                        })
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in unlisted {
                        self.observe_meta_exact(&k, None, s, c, &what);
                    }
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::Put { q, putno, vt, ttl, .. }, Outcome::Put(r)) => match r {
                Ok(rc) => {
                    let lb = self.lb(&p);
                    let ub = self.time_ub();
                    if rc.inserted_ms < lb || rc.inserted_ms > ub {
                        self.violation(format!("{what}: inserted at {} outside [{lb}, {ub}]", rc.inserted_ms));
                    }
                    let exp = if *ttl == -1 {
                        engine::limits::EXPIRY_NEVER_MS
                    } else {
                        rc.inserted_ms + *ttl as u64 * 1000
                    };
                    if rc.expires_ms != exp || rc.visible_ms != rc.inserted_ms + *vt as u64 * 1000 {
                        self.violation(format!("{what}: wrong expiry or visibility in {rc:?}"));
                    }
                    if let Some(other) = self.by_id.insert(rc.id, *putno).filter(|o| o != putno) {
                        self.violation(format!("{what}: message id of m{other} given again"));
                    }
                    let m = self.msgs.get_mut(putno).expect("known");
                    m.id = Some(rc.id);
                    m.expires = Some(rc.expires_ms);
                    m.inserted = Some(rc.inserted_ms);
                    m.presence.ack(id, c);
                    m.text.ack(id, c);
                    m.dq_obs.push((s, c, 0));
                    self.set_newest(*putno, (0, 0), &rc.pop_receipt, rc.visible_ms, (s, c));
                    self.observe_queue(q, s, c, &what, |v| v.is_some());
                    self.bump_time(&p);
                }
                Err(e) => {
                    self.violation(format!("{what}: unexpected {e}"));
                    self.cancel(id, &p);
                }
            },
            (Op::Get { q, vt, .. }, Outcome::Got(r)) => match r {
                Ok(list) => {
                    let qf = self.queues.get_mut(q).expect("known");
                    qf.gets.remove(&id);
                    if self.targets.contains_key(q) {
                        qf.aside.insert(id, (s, Some(c)));
                    }
                    self.observe_queue(q, s, c, &what, |v| v.is_some());
                    let limit = self.dequeue_limit(q, s, c);
                    let lb = self.lb(&p);
                    let ub = self.time_ub();
                    let mut answer = BTreeSet::new();
                    for g in list {
                        let Some(mk) = self
                            .identify(g.id, &g.text, &what)
                            .and_then(|n| self.resolve(n, q, &what))
                        else {
                            continue;
                        };
                        let name = label(mk);
                        if !answer.insert(mk) {
                            self.violation(format!(
                                "{what}: {name} handed out twice in one answer (two copies at once)"
                            ));
                        }
                        if let Some(k) = limit {
                            self.limit_checked += 1;
                            if g.dequeue_count > k {
                                self.violation(format!(
                                    "{what}: {name} delivered with dequeue count {}, though every state the \
                                     queue's metadata could be in moves a message after at most {k} deliveries",
                                    g.dequeue_count
                                ));
                            }
                        }
                        self.check_visible(mk, id, s, &what);
                        self.shown(
                            mk,
                            (&g.text, g.dequeue_count, g.expires_ms, g.inserted_ms),
                            true,
                            (s, c, lb),
                            &what,
                        );
                        let v = *vt as u64 * 1000;
                        if g.visible_ms < lb + v || g.visible_ms > ub + v {
                            self.violation(format!(
                                "{what}: {name} visible at {} outside [{}, {}]",
                                g.visible_ms,
                                lb + v,
                                ub + v
                            ));
                        }
                        let m = &self.msgs[&mk];
                        let twice = m
                            .get_dqs
                            .iter()
                            .any(|&(d, s1, c1)| d == g.dequeue_count && !self.may_regen(m, s1.min(s), c1.max(c)));
                        if twice {
                            self.violation(format!(
                                "{what}: {name} handed out twice with dequeue count {} (a dequeue was lost)",
                                g.dequeue_count
                            ));
                        }
                        let m = self.msgs.get_mut(&mk).expect("known");
                        m.get_dqs.push((g.dequeue_count, s, c));
                        m.changers.insert(id, (s, Some(c)));
                        self.set_newest(mk, (g.dequeue_count, 0), &g.pop_receipt, g.visible_ms, (s, c));
                    }
                    self.bump_time(&p);
                }
                Err(e) => {
                    self.violation(format!("{what}: unexpected {e}"));
                    self.cancel(id, &p);
                }
            },
            (Op::Peek { q, .. }, Outcome::Peeked(r)) => match r {
                Ok(list) => {
                    self.observe_queue(q, s, c, &what, |v| v.is_some());
                    let lb = p.floor;
                    let mut answer = BTreeSet::new();
                    for g in list {
                        let Some(mk) = self
                            .identify(g.id, &g.text, &what)
                            .and_then(|n| self.resolve(n, q, &what))
                        else {
                            continue;
                        };
                        if !answer.insert(mk) {
                            let name = label(mk);
                            self.violation(format!("{what}: {name} shown twice in one answer (two copies at once)"));
                        }
                        self.check_visible(mk, id, s, &what);
                        self.shown(
                            mk,
                            (&g.text, g.dequeue_count, g.expires_ms, g.inserted_ms),
                            false,
                            (s, c, lb),
                            &what,
                        );
                    }
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::Update { q, putno, receipt, .. }, Outcome::Updated(r)) => {
                let ver = self.msgs[putno].receipts.get(receipt).copied();
                match r {
                    Ok(u) => {
                        self.receipt_worked(&p, *putno, receipt, &what);
                        let m = self.msgs.get_mut(putno).expect("known");
                        if let Some(ch) = m.changers.get_mut(&id) {
                            ch.1 = Some(c);
                        }
                        m.text.ack(id, c);
                        let i = self.synth_id();
                        self.msgs
                            .get_mut(putno)
                            .expect("known")
                            .presence
                            .observed(i, true, s, c);
                        self.observe_queue(q, s, c, &what, |v| v.is_some());
                        if let Some((d, k)) = ver {
                            self.set_newest(*putno, (d, k + 1), &u.pop_receipt, u.visible_ms, (s, c));
                        }
                        self.bump_time(&p);
                    }
                    Err(QueueError::MessageNotFound) => self.receipt_refused(id, &p, *putno, receipt, c, &what),
                    Err(e) if e.code() == "InvalidQueryParameterValue" => self.cancel(id, &p),
                    Err(e) => self.violation(format!("{what}: unexpected {e}")),
                }
            }
            (Op::Delete { q, putno, receipt, .. } | Op::Guess { q, putno, receipt, .. }, Outcome::Unit(r)) => match r {
                Ok(()) => {
                    self.receipt_worked(&p, *putno, receipt, &what);
                    if matches!(p.op, Op::Guess { .. }) && !self.msgs[putno].receipts.contains_key(receipt) {
                        self.violation(format!(
                            "{what}: a guessed pop receipt that was never handed out deleted {}",
                            label(*putno)
                        ));
                    }
                    let m = self.msgs.get_mut(putno).expect("known");
                    m.presence.ack(id, c);
                    if let Some(ch) = m.changers.get_mut(&id) {
                        ch.1 = Some(c);
                    }
                    self.observe_queue(q, s, c, &what, |v| v.is_some());
                    self.bump_time(&p);
                }
                Err(QueueError::MessageNotFound) => self.receipt_refused(id, &p, *putno, receipt, c, &what),
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::Clear { q }, Outcome::Unit(r)) => match r {
                Ok(()) => {
                    let qf = self.queues.get_mut(q).expect("known");
                    if let Some(w) = qf.clears.get_mut(&id) {
                        w.end = Some(c);
                        w.acked = true;
                    }
                    self.observe_queue(q, s, c, &what, |v| v.is_some());
                    self.bump_time(&p);
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::MoveNext { shard }, Outcome::Next(r)) => {
                if let Some(dl) = r {
                    self.captured(&dl, *shard, s, c, &what);
                }
            }
            (Op::MovePut { putno, taken, .. }, Outcome::Unit(r)) => match r {
                Ok(()) => {
                    self.msgs.get_mut(&base(*putno)).expect("known").moved.push((*taken, c));
                    // Present now: put, or already there (an earlier try of
                    // the move), or expired (then nothing was put, which
                    // expiry explains). Its text and dequeue count may not
                    // be this one's: a copy already there keeps its own.
                    let m = self.msgs.get_mut(putno).expect("known");
                    m.presence.ack(id, c);
                    m.text.indeterminate(id, c);
                    if let Some(ch) = m.changers.get_mut(&id) {
                        ch.1 = Some(c);
                    }
                    if let Some(pt) = m.puts.get_mut(&id) {
                        pt.1 = Some(c);
                    }
                    self.bump_time(&p);
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (Op::MoveFinish { putno, .. }, Outcome::Unit(r)) => match r {
                Ok(()) => {
                    // Deleted, or left alone because the move was superseded
                    // (another receipt): either may have happened.
                    let m = self.msgs.get_mut(putno).expect("known");
                    m.presence.indeterminate(id, c);
                    if let Some(ch) = m.changers.get_mut(&id) {
                        ch.1 = Some(c);
                    }
                    self.bump_time(&p);
                }
                Err(e) => self.violation(format!("{what}: unexpected {e}")),
            },
            (op, out) => panic!("outcome {out:?} does not belong to {op:?}"),
        }
    }

    /// A Delete or Update with `receipt` succeeded.
    fn receipt_worked(&mut self, p: &Pending, putno: u64, receipt: &str, what: &str) {
        let m = &self.msgs[&putno];
        let ver = m.receipts.get(receipt).copied();
        if let (Some(v), Some((newest, from))) = (ver, p.newest_at_issue) {
            // (Unless the receipt is a re-put copy's, whose versions start
            // again.)
            if v < newest && !self.may_regen(m, from, p.issue.max(from)) {
                self.violation(format!(
                    "{what}: a stale pop receipt {v:?} worked although {newest:?} had been acknowledged"
                ));
            }
        }
        if p.dead_at_issue {
            self.violation(format!(
                "{what}: a pop receipt answered 404 before worked later (the 404 was not durable)"
            ));
        }
        // A move takes a message only while it is set aside, under a
        // receipt no client has; once the copy is durable, that set-aside
        // must be too, or a client's older receipt works again and deletes
        // or changes a message whose copy lives on in the dead-letter queue.
        let m = &self.msgs[&putno];
        if let Some(&at) = m.answered.get(receipt) {
            if let Some(&(taken, put)) = m.moved.iter().find(|(taken, put)| at < *taken && *put < p.issue) {
                self.violation(format!(
                    "{what}: {}'s pop receipt answered at step {at} worked, though a move took the message at \
                     step {taken} and its copy in the dead-letter queue was durable at step {put} (the set-aside \
                     was lost in a crash while its copy survived)",
                    label(putno)
                ));
            }
        }
    }

    /// A Delete or Update with `receipt` was answered 404 MessageNotFound.
    fn receipt_refused(&mut self, id: u64, p: &Pending, putno: u64, receipt: &str, c: u64, what: &str) {
        let m = &self.msgs[&putno];
        let newest_and_quiet = !matches!(p.op, Op::Guess { .. })
            && m.newest
                .as_ref()
                .is_some_and(|(_, e, _, r)| r == receipt && self.quiet(m, *e, id))
            && !allowed(&self.presence_writes(m), p.issue, c).contains(&&false)
            && m.expires.is_some_and(|x| x > self.time_ub());
        if newest_and_quiet {
            self.violation(format!(
                "{what}: the newest pop receipt of {} was refused though nothing else touched the message \
                 (an acknowledged put, dequeue or update was lost)",
                label(putno)
            ));
        }
        self.cancel(id, p);
        self.msgs
            .get_mut(&putno)
            .expect("known")
            .dead
            .insert(receipt.to_string(), c);
    }

    /// A shard restarted and `dump` is everything it recovered (read at
    /// step `c`; nothing is in flight on it).
    pub fn recovered(&mut self, shard: usize, dump: &BTreeMap<QKey, QueueDump>, c: u64) {
        let what = format!("step {c}: after restart of shard {shard}");
        for k in dump.keys() {
            if self.queues.get(k).is_none_or(|qf| qf.shard != shard) {
                self.violation(format!(
                    "{what}: recovered queue {}/{} that was never created here",
                    k.0, k.1
                ));
            }
        }
        let mine: Vec<QKey> = self
            .queues
            .iter()
            .filter(|(_, qf)| qf.shard == shard)
            .map(|(k, _)| k.clone())
            .collect();
        let lb = self.time_lb[shard];
        let ub = self.time_ub();
        let mut found = BTreeSet::new();
        for k in mine {
            let d = dump.get(&k);
            self.observe_meta_exact(&k, d.map(|d| d.metadata.0.clone()), c, c, &what);
            self.observe_acl_exact(&k, d.map(|d| d.acl.clone()), c, c, &what);
            let mut seen = BTreeSet::new();
            for (msg, text) in d.map(|d| d.messages.as_slice()).unwrap_or_default() {
                let Some(putno) = self
                    .identify(msg.id, text, &what)
                    .and_then(|n| self.resolve(n, &k, &what))
                else {
                    continue;
                };
                if !seen.insert(putno) {
                    self.violation(format!(
                        "{what}: two messages {} with one id in {}/{} at once (a dead-letter put was repeated)",
                        label(putno),
                        k.0,
                        k.1
                    ));
                    continue;
                }
                self.shown(
                    putno,
                    (text, msg.dequeue_count, msg.expires_ms, msg.inserted_ms),
                    false,
                    (c, c, lb),
                    &what,
                );
                let receipt = engine::model::PopReceipt {
                    nonce: msg.receipt,
                    seq: msg.seq,
                }
                .encode()
                .to_string();
                let m = &self.msgs[&putno];
                let mut bad = Vec::new();
                let name = label(putno);
                if let (Some(v), Some(n)) = (m.receipts.get(&receipt), &m.newest) {
                    if *v < n.0 && !self.may_regen(m, m.newest_from, c) {
                        bad.push(format!(
                            "{what}: {name}'s current pop receipt is {v:?} although {:?} was acknowledged \
                             (a dequeue or update was lost)",
                            n.0
                        ));
                    }
                }
                if m.dead.contains_key(&receipt) {
                    bad.push(format!(
                        "{what}: {name} is current under a receipt that was answered 404 before"
                    ));
                }
                for b in bad {
                    self.violation(b);
                }
            }
            let msgs: Vec<u64> = self.queues[&k].msgs.iter().copied().collect();
            for putno in msgs {
                if seen.contains(&putno) {
                    continue;
                }
                let m = &self.msgs[&putno];
                let may_have_expired = m.may_have_expired(ub);
                let may_be_gone = allowed(&self.presence_writes(m), c, c).contains(&&false) || may_have_expired;
                if !may_be_gone {
                    let how = if putno & COPY != 0 {
                        "a mover's put of it was acknowledged"
                    } else {
                        "it was acknowledged or seen"
                    };
                    self.violation(format!(
                        "{what}: {} is gone, but {how} and nothing removed it",
                        label(putno)
                    ));
                }
                // The dump (a test inspection) purges at the wall clock
                // without recording that time, unlike a client's read: an
                // absence that expiry may explain is no durable fact (the
                // clock may step back before the next restart).
                if !may_have_expired {
                    let i = self.synth_id();
                    self.msgs
                        .get_mut(&putno)
                        .expect("known")
                        .presence
                        .observed(i, false, c, c);
                }
            }
            found.extend(seen);
        }
        self.dumped[shard] = Some((c, found));
    }

    /// After the final restart of every shard at step `c`: every message
    /// acknowledged (put, or seen by a read) that no client removed and
    /// that cannot have expired is in its queue or, moved, in its
    /// dead-letter queue. Independent of how the registers explain each
    /// location on its own: a move may delete the original only once the
    /// copy is durable, so at least one of the two must be there. Messages
    /// on a shard that did not recover now (refused) are not judged.
    pub fn final_drain(&mut self, c: u64) {
        let ub = self.time_ub();
        let mut lost = Vec::new();
        for (&putno, m) in self.msgs.range(..COPY) {
            if !m.presence.ws.values().any(|w| w.acked && w.v) {
                continue;
            }
            let copy = self.msgs.get(&(putno | COPY));
            let found = |mk: u64, q: &QKey| {
                let (step, keys) = self.dumped[self.queues[q].shard].as_ref()?;
                (*step == c).then(|| keys.contains(&mk))
            };
            let Some(home) = found(putno, &m.q) else { continue };
            // A dead-letter queue no request ever named (a mover's put
            // names it too) holds no copy, and the checker has no facts on it.
            let moved = match self.targets.get(&m.q).filter(|dlq| self.queues.contains_key(*dlq)) {
                Some(dlq) => match found(putno | COPY, dlq) {
                    Some(f) => f,
                    None => continue,
                },
                None => false,
            };
            let clears = |q: &QKey| &self.queues[q].clears;
            if home
                || moved
                || m.client_removable(clears(&m.q))
                || copy.is_some_and(|cm| cm.client_removable(clears(&cm.q)))
                || m.may_have_expired(ub)
            {
                continue;
            }
            let dlq = self.targets.get(&m.q).map_or("none".into(), |q| q.1.clone());
            lost.push(format!(
                "step {c}: final drain: m{putno} is in neither {} nor its dead-letter queue ({dlq}), though it \
                 was acknowledged, no client removed it and it cannot have expired (lost)",
                m.q.1
            ));
        }
        for v in lost {
            self.violation(v);
        }
    }
}
