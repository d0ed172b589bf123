//! The production disk: glommio `DmaFile`s (O_DIRECT through io_uring).
//!
//! Must be used from inside a glommio executor; owned by the shard of that
//! executor. Data is written with `DmaFile::write_at` (zero-ahead's full
//! steps with `write_rc_at`, from one kept buffer). How fdatasync is issued
//! is a measured choice (docs/decisions/0002-fdatasync-path.md): by default it
//! runs on glommio's blocking thread pool, because glommio 0.9's own
//! `DmaFile::fdatasync` keeps the executor spinning while the flush runs.

use super::{CommitIoError, Disk, DiskFile, WriteSync};
use glommio::io::{DmaFile, OpenOptions};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

/// How fdatasync is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPath {
    /// `fdatasync(2)` on glommio's blocking thread pool (`spawn_blocking`).
    #[default]
    BlockingPool,
    /// glommio's `DmaFile::fdatasync` (IORING_OP_FSYNC).
    Uring,
}

/// How a new segment's space is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preallocation {
    /// `fallocate` only: fast to create, but the first write to each block
    /// converts an unwritten extent, so that commit's fdatasync also journals
    /// metadata. The default (docs/decisions/0003-segment-preallocation.md).
    #[default]
    Fallocate,
    /// `fallocate`, then write zeros over the whole segment once, so every
    /// commit afterwards is a pure overwrite (docs/machine.md, disk). Faster
    /// commits, but the 64 MiB zero write competes with them and raises p99.
    ZeroFill,
}

#[derive(Clone)]
pub struct DmaDisk {
    dir: Rc<PathBuf>,
    sync_path: SyncPath,
    prealloc: Preallocation,
    /// The last one-job commit's buffer, shared by this disk's files.
    spare: SpareBuf,
    zeros: ZeroBuf,
}

/// One commit buffer kept for the next one-job commit. A fresh buffer per
/// commit (hundreds of KiB at 256 connections) went back to the allocator's
/// arena when the pool's thread freed it, the arena returned its pages to
/// the kernel (madvise), and the next commit's buffer faulted them in and
/// zeroed them again: about 800 page faults a second at 256 connections
/// (docs/benchmarks.md, "Commit buffers kept"). Owned by the shard's core.
type SpareBuf = Rc<std::cell::Cell<Option<AlignedBuf>>>;

/// The zeros a full zero-ahead step writes (`ZERO_STEP_BYTES` of them),
/// kept in one DMA buffer that every such step shares: a buffer filled
/// afresh for each step copied 256 KiB, a quarter of the core's 1 MiB
/// level-2 cache, about 140 times a second under a put load
/// (docs/benchmarks.md, "Zeros written from one buffer"). Shorter steps
/// (the last of a zeroing pass, which stops at the target it began with,
/// or of a segment) still fill their own. Made on the first full step, from
/// the executor's registered I/O memory when it has a free block (it then
/// holds a quarter of the default 1 MiB for good; reads fall back to heap
/// buffers sooner), else from the heap. Owned by the shard's core.
type ZeroBuf = Rc<std::cell::OnceCell<Rc<glommio::io::DmaBuffer>>>;

fn to_io(e: glommio::GlommioError<()>) -> io::Error {
    e.into()
}

