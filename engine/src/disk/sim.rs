//! An in-memory disk with a durability model, for tests and benchmarks.
//!
//! Each file keeps two images: `live` (what reads see) and `durable` (what
//! survives a crash). `sync` copies live to durable; `sync_dir` makes the
//! directory's names durable. [`SimDisk::crash`] returns the disk a restart
//! would find: the durable images under the durable names, optionally with a
//! random subset of the unsynced sectors written too (a torn write).
//! Owned by one thread; clones share the same state.
//!
//! The device has a logical block size (what O_DIRECT writes must be aligned
//! to) and a physical sector size (what the device writes as one unit). A
//! torn write ([`CrashMode::TearUnsynced`]) leaves each physical sector it
//! wholly covers either old or new; a physical sector it covers only in part
//! is a read-modify-write inside the device, and torn it may come back as
//! garbage, bytes outside the write included (docs/STORAGE_FORMAT.md, "What
//! the engine assumes of the disk").

use super::{Disk, DiskFile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::rc::Rc;

/// The default simulated device: 512-byte logical blocks and physical sectors.
pub const SIM_SECTOR: u64 = 512;

/// Faults to inject. Each countdown fails the call after that many successes.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    pub fail_sync_after: Option<u64>,
    pub fail_write_after: Option<u64>,
    /// `create` and `allocate` fail with ENOSPC.
    pub no_space: bool,
    /// The read after this many reads returns its first logical block as
    /// zeros (a sector that reads back empty: a lost or misdirected write
    /// seen from the reader's side). Fires once.
    pub zero_read_after: Option<u64>,
    /// The read after this many reads returns one bit flipped (bad media,
    /// a bad cable). Fires once.
    pub flip_read_after: Option<u64>,
    /// Extra turns an fdatasync gives other tasks before it completes (a
    /// slower device): more work interleaves with each commit in flight.
    pub sync_yields: u32,
    /// Turns a write of nothing but zeros gives other tasks before its data
    /// lands: the zeros the log writes ahead (`WalConfig::zero_ahead`) are
    /// still in flight when the writer reaches their segment.
    pub zero_write_yields: u32,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SimStats {
    pub writes: u64,
    pub bytes_written: u64,
    pub syncs: u64,
    /// Writes that ended past the space reserved with `allocate`: on a full
    /// disk these are the writes that fail with ENOSPC.
    pub writes_past_allocation: u64,
    /// The most bytes a file still held when it was removed: a whole
    /// segment's worth means its blocks were all freed in one step.
    pub largest_removed: u64,
}

/// What a crash does to writes that were not synced.
#[derive(Debug, Clone, Copy)]
pub enum CrashMode {
    /// They vanish.
    LoseUnsynced,
    /// Each of their sectors independently made it to disk or not.
    TearUnsynced { seed: u64 },
}

#[derive(Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    unsynced: Vec<(u64, usize)>,
    /// Bytes reserved by `allocate` (or present after a restart).
    allocated: u64,
}

#[derive(Default)]
struct State {
    next_ino: u64,
    inodes: HashMap<u64, Inode>,
    live_names: BTreeMap<String, u64>,
    durable_names: BTreeMap<String, u64>,
    faults: Faults,
    stats: SimStats,
    /// Logical block size (write alignment) and physical sector size (tear unit).
    logical: u64,
    physical: u64,
    /// Every write ever made, oldest first: (inode, offset, length). The
    /// simulator aims its corruption at old writes with it, sparing the
    /// newest ones (damage to the log's last commit is indistinguishable
    /// from a torn write; docs/STORAGE_FORMAT.md, "Recovery").
    writes: Vec<(u64, u64, usize)>,
}

#[derive(Clone, Default)]
pub struct SimDisk {
    st: Rc<RefCell<State>>,
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

fn countdown(c: &mut Option<u64>) -> bool {
    match c {
        Some(0) => true,
        Some(n) => {
            *n -= 1;
            false
        }
        None => false,
    }
}

impl SimDisk {
    pub fn new() -> Self {
        Self::with_sectors(SIM_SECTOR, SIM_SECTOR)
    }

