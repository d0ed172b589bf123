//! `ceiling`: the reference every Hematite throughput target is a fraction
//! of. It is the smallest program that does the work a durable Put Message
//! cannot avoid, and nothing else: accept HTTP/1.1 on one glommio executor,
//! parse each request with httparse, and answer with a fixed response the
//! size of Hematite's. With `--durable DIR`, a request that carries a body is
//! answered only after the body was appended to an O_DIRECT file and an
//! fdatasync covered it, with group commit: one `pwrite` + `fdatasync` (on
//! glommio's blocking pool, off the executor) for every body that arrived
//! while the previous one ran. docs/benchmarks.md explains how it is used.
//!
//! What it skips on purpose, and Hematite cannot: authentication, XML, the
//! queue index, record framing and checksums, message ids and receipts.
//! What it keeps: the syscalls, loopback networking, parsing, and one
//! fdatasync per group. So "Hematite at 85% of the ceiling" reads as "the
//! queue logic costs 15% over the bare machine".

use clap::Parser;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Minimal HTTP server: the reference ceiling for Hematite's benchmarks")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:10090")]
    addr: String,
    /// Pin the executor to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Make request bodies durable in this directory before answering.
    #[arg(long)]
    durable: Option<PathBuf>,
    /// Size of the log file, written once with zeros at startup and then
    /// overwritten in a ring, so that every commit is a pure overwrite (the
    /// disk's cheapest commit, docs/machine.md).
    #[arg(long, default_value_t = 256)]
    ring_mib: u64,
    /// Instead of the ring, write each file of `ring_mib` once, then move on
    /// to a new fallocated (never written) one and delete the old: the disk
    /// pattern of a log that creates and deletes segments. Compares what
    /// commits into unwritten extents cost against overwrites.
    #[arg(long)]
    fresh_files: bool,
    /// Busy CPU time added to every request, in microseconds: a diagnostic
    /// of how the rate answers per-request work (docs/benchmarks.md).
    #[arg(long, default_value_t = 0.0)]
    work_us: f64,
    /// KiB of memory each connection writes, one byte a cache line, per
    /// request: what the memory a server touches per connection costs,
    /// apart from its instructions (docs/benchmarks.md, "Fewer
    /// instructions, more time: a put at 256 connections").
    #[arg(long, default_value_t = 0)]
    touch_kb: usize,
    /// Log every group commit that took at least this long, to stderr, as
    /// Hematite logs its own (its `--slow-commit-ms`, 50 ms by default): so a stall of the
    /// device in an open-loop run can be told from a stall of Hematite's.
    #[arg(long, default_value_t = 50)]
    slow_commit_ms: u64,
    /// Write and fdatasync each group on the executor's own thread instead
    /// of glommio's blocking pool, after a pause for the group to gather.
    /// Only for counting instructions under valgrind (bench/instructions
    /// --ceiling), which runs one thread at a time and starves the pool's
    /// thread. The request path is the same; the commit's path is not
    /// (no hand-off to the pool, a timer instead), and its groups are as
    /// large as the pause makes them. Never for timing.
    #[arg(long)]
    sync_inline: bool,
}

/// `--sync-inline`: how long a commit waits for bodies to join its group.
/// Under valgrind, where only this flag is used, a put takes a few hundred
/// microseconds.
const INLINE_GATHER: std::time::Duration = std::time::Duration::from_millis(5);

/// The device's write unit: commits start and end on it (O_DIRECT).
const BLOCK: usize = 4096;
/// Bytes of request head we accept; requests are small and fixed.
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1024 * 1024;

fn main() {
    let args = Args::parse();
    let placement = match args.cpu {
        Some(cpu) => Placement::Fixed(cpu),
        None => Placement::Unbound,
    };
    let handle = LocalExecutorBuilder::new(placement)
        .name("ceiling")
        .spawn(move || async move {
            if let Err(e) = serve(args).await {
                eprintln!("ceiling: {e}");
                std::process::exit(1);
            }
        })
        .unwrap_or_else(|e| {
            eprintln!("ceiling: cannot start the executor: {e}");
            std::process::exit(1);
        });
    let _ = handle.join();
}

