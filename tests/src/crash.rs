//! The kill -9 crash harness. Each cycle: start the real binary on the same
//! data directory, verify everything acknowledged before the last kill, run
//! concurrent load from several connections while keeping a ledger of every
//! operation whose success response arrived, then SIGKILL the server at a
//! random moment. An operation in flight at the kill is "pending": after the
//! restart it may or may not have happened, and only its possible effects are
//! tolerated.

use crate::client::{all_between, message_xml, Client};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

#[derive(Debug, Default)]
pub struct Summary {
    pub cycles: usize,
    pub acknowledged: u64,
    pub checked: u64,
    pub violations: Vec<String>,
}

impl Summary {
    pub fn line(&self) -> String {
        format!(
            "crashloop: {} kill -9 cycles, {} acknowledged operations, {} acknowledged facts checked after restarts, {} violations",
            self.cycles,
            self.acknowledged,
            self.checked,
            self.violations.len()
        )
    }
}

#[derive(Debug, Clone)]
struct Msg {
    text: String,
    receipt: String,
    dq: u64,
    visible_at: Instant,
}

#[derive(Debug, Clone)]
enum Pending {
    Put { text: String },
    Get,
    Delete { id: String },
    Update { id: String, text: Option<String> },
    Clear,
}

/// What one worker knows is acknowledged for its queue.
#[derive(Debug, Clone, Default)]
struct Ledger {
    queue: String,
    msgs: BTreeMap<String, Msg>,
    pending: Option<Pending>,
    acknowledged: u64,
    seq: u64,
}

struct Server {
    child: Child,
}

impl Server {
    fn start(cfg: &Config, port: u16) -> Result<Server, String> {
        let extra: Vec<&str> = cfg.server_args.iter().map(String::as_str).collect();
        crate::proc::spawn_ready(crate::proc::command(&cfg.bin, port, &cfg.data_dir, &extra))
            .map(|child| Server { child })
    }

    fn kill9(mut self) {
        crate::proc::kill9(&mut self.child);
    }
}

fn qpath(q: &str) -> String {
    format!("/{}/{q}", crate::client::ACCOUNT)
}

/// When everything the ledger, or a pending operation, may have made
/// invisible is visible again (so the check can receive it).
fn all_visible_at(l: &Ledger, restarted: Instant) -> Instant {
    let until = l.msgs.values().map(|m| m.visible_at).max().unwrap_or(restarted);
    match l.pending {
        // A pending Get or Update may have set up to 2 s; a pending Put up to 1 s.
        Some(Pending::Get) | Some(Pending::Update { .. }) => until.max(restarted + Duration::from_millis(2200)),
        Some(Pending::Put { .. }) => until.max(restarted + Duration::from_millis(1200)),
        _ => until,
    }
}

