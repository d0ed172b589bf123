//! The kill -9 crash harness. Each cycle: start the real binary on the same
//! data directory, verify everything acknowledged before the last kill (before
//! any load runs, so nothing can erase evidence first), run concurrent load
//! from several connections while keeping a ledger of every operation whose
//! success response arrived, then SIGKILL the server at a random moment. An
//! operation in flight at the kill is "pending": after the restart it may or
//! may not have happened, and exactly its possible effects are allowed, no
//! more.
//!
//! # Time
//!
//! The server's time is the wall clock, except that after a restart it may
//! run ahead by up to one CLOCK lease ([`LEASE`]): it starts at the newest
//! recorded floor, written up to one lease ahead of the time then (see
//! docs/STORAGE_FORMAT.md). The harness keeps, in its own clock, an upper
//! bound of that floor, so for every request sent at `a` and answered at `b`
//! the server's time for it lies in `[a, max(b, floor)]` ([`Win`]). Visibility
//! and expiry instants are windows computed from those, and every time check
//! is "surely" on one side of such a window, with a tolerance of [`TOL`] for
//! the millisecond rounding of two clocks on the same machine.
//!
//! # Verification after a restart, per worker queue
//!
//! Each acknowledged message has a list of candidate states: as acknowledged,
//! plus one per pending operation that may have touched it (a pending Get only
//! for a message that may have been visible at the time; a pending Update or
//! Delete only for its own message; a pending Clear for every message). A
//! pending Put is a candidate for one message that is not in the ledger. Then:
//!
//! 1. every acknowledged receipt is tried (Update, visibility 0), except for
//!    messages acknowledged as invisible until after now: those are kept
//!    untouched for step 2;
//! 2. sweep 1: Get (visibility [`SWEEP_VT`]) until nothing is returned; a
//!    message returned before its visibility time, or after it expired, or
//!    with a wrong text or dequeue count rules its candidate out;
//! 3. wait until everything that was ever made invisible in this queue
//!    (including messages deleted since) is visible again;
//! 4. the receipts held back in step 1 are tried;
//! 5. sweep 2 receives all the rest: anything present is now visible, so a
//!    resurrected deleted message cannot hide, and an acknowledged message
//!    that is surely visible and not expired must be returned;
//! 6. a message none of whose candidates survived is a violation; so is a
//!    message that is in no ledger, a pending Get that dequeued more messages
//!    than it asked for, and a pending Clear that removed only some;
//! 7. every message is made visible again with the receipt from its sweep
//!    (which must work) and the ledger is re-based on what is there.

use crate::client::{all_between, message_xml, Client, Reply};
use crate::proc::StderrTail;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How far ahead of the wall clock the server may run after a restart: the
/// engine's `CLOCK_LEASE_MS`.
pub const LEASE: Duration = Duration::from_millis(1000);
/// Tolerance of every time check: the server rounds to milliseconds and
/// reads another clock of the same machine.
pub const TOL: Duration = Duration::from_millis(100);
/// Visibility timeout of the verification sweeps: long enough that nothing
/// swept comes back before the verification ends.
const SWEEP_VT: u64 = 20;

#[derive(Debug, Clone)]
pub struct Config {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    /// Stop after this many kill cycles…
    pub iterations: usize,
    /// …or after this much time, whichever comes first.
    pub seconds: Option<f64>,
    /// Concurrent connections, each with its own queue.
    pub workers: usize,
    pub seed: u64,
    /// Extra server flags (e.g. a small `--segment-mib` to exercise rotation).
    pub server_args: Vec<String>,
}

/// Facts checked after restarts, by kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct Facts {
    /// Acknowledged pop receipts that still worked.
    pub receipts: u64,
    /// Acknowledged messages found with their text and dequeue count.
    pub messages: u64,
    /// Acknowledged as invisible past the restart: not returned by a Get
    /// before their time, returned after it.
    pub invisible: u64,
    /// Messages past their TTL (plus tolerance) that a sweep did not return.
    pub expired: u64,
    /// Messages with a finite TTL, surely not expired, that a sweep returned.
    pub unexpired: u64,
    /// Messages acknowledged as deleted or cleared in the cycle before that
    /// the sweeps did not return.
    pub removed: u64,
    /// Queue definitions: existence, then metadata and ACL.
    pub queues: u64,
    /// Operations in flight at a kill whose outcome was one of those allowed.
    pub pending: u64,
}

impl Facts {
    pub fn total(&self) -> u64 {
        self.receipts
            + self.messages
            + self.invisible
            + self.expired
            + self.unexpired
            + self.removed
            + self.queues
            + self.pending
    }
}

#[derive(Debug, Default)]
pub struct Summary {
    pub cycles: usize,
    pub acknowledged: u64,
    pub checked: u64,
    pub facts: Facts,
    pub violations: Vec<String>,
}

impl Summary {
    pub fn line(&self) -> String {
        let f = &self.facts;
        format!(
            "crashloop: {} kill -9 cycles, {} acknowledged operations, {} acknowledged facts checked after restarts \
             ({} receipts, {} messages, {} invisible until their time, {} expired and gone, {} unexpired and present, \
             {} deleted or cleared and gone, {} queue definitions, {} in-flight operations resolved), {} violations",
            self.cycles,
            self.acknowledged,
            self.checked,
            f.receipts,
            f.messages,
            f.invisible,
            f.expired,
            f.unexpired,
            f.removed,
            f.queues,
            f.pending,
            self.violations.len()
        )
    }
}

// ----- time -----

/// When the server did something, in the harness's clock: between `lo` and `hi`.
#[derive(Debug, Clone, Copy)]
struct Win {
    lo: Instant,
    hi: Instant,
}

impl Win {
    fn after(self, secs: u64) -> Win {
        let d = Duration::from_secs(secs);
        Win {
            lo: self.lo + d,
            hi: self.hi + d,
        }
    }
}

/// One server run's clock: `floor` bounds the time floor the server started
/// with, so a request sent at `a` and answered at `b` ran at a server time in
/// `[a, max(b, floor)]`.
#[derive(Debug, Clone, Copy)]
struct RunClock {
    floor: Instant,
}

impl RunClock {
    fn op(&self, a: Instant, b: Instant) -> Win {
        Win {
            lo: a,
            hi: b.max(self.floor),
        }
    }
}

/// When a message becomes visible.
#[derive(Debug, Clone, Copy)]
enum Vis {
    /// At the server's time of an operation on its queue that has finished
    /// (visibility timeout 0): visible to every later one, since the server's
    /// time never goes back.
    Now,
    At(Win),
}

impl Vis {
    fn of(op: Win, vt: u64) -> Vis {
        if vt == 0 {
            Vis::Now
        } else {
            Vis::At(op.after(vt))
        }
    }
    /// Visible to a request the server ran at a time in `w`, whatever the clocks did.
    fn surely_visible(self, w: Win) -> bool {
        match self {
            Vis::Now => true,
            Vis::At(v) => v.hi + TOL <= w.lo,
        }
    }
    fn surely_invisible(self, w: Win) -> bool {
        match self {
            Vis::Now => false,
            Vis::At(v) => v.lo > w.hi + TOL,
        }
    }
    fn latest(self) -> Option<Instant> {
        match self {
            Vis::Now => None,
            Vis::At(v) => Some(v.hi),
        }
    }
}

