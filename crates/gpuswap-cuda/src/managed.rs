//! Memory the daemon cannot move (issue 41, items 3 and 6): managed memory
//! (`cuMemAllocManaged`), which the driver's own paging moves between VRAM and host
//! memory, and managed buffers pinned in place because another process maps them
//! (`ipc`). The interposer keeps the books of both and tells the daemon their totals
//! (`Unmovable`) whenever they change and after a reconnection; the daemon counts them
//! against the tenant and its contract and gives out that much less VRAM.
//!
//! Managed memory is allocated by the driver as asked (`cuMemAdvise` and
//! `cuMemPrefetchAsync` are not interposed: they reach the driver unchanged) and freed
//! there by `cuMemFree`; it is counted at its allocated size, rounded up to the
//! device's granularity, whether or not its pages are resident now: what the tenant may
//! bring into VRAM at any time. It is the cheapest victim the daemon cannot move
//! itself: the driver pages it out when VRAM runs short, and it counts in the tenant's
//! share, so the tenant's movable chunks give way first.

use std::collections::BTreeMap;
use std::ffi::{CStr, c_uint};
use std::sync::Mutex;

use crate::client::Client;
use crate::ffi::{self, CuResult, DevPtr, real};
use crate::hooks;

/// The tenant's memory that cannot move, by address.
struct Unmovable {
    /// Managed memory: its allocated bytes.
    managed: BTreeMap<DevPtr, u64>,
    /// Buffers pinned for IPC: their bytes.
    pinned: BTreeMap<DevPtr, u64>,
}

static BOOKS: Mutex<Unmovable> = Mutex::new(Unmovable {
    managed: BTreeMap::new(),
    pinned: BTreeMap::new(),
});

fn books() -> std::sync::MutexGuard<'static, Unmovable> {
    BOOKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Managed memory allocated now, in bytes.
pub(crate) fn managed_bytes() -> u64 {
    books().managed.values().sum()
}

/// Tells the daemon the totals (after a change, or on a new connection).
pub(crate) fn report(client: &Client) {
    let (managed_bytes, pinned_bytes) = {
        let b = books();
        (b.managed.values().sum(), b.pinned.values().sum())
    };
    client.report_unmovable(managed_bytes, pinned_bytes);
}

/// A managed buffer at `va` of `bytes` is pinned: counted here from now on (before the
/// daemon's movable books let it go).
pub(crate) fn pinned(client: &Client, va: DevPtr, bytes: u64) {
    books().pinned.insert(va, bytes);
    report(client);
}

/// Memory at `va` was freed: out of these books, if it was in them.
pub(crate) fn forget(client: &Client, va: DevPtr) {
    let forgot = {
        let mut b = books();
        b.managed.remove(&va).is_some() | b.pinned.remove(&va).is_some()
    };
    if forgot {
        report(client);
    }
}

/// Managed memory: the driver allocates it, the daemon is told it cannot move it.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut DevPtr,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    hooks::guarded("cuMemAllocManaged", || {
        if let Some(rc) = hooks::failed_start() {
            return rc;
        }
        let real = real!(c"cuMemAllocManaged"; fn(*mut DevPtr, usize, c_uint) -> CuResult);
        // SAFETY: forwarded as given.
        let rc = unsafe { real(dptr, bytes, flags) };
        if rc != ffi::CUDA_SUCCESS {
            return rc;
        }
        if let Some(client) = hooks::managed() {
            // SAFETY: the driver wrote the address there.
            let va = unsafe { *dptr };
            books().managed.insert(va, client.granules(bytes as u64));
            report(client);
        }
        rc
    })
}

/// The entry points of this module, for the hooks' table.
pub(crate) fn table() -> Vec<(&'static CStr, usize)> {
    vec![(
        c"cuMemAllocManaged",
        cuMemAllocManaged as *const () as usize,
    )]
}