/// Checks one queue against its ledger after a restart and re-bases the
/// ledger on what is there now. Returns facts checked; pushes violations.
fn verify(c: &mut Client, l: &mut Ledger, violations: &mut Vec<String>) -> u64 {
    let mut checked = 0;
    let mut bad = |what: String| violations.push(format!("{}: {what}", l.queue));
    // Messages a pending operation may have touched are not held to their receipts.
    let affected = |id: &str| match &l.pending {
        Some(Pending::Get) | Some(Pending::Clear) => true,
        Some(Pending::Delete { id: p }) | Some(Pending::Update { id: p, .. }) => p == id,
        _ => false,
    };
    // Every acknowledged receipt still works (Update with visibilitytimeout=0).
    let ids: Vec<String> = l.msgs.keys().cloned().collect();
    for id in ids {
        let m = l.msgs.get(&id).expect("listed").clone();
        let target = format!(
            "{}/messages/{id}?popreceipt={}&visibilitytimeout=0",
            qpath(&l.queue),
            m.receipt
        );
        match c.call("PUT", &target, &[], b"") {
            Ok(r) if r.status == 204 => {
                checked += 1;
                let receipt = r.header("x-ms-popreceipt").unwrap_or("").to_string();
                l.msgs.get_mut(&id).expect("listed").receipt = receipt;
            }
            Ok(r) if affected(&id) => {
                let _ = r;
            }
            Ok(r) => bad(format!(
                "acknowledged message {id} ({}): its receipt failed after restart with {} {}",
                m.text,
                r.status,
                r.code()
            )),
            Err(e) => bad(format!("verification request failed: {e}")),
        }
    }
    // Receive everything; compare with the ledger.
    let mut seen: BTreeMap<String, (String, u64, String)> = BTreeMap::new();
    for _ in 0..10_000 {
        let r = match c.call(
            "GET",
            &format!("{}/messages?numofmessages=32&visibilitytimeout=1", qpath(&l.queue)),
            &[],
            b"",
        ) {
            Ok(r) => r,
            Err(e) => {
                bad(format!("verification get failed: {e}"));
                return checked;
            }
        };
        if r.status != 200 {
            bad(format!("verification get answered {} {}", r.status, r.code()));
            return checked;
        }
        let ids = all_between(&r.body, "MessageId");
        if ids.is_empty() {
            break;
        }
        let texts = all_between(&r.body, "MessageText");
        let dqs = all_between(&r.body, "DequeueCount");
        let receipts = all_between(&r.body, "PopReceipt");
        for i in 0..ids.len() {
            seen.insert(
                ids[i].clone(),
                (texts[i].clone(), dqs[i].parse().unwrap_or(0), receipts[i].clone()),
            );
        }
    }
    let now = Instant::now();
    for (id, m) in &l.msgs {
        match seen.get(id) {
            Some((text, dq, _)) => {
                checked += 1;
                let text_ok = *text == m.text
                    || matches!(&l.pending, Some(Pending::Update { id: p, text: Some(t) }) if p == id && t == text);
                if !text_ok {
                    bad(format!("message {id} came back as {text:?}, acknowledged {:?}", m.text));
                }
                let extra = if affected(id) && matches!(l.pending, Some(Pending::Get)) {
                    1
                } else {
                    0
                };
                if *dq < m.dq + 1 || *dq > m.dq + 1 + extra {
                    bad(format!(
                        "message {id}: dequeue count {dq}, acknowledged {} (+1 for the check)",
                        m.dq
                    ));
                }
            }
            None if affected(id) && matches!(l.pending, Some(Pending::Delete { .. }) | Some(Pending::Clear)) => {}
            None => bad(format!(
                "acknowledged message {id} ({}) is missing after restart",
                m.text
            )),
        }
    }
    for (id, (text, _, _)) in &seen {
        if !l.msgs.contains_key(id) && !matches!(&l.pending, Some(Pending::Put { text: t }) if t == text) {
            bad(format!(
                "message {id} ({text:?}) came back but was never acknowledged, or was deleted"
            ));
        }
    }
    // Re-base: what is there now is the new acknowledged state.
    l.msgs = seen
        .into_iter()
        .map(|(id, (text, dq, receipt))| {
            (
                id,
                Msg {
                    text,
                    receipt,
                    dq,
                    visible_at: now + Duration::from_millis(1100),
                },
            )
        })
        .collect();
    l.pending = None;
    checked
}

