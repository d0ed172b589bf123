//! The real backend: glommio `DmaFile` (O_DIRECT, io_uring). Writes,
//! restart without a clean shutdown, torn tail, and mid-log corruption, on
//! real files in a temporary directory.

use engine::disk::dma::{DmaDisk, SyncPath};
use engine::model::Metadata;
use engine::shard::ShardConfig;
use engine::wal::segment_name;
use engine::{Shard, StorageError, SystemClock};
use glommio::LocalExecutorBuilder;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;

const ACCT: &str = "devstoreaccount1";

/// Runs `f` on a fresh glommio executor with a small io_memory (memlock is 8 MiB).
fn on_glommio<T: Send + 'static, Fut: Future<Output = T> + 'static>(f: impl FnOnce() -> Fut + Send + 'static) -> T {
    LocalExecutorBuilder::default()
        .io_memory(512 * 1024)
        .spawn(move || async move { f().await })
        .expect("glommio executor starts (io_uring available, memlock large enough)")
        .join()
        .expect("executor thread finishes")
}

fn cfg() -> ShardConfig {
    let mut c = ShardConfig::new(0);
    c.segment_bytes = engine::limits::MIN_SEGMENT_BYTES;
    c.body_cache_bytes = 8 * 1024;
    c
}

async fn open(dir: &Path, sync: SyncPath) -> Result<Shard<DmaDisk>, StorageError> {
    let disk = DmaDisk::open(dir, sync).await.expect("data dir opens with O_DIRECT");
    Shard::open(disk, cfg(), Rc::new(SystemClock)).await
}

fn fill(dir: PathBuf, sync: SyncPath, n: usize) -> Vec<String> {
    on_glommio(move || async move {
        let s = open(&dir, sync).await.unwrap();
        s.create_queue(ACCT, "real", Metadata(vec![("Disk".into(), "dma".into())]))
            .await
            .unwrap();
        let mut texts = Vec::new();
        for i in 0..n {
            let t = format!("{i:05} {}", "d".repeat(i * 37 % 3000));
            s.put_message(ACCT, "real", t.clone(), None, Some(-1)).await.unwrap();
            texts.push(t);
        }
        // Dropped without any shutdown: whatever was acknowledged must be on disk.
        texts
    })
}

fn texts(dir: PathBuf) -> Result<Vec<String>, String> {
    on_glommio(move || async move {
        let s = open(&dir, SyncPath::BlockingPool).await.map_err(|e| e.to_string())?;
        let dump = s.dump().await.map_err(|e| e.to_string())?;
        Ok(dump
            .get(&(ACCT.to_string(), "real".to_string()))
            .map(|q| q.messages.iter().map(|(_, t)| t.clone()).collect())
            .unwrap_or_default())
    })
}

#[test]
fn write_restart_and_read_back_with_both_sync_paths() {
    for sync in [SyncPath::BlockingPool, SyncPath::Uring] {
        let dir = tempfile::tempdir().unwrap();
        let written = fill(dir.path().to_path_buf(), sync, 200);
        assert_eq!(texts(dir.path().to_path_buf()).unwrap(), written, "{sync:?}");
        // and again: a recovered log is sealed and a new segment starts each time
        assert_eq!(texts(dir.path().to_path_buf()).unwrap(), written, "{sync:?}");
    }
}

fn last_segment(dir: &Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        // Not the next segment, prepared ahead and still empty.
        .filter(|p| std::fs::read(p).unwrap().iter().skip(4096).any(|&b| b != 0))
        .collect();
    v.sort();
    v.pop().unwrap()
}

#[test]
fn torn_tail_on_a_real_file_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    // Few enough puts that the log does not rotate: commits are padded to
    // the device's write unit (4 KiB here), and the first commit of a
    // rotated-into segment is vouched for by the previous segment's seal, so
    // zeroing it is corruption, not a torn tail.
    let written = fill(dir.path().to_path_buf(), SyncPath::BlockingPool, 20);
    // Zero the second half of the last commit, as a torn write would.
    let seg = last_segment(dir.path());
    let mut bytes = std::fs::read(&seg).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    for b in &mut bytes[end - 200..=end] {
        *b = 0;
    }
    std::fs::write(&seg, &bytes).unwrap();
    let got = texts(dir.path().to_path_buf()).expect("a torn tail is never fatal");
    assert_eq!(got[..], written[..got.len()]);
    assert_eq!(got.len(), written.len() - 1, "exactly the torn commit is lost");
}

