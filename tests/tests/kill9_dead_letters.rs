//! Dead-letter moves under kill -9 (docs/EXTENSIONS.md, "Dead-letter
//! queues"): work queues with `hematite_max_dequeue_count` = 1 whose
//! dead-letter queues live on the same core and on the other one. A load
//! thread puts, receives (each message once, then its visibility timeout
//! runs out, so the next Get sets it aside) and consumes the dead-letter
//! queues, while the server is killed at random moments, many times over.
//! At the end every acknowledged message must be in its dead-letter queue
//! or have been consumed from it, with its id, text and dequeue count, and
//! no work queue may have delivered any message twice.

use hematite_tests::client::{all_between, message_xml, Client};
use hematite_tests::proc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ACCOUNT: &str = "devstoreaccount1";
const SHARDS: u64 = 2;

/// The server's routing: xxh3 of "account/queue", modulo the shards.
fn owner(queue: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("{ACCOUNT}/{queue}").as_bytes()) % SHARDS
}

/// Work/dead-letter pairs: at least one on one core, one across cores.
fn pairs() -> Vec<(String, String)> {
    let (mut same, mut across) = (None, None);
    for i in 0.. {
        let (w, d) = (format!("work{i}"), format!("dead{i}"));
        let slot = if owner(&w) == owner(&d) { &mut same } else { &mut across };
        if slot.is_none() {
            *slot = Some((w, d));
        }
        if same.is_some() && across.is_some() {
            break;
        }
    }
    vec![same.unwrap(), across.unwrap()]
}

#[derive(Default)]
struct Ledger {
    /// Acknowledged puts: id → text.
    acked: BTreeMap<String, String>,
    /// Texts of puts whose answer was lost in a kill: they may exist.
    maybe: BTreeSet<String>,
    /// Deliveries from work queues, per id.
    delivered: BTreeMap<String, u32>,
    /// Ids consumed (received and deleted, delete acknowledged) from a
    /// dead-letter queue, with what the copy said.
    consumed: BTreeMap<String, (String, String)>,
    /// Ids whose delete from a dead-letter queue was sent but not answered
    /// (a kill): the copy may be gone.
    maybe_consumed: BTreeSet<String>,
    next: u64,
}

