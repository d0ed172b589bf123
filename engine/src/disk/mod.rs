//! The disk beneath a shard's WAL, as a small trait with these
//! implementations: [`dma::DmaDisk`] (glommio `DmaFile`: O_DIRECT through
//! io_uring) for production, [`mem::MemDisk`] (plain memory, nothing
//! durable) for `--in-memory`, [`sim::SimDisk`] (in memory, with a
//! durability model and fault injection) so queue logic and crash behaviour
//! are testable without io_uring, and [`std_fs::StdDisk`] for offline tools.
//!
//! A `Disk` is rooted at one directory and owned by one shard (one core); its
//! futures are not `Send`.

pub mod dma;
pub mod mem;
pub mod sim;
pub mod std_fs;

use std::io;
use std::time::{Duration, Instant};

/// A directory of files.
#[allow(async_fn_in_trait)] // single-core by design: no Send bounds wanted
pub trait Disk: Clone + 'static {
    type File: DiskFile;
    /// Creates `name`; fails if it already exists.
    async fn create(&self, name: &str) -> io::Result<Self::File>;
    /// Opens an existing file for reading and writing.
    async fn open(&self, name: &str) -> io::Result<Self::File>;
    /// Names of the files in the directory.
    async fn list(&self) -> io::Result<Vec<String>>;
    async fn remove(&self, name: &str) -> io::Result<()>;
    async fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Cuts `name` down to `len` bytes; callers only ever pass less than
    /// its size. Only for files already out of the log (a discarded
    /// segment): freeing a segment's blocks a slice at a time keeps each
    /// step short where freeing blocks is slow (a discard per deletion on a
    /// disk mounted with `discard`). Not durable until the file is synced,
    /// and nothing needs it to be: a restart deletes the file.
    async fn shrink(&self, name: &str, len: u64) -> io::Result<()>;
    /// Makes creations, removals and renames durable.
    async fn sync_dir(&self) -> io::Result<()>;
    /// A human name for `name` (its full path), for error messages.
    fn describe(&self, name: &str) -> String;
    /// Whether the log keeps dead segments as spare files to reuse. Off for
    /// a disk in memory, where a spare would only hold memory.
    fn keeps_spares(&self) -> bool {
        true
    }
}

/// How long a commit's write and its fdatasync took (wall clock; they
/// describe the device and decide nothing), and whether they ran as one
/// job off the executor. A one-job commit's times are taken on the pool's
/// thread, so they leave out the hand-over that a two-step commit's include.
#[derive(Debug, Clone, Copy)]
pub struct WriteSync {
    pub write: Duration,
    pub sync: Duration,
    pub one_job: bool,
}

/// Which step of [`DiskFile::write_and_sync`] failed.
#[derive(Debug)]
pub enum CommitIoError {
    Write(io::Error),
    Sync(io::Error),
}

/// One open file. Writes must be aligned to [`DiskFile::alignment`] in both
/// position and length (O_DIRECT rules); reads may be unaligned.
#[allow(async_fn_in_trait)]
pub trait DiskFile: 'static {
    /// The unit every write is aligned to: the largest of the device's
    /// logical block size, its physical sector size and the file system's
    /// preferred I/O size (`st_blksize`). Aligning commits to the physical
    /// sector means a torn write of one commit can never touch a sector that
    /// holds an earlier, acknowledged one (docs/STORAGE_FORMAT.md, "What the
    /// engine assumes of the disk").
    fn alignment(&self) -> u64;
    async fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()>;
    /// [`DiskFile::write_at`] of `zeros`, which holds only zero bytes. A
    /// disk may write them from a buffer of zeros it keeps instead (the
    /// real one does for zero-ahead's full steps, which then copy nothing).
    async fn write_zeros(&self, zeros: &[u8], pos: u64) -> io::Result<()> {
        self.write_at(zeros, pos).await
    }
    /// Reads up to `len` bytes; fewer only at the end of the file.
    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Vec<u8>>;
    /// fdatasync: everything written before the call is durable when it returns.
    async fn sync(&self) -> io::Result<()>;
    /// A group commit's two steps: [`DiskFile::write_at`], then
    /// [`DiskFile::sync`], with what each took. A disk may run both in one
    /// hop off the executor (the real one does, see `dma.rs`); the steps,
    /// their order and what a failure of either means are the same.
    async fn write_and_sync(&self, data: &[u8], pos: u64) -> Result<WriteSync, CommitIoError> {
        write_then_sync(self, data, pos).await
    }
    /// [`DiskFile::write_and_sync`] of a buffer the disk may hold until
    /// it is done, and gives back. The real one writes it where it is when
    /// its address suits O_DIRECT, instead of copying it into an aligned
    /// buffer first (that copy of each commit's bytes ran at 2-20 GB/s on
    /// the project's machine: docs/benchmarks.md, "Fewer allocations, a
    /// signature remembered, the commit's copy gone").
    async fn write_and_sync_owned(&self, data: Vec<u8>, pos: u64) -> (Vec<u8>, Result<WriteSync, CommitIoError>) {
        let done = self.write_and_sync(&data, pos).await;
        (data, done)
    }
    /// Goes by the name the file was opened with (glommio's `file_size` is
    /// a statx of that path): after a rename, open the file again first.
    async fn size(&self) -> io::Result<u64>;
    /// Reserves space up to `len` bytes (the file grows; new bytes read as zero).
    async fn allocate(&self, len: u64) -> io::Result<()>;
}

/// [`DiskFile::write_at`], then [`DiskFile::sync`], each its own step.
pub async fn write_then_sync<F: DiskFile + ?Sized>(
    file: &F,
    data: &[u8],
    pos: u64,
) -> Result<WriteSync, CommitIoError> {
    let started = Instant::now();
    file.write_at(data, pos).await.map_err(CommitIoError::Write)?;
    let written = Instant::now();
    file.sync().await.map_err(CommitIoError::Sync)?;
    Ok(WriteSync {
        write: written - started,
        sync: written.elapsed(),
        one_job: false,
    })
}

/// Names of the regular files in `dir` (both real disks list this way).
pub(crate) fn list_files(dir: &std::path::Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            if let Some(n) = e.file_name().to_str() {
                out.push(n.to_string());
            }
        }
    }
    Ok(out)
}