/// One worker's load until `stop` or an I/O error (the kill).
fn load(
    port: u16,
    mut l: Ledger,
    stop: Arc<AtomicBool>,
    seed: u64,
    violations: Arc<std::sync::Mutex<Vec<String>>>,
) -> Ledger {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c = Client::new(port);
    let bad = |what: String| violations.lock().expect("not poisoned").push(what);
    while !stop.load(Ordering::Relaxed) {
        let roll = rng.gen_range(0..100);
        let now = Instant::now();
        let pick = |rng: &mut StdRng, l: &Ledger| -> Option<String> {
            if l.msgs.is_empty() {
                None
            } else {
                l.msgs.keys().nth(rng.gen_range(0..l.msgs.len())).cloned()
            }
        };
        if roll < 35 {
            l.seq += 1;
            let text = format!("{}-{}-{}", l.queue, l.seq, "x".repeat(rng.gen_range(0..600)));
            let vt: u64 = if rng.gen_bool(0.8) { 0 } else { 1 };
            l.pending = Some(Pending::Put { text: text.clone() });
            let target = format!("{}/messages?messagettl=-1&visibilitytimeout={vt}", qpath(&l.queue));
            match c.call(
                "POST",
                &target,
                &[("Content-Type", "application/xml")],
                &message_xml(&text),
            ) {
                Ok(r) if r.status == 201 => {
                    let id = all_between(&r.body, "MessageId").pop().unwrap_or_default();
                    let receipt = all_between(&r.body, "PopReceipt").pop().unwrap_or_default();
                    l.msgs.insert(
                        id,
                        Msg {
                            text,
                            receipt,
                            dq: 0,
                            visible_at: now + Duration::from_secs(vt),
                        },
                    );
                }
                Ok(r) => bad(format!("{}: put answered {} {}", l.queue, r.status, r.code())),
                Err(_) => return l,
            }
        } else if roll < 60 {
            let vt = rng.gen_range(1..=2u64);
            l.pending = Some(Pending::Get);
            let target = format!(
                "{}/messages?numofmessages={}&visibilitytimeout={vt}",
                qpath(&l.queue),
                rng.gen_range(1..=4)
            );
            match c.call("GET", &target, &[], b"") {
                Ok(r) if r.status == 200 => {
                    let ids = all_between(&r.body, "MessageId");
                    let texts = all_between(&r.body, "MessageText");
                    let dqs = all_between(&r.body, "DequeueCount");
                    let receipts = all_between(&r.body, "PopReceipt");
                    for i in 0..ids.len() {
                        match l.msgs.get_mut(&ids[i]) {
                            Some(m) => {
                                let dq: u64 = dqs[i].parse().unwrap_or(0);
                                if texts[i] != m.text || dq != m.dq + 1 {
                                    bad(format!(
                                        "{}: get returned {} with {:?}/dq {dq}, ledger {:?}/dq {}",
                                        l.queue, ids[i], texts[i], m.text, m.dq
                                    ));
                                }
                                m.dq = dq;
                                m.receipt = receipts[i].clone();
                                m.visible_at = now + Duration::from_secs(vt);
                            }
                            None => bad(format!("{}: get returned unknown message {}", l.queue, ids[i])),
                        }
                    }
                }
                Ok(r) => bad(format!("{}: get answered {} {}", l.queue, r.status, r.code())),
                Err(_) => return l,
            }
        } else if roll < 85 {
            let Some(id) = pick(&mut rng, &l) else { continue };
            let receipt = l.msgs[&id].receipt.clone();
            l.pending = Some(Pending::Delete { id: id.clone() });
            match c.call(
                "DELETE",
                &format!("{}/messages/{id}?popreceipt={receipt}", qpath(&l.queue)),
                &[],
                b"",
            ) {
                Ok(r) if r.status == 204 => {
                    l.msgs.remove(&id);
                }
                Ok(r) => bad(format!(
                    "{}: delete of {id} with its current receipt answered {} {}",
                    l.queue,
                    r.status,
                    r.code()
                )),
                Err(_) => return l,
            }
        } else if roll < 97 {
            let Some(id) = pick(&mut rng, &l) else { continue };
            let receipt = l.msgs[&id].receipt.clone();
            let new_text = rng
                .gen_bool(0.5)
                .then(|| format!("{}-upd-{}", l.queue, rng.gen::<u32>()));
            let vt = rng.gen_range(0..=1u64);
            l.pending = Some(Pending::Update {
                id: id.clone(),
                text: new_text.clone(),
            });
            let body = new_text.as_deref().map(message_xml).unwrap_or_default();
            let target = format!(
                "{}/messages/{id}?popreceipt={receipt}&visibilitytimeout={vt}",
                qpath(&l.queue)
            );
            match c.call("PUT", &target, &[("Content-Type", "application/xml")], &body) {
                Ok(r) if r.status == 204 => {
                    let m = l.msgs.get_mut(&id).expect("picked");
                    m.receipt = r.header("x-ms-popreceipt").unwrap_or("").to_string();
                    m.visible_at = now + Duration::from_secs(vt);
                    if let Some(t) = new_text {
                        m.text = t;
                    }
                }
                Ok(r) => bad(format!(
                    "{}: update of {id} answered {} {}",
                    l.queue,
                    r.status,
                    r.code()
                )),
                Err(_) => return l,
            }
        } else {
            l.pending = Some(Pending::Clear);
            match c.call("DELETE", &format!("{}/messages", qpath(&l.queue)), &[], b"") {
                Ok(r) if r.status == 204 => l.msgs.clear(),
                Ok(r) => bad(format!("{}: clear answered {} {}", l.queue, r.status, r.code())),
                Err(_) => return l,
            }
        }
        l.pending = None;
        l.acknowledged += 1;
    }
    l
}

