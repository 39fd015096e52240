//! Memory the daemon cannot move (issue 41, items 3 and 6): managed memory
//! (`cuMemAllocManaged`), which the driver's own paging moves between VRAM and host
//! memory, and managed buffers pinned in place because another process maps them
//! (`cuIpcGetMemHandle`). The interposer keeps the books of both here (the entry points
//! are in `hooks`) and tells the daemon their totals
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
use std::sync::Mutex;

use crate::ffi::DevPtr;

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

/// Managed memory and pinned buffers now, in bytes: what `Unmovable` says.
pub(crate) fn totals() -> (u64, u64) {
    let b = books();
    (b.managed.values().sum(), b.pinned.values().sum())
}

/// Managed memory of `bytes` (allocated size) was allocated at `va`.
pub(crate) fn allocated(va: DevPtr, bytes: u64) {
    books().managed.insert(va, bytes);
}

/// The managed buffer of `bytes` at `va` is pinned.
pub(crate) fn pinned(va: DevPtr, bytes: u64) {
    books().pinned.insert(va, bytes);
}

/// Memory at `va` was freed: out of these books; whether it was in them.
pub(crate) fn forget(va: DevPtr) -> bool {
    let mut b = books();
    b.managed.remove(&va).is_some() | b.pinned.remove(&va).is_some()
}
