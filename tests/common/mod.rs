//! Shared test helpers: a counting global allocator whose counters are
//! thread-local, so tests running on other threads never pollute a
//! measurement.
//!
//! Every test binary that declares `mod common;` gets the allocator.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Wraps the system allocator and counts, per thread, the bytes currently
/// allocated and the peak since the last [`measure`] started.
pub struct CountingAlloc;

thread_local! {
    // const-initialised, no destructor: safe to touch from inside the allocator.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn record(delta: isize, is_alloc: bool) {
    let _ = ACTIVE.try_with(|active| {
        if !active.get() {
            return;
        }
        let _ = CURRENT.try_with(|cur| {
            let now = cur.get() + delta;
            cur.set(now);
            let _ = PEAK.try_with(|p| {
                if now > p.get() {
                    p.set(now);
                }
            });
        });
        if is_alloc {
            let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        }
    });
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            record(layout.size() as isize, true);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            record(layout.size() as isize, true);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        record(-(layout.size() as isize), false);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            record(new_size as isize - layout.size() as isize, true);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// What one [`measure`] saw on the calling thread.
#[derive(Clone, Copy, Debug)]
pub struct AllocStats {
    /// Highest number of bytes live at once (relative to the start).
    pub peak: usize,
    /// Bytes still live at the end (relative to the start; memory freed that
    /// was allocated before the start counts negative and is clamped to 0).
    pub retained: usize,
    /// Number of allocation calls (alloc, alloc_zeroed, realloc).
    pub allocs: usize,
}

/// Runs `f` on this thread and reports its allocations. The result of `f`
/// (e.g. the error value) is still alive at the end, so it is included.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, AllocStats) {
    CURRENT.with(|c| c.set(0));
    PEAK.with(|c| c.set(0));
    ALLOCS.with(|c| c.set(0));
    ACTIVE.with(|a| a.set(true));
    let r = f();
    ACTIVE.with(|a| a.set(false));
    let stats = AllocStats {
        peak: PEAK.with(|c| c.get()).max(0) as usize,
        retained: CURRENT.with(|c| c.get()).max(0) as usize,
        allocs: ALLOCS.with(|c| c.get()),
    };
    (r, stats)
}

/// The default bound for a hostile decode: 64 KiB plus the input size.
pub const SMALL: usize = 64 << 10;

/// Runs `f`, asserts its peak allocation stays at or below `bound` bytes,
/// and returns its result.
#[track_caller]
pub fn bounded<R>(bound: usize, f: impl FnOnce() -> R) -> R {
    let (r, stats) = measure(f);
    assert!(
        stats.peak <= bound,
        "peak allocation {} bytes exceeds the bound of {} bytes ({} allocations)",
        stats.peak,
        bound,
        stats.allocs
    );
    r
}

/// Runs `f` on a fresh thread with a stack of `stack` bytes and returns its
/// result (a stack overflow aborts the whole test binary, which fails it).
pub fn on_small_stack<R: Send + 'static>(
    stack: usize,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("thread panicked")
}

pub mod json;

#[path = "../support/mappings.rs"]
mod mappings;
#[allow(unused_imports)] // not every test binary uses them
pub use mappings::{anonymous_mappings, in_new_mapping};