#[test]
fn bit_flip_mid_log_on_a_real_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path().to_path_buf(), SyncPath::BlockingPool, 120);
    let first = dir.path().join(segment_name(1));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[4096 + 40] ^= 0x04;
    std::fs::write(&first, &bytes).unwrap();
    let err = texts(dir.path().to_path_buf()).unwrap_err();
    assert!(
        err.contains("00000000000000000001.wal") && err.contains("offset 4128"),
        "{err}"
    );
}

/// Recycled segments on real files (docs/STORAGE_FORMAT.md, "Recycled
/// segments"): churn makes dead segments, their files come back as new ones
/// (a handle renamed away from the name it was opened by must not be used
/// for calls that go by name), and a restart reads exactly the live messages.
#[test]
fn dead_segments_are_reused_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let kept = on_glommio(move || async move {
        let s = open(&path, SyncPath::BlockingPool).await.unwrap();
        s.create_queue(ACCT, "real", Metadata::default()).await.unwrap();
        for round in 0..1_500u32 {
            let t = format!("{round:05} {}", "r".repeat(900));
            s.put_message(ACCT, "real", t, None, Some(-1)).await.unwrap();
            if round % 2 == 1 {
                for m in s.get_messages(ACCT, "real", Some(2), Some(3600)).await.unwrap() {
                    s.delete_message(ACCT, "real", &m.id.to_string(), &m.pop_receipt)
                        .await
                        .unwrap();
                }
            }
            if round % 16 == 0 {
                s.maintenance().await.expect("maintenance, reuse included, succeeds");
            }
        }
        let dump = s.dump().await.unwrap();
        dump[&(ACCT.to_string(), "real".to_string())]
            .messages
            .iter()
            .map(|(_, t)| t.clone())
            .collect::<Vec<_>>()
    });
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let recycled = names
        .iter()
        .filter(|n| n.ends_with(".wal"))
        .filter(|n| {
            let b = std::fs::read(dir.path().join(n.as_str())).unwrap();
            u32::from_le_bytes(b[8..12].try_into().unwrap()) == 2
        })
        .count();
    assert!(recycled > 0, "no segment reused a file: {names:?}");
    assert!(names.iter().filter(|n| n.ends_with(".spare")).count() <= engine::limits::MAX_SPARE_SEGMENTS);
    assert_eq!(texts(dir.path().to_path_buf()).unwrap(), kept);
    assert_eq!(
        texts(dir.path().to_path_buf()).unwrap(),
        kept,
        "and after a restart that adopted the spares"
    );
}

/// The real backend's side of discarded segments (docs/STORAGE_FORMAT.md,
/// "Discarded segments"): a deleted queue's segments beyond the spares
/// are renamed out of the log, cut down through `DmaDisk::shrink` and
/// deleted, and the queue left behind reads the same after a restart.
#[test]
fn discarded_segments_are_cut_and_deleted_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let names = |p: &Path| -> Vec<String> {
        std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    // Segments of two steps, so a file is seen cut halfway between passes.
    let segment = 2 * engine::limits::DISCARD_STEP_BYTES;
    let cut_halfway = on_glommio(move || async move {
        let disk = DmaDisk::open(&path, SyncPath::BlockingPool).await.unwrap();
        let mut c = cfg();
        c.segment_bytes = segment;
        let s = Shard::open(disk, c, Rc::new(SystemClock)).await.unwrap();
        s.create_queue(ACCT, "real", Metadata::default()).await.unwrap();
        s.put_message(ACCT, "real", "stays".into(), None, Some(-1))
            .await
            .unwrap();
        s.create_queue(ACCT, "gone", Metadata::default()).await.unwrap();
        for _ in 0..1_200 {
            s.put_message(ACCT, "gone", "g".repeat(8 * 1024), None, None)
                .await
                .unwrap();
        }
        s.delete_queue(ACCT, "gone").await.unwrap();
        let mut cut_halfway = false;
        for _ in 0..200 {
            s.maintenance().await.expect("maintenance, discards included, succeeds");
            for n in names(&path).iter().filter(|n| n.ends_with(".discard")) {
                let len = std::fs::metadata(path.join(n)).unwrap().len();
                cut_halfway |= len > 0 && len < segment;
            }
        }
        cut_halfway
    });
    assert!(cut_halfway, "no discarded segment was seen cut down on disk");
    let left = names(dir.path());
    assert!(!left.iter().any(|n| n.ends_with(".discard")), "{left:?}");
    assert_eq!(texts(dir.path().to_path_buf()).unwrap(), vec!["stays".to_string()]);
}