fn call(c: &mut Client, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<(u16, String)> {
    c.call(method, target, headers, body).ok().map(|r| (r.status, r.body))
}

/// One load step against one pair; `None` when the server went away.
fn step(c: &mut Client, rng: &mut StdRng, (work, dead): &(String, String), l: &Mutex<Ledger>) -> Option<()> {
    match rng.gen_range(0..10) {
        0..=3 => {
            let text = {
                let mut l = l.lock().unwrap();
                l.next += 1;
                format!("{work}-m{}", l.next)
            };
            let target = format!("/{ACCOUNT}/{work}/messages");
            let Some((201, body)) = call(c, "POST", &target, &[], &message_xml(&text)) else {
                l.lock().unwrap().maybe.insert(text);
                return None;
            };
            let id = all_between(&body, "MessageId").remove(0);
            l.lock().unwrap().acked.insert(id, text);
        }
        4..=7 => {
            let target = format!("/{ACCOUNT}/{work}/messages?numofmessages=8&visibilitytimeout=1");
            let (status, body) = call(c, "GET", &target, &[], b"")?;
            assert_eq!(status, 200, "{body}");
            let mut l = l.lock().unwrap();
            for id in all_between(&body, "MessageId") {
                *l.delivered.entry(id).or_default() += 1;
            }
        }
        _ => {
            let target = format!("/{ACCOUNT}/{dead}/messages?numofmessages=4&visibilitytimeout=5");
            let (status, body) = call(c, "GET", &target, &[], b"")?;
            assert_eq!(status, 200, "{body}");
            let ids = all_between(&body, "MessageId");
            let receipts = all_between(&body, "PopReceipt");
            let texts = all_between(&body, "MessageText");
            let counts = all_between(&body, "DequeueCount");
            for (((id, receipt), text), count) in ids.iter().zip(&receipts).zip(&texts).zip(&counts) {
                // Receipts are URL-safe base64: no escaping needed.
                let target = format!("/{ACCOUNT}/{dead}/messages/{id}?popreceipt={receipt}");
                l.lock().unwrap().maybe_consumed.insert(id.clone());
                let (status, body) = call(c, "DELETE", &target, &[], b"")?;
                assert_eq!(status, 204, "{body}");
                l.lock()
                    .unwrap()
                    .consumed
                    .insert(id.clone(), (text.clone(), count.clone()));
            }
        }
    }
    Some(())
}

/// The queue's approximate message count (Get Queue Metadata).
fn count(c: &mut Client, queue: &str) -> u64 {
    let r = c
        .call("GET", &format!("/{ACCOUNT}/{queue}?comp=metadata"), &[], b"")
        .unwrap();
    r.header("x-ms-approximate-messages-count")
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn start(dir: &std::path::Path, port: u16) -> std::process::Child {
    let cmd = proc::command(
        &hematite_tests::crash::default_bin(),
        port,
        dir,
        &[
            "--shards",
            "2",
            "--io-memory-kib",
            "512",
            "--segment-mib",
            "1",
            "--dead-letter-lease-secs",
            "1",
        ],
    );
    proc::spawn_ready(cmd).expect("hematite starts")
}

#[test]
fn dead_letter_moves_lose_nothing_across_kill9() {
    let seed: u64 = std::env::var("CRASHLOOP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let cycles: usize = std::env::var("DLQ_KILL_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let pairs = pairs();
    let mut child = start(dir.path(), port);
    let mut c = Client::new(port);
    for (work, dead) in &pairs {
        assert_eq!(
            call(&mut c, "PUT", &format!("/{ACCOUNT}/{dead}"), &[], b"").unwrap().0,
            201
        );
        let meta = [
            ("x-ms-meta-hematite_max_dequeue_count", "1"),
            ("x-ms-meta-hematite_dead_letter_queue", dead.as_str()),
        ];
        assert_eq!(
            call(&mut c, "PUT", &format!("/{ACCOUNT}/{work}"), &meta, b"")
                .unwrap()
                .0,
            201
        );
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let load = {
            let (stop, ledger, pairs) = (stop.clone(), ledger.clone(), pairs.clone());
            let mut rng = StdRng::seed_from_u64(seed ^ cycle as u64);
            std::thread::spawn(move || {
                let mut c = Client::new(port);
                while !stop.load(Ordering::Relaxed) {
                    let pair = &pairs[rng.gen_range(0..pairs.len())];
                    if step(&mut c, &mut rng, pair, &ledger).is_none() {
                        break;
                    }
                }
            })
        };
        // Long enough for leases (1 s) to run out and moves to happen.
        std::thread::sleep(Duration::from_millis(rng.gen_range(300..2_500)));
        proc::kill9(&mut child);
        stop.store(true, Ordering::Relaxed);
        load.join().unwrap();
        child = start(dir.path(), port);
    }
    // Settle: Gets on the work queues set aside whatever is left once its
    // lease runs out; the movers carry it over.
    let mut c = Client::new(port);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut left = 0;
        for (work, _) in &pairs {
            let target = format!("/{ACCOUNT}/{work}/messages?numofmessages=32&visibilitytimeout=1");
            let (_, body) = call(&mut c, "GET", &target, &[], b"").unwrap();
            for id in all_between(&body, "MessageId") {
                *ledger.lock().unwrap().delivered.entry(id).or_default() += 1;
            }
            left += count(&mut c, work);
        }
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: {left} messages never left their work queues"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Everything in the dead-letter queues now, including copies a killed
    // consumer left invisible for a few seconds.
    let mut found: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (_, dead) in &pairs {
        let mut taken = 0;
        loop {
            let target = format!("/{ACCOUNT}/{dead}/messages?numofmessages=32&visibilitytimeout=600");
            let (_, body) = call(&mut c, "GET", &target, &[], b"").unwrap();
            let ids = all_between(&body, "MessageId");
            if ids.is_empty() {
                if count(&mut c, dead) == taken {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "seed {seed}: copies in {dead} never became visible"
                );
                std::thread::sleep(Duration::from_millis(300));
                continue;
            }
            taken += ids.len() as u64;
            let texts = all_between(&body, "MessageText");
            let counts = all_between(&body, "DequeueCount");
            for ((id, text), count) in ids.into_iter().zip(texts).zip(counts) {
                found.entry(id).or_default().push((text, count));
            }
        }
    }
    assert!(proc::stop(&mut child).success());

    let l = ledger.lock().unwrap();
    let mut bad = Vec::new();
    for (id, n) in &l.delivered {
        if *n > 1 {
            bad.push(format!(
                "{id} was delivered {n} times from its work queue (max dequeue count 1)"
            ));
        }
    }
    let mut duplicates = 0;
    for (id, text) in &l.acked {
        let consumed = l.consumed.get(id);
        let copies = found.get(id).map_or(0, Vec::len);
        if consumed.is_none() && copies == 0 && !l.maybe_consumed.contains(id) {
            bad.push(format!("acknowledged message {id} ({text}) is lost"));
        }
        if copies > 1 {
            bad.push(format!("{id} has {copies} copies in its dead-letter queue at once"));
        }
        if consumed.is_some() && copies > 0 {
            duplicates += 1; // the documented duplicate: consumed, then moved again
        }
        for (t, count) in consumed.into_iter().chain(found.get(id).into_iter().flatten()) {
            if t != text || count.parse::<u64>().ok() < Some(1) {
                bad.push(format!("{id}: copy says ({t}, count {count}), original ({text})"));
            }
        }
    }
    for id in found.keys().chain(l.consumed.keys()) {
        if !l.acked.contains_key(id) {
            let text = found.get(id).or(None).and_then(|v| v.first()).map(|(t, _)| t.clone());
            let text = text.or_else(|| l.consumed.get(id).map(|(t, _)| t.clone())).unwrap();
            if !l.maybe.contains(&text) {
                bad.push(format!(
                    "{id} ({text}) appeared in a dead-letter queue but was never put"
                ));
            }
        }
    }
    let moved = found.len() + l.consumed.len();
    println!(
        "seed {seed}: {cycles} kills, {} acknowledged puts, {moved} dead letters seen, {duplicates} documented duplicates",
        l.acked.len()
    );
    assert!(moved > 0, "seed {seed}: no message was moved; the test proved nothing");
    assert!(bad.is_empty(), "seed {seed}: {bad:#?}");
}
