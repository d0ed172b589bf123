//! Whole requests through the server's handler: framing, addressing,
//! routing, authentication (with a valid signature the target computes, so
//! fuzzed requests reach the operations), and execution against a shard on
//! the simulated disk. Every answer must be well-formed: a known status
//! other than 500, a Content-Length that matches, an error code on errors,
//! and XML that parses. State carries over between inputs (queues, message
//! ids and pop receipts seen in answers), so later inputs can address what
//! earlier ones created.
#![no_main]

#[path = "../../src/client.rs"]
#[allow(dead_code)]
mod client;

use engine::disk::sim::SimDisk;
use engine::shard::ShardConfig;
use engine::{ManualClock, Shard};
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::{LocalExecutor, LocalExecutorBuilder, Placement};
use libfuzzer_sys::fuzz_target;
use server::handler::Ctx;
use server::http::Reader;
use server::router::{Router, ServiceStore};
use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Inputs served by one shard before it is replaced by a fresh one, so a
/// long run's simulated disk stays small.
const INPUTS_PER_SHARD: u32 = 2000;
const PORT: u16 = 10001;

struct World {
    ctx: Rc<Ctx<SimDisk>>,
    clock: Rc<ManualClock>,
    /// (queue, message id, pop receipt) seen in answers.
    seen: Vec<(String, String, String)>,
    inputs: u32,
    _service_dir: tempfile::TempDir,
}

thread_local! {
    static EXECUTOR: LocalExecutor = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(512 * 1024)
        .make()
        .expect("a glommio executor (io_uring and 512 KiB of memlock)");
    static WORLD: RefCell<Option<World>> = const { RefCell::new(None) };
    /// Answers by status, printed every 20,000 requests when
    /// `HANDLER_FUZZ_STATS` is set: shows how deep inputs get.
    static STATS: RefCell<std::collections::BTreeMap<(u16, String), u64>> = RefCell::new(Default::default());
}

fn count(status: u16, op: &str) {
    if std::env::var_os("HANDLER_FUZZ_STATS").is_none() {
        return;
    }
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        *s.entry((status, op.to_string())).or_default() += 1;
        if s.values().sum::<u64>() % 20_000 == 0 {
            eprintln!("handler answers by (status, method): {s:?}");
        }
    });
}

async fn new_world() -> World {
    let clock = Rc::new(ManualClock::new(1_800_000_000_000));
    let mut cfg = ShardConfig::new(0);
    cfg.segment_bytes = engine::limits::MIN_SEGMENT_BYTES;
    cfg.body_cache_bytes = 64 * 1024;
    let shard = Rc::new(
        Shard::open(SimDisk::new(), cfg, clock.clone())
            .await
            .expect("a shard opens on an empty simulated disk"),
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let service = Rc::new(ServiceStore::open(dir.path().to_path_buf(), true).expect("service store"));
    let router = Router::join(None, shard, service, 0, 1).await;
    let accounts = server::config::accounts(&[]).expect("the development account");
    let ctx = Ctx {
        router,
        accounts: Rc::new(accounts.into_iter().map(|a| (a.name.clone(), a)).collect()),
        limits: Default::default(),
        addressing: Default::default(),
        security: Default::default(),
        tls: None,
        request_log: false,
    };
    World {
        ctx: Rc::new(ctx),
        clock,
        seen: Vec::new(),
        inputs: 0,
        _service_dir: dir,
    }
}

/// Reads choices from the fuzzer's bytes; zeros once they run out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn pick<'b, T>(&mut self, items: &'b [T]) -> &'b T {
        &items[self.byte() as usize % items.len()]
    }
    fn chance(&mut self, in_256: u8) -> bool {
        self.byte() < in_256
    }
    /// Up to `max` raw bytes, as (lossy) text.
    fn text(&mut self, max: usize) -> String {
        let n = (self.byte() as usize).min(max).min(self.0.len());
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        String::from_utf8_lossy(s).into_owned()
    }
    fn number(&mut self) -> String {
        let n = i64::from(self.byte() as i8) * i64::from(self.byte());
        self.pick(&[n.to_string(), "0".into(), "-1".into(), "32".into(), "604800".into(), "99999999999999999999".into(), "x".into()])
            .clone()
    }
}

