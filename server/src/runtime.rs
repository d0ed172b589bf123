//! Thread-per-core runtime: one glommio executor per shard, pinned to its
//! CPU, each opening its shard, joining the channel mesh, accepting on the
//! shared address (SO_REUSEPORT), and running maintenance. The main thread
//! waits for readiness, prints one line, and turns SIGTERM/SIGINT into a
//! graceful drain.
//!
//! The shards' disk is chosen once per process ([`Storage`]): glommio
//! `DmaFile`s in the data directory, or memory with `--in-memory`.
//! Everything above the disk (shards, router, operations) is the same code.

use crate::auth::Accounts;
use crate::config::{Config, PreallocFlag, SyncFlag};
use crate::conn::{serve, ConnCount, Reaper};
use crate::handler::Ctx;
use crate::http::LargeBodies;
use crate::limits::{
    DRAIN_LIMIT, HEARTBEAT_INTERVAL, LARGE_BODY_BUDGET_BYTES, LATE_CORE, MAINTENANCE_INTERVAL, SHARD_STALL_LIMIT,
};
use crate::router::{self, Router};
use crate::service::ServiceStore;
use crate::startup;
use engine::disk::dma::{DmaDisk, Preallocation, SyncPath};
use engine::disk::mem::MemDisk;
use engine::disk::Disk;
use engine::shard::ShardConfig;
use engine::wal::RecoveryMode;
use engine::{Shard, SystemClock};
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Exit status when a shard ends on its own after startup: the process
/// stops at once so a supervisor restarts it and recovery runs
/// (docs/decisions/0004-a-dead-shard-stops-the-process.md).
pub const EXIT_SHARD_DIED: i32 = 70;

/// Sent by a shard thread when it ends, however it ends (return, error or
/// panic): dropped with the thread's closure, also while unwinding.
struct ShardExit {
    shard: usize,
    tx: mpsc::Sender<(usize, bool)>,
}

impl Drop for ShardExit {
    fn drop(&mut self) {
        let _ = self.tx.send((self.shard, std::thread::panicking()));
    }
}

/// The log writer's flush handle (main.rs hands it over): dropped before
/// any `_exit`, so the lines queued before a fatal error, that error's own
/// included, reach stderr. Touched only on the way out.
static LOG_FLUSH: std::sync::Mutex<Option<tracing_appender::non_blocking::WorkerGuard>> = std::sync::Mutex::new(None);

/// Keeps the log writer's flush handle for [`exit_now`].
pub fn keep_log_flush(guard: tracing_appender::non_blocking::WorkerGuard) {
    if let Ok(mut g) = LOG_FLUSH.lock() {
        *g = Some(guard);
    }
}

/// Flushes the queued log lines (bounded: the writer gives up after about
/// a second), then `_exit`s without running other threads' destructors
/// (which may be what is stuck).
fn exit_now(status: i32) -> ! {
    // try_lock: a thread that panicked holding it must not block the exit.
    if let Ok(mut g) = LOG_FLUSH.try_lock() {
        drop(g.take());
    }
    // SAFETY: _exit ends the process at once.
    unsafe { libc::_exit(status) }
}

/// Flushes the queued log lines on a normal return from `run`.
pub fn flush_logs() {
    if let Ok(mut g) = LOG_FLUSH.lock() {
        drop(g.take());
    }
}

/// Makes any panic stop the process: log it with its thread, then exit with
/// [`EXIT_SHARD_DIED`]. Unwinding cannot be relied on here: a panic inside
/// glommio's run loop was seen to leave the thread stuck dropping its
/// executor, so a guard dropped at the end of the thread may never run
/// (decision 0004). A panic means an invariant broke; nothing acknowledged
/// depends on this process living on, since it is already durable.
fn install_panic_exit() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed").to_string();
        tracing::error!(thread = %name, "panic: {info}");
        default(info);
        eprintln!("hematite: panic on thread {name}; shard stopped after startup or during it; exiting with status {EXIT_SHARD_DIED} so a supervisor restarts the server and recovery runs");
        exit_now(EXIT_SHARD_DIED)
    }));
}

