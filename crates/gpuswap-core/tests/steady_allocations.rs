//! The daemon's decision path allocates nothing once the books are built (issue 28,
//! item 5): the eviction choice, its relocation plan, the return check and the return,
//! counted by a global allocator that counts this thread's heap allocations.
//!
//! A new buffer does allocate its own records: its chunk table in the books and the
//! placement list its `Map` hands to the driver (which keeps it as its page-table entry).
//! The chunk trees are B-trees, whose inserts now and then split a node.
//!
//! This is its own test binary because the counting allocator is global to it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the allocations the current thread makes while it is armed.
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: the allocator also serves thread start-up and tear-down, where the
    // thread-locals may be gone.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = COUNT.try_with(|count| count.set(count.get() + 1));
        }
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the counter only
// reads and writes this thread's cells, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's layout contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: `ptr` came from this allocator, which is the system's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which is the system's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    COUNT.with(|c| c.get())
}

#[path = "support/mod.rs"]
mod support;

use gpuswap_core::{ManagerConfig, PolicySettings};
use support::{config, drive, evict_free_return, fill};

const CHUNK_BYTES: u64 = 2 << 20;

#[test]
fn the_steady_decision_path_allocates_nothing() {
    // Every victim policy: the scanning ones walk the tenants without collecting them.
    for (tenants, victim) in [
        (10, "largest-share"),
        (1000, "largest-share"),
        (1000, "performance"),
        (1000, "access-rate"),
    ] {
        const CHUNKS: u64 = 20_000;
        let (mut m, _) = fill(
            ManagerConfig {
                policy: PolicySettings::named("gpuswap").with("victim", victim),
                ..config(CHUNKS * CHUNK_BYTES, CHUNK_BYTES)
            },
            tenants,
            CHUNKS,
        );
        // The first steps may grow queues and tables to their working size.
        let mut now_ns = 0;
        for id in 0..20 {
            now_ns += 1_000_000_000;
            evict_free_return(&mut m, 1_000_000 + id, CHUNK_BYTES, now_ns);
        }
        let steps = allocations(|| {
            for id in 0..200 {
                now_ns += 1_000_000_000;
                evict_free_return(&mut m, 2_000_000 + id, CHUNK_BYTES, now_ns);
            }
        });
        // Two records of the new buffer per step, and B-tree splits (about one step in
        // five measured); the relocation plans and batches allocated 7 more per step.
        assert!(
            steps <= 200 * 2 + 200 / 2,
            "{tenants} tenants, {victim}: {steps} heap allocations in 200 evict + free + \
             return steps, where the new buffers' records are 400"
        );
        let checks = allocations(|| {
            for _ in 0..200 {
                now_ns += 1_000_000_000;
                m.handle_timeout(now_ns);
                drive(&mut m);
            }
        });
        assert_eq!(
            checks, 0,
            "{tenants} tenants, {victim}: heap allocations in 200 idle return checks"
        );
    }
}