fn surely_expired(exp: Option<Win>, w: Win) -> bool {
    exp.is_some_and(|e| e.hi + TOL <= w.lo)
}

fn possibly_expired(exp: Option<Win>, w: Win) -> bool {
    exp.is_some_and(|e| e.lo <= w.hi + TOL)
}

// ----- the worker ledgers -----

#[derive(Debug, Clone)]
struct Msg {
    text: String,
    receipt: String,
    dq: u64,
    vis: Vis,
    /// `None`: never expires.
    exp: Option<Win>,
}

#[derive(Debug, Clone)]
enum Pending {
    Put { text: String, vt: u64, ttl: Option<u64> },
    Get { n: usize, vt: u64 },
    Delete { id: String },
    Update { id: String, text: Option<String>, vt: u64 },
    Clear,
}

/// What one worker knows is acknowledged for its queue.
#[derive(Debug, Clone)]
struct Ledger {
    queue: String,
    msgs: BTreeMap<String, Msg>,
    /// The operation in flight and when it was sent.
    pending: Option<(Pending, Instant)>,
    /// Messages whose deletion or clearing was acknowledged (or that
    /// expired), and how they went.
    gone: HashMap<String, &'static str>,
    /// Gone since the last verification.
    gone_recently: u64,
    /// Every visibility time ever given to a message of this queue (also to
    /// one deleted since) is at or before this.
    latest_vis: Instant,
    acknowledged: u64,
    seq: u64,
}

impl Ledger {
    fn new(queue: String) -> Ledger {
        Ledger {
            queue,
            msgs: BTreeMap::new(),
            pending: None,
            gone: HashMap::new(),
            gone_recently: 0,
            latest_vis: Instant::now(),
            acknowledged: 0,
            seq: 0,
        }
    }
    fn note_vis(&mut self, v: Vis) {
        if let Some(t) = v.latest() {
            self.latest_vis = self.latest_vis.max(t);
        }
    }
    fn remove(&mut self, id: &str, how: &'static str) {
        if self.msgs.remove(id).is_some() {
            self.gone.insert(id.to_string(), how);
            if how != "expired" {
                self.gone_recently += 1;
            }
        }
    }
    fn why_unknown(&self, id: &str) -> String {
        match self.gone.get(id) {
            Some(how) => format!("acknowledged as {how}"),
            None => "never acknowledged as put".into(),
        }
    }
}

/// State shared by the load threads and the thread that kills the server.
#[derive(Default)]
struct Shared {
    /// Set just before the harness sends SIGKILL: an I/O error after it is
    /// the kill, one before it is not.
    killed: AtomicBool,
    /// I/O errors seen before `killed`.
    early: Mutex<Vec<String>>,
    violations: Mutex<Vec<String>>,
}

impl Shared {
    fn bad(&self, what: String) {
        self.violations.lock().expect("not poisoned").push(what);
    }
    /// An I/O error: the kill, or, before it, something to report.
    fn io_error(&self, queue: &str, op: &str, e: std::io::Error) {
        if !self.killed.load(Ordering::SeqCst) {
            self.early.lock().expect("not poisoned").push(format!(
                "{queue}: {op} failed with an I/O error before the kill: {}",
                io_words(&e)
            ));
        }
    }
}

struct Server {
    child: Child,
    stderr: StderrTail,
}

impl Server {
    fn start(cfg: &Config, port: u16) -> Result<Server, String> {
        let extra: Vec<&str> = cfg.server_args.iter().map(String::as_str).collect();
        // If the harness itself dies (a panic that aborts, a timeout's
        // signal), the server goes with it: `spawn_ready` asks for that.
        let cmd = crate::proc::command(&cfg.bin, port, &cfg.data_dir, &extra);
        let mut child = crate::proc::spawn_ready(cmd)?;
        let stderr = StderrTail::attach(&mut child);
        Ok(Server { child, stderr })
    }

    /// After the process ended: the lines of its stderr that say why (a
    /// panic message, the server's own last words), then the last bytes.
    fn last_words(&mut self) -> String {
        let raw = self.stderr.tail(StderrTail::CAP, true);
        // Without terminal colours.
        let mut all = String::with_capacity(raw.len());
        let mut esc = false;
        for ch in raw.chars() {
            match ch {
                '\u{1b}' => esc = true,
                'm' if esc => esc = false,
                _ if esc => {}
                _ => all.push(ch),
            }
        }
        let lines: Vec<&str> = all.lines().collect();
        let mut why = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("panicked at") {
                why.push(format!("{l} {}", lines.get(i + 1).unwrap_or(&"")));
            } else if l.starts_with("hematite:") || l.contains("ERROR") {
                why.push(l.to_string());
            }
        }
        let tail: String = all
            .chars()
            .rev()
            .take(600)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!(
            "stderr says: {:?}; stderr ends: {tail:?}",
            &why[why.len().saturating_sub(6)..]
        )
    }

    /// `Some(status and stderr)` if the process has ended on its own.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "hematite exited on its own with {}; {}",
                crate::proc::describe(status),
                self.last_words()
            )),
            Ok(None) => None,
            Err(e) => Some(format!("cannot query hematite's state: {e}")),
        }
    }

    /// SIGKILL; Err unless the process was running and died of it.
    fn kill9(mut self) -> Result<(), String> {
        crate::proc::kill9_checked(&mut self.child)
            .map(|_| ())
            .map_err(|e| format!("{e}; {}", self.last_words()))
    }
}

/// How long the harness waits for any answer: the server answers in
/// milliseconds; silence this long is a hang, reported as such.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

fn client(port: u16) -> Client {
    let mut c = Client::new(port);
    c.timeout = ANSWER_TIMEOUT;
    c
}

/// An I/O error in words, naming a timeout as a hang.
fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("no answer within {} s (the server hangs)", ANSWER_TIMEOUT.as_secs())
        }
        _ => e.to_string(),
    }
}

impl Drop for Server {
    /// A harness that panics does not leave the server running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn qpath(q: &str) -> String {
    format!("/{}/{q}", crate::client::ACCOUNT)
}

fn is_receipt_failure(r: &Reply) -> bool {
    (r.status == 404 && r.code() == "MessageNotFound") || (r.status == 400 && r.code() == "PopReceiptMismatch")
}