/// Queue definitions: created and deleted, metadata and ACLs, with a ledger.
#[derive(Debug, Default, Clone)]
struct MetaLedger {
    /// name → (metadata value, ACL id)
    queues: BTreeMap<String, (String, String)>,
    pending: Option<String>,
    n: u64,
    acknowledged: u64,
}

fn meta_load(
    port: u16,
    mut m: MetaLedger,
    stop: Arc<AtomicBool>,
    violations: Arc<std::sync::Mutex<Vec<String>>>,
) -> MetaLedger {
    let mut c = Client::new(port);
    let bad = |what: String| violations.lock().expect("not poisoned").push(what);
    while !stop.load(Ordering::Relaxed) {
        m.n += 1;
        let name = format!("meta-{}", m.n);
        let value = format!("v{}", m.n);
        let acl_id = format!("p{}", m.n);
        m.pending = Some(name.clone());
        let created = c.call("PUT", &qpath(&name), &[("x-ms-meta-Cycle", &value)], b"");
        let acl = format!("<SignedIdentifiers><SignedIdentifier><Id>{acl_id}</Id><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>");
        let set = created.and_then(|r| {
            if r.status != 201 {
                bad(format!("{name}: create answered {} {}", r.status, r.code()));
            }
            c.call("PUT", &format!("{}?comp=acl", qpath(&name)), &[], acl.as_bytes())
        });
        match set {
            Ok(r) if r.status == 204 => {
                m.queues.insert(name.clone(), (value, acl_id));
            }
            Ok(r) => bad(format!("{name}: set ACL answered {} {}", r.status, r.code())),
            Err(_) => return m,
        }
        // Keep a few: delete the oldest beyond three.
        if m.queues.len() > 3 {
            let victim = m.queues.keys().next().cloned().expect("non-empty");
            m.pending = Some(victim.clone());
            match c.call("DELETE", &qpath(&victim), &[], b"") {
                Ok(r) if r.status == 204 => {
                    m.queues.remove(&victim);
                }
                Ok(r) => bad(format!("{victim}: delete answered {} {}", r.status, r.code())),
                Err(_) => return m,
            }
        }
        m.pending = None;
        m.acknowledged += 3;
        std::thread::sleep(Duration::from_millis(5));
    }
    m
}

fn verify_meta(c: &mut Client, m: &mut MetaLedger, violations: &mut Vec<String>) -> u64 {
    let mut checked = 0;
    let r = match c.call(
        "GET",
        &format!("/{}/?comp=list&prefix=meta-&include=metadata", crate::client::ACCOUNT),
        &[],
        b"",
    ) {
        Ok(r) => r,
        Err(e) => {
            violations.push(format!("list after restart failed: {e}"));
            return 0;
        }
    };
    let names = all_between(&r.body, "Name");
    for (name, (value, acl_id)) in &m.queues {
        if !names.contains(name) {
            if m.pending.as_deref() != Some(name) {
                violations.push(format!("acknowledged queue {name} is missing after restart"));
            }
            continue;
        }
        checked += 1;
        match c.call("GET", &format!("{}?comp=metadata", qpath(name)), &[], b"") {
            Ok(r) if r.header("x-ms-meta-Cycle") == Some(value.as_str()) => checked += 1,
            Ok(r) => violations.push(format!(
                "queue {name}: metadata after restart is {:?}, acknowledged {value}",
                r.header("x-ms-meta-Cycle")
            )),
            Err(e) => violations.push(format!("queue {name}: {e}")),
        }
        match c.call("GET", &format!("{}?comp=acl", qpath(name)), &[], b"") {
            // `acl_id` is the comma-joined list of ids (empty: no policies).
            Ok(r) if all_between(&r.body, "Id").join(",") == *acl_id => checked += 1,
            Ok(r) if m.pending.as_deref() == Some(name) => {
                let _ = r;
            }
            Ok(r) => violations.push(format!(
                "queue {name}: ACL after restart is {}, acknowledged {acl_id}",
                r.body
            )),
            Err(e) => violations.push(format!("queue {name}: {e}")),
        }
    }
    for name in &names {
        if !m.queues.contains_key(name) && m.pending.as_deref() != Some(name) {
            violations.push(format!(
                "queue {name} exists after restart but its deletion was acknowledged"
            ));
        }
    }
    // Re-base on what exists.
    let mut now = BTreeMap::new();
    for name in names {
        let v = c
            .call("GET", &format!("{}?comp=metadata", qpath(&name)), &[], b"")
            .ok()
            .and_then(|r| r.header("x-ms-meta-Cycle").map(str::to_string))
            .unwrap_or_default();
        let acl = c
            .call("GET", &format!("{}?comp=acl", qpath(&name)), &[], b"")
            .ok()
            .map(|r| all_between(&r.body, "Id").join(","))
            .unwrap_or_default();
        now.insert(name, (v, acl));
    }
    m.queues = now;
    m.pending = None;
    checked
}

