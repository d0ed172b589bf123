//! hematite-bench: a load generator for anything that speaks the Azure Queue
//! Storage REST API (Hematite, Azurite, Azure). HTTP/1.1 keep-alive
//! connections on one glommio executor per client thread, Shared Key or SAS,
//! closed loop (as fast as answers come) or open loop (a fixed request rate,
//! latency measured from each request's scheduled time, so a slow server
//! cannot hide its queueing: no coordinated omission).
//!
//! Prints a table per operation and queue (ops/s, p50/p90/p99/p99.9/max from
//! HdrHistogram), errors by Azure error code, a progress line every second,
//! and one JSON line for scripts.

use clap::{Parser, ValueEnum};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;
use hematite_client::{parse_response, Credentials, Request, DEV_KEY};
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The service version the bench asks for.
const API_VERSION: &str = "2025-11-05";
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// Put Message.
    Put,
    /// Put Message Batch of --batch messages (a Hematite extension,
    /// docs/EXTENSIONS.md); messages/s is ops/s × --batch.
    PutBatch,
    /// Get Messages (one at a time), then Delete Message.
    Drain,
    /// Put, then Get, then Delete: one cycle.
    Cycle,
    /// Peek Messages (--batch at a time).
    Peek,
    /// Lease renewal: each connection holds one message and keeps updating its visibility.
    Update,
    /// Get Queue Metadata.
    Meta,
    /// A weighted mix (--mix).
    Mix,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "hematite-bench",
    about = "Load generator for the Azure Queue Storage REST API (Hematite, Azurite, Azure)"
)]
struct Args {
    /// Queue service endpoint, including the account for path-style endpoints.
    #[arg(long, default_value = "http://127.0.0.1:10001/devstoreaccount1")]
    endpoint: String,
    /// Account name (signs Shared Key requests).
    #[arg(long, default_value = "devstoreaccount1")]
    account: String,
    /// Base64 account key for Shared Key signing.
    #[arg(long, default_value = DEV_KEY)]
    key: String,
    /// A SAS token (the query string, without '?') to use instead of Shared
    /// Key; `account` mints an account SAS from --account and --key (no
    /// signing per request, like a client holding a SAS URL).
    #[arg(long)]
    sas: Option<String>,
    /// What each request does.
    #[arg(long, value_enum, default_value_t = Workload::Put)]
    workload: Workload,
    /// Weights for --workload mix, e.g. put=4,drain=3,peek=2,update=1,meta=1.
    #[arg(long, default_value = "put=4,drain=3,peek=1,meta=1")]
    mix: String,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    message_size: usize,
    /// Messages per Get/Peek (numofmessages).
    #[arg(long, default_value_t = 1)]
    batch: u32,
    /// Number of queues; connection i uses queue i % queues.
    #[arg(long, default_value_t = 1)]
    queues: usize,
    /// Name prefix of the queues (they are created, and deleted at the end).
    #[arg(long, default_value = "hbench")]
    queue_prefix: String,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Open loop: total requests per second across all connections (0: closed loop).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Messages put into each queue before the run.
    #[arg(long, default_value_t = 0)]
    prefill: usize,
    /// drain: after each delete, put a replacement (not measured), so the
    /// queue keeps its depth (e.g. "get + delete on a queue of 10,000").
    #[arg(long)]
    refill: bool,
    /// Client threads (one glommio executor each).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Pin client thread t to CPU (this + t).
    #[arg(long)]
    cpu: Option<usize>,
    /// A label copied into the JSON line (e.g. the server's name).
    #[arg(long, default_value = "")]
    label: String,
    /// Keep the queues at the end.
    #[arg(long)]
    keep_queues: bool,
    /// Print only the JSON line.
    #[arg(long)]
    quiet: bool,
    /// Print each measured request that took at least this many
    /// milliseconds to stderr at the end of the run (0: none): when it was
    /// due (Unix time), how late it went out, and how long its answer took
    /// after that. Tells a slow server (sent on time, answered late) from a
    /// client or connection that was behind (sent late), and lines a tail
    /// up with the server's own log.
    #[arg(long, default_value_t = 0)]
    slow_log_ms: u64,
}