/// One worker's load until the kill (or an I/O error).
fn load(port: u16, mut l: Ledger, clock: RunClock, sh: Arc<Shared>, seed: u64) -> Ledger {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c = client(port);
    let q = l.queue.clone();
    let bad = |what: String| sh.bad(format!("{q}: {what}"));
    while !sh.killed.load(Ordering::SeqCst) {
        let roll = rng.gen_range(0..100);
        let pick = |rng: &mut StdRng, l: &Ledger| -> Option<String> {
            if l.msgs.is_empty() {
                None
            } else {
                l.msgs.keys().nth(rng.gen_range(0..l.msgs.len())).cloned()
            }
        };
        // Put 37 %, Get 25 %, Delete 20 %, Update 16 %, Clear 2 %.
        let a = Instant::now();
        if roll < 37 {
            l.seq += 1;
            let text = format!("{}-{}-{}", l.queue, l.seq, "x".repeat(rng.gen_range(0..600)));
            // A finite TTL of 1 to 4 s for 40 %; invisible for 1 or 2 s
            // (less than the TTL) for 25 %.
            let ttl = rng.gen_bool(0.4).then(|| rng.gen_range(1..=4u64));
            let vt: u64 = if rng.gen_bool(0.75) {
                0
            } else {
                rng.gen_range(1..=2).min(ttl.map_or(2, |t| t - 1))
            };
            l.pending = Some((
                Pending::Put {
                    text: text.clone(),
                    vt,
                    ttl,
                },
                a,
            ));
            let target = format!(
                "{}/messages?messagettl={}&visibilitytimeout={vt}",
                qpath(&l.queue),
                ttl.map_or(-1, |t| t as i64)
            );
            match c.call(
                "POST",
                &target,
                &[("Content-Type", "application/xml")],
                &message_xml(&text),
            ) {
                Ok(r) if r.status == 201 => {
                    let w = clock.op(a, Instant::now());
                    let id = all_between(&r.body, "MessageId").pop().unwrap_or_default();
                    let receipt = all_between(&r.body, "PopReceipt").pop().unwrap_or_default();
                    let vis = Vis::of(w, vt);
                    l.note_vis(vis);
                    l.msgs.insert(
                        id,
                        Msg {
                            text,
                            receipt,
                            dq: 0,
                            vis,
                            exp: ttl.map(|t| w.after(t)),
                        },
                    );
                }
                Ok(r) => bad(format!("put answered {} {}", r.status, r.code())),
                Err(e) => {
                    sh.io_error(&l.queue, "put", e);
                    return l;
                }
            }
        } else if roll < 62 {
            let vt = rng.gen_range(1..=2u64);
            let n = rng.gen_range(1..=4usize);
            l.pending = Some((Pending::Get { n, vt }, a));
            let target = format!("{}/messages?numofmessages={n}&visibilitytimeout={vt}", qpath(&l.queue));
            match c.call("GET", &target, &[], b"") {
                Ok(r) if r.status == 200 => {
                    let w = clock.op(a, Instant::now());
                    let ids = all_between(&r.body, "MessageId");
                    let texts = all_between(&r.body, "MessageText");
                    let dqs = all_between(&r.body, "DequeueCount");
                    let receipts = all_between(&r.body, "PopReceipt");
                    if ids.len() > n {
                        bad(format!("get of {n} returned {}", ids.len()));
                    }
                    for i in 0..ids.len() {
                        let Some(m) = l.msgs.get_mut(&ids[i]) else {
                            bad(format!(
                                "get returned unknown message {} ({})",
                                ids[i],
                                l.why_unknown(&ids[i])
                            ));
                            continue;
                        };
                        let dq: u64 = dqs[i].parse().unwrap_or(0);
                        if texts[i] != m.text || dq != m.dq + 1 {
                            bad(format!(
                                "get returned {} with {:?}/dq {dq}, ledger {:?}/dq {}",
                                ids[i], texts[i], m.text, m.dq
                            ));
                        }
                        if m.vis.surely_invisible(w) {
                            bad(format!("get returned {} before its visibility time", ids[i]));
                        }
                        if surely_expired(m.exp, w) {
                            bad(format!("get returned {} after it expired", ids[i]));
                        }
                        m.dq = dq;
                        m.receipt = receipts[i].clone();
                        m.vis = Vis::of(w, vt);
                        let vis = m.vis;
                        l.note_vis(vis);
                    }
                }
                Ok(r) => bad(format!("get answered {} {}", r.status, r.code())),
                Err(e) => {
                    sh.io_error(&l.queue, "get", e);
                    return l;
                }
            }
        } else if roll < 82 {
            let Some(id) = pick(&mut rng, &l) else { continue };
            let receipt = l.msgs[&id].receipt.clone();
            l.pending = Some((Pending::Delete { id: id.clone() }, a));
            match c.call(
                "DELETE",
                &format!("{}/messages/{id}?popreceipt={receipt}", qpath(&l.queue)),
                &[],
                b"",
            ) {
                Ok(r) if r.status == 204 => l.remove(&id, "deleted"),
                Ok(r)
                    if r.code() == "MessageNotFound"
                        && possibly_expired(l.msgs[&id].exp, clock.op(a, Instant::now())) =>
                {
                    l.remove(&id, "expired")
                }
                Ok(r) => bad(format!(
                    "delete of {id} with its current receipt answered {} {}",
                    r.status,
                    r.code()
                )),
                Err(e) => {
                    sh.io_error(&l.queue, "delete", e);
                    return l;
                }
            }
        } else if roll < 98 {
            let Some(id) = pick(&mut rng, &l) else { continue };
            let receipt = l.msgs[&id].receipt.clone();
            let new_text = rng
                .gen_bool(0.5)
                .then(|| format!("{}-upd-{}", l.queue, rng.gen::<u32>()));
            let vt = rng.gen_range(0..=2u64);
            l.pending = Some((
                Pending::Update {
                    id: id.clone(),
                    text: new_text.clone(),
                    vt,
                },
                a,
            ));
            let body = new_text.as_deref().map(message_xml).unwrap_or_default();
            let target = format!(
                "{}/messages/{id}?popreceipt={receipt}&visibilitytimeout={vt}",
                qpath(&l.queue)
            );
            match c.call("PUT", &target, &[("Content-Type", "application/xml")], &body) {
                Ok(r) if r.status == 204 => {
                    let w = clock.op(a, Instant::now());
                    let m = l.msgs.get_mut(&id).expect("picked");
                    m.receipt = r.header("x-ms-popreceipt").unwrap_or("").to_string();
                    m.vis = Vis::of(w, vt);
                    if let Some(t) = new_text {
                        m.text = t;
                    }
                    let vis = m.vis;
                    l.note_vis(vis);
                }
                Ok(r) => {
                    let w = clock.op(a, Instant::now());
                    let exp = l.msgs[&id].exp;
                    if r.code() == "MessageNotFound" && possibly_expired(exp, w) {
                        l.remove(&id, "expired");
                    } else if r.code() == "InvalidQueryParameterValue" && possibly_expired(exp, w.after(vt)) {
                        // The visibility would pass the expiry: refused, nothing changed.
                    } else {
                        bad(format!("update of {id} answered {} {}", r.status, r.code()));
                    }
                }
                Err(e) => {
                    sh.io_error(&l.queue, "update", e);
                    return l;
                }
            }
        } else {
            l.pending = Some((Pending::Clear, a));
            match c.call("DELETE", &format!("{}/messages", qpath(&l.queue)), &[], b"") {
                Ok(r) if r.status == 204 => {
                    let ids: Vec<String> = l.msgs.keys().cloned().collect();
                    for id in ids {
                        l.remove(&id, "cleared");
                    }
                }
                Ok(r) => bad(format!("clear answered {} {}", r.status, r.code())),
                Err(e) => {
                    sh.io_error(&l.queue, "clear", e);
                    return l;
                }
            }
        }
        l.pending = None;
        l.acknowledged += 1;
    }
    l
}

// ----- verifying a worker queue -----

const ACKED: &str = "as acknowledged";
const BY_GET: &str = "dequeued by the pending Get";
const BY_UPDATE: &str = "changed by the pending Update";
const BY_DELETE: &str = "deleted by the pending Delete";
const BY_CLEAR: &str = "removed by the pending Clear";
const BY_PUT: &str = "put by the pending Put";

