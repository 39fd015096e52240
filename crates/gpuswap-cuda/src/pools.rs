//! The books of stream-ordered allocations (issue 41, item 2): which pool each served
//! buffer came from, what each pool holds, and the frees waiting for their streams.
//! Their entry points are in `hooks` (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`,
//! `cuMemFreeAsync`, their `_ptsz` forms, which the runtime's `cuGetProcAddress`
//! look-ups reach through the hooks' table, and the pool attributes).
//!
//! The design: every stream-ordered allocation is a managed allocation, served as
//! `cuMemAlloc` is (the daemon places it chunk by chunk and moves it like any other),
//! rather than a pool the daemon would only count. A pool the driver fills is memory the
//! daemon could count but never move, and its release threshold keeps freed memory
//! away from the other tenants; served as managed allocations, the program's pool
//! memory is shared like the rest. Stream order is kept: an allocation is ready at
//! once (the interposer allocates synchronously, so it is ready before any work the
//! stream runs after it), and a free is honoured when the stream reaches it: an event
//! is recorded on the stream at `cuMemFreeAsync`, and the buffer is freed once the
//! event completes, as seen at the next allocation, stream-ordered free,
//! synchronization or `cuMemGetInfo` (at once when the stream had nothing left to run).
//!
//! Pools themselves stay the driver's (`cuMemPoolCreate`, `cuMemPoolDestroy`,
//! `cuDeviceGetDefaultMemPool`, `cuDeviceGetMemPool`, `cuDeviceSetMemPool`,
//! `cuMemPoolTrimTo` are not interposed): their attributes are the driver's to keep and
//! report back as set. The release threshold and the reuse flags have no effect on the
//! allocations served here (each goes back to the daemon at its free); the four memory
//! figures (`RESERVED_MEM_CURRENT`/`_HIGH`, `USED_MEM_CURRENT`/`_HIGH`) report the
//! driver's figure plus the bytes of the pool's allocations served here, and setting a
//! high to 0 resets both.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::Mutex;

use crate::ffi::{self, CuResult, DevPtr, Handle, real};

/// `CU_STREAM_PER_THREAD`: the per-thread default stream, which a `_ptsz` call's null
/// stream means.
pub(crate) const STREAM_PER_THREAD: usize = 0x2;

/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` to `CU_MEMPOOL_ATTR_USED_MEM_HIGH`: the
/// figures of what a pool holds; the two highs are 6 and 8.
const FIGURES: std::ops::RangeInclusive<c_int> = 5..=8;
const HIGHS: [c_int; 2] = [6, 8];

/// What the pools hold of the allocations served here, and the frees waiting for
/// their streams.
struct Books {
    /// Each served buffer's pool and bytes, by address.
    buffers: BTreeMap<DevPtr, (usize, u64)>,
    /// Each pool's bytes now and at most since its last reset.
    pools: BTreeMap<usize, (u64, u64)>,
    /// Frees waiting for their stream: the buffer and the event recorded behind it.
    pending: Vec<(DevPtr, usize)>,
}

static BOOKS: Mutex<Books> = Mutex::new(Books {
    buffers: BTreeMap::new(),
    pools: BTreeMap::new(),
    pending: Vec::new(),
});

fn books() -> std::sync::MutexGuard<'static, Books> {
    BOOKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The device's current pool (`cuDeviceGetMemPool`), which `cuMemAllocAsync` draws
/// from; 0 where the driver does not say.
pub(crate) fn current_pool() -> usize {
    let f = real!(c"cuDeviceGetMemPool"; fn(*mut Handle, c_int) -> CuResult);
    let mut pool: Handle = std::ptr::null_mut();
    let device = ffi::driver::current_device().unwrap_or(0);
    // SAFETY: `pool` is valid for a write; the driver checks the device.
    match unsafe { f(&mut pool, device) } {
        ffi::CUDA_SUCCESS => pool as usize,
        _ => 0,
    }
}

/// A buffer of `bytes` at `va` was served from `pool`.
pub(crate) fn served(va: DevPtr, pool: usize, bytes: u64) {
    let mut b = books();
    b.buffers.insert(va, (pool, bytes));
    let figures = b.pools.entry(pool).or_default();
    figures.0 += bytes;
    figures.1 = figures.1.max(figures.0);
}

/// The buffer at `va` is freed (by `cuMemFree` or in stream order): out of its pool's
/// figures, if it came from one.
pub(crate) fn forget(va: DevPtr) {
    let mut b = books();
    if let Some((pool, bytes)) = b.buffers.remove(&va)
        && let Some(figures) = b.pools.get_mut(&pool)
    {
        figures.0 -= bytes;
    }
}

/// The buffer at `va` is freed once `event`, recorded on its stream, completes.
pub(crate) fn defer(va: DevPtr, event: Handle) {
    books().pending.push((va, event as usize));
}

/// The buffers whose stream reached their free (their events destroyed): the caller
/// frees them.
pub(crate) fn reached() -> Vec<DevPtr> {
    let Some(events) = ffi::driver::events() else {
        return Vec::new();
    };
    let done: Vec<(DevPtr, usize)> = {
        let mut b = books();
        if b.pending.is_empty() {
            return Vec::new();
        }
        let (done, waiting) = b
            .pending
            .drain(..)
            .partition(|(_, event)| events.query(*event as Handle) != ffi::CUDA_ERROR_NOT_READY);
        b.pending = waiting;
        done
    };
    done.into_iter()
        .map(|(va, event)| {
            events.destroy(event as Handle);
            va
        })
        .collect()
}

/// What the served allocations add to `pool`'s figure `attr` (`None`: `attr` is none
/// of the four memory figures).
pub(crate) fn figure(pool: usize, attr: c_int) -> Option<u64> {
    if !FIGURES.contains(&attr) {
        return None;
    }
    let (now, high) = books().pools.get(&pool).copied().unwrap_or_default();
    Some(if HIGHS.contains(&attr) { high } else { now })
}

/// The driver accepted setting `pool`'s figure `attr`: a high's reset (only 0 is
/// allowed) resets the served allocations' high too.
pub(crate) fn set_figure(pool: usize, attr: c_int) {
    if HIGHS.contains(&attr)
        && let Some(figures) = books().pools.get_mut(&pool)
    {
        figures.1 = figures.0;
    }
}
