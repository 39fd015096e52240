//! Stream-ordered allocations (issue 41, item 2): `cuMemAllocAsync`,
//! `cuMemAllocFromPoolAsync` and `cuMemFreeAsync` (and their `_ptsz` forms, which the
//! runtime's `cuGetProcAddress` look-ups reach through the hooks' table), and the pool
//! attributes that report what a pool holds.
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
use std::ffi::{CStr, c_int, c_void};
use std::sync::Mutex;

use crate::diag;
use crate::ffi::{self, CuResult, DevPtr, Handle, real};
use crate::hooks;

/// `CU_STREAM_PER_THREAD`: the per-thread default stream, which a `_ptsz` call's null
/// stream means.
const STREAM_PER_THREAD: usize = 0x2;

/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` to `CU_MEMPOOL_ATTR_USED_MEM_HIGH`: the
/// figures of what a pool holds; the two highs are 6 and 8.
const FIGURES: std::ops::RangeInclusive<c_int> = 5..=8;
const HIGHS: [c_int; 2] = [6, 8];

/// What the pools hold of the allocations served here, and the frees waiting for
/// their streams.
#[derive(Default)]
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
fn current_pool() -> usize {
    let f = real!(c"cuDeviceGetMemPool"; fn(*mut Handle, c_int) -> CuResult);
    let mut pool: Handle = std::ptr::null_mut();
    let device = ffi::driver::current_device().unwrap_or(0);
    // SAFETY: `pool` is valid for a write; the driver checks the device.
    match unsafe { f(&mut pool, device) } {
        ffi::CUDA_SUCCESS => pool as usize,
        _ => 0,
    }
}

/// A stream-ordered allocation from `pool` (0: the device's current pool): managed as
/// `cuMemAlloc`'s, else forwarded by `forward`.
fn alloc(
    what: &str,
    dptr: *mut DevPtr,
    bytes: usize,
    pool: usize,
    forward: impl FnOnce() -> CuResult,
) -> CuResult {
    if let Some(rc) = hooks::failed_start() {
        return rc;
    }
    let Some(client) = hooks::allocating_client(what) else {
        return forward();
    };
    if bytes == 0 {
        return ffi::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller gives `dptr` as cuda.h says.
    let rc = unsafe { hooks::alloc_managed(client, dptr, bytes as u64) };
    if rc == ffi::CUDA_SUCCESS {
        let pool = if pool == 0 { current_pool() } else { pool };
        // SAFETY: written by the allocation just now.
        let va = unsafe { *dptr };
        let mut b = books();
        b.buffers.insert(va, (pool, bytes as u64));
        let figures = b.pools.entry(pool).or_default();
        figures.0 += bytes as u64;
        figures.1 = figures.1.max(figures.0);
    }
    rc
}

/// The stream-ordered allocation entry points, each `name(dptr, bytes, args)`: managed
/// by [`alloc`] as `what`, from the pool the expression after `from` says (0: the
/// device's current one), else forwarded to the driver's function of the same name.
macro_rules! stream_ordered_allocs {
    ($($name:ident($($arg:ident: $ty:ty),*) as $what:literal from $pool:expr;)*) => {
        $(
            /// # Safety
            /// Called by C with cuda.h's contract.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(dptr: *mut DevPtr, bytes: usize, $($arg: $ty),*) -> CuResult {
                hooks::guarded(stringify!($name), || {
                    alloc($what, dptr, bytes, $pool, || {
                        let real = real!(hooks::cname(concat!(stringify!($name), "\0")); fn(*mut DevPtr, usize, $($ty),*) -> CuResult);
                        // SAFETY: forwarded as given.
                        unsafe { real(dptr, bytes, $($arg),*) }
                    })
                })
            }
        )*
        /// The stream-ordered allocation entry points by name.
        fn allocs_table() -> Vec<(&'static CStr, usize)> {
            vec![$((hooks::cname(concat!(stringify!($name), "\0")), $name as *const () as usize)),*]
        }
    };
}

stream_ordered_allocs! {
    cuMemAllocAsync(stream: Handle) as "cuMemAllocAsync" from 0;
    cuMemAllocAsync_ptsz(stream: Handle) as "cuMemAllocAsync" from 0;
    cuMemAllocFromPoolAsync(pool: Handle, stream: Handle) as "cuMemAllocFromPoolAsync" from pool as usize;
    cuMemAllocFromPoolAsync_ptsz(pool: Handle, stream: Handle) as "cuMemAllocFromPoolAsync" from pool as usize;
}

/// A stream-ordered free of one of our buffers is honoured when the stream reaches it;
/// other pointers go to the driver.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: DevPtr, stream: Handle) -> CuResult {
    free_async("cuMemFreeAsync", c"cuMemFreeAsync", dptr, stream)
}

/// [`cuMemFreeAsync`] where the null stream is the per-thread default stream.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(dptr: DevPtr, stream: Handle) -> CuResult {
    let stream = if stream.is_null() {
        STREAM_PER_THREAD as Handle
    } else {
        stream
    };
    free_async("cuMemFreeAsync_ptsz", c"cuMemFreeAsync_ptsz", dptr, stream)
}

fn free_async(
    name: &'static str,
    real_name: &'static CStr,
    dptr: DevPtr,
    stream: Handle,
) -> CuResult {
    hooks::guarded(name, || {
        if let Some(client) = hooks::client()
            && client.holds(dptr)
        {
            reap();
            return free_in_stream_order(name, dptr, stream);
        }
        let addr = ffi::real_symbol(real_name);
        if addr == 0 {
            return ffi::CUDA_ERROR_NOT_SUPPORTED;
        }
        // SAFETY: the driver's function of that name has this signature (cuda.h).
        let real = unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(DevPtr, Handle) -> CuResult>(addr)
        };
        // SAFETY: forwarded as given.
        unsafe { real(dptr, stream) }
    })
}

/// Frees our buffer at `dptr` once `stream` has run what it was given before: at once
/// when it has, else when the event recorded behind that work completes ([`reap`]).
/// Without events, the stream is waited for. A stream being captured into a graph
/// cannot take the free: refused.
fn free_in_stream_order(name: &str, dptr: DevPtr, stream: Handle) -> CuResult {
    let Some(events) = ffi::driver::events() else {
        if let Err(e) = ffi::driver::synchronize_stream(stream) {
            diag::warn(&format!("{name}: {e}"));
        }
        return free_now(dptr);
    };
    if events.capturing(stream) {
        return hooks::refuse_once(
            &format!("{name} of a managed buffer during graph capture"),
            "the free would have to be a node of the graph; it fails with \
             CUDA_ERROR_NOT_SUPPORTED (free it outside the capture)",
        );
    }
    let Some(event) = events.create() else {
        return ffi::CUDA_ERROR_OUT_OF_MEMORY;
    };
    if !events.record(event, stream) {
        events.destroy(event);
        return ffi::CUDA_ERROR_INVALID_VALUE;
    }
    books().pending.push((dptr, event as usize));
    reap();
    ffi::CUDA_SUCCESS
}

/// Frees our buffer at `dptr` now (`cuMemFree` takes it out of its pool's figures).
fn free_now(dptr: DevPtr) -> CuResult {
    // SAFETY: our own entry point, with a pointer we manage.
    unsafe { hooks::cuMemFree_v2(dptr) }
}

/// The buffer at `dptr` is freed (by `cuMemFree` or in stream order): out of its
/// pool's figures, if it came from one.
pub(crate) fn forget(dptr: DevPtr) {
    let mut b = books();
    if let Some((pool, bytes)) = b.buffers.remove(&dptr)
        && let Some(figures) = b.pools.get_mut(&pool)
    {
        figures.0 -= bytes;
    }
}

/// Frees the buffers whose stream reached their stream-ordered free. Called at
/// allocations, stream-ordered frees, synchronizations and `cuMemGetInfo`.
pub(crate) fn reap() {
    let Some(events) = ffi::driver::events() else {
        return;
    };
    let done: Vec<(DevPtr, usize)> = {
        let mut b = books();
        if b.pending.is_empty() {
            return;
        }
        let (done, waiting) = b
            .pending
            .drain(..)
            .partition(|(_, event)| events.query(*event as Handle) != ffi::CUDA_ERROR_NOT_READY);
        b.pending = waiting;
        done
    };
    for (dptr, event) in done {
        events.destroy(event as Handle);
        let rc = free_now(dptr);
        if rc != ffi::CUDA_SUCCESS {
            diag::warn(&format!(
                "a stream-ordered free failed with CUDA error {rc}"
            ));
        }
    }
}

/// Whether `attr` of a pool is one of the figures the served allocations add to.
fn is_figure(attr: c_int) -> bool {
    FIGURES.contains(&attr)
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> CuResult {
    hooks::guarded("cuMemPoolGetAttribute", || {
        let real = real!(c"cuMemPoolGetAttribute"; fn(Handle, c_int, *mut c_void) -> CuResult);
        // SAFETY: forwarded as given.
        let rc = unsafe { real(pool, attr, value) };
        if rc == ffi::CUDA_SUCCESS && is_figure(attr) {
            let (now, high) = books()
                .pools
                .get(&(pool as usize))
                .copied()
                .unwrap_or_default();
            let ours = if HIGHS.contains(&attr) { high } else { now };
            // SAFETY: the driver wrote a cuuint64_t there, as cuda.h says of the figures.
            unsafe { *value.cast::<u64>() += ours };
        }
        rc
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> CuResult {
    hooks::guarded("cuMemPoolSetAttribute", || {
        let real = real!(c"cuMemPoolSetAttribute"; fn(Handle, c_int, *mut c_void) -> CuResult);
        // SAFETY: forwarded as given.
        let rc = unsafe { real(pool, attr, value) };
        if rc == ffi::CUDA_SUCCESS && HIGHS.contains(&attr) {
            // The driver accepted a reset of a high (only 0 is allowed).
            if let Some(figures) = books().pools.get_mut(&(pool as usize)) {
                figures.1 = figures.0;
            }
        }
        rc
    })
}

/// The entry points of this module, for the hooks' table.
pub(crate) fn table() -> Vec<(&'static CStr, usize)> {
    let mut t = allocs_table();
    t.extend([
        (c"cuMemFreeAsync", cuMemFreeAsync as *const () as usize),
        (
            c"cuMemFreeAsync_ptsz",
            cuMemFreeAsync_ptsz as *const () as usize,
        ),
        (
            c"cuMemPoolGetAttribute",
            cuMemPoolGetAttribute as *const () as usize,
        ),
        (
            c"cuMemPoolSetAttribute",
            cuMemPoolSetAttribute as *const () as usize,
        ),
    ]);
    t
}
