//! The global allocator: mimalloc, asked for a plain allocation whenever the
//! alignment is one its plain allocation gives anyway.
//!
//! The `mimalloc` crate passes every request to `mi_malloc_aligned`. In
//! mimalloc 3 that call has a fast path only for blocks of at most 1 KiB;
//! every larger block with an ordinary alignment (a message body, a
//! request's buffer, a response) took its over-allocating path instead,
//! about 200 instructions more, six times per put (bench/instructions,
//! docs/benchmarks.md). `mi_malloc` serves those from the same size classes
//! without that detour. Any process, every core.

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc, mi_zalloc_aligned,
};
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_int, c_long, c_void};

/// The alignment every `mi_malloc` block of at least this size has
/// (mimalloc's `MI_MAX_ALIGN_SIZE`, `sizeof(max_align_t)` on x86-64 and
/// aarch64 Linux); smaller blocks are aligned to their power-of-two size
/// class, so an alignment no larger than the size is met as well. The same
/// rule as std's own `System` allocator. (mimalloc's guarded pages, which
/// place a block right before a guard page, exist only in its debug build,
/// which libmimalloc-sys's `debug` feature would select; it is off.)
const PLAIN_ALIGN: usize = 16;

fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// Test builds check every block's alignment. An allocator must not panic
/// (a panic's message allocates), so a misaligned block aborts.
#[inline]
fn checked(p: *mut c_void, layout: Layout) -> *mut u8 {
    if cfg!(debug_assertions) && !p.is_null() && !(p as usize).is_multiple_of(layout.align()) {
        std::process::abort();
    }
    p.cast()
}

/// A new block for `layout`, zeroed or not.
///
/// # Safety
/// As `GlobalAlloc::alloc`: `layout` has a non-zero size.
#[inline]
unsafe fn allocate(layout: Layout, zeroed: bool) -> *mut u8 {
    let (size, align) = (layout.size(), layout.align());
    let p = match (plain(align, size), zeroed) {
        (true, false) => mi_malloc(size),
        (true, true) => mi_zalloc(size),
        (false, false) => mi_malloc_aligned(size, align),
        (false, true) => mi_zalloc_aligned(size, align),
    };
    checked(p, layout)
}

pub struct Mimalloc;

// SAFETY: every method forwards to mimalloc with a size and an alignment
// that mimalloc honours (`plain` picks the unaligned call only where its
// blocks are aligned enough), and frees only mimalloc's own blocks.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        allocate(layout, false)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        allocate(layout, true)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi_free(ptr.cast::<c_void>());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = if plain(layout.align(), new_size) {
            mi_realloc(ptr.cast::<c_void>(), new_size)
        } else {
            mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align())
        };
        checked(p, layout)
    }
}

/// `mi_option_purge_decommits` in mimalloc's `mi_option_t` (the v3 sources
/// libmimalloc-sys builds); a test reads the option back by its name.
const MI_OPTION_PURGE_DECOMMITS: c_int = 5;

// libmimalloc-sys declares these only with its `extended` feature, which
// would bring a dependency for three functions.
unsafe extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    fn mi_collect(force: bool);
}

/// Has mimalloc give freed memory back with `MADV_FREE` instead of
/// `MADV_DONTNEED`, unless the environment sets the option itself
/// (`MIMALLOC_PURGE_DECOMMITS`, or its older name `MIMALLOC_RESET_DECOMMITS`,
/// in any case, as mimalloc reads them). Why: giving a page back with
/// `MADV_FREE` costs the core less than with `MADV_DONTNEED`; a pass after
/// a deleted queue of 600k messages held the core 15-24 ms with
/// `MADV_DONTNEED` (docs/benchmarks.md, "Memory given back lazily"). The
/// passes are made by the purge thread ([`start_purge_thread`]), not by an
/// executor ("The purge moved off the cores"). The pages stay counted in the
/// resident size until the kernel needs them, and are reused without a
/// fault if it has not taken them by then.
///
/// # Safety
/// Only while no other thread uses the allocator: mimalloc's options are
/// not synchronized. `main` calls it before any thread starts.
pub unsafe fn return_memory_lazily() {
    let named = |k: &std::ffi::OsStr| {
        let k = k.to_string_lossy();
        ["MIMALLOC_PURGE_DECOMMITS", "MIMALLOC_RESET_DECOMMITS"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(&k))
    };
    if std::env::vars_os().any(|(k, _)| named(&k)) {
        return;
    }
    // SAFETY: the caller's contract; a plain option write.
    unsafe { purge_with_madv_free() }
}

/// # Safety
/// As [`return_memory_lazily`].
unsafe fn purge_with_madv_free() {
    // SAFETY: a plain write of a known option (see the caller).
    unsafe { mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0) }
}

/// Gives back to the kernel, now, every freed page the arena holds,
/// whichever thread freed it. Arena purges are process-wide and one
/// thread at a time: a core's allocation that finds the purge guard taken
/// skips the purge rather than wait for it.
fn purge_arena_now() {
    // SAFETY: mi_collect may be called from any thread at any time: it
    // collects the calling thread's own heap, and the shared arenas under
    // mimalloc's own guard; forced, it purges the arena's pending pages
    // before their delay.
    unsafe { mi_collect(true) }
}

/// mimalloc collects nothing for a thread that has never allocated through
/// it (its heap is not set up yet), and a test binary's global allocator is
/// not mimalloc.
fn set_up_thread_heap() {
    // SAFETY: a plain allocation, freed once.
    unsafe { mi_free(mi_malloc(8)) }
}

