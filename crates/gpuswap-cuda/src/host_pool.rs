//! Pinned host memory kept for evictions. Creating a chunk's host memory (`cuMemCreate`
//! of a host location pins its pages) was 52-80 % of an eviction on an H100
//! (docs/real-gpu.md: 187 us per MiB, where the rest of the move takes 43.6 us per MiB),
//! so moves back to VRAM keep their host memory for the next eviction instead of
//! releasing it: under the daemon's turns a tenant's overflow goes out and comes back at
//! every handover, and after the first it finds its pinned memory ready.
//!
//! `GPUSWAP_HOST_POOL` sets the most bytes kept (bytes, or with a unit such as MiB):
//! - unset: the daemon's VRAM (`Welcome::vram_bytes`), as much as the process's data
//!   may hold in host memory when the daemon sends nothing better; nothing is pinned
//!   ahead;
//! - whatever it says, at most that (or the machine's available memory, if smaller): a
//!   larger size is cut with a warning, as a pool without a bound would pin host memory
//!   until the process's own calls fail;
//! - a size: that much, and a thread pins chunks ahead up to it while the process copies
//!   (it starts at the first eviction). On the H100 a 64 MiB pool pinned ahead made
//!   2 MiB evictions 1.7 times faster and 8 MiB ones 1.1 times slower (one run each; the
//!   driver appears to serialize the pinning with the copies);
//! - `0`: none; every move creates its own.
//!
//! Kept memory is pinned host memory the daemon does not count: each process may hold
//! up to the pool's size beyond what the daemon placed in host memory.
//!
//! Every chunk of host memory is mapped for good at a window of its own in the device's
//! address space (`HostChunk`), besides the chunk's address while it holds a chunk's
//! data: a move copies into it or out of it there, with no mapping of its own, and the
//! window stays mapped while the pool keeps it. (One large host handle mapped chunk by
//! chunk at offsets would need a window per handle only, but CUDA documented the
//! offset of `cuMemMap` as "must be zero" before 12.x and a slab's chunks could not be
//! unpinned one by one.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use crate::diag;
use crate::ffi::{self, DevPtr, Handle, driver};

/// Pinned host memory of one chunk, mapped for good at a window of the device's address
/// space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostChunk {
    /// The memory.
    pub handle: u64,
    /// Where it is mapped for the moves' copies.
    pub window: DevPtr,
    /// Its length (whole granules).
    pub len: u64,
    /// The device whose context mapped it: only that device may reach the window (the
    /// access granted is the current device's), so only its moves may take it.
    pub device: std::ffi::c_int,
}

/// The ready memory and what the pinning thread needs to know.
struct Pool {
    /// Ready host memory.
    ready: Vec<HostChunk>,
    ready_bytes: u64,
    /// The size the thread pins: the largest an eviction asked for (a buffer's last
    /// chunk may be shorter).
    chunk_bytes: u64,
    /// The context the thread pins in: the last evicted buffer's.
    ctx: usize,
    started: bool,
    /// Evictions served from the pool, and those that created their own.
    hits: u64,
    misses: u64,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    ready: Vec::new(),
    ready_bytes: 0,
    chunk_bytes: 0,
    ctx: 0,
    started: false,
    hits: 0,
    misses: 0,
});

/// Signalled when the pool falls below its size.
static BELOW: Condvar = Condvar::new();

fn lock() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The most the pool may keep, and its size when `GPUSWAP_HOST_POOL` is unset: the
/// daemons' VRAM or the machine's available memory, the smaller, set at each
/// connection.
static BOUND_BYTES: AtomicU64 = AtomicU64::new(0);

