//! A global allocator that counts the allocations (and reallocations) of the threads
//! that turn it on, for the tests that check a path allocates nothing per packet. Each
//! such test binary includes this file (`#[path]`) and installs it:
//!
//! ```ignore
//! #[path = "support/counting.rs"]
//! mod counting;
//! #[global_allocator]
//! static GLOBAL: counting::Counting = counting::Counting;
//! ```
//!
//! Counting is per thread (`counting::on`), so the harness's own setup and other tests'
//! threads do not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The allocator.
pub struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
}

/// Count this thread's allocations (true) or stop (false).
pub fn on(yes: bool) {
    ON.with(|c| c.set(yes));
}

/// Allocations counted so far, by every thread that counted.
pub fn allocations() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

fn count() {
    if ON.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call goes to the system allocator unchanged; counting is a side effect
// on an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is System's.
        unsafe { System.realloc(ptr, layout, size) }
    }
}
