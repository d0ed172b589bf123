//! The disk of `--in-memory` mode: files are byte vectors in RAM, nothing
//! survives the process, `sync` and `sync_dir` do nothing.
//!
//! Why not [`super::sim::SimDisk`]: the simulator keeps two images of every
//! file (what reads see and what a crash would keep), copies every synced
//! range from one to the other, records every write ever made for its
//! corruption model, asserts on unaligned writes and keeps a removed file's
//! bytes for its crash images. In production that is twice the memory, a
//! copy per commit and a log that only grows. This disk keeps one image,
//! frees a file's memory when its last handle goes, and refuses what a real
//! disk would refuse with an error instead of a panic. The shard above it is
//! the same code as on a real disk: same records, same group commit, same
//! compaction (which is what bounds the memory as messages are deleted).
//!
//! Owned by one shard (one core); clones share the same directory.

use super::{Disk, DiskFile};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::rc::Rc;

/// The write alignment the memory disk asks of the WAL. The smallest one the
/// segment format accepts (512 to 4096), so commits waste the least padding;
/// there are no sectors to tear.
pub const MEM_ALIGNMENT: u64 = 512;

/// One file's bytes (owned by the disk's core). `reserved` is what `allocate` promised: the file's
/// size, reading as zeros past what was written, without the memory.
#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    reserved: u64,
}

/// A directory of in-memory files.
#[derive(Clone, Default)]
pub struct MemDisk {
    files: Rc<RefCell<HashMap<String, Rc<RefCell<Inode>>>>>,
}

impl MemDisk {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held by the files still named in the directory (written
    /// bytes, not reservations): what the shard's log costs in memory.
    pub fn bytes_in_use(&self) -> u64 {
        self.files.borrow().values().map(|f| f.borrow().data.len() as u64).sum()
    }
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl Disk for MemDisk {
    type File = MemFile;

    async fn create(&self, name: &str) -> io::Result<MemFile> {
        let mut files = self.files.borrow_mut();
        if files.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let inode = Rc::new(RefCell::new(Inode::default()));
        files.insert(name.to_string(), inode.clone());
        Ok(MemFile { inode })
    }

    async fn open(&self, name: &str) -> io::Result<MemFile> {
        let inode = self.files.borrow().get(name).cloned().ok_or_else(not_found)?;
        Ok(MemFile { inode })
    }

    async fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.files.borrow().keys().cloned().collect())
    }

    /// The memory goes with the last handle (a reader may still hold one,
    /// as on Unix).
    async fn remove(&self, name: &str) -> io::Result<()> {
        self.files.borrow_mut().remove(name).map(drop).ok_or_else(not_found)
    }

    fn keeps_spares(&self) -> bool {
        false
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let inode = files.remove(from).ok_or_else(not_found)?;
        files.insert(to.to_string(), inode);
        Ok(())
    }

    async fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        let files = self.files.borrow();
        let mut inode = files.get(name).ok_or_else(not_found)?.borrow_mut();
        inode.data.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        Ok(())
    }

    async fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("memory:{name}")
    }
}

/// An open in-memory file; valid after its name is removed. Owned by the
/// shard's core, like its disk.
pub struct MemFile {
    inode: Rc<RefCell<Inode>>,
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.to_string())
}

impl DiskFile for MemFile {
    fn alignment(&self) -> u64 {
        MEM_ALIGNMENT
    }

    /// Refuses unaligned writes like O_DIRECT does (EINVAL), so the WAL
    /// keeps to the same rules in memory as on disk.
    async fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        if !pos.is_multiple_of(MEM_ALIGNMENT) || !(data.len() as u64).is_multiple_of(MEM_ALIGNMENT) {
            return Err(invalid("unaligned write"));
        }
        let start = usize::try_from(pos).map_err(|_| invalid("write offset out of range"))?;
        let end = start
            .checked_add(data.len())
            .ok_or_else(|| invalid("write end out of range"))?;
        let mut f = self.inode.borrow_mut();
        if f.data.len() < end {
            f.data.resize(end, 0);
        }
        if let Some(dst) = f.data.get_mut(start..end) {
            dst.copy_from_slice(data);
        }
        Ok(())
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        let f = self.inode.borrow();
        let size = (f.data.len() as u64).max(f.reserved);
        let end = pos.saturating_add(len as u64).min(size);
        if pos >= end {
            return Ok(Vec::new());
        }
        // Both below `size`, which is at most a written length or a
        // reservation, and a reservation beyond usize was refused.
        let (start, end) = (pos as usize, end as usize);
        let mut out = vec![0u8; end - start];
        let written_end = end.min(f.data.len());
        if start < written_end {
            if let (Some(dst), Some(src)) = (out.get_mut(..written_end - start), f.data.get(start..written_end)) {
                dst.copy_from_slice(src);
            }
        }
        Ok(out)
    }

    /// Nothing to make durable: the process is the storage.
    async fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    async fn size(&self) -> io::Result<u64> {
        let f = self.inode.borrow();
        Ok((f.data.len() as u64).max(f.reserved))
    }

    /// Records the size and reserves the vector's capacity, so the file never
    /// reallocates (and copies itself) while commits fill it. The pages are
    /// only touched, and only cost memory, as commits write them.
    async fn allocate(&self, len: u64) -> io::Result<()> {
        let want = usize::try_from(len).map_err(|_| invalid("allocation out of range"))?;
        let mut f = self.inode.borrow_mut();
        let more = want.saturating_sub(f.data.len());
        f.data
            .try_reserve_exact(more)
            .map_err(|_| io::Error::from_raw_os_error(libc::ENOSPC))?;
        f.reserved = f.reserved.max(len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn files_read_back_reserve_lazily_and_free_on_remove() {
        block_on(async {
            let d = MemDisk::new();
            let f = d.create("a").await.unwrap();
            assert!(d.create("a").await.is_err(), "create refuses an existing name");
            f.allocate(4096).await.unwrap();
            assert_eq!(f.size().await.unwrap(), 4096);
            assert_eq!(d.bytes_in_use(), 0, "a reservation costs no bytes");
            f.write_at(&[7u8; 512], 512).await.unwrap();
            let r = f.read_at(256, 1024).await.unwrap();
            assert_eq!(r.len(), 1024);
            assert!(r[..256].iter().all(|&b| b == 0) && r[256..768].iter().all(|&b| b == 7));
            assert!(r[768..].iter().all(|&b| b == 0), "reserved bytes read as zeros");
            assert_eq!(f.read_at(4000, 1000).await.unwrap().len(), 96, "short only at the end");
            assert!(f.read_at(u64::MAX, 10).await.unwrap().is_empty());
            // O_DIRECT's rules, as errors.
            assert!(f.write_at(&[1u8; 100], 0).await.is_err());
            assert!(f.write_at(&[1u8; 512], 100).await.is_err());
            assert!(f.write_at(&[1u8; 512], u64::MAX - 511).await.is_err());
            d.rename("a", "b").await.unwrap();
            assert_eq!(d.list().await.unwrap(), vec!["b".to_string()]);
            let again = d.open("b").await.unwrap();
            assert_eq!(again.read_at(512, 1).await.unwrap(), vec![7]);
            d.remove("b").await.unwrap();
            assert!(d.open("b").await.is_err());
            assert_eq!(d.bytes_in_use(), 0);
            // An open handle still reads, as on Unix.
            assert_eq!(f.read_at(512, 1).await.unwrap(), vec![7]);
        });
    }
}
