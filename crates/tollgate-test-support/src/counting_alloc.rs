//! A global allocator that counts live heap bytes, for the memory tests and
//! the in-memory benchmark. A library cannot install a global allocator for
//! its users: each test or benchmark binary declares it itself, and then
//! reads [`live`] before and after what it measures.
//!
//! ```
//! use tollgate_test_support::counting_alloc::{live, Counting};
//!
//! #[global_allocator]
//! static ALLOCATOR: Counting = Counting;
//!
//! let before = live();
//! let buffer = vec![0u8; 4096];
//! assert!(live() - before >= 4096);
//! drop(buffer);
//! ```
//!
//! The count is process-wide: tests running beside the measured code in the
//! same process change it, so such a test is a binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, adding the bytes of every allocation to a
/// process-wide count and taking those of every deallocation off it.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Heap bytes requested through [`Counting`] and not yet freed, process-wide
/// (0 if [`Counting`] is not the global allocator).
pub fn live() -> isize {
    LIVE.load(Ordering::SeqCst)
}

// SAFETY: every call forwards to the system allocator unchanged; only a
// counter is updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
