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
use std::ffi::c_void;

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