    /// A device with `logical`-byte blocks and `physical`-byte sectors (both
    /// powers of two, `logical <= physical`), such as 512e disks (512/4096).
    pub fn with_sectors(logical: u64, physical: u64) -> Self {
        assert!(logical.is_power_of_two() && physical.is_power_of_two() && logical <= physical);
        let d = SimDisk::default();
        {
            let mut st = d.st.borrow_mut();
            st.logical = logical;
            st.physical = physical;
        }
        d
    }

    pub fn set_faults(&self, f: Faults) {
        self.st.borrow_mut().faults = f;
    }

    pub fn stats(&self) -> SimStats {
        self.st.borrow().stats
    }

    /// The disk a restart after a power loss would see.
    pub fn crash(&self, mode: CrashMode) -> SimDisk {
        let st = self.st.borrow();
        let mut rng = match mode {
            CrashMode::TearUnsynced { seed } => Some(StdRng::seed_from_u64(seed)),
            CrashMode::LoseUnsynced => None,
        };
        let mut out = State {
            next_ino: st.next_ino,
            logical: st.logical,
            physical: st.physical,
            writes: st.writes.clone(),
            ..Default::default()
        };
        let phys = st.physical;
        for (name, ino) in &st.durable_names {
            let node = &st.inodes[ino];
            let mut data = node.durable.clone();
            if let Some(rng) = rng.as_mut() {
                for &(pos, len) in &node.unsynced {
                    let end = pos + len as u64;
                    // Every physical sector the write touches, one by one.
                    let mut sector = pos / phys * phys;
                    while sector < end {
                        let (s, e) = (pos.max(sector), end.min(sector + phys));
                        let whole = s == sector && e == sector + phys;
                        let torn_garbage = !whole && rng.gen_ratio(1, 3);
                        if torn_garbage {
                            // A torn read-modify-write: the whole physical
                            // sector, neighbours' bytes included, is garbage.
                            let se = (sector + phys) as usize;
                            if data.len() < se {
                                data.resize(se, 0);
                            }
                            rng.fill(&mut data[sector as usize..se]);
                        } else if rng.gen_bool(0.5) && (e as usize) <= node.live.len() {
                            if data.len() < e as usize {
                                data.resize(e as usize, 0);
                            }
                            data[s as usize..e as usize].copy_from_slice(&node.live[s as usize..e as usize]);
                        }
                        sector += phys;
                    }
                }
            }
            let allocated = node.allocated.max(data.len() as u64);
            out.inodes.insert(
                *ino,
                Inode {
                    live: data.clone(),
                    durable: data,
                    unsynced: Vec::new(),
                    allocated,
                },
            );
            out.live_names.insert(name.clone(), *ino);
            out.durable_names.insert(name.clone(), *ino);
        }
        SimDisk {
            st: Rc::new(RefCell::new(out)),
        }
    }

    /// XORs `mask` into one byte of a file, durably (bit rot, a bad sector).
    pub fn corrupt(&self, name: &str, offset: u64, mask: u8) {
        let mut st = self.st.borrow_mut();
        let ino = st.live_names[name];
        let node = st.inodes.get_mut(&ino).expect("inode");
        node.live[offset as usize] ^= mask;
        if (offset as usize) < node.durable.len() {
            node.durable[offset as usize] ^= mask;
        }
    }

    /// Overwrites bytes durably.
    pub fn overwrite(&self, name: &str, offset: u64, bytes: &[u8]) {
        let mut st = self.st.borrow_mut();
        let ino = st.live_names[name];
        let node = st.inodes.get_mut(&ino).expect("inode");
        for (img, _) in [(&mut node.live, 0), (&mut node.durable, 1)] {
            let end = offset as usize + bytes.len();
            if img.len() < end {
                img.resize(end, 0);
            }
            img[offset as usize..end].copy_from_slice(bytes);
        }
    }

    /// Writes made so far, newest first, with the name their file has now.
    /// Left out: writes to files since removed, and writes a newer write to
    /// the same file overlaps (a reused file's earlier life): their bytes
    /// are no longer what the file holds there. Also writes past the file's
    /// end: the file was cut down since (a discarded segment).
    pub fn writes_newest_first(&self) -> Vec<(String, u64, usize)> {
        let st = self.st.borrow();
        let names: HashMap<u64, &String> = st.live_names.iter().map(|(n, i)| (*i, n)).collect();
        let mut newer: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        let mut out = Vec::new();
        for &(ino, pos, len) in st.writes.iter().rev() {
            let end = pos + len as u64;
            let seen = newer.entry(ino).or_default();
            let covered = seen.iter().any(|&(p, e)| p < end && pos < e);
            seen.push((pos, end));
            let there = st.inodes.get(&ino).is_some_and(|n| end <= n.live.len() as u64);
            if let (false, true, Some(n)) = (covered, there, names.get(&ino)) {
                out.push(((*n).clone(), pos, len));
            }
        }
        out
    }

