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
//!
//! Each entry is booked to a device (an ordinal): managed memory to the device current
//! at its allocation, a pinned buffer to its own; each device's daemon is told its
//! device's totals.

use std::collections::BTreeMap;
use std::sync::Mutex;

use std::ffi::c_int;

use crate::ffi::DevPtr;

/// The tenant's memory that cannot move, by address: its device and bytes.
struct Unmovable {
    /// Managed memory: its allocated bytes.
    managed: BTreeMap<DevPtr, (c_int, u64)>,
    /// Buffers pinned for IPC: their bytes.
    pinned: BTreeMap<DevPtr, (c_int, u64)>,
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

/// The bytes booked to `device` in `book`.
fn of_device(book: &BTreeMap<DevPtr, (c_int, u64)>, device: c_int) -> u64 {
    book.values()
        .filter(|(d, _)| *d == device)
        .map(|(_, bytes)| bytes)
        .sum()
}

/// Managed memory of `device` allocated now, in bytes.
pub(crate) fn managed_bytes(device: c_int) -> u64 {
    of_device(&books().managed, device)
}

/// Managed memory and pinned buffers of `device` now, in bytes: what `Unmovable` says.
pub(crate) fn totals(device: c_int) -> (u64, u64) {
    let b = books();
    (of_device(&b.managed, device), of_device(&b.pinned, device))
}

/// Managed memory of `bytes` (allocated size) was allocated at `va` for `device`.
pub(crate) fn allocated(va: DevPtr, device: c_int, bytes: u64) {
    books().managed.insert(va, (device, bytes));
}

/// The managed buffer of `bytes` at `va`, on `device`, is pinned.
pub(crate) fn pinned(va: DevPtr, device: c_int, bytes: u64) {
    books().pinned.insert(va, (device, bytes));
}

/// Memory at `va` was freed: out of these books; the device it was booked to, if it
/// was in them.
pub(crate) fn forget(va: DevPtr) -> Option<c_int> {
    let mut b = books();
    let managed = b.managed.remove(&va).map(|(d, _)| d);
    let pinned = b.pinned.remove(&va).map(|(d, _)| d);
    managed.or(pinned)
}