/// The VRAM of the daemons the process connected to, one per device.
static DAEMONS_VRAM_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bounds the pool by the VRAM the daemons manage, `vram_bytes` more for a newly
/// connected device's (the most of the process's data they place in host memory, its
/// host budget as a tenant sees it: one pool serves every device, host memory being no
/// device's) and by the memory the machine has available; says so when
/// `GPUSWAP_HOST_POOL` asks for more.
pub(crate) fn add_bound(vram_bytes: u64) {
    let vram_bytes = DAEMONS_VRAM_BYTES.fetch_add(vram_bytes, Ordering::Relaxed) + vram_bytes;
    let available = available_bytes();
    let bound = vram_bytes.min(available.unwrap_or(u64::MAX));
    BOUND_BYTES.store(bound, Ordering::Relaxed);
    if let Some(asked) = asked_bytes().filter(|asked| *asked > bound) {
        let why = if bound < vram_bytes {
            "the memory this machine has available"
        } else {
            "the daemon's VRAM, the most of this process's data it places in host memory"
        };
        diag::warn(&format!(
            "GPUSWAP_HOST_POOL asks for {} of pinned host memory; at most {} is kept ({why})",
            gpuswap_units::format_bytes(asked),
            gpuswap_units::format_bytes(bound)
        ));
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes; `None` where it cannot be read.
fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `GPUSWAP_HOST_POOL`: bytes, or a number with a unit (`64MiB`); `None` when unset. An
/// unreadable value is said once and no pool kept.
fn asked_bytes() -> Option<u64> {
    static BYTES: OnceLock<Option<u64>> = OnceLock::new();
    *BYTES.get_or_init(|| {
        let text = std::env::var("GPUSWAP_HOST_POOL").ok()?;
        Some(parse_bytes(&text).unwrap_or_else(|e| {
            diag::warn(&format!(
                "GPUSWAP_HOST_POOL={text:?} is not a size; expected bytes, or {}; no host \
                 memory is kept ready",
                e.expected
            ));
            0
        }))
    })
}

/// The most bytes kept.
fn pool_bytes() -> u64 {
    let bound = BOUND_BYTES.load(Ordering::Relaxed);
    asked_bytes().map_or(bound, |asked| asked.min(bound))
}

/// A bare number is bytes (what this variable always took); anything else is a size as
/// scenarios write it.
fn parse_bytes(text: &str) -> Result<u64, gpuswap_units::UnitError> {
    match text.trim().parse() {
        Ok(bytes) => Ok(bytes),
        Err(_) => gpuswap_units::parse_bytes(text),
    }
}

/// Host memory of `len` bytes for a chunk of a buffer in context `ctx` (current): kept
/// memory of that size if the pool has some, else new. `eviction`: a move's, counted in
/// the trace's pool line.
pub(crate) fn take(len: u64, ctx: usize, eviction: bool) -> Result<HostChunk, String> {
    match take_kept(len, ctx, eviction) {
        Some(kept) => Ok(kept),
        None => create(len),
    }
}

/// New host memory of `len` bytes, mapped at its window.
fn create(len: u64) -> Result<HostChunk, String> {
    let handle = driver::create(len, ffi::LOCATION_HOST)
        .map_err(|rc| format!("cuMemCreate of {len} bytes in Host failed with CUDA error {rc}"))?;
    match driver::map_window(handle, len) {
        Ok(window) => Ok(HostChunk {
            handle,
            window,
            len,
            device: driver::this_device(),
        }),
        Err(e) => {
            let _ = driver::release(handle);
            Err(e)
        }
    }
}

/// Unmaps host memory from its window and releases it.
fn destroy(chunk: HostChunk) {
    let released = driver::unmap_window(chunk.window, chunk.len).and(driver::release(chunk.handle));
    if let Err(e) = released {
        diag::warn(&format!("releasing host memory: {e}"));
    }
}

/// Kept memory of `len` bytes; with `GPUSWAP_HOST_POOL` set, wakes the pinning thread
/// (starting it at the first call) to fill the pool again.
fn take_kept(len: u64, ctx: usize, eviction: bool) -> Option<HostChunk> {
    if pool_bytes() == 0 {
        return None;
    }
    diag::add_report(diag::Report::HostPool, report);
    let mut pool = lock();
    pool.chunk_bytes = pool.chunk_bytes.max(len);
    pool.ctx = ctx;
    if !pool.started && asked_bytes().is_some() {
        pool.started = std::thread::Builder::new()
            .name("gpuswap-pinner".into())
            .spawn(pin_ahead)
            .is_ok();
    }
    let found = usable(&pool.ready, len, driver::this_device());
    let taken = found.map(|at| pool.ready.swap_remove(at));
    if let Some(chunk) = taken {
        pool.ready_bytes -= chunk.len;
    }
    if eviction {
        *(if taken.is_some() {
            &mut pool.hits
        } else {
            &mut pool.misses
        }) += 1;
    }
    BELOW.notify_one();
    taken
}

/// Which of the `ready` chunks a move of `len` bytes on `device` may take: one of its
/// length that `device` mapped (another device cannot reach its window).
fn usable(ready: &[HostChunk], len: u64, device: std::ffi::c_int) -> Option<usize> {
    ready
        .iter()
        .position(|c| c.len == len && c.device == device)
}

/// Host memory a chunk no longer holds: kept for the next eviction, or released when
/// the pool is full.
pub(crate) fn give(chunk: HostChunk) {
    if !keep(chunk) {
        destroy(chunk);
    }
}

/// Keeps host memory for the next eviction; `false` when the pool is full.
fn keep(chunk: HostChunk) -> bool {
    let mut pool = lock();
    if pool.ready_bytes + chunk.len > pool_bytes() {
        return false;
    }
    pool.ready.push(chunk);
    pool.ready_bytes += chunk.len;
    true
}

/// The pinning thread: creates host memory of the evictions' chunk size while the pool
/// is below its size. A refused creation ends it (the moves create their own then).
fn pin_ahead() {
    loop {
        let (len, ctx) = {
            let mut pool = lock();
            while pool.ready_bytes + pool.chunk_bytes > pool_bytes() {
                pool = BELOW
                    .wait(pool)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            (pool.chunk_bytes, pool.ctx)
        };
        let created = driver::set_context(ctx as Handle).and_then(|()| create(len));
        match created {
            Ok(chunk) => {
                if !keep(chunk) {
                    destroy(chunk);
                }
            }
            Err(e) => {
                diag::warn(&format!(
                    "pinning host memory ahead stopped ({e}); evictions create their own"
                ));
                return;
            }
        }
    }
}

/// Evictions served from the pool and in all, for the trace; `None` before any.
fn report() -> Option<String> {
    let pool = lock();
    let all = pool.hits + pool.misses;
    (all > 0).then(|| {
        let pinned = if asked_bytes().is_some() {
            "pinned ahead"
        } else {
            "kept from moves back, none pinned ahead"
        };
        format!(
            "host memory for {} of {all} evictions came from the pool (at most {} MiB, \
             {pinned})",
            pool.hits,
            pool_bytes() >> 20
        )
    })
}

#[cfg(test)]
mod tests {
    fn parse_bytes(text: &str) -> Option<u64> {
        super::parse_bytes(text).ok()
    }

    #[test]
    fn a_move_takes_only_host_memory_of_its_length_that_its_device_mapped() {
        let chunk = |len, device| super::HostChunk {
            handle: 1,
            window: 2,
            len,
            device,
        };
        let ready = [chunk(4 << 20, 0), chunk(2 << 20, 1), chunk(2 << 20, 0)];
        assert_eq!(super::usable(&ready, 2 << 20, 0), Some(2));
        assert_eq!(super::usable(&ready, 2 << 20, 1), Some(1));
        assert_eq!(super::usable(&ready, 4 << 20, 1), None);
        assert_eq!(super::usable(&ready, 8 << 20, 0), None);
    }

    #[test]
    fn pool_sizes_read_as_bytes_or_with_a_unit_as_scenarios_write_them() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
        assert_eq!(parse_bytes(" 2 GiB "), Some(2 << 30));
        assert_eq!(parse_bytes("8KiB"), Some(8 << 10));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("64MB"), Some(64_000_000));
        assert_eq!(parse_bytes("1.5MiB"), Some(3 << 19));
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("99999999999GiB"), None);
        // What the warning names as accepted is the reader's own list, whole.
        let refused = super::parse_bytes("lots").unwrap_err();
        assert!(refused.expected.contains("TiB") && refused.expected.contains("KB"));
    }
}