/// One state a message may be in after the kill, followed through what the
/// verification then sees.
#[derive(Debug, Clone)]
struct Cand {
    label: &'static str,
    present: bool,
    text: String,
    dq: u64,
    /// The receipt the harness holds for it works.
    receipt_ok: bool,
    vis: Vis,
    exp: Option<Win>,
    /// Why it was ruled out.
    out: Option<String>,
}

#[derive(Debug)]
enum Obs {
    /// An Update (visibility 0) with the receipt the harness holds.
    Receipt { ok: bool },
    /// A sweep's Get returned it.
    Got { text: String, dq: u64 },
    /// The sweep's last Get returned nothing.
    NotGot,
}

impl Cand {
    fn see(&mut self, obs: &Obs, w: Win) {
        if self.out.is_some() {
            return;
        }
        let why: Option<String> = match obs {
            Obs::Receipt { ok: true } => {
                if !self.present {
                    Some("it would be gone, but its receipt worked".into())
                } else if !self.receipt_ok {
                    Some("its receipt would have been replaced, but it worked".into())
                } else if surely_expired(self.exp, w) {
                    Some("it would have expired, but its receipt worked".into())
                } else {
                    self.vis = Vis::Now;
                    None
                }
            }
            Obs::Receipt { ok: false } => {
                if self.present && self.receipt_ok {
                    if possibly_expired(self.exp, w) {
                        self.present = false;
                        None
                    } else {
                        Some("its receipt failed".into())
                    }
                } else {
                    None
                }
            }
            Obs::Got { text, dq } => {
                if !self.present {
                    Some("it would be gone, but a Get returned it".into())
                } else if *text != self.text {
                    Some(format!("a Get returned the text {text:?}, not {:?}", self.text))
                } else if *dq != self.dq + 1 {
                    Some(format!("a Get returned the dequeue count {dq}, not {}", self.dq + 1))
                } else if self.vis.surely_invisible(w) {
                    Some("a Get returned it before its visibility time".into())
                } else if surely_expired(self.exp, w) {
                    Some("a Get returned it after its expiry".into())
                } else {
                    self.dq += 1;
                    self.receipt_ok = true;
                    self.vis = Vis::At(w.after(SWEEP_VT));
                    None
                }
            }
            Obs::NotGot => {
                if self.present && self.vis.surely_visible(w) {
                    if possibly_expired(self.exp, w) {
                        self.present = false;
                        None
                    } else {
                        Some("it was surely visible and not expired, but a Get did not return it".into())
                    }
                } else {
                    None
                }
            }
        };
        self.out = why;
    }
}

/// A message under verification.
#[derive(Debug)]
struct Check {
    cands: Vec<Cand>,
    /// The receipt the harness holds now.
    receipt: String,
    /// Not tried in step 1 (acknowledged as invisible past now).
    deferred: bool,
    /// Returned by sweep 1 or 2: (sweep, text, dq, window).
    got: Option<(u8, String, u64, Win)>,
    /// The acknowledged receipt was tried and worked.
    receipt_worked: bool,
    log: Vec<String>,
}

impl Check {
    fn see(&mut self, obs: Obs, w: Win, t0: Instant) {
        let ms = |t: Instant| t.saturating_duration_since(t0).as_millis();
        let what = match &obs {
            Obs::Receipt { ok: true } => "its receipt worked".to_string(),
            Obs::Receipt { ok: false } => "its receipt failed".to_string(),
            Obs::Got { text, dq } => format!(
                "a Get returned it with dequeue count {dq} and text {:?}",
                text.chars().take(40).collect::<String>()
            ),
            Obs::NotGot => "a Get did not return it".to_string(),
        };
        self.log.push(format!(
            "{what} (server time +{}..{} ms after the restart)",
            ms(w.lo),
            ms(w.hi)
        ));
        for c in &mut self.cands {
            c.see(&obs, w);
        }
    }
    fn alive(&self) -> impl Iterator<Item = &Cand> {
        self.cands.iter().filter(|c| c.out.is_none())
    }
}

/// What the verification of one queue needs from before the kill.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    /// This run's clock.
    clock: RunClock,
    /// Latest server time at which a pending operation may have run.
    kill_hi: Instant,
    /// For log lines: when the server was restarted.
    t0: Instant,
}

/// The first half of one queue's verification (steps 1 and 2).
struct Verifying {
    checks: BTreeMap<String, Check>,
    /// The pending Put's message, if it was in flight: its candidate and
    /// what was seen of it.
    put: Option<Check>,
    put_text: Option<String>,
    /// Returned by a sweep but in no ledger: (id, text, dq, receipt, sweep).
    strays: Vec<(String, String, u64, String, u8)>,
    /// Until when the verification must wait before sweep 2.
    wait_until: Instant,
    /// The window of sweep 1's last (empty) Get.
    sweep1_last: Option<Win>,
    aborted: bool,
}

fn cands_for(m: &Msg, id: &str, pending: &Option<(Pending, Instant)>, kill_hi: Instant) -> Vec<Cand> {
    let acked = Cand {
        label: ACKED,
        present: true,
        text: m.text.clone(),
        dq: m.dq,
        receipt_ok: true,
        vis: m.vis,
        exp: m.exp,
        out: None,
    };
    let mut out = vec![acked.clone()];
    let Some((p, sent)) = pending else { return out };
    let pw = Win { lo: *sent, hi: kill_hi };
    match p {
        // Only a message that may have been visible and unexpired then.
        Pending::Get { vt, .. } if !m.vis.surely_invisible(pw) && !surely_expired(m.exp, pw) => out.push(Cand {
            label: BY_GET,
            dq: m.dq + 1,
            receipt_ok: false,
            vis: Vis::At(pw.after(*vt)),
            ..acked
        }),
        Pending::Update { id: p, text, vt } if p == id => out.push(Cand {
            label: BY_UPDATE,
            text: text.clone().unwrap_or_else(|| m.text.clone()),
            receipt_ok: false,
            vis: Vis::of(pw, *vt),
            ..acked
        }),
        Pending::Delete { id: p } if p == id => out.push(Cand {
            label: BY_DELETE,
            present: false,
            ..acked
        }),
        Pending::Clear => out.push(Cand {
            label: BY_CLEAR,
            present: false,
            ..acked
        }),
        _ => {}
    }
    out
}

type Swept = (Vec<(String, String, u64, String, Win)>, Win);

/// Gets every visible message (visibility [`SWEEP_VT`]) until a Get returns
/// none: each with the window of its Get, and the window of the last Get.
fn sweep(c: &mut Client, queue: &str, clock: RunClock) -> Result<Swept, String> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let a = Instant::now();
        let r = c
            .call(
                "GET",
                &format!(
                    "{}/messages?numofmessages=32&visibilitytimeout={SWEEP_VT}",
                    qpath(queue)
                ),
                &[],
                b"",
            )
            .map_err(|e| format!("verification get failed: {}", io_words(&e)))?;
        let w = clock.op(a, Instant::now());
        if r.status != 200 {
            return Err(format!("verification get answered {} {}", r.status, r.code()));
        }
        let ids = all_between(&r.body, "MessageId");
        if ids.is_empty() {
            return Ok((out, w));
        }
        let texts = all_between(&r.body, "MessageText");
        let dqs = all_between(&r.body, "DequeueCount");
        let receipts = all_between(&r.body, "PopReceipt");
        for i in 0..ids.len() {
            out.push((
                ids[i].clone(),
                texts[i].clone(),
                dqs[i].parse().unwrap_or(0),
                receipts[i].clone(),
                w,
            ));
        }
    }
    Err("verification gets never ran dry".into())
}

