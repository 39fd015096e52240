//! The process's clients, one per device it allocates on (issue 42, item 1): each holds
//! its own connection to that device's daemon, found by the device's UUID, with its own
//! buffers, command thread, reconnection and watch of the daemon. The first device's
//! (ordinal 0) connects at `cuInit`, as a process that uses one GPU always did; another
//! device's connects at its first managed call (an allocation, `cuMemGetInfo`) made
//! with one of its contexts current. A device whose daemon cannot be reached then is
//! said once and left unmanaged: its allocations go to the driver as they are.
//!
//! Calls that name an address (frees, a program's mappings, IPC exports) go to the
//! client that holds it; calls that allocate go to the current context's device's.
//! The books are read without a lock (a slot per device, set once): while only the first
//! device has a client, a launch that asks for its device's client costs two atomic
//! loads; once a second one connected, it also asks the driver for the current device.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::client::{self, Client};
use crate::diag;
use crate::ffi::{CuResult, DevPtr, driver};
use crate::vmm::Buffers;

/// Devices a process may have clients on; beyond, a device is unmanaged (said once).
const DEVICES_MAX: usize = 64;

/// Each device's client, once it connected.
static CLIENTS: [OnceLock<&'static Client>; DEVICES_MAX] = [const { OnceLock::new() }; DEVICES_MAX];

/// One more than the highest device with a client: the slots worth looking at.
static SLOTS_USED: AtomicUsize = AtomicUsize::new(0);

/// Devices whose daemon could not be reached at their first managed call.
static UNREACHABLE: [AtomicBool; DEVICES_MAX] = [const { AtomicBool::new(false) }; DEVICES_MAX];

/// Taken while a device's client connects, so that two threads make one.
static CONNECTING: Mutex<()> = Mutex::new(());

/// The slot of `device`, if it can have one.
fn slot(device: c_int) -> Option<&'static OnceLock<&'static Client>> {
    usize::try_from(device).ok().and_then(|d| CLIENTS.get(d))
}

/// Keeps device `device`'s new client.
fn keep(device: usize, client: &'static Client) {
    let _ = CLIENTS[device].set(client);
    SLOTS_USED.fetch_max(device + 1, Ordering::AcqRel);
}

/// Connects the first device's client (at `cuInit`).
pub fn connect_first() -> Result<&'static Client, String> {
    let client = client::connect(0)?;
    keep(0, client);
    Ok(client)
}

/// Device `device`'s client, if it connected.
pub fn existing(device: c_int) -> Option<&'static Client> {
    slot(device)?.get().copied()
}

/// Device `device`'s client, connected now at the device's first managed call; `None`
/// if its daemon cannot be reached (said once) or the device is beyond
/// [`DEVICES_MAX`].
pub fn of_device(device: c_int) -> Option<&'static Client> {
    if let Some(client) = existing(device) {
        return Some(client);
    }
    if slot(device).is_none() {
        unmanaged_once(
            device,
            &format!("the interposer manages devices below {DEVICES_MAX}"),
        );
        return None;
    }
    let unreachable = &UNREACHABLE[device as usize];
    if unreachable.load(Ordering::Relaxed) {
        return None;
    }
    let _connecting = CONNECTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(client) = existing(device) {
        return Some(client);
    }
    if unreachable.load(Ordering::Relaxed) {
        return None;
    }
    match client::connect(device) {
        Ok(client) => {
            keep(device as usize, client);
            Some(client)
        }
        Err(e) => {
            unreachable.store(true, Ordering::Relaxed);
            unmanaged_once(device, &e);
            None
        }
    }
}

/// Says that device `device`'s memory is not managed, and why (at most once a device,
/// since only the first call for it gets here, or [`DEVICES_MAX`] and beyond once).
fn unmanaged_once(device: c_int, why: &str) {
    static SAID_BEYOND: AtomicBool = AtomicBool::new(false);
    if slot(device).is_none() && SAID_BEYOND.swap(true, Ordering::Relaxed) {
        return;
    }
    diag::warn(&format!(
        "{why}; allocations on device {device} pass through unmanaged"
    ));
}

/// The current context's device's client, connected now if this is its first managed
/// call, while its daemon is connected; device 0's without a current context (whose
/// calls then fail as the driver fails them).
pub fn current() -> Option<&'static Client> {
    of_device(driver::current_device().unwrap_or(0)).filter(|c| c.lost().is_none())
}

/// The current context's device's client, if it connected and its daemon is: whose
/// daemon a call's work is reported to. While the first device's is the only one, that
/// one, without asking the driver.
pub fn current_existing() -> Option<&'static Client> {
    let client = if SLOTS_USED.load(Ordering::Acquire) <= 1 {
        existing(0)
    } else {
        existing(driver::current_device().unwrap_or(0))
    };
    client.filter(|c| c.lost().is_none())
}

/// Every client, connected or lost, by device.
pub fn every() -> impl Iterator<Item = &'static Client> {
    let used = SLOTS_USED.load(Ordering::Acquire) as c_int;
    (0..used).filter_map(existing)
}

/// The client whose buffers hold `va`.
pub fn holding(va: DevPtr) -> Option<&'static Client> {
    every().find(|c| c.contains(va))
}

/// The clients together, as a program's own mappings (`vmm`) see them: an address
/// goes to the client holding it, an allocation to the current device's (the hook
/// made sure it has one).
pub struct Everyone;

impl Buffers for Everyone {
    fn alloc(&self, bytes: u64) -> Result<DevPtr, (CuResult, String)> {
        match current() {
            Some(client) => Buffers::alloc(client, bytes),
            None => Err((
                crate::ffi::CUDA_ERROR_NOT_SUPPORTED,
                "the current device has no gpuswap daemon".into(),
            )),
        }
    }

    fn free(&self, va: DevPtr) -> Option<Result<(), String>> {
        Buffers::free(holding(va)?, va)
    }

    fn chunk_handles(&self, va: DevPtr) -> Option<(u64, u64, Vec<u64>)> {
        Buffers::chunk_handles(holding(va)?, va)
    }
}