/// The wall-clock time of an `Instant`, as Unix seconds, for the slow log
/// and the result's measured window. One anchor for the whole process, taken
/// in `main` before any run, so every thread's times agree with each other.
fn unix_seconds(at: Instant) -> f64 {
    static ANCHOR: std::sync::OnceLock<(Instant, std::time::SystemTime)> = std::sync::OnceLock::new();
    let (i, w) = ANCHOR.get_or_init(|| (Instant::now(), std::time::SystemTime::now()));
    let since = w
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    if at >= *i {
        since + (at - *i).as_secs_f64()
    } else {
        since - (*i - at).as_secs_f64()
    }
}

struct Endpoint {
    host: String,
    port: u16,
    base_path: String,
}

fn parse_endpoint(url: &str) -> Result<Endpoint, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// endpoints are supported")?;
    let (hostport, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, String::new()));
    let (host, port) = hostport
        .rsplit_once(':')
        .map(|(h, p)| (h.to_string(), p.parse().unwrap_or(80)))
        .unwrap_or((hostport.to_string(), 80));
    Ok(Endpoint {
        host,
        port,
        base_path: path.trim_end_matches('/').to_string(),
    })
}

/// One keep-alive connection that signs its requests.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    args: Rc<Args>,
    key: Rc<Credentials>,
    host_header: String,
    base_path: String,
}

struct Resp {
    status: u16,
    code: String,
    body: String,
    receipt: Option<String>,
}