/// Update with visibility 0: `Ok(Some(new receipt))`, `Ok(None)` if the
/// receipt failed, Err on anything else.
fn try_receipt(c: &mut Client, queue: &str, id: &str, receipt: &str) -> Result<Option<String>, String> {
    let target = format!(
        "{}/messages/{id}?popreceipt={receipt}&visibilitytimeout=0",
        qpath(queue)
    );
    match c.call("PUT", &target, &[], b"") {
        Ok(r) if r.status == 204 => Ok(Some(r.header("x-ms-popreceipt").unwrap_or("").to_string())),
        Ok(r) if is_receipt_failure(&r) => Ok(None),
        Ok(r) => Err(format!("update of {id} answered {} {}", r.status, r.code())),
        Err(e) => Err(format!("verification update failed: {}", io_words(&e))),
    }
}

/// Steps 1 and 2.
fn verify_begin(c: &mut Client, l: &Ledger, ctx: Ctx, bad: &mut Vec<String>) -> Verifying {
    let mut v = Verifying {
        checks: BTreeMap::new(),
        put: None,
        put_text: None,
        strays: Vec::new(),
        wait_until: l.latest_vis,
        sweep1_last: None,
        aborted: false,
    };
    let now = Instant::now();
    let wnow = ctx.clock.op(now, now);
    for (id, m) in &l.msgs {
        v.checks.insert(
            id.clone(),
            Check {
                cands: cands_for(m, id, &l.pending, ctx.kill_hi),
                receipt: m.receipt.clone(),
                deferred: m.vis.surely_invisible(wnow),
                got: None,
                receipt_worked: false,
                log: Vec::new(),
            },
        );
    }
    if let Some((p, sent)) = &l.pending {
        let pw = Win {
            lo: *sent,
            hi: ctx.kill_hi,
        };
        match p {
            Pending::Put { text, vt, ttl } => {
                let vis = Vis::of(pw, *vt);
                v.put = Some(Check {
                    cands: vec![Cand {
                        label: BY_PUT,
                        present: true,
                        text: text.clone(),
                        dq: 0,
                        receipt_ok: false,
                        vis,
                        exp: ttl.map(|t| pw.after(t)),
                        out: None,
                    }],
                    receipt: String::new(),
                    deferred: false,
                    got: None,
                    receipt_worked: false,
                    log: Vec::new(),
                });
                v.put_text = Some(text.clone());
                v.wait_until = v.wait_until.max(vis.latest().unwrap_or(now));
            }
            Pending::Get { vt, .. } | Pending::Update { vt, .. } => {
                v.wait_until = v.wait_until.max(pw.after(*vt).hi);
            }
            _ => {}
        }
    }
    // Step 1: every receipt that can be tried without making visible a
    // message that must not be yet.
    for (id, chk) in v.checks.iter_mut() {
        if chk.deferred {
            continue;
        }
        let a = Instant::now();
        match try_receipt(c, &l.queue, id, &chk.receipt) {
            Ok(r) => {
                let w = ctx.clock.op(a, Instant::now());
                chk.see(Obs::Receipt { ok: r.is_some() }, w, ctx.t0);
                if let Some(r) = r {
                    chk.receipt = r;
                    chk.receipt_worked = true;
                }
            }
            Err(e) => {
                bad.push(format!("{}: {e}", l.queue));
                v.aborted = true;
                return v;
            }
        }
    }
    // Step 2: sweep 1.
    let (got, last) = match sweep(c, &l.queue, ctx.clock) {
        Ok(s) => s,
        Err(e) => {
            bad.push(format!("{}: {e}", l.queue));
            v.aborted = true;
            return v;
        }
    };
    for (id, text, dq, receipt, w) in got {
        let obs = Obs::Got { text: text.clone(), dq };
        if let Some(chk) = v.checks.get_mut(&id) {
            chk.see(obs, w, ctx.t0);
            chk.receipt = receipt;
            chk.got = Some((1, text, dq, w));
        } else if v.put_text.as_deref() == Some(text.as_str()) && v.put.as_ref().is_some_and(|p| p.got.is_none()) {
            let p = v.put.as_mut().expect("checked");
            p.see(obs, w, ctx.t0);
            p.receipt = receipt;
            p.got = Some((1, text, dq, w));
            v.checks.insert(id, v.put.take().expect("checked"));
        } else {
            v.strays.push((id, text, dq, receipt, 1));
        }
    }
    v.sweep1_last = Some(last);
    for chk in v.checks.values_mut().chain(v.put.iter_mut()) {
        if chk.got.is_none() {
            chk.see(Obs::NotGot, last, ctx.t0);
            for cand in chk.alive() {
                if cand.present {
                    if let Some(t) = cand.vis.latest() {
                        v.wait_until = v.wait_until.max(t);
                    }
                }
            }
        }
    }
    v
}