async fn serve(args: Args) -> std::io::Result<()> {
    let log = match &args.durable {
        Some(dir) => Some(Rc::new(Log::open(
            dir,
            args.ring_mib << 20,
            args.fresh_files,
            std::time::Duration::from_millis(args.slow_commit_ms),
            args.sync_inline,
        )?)),
        None => None,
    };
    let answers = Rc::new(Answers::new());
    let work = std::time::Duration::from_secs_f64(args.work_us.max(0.0) / 1e6);
    let touch = args.touch_kb;
    let listener = TcpListener::bind(&args.addr)?;
    println!("ceiling ready on {} (durable: {})", args.addr, log.is_some());
    loop {
        let stream = listener.accept().await?;
        let (log, answers) = (log.clone(), answers.clone());
        glommio::spawn_local(async move {
            let _ = connection(stream, log, answers, work, touch).await;
        })
        .detach();
    }
}

/// Serves one keep-alive connection, answering pipelined requests in one write.
async fn connection(
    mut stream: TcpStream,
    log: Option<Rc<Log>>,
    answers: Rc<Answers>,
    work: std::time::Duration,
    touch_kb: usize,
) -> std::io::Result<()> {
    let mut touched = vec![0u8; touch_kb.saturating_mul(1024)];
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut start, mut end) = (0usize, 0usize);
    let mut out = Vec::with_capacity(4096);
    loop {
        // Answer every complete request already read.
        let mut wait_for = None;
        while let Some((len, body, kind)) = parse(&buf[start..end])? {
            if !work.is_zero() {
                let t = std::time::Instant::now();
                while t.elapsed() < work {
                    std::hint::spin_loop();
                }
            }
            for line in touched.chunks_mut(64) {
                line[0] = line[0].wrapping_add(1);
            }
            std::hint::black_box(&touched);
            if let (Some(log), Some(body)) = (&log, body) {
                wait_for = Some(log.append(&buf[start + len - body..start + len]));
            }
            out.extend_from_slice(match kind {
                Kind::Post => &answers.put,
                Kind::Peek => &answers.peek,
                Kind::Other => &answers.get,
            });
            start += len;
        }
        if let (Some(log), Some(batch)) = (&log, wait_for) {
            log.wait_durable(batch).await;
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if start == end {
            (start, end) = (0, 0);
        } else if end == buf.len() {
            buf.copy_within(start..end, 0);
            (start, end) = (0, end - start);
            if end == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
        }
        let n = stream.read(&mut buf[end..]).await?;
        if n == 0 {
            return Ok(());
        }
        end += n;
    }
}

/// Which answer a request gets.
enum Kind {
    Post,
    /// A GET with `peekonly=true`: Peek Messages, whose answer carries a message.
    Peek,
    Other,
}

/// One complete request at the start of `b`: its total length, its body
/// length if it has one, and which answer it gets. `None`: not all here yet.
fn parse(b: &[u8]) -> std::io::Result<Option<(usize, Option<usize>, Kind)>> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(b).map_err(|e| bad(&e.to_string()))? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial if b.len() > MAX_HEAD => return Err(bad("head too large")),
        httparse::Status::Partial => return Ok(None),
    };
    let mut body = 0usize;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|&n| n <= MAX_BODY)
                .ok_or_else(|| bad("bad content-length"))?;
        }
    }
    let kind = match req.method {
        Some("POST" | "PUT") => Kind::Post,
        _ if req.path.is_some_and(|p| p.contains("peekonly=true")) => Kind::Peek,
        _ => Kind::Other,
    };
    if b.len() < head + body {
        return Ok(None);
    }
    Ok(Some((head + body, (body > 0).then_some(body), kind)))
}