/// Runs the server until a signal. Ok: drained after SIGTERM/SIGINT. A shard
/// that ends after startup exits the process with [`EXIT_SHARD_DIED`].
pub fn run(cfg: Config) -> Result<(), String> {
    let cpus = startup::affinity_cpus();
    let n = cfg.shards.unwrap_or(cpus.len());
    if n == 0 || n > 256 {
        return Err(format!("--shards {n}: must be between 1 and 256"));
    }
    let accounts = crate::config::accounts(&cfg.accounts)?;
    check_security(&cfg)?;
    startup::check_admin_apart(cfg.addr, cfg.admin_addr)?;
    shard_config(0, &cfg)
        .validate()
        .map_err(|e| format!("--max-message-kib {} with --segment-mib: {e}", cfg.max_message_kib))?;
    startup::raise_open_file_limit();
    // glommio's reactor (the network too) runs on io_uring, and locks its
    // rings' memory, in memory mode as well.
    startup::check_io_uring()?;
    startup::check_memlock(n, cfg.io_memory_kib)?;
    // Held for the life of the process, before recovery, so a second
    // server cannot start on this port while this one recovers.
    let _port = startup::claim_port(cfg.addr.port(), "stop it, or start this one with another --addr")?;
    // In memory there is no directory to check, lock or record the shard
    // count in: nothing is created on disk at all.
    let _lock = if cfg.in_memory {
        startup::check_address_free(cfg.addr)?;
        None
    } else {
        startup::check_o_direct(&cfg.data_dir)?;
        let lock = startup::lock_data_dir(&cfg.data_dir)?;
        startup::check_shard_count(&cfg.data_dir, n)?;
        Some(lock)
    };
    let sigs = block_stop_signals();
    install_panic_exit();
    let accounts: Accounts = accounts.into_iter().map(|a| (a.name.clone(), a)).collect();
    let first = accounts.keys().min().cloned().unwrap_or_default();
    // From here on, shard threads run: a failure must not return (that
    // would release the data-directory lock while they still touch it).
    let spawned = if cfg.in_memory {
        Shards::spawn::<MemDisk>(&cfg, &cpus, n, accounts)
    } else {
        Shards::spawn::<DmaDisk>(&cfg, &cpus, n, accounts)
    };
    let shards = spawned.unwrap_or_else(|e| startup_failed(&e));
    if let Err(e) = shards.wait_ready(&sigs) {
        startup_failed(&e);
    }
    shards.serving.store(true, Ordering::Relaxed);
    let data = if cfg.in_memory {
        "in memory: nothing survives a restart".to_string()
    } else {
        format!("data in {}", cfg.data_dir.display())
    };
    println!(
        "hematite ready: {}://{}/{first} ({n} shard{}, {data})",
        if cfg.cert.is_some() { "https" } else { "http" },
        cfg.addr,
        if n == 1 { "" } else { "s" },
    );
    if cfg.in_memory {
        tracing::warn!("running in memory (--in-memory): no data directory, and nothing survives a restart");
    }
    tracing::info!(addr = %cfg.addr, shards = n, in_memory = cfg.in_memory, "ready");
    shards.watch_until_signal(&sigs);
    shards.drain();
    tracing::info!("stopped");
    Ok(())
}

/// TLS and OAuth flags that cannot work, refused before anything starts.
fn check_security(cfg: &Config) -> Result<(), String> {
    if let (Some(cert), Some(key)) = (&cfg.cert, &cfg.key) {
        crate::tls::Identity::load(cert, key)?;
    }
    if cfg.oauth.is_some() && cfg.cert.is_none() {
        return Err("--oauth basic needs HTTPS (--cert and --key): a bearer token must never cross the network in clear text, and the Azure SDKs refuse to send one over HTTP".into());
    }
    Ok(())
}

/// Ends the process at once, with the data-directory lock still held, after
/// a startup failure once shard threads exist.
fn startup_failed(why: &str) -> ! {
    eprintln!("hematite: {why}");
    exit_now(1)
}

/// A signal from `sigs` if one is pending, without waiting.
fn pending_signal(sigs: &libc::sigset_t, wait: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    // SAFETY: waits on a signal set this thread has blocked.
    let sig = unsafe { libc::sigtimedwait(sigs, std::ptr::null_mut(), &ts) };
    (sig == libc::SIGTERM || sig == libc::SIGINT).then_some(sig)
}