/// Steps 3 to 7 (after the wait). Re-bases the ledger.
fn verify_end(c: &mut Client, l: &mut Ledger, mut v: Verifying, ctx: Ctx, f: &mut Facts, bad: &mut Vec<String>) {
    let q = l.queue.clone();
    if v.aborted {
        return;
    }
    let mut fail = |what: String| bad.push(format!("{q}: {what}"));
    // Step 4: the receipts held back.
    for (id, chk) in v.checks.iter_mut() {
        if !chk.deferred || chk.got.is_some() {
            continue;
        }
        let a = Instant::now();
        match try_receipt(c, &l.queue, id, &chk.receipt) {
            Ok(r) => {
                let w = ctx.clock.op(a, Instant::now());
                chk.see(Obs::Receipt { ok: r.is_some() }, w, ctx.t0);
                if let Some(r) = r {
                    chk.receipt = r;
                    chk.receipt_worked = true;
                }
            }
            Err(e) => {
                fail(e);
                return;
            }
        }
    }
    // Step 5: sweep 2.
    let (got, last) = match sweep(c, &l.queue, ctx.clock) {
        Ok(s) => s,
        Err(e) => {
            fail(e);
            return;
        }
    };
    for (id, text, dq, receipt, w) in got {
        let obs = Obs::Got { text: text.clone(), dq };
        match v.checks.get_mut(&id) {
            Some(chk) if chk.got.is_some() => {
                fail(format!(
                    "message {id} ({text:?}) was returned by both sweeps: a visibility timeout of {SWEEP_VT} s did not hold"
                ));
                chk.receipt = receipt;
            }
            Some(chk) => {
                chk.see(obs, w, ctx.t0);
                chk.receipt = receipt;
                chk.got = Some((2, text, dq, w));
            }
            None if v.put_text.as_deref() == Some(text.as_str()) && v.put.is_some() => {
                let mut p = v.put.take().expect("checked");
                p.see(obs, w, ctx.t0);
                p.receipt = receipt;
                p.got = Some((2, text, dq, w));
                v.checks.insert(id, p);
            }
            None => v.strays.push((id, text, dq, receipt, 2)),
        }
    }
    for chk in v.checks.values_mut().chain(v.put.iter_mut()) {
        if chk.got.is_none() {
            chk.see(Obs::NotGot, last, ctx.t0);
        }
    }
    // Step 6: judge.
    let mut by_get = 0;
    let (mut cleared, mut kept) = (0, 0);
    let mut clear_log = Vec::new();
    for (id, chk) in &v.checks {
        let alive: Vec<&Cand> = chk.alive().collect();
        if alive.is_empty() {
            let why: Vec<String> = chk
                .cands
                .iter()
                .map(|c| format!("{}: {}", c.label, c.out.as_deref().unwrap_or("?")))
                .collect();
            fail(format!(
                "message {id} ({:?}) after restart: {}; it fits none of its possible states ({})",
                chk.cands[0].text.chars().take(40).collect::<String>(),
                chk.log.join(", "),
                why.join("; ")
            ));
            continue;
        }
        let acked = &chk.cands[0];
        if acked.label == BY_PUT {
            continue;
        }
        if acked.out.is_none() {
            // Counted only when the acknowledged state explains everything seen.
            if chk.got.is_some() {
                f.messages += 1;
            }
            if chk.receipt_worked {
                f.receipts += 1;
            }
            // Surely invisible at sweep 1's last Get, returned by sweep 2.
            let was = l.msgs.get(id).map(|m| m.vis);
            if let (Some((2, ..)), Some(vis), Some(w1)) = (&chk.got, was, v.sweep1_last) {
                if vis.surely_invisible(w1) {
                    f.invisible += 1;
                }
            }
            if let (Some(e), Some((_, _, _, w))) = (acked.exp, &chk.got) {
                if !possibly_expired(Some(e), *w) {
                    f.unexpired += 1;
                }
            }
            if chk.got.is_none() && surely_expired(acked.exp, last) {
                f.expired += 1;
            }
        }
        if alive.iter().all(|c| c.label == BY_GET) {
            by_get += 1;
        }
        if alive.iter().all(|c| c.label == BY_CLEAR) {
            cleared += 1;
            clear_log.push(format!(
                "{id} ({:?}, expiry {:?}): {}",
                chk.cands[0].text.chars().take(40).collect::<String>(),
                l.msgs.get(id).and_then(|m| m.exp).map(|e| (
                    e.lo.saturating_duration_since(ctx.t0).as_millis() as i128
                        - ctx.t0.saturating_duration_since(e.lo).as_millis() as i128,
                    e.hi.saturating_duration_since(ctx.t0).as_millis() as i128
                        - ctx.t0.saturating_duration_since(e.hi).as_millis() as i128
                )),
                chk.log.join(", ")
            ));
        }
        if chk.got.is_some() {
            kept += 1;
        }
    }
    match &l.pending {
        Some((Pending::Get { n, .. }, _)) if by_get > *n => {
            fail(format!("the pending Get of {n} messages dequeued {by_get} of them"))
        }
        Some((Pending::Clear, _)) if cleared > 0 && kept > 0 => fail(format!(
            "the pending Clear was applied in part: {cleared} messages are gone, {kept} are still there; gone: {} (expiry in ms after the restart)",
            clear_log.join("; ")
        )),
        Some(_) => {
            f.pending += 1;
        }
        None => {}
    }
    for (id, text, _, _, sweep) in &v.strays {
        let when = if *sweep == 1 {
            "visible at the restart"
        } else {
            "invisible at the restart, returned after the wait"
        };
        fail(format!(
            "message {id} ({:?}) came back after restart ({when}) but is in no ledger: {}",
            text.chars().take(40).collect::<String>(),
            l.why_unknown(id)
        ));
    }
    f.removed += l.gone_recently;
    // Step 7: make everything visible again, with the receipts from the sweeps.
    let mut next = BTreeMap::new();
    let present = v
        .checks
        .into_iter()
        .filter_map(|(id, chk)| {
            let exp = chk.alive().next().map_or(chk.cands[0].exp, |c| c.exp);
            chk.got.map(|(_, text, dq, _)| (id, text, dq, chk.receipt, exp))
        })
        .chain(v.strays.into_iter().map(|(id, text, dq, r, _)| (id, text, dq, r, None)));
    for (id, text, dq, receipt, exp) in present {
        let a = Instant::now();
        match try_receipt(c, &l.queue, &id, &receipt) {
            Ok(Some(receipt)) => {
                next.insert(
                    id,
                    Msg {
                        text,
                        receipt,
                        dq,
                        vis: Vis::Now,
                        exp,
                    },
                );
            }
            Ok(None) if possibly_expired(exp, ctx.clock.op(a, Instant::now())) => {
                l.gone.insert(id, "expired");
            }
            Ok(None) => fail(format!(
                "message {id} ({text:?}): the receipt from a Get after the restart failed"
            )),
            Err(e) => fail(e),
        }
    }
    for id in l.msgs.keys() {
        if !next.contains_key(id) {
            l.gone.insert(id.clone(), "gone at a restart");
        }
    }
    l.msgs = next;
    l.pending = None;
    l.gone_recently = 0;
    l.latest_vis = Instant::now();
}

// ----- queue definitions -----

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct QueueDef {
    /// Lower-case names.
    meta: BTreeMap<String, String>,
    /// (id, permission)
    acl: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
enum MetaPending {
    Create {
        name: String,
        def: QueueDef,
    },
    SetAcl {
        name: String,
        acl: Vec<(String, String)>,
    },
    SetMeta {
        name: String,
        meta: BTreeMap<String, String>,
    },
    Delete {
        name: String,
    },
}

impl MetaPending {
    fn name(&self) -> &str {
        match self {
            MetaPending::Create { name, .. }
            | MetaPending::SetAcl { name, .. }
            | MetaPending::SetMeta { name, .. }
            | MetaPending::Delete { name } => name,
        }
    }
}

/// Queue definitions: created and deleted, metadata and ACLs, with a ledger.
#[derive(Debug, Default, Clone)]
struct MetaLedger {
    queues: BTreeMap<String, QueueDef>,
    pending: Option<MetaPending>,
    n: u64,
    acknowledged: u64,
}

fn acl_xml(acl: &[(String, String)]) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers>");
    for (id, perm) in acl {
        s.push_str(&format!(
            "<SignedIdentifier><Id>{id}</Id><AccessPolicy><Permission>{perm}</Permission></AccessPolicy></SignedIdentifier>"
        ));
    }
    s.push_str("</SignedIdentifiers>");
    s
}

fn meta_headers(meta: &BTreeMap<String, String>) -> Vec<(String, String)> {
    meta.iter()
        .map(|(k, v)| (format!("x-ms-meta-{k}"), v.clone()))
        .collect()
}

fn call_with(
    c: &mut Client,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    c.call(method, target, &h, body)
}

fn random_meta(rng: &mut StdRng, n: u64) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for key in ["cycle", "owner", "tier"] {
        if rng.gen_bool(0.6) {
            m.insert(key.to_string(), format!("{key}{n}-{}", rng.gen_range(0..1000)));
        }
    }
    m
}

fn random_acl(rng: &mut StdRng, n: u64) -> Vec<(String, String)> {
    (0..rng.gen_range(0..=2))
        .map(|i| {
            let perm = ["r", "raup", "p", "au"][rng.gen_range(0..4)];
            (format!("p{n}-{i}"), perm.to_string())
        })
        .collect()
}