impl DmaDisk {
    /// Opens (creating if needed) `dir`. Works around glommio's iopoll probe
    /// pitfall (a glommio 0.9 behaviour we measured): the first `DmaFile` opened on a
    /// device decides whether reads are polled, and an empty first file makes
    /// every later read fail with EOPNOTSUPP. So the first file we open is a
    /// non-empty probe, read back once.
    pub async fn open(dir: impl AsRef<Path>, sync_path: SyncPath) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let probe = dir.join(".probe");
        std::fs::write(&probe, vec![0xA5u8; 4096])?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .dma_open(&probe)
            .await
            .map_err(to_io)?;
        let r = f.read_at(0, 512).await.map_err(to_io)?;
        if r.len() != 512 {
            return Err(io::Error::other("O_DIRECT probe read came back short"));
        }
        f.close().await.map_err(to_io)?;
        std::fs::remove_file(&probe)?;
        Ok(DmaDisk {
            dir: Rc::new(dir),
            sync_path,
            prealloc: Preallocation::default(),
            spare: SpareBuf::default(),
            zeros: ZeroBuf::default(),
        })
    }

    pub fn with_preallocation(mut self, p: Preallocation) -> Self {
        self.prealloc = p;
        self
    }

    /// Always read+write: a write-only first open trips glommio's iopoll probe.
    async fn open_file(&self, name: &str, create_new: bool) -> io::Result<DmaDiskFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create_new)
            .dma_open(self.dir.join(name))
            .await
            .map_err(to_io)?;
        let described = (|| {
            let alignment = write_unit(&file)?;
            faults::before_dup()?;
            // SAFETY: `file` is open for the duration of the call; the clone
            // is a new descriptor (dup) owned by the `OwnedFd`.
            let pool_fd = unsafe { BorrowedFd::borrow_raw(file.as_raw_fd()) }.try_clone_to_owned()?;
            Ok::<_, io::Error>((alignment, Arc::new(pool_fd)))
        })();
        let (alignment, pool_fd) = match described {
            Ok(d) => d,
            Err(e) => {
                // A file this call created must not outlive its failure: the
                // next attempt creates the same name and would find it there
                // (EEXIST), blocking rotation until a restart. Running out of
                // descriptors for the dup is a passing condition.
                if create_new {
                    let _ = std::fs::remove_file(self.dir.join(name));
                }
                return Err(e);
            }
        };
        Ok(DmaDiskFile {
            file: Rc::new(file),
            pool_fd,
            sync_path: self.sync_path,
            prealloc: self.prealloc,
            alignment,
            spare: self.spare.clone(),
            zeros: self.zeros.clone(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    async fn blocking<R: Send + 'static>(f: impl FnOnce() -> io::Result<R> + Send + 'static) -> io::Result<R> {
        glommio::executor().spawn_blocking(f).await
    }
}

impl Disk for DmaDisk {
    type File = DmaDiskFile;

    async fn create(&self, name: &str) -> io::Result<DmaDiskFile> {
        faults::before_allocation()?;
        self.open_file(name, true).await
    }

    async fn open(&self, name: &str) -> io::Result<DmaDiskFile> {
        self.open_file(name, false).await
    }

    async fn list(&self) -> io::Result<Vec<String>> {
        super::list_files(&self.dir)
    }

    async fn remove(&self, name: &str) -> io::Result<()> {
        let p = self.dir.join(name);
        Self::blocking(move || std::fs::remove_file(p)).await
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (a, b) = (self.dir.join(from), self.dir.join(to));
        Self::blocking(move || std::fs::rename(a, b)).await
    }

    async fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        let p = self.dir.join(name);
        Self::blocking(move || std::fs::OpenOptions::new().write(true).open(p)?.set_len(len)).await
    }

    async fn sync_dir(&self) -> io::Result<()> {
        let d = (*self.dir).clone();
        Self::blocking(move || std::fs::File::open(d)?.sync_all()).await
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// The largest write unit a segment header can describe and records (which
/// start at `SEGMENT_HEADER_LEN`) can be aligned to.
const MAX_WRITE_UNIT: u64 = crate::limits::SEGMENT_HEADER_LEN;

/// What commits on `file` are aligned to: the largest of glommio's O_DIRECT
/// alignment (the logical block size), the device's physical sector size and
/// `st_blksize`. A 512e disk takes 512-byte writes but writes 4 KiB sectors by
/// read-modify-write; a torn one can damage the whole sector, so commits must
/// never share one. `st_blksize` above 4 KiB (a preference, not a sector) is
/// capped there; a physical sector above 4 KiB is refused, since the format
/// cannot describe it.
fn write_unit(file: &DmaFile) -> io::Result<u64> {
    // SAFETY: fstat only writes into the zeroed struct we pass.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let blksize = (st.st_blksize.max(0) as u64).min(MAX_WRITE_UNIT);
    let (major, minor) = (libc::major(st.st_dev), libc::minor(st.st_dev));
    let physical = physical_sector(major, minor);
    if physical > MAX_WRITE_UNIT {
        return Err(io::Error::other(format!(
            "device {major}:{minor} has {physical}-byte physical sectors; at most {MAX_WRITE_UNIT} are supported"
        )));
    }
    Ok(file.alignment().max(physical).max(blksize).max(512))
}

/// The physical sector size from sysfs (a partition's is its disk's), or 512
/// when the device has none (tmpfs, overlay: no sectors to tear).
fn physical_sector(major: u32, minor: u32) -> u64 {
    let base = format!("/sys/dev/block/{major}:{minor}");
    [
        format!("{base}/queue/physical_block_size"),
        format!("{base}/../queue/physical_block_size"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
    .filter(|v| v.is_power_of_two())
    .unwrap_or(512)
}

/// An open WAL segment. Owned by the shard's core.
pub struct DmaDiskFile {
    file: Rc<DmaFile>,
    /// A duplicate of the file's descriptor for jobs on the blocking pool:
    /// a job owns a reference, so the descriptor it writes or syncs stays
    /// this file's until the job ends, even if the future that queued it is
    /// dropped and the file closed meanwhile (a bare number could by then
    /// name another file).
    pool_fd: Arc<OwnedFd>,
    sync_path: SyncPath,
    prealloc: Preallocation,
    alignment: u64,
    spare: SpareBuf,
    zeros: ZeroBuf,
}

impl DmaDiskFile {
    /// The device's write alignment as a length (a commit's error if it
    /// does not fit one, which a 64-bit build never sees).
    fn align(&self) -> Result<usize, CommitIoError> {
        usize::try_from(self.alignment).map_err(|_| CommitIoError::Write(io::Error::from_raw_os_error(libc::EINVAL)))
    }

    /// One `pwrite` + `fdatasync` of `buf` as a single job on the blocking
    /// pool, which hands the buffer back. If this future is dropped first,
    /// glommio keeps the job's result without dropping it, so the buffer
    /// leaks; a commit dropped half-way poisons the log (wal/mod.rs), so
    /// that happens at most once per shard.
    async fn commit_on_pool<B: AsRef<[u8]> + Send + 'static>(
        &self,
        buf: B,
        pos: u64,
    ) -> (B, Result<WriteSync, CommitIoError>) {
        let fd = self.pool_fd.clone();
        glommio::executor()
            .spawn_blocking(move || {
                let done = pwrite_then_fdatasync(&fd, buf.as_ref(), pos);
                (buf, done)
            })
            .await
    }

    /// The shared buffer of zeros, when a write of `len` zeros can use it.
    fn shared_zeros(&self, len: usize) -> Option<Rc<glommio::io::DmaBuffer>> {
        if len != crate::limits::ZERO_STEP_BYTES as usize {
            return None;
        }
        let buf = self.zeros.get_or_init(|| {
            let mut b = self.file.alloc_dma_buffer(len);
            b.as_bytes_mut().fill(0);
            Rc::new(b)
        });
        Some(buf.clone())
    }
}

impl DiskFile for DmaDiskFile {
    fn alignment(&self) -> u64 {
        self.alignment
    }

    async fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        let mut buf = self.file.alloc_dma_buffer(data.len());
        buf.as_bytes_mut().copy_from_slice(data);
        let n = self.file.write_at(buf, pos).await.map_err(to_io)?;
        whole_write("", n, data.len())
    }

    async fn write_zeros(&self, zeros: &[u8], pos: u64) -> io::Result<()> {
        let Some(buf) = self.shared_zeros(zeros.len()) else {
            return self.write_at(zeros, pos).await;
        };
        let n = self.file.write_rc_at(buf, pos).await.map_err(to_io)?;
        whole_write(" of zeros", n, zeros.len())
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        let r = self.file.read_at(pos, len).await.map_err(to_io)?;
        Ok(r.to_vec())
    }

    async fn sync(&self) -> io::Result<()> {
        faults::before_sync()?;
        match self.sync_path {
            SyncPath::Uring => self.file.fdatasync().await.map_err(to_io),
            SyncPath::BlockingPool => {
                let fd = self.pool_fd.clone();
                DmaDisk::blocking(move || fdatasync(&fd)).await
            }
        }
    }

    /// On the blocking pool, the write and the fdatasync go to its thread
    /// as one job, as the reference server does (bench/src/bin/ceiling.rs):
    /// each step through the executor (a write through io_uring, then an
    /// fdatasync handed to the pool) completes only when the executor next
    /// polls, after every task already runnable, and under load that wait
    /// was longer than the device's own time (docs/benchmarks.md).
    async fn write_and_sync(&self, data: &[u8], pos: u64) -> Result<WriteSync, CommitIoError> {
        if self.sync_path != SyncPath::BlockingPool {
            return super::write_then_sync(self, data, pos).await;
        }
        let align = self.align()?;
        let buf = AlignedBuf::refill(self.spare.take(), data, align).map_err(CommitIoError::Write)?;
        let (buf, done) = self.commit_on_pool(buf, pos).await;
        self.spare.set(Some(buf));
        done
    }

    async fn write_and_sync_owned(&self, data: Vec<u8>, pos: u64) -> (Vec<u8>, Result<WriteSync, CommitIoError>) {
        // The log's batch buffers come from the allocator's page-aligned
        // large blocks in practice (mimalloc's, for blocks this size), and
        // the log pads each commit to the alignment: checked, not assumed.
        let in_place = self.sync_path == SyncPath::BlockingPool
            && self.align().is_ok_and(|align| {
                let aligned = |n: usize| n.is_multiple_of(align.max(1));
                aligned(data.as_ptr() as usize) && aligned(data.len())
            });
        if !in_place {
            let done = self.write_and_sync(&data, pos).await;
            return (data, done);
        }
        self.commit_on_pool(data, pos).await
    }

    async fn size(&self) -> io::Result<u64> {
        self.file.file_size().await.map_err(to_io)
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        // Reserve the blocks first either way, so ENOSPC shows up here, at
        // segment creation, and never in the middle of a commit.
        faults::before_allocation()?;
        self.file.pre_allocate(len, false).await.map_err(to_io)?;
        if self.prealloc == Preallocation::ZeroFill {
            const CHUNK: u64 = 1 << 20;
            let mut pos = 0;
            while pos < len {
                let n = CHUNK.min(len - pos);
                let mut buf = self.file.alloc_dma_buffer(n as usize);
                buf.as_bytes_mut().fill(0);
                self.file.write_at(buf, pos).await.map_err(to_io)?;
                pos += n;
            }
        }
        Ok(())
    }
}

fn fdatasync(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fdatasync only takes a descriptor, which `fd` keeps open.
    if unsafe { libc::fdatasync(fd.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An O_DIRECT write of `len` bytes that wrote `n` is an error unless `n`
/// is all of them (such a write moves whole blocks or fails). `what`
/// follows "write" in the message.
fn whole_write(what: &str, n: usize, len: usize) -> io::Result<()> {
    if n == len {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::WriteZero,
        format!("short O_DIRECT write{what}: {n} of {len} bytes"),
    ))
}

/// `pwrite` of the whole buffer, then `fdatasync`, on the blocking pool's
/// thread; a short write is an error (O_DIRECT writes whole blocks or fail).
fn pwrite_then_fdatasync(fd: &OwnedFd, data: &[u8], pos: u64) -> Result<WriteSync, CommitIoError> {
    let started = Instant::now();
    let at =
        libc::off_t::try_from(pos).map_err(|_| CommitIoError::Write(io::Error::from_raw_os_error(libc::EINVAL)))?;
    // SAFETY: `data` is valid for its length and outlives the call, and `fd`
    // keeps the descriptor open.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), at) };
    // Negative only on failure, with `errno` set.
    let n = usize::try_from(n).map_err(|_| CommitIoError::Write(io::Error::last_os_error()))?;
    whole_write("", n, data.len()).map_err(CommitIoError::Write)?;
    let written = Instant::now();
    // Injected after the write, as `sync` sees it: written, not durable.
    faults::before_sync().map_err(CommitIoError::Sync)?;
    fdatasync(fd).map_err(CommitIoError::Sync)?;
    Ok(WriteSync {
        write: written - started,
        sync: written.elapsed(),
        one_job: true,
    })
}

/// A heap buffer aligned for O_DIRECT that may cross to the blocking pool's
/// thread (glommio's DMA buffers may not). Also the start-up check's block.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    /// Bytes in use, at most `layout.size()`.
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is plain memory owned by this value alone.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A copy of `data` at an address aligned to `align` (at least 512).
    pub fn copy_of(data: &[u8], align: usize) -> io::Result<Self> {
        let mut buf = AlignedBuf::with_room(data.len(), align)?;
        buf.fill(data);
        Ok(buf)
    }

    /// A copy of `data` in `spare` when it is large enough and aligned as
    /// asked, else in a new buffer with room to spare: a power of two of at
    /// least 64 KiB, so that the next commits, whose sizes vary, fit too,
    /// but no more than a full batch needs (`MAX_COMMIT_BYTES` and one
    /// large record), so a kept buffer is about 5 MiB at most.
    pub fn refill(spare: Option<AlignedBuf>, data: &[u8], align: usize) -> io::Result<Self> {
        const SMALLEST: usize = 64 * 1024;
        const LARGEST: usize = crate::limits::MAX_COMMIT_BYTES + 1024 * 1024;
        let fits = |b: &AlignedBuf| b.layout.size() >= data.len() && b.layout.align() == align.max(512);
        let mut buf = match spare.filter(fits) {
            Some(b) => b,
            None => {
                let room = data.len().checked_next_power_of_two().unwrap_or(data.len());
                AlignedBuf::with_room(room.clamp(SMALLEST, LARGEST.max(data.len())), align)?
            }
        };
        buf.fill(data);
        Ok(buf)
    }

    /// An empty buffer of `room` bytes (at least one) aligned to `align`
    /// (at least 512).
    fn with_room(room: usize, align: usize) -> io::Result<Self> {
        let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
        let layout = std::alloc::Layout::from_size_align(room.max(1), align.max(512)).map_err(|_| invalid())?;
        // SAFETY: the layout has a non-zero size.
        let ptr = std::ptr::NonNull::new(unsafe { std::alloc::alloc(layout) })
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(AlignedBuf { ptr, len: 0, layout })
    }

    /// Replaces the contents with `data`, which must fit.
    fn fill(&mut self, data: &[u8]) {
        assert!(
            data.len() <= self.layout.size(),
            "an aligned buffer is filled only within its room"
        );
        // SAFETY: `ptr` holds `layout.size() >= data.len()` bytes, owned by
        // `self` alone, so they do not overlap `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr(), data.len()) };
        self.len = data.len();
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialized bytes (copied in `fill`)
        // for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_room` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Fault injection on the real backend, compiled only with the
/// `fault-injection` feature (tests of the server binary use it). Controlled
/// by environment variables read once per process:
/// - `HEMATITE_FAULT_SYNC_AFTER=N`: every fdatasync after the first N fails with EIO.
/// - `HEMATITE_FAULT_ENOSPC_FILE=PATH`: while PATH exists, creating or
///   preallocating a segment fails with ENOSPC.
/// - `HEMATITE_FAULT_EMFILE_FILE=PATH`: while PATH exists, opening a file
///   fails with EMFILE after the open itself succeeded (where the
///   descriptor for the blocking pool is duplicated).
#[cfg(feature = "fault-injection")]
mod faults {
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    struct Config {
        sync_after: Option<u64>,
        enospc_file: Option<std::path::PathBuf>,
        emfile_file: Option<std::path::PathBuf>,
    }

    fn config() -> &'static Config {
        static C: OnceLock<Config> = OnceLock::new();
        C.get_or_init(|| Config {
            sync_after: std::env::var("HEMATITE_FAULT_SYNC_AFTER")
                .ok()
                .and_then(|v| v.parse().ok()),
            enospc_file: std::env::var_os("HEMATITE_FAULT_ENOSPC_FILE").map(Into::into),
            emfile_file: std::env::var_os("HEMATITE_FAULT_EMFILE_FILE").map(Into::into),
        })
    }

    pub fn before_sync() -> io::Result<()> {
        static SYNCS: AtomicU64 = AtomicU64::new(0);
        let n = SYNCS.fetch_add(1, Ordering::Relaxed);
        match config().sync_after {
            Some(limit) if n >= limit => Err(io::Error::from_raw_os_error(libc::EIO)),
            _ => Ok(()),
        }
    }

    pub fn before_allocation() -> io::Result<()> {
        failing_while(&config().enospc_file, libc::ENOSPC)
    }

    pub fn before_dup() -> io::Result<()> {
        failing_while(&config().emfile_file, libc::EMFILE)
    }

    /// `errno` while the flag file exists.
    fn failing_while(flag: &Option<std::path::PathBuf>, errno: i32) -> io::Result<()> {
        match flag {
            Some(p) if p.exists() => Err(io::Error::from_raw_os_error(errno)),
            _ => Ok(()),
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
mod faults {
    #[inline(always)]
    pub fn before_sync() -> std::io::Result<()> {
        Ok(())
    }
    #[inline(always)]
    pub fn before_allocation() -> std::io::Result<()> {
        Ok(())
    }
    #[inline(always)]
    pub fn before_dup() -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::{AlignedBuf, DmaDisk, SyncPath};
    use crate::disk::{Disk, DiskFile};
    use crate::limits::ZERO_STEP_BYTES;
    use std::rc::Rc;

    #[test]
    fn full_zero_steps_share_one_buffer_of_zeros_made_in_dirty_io_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let step = ZERO_STEP_BYTES as usize;
        // 512 KiB of I/O memory: after the allocator's own bookkeeping it has
        // one free block of a step's size, so every step-sized DMA buffer
        // below, the kept one included, is made in the same memory.
        let read = glommio::LocalExecutorBuilder::default()
            .io_memory(512 * 1024)
            .spawn(move || async move {
                let disk = DmaDisk::open(&path, SyncPath::BlockingPool).await.unwrap();
                let f = disk.create("zeros").await.unwrap();
                // Old bytes wherever the zeros go, as in a recycled segment.
                let old = vec![0xA5u8; step];
                for at in 0..3 {
                    f.write_at(&old, at * ZERO_STEP_BYTES).await.unwrap();
                }
                // The memory the kept buffer is then made in, left dirty.
                f.file.alloc_dma_buffer(step).as_bytes_mut().fill(0x5A);
                f.write_zeros(&vec![0u8; step], 0).await.unwrap();
                let kept = f.zeros.get().cloned().expect("a full step made the kept buffer");
                // Another write from I/O memory between two shared ones.
                f.write_at(&old, 2 * ZERO_STEP_BYTES).await.unwrap();
                f.write_zeros(&vec![0u8; step], ZERO_STEP_BYTES).await.unwrap();
                assert!(
                    Rc::ptr_eq(&kept, f.zeros.get().unwrap()),
                    "both full steps shared one buffer"
                );
                // A shorter step (the end of a pass) fills a buffer of its own.
                f.write_zeros(&vec![0u8; 4096], 2 * ZERO_STEP_BYTES).await.unwrap();
                f.sync().await.unwrap();
                f.read_at(0, 3 * step).await.unwrap()
            })
            .expect("glommio executor starts (io_uring available, memlock large enough)")
            .join()
            .unwrap();
        assert_eq!(read.len(), 3 * step);
        let (zeroed, rest) = read.split_at(2 * step + 4096);
        assert!(
            zeroed.iter().all(|&b| b == 0),
            "every old byte under the zeros was overwritten"
        );
        assert!(
            rest.iter().all(|&b| b == 0xA5),
            "the short step wrote its own length only"
        );
    }

    #[test]
    fn a_spare_buffer_is_reused_only_when_it_fits() {
        let first = AlignedBuf::refill(None, &[1u8; 8192], 4096).unwrap();
        assert_eq!(first.as_slice(), &[1u8; 8192][..]);
        assert_eq!(first.layout.size(), 64 * 1024, "room to spare for the next commits");
        assert_eq!(first.ptr.as_ptr() as usize % 4096, 0);
        let at = first.ptr;

        // Smaller contents in the same memory: the old bytes beyond are not shown.
        let second = AlignedBuf::refill(Some(first), &[2u8; 4096], 4096).unwrap();
        assert_eq!(second.ptr, at, "a spare that fits is reused");
        assert_eq!(second.as_slice(), &[2u8; 4096][..]);

        // Larger than the room, or another alignment: a new buffer.
        let big = vec![3u8; 65 * 1024];
        let third = AlignedBuf::refill(Some(second), &big, 4096).unwrap();
        assert_eq!(third.layout.size(), 128 * 1024);
        assert_eq!(third.as_slice(), &big[..]);
        let fourth = AlignedBuf::refill(Some(third), &[4u8; 512], 512).unwrap();
        assert_eq!(fourth.layout.align(), 512);
        assert_eq!(fourth.as_slice(), &[4u8; 512][..]);

        // A full batch is not rounded up to the next power of two (8 MiB).
        let full = vec![5u8; crate::limits::MAX_COMMIT_BYTES + 4096];
        let fifth = AlignedBuf::refill(Some(fourth), &full, 4096).unwrap();
        assert_eq!(fifth.layout.size(), crate::limits::MAX_COMMIT_BYTES + 1024 * 1024);
        assert_eq!(fifth.as_slice(), &full[..]);
    }
}