fn verify_all(c: &mut Client, ledgers: &mut [Ledger], meta: &mut MetaLedger, v: &mut Vec<String>) -> u64 {
    // Killed and restarted just now: wait once for every queue.
    let now = Instant::now();
    let until = ledgers.iter().map(|l| all_visible_at(l, now)).max().unwrap_or(now);
    if let Some(d) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
    let mut checked = 0;
    for l in ledgers.iter_mut() {
        checked += verify(c, l, v);
    }
    checked + verify_meta(c, meta, v)
}

/// Runs kill cycles until the iteration or time budget is spent.
pub fn run(cfg: &Config) -> Summary {
    let mut sum = Summary::default();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let port = crate::proc::free_port();
    let started = Instant::now();
    let mut ledgers: Vec<Ledger> = (0..cfg.workers)
        .map(|w| Ledger {
            queue: format!("crash-w{w}"),
            ..Default::default()
        })
        .collect();
    let mut meta = MetaLedger::default();
    let shared = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut first = true;
    loop {
        if sum.cycles >= cfg.iterations || cfg.seconds.is_some_and(|s| started.elapsed().as_secs_f64() >= s) {
            break;
        }
        let server = match Server::start(cfg, port) {
            Ok(s) => s,
            Err(e) => {
                sum.violations.push(format!("cycle {}: {e}", sum.cycles));
                break;
            }
        };
        let mut c = Client::new(port);
        if first {
            for l in &ledgers {
                let r = c.call("PUT", &qpath(&l.queue), &[], b"").expect("create worker queue");
                assert!(r.status == 201 || r.status == 204, "create answered {}", r.status);
            }
            first = false;
        } else {
            let mut v = Vec::new();
            sum.checked += verify_all(&mut c, &mut ledgers, &mut meta, &mut v);
            for x in v {
                sum.violations.push(format!("cycle {}: {x}", sum.cycles));
            }
        }
        // Load, then kill at a random moment while requests are in flight.
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for (w, l) in ledgers.drain(..).enumerate() {
            let (stop, shared) = (stop.clone(), shared.clone());
            let seed = rng.gen::<u64>() ^ w as u64;
            handles.push(std::thread::spawn(move || load(port, l, stop, seed, shared)));
        }
        let m = meta.clone();
        let (mstop, mshared) = (stop.clone(), shared.clone());
        let meta_handle = std::thread::spawn(move || meta_load(port, m, mstop, mshared));
        std::thread::sleep(Duration::from_millis(rng.gen_range(150..900)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let l = h.join().expect("worker");
            ledgers.push(l);
        }
        meta = meta_handle.join().expect("meta worker");
        sum.cycles += 1;
        if sum.cycles % 25 == 0 {
            eprintln!(
                "  {} cycles, {} facts checked, {} violations, {:.0}s",
                sum.cycles,
                sum.checked,
                sum.violations.len(),
                started.elapsed().as_secs_f64()
            );
        }
        for v in shared.lock().expect("not poisoned").drain(..) {
            sum.violations.push(format!("cycle {}: {v}", sum.cycles));
        }
    }
    // A final restart and verification.
    if let Ok(server) = Server::start(cfg, port) {
        let mut c = Client::new(port);
        let mut v = Vec::new();
        sum.checked += verify_all(&mut c, &mut ledgers, &mut meta, &mut v);
        sum.violations.extend(v.into_iter().map(|x| format!("final: {x}")));
        server.kill9();
    } else {
        sum.violations
            .push("the server did not start after the last kill".into());
    }
    sum.acknowledged = ledgers.iter().map(|l| l.acknowledged).sum::<u64>() + meta.acknowledged;
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