/// Starts the thread that gives freed memory back to the kernel every
/// `PURGE_INTERVAL`, so that no core's executor makes the `madvise` calls
/// (jemalloc's `background_thread` exists for the same reason). The thread
/// still runs on some core's CPU (on the benchmark's one pinned CPU, on
/// the shard's), but the scheduler shares that CPU between the two in
/// slices instead of the executor holding it for the whole call.
///
/// Why: a page whose blocks are all freed goes to mimalloc's shared arena
/// and is given back once its purge falls due, a second later, by whichever
/// thread next allocates or collects; everything due then goes in one pass
/// on that thread. A queue's messages are freed while the clients are
/// often quiet, so a 1.56M-message queue's memory once waited for the next
/// burst of requests: 33-69 ms of `madvise` calls on a core
/// (docs/benchmarks.md, "Freed memory given back as it is freed"). Forcing
/// the purge on the core after each release pass bounded most passes to a
/// few milliseconds, but in the last passes of a large release, which free
/// what the earlier ones had left partly used, the forced collection took
/// 7-30 ms on the core ("The purge moved off the cores").
///
/// What stays with a core: a page that empties while it is the only one of
/// its size class is kept in the core's own heap for reuse, and only the
/// core hands it over, when it next allocates; at most one page per size
/// class per core. Forced, the purge ignores mimalloc's 1 s delay, so a
/// page freed to the arena is given back within `PURGE_INTERVAL` even if
/// a core was about to reuse it; with `MADV_FREE` (the default here) that
/// reuse costs no fault unless the kernel took the page meanwhile. If this
/// thread stops or falls a second behind, a core's allocation purges what
/// is due itself, as mimalloc does by default.
///
/// It shares no state with the cores beyond mimalloc's own arena, which
/// every thread already shares; a core that finds the arena's purge guard
/// taken skips the purge rather than wait. It runs until the process
/// exits. Unpinned, at normal priority: a lower one could leave it
/// preempted inside `madvise` while a core waits on the address space's
/// lock.
pub fn start_purge_thread() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("hematite-purge".into())
        .spawn(|| {
            set_up_thread_heap();
            loop {
                std::thread::sleep(crate::limits::PURGE_INTERVAL);
                purge_arena_now();
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use std::ffi::{c_char, c_void, CStr};

    unsafe extern "C" {
        fn mi_options_print_out(out: Option<unsafe extern "C" fn(*const c_char, *mut c_void)>, arg: *mut c_void);
    }

    /// Sets the purge option once for the whole test binary: the tests run
    /// on parallel threads, and mimalloc's options are not synchronized.
    fn purge_with_madv_free_once() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: `Once` makes this the only write, and each test calls this
        // before it uses mimalloc, so every read happens after the write
        // (mimalloc is the global allocator only in `main`).
        ONCE.call_once(|| unsafe { super::purge_with_madv_free() });
    }

    unsafe extern "C" fn collect(msg: *const c_char, arg: *mut c_void) {
        // SAFETY: mimalloc passes a NUL-terminated message and our `arg`.
        let (text, out) = unsafe { (CStr::from_ptr(msg), &mut *arg.cast::<String>()) };
        out.push_str(&text.to_string_lossy());
    }

    /// The option index is mimalloc's enum position, not a name: if a new
    /// mimalloc moved it, the option set would be another one.
    #[test]
    fn the_purge_option_set_is_the_one_named_purge_decommits() {
        purge_with_madv_free_once();
        let mut out = String::new();
        // SAFETY: `collect` matches mimalloc's output callback and `out`
        // outlives the call.
        unsafe { mi_options_print_out(Some(collect), (&mut out as *mut String).cast()) };
        let line = out
            .lines()
            .find(|l| l.contains("purge_decommits"))
            .unwrap_or_else(|| panic!("mimalloc printed no purge_decommits option: {out}"));
        assert!(line.trim_end().ends_with(": 0"), "{line}");
    }

    /// Kilobytes of this process's memory given back with `MADV_FREE` and
    /// not yet taken by the kernel.
    fn lazy_free_kib() -> u64 {
        let text = std::fs::read_to_string("/proc/self/smaps_rollup").expect("smaps_rollup");
        let line = text
            .lines()
            .find(|l| l.starts_with("LazyFree:"))
            .expect("a LazyFree line");
        line.split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .expect("a size")
    }

    /// Memory a core frees while nothing allocates (a deleted queue
    /// released by maintenance with the clients gone) is given back by
    /// another thread's purge, as the purge thread makes it: without it,
    /// nothing would be until the next burst of allocations, which would
    /// then pay for all of it at once, on the core.
    #[test]
    fn memory_freed_while_nothing_allocates_is_given_back_by_another_thread() {
        purge_with_madv_free_once();
        let before = lazy_free_kib();
        // 64 MiB of message-sized blocks, written so that they are resident.
        let blocks: Vec<*mut c_void> = (0..65_536)
            .map(|_| {
                // SAFETY: a plain allocation, written within its size.
                unsafe {
                    let p = libmimalloc_sys::mi_malloc(1024);
                    assert!(!p.is_null());
                    std::ptr::write_bytes(p.cast::<u8>(), 1, 1024);
                    p
                }
            })
            .collect();
        for p in blocks {
            // SAFETY: each block came from mi_malloc and is freed once.
            unsafe { libmimalloc_sys::mi_free(p) };
        }
        std::thread::spawn(|| {
            super::set_up_thread_heap();
            super::purge_arena_now();
        })
        .join()
        .expect("the purge thread");
        let given_back = lazy_free_kib().saturating_sub(before);
        assert!(
            given_back >= 32 * 1024,
            "only {given_back} KiB given back of 64 MiB freed"
        );
    }
}