    /// The device's logical block and physical sector sizes.
    pub fn sectors(&self) -> (u64, u64) {
        let st = self.st.borrow();
        (st.logical, st.physical)
    }

    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let st = self.st.borrow();
        st.live_names.get(name).map(|i| st.inodes[i].live.clone())
    }

    /// The identity of the file `name` names now: kept by a rename and by
    /// [`SimDisk::crash`], so damage to a file can be followed when the
    /// engine renames it (a spare or discard taken up as a segment).
    pub fn file_id(&self, name: &str) -> Option<u64> {
        self.st.borrow().live_names.get(name).copied()
    }

    /// How many writes the disk has seen: a mark for
    /// [`SimDisk::overwritten_since`].
    pub fn write_mark(&self) -> usize {
        self.st.borrow().writes.len()
    }

    /// Whether one write after `mark` to file `id` covered all of
    /// `pos..pos + len`: damage injected there since is gone.
    pub fn overwritten_since(&self, id: u64, mark: usize, pos: u64, len: u64) -> bool {
        let st = self.st.borrow();
        st.writes
            .get(mark..)
            .unwrap_or_default()
            .iter()
            .any(|&(ino, p, l)| ino == id && p <= pos && pos + len <= p + l as u64)
    }

    pub fn file_names(&self) -> Vec<String> {
        self.st.borrow().live_names.keys().cloned().collect()
    }

    /// Total bytes of all files (their logical sizes).
    pub fn total_bytes(&self) -> u64 {
        let st = self.st.borrow();
        st.live_names.values().map(|i| st.inodes[i].live.len() as u64).sum()
    }
}

impl Disk for SimDisk {
    type File = SimFile;

    async fn create(&self, name: &str) -> io::Result<SimFile> {
        let mut st = self.st.borrow_mut();
        if st.faults.no_space {
            return Err(enospc());
        }
        if st.live_names.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        st.next_ino += 1;
        let ino = st.next_ino;
        st.inodes.insert(ino, Inode::default());
        st.live_names.insert(name.to_string(), ino);
        Ok(SimFile {
            disk: self.clone(),
            ino,
            name: name.to_string(),
        })
    }

    async fn open(&self, name: &str) -> io::Result<SimFile> {
        let st = self.st.borrow();
        let ino = *st
            .live_names
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(SimFile {
            disk: self.clone(),
            ino,
            name: name.to_string(),
        })
    }

    async fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.file_names())
    }

    async fn remove(&self, name: &str) -> io::Result<()> {
        let mut st = self.st.borrow_mut();
        let ino = st
            .live_names
            .remove(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let held = st.inodes.get(&ino).map_or(0, |n| n.live.len() as u64);
        st.stats.largest_removed = st.stats.largest_removed.max(held);
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut st = self.st.borrow_mut();
        let ino = st
            .live_names
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.live_names.insert(to.to_string(), ino);
        Ok(())
    }

    /// Cut at once in both the live and the durable contents: only files
    /// out of the log are shrunk, and a restart deletes them either way.
    async fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        let mut st = self.st.borrow_mut();
        let ino = *st
            .live_names
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let n = st.inodes.get_mut(&ino).expect("inode of a live name");
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        n.live.truncate(len);
        n.durable.truncate(len);
        n.unsynced.clear();
        n.allocated = n.allocated.min(len as u64);
        Ok(())
    }

    async fn sync_dir(&self) -> io::Result<()> {
        let mut st = self.st.borrow_mut();
        st.durable_names = st.live_names.clone();
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("sim:{name}")
    }
}

/// A handle on a simulated file; valid after the name is removed, as on Unix.
pub struct SimFile {
    disk: SimDisk,
    ino: u64,
    /// The name it was opened by: `size` goes by it, as glommio's does.
    name: String,
}