impl Conn {
    async fn open(args: Rc<Args>, key: Rc<Credentials>) -> std::io::Result<Conn> {
        let ep = parse_endpoint(&args.endpoint).map_err(std::io::Error::other)?;
        let stream = TcpStream::connect(format!("{}:{}", ep.host, ep.port)).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
            host_header: format!("{}:{}", ep.host, ep.port),
            base_path: ep.base_path,
            args,
            key,
        })
    }

    async fn call(&mut self, method: &str, path_and_query: &str, body: &[u8]) -> std::io::Result<Resp> {
        let mut target = format!("{}{}", self.base_path, path_and_query);
        let creds = match &self.args.sas {
            Some(sas) => {
                target.push(if target.contains('?') { '&' } else { '?' });
                target.push_str(sas);
                None
            }
            None => Some(&*self.key),
        };
        let xml: &[(&str, &str)] = if body.is_empty() {
            &[]
        } else {
            &[("Content-Type", "application/xml")]
        };
        let mut req = Request::new(method, &self.host_header, &target).headers(xml).body(body);
        req.version = API_VERSION;
        let bytes = req.encode(creds)?;
        self.stream.write_all(&bytes).await?;
        loop {
            if let Some((r, used)) = parse_response(&self.buf, method)? {
                self.buf.drain(..used);
                return Ok(Resp {
                    status: r.status,
                    code: r.header("x-ms-error-code").unwrap_or("").to_string(),
                    receipt: r.header("x-ms-popreceipt").map(str::to_string),
                    body: r.body_text().into_owned(),
                });
            }
            let mut chunk = [0u8; READ_CHUNK];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn between<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

fn enc(s: &str) -> String {
    s.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D")
}

/// Measurements of one client thread.
#[derive(Default)]
struct Stats {
    hist: BTreeMap<(String, String), Histogram<u64>>,
    errors: BTreeMap<String, u64>,
    cycles: u64,
    done: u64,
    /// `--slow-log-ms` lines, printed after the run: writing each as it
    /// came would cost the client a system call per slow request, just
    /// when it is behind.
    slow: Vec<String>,
}

impl Stats {
    fn record(&mut self, op: &str, queue: &str, micros: u64) {
        self.done += 1;
        self.hist
            .entry((op.to_string(), queue.to_string()))
            .or_insert_with(|| Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram"))
            .record(micros.clamp(1, 60_000_000))
            .expect("in range");
    }
    fn error(&mut self, code: &str) {
        *self
            .errors
            .entry(if code.is_empty() {
                "transport".into()
            } else {
                code.to_string()
            })
            .or_default() += 1;
    }
}

#[derive(Clone, Copy)]
enum Op {
    Put,
    PutBatch,
    Drain,
    Peek,
    Update,
    Meta,
}

fn parse_mix(spec: &str) -> Vec<(Op, u32)> {
    spec.split(',')
        .filter_map(|p| p.split_once('='))
        .filter_map(|(k, w)| {
            let op = match k.trim() {
                "put" => Op::Put,
                "drain" | "get" => Op::Drain,
                "peek" => Op::Peek,
                "update" => Op::Update,
                "meta" => Op::Meta,
                _ => return None,
            };
            w.trim().parse().ok().map(|w| (op, w))
        })
        .collect()
}

fn queue_name(args: &Args, i: usize) -> String {
    format!("{}-{i}", args.queue_prefix)
}

/// One connection's loop until `end`. Records only after `measure_from`.
async fn connection(
    args: Rc<Args>,
    key: Rc<Credentials>,
    idx: usize,
    stats: Rc<RefCell<Stats>>,
    measure_from: Instant,
    end: Instant,
) {
    let queue = queue_name(&args, idx % args.queues);
    let qpath = format!("/{queue}");
    let mut conn = match Conn::open(args.clone(), key.clone()).await {
        Ok(c) => c,
        Err(_) => {
            stats.borrow_mut().error("connect");
            return;
        }
    };
    let body = format!(
        "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
        "m".repeat(args.message_size)
    )
    .into_bytes();
    let batch_body = {
        let one = String::from_utf8_lossy(&body);
        format!(
            "<QueueMessageBatch>{}</QueueMessageBatch>",
            one.repeat(args.batch.max(1) as usize)
        )
        .into_bytes()
    };
    let mix = parse_mix(&args.mix);
    let total_weight: u32 = mix.iter().map(|(_, w)| w).sum::<u32>().max(1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(idx as u64);
    let interval = (args.rate > 0).then(|| Duration::from_secs_f64(args.connections as f64 / args.rate as f64));
    let mut next_at = Instant::now() + interval.map(|i| i.mul_f64(rng.gen::<f64>())).unwrap_or_default();
    let mut lease: Option<(String, String)> = None;
    while Instant::now() < end {
        // Open loop: wait for this request's slot, and time from the slot.
        let scheduled = if let Some(iv) = interval {
            if let Some(wait) = next_at.checked_duration_since(Instant::now()) {
                glommio::timer::sleep(wait).await;
            }
            let s = next_at;
            next_at += iv;
            s
        } else {
            Instant::now()
        };
        let op = match args.workload {
            Workload::Put => Op::Put,
            Workload::PutBatch => Op::PutBatch,
            Workload::Drain | Workload::Cycle => Op::Drain,
            Workload::Peek => Op::Peek,
            Workload::Update => Op::Update,
            Workload::Meta => Op::Meta,
            Workload::Mix => {
                let mut r = rng.gen_range(0..total_weight);
                let mut pick = Op::Put;
                for (op, w) in &mix {
                    if r < *w {
                        pick = *op;
                        break;
                    }
                    r -= w;
                }
                pick
            }
        };
        let measuring = scheduled >= measure_from;
        let sent = Instant::now();
        let note = |name: &str, t0: Instant, resp: &std::io::Result<Resp>, ok: u16| {
            let mut s = stats.borrow_mut();
            match resp {
                Ok(r) if r.status == ok => {
                    if measuring {
                        let took = t0.elapsed();
                        s.record(name, &queue, took.as_micros() as u64);
                        if args.slow_log_ms > 0 && took >= Duration::from_millis(args.slow_log_ms) {
                            // Only a loop's first request is timed from its
                            // slot; a cycle's get and deletes are timed from
                            // their own send, so for them `due` is that send.
                            let send = if t0 == scheduled { sent } else { t0 };
                            let line = format!(
                                "slow {name} conn={idx} due={:.6} sent_late_us={} answered_after_us={}",
                                unix_seconds(t0),
                                send.saturating_duration_since(t0).as_micros(),
                                send.elapsed().as_micros()
                            );
                            s.slow.push(line);
                        }
                    }
                }
                Ok(r) => s.error(&r.code),
                Err(_) => s.error("transport"),
            }
        };
        if args.workload == Workload::Cycle {
            let r = conn.call("POST", &format!("{qpath}/messages"), &body).await;
            note("put", scheduled, &r, 201);
            if r.is_err() {
                return;
            }
        }
        match op {
            Op::Put => {
                let r = conn.call("POST", &format!("{qpath}/messages"), &body).await;
                note("put", scheduled, &r, 201);
                if r.is_err() {
                    return;
                }
            }
            Op::PutBatch => {
                let r = conn
                    .call("POST", &format!("{qpath}/messages?comp=batch"), &batch_body)
                    .await;
                note("putbatch", scheduled, &r, 201);
                if r.is_err() {
                    return;
                }
            }
            Op::Drain => {
                let t = if args.workload == Workload::Cycle {
                    Instant::now()
                } else {
                    scheduled
                };
                let r = conn
                    .call(
                        "GET",
                        &format!("{qpath}/messages?numofmessages={}&visibilitytimeout=30", args.batch),
                        b"",
                    )
                    .await;
                note("get", t, &r, 200);
                let Ok(r) = r else { return };
                let ids: Vec<String> = between(&r.body, "MessageId").into_iter().map(str::to_string).collect();
                let receipts: Vec<String> = between(&r.body, "PopReceipt").into_iter().map(str::to_string).collect();
                for (id, receipt) in ids.iter().zip(receipts.iter()) {
                    let t = Instant::now();
                    let d = conn
                        .call(
                            "DELETE",
                            &format!("{qpath}/messages/{id}?popreceipt={}", enc(receipt)),
                            b"",
                        )
                        .await;
                    note("delete", t, &d, 204);
                    if d.is_err() {
                        return;
                    }
                    if args.refill && args.workload == Workload::Drain {
                        let refill = conn
                            .call("POST", &format!("{qpath}/messages?messagettl=-1"), &body)
                            .await;
                        if refill.is_err() {
                            return;
                        }
                    }
                }
                if args.workload == Workload::Cycle && !ids.is_empty() && measuring {
                    stats.borrow_mut().cycles += 1;
                }
            }
            Op::Peek => {
                let r = conn
                    .call(
                        "GET",
                        &format!("{qpath}/messages?peekonly=true&numofmessages={}", args.batch),
                        b"",
                    )
                    .await;
                note("peek", scheduled, &r, 200);
                if r.is_err() {
                    return;
                }
            }
            Op::Meta => {
                let r = conn.call("GET", &format!("{qpath}?comp=metadata"), b"").await;
                note("meta", scheduled, &r, 200);
                if r.is_err() {
                    return;
                }
            }
            Op::Update => {
                if lease.is_none() {
                    let _ = conn.call("POST", &format!("{qpath}/messages"), &body).await;
                    if let Ok(r) = conn
                        .call("GET", &format!("{qpath}/messages?visibilitytimeout=300"), b"")
                        .await
                    {
                        let id = between(&r.body, "MessageId").first().map(|s| s.to_string());
                        let receipt = between(&r.body, "PopReceipt").first().map(|s| s.to_string());
                        lease = id.zip(receipt);
                    }
                }
                let Some((id, receipt)) = lease.clone() else { continue };
                let r = conn
                    .call(
                        "PUT",
                        &format!(
                            "{qpath}/messages/{id}?popreceipt={}&visibilitytimeout=300",
                            enc(&receipt)
                        ),
                        b"",
                    )
                    .await;
                note("update", scheduled, &r, 204);
                match r {
                    Ok(r) if r.status == 204 => lease = r.receipt.map(|rc| (id, rc)),
                    Ok(_) => lease = None,
                    Err(_) => return,
                }
            }
        }
    }
}

async fn setup(args: Rc<Args>, key: Rc<Credentials>) -> Result<(), String> {
    let mut c = Conn::open(args.clone(), key.clone())
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", args.endpoint))?;
    for q in 0..args.queues {
        let name = queue_name(&args, q);
        let r = c
            .call("PUT", &format!("/{name}"), b"")
            .await
            .map_err(|e| e.to_string())?;
        if ![201, 204, 409].contains(&r.status) {
            return Err(format!("creating {name}: {} {}", r.status, r.code));
        }
        if args.prefill > 0 {
            // Clear, then prefill concurrently (one connection per 8 messages in flight).
            let _ = c.call("DELETE", &format!("/{name}/messages"), b"").await;
            let body = Rc::new(
                format!(
                    "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
                    "p".repeat(args.message_size)
                )
                .into_bytes(),
            );
            let per = args.prefill.div_ceil(32);
            let mut tasks = Vec::new();
            for k in 0..32usize {
                let n = per.min(args.prefill.saturating_sub(k * per));
                let (a, key, body, name) = (args.clone(), key.clone(), body.clone(), name.clone());
                tasks.push(glommio::spawn_local(async move {
                    let mut c = Conn::open(a, key).await.map_err(|e| e.to_string())?;
                    for _ in 0..n {
                        let r = c
                            .call("POST", &format!("/{name}/messages?messagettl=-1"), &body)
                            .await
                            .map_err(|e| e.to_string())?;
                        if r.status != 201 {
                            return Err(format!("prefill: {} {}", r.status, r.code));
                        }
                    }
                    Ok::<(), String>(())
                }));
            }
            for t in tasks {
                t.await?;
            }
        }
    }
    Ok(())
}

async fn teardown(args: Rc<Args>, key: Rc<Credentials>) {
    if let Ok(mut c) = Conn::open(args.clone(), key).await {
        for q in 0..args.queues {
            let _ = c.call("DELETE", &format!("/{}", queue_name(&args, q)), b"").await;
        }
    }
}

fn on_executor<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    cpu: Option<usize>,
    f: impl FnOnce() -> F + Send + 'static,
) -> T {
    let placement = cpu.map(Placement::Fixed).unwrap_or(Placement::Unbound);
    LocalExecutorBuilder::new(placement)
        .io_memory(512 * 1024)
        .spawn(move || async move { f().await })
        .expect("executor")
        .join()
        .expect("join")
}

struct ThreadResult {
    hist: BTreeMap<(String, String), Histogram<u64>>,
    errors: BTreeMap<String, u64>,
    cycles: u64,
}

fn main() {
    let args = Args::parse();
    // The anchor of every Unix time this run prints, taken once.
    let _ = unix_seconds(Instant::now());
    if args.queues == 0 || args.connections == 0 || args.threads == 0 {
        eprintln!("--queues, --connections and --threads must be at least 1");
        std::process::exit(2);
    }
    let key = Credentials::new(&args.account, &args.key).unwrap_or_else(|_| {
        eprintln!("--key is not base64");
        std::process::exit(2)
    });
    let mut args = args;
    if args.sas.as_deref() == Some("account") {
        args.sas = Some(hematite_client::account_sas(
            &key,
            "sco",
            "rwdlacup",
            "2099-01-01T00:00:00Z",
        ));
    }
    let a = args.clone();
    let k = key.clone();
    if let Err(e) = on_executor(args.cpu, move || setup(Rc::new(a), Rc::new(k))) {
        eprintln!("hematite-bench: setup failed: {e}");
        std::process::exit(1);
    }
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let end = measure_from + Duration::from_secs_f64(args.duration);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..args.threads {
        let a = args.clone();
        let k = key.clone();
        let done = done.clone();
        let cpu = args.cpu.map(|c| c + t);
        handles.push(std::thread::spawn(move || {
            on_executor(cpu, move || async move {
                let a = Rc::new(a);
                let k = Rc::new(k);
                let stats = Rc::new(RefCell::new(Stats::default()));
                let mut tasks = Vec::new();
                for i in (t..a.connections).step_by(a.threads) {
                    tasks.push(glommio::spawn_local(connection(
                        a.clone(),
                        k.clone(),
                        i,
                        stats.clone(),
                        measure_from,
                        end,
                    )));
                }
                let s2 = stats.clone();
                let reporter = glommio::spawn_local(async move {
                    while Instant::now() < end {
                        glommio::timer::sleep(Duration::from_millis(250)).await;
                        done.store(s2.borrow().done, std::sync::atomic::Ordering::Relaxed);
                    }
                });
                for task in tasks {
                    task.await;
                }
                reporter.await;
                let s = stats.borrow();
                if !s.slow.is_empty() {
                    use std::io::Write;
                    let mut err = std::io::BufWriter::new(std::io::stderr().lock());
                    for line in &s.slow {
                        let _ = writeln!(err, "{line}");
                    }
                    let _ = err.flush();
                }
                ThreadResult {
                    hist: s.hist.clone(),
                    errors: s.errors.clone(),
                    cycles: s.cycles,
                }
            })
        }));
    }
    if !args.quiet {
        let mut last = 0;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_secs(1));
            let now = done.load(std::sync::atomic::Ordering::Relaxed) * args.threads as u64;
            let phase = if Instant::now() < measure_from {
                "warm-up"
            } else {
                "measuring"
            };
            eprintln!(
                "  {:>5.1}s {phase}: ~{} ops/s",
                start.elapsed().as_secs_f64(),
                now.saturating_sub(last)
            );
            last = now;
        }
    }
    let mut hist: BTreeMap<(String, String), Histogram<u64>> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut cycles = 0;
    for h in handles {
        let r = h.join().expect("client thread");
        for (key, h) in r.hist {
            match hist.get_mut(&key) {
                Some(x) => x.add(&h).expect("same bounds"),
                None => {
                    hist.insert(key, h);
                }
            }
        }
        for (c, n) in r.errors {
            *errors.entry(c).or_default() += n;
        }
        cycles += r.cycles;
    }
    if !args.keep_queues {
        let a = args.clone();
        let k = key.clone();
        on_executor(args.cpu, move || teardown(Rc::new(a), Rc::new(k)));
    }
    let secs = args.duration;
    // The measured window in Unix time, so a slow log or a server log can be
    // placed in the run (the warm-up and the queue deletion are outside it).
    let (window_from, window_to) = (unix_seconds(measure_from), unix_seconds(end));
    // Per operation (all queues) and per operation and queue.
    let mut by_op: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for ((op, _), h) in &hist {
        match by_op.get_mut(op) {
            Some(x) => x.add(h).expect("same bounds"),
            None => {
                by_op.insert(op.clone(), h.clone());
            }
        }
    }
    let mode = if args.rate > 0 {
        format!("open loop at {}/s", args.rate)
    } else {
        "closed loop".into()
    };
    if !args.quiet {
        println!(
            "\n{:?} workload, {} connections, {} queue(s), {mode}, {}s measured after {}s warm-up, {} B messages{}",
            args.workload,
            args.connections,
            args.queues,
            args.duration,
            args.warmup,
            args.message_size,
            if args.prefill > 0 {
                format!(", prefill {}", args.prefill)
            } else {
                String::new()
            }
        );
        println!(
            "{:<8} {:<16} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "op", "queue", "count", "ops/s", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs"
        );
        let row = |op: &str, q: &str, h: &Histogram<u64>| {
            println!(
                "{op:<8} {q:<16} {:>9} {:>10.0} {:>8} {:>8} {:>8} {:>8} {:>8}",
                h.len(),
                h.len() as f64 / secs,
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.9),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max()
            )
        };
        for (op, h) in &by_op {
            row(op, "(all)", h);
            if args.queues > 1 {
                for ((o, q), h) in &hist {
                    if o == op {
                        row("", q, h);
                    }
                }
            }
        }
        if args.workload == Workload::Cycle {
            println!("cycles/s: {:.0}", cycles as f64 / secs);
        }
        if errors.is_empty() {
            println!("errors: none");
        } else {
            println!(
                "errors: {}",
                errors
                    .iter()
                    .map(|(c, n)| format!("{c}={n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    // The JSON line for scripts.
    let ops_json: Vec<String> = by_op
        .iter()
        .map(|(op, h)| {
            format!(
                "\"{op}\":{{\"count\":{},\"ops_per_sec\":{:.1},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{}}}",
                h.len(),
                h.len() as f64 / secs,
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.9),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max()
            )
        })
        .collect();
    let errs: Vec<String> = errors.iter().map(|(c, n)| format!("\"{c}\":{n}")).collect();
    println!(
        "{{\"label\":\"{}\",\"workload\":\"{:?}\",\"connections\":{},\"queues\":{},\"rate\":{},\"message_size\":{},\"prefill\":{},\"seconds\":{},\"cycles_per_sec\":{:.1},\"measured_from_unix\":{:.3},\"measured_to_unix\":{:.3},\"ops\":{{{}}},\"errors\":{{{}}}}}",
        args.label.replace('"', ""),
        args.workload,
        args.connections,
        args.queues,
        args.rate,
        args.message_size,
        args.prefill,
        args.duration,
        cycles as f64 / secs,
        window_from,
        window_to,
        ops_json.join(","),
        errs.join(",")
    );
}