fn meta_load(port: u16, mut m: MetaLedger, sh: Arc<Shared>, seed: u64) -> MetaLedger {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c = client(port);
    let bad = |what: String| sh.bad(what);
    while !sh.killed.load(Ordering::SeqCst) {
        m.n += 1;
        let n = m.n;
        let roll = rng.gen_range(0..100);
        let existing = (!m.queues.is_empty()).then(|| {
            m.queues
                .keys()
                .nth(rng.gen_range(0..m.queues.len()))
                .cloned()
                .expect("in range")
        });
        // Between 2 and 8 queues: create 30 %, set ACL 25 %, set metadata
        // 25 %, delete 20 %.
        let len = m.queues.len();
        let op = match roll {
            _ if len < 2 => "create",
            0..=29 if len >= 8 => "delete",
            0..=29 => "create",
            30..=54 => "acl",
            55..=79 => "meta",
            _ if len > 2 => "delete",
            _ => "create",
        };
        let result = match existing {
            Some(name) if op == "acl" => {
                let acl = random_acl(&mut rng, n);
                m.pending = Some(MetaPending::SetAcl {
                    name: name.clone(),
                    acl: acl.clone(),
                });
                c.call(
                    "PUT",
                    &format!("{}?comp=acl", qpath(&name)),
                    &[],
                    acl_xml(&acl).as_bytes(),
                )
                .map(|r| match r.status {
                    204 => m.queues.get_mut(&name).expect("existing").acl = acl,
                    _ => bad(format!("{name}: set ACL answered {} {}", r.status, r.code())),
                })
            }
            Some(name) if op == "meta" => {
                let meta = random_meta(&mut rng, n);
                m.pending = Some(MetaPending::SetMeta {
                    name: name.clone(),
                    meta: meta.clone(),
                });
                call_with(
                    &mut c,
                    "PUT",
                    &format!("{}?comp=metadata", qpath(&name)),
                    &meta_headers(&meta),
                    b"",
                )
                .map(|r| match r.status {
                    204 => m.queues.get_mut(&name).expect("existing").meta = meta,
                    _ => bad(format!("{name}: set metadata answered {} {}", r.status, r.code())),
                })
            }
            Some(name) if op == "delete" => {
                m.pending = Some(MetaPending::Delete { name: name.clone() });
                c.call("DELETE", &qpath(&name), &[], b"").map(|r| match r.status {
                    204 => {
                        m.queues.remove(&name);
                    }
                    _ => bad(format!("{name}: delete answered {} {}", r.status, r.code())),
                })
            }
            _ => {
                let name = format!("meta-{n}");
                let def = QueueDef {
                    meta: random_meta(&mut rng, n),
                    acl: Vec::new(),
                };
                m.pending = Some(MetaPending::Create {
                    name: name.clone(),
                    def: def.clone(),
                });
                call_with(&mut c, "PUT", &qpath(&name), &meta_headers(&def.meta), b"").map(|r| match r.status {
                    201 => {
                        m.queues.insert(name.clone(), def);
                    }
                    _ => bad(format!("{name}: create answered {} {}", r.status, r.code())),
                })
            }
        };
        if let Err(e) = result {
            let op = format!("{:?}", m.pending);
            sh.io_error("queue definitions", &op, e);
            return m;
        }
        m.pending = None;
        m.acknowledged += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    m
}

/// What a queue looks like now: `None` if Get Queue Metadata answers 404.
fn observe_queue(c: &mut Client, name: &str) -> Result<Option<QueueDef>, String> {
    let r = c
        .call("GET", &format!("{}?comp=metadata", qpath(name)), &[], b"")
        .map_err(|e| format!("queue {name}: {}", io_words(&e)))?;
    match r.status {
        200 => {}
        404 if r.code() == "QueueNotFound" => return Ok(None),
        s => return Err(format!("queue {name}: get metadata answered {s} {}", r.code())),
    }
    let meta = r
        .headers
        .iter()
        .filter_map(|(k, v)| {
            let k = k.to_ascii_lowercase();
            k.strip_prefix("x-ms-meta-").map(|n| (n.to_string(), v.clone()))
        })
        .collect();
    let r = c
        .call("GET", &format!("{}?comp=acl", qpath(name)), &[], b"")
        .map_err(|e| format!("queue {name}: {}", io_words(&e)))?;
    if r.status != 200 {
        return Err(format!("queue {name}: get ACL answered {} {}", r.status, r.code()));
    }
    let acl = all_between(&r.body, "Id")
        .into_iter()
        .zip(all_between(&r.body, "Permission"))
        .collect();
    Ok(Some(QueueDef { meta, acl }))
}

fn verify_meta(c: &mut Client, m: &mut MetaLedger, f: &mut Facts, bad: &mut Vec<String>) {
    let r = match c.call(
        "GET",
        &format!("/{}/?comp=list&prefix=meta-", crate::client::ACCOUNT),
        &[],
        b"",
    ) {
        Ok(r) if r.status == 200 => r,
        Ok(r) => {
            bad.push(format!("list after restart answered {} {}", r.status, r.code()));
            return;
        }
        Err(e) => {
            bad.push(format!("list after restart failed: {}", io_words(&e)));
            return;
        }
    };
    let listed = all_between(&r.body, "Name");
    let mut names: Vec<String> = m.queues.keys().cloned().collect();
    names.extend(m.pending.as_ref().map(|p| p.name().to_string()));
    names.extend(listed.iter().cloned());
    names.sort();
    names.dedup();
    let mut now = BTreeMap::new();
    for name in names {
        let seen = match observe_queue(c, &name) {
            Ok(s) => s,
            Err(e) => {
                bad.push(e);
                continue;
            }
        };
        if seen.is_some() != listed.contains(&name) {
            bad.push(format!(
                "queue {name}: listed {} but get metadata found it {}",
                listed.contains(&name),
                seen.is_some()
            ));
        }
        let acked = m.queues.get(&name);
        let mut allowed: Vec<(Option<QueueDef>, &str)> = vec![(acked.cloned(), "as acknowledged")];
        match &m.pending {
            Some(p) if p.name() == name => {
                let alt = match (p, acked) {
                    (MetaPending::Create { def, .. }, None) => Some(def.clone()),
                    (MetaPending::SetAcl { acl, .. }, Some(d)) => Some(QueueDef {
                        acl: acl.clone(),
                        ..d.clone()
                    }),
                    (MetaPending::SetMeta { meta, .. }, Some(d)) => Some(QueueDef {
                        meta: meta.clone(),
                        ..d.clone()
                    }),
                    (MetaPending::Delete { .. }, Some(_)) => None,
                    _ => {
                        bad.push(format!("harness: pending {p:?} does not fit the ledger's {acked:?}"));
                        None
                    }
                };
                allowed.push((alt, "as the pending operation left it"));
                if allowed.iter().any(|(d, _)| *d == seen) {
                    f.pending += 1;
                }
            }
            _ => {}
        }
        match allowed.iter().find(|(d, _)| *d == seen) {
            Some(_) => {
                if acked.is_some() {
                    f.queues += 1;
                }
            }
            None => bad.push(format!(
                "queue {name} after restart is {seen:?}; allowed: {:?}{}",
                allowed,
                m.pending
                    .as_ref()
                    .filter(|p| p.name() == name)
                    .map(|p| format!(" (pending: {p:?})"))
                    .unwrap_or_default()
            )),
        }
        if let Some(d) = seen {
            now.insert(name, d);
        }
    }
    m.queues = now;
    m.pending = None;
}

// ----- the cycle -----

struct Verified {
    facts: Facts,
    violations: Vec<String>,
}

fn verify_all(c: &mut Client, ledgers: &mut [Ledger], meta: &mut MetaLedger, ctx: Ctx) -> Verified {
    let mut f = Facts::default();
    let mut bad = Vec::new();
    let begun: Vec<Verifying> = ledgers.iter().map(|l| verify_begin(c, l, ctx, &mut bad)).collect();
    verify_meta(c, meta, &mut f, &mut bad);
    // Step 3: one wait for every queue.
    let until = begun.iter().map(|v| v.wait_until).max().unwrap_or_else(Instant::now) + TOL;
    if let Some(d) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
    for (l, v) in ledgers.iter_mut().zip(begun) {
        verify_end(c, l, v, ctx, &mut f, &mut bad);
    }
    Verified {
        facts: f,
        violations: bad,
    }
}

fn add(total: &mut Facts, f: Facts) {
    total.receipts += f.receipts;
    total.messages += f.messages;
    total.invisible += f.invisible;
    total.expired += f.expired;
    total.unexpired += f.unexpired;
    total.removed += f.removed;
    total.queues += f.queues;
    total.pending += f.pending;
}

/// Runs kill cycles until the iteration or time budget is spent.
pub fn run(cfg: &Config) -> Summary {
    let mut sum = Summary::default();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let port = crate::proc::free_port();
    let started = Instant::now();
    let mut ledgers: Vec<Ledger> = (0..cfg.workers).map(|w| Ledger::new(format!("crash-w{w}"))).collect();
    let mut meta = MetaLedger::default();
    // Bound of the server's recorded time floor, and of the latest time a
    // pending operation may have run at.
    let mut floor = Instant::now();
    let mut kill_hi = Instant::now();
    let mut first = true;
    let verify =
        |c: &mut Client, ledgers: &mut [Ledger], meta: &mut MetaLedger, ctx: Ctx, sum: &mut Summary, label: String| {
            let v = verify_all(c, ledgers, meta, ctx);
            add(&mut sum.facts, v.facts);
            sum.violations
                .extend(v.violations.into_iter().map(|x| format!("{label}: {x}")));
        };
    loop {
        if sum.cycles >= cfg.iterations || cfg.seconds.is_some_and(|s| started.elapsed().as_secs_f64() >= s) {
            break;
        }
        let t0 = Instant::now();
        let mut server = match Server::start(cfg, port) {
            Ok(s) => s,
            Err(e) => {
                sum.violations.push(format!("cycle {}: {e}", sum.cycles));
                break;
            }
        };
        let clock = RunClock { floor };
        let mut c = client(port);
        if first {
            for l in &ledgers {
                let r = c.call("PUT", &qpath(&l.queue), &[], b"").expect("create worker queue");
                assert!(r.status == 201 || r.status == 204, "create answered {}", r.status);
            }
            first = false;
        } else {
            let ctx = Ctx { clock, kill_hi, t0 };
            let label = format!("cycle {}", sum.cycles);
            verify(&mut c, &mut ledgers, &mut meta, ctx, &mut sum, label);
            if let Some(why) = server.exited() {
                sum.violations
                    .push(format!("cycle {}: during the verification, {why}", sum.cycles));
                floor = Instant::now().max(floor) + LEASE;
                kill_hi = floor;
                sum.cycles += 1;
                continue;
            }
        }
        // Load, then kill at a random moment while requests are in flight,
        // unless the server dies or fails a connection on its own first.
        let sh = Arc::new(Shared::default());
        let mut handles = Vec::new();
        for (w, l) in ledgers.drain(..).enumerate() {
            let sh = sh.clone();
            let seed = rng.gen::<u64>() ^ w as u64;
            handles.push(std::thread::spawn(move || load(port, l, clock, sh, seed)));
        }
        let m = meta.clone();
        let (msh, mseed) = (sh.clone(), rng.gen::<u64>());
        let meta_handle = std::thread::spawn(move || meta_load(port, m, msh, mseed));
        let deadline = Instant::now() + Duration::from_millis(rng.gen_range(150..900));
        let mut exited = None;
        loop {
            if let Some(why) = server.exited() {
                exited = Some(why);
                break;
            }
            if !sh.early.lock().expect("not poisoned").is_empty() {
                // A connection failed before the kill: did the server die?
                let t = Instant::now();
                while exited.is_none() && t.elapsed() < Duration::from_millis(500) {
                    std::thread::sleep(Duration::from_millis(10));
                    exited = server.exited();
                }
                if exited.is_none() {
                    sum.violations.push(format!(
                        "cycle {}: a connection failed while the server was running, before the kill: {}",
                        sum.cycles,
                        sh.early.lock().expect("not poisoned").join("; ")
                    ));
                }
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        sh.killed.store(true, Ordering::SeqCst);
        match exited {
            Some(why) => sum.violations.push(format!(
                "cycle {}: during the load, {why} (the workers saw: {})",
                sum.cycles,
                sh.early.lock().expect("not poisoned").join("; ")
            )),
            None => {
                if let Err(e) = server.kill9() {
                    sum.violations.push(format!("cycle {}: {e}", sum.cycles));
                }
            }
        }
        let k = Instant::now();
        kill_hi = k.max(floor);
        floor = kill_hi + LEASE;
        for h in handles {
            ledgers.push(h.join().expect("worker"));
        }
        meta = meta_handle.join().expect("meta worker");
        sum.cycles += 1;
        if sum.cycles % 25 == 0 {
            eprintln!(
                "  {} cycles, {} facts checked, {} violations, {:.0}s",
                sum.cycles,
                sum.facts.total(),
                sum.violations.len(),
                started.elapsed().as_secs_f64()
            );
        }
        for v in sh.violations.lock().expect("not poisoned").drain(..) {
            sum.violations.push(format!("cycle {}: {v}", sum.cycles));
        }
    }
    // A final restart and verification.
    match Server::start(cfg, port) {
        Ok(mut server) => {
            let mut c = client(port);
            let ctx = Ctx {
                clock: RunClock { floor },
                kill_hi,
                t0: Instant::now(),
            };
            verify(&mut c, &mut ledgers, &mut meta, ctx, &mut sum, "final".into());
            let end = match server.exited() {
                Some(why) => Err(why),
                None => server.kill9(),
            };
            if let Err(e) = end {
                sum.violations.push(format!("final: {e}"));
            }
        }
        Err(e) => sum
            .violations
            .push(format!("the server did not start after the last kill: {e}")),
    }
    sum.acknowledged = ledgers.iter().map(|l| l.acknowledged).sum::<u64>() + meta.acknowledged;
    sum.checked = sum.facts.total();
    sum
}

/// The hematite binary next to this test binary's target directory.
pub fn default_bin() -> PathBuf {
    if let Ok(p) = std::env::var("HEMATITE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut dir: &Path = exe.parent().expect("exe dir");
    loop {
        let candidate = dir.join("hematite");
        if candidate.exists() {
            return candidate;
        }
        match dir.parent() {
            Some(p) => dir = p,
            None => return PathBuf::from("target/debug/hematite"),
        }
    }
}