/// SIGTERM and SIGINT are taken by the main thread alone: blocked here,
/// before any other thread exists (the log writer's, the executors), so
/// they all inherit the mask. A thread that does not block them would take
/// the signal's default action: death, with no drain.
pub fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain signal-set manipulation on a zeroed set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// The main thread's handles on the shard threads. Owned by the main thread.
struct Shards {
    n: usize,
    stop: Arc<AtomicBool>,
    /// Set once every shard serves: the admin address's readiness.
    serving: Arc<AtomicBool>,
    handles: Vec<glommio::ExecutorJoinHandle<()>>,
    /// Each shard reports once it serves (or why it could not start).
    ready: mpsc::Receiver<Result<usize, String>>,
    /// Each shard thread reports when it ends, however it ends.
    exits: mpsc::Receiver<(usize, bool)>,
    /// One counter per shard, bumped by a timer task on that core. The only
    /// state the cores share with the main thread, and only for watching.
    heartbeats: Arc<Vec<AtomicU64>>,
}

impl Shards {
    /// One executor per shard, pinned to its CPU, each with its shard on a
    /// disk of kind `D`.
    fn spawn<D: Storage>(cfg: &Config, cpus: &[usize], n: usize, accounts: Accounts) -> Result<Shards, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let serving = Arc::new(AtomicBool::new(false));
        let (exit_tx, exits) = mpsc::channel::<(usize, bool)>();
        let (ready_tx, ready) = mpsc::channel::<Result<usize, String>>();
        let mesh = (n > 1).then(|| router::mesh::<D>(n));
        let heartbeats: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let (cfg, stop, ready, serving) = (cfg.clone(), stop.clone(), ready_tx.clone(), serving.clone());
            let beats = heartbeats.clone();
            // Cloned once per executor, before it starts: each executor joins
            // the mesh with its own copy of the builder.
            let mesh = mesh.clone();
            let accounts = accounts.clone();
            let exit = ShardExit {
                shard: i,
                tx: exit_tx.clone(),
            };
            let cpu = cpus.get(i % cpus.len().max(1)).copied().unwrap_or(0);
            // No spin_before_park: glommio's spin polls its rings without a
            // syscall and would miss completions COOP_TASKRUN defers
            // (docs/decisions/0005-io-uring-coop-taskrun.md).
            let h = LocalExecutorBuilder::new(Placement::Fixed(cpu))
                .name(&format!("shard-{i}"))
                .io_memory(cfg.io_memory_kib * 1024)
                .spawn(move || async move {
                    let _exit = exit;
                    glommio::spawn_local(heartbeat(i, beats, stop.clone())).detach();
                    let flags = (stop, serving);
                    if let Err(e) = shard_main::<D>(i, n, cfg, mesh, accounts, flags, ready.clone()).await {
                        let _ = ready.send(Err(format!("shard {i}: {e}")));
                    }
                })
                .map_err(|e| format!("cannot start the executor for shard {i}: {e}"))?;
            handles.push(h);
        }
        Ok(Shards {
            n,
            stop,
            serving,
            handles,
            ready,
            exits,
            heartbeats,
        })
    }

    /// Until every shard serves; the first startup error, if any. A signal
    /// ends a long recovery too (it is blocked, so it must be polled here).
    fn wait_ready(&self, sigs: &libc::sigset_t) -> Result<(), String> {
        let mut ready = 0;
        while ready < self.n {
            if let Some(sig) = pending_signal(sigs, Duration::ZERO) {
                return Err(format!("signal {sig} during startup: stopped before serving"));
            }
            match self.ready.recv_timeout(Duration::from_millis(100)) {
                Ok(Ok(_)) => ready += 1,
                Ok(Err(e)) => return Err(e),
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err("a shard stopped during startup".into()),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // A shard that panicked while opening never reports.
                    if let Ok((shard, _)) = self.exits.try_recv() {
                        return Err(match self.ready.try_recv() {
                            Ok(Err(e)) => e,
                            _ => format!("shard {shard} stopped during startup (see the log above)"),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits for SIGTERM/SIGINT. A shard that ends meanwhile cannot serve its
    /// queues while the others keep accepting requests for them: the process
    /// exits at once instead of running half-alive (decision 0004).
    fn watch_until_signal(&self, sigs: &libc::sigset_t) {
        let mut last: Vec<(u64, Instant)> = self.heartbeats.iter().map(|_| (0, Instant::now())).collect();
        loop {
            if let Some(sig) = pending_signal(sigs, Duration::from_millis(100)) {
                tracing::info!("signal {sig}: draining");
                return;
            }
            if let Ok((shard, panicked)) = self.exits.try_recv() {
                let why = match self.ready.try_recv() {
                    Ok(Err(e)) => e,
                    _ if panicked => "it panicked (the panic is logged above)".to_string(),
                    _ => "it returned".to_string(),
                };
                shard_died(shard, &why);
            }
            for (shard, (beat, seen)) in last.iter_mut().enumerate() {
                let now = self.heartbeats.get(shard).map_or(0, |b| b.load(Ordering::Relaxed));
                if now != *beat {
                    (*beat, *seen) = (now, Instant::now());
                } else if seen.elapsed() > SHARD_STALL_LIMIT {
                    shard_died(shard, &format!("it made no progress for {:?}", SHARD_STALL_LIMIT));
                }
            }
        }
    }

    /// Tells every core to stop, and waits until each has drained, for at
    /// most `DRAIN_LIMIT`: a core that does not finish cannot hold the
    /// process forever (everything acknowledged is durable already).
    fn drain(self) {
        self.stop.store(true, Ordering::Relaxed);
        let (done_tx, done) = mpsc::channel();
        let handles = self.handles;
        std::thread::spawn(move || {
            for h in handles {
                let _ = h.join();
            }
            let _ = done_tx.send(());
        });
        if done.recv_timeout(DRAIN_LIMIT).is_err() {
            eprintln!("hematite: the drain took longer than {DRAIN_LIMIT:?}; exiting without it");
            exit_now(1)
        }
    }
}

/// Reports a shard that is gone or stuck and ends the process (decision 0004).
fn shard_died(shard: usize, why: &str) -> ! {
    eprintln!("hematite: shard {shard} stopped after startup: {why}; exiting with status {EXIT_SHARD_DIED} so a supervisor restarts the server and recovery runs");
    tracing::error!(shard, "shard stopped after startup: {why}");
    // The other cores' state needs no cleanup: everything acknowledged is
    // durable.
    exit_now(EXIT_SHARD_DIED)
}

/// Bumps this core's heartbeat while the core runs tasks.
async fn heartbeat(i: usize, beats: Arc<Vec<AtomicU64>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        if let Some(b) = beats.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        let slept = std::time::Instant::now();
        glommio::timer::sleep(HEARTBEAT_INTERVAL).await;
        // A core that runs its timers late holds every request on it: say
        // so, with how late (an operator's first clue to a stalled core).
        let late = slept.elapsed().saturating_sub(HEARTBEAT_INTERVAL);
        if late >= LATE_CORE {
            tracing::warn!(shard = i, late_ms = late.as_millis() as u64, "core ran late");
        }
    }
}

/// One core's life: open its shard, serve until told to stop, drain.
async fn shard_main<D: Storage>(
    i: usize,
    n: usize,
    cfg: Config,
    mesh: Option<router::Mesh<D>>,
    accounts: Accounts,
    (stop, serving): (Arc<AtomicBool>, Arc<AtomicBool>),
    ready: mpsc::Sender<Result<usize, String>>,
) -> Result<(), String> {
    // Core 0 answers the admin address from the start, recovery included.
    let admin = match i {
        0 => start_admin::<D>(&cfg, serving, stop.clone()),
        _ => None,
    };
    let shard = open_shard::<D>(i, &cfg).await?;
    let service = Rc::new(D::service_store(i, &cfg)?);
    let router = Router::join(mesh, shard.clone(), service, i, n).await;
    let listener = TcpListener::bind(cfg.addr).map_err(|e| format!("cannot listen on {}: {e}", cfg.addr))?;
    // Each core its own TLS config: rustls keeps a session cache behind a
    // lock in it, and no lock is shared between cores.
    let tls = match (&cfg.cert, &cfg.key) {
        (Some(c), Some(k)) => Some(crate::tls::Identity::load(c, k)?.server_config()?),
        _ => None,
    };
    let ctx = Rc::new(Ctx {
        router,
        tls,
        accounts: Rc::new(accounts),
        limits: crate::limits::ConnLimits {
            max_connections: cfg.max_connections_per_core.max(1),
            idle_timeout: Duration::from_secs(cfg.idle_timeout_secs.max(1)),
            request_timeout: Duration::from_secs(cfg.request_timeout_secs.max(1)),
            max_body_bytes: cfg.max_body_bytes(),
        },
        request_log: cfg.request_log,
        security: crate::handler::Security {
            https: cfg.cert.is_some(),
            oauth: cfg.oauth.is_some(),
        },
        addressing: crate::addressing::Addressing {
            host_suffixes: cfg
                .host_suffixes
                .iter()
                .map(|s| s.trim_start_matches('.').to_ascii_lowercase())
                .collect(),
        },
    });
    let conns = Rc::new(ConnCount::default());
    let reaper = Rc::new(Reaper::default());
    let large = LargeBodies::new(LARGE_BODY_BUDGET_BYTES);
    let reaping = glommio::spawn_local(reaper.clone().run(stop.clone()));
    let maintenance = glommio::spawn_local(maintain(i, shard.clone(), stop.clone()));
    let mover = glommio::spawn_local(move_dead_letters(i, ctx.clone()));
    if let Some((admin, _)) = &admin {
        *admin.ctx.borrow_mut() = Some(ctx.clone());
    }
    let _ = ready.send(Ok(i));
    accept_until_stopped(i, &listener, &ctx, &stop, &conns, &reaper, &large).await;
    drop(listener);
    // Long polls answer (empty) now, so their connections can drain; the
    // dead-letter mover stops (an unfinished move is retried after a restart).
    shard.stop_waiting();
    // Drain: connections finish their current request and close.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while conns.get() > 0 && std::time::Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    maintenance.await;
    if let Some((_, serving)) = admin {
        serving.await;
    }
    // A move in progress finishes (engine steps are never abandoned
    // half-way); then `next_dead_letter` sees the stop and the mover ends.
    mover.await;
    reaping.await;
    // Everything acknowledged is already durable; this makes sure nothing
    // appended by background work is left unsynced either.
    let _ = shard.wal().wait_durable(shard.wal().last_lsn()).await;
    log_commit_stats(i, &shard.commit_stats());
    Ok(())
}

/// One line per shard at shutdown: what its group commits cost. The bucket
/// bounds are powers of two, so a quantile reads "at most".
fn log_commit_stats(i: usize, s: &engine::wal::CommitStats) {
    let per_commit = s.records.checked_div(s.commits).unwrap_or(0);
    tracing::info!(
        shard = i,
        commits = s.commits,
        records = s.records,
        records_per_commit = per_commit,
        max_records = s.max_records,
        fdatasync_p50_us_at_most = s.sync.quantile_upper_us(0.5),
        fdatasync_p99_us_at_most = s.sync.quantile_upper_us(0.99),
        fdatasync_max_us = s.sync.max_us,
        write_max_us = s.write.max_us,
        commit_p99_us_at_most = s.total.quantile_upper_us(0.99),
        commit_max_us = s.total.max_us,
        "group commits"
    );
}

/// Where the server keeps its state, one kind per process: the disk under
/// the shards' logs, and the service properties beside them.
#[allow(async_fn_in_trait)] // used on one core, never boxed or sent
pub trait Storage: Disk {
    /// Opens shard `i`'s disk.
    async fn open_for(i: usize, cfg: &Config) -> Result<Self, String>;
    /// Shard `i`'s service property store (core 0's is the one in use).
    fn service_store(i: usize, cfg: &Config) -> Result<ServiceStore, String>;
}

impl Storage for DmaDisk {
    /// Files under `--data-dir`/service, loaded by core 0.
    fn service_store(i: usize, cfg: &Config) -> Result<ServiceStore, String> {
        ServiceStore::open(cfg.data_dir.join("service"), i == 0).map_err(|e| e.to_string())
    }

    /// The shard's directory under `--data-dir`, through O_DIRECT.
    async fn open_for(i: usize, cfg: &Config) -> Result<Self, String> {
        let sync = match cfg.fdatasync {
            SyncFlag::Blocking => SyncPath::BlockingPool,
            SyncFlag::Uring => SyncPath::Uring,
        };
        let dir = cfg.data_dir.join(format!("shard-{i:03}"));
        let prealloc = match cfg.preallocate {
            PreallocFlag::Fallocate | PreallocFlag::ZeroAhead => Preallocation::Fallocate,
            PreallocFlag::ZeroFill => Preallocation::ZeroFill,
        };
        Ok(DmaDisk::open(&dir, sync)
            .await
            .map_err(|e| format!("opening {}: {e}", dir.display()))?
            .with_preallocation(prealloc))
    }
}

impl Storage for MemDisk {
    /// An empty memory disk: every start begins with no queues.
    async fn open_for(_: usize, _: &Config) -> Result<Self, String> {
        Ok(MemDisk::new())
    }

    /// Properties in memory only, the defaults at every start.
    fn service_store(_: usize, _: &Config) -> Result<ServiceStore, String> {
        Ok(ServiceStore::in_memory())
    }
}

/// Shard `i`'s engine settings from the flags.
fn shard_config(i: usize, cfg: &Config) -> ShardConfig {
    let mut scfg = ShardConfig::new(i as u32);
    scfg.segment_bytes = cfg.segment_bytes();
    scfg.body_cache_bytes = cfg.body_cache_bytes();
    scfg.max_message_bytes = cfg.max_message_bytes();
    scfg.stale_receipt_is_mismatch = cfg.azurite_receipt_errors;
    scfg.dead_letter_lease_ms = cfg.dead_letter_lease_secs.saturating_mul(1000);
    scfg.slow_commit_ms = cfg.slow_commit_ms;
    // In memory the zeros would only be memory: nothing to convert there.
    scfg.zero_ahead = !cfg.in_memory && cfg.preallocate == PreallocFlag::ZeroAhead;
    if cfg.quarantine_corrupt_segments {
        scfg.recovery = RecoveryMode::QuarantineCorrupt;
    }
    scfg
}

/// Opens (recovers) this core's shard from its disk.
async fn open_shard<D: Storage>(i: usize, cfg: &Config) -> Result<Rc<Shard<D>>, String> {
    let disk = D::open_for(i, cfg).await?;
    let shard = Shard::open(disk, shard_config(i, cfg), Rc::new(SystemClock))
        .await
        .map_err(|e| e.to_string())?;
    Ok(Rc::new(shard))
}

/// Expiry, segment preparation and compaction, in the background (in
/// memory too: compaction is what frees the memory of deleted messages).
async fn maintain<D: Disk>(i: usize, shard: Rc<Shard<D>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let started = std::time::Instant::now();
        match shard.maintenance().await {
            Ok(report) => {
                crate::metrics::record_maintenance(&report);
                // A rewrite takes this core's CPU from the requests while it
                // runs, so an operator reading a latency spike (and
                // bench/compare) can place it: one line per pass that moved
                // records. `ms` is the pass's wall time, its pauses and
                // commits included, not the time it held the core
                // (docs/benchmarks.md, "The ceiling dropped bodies").
                if report.records_rewritten > 0 {
                    tracing::info!(
                        shard = i,
                        ms = started.elapsed().as_millis() as u64,
                        rewritten = report.records_rewritten,
                        scanned = report.messages_scanned,
                        segments_removed = report.segments_removed,
                        "compaction pass"
                    );
                }
            }
            Err(e) => tracing::error!(shard = i, "maintenance: {e}"),
        }
        // Whether or not the pass then failed: a full disk fails every pass
        // after its release. The memory freed is given back by the purge
        // thread (`allocator::start_purge_thread`), not on this core.
        crate::metrics::record_released(shard.take_released());
        glommio::timer::sleep(MAINTENANCE_INTERVAL).await;
    }
}

/// Binds the admin address and serves it on this core (core 0). An
/// address in use (a second server on one machine, say) does not stop the
/// queue service: the error is logged, and that server has no admin
/// address until restarted with another `--admin-addr`.
fn start_admin<D: Disk>(
    cfg: &Config,
    serving: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> Option<(Rc<crate::admin::Admin<D>>, glommio::Task<()>)> {
    // glommio binds with SO_REUSEPORT, so the bind below would succeed
    // beside another server's listener on the port and split its
    // connections with it. The claim is kept as long as the listener.
    let claim = match startup::claim_port(cfg.admin_addr.port(), "give this one another --admin-addr") {
        Ok(claim) => claim,
        Err(e) => {
            tracing::error!(
                "--admin-addr {}: {e}. /metrics, /healthz and /readyz are off",
                cfg.admin_addr
            );
            return None;
        }
    };
    let listener = match TcpListener::bind(cfg.admin_addr) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(
                "cannot listen on the admin address {}: {e}; /metrics, /healthz and /readyz are off (--admin-addr)",
                cfg.admin_addr
            );
            return None;
        }
    };
    let admin = Rc::new(crate::admin::Admin {
        ctx: std::cell::RefCell::new(None),
        ready: serving,
        open: std::cell::Cell::new(0),
    });
    let serving_admin = admin.clone();
    let task = glommio::spawn_local(async move {
        let _claim = claim;
        crate::admin::serve(listener, serving_admin, stop).await
    });
    Some((admin, task))
}

/// Moves the messages this core's Get Messages set aside to their
/// dead-letter queues, one at a time (engine `shard::dead_letters` has the
/// steps and why a crash between them loses nothing). A move that fails
/// leaves the message hidden in its queue until its lease runs out; then a
/// Get sets it aside again.
async fn move_dead_letters<D: engine::disk::Disk>(i: usize, ctx: Rc<Ctx<D>>) {
    let shard = ctx.router.shard.clone();
    while let Some(dl) = shard.next_dead_letter().await {
        let owner = ctx.router.owner_of(&dl.account, &dl.to);
        let copy = dl.clone();
        let put = ctx
            .router
            .exec(owner, move |s, _| async move { s.put_dead_letter(&copy).await })
            .await;
        let moved = match put {
            Ok(()) => shard.finish_dead_letter(&dl).await,
            Err(e) => Err(e),
        };
        if let Err(e) = moved {
            tracing::warn!(shard = i, queue = %dl.from, dead_letter_queue = %dl.to, id = %dl.id, error = %e,
                "dead-letter move failed; retried once the message's lease runs out");
        }
    }
}

/// Accepts connections, each served by its own task on this core, until
/// the stop flag is set.
async fn accept_until_stopped<D: Disk>(
    i: usize,
    listener: &TcpListener,
    ctx: &Rc<Ctx<D>>,
    stop: &Arc<AtomicBool>,
    conns: &Rc<ConnCount>,
    reaper: &Rc<Reaper>,
    large: &Rc<LargeBodies>,
) {
    while let Some(stream) = next_connection(listener, stop, "client").await {
        let peer = stream
            .peer_addr()
            .map(|a| a.ip())
            .unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
        let _ = stream.set_nodelay(true);
        let fd = std::os::unix::io::AsRawFd::as_raw_fd(&stream);
        let (ctx, stop, conns, reaper, large) =
            (ctx.clone(), stop.clone(), conns.clone(), reaper.clone(), large.clone());
        match &ctx.tls {
            None => {
                glommio::spawn_local(serve(stream, fd, peer, ctx, stop, conns, reaper, large)).detach();
            }
            Some(tls) => match crate::tls::TlsStream::new(stream, tls.clone()) {
                Ok(s) => {
                    glommio::spawn_local(serve(s, fd, peer, ctx, stop, conns, reaper, large)).detach();
                }
                Err(e) => tracing::warn!(shard = i, "TLS session setup failed: {e}"),
            },
        }
    }
}

/// The next connection on `listener`, or `None` once `stop` is set (checked
/// every 100 ms). A failed accept is logged and retried after a pause, so a
/// full file table does not spin the core. Serves the data port and the
/// admin address alike.
pub(crate) async fn next_connection(
    listener: &TcpListener,
    stop: &AtomicBool,
    what: &str,
) -> Option<glommio::net::TcpStream> {
    loop {
        let accept = async { Some(listener.accept().await) };
        let stopping = async {
            while !stop.load(Ordering::Relaxed) {
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
            None
        };
        match futures_lite::future::or(accept, stopping).await? {
            Ok(stream) => return Some(stream),
            Err(e) => {
                tracing::warn!("accepting a {what} connection failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