fn pct(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A request from the input: (method, target, headers, body, auth mode).
fn generate(inp: &mut Input, seen: &[(String, String, String)]) -> (String, String, Vec<(String, String)>, Vec<u8>, u8) {
    let method = inp
        .pick(&["GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS", "MERGE", "PATCH"])
        .to_string();
    let known = seen.get(inp.byte() as usize % seen.len().max(1)).cloned();
    let queue = match inp.byte() % 4 {
        0 => "fuzzq".to_string(),
        1 => known.as_ref().map(|k| k.0.clone()).unwrap_or_else(|| "q2".into()),
        2 => "q2".into(),
        _ => inp.text(70),
    };
    let id = match &known {
        Some(k) if inp.chance(200) => k.1.clone(),
        _ => inp.text(40),
    };
    let path = match inp.byte() % 8 {
        0 => "/devstoreaccount1/".to_string(),
        1 | 2 => format!("/devstoreaccount1/{}", pct(&queue)),
        3 | 4 => format!("/devstoreaccount1/{}/messages", pct(&queue)),
        5 | 6 => format!("/devstoreaccount1/{}/messages/{}", pct(&queue), pct(&id)),
        _ => format!("/{}", inp.text(40)),
    };
    let mut query: Vec<(String, String)> = Vec::new();
    for _ in 0..inp.byte() % 5 {
        let (n, v) = match inp.byte() % 14 {
            0 => ("comp", inp.pick(&["list", "metadata", "acl", "properties", "stats", "x"]).to_string()),
            1 => ("restype", "service".to_string()),
            2 => ("peekonly", inp.pick(&["true", "false", "TRUE"]).to_string()),
            3 => ("numofmessages", inp.number()),
            4 => ("visibilitytimeout", inp.number()),
            5 => ("messagettl", inp.number()),
            6 => (
                "popreceipt",
                match &known {
                    Some(k) if inp.chance(200) => k.2.clone(),
                    _ => inp.text(30),
                },
            ),
            7 => ("prefix", inp.text(10)),
            8 => ("marker", inp.text(30)),
            9 => ("maxresults", inp.number()),
            10 => ("include", inp.pick(&["metadata", "x"]).to_string()),
            11 => ("timeout", inp.number()),
            12 => ("x-fuzz", inp.text(10)),
            _ => ("", inp.text(10)),
        };
        query.push((if n.is_empty() { inp.text(8) } else { n.to_string() }, v));
    }
    let mut target = path;
    if !query.is_empty() {
        let q: Vec<String> = query
            .iter()
            .map(|(n, v)| if inp.chance(230) { format!("{}={}", pct(n), pct(v)) } else { format!("{n}={v}") })
            .collect();
        target = format!("{target}?{}", q.join("&"));
    }
    let mut headers = Vec::new();
    for _ in 0..inp.byte() % 4 {
        let h = match inp.byte() % 8 {
            0 => (format!("x-ms-meta-{}", inp.text(12)), inp.text(20)),
            1 => ("Content-MD5".to_string(), inp.text(24)),
            2 => ("If-Match".to_string(), "*".to_string()),
            3 => ("Origin".to_string(), inp.pick(&["http://a.example", "*"]).to_string()),
            4 => ("Access-Control-Request-Method".to_string(), inp.pick(&["GET", "PUT"]).to_string()),
            5 => ("x-ms-client-request-id".to_string(), inp.text(40)),
            6 => ("x-ms-version".to_string(), inp.pick(&["2026-10-06", "2009-09-19", "bad"]).to_string()),
            _ => ("Content-Type".to_string(), "application/xml".to_string()),
        };
        if h.0.bytes().chain(h.1.bytes()).all(|b| b >= 0x20 && b != 0x7f) {
            headers.push(h);
        }
    }
    let body = match inp.byte() % 6 {
        0 => Vec::new(),
        1 | 2 => {
            let text = if inp.chance(20) { "x".repeat(64 * 1024 + inp.byte() as usize - 128) } else { inp.text(200) };
            client::message_xml(&text)
        }
        3 => format!(
            "<SignedIdentifiers><SignedIdentifier><Id>{}</Id><AccessPolicy><Start>{}</Start><Expiry>2099-01-01T00:00:00Z</Expiry><Permission>{}</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>",
            inp.text(70), inp.text(30), inp.text(8)
        )
        .into_bytes(),
        4 => format!(
            "<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>{}</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders>{}</AllowedHeaders><ExposedHeaders>*</ExposedHeaders><MaxAgeInSeconds>{}</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>",
            inp.text(20), inp.text(20), inp.number()
        )
        .into_bytes(),
        _ => inp.0.to_vec(),
    };
    let auth = inp.byte() % 8;
    (method, target, headers, body, auth)
}

/// The request's bytes, signed per `auth`: 0–4 Shared Key, 5 service SAS,
/// 6 account SAS, 7 no credentials.
fn sign(method: &str, target: &str, headers: &[(String, String)], body: &[u8], auth: u8, inp: &mut Input) -> Option<Vec<u8>> {
    let key = client_key();
    let extra: Vec<(&str, &str)> = headers.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    match auth {
        0..=4 => client::signed_request(PORT, &key, method, target, &extra, body).ok(),
        _ => {
            let mut t = target.to_string();
            let sep = if t.contains('?') { '&' } else { '?' };
            if auth == 5 || auth == 6 {
                let sp = inp.pick(&["raup", "r", "a", "p", "u", "rr", "rwdlacup", "x"]).to_string();
                let se = "2099-01-01T00:00:00Z";
                let (sts, extra_q) = if auth == 5 {
                    let queue = target.split('/').nth(2).unwrap_or("").split('?').next().unwrap_or("").to_string();
                    (format!("{sp}\n\n{se}\n/queue/devstoreaccount1/{queue}\n\n\n\n2026-10-06"), String::new())
                } else {
                    (format!("devstoreaccount1\n{sp}\nq\nsco\n\n{se}\n\n\n2026-10-06\n\n"), "&ss=q&srt=sco".to_string())
                };
                let sig = hematite_client::Credentials::from_key_bytes(client::ACCOUNT, key.clone()).sign(&sts);
                t = format!("{t}{sep}sv=2026-10-06&sp={sp}&se={}&sig={}{extra_q}", pct(se), pct(&sig));
            }
            let mut out = format!("{method} {t} HTTP/1.1\r\nHost: 127.0.0.1:{PORT}\r\n");
            for (n, v) in headers {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            let mut bytes = out.into_bytes();
            bytes.extend_from_slice(body);
            Some(bytes)
        }
    }
}

fn client_key() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(client::KEY).expect("the development key")
}

struct Bytes(Vec<u8>, usize);

impl AsyncRead for Bytes {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let n = buf.len().min(self.0.len() - self.1);
        let p = self.1;
        buf[..n].copy_from_slice(&self.0[p..p + n]);
        self.1 += n;
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for Bytes {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The checks every answer must pass.
fn check_answer(method: &str, wire: &[u8]) {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut hs);
    let head = match resp.parse(wire) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("unparseable response head: {other:?}"),
    };
    let status = resp.code.expect("a status");
    assert_ne!(server::http::reason(status), "Unknown", "status {status}");
    assert_ne!(status, 500, "an internal error on a fault-free disk: {}", String::from_utf8_lossy(wire));
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let len: usize = header("content-length").and_then(|v| v.parse().ok()).expect("Content-Length");
    let body = &wire[head..];
    if method != "HEAD" {
        assert_eq!(body.len(), len, "Content-Length matches the body");
    }
    assert!(header("x-ms-request-id").is_some());
    if status >= 400 {
        assert!(header("x-ms-error-code").is_some_and(|c| !c.is_empty()), "errors carry a code");
    }
    if !body.is_empty() {
        let text = std::str::from_utf8(body).expect("bodies are UTF-8");
        assert!(
            text.chars()
                .all(|c| (c >= ' ' || matches!(c, '\t' | '\n' | '\r')) && !matches!(c, '\u{FFFE}' | '\u{FFFF}')),
            "XML 1.0 forbids control characters: {text}"
        );
        let mut r = quick_xml::Reader::from_str(text);
        loop {
            match r.read_event() {
                Ok(quick_xml::events::Event::Eof) => break,
                Ok(_) => {}
                Err(e) => panic!("ill-formed XML ({e}): {text}"),
            }
        }
    }
}

/// Message ids and receipts an answer shows, to address them later.
fn remember(seen: &mut Vec<(String, String, String)>, target: &str, body: &str) {
    let queue = target.split('/').nth(2).unwrap_or("").to_string();
    let ids = client::all_between(body, "MessageId");
    let receipts = client::all_between(body, "PopReceipt");
    for (id, r) in ids.into_iter().zip(receipts) {
        if seen.len() >= 64 {
            seen.remove(0);
        }
        seen.push((queue.clone(), id, r));
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    EXECUTOR.with(|ex| {
        ex.run(async {
            let world = WORLD.with(|w| w.borrow_mut().take());
            let mut world = match world {
                Some(w) if w.inputs < INPUTS_PER_SHARD => w,
                _ => new_world().await,
            };
            world.inputs += 1;
            world.clock.advance_ms(u64::from(inp.byte()) * 1000);
            // One connection's requests: a target it repeats is parsed from
            // its cache (which, in this debug build, asserts that the cached
            // parse equals a fresh one).
            let mut targets = server::addressing::TargetCache::default();
            for _ in 0..1 + inp.byte() % 3 {
                let (method, target, headers, body, auth) = generate(&mut inp, &world.seen);
                let Some(bytes) = sign(&method, &target, &headers, &body, auth, &mut inp) else {
                    continue;
                };
                // Sent up to three times, as a client repeats a URL: the
                // second sight parses into the cache, the third answers
                // from it.
                for _ in 0..1 + inp.byte() % 3 {
                    let mut reader = Reader::new(Bytes(bytes.clone(), 0));
                    let Ok(Some(req)) = reader.next_request().await else { break };
                    let peer = "127.0.0.1".parse().expect("an address");
                    let resp = server::handler::handle_parsed(&world.ctx, &req, peer, &mut targets).await;
                    let mut wire = Vec::new();
                    resp.encode(&mut wire, req.method == "HEAD", false);
                    check_answer(&req.method, &wire);
                    count(resp.status, &req.method);
                    remember(&mut world.seen, &target, &String::from_utf8_lossy(&resp.body));
                }
            }
            WORLD.with(|w| *w.borrow_mut() = Some(world));
        })
    });
});