/// Answers the size of Hematite's own (the same headers, and an XML body
/// like Put Message's), so both servers move about the same bytes.
fn answer(status: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\n{extra}x-ms-request-id: 8a6a2f4e-2f5b-4a47-9b3c-1f0c3c2b7e11\r\n\
         x-ms-version: 2026-10-06\r\nDate: Mon, 23 Nov 2026 00:00:00 GMT\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

struct Answers {
    put: Vec<u8>,
    /// Get Queue Metadata's size: headers only.
    get: Vec<u8>,
    /// Peek Messages' size for one message of hematite-bench's default
    /// 1,024 characters: the text is most of what a peek sends.
    peek: Vec<u8>,
}

impl Answers {
    fn new() -> Self {
        let put_body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage>\
            <MessageId>7d9c4a55-0d5f-4a7e-8a54-2f6d1c9b0e21</MessageId>\
            <InsertionTime>Mon, 23 Nov 2026 00:00:00 GMT</InsertionTime>\
            <ExpirationTime>Mon, 30 Nov 2026 00:00:00 GMT</ExpirationTime>\
            <PopReceipt>AAAAAAAAAAAAAAAAAAAAAA==</PopReceipt>\
            <TimeNextVisible>Mon, 23 Nov 2026 00:00:00 GMT</TimeNextVisible>\
            </QueueMessage></QueueMessagesList>";
        let peek_body = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage>\
             <MessageId>7d9c4a55-0d5f-4a7e-8a54-2f6d1c9b0e21</MessageId>\
             <InsertionTime>Mon, 23 Nov 2026 00:00:00 GMT</InsertionTime>\
             <ExpirationTime>Mon, 30 Nov 2026 00:00:00 GMT</ExpirationTime>\
             <DequeueCount>0</DequeueCount><MessageText>{}</MessageText>\
             </QueueMessage></QueueMessagesList>",
            "m".repeat(1024)
        );
        Answers {
            put: answer("201 Created", "Content-Type: application/xml\r\n", put_body),
            get: answer("200 OK", "x-ms-approximate-messages-count: 0\r\n", ""),
            peek: answer("200 OK", "Content-Type: application/xml\r\n", &peek_body),
        }
    }
}

/// The durable log: a ring file on one core, written in aligned groups.
struct Log {
    file: RefCell<Arc<File>>,
    ring: u64,
    /// `--fresh-files`: the directory and the current file's number.
    fresh: Option<(PathBuf, Cell<u64>)>,
    /// Where the next group starts.
    pos: Cell<u64>,
    /// Bodies waiting for the next group, and that group's number.
    open: RefCell<Vec<u8>>,
    /// The other buffer: the open group swaps with it when a commit takes
    /// it, so bodies arriving during the commit land in a grown buffer.
    spare: RefCell<Vec<u8>>,
    open_batch: Cell<u64>,
    /// Every group up to this number is durable.
    durable: Cell<u64>,
    committing: Cell<bool>,
    changed: event_listener::Event,
    /// `--slow-commit-ms`.
    slow: std::time::Duration,
    /// `--sync-inline`.
    inline: bool,
}