impl SimFile {
    fn with<R>(&self, f: impl FnOnce(&mut Inode) -> R) -> R {
        let mut st = self.disk.st.borrow_mut();
        f(st.inodes.get_mut(&self.ino).expect("inode of an open file"))
    }
}

impl DiskFile for SimFile {
    /// Like the real backend: the larger of the logical block and the
    /// physical sector, so no two commits ever share a physical sector.
    fn alignment(&self) -> u64 {
        let st = self.disk.st.borrow();
        st.logical.max(st.physical)
    }

    async fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        let logical = self.disk.st.borrow().logical;
        assert!(
            pos.is_multiple_of(logical) && (data.len() as u64).is_multiple_of(logical),
            "unaligned O_DIRECT write"
        );
        {
            let allocated = self.with(|n| n.allocated);
            let mut st = self.disk.st.borrow_mut();
            if countdown(&mut st.faults.fail_write_after) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            if pos + data.len() as u64 > allocated {
                // Past the reservation the file needs new blocks.
                st.stats.writes_past_allocation += 1;
                if st.faults.no_space {
                    return Err(enospc());
                }
            }
            st.stats.writes += 1;
            st.stats.bytes_written += data.len() as u64;
            st.writes.push((self.ino, pos, data.len()));
        }
        // Only a disk given the turns looks at the bytes.
        let turns = self.disk.st.borrow().faults.zero_write_yields;
        if turns > 0 && data.iter().all(|&b| b == 0) {
            for _ in 0..turns {
                futures_lite::future::yield_now().await;
            }
        }
        self.with(|n| {
            let end = pos as usize + data.len();
            if n.live.len() < end {
                n.live.resize(end, 0);
            }
            n.live[pos as usize..end].copy_from_slice(data);
            n.unsynced.push((pos, data.len()));
        });
        Ok(())
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        // A real read takes time: let other tasks run meanwhile, so races
        // with a read in flight are reachable in tests.
        futures_lite::future::yield_now().await;
        let (zero, flip, logical) = {
            let mut st = self.disk.st.borrow_mut();
            let zero = countdown(&mut st.faults.zero_read_after);
            let flip = countdown(&mut st.faults.flip_read_after);
            if zero {
                st.faults.zero_read_after = None;
            }
            if flip {
                st.faults.flip_read_after = None;
            }
            (zero, flip, st.logical)
        };
        let mut out = self.with(|n| {
            let s = (pos as usize).min(n.live.len());
            let e = (pos as usize + len).min(n.live.len());
            n.live[s..e].to_vec()
        });
        if zero {
            // The logical block holding the read's first byte reads as zeros.
            let block_end = (pos / logical + 1) * logical;
            let n = ((block_end - pos) as usize).min(out.len());
            out[..n].fill(0);
        }
        if flip && !out.is_empty() {
            let i = (pos as usize * 7 + out.len() / 3) % out.len();
            out[i] ^= 0x10;
        }
        Ok(out)
    }

    async fn sync(&self) -> io::Result<()> {
        // Let other tasks run while the "device" flushes, so group commit has
        // something to group, as on a real disk.
        let extra = self.disk.st.borrow().faults.sync_yields;
        for _ in 0..=extra {
            futures_lite::future::yield_now().await;
        }
        {
            let mut st = self.disk.st.borrow_mut();
            if countdown(&mut st.faults.fail_sync_after) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            st.stats.syncs += 1;
        }
        self.with(|n| {
            // Copy only what changed: segments are large and syncs frequent.
            n.durable.resize(n.live.len(), 0);
            for (pos, len) in n.unsynced.drain(..) {
                let s = (pos as usize).min(n.live.len());
                let e = (pos as usize + len).min(n.live.len());
                n.durable[s..e].copy_from_slice(&n.live[s..e]);
            }
        });
        Ok(())
    }

    /// Like glommio's `DmaFile::file_size` (a statx of the path it was
    /// opened by): fails once that name is gone or names another file.
    async fn size(&self) -> io::Result<u64> {
        if self.disk.st.borrow().live_names.get(&self.name) != Some(&self.ino) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        Ok(self.with(|n| n.live.len() as u64))
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        if self.disk.st.borrow().faults.no_space {
            return Err(enospc());
        }
        self.with(|n| {
            if (n.live.len() as u64) < len {
                n.live.resize(len as usize, 0);
            }
            n.allocated = n.allocated.max(len);
        });
        Ok(())
    }
}