/// A commit of at least `ONE_HOP_COMMIT_BYTES` goes to the blocking pool as
/// one job (`pwrite` of an aligned copy, then fdatasync): a single large
/// message, then many concurrent puts that group into large commits. With
/// io_uring fdatasyncs the same commits take the two steps. Either way all
/// of it reads back after a restart without a clean shutdown.
#[test]
fn large_commits_in_one_job_read_back_on_real_files() {
    for sync in [SyncPath::BlockingPool, SyncPath::Uring] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let (written, one_job, commits) = on_glommio(move || async move {
            let s = Rc::new(open(&path, sync).await.unwrap());
            s.create_queue(ACCT, "real", Metadata::default()).await.unwrap();
            let big = format!("big {}", "b".repeat(40 * 1024));
            s.put_message(ACCT, "real", big.clone(), None, Some(-1)).await.unwrap();
            let tasks: Vec<_> = (0..48)
                .map(|i| {
                    let s = s.clone();
                    glommio::spawn_local(async move {
                        let t = format!("{i:05} {}", "c".repeat(3000));
                        s.put_message(ACCT, "real", t.clone(), None, Some(-1)).await.unwrap();
                        t
                    })
                })
                .collect();
            let mut texts = vec![big];
            for t in tasks {
                texts.push(t.await);
            }
            let stats = s.wal().commit_stats();
            (texts, stats.one_job, stats.commits)
        });
        if sync == SyncPath::BlockingPool {
            assert!(one_job >= 2, "{one_job} of {commits} commits went in one job");
            assert!(one_job < commits, "small commits still take two steps");
        } else {
            assert_eq!(one_job, 0, "io_uring fdatasyncs never run as a pool job");
        }
        let mut got = texts(dir.path().to_path_buf()).unwrap();
        let mut want = written;
        got.sort();
        want.sort();
        assert_eq!(got, want, "{sync:?}");
    }
}

/// Large blocks page-aligned, as the server's allocator (mimalloc) gives
/// them in practice, so that the test below reaches the in-place write;
/// everything else as the system allocator has it. A function of the
/// layout alone, so every free and reallocation sees the alignment its
/// block was allocated with.
struct LargeBlocksPageAligned;

fn page_aligned_if_large(l: std::alloc::Layout) -> std::alloc::Layout {
    match l.size() >= 64 * 1024 {
        true => std::alloc::Layout::from_size_align(l.size(), l.align().max(4096)).unwrap_or(l),
        false => l,
    }
}

// SAFETY: every call goes to `System` with a layout of the same size and
// an alignment at least the one asked for.
unsafe impl std::alloc::GlobalAlloc for LargeBlocksPageAligned {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        unsafe { std::alloc::System.alloc(page_aligned_if_large(l)) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(p, page_aligned_if_large(l)) }
    }
}

#[global_allocator]
static ALLOCATOR: LargeBlocksPageAligned = LargeBlocksPageAligned;

/// A commit's buffer handed to the disk is written where it lies when its
/// address suits O_DIRECT, and copied into an aligned buffer when not;
/// either way the bytes land and the buffer comes back unchanged.
#[test]
fn an_owned_commit_buffer_is_written_whatever_its_address() {
    use engine::disk::{Disk, DiskFile};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    on_glommio(move || async move {
        let disk = DmaDisk::open(&path, SyncPath::BlockingPool).await.unwrap();
        let file = disk.create("owned").await.unwrap();
        file.allocate(1 << 20).await.unwrap();
        let pattern = |len: usize| -> Vec<u8> { (0..len).map(|i| (i * 7 % 251) as u8).collect() };
        // In place: a large block, page-aligned by the allocator above.
        let large = pattern(64 * 1024);
        assert_eq!(large.as_ptr() as usize % 4096, 0);
        let (back, done) = file.write_and_sync_owned(large.clone(), 0).await;
        done.unwrap();
        assert_eq!(back, large, "the buffer comes back as it went");
        assert_eq!(file.read_at(0, large.len()).await.unwrap(), large);
        // Copied: a small block, which the system allocator aligns to 16
        // bytes only (searched for one O_DIRECT would refuse).
        let mut held = Vec::new();
        let small = loop {
            let v = pattern(8 * 1024);
            if !(v.as_ptr() as usize).is_multiple_of(512) {
                break v;
            }
            held.push(v);
        };
        let (back, done) = file.write_and_sync_owned(small.clone(), 128 * 1024).await;
        done.unwrap();
        assert_eq!(back, small);
        assert_eq!(file.read_at(128 * 1024, small.len()).await.unwrap(), small);
        drop(held);
    });
}