impl Log {
    fn create(path: &std::path::Path) -> std::io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
    }

    /// A new file of `len` bytes whose blocks are reserved but unwritten.
    fn fallocated(path: &std::path::Path, len: u64) -> std::io::Result<File> {
        use std::os::fd::AsRawFd;
        let file = Self::create(path)?;
        // SAFETY: fallocate only takes the descriptor and a range.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        file.sync_all()?;
        Ok(file)
    }

    fn open(
        dir: &std::path::Path,
        ring: u64,
        fresh_files: bool,
        slow: std::time::Duration,
        inline: bool,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let file = if fresh_files {
            Self::fallocated(&dir.join("0.log"), ring)?
        } else {
            let file = Self::create(&dir.join("ceiling.log"))?;
            // Write the ring once, so commits overwrite written blocks.
            let zeros = AlignedBuf::zeroed(1 << 20);
            let mut at = 0;
            while at < ring {
                file.write_all_at(zeros.as_slice(), at)?;
                at += zeros.len() as u64;
            }
            file.sync_all()?;
            file
        };
        Ok(Log {
            file: RefCell::new(Arc::new(file)),
            fresh: fresh_files.then(|| (dir.to_path_buf(), Cell::new(0))),
            ring,
            pos: Cell::new(0),
            open: RefCell::new(Vec::with_capacity(256 * 1024)),
            spare: RefCell::new(Vec::with_capacity(256 * 1024)),
            open_batch: Cell::new(1),
            durable: Cell::new(0),
            committing: Cell::new(false),
            changed: event_listener::Event::new(),
            slow,
            inline,
        })
    }

    /// Adds a body to the open group and returns the group's number.
    fn append(&self, body: &[u8]) -> u64 {
        self.open.borrow_mut().extend_from_slice(body);
        self.open_batch.get()
    }

    /// Returns once group `batch` is durable. The first waiter to find no
    /// commit running writes the open group for everyone.
    async fn wait_durable(&self, batch: u64) {
        loop {
            if self.durable.get() >= batch {
                return;
            }
            if !self.committing.get() {
                self.commit().await;
                continue;
            }
            let listener = self.changed.listen();
            if self.durable.get() >= batch || !self.committing.get() {
                continue;
            }
            listener.await;
        }
    }

    /// Writes and syncs the open group. A failure ends the process: the
    /// groups after it would mark the failed one durable (`durable` is a
    /// high-water mark), and a reference that answers unwritten bodies
    /// measures nothing (Hematite's log poisons itself for the same
    /// reason).
    async fn commit(&self) {
        self.committing.set(true);
        if self.inline {
            // Inline, nothing else would run between the append that
            // starts a commit and its write, and every group would hold
            // one put. Pooled, the bodies that arrive while a group is
            // written make up the next one; this pause lets the executor
            // read and append what has arrived before the group is taken.
            glommio::timer::sleep(INLINE_GATHER).await;
        }
        // From before a rotation, as Hematite's commit time counts its own.
        let started = std::time::Instant::now();
        let batch = self.open_batch.get();
        self.open_batch.set(batch + 1);
        let bytes = std::mem::replace(&mut *self.open.borrow_mut(), self.spare.take());
        let mut buf = AlignedBuf::zeroed(bytes.len().div_ceil(BLOCK).max(1) * BLOCK);
        buf.as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
        let mut at = self.pos.get();
        if at + buf.len() as u64 > self.ring {
            at = 0;
            if let Some((dir, n)) = &self.fresh {
                // Like a log's rotation: the next file is made ahead of
                // time (off the executor), the old one deleted.
                let (dir, old, ring) = (dir.clone(), n.get(), self.ring);
                n.set(old + 1);
                let next = glommio::executor()
                    .spawn_blocking(move || -> std::io::Result<File> {
                        let f = Self::fallocated(&dir.join(format!("{}.log", old + 1)), ring)?;
                        std::fs::remove_file(dir.join(format!("{old}.log")))?;
                        File::open(&dir)?.sync_all()?;
                        Ok(f)
                    })
                    .await
                    .unwrap_or_else(|e| fail("a rotation", e));
                *self.file.borrow_mut() = Arc::new(next);
            }
        }
        self.pos.set(at + buf.len() as u64);
        let file = self.file.borrow().clone();
        let write_and_sync = move || -> std::io::Result<(std::time::Duration, std::time::Duration)> {
            let t = std::time::Instant::now();
            file.write_all_at(buf.as_slice(), at)?;
            let write = t.elapsed();
            file.sync_data()?;
            Ok((write, t.elapsed().saturating_sub(write)))
        };
        let done = if self.inline {
            write_and_sync()
        } else {
            glommio::executor().spawn_blocking(write_and_sync).await
        };
        let (write, sync) = done.unwrap_or_else(|e| fail("a group commit", e));
        let took = started.elapsed();
        if took >= self.slow {
            // The same fields as Hematite's "slow group commit", with the
            // Unix time at which the commit ended, so bench/compare can
            // place it in an open-loop run's measured window.
            let unix = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            eprintln!(
                "ceiling: slow group commit unix={unix:.3} ms={} write_us={} fdatasync_us={} bytes={}",
                took.as_millis(),
                write.as_micros(),
                sync.as_micros(),
                bytes.len()
            );
        }
        // Bodies that arrived during the commit are in the open group,
        // the other buffer; this one waits for the next swap. (The ceiling
        // once put this buffer back *as* the open group, over them, and
        // every body appended while a commit ran was lost: see
        // docs/benchmarks.md, "The ceiling dropped bodies".)
        let mut spare = bytes;
        spare.clear();
        *self.spare.borrow_mut() = spare;
        self.committing.set(false);
        self.durable.set(batch);
        self.changed.notify(usize::MAX);
    }
}

/// Ends the process on a failed write: see `Log::commit`.
fn fail(what: &str, e: std::io::Error) -> ! {
    eprintln!("ceiling: {what} failed: {e}");
    std::process::exit(1)
}

/// A heap buffer aligned to the block size, as O_DIRECT requires.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// The buffer is plain bytes owned by one value; moving it to the blocking
// thread that writes it is safe.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, BLOCK).unwrap_or_else(|_| {
            eprintln!("ceiling: bad buffer size {len}");
            std::process::exit(1);
        })
    }

    fn zeroed(len: usize) -> Self {
        assert!(len > 0 && len.is_multiple_of(BLOCK));
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(Self::layout(len)) };
        let ptr = std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(Self::layout(len)));
        AlignedBuf { ptr, len }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points at `len` initialized bytes this value owns.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this same layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}
