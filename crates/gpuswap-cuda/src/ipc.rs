//! IPC exports (issue 41, item 4): `cuIpcGetMemHandle` of a managed buffer pins it
//! where it is. Another process maps its memory, which the interposer cannot remap
//! under that process, so the daemon never moves it again: the process counts it as
//! pinned (`managed`), and it leaves the daemon's movable books. It is counted once,
//! at the exporter: an importer's `cuIpcOpenMemHandle` and `cuIpcCloseMemHandle` are
//! not interposed and reach the driver unchanged, so they count nothing.
//!
//! A buffer is pinned as it is: chunks in VRAM stay there, chunks in host memory at
//! the export stay in host memory (mapped into the device's address space, as the
//! importer then sees them); all of it counts as pinned. The pin lasts until the
//! buffer is freed, even if the driver refuses the export (a real driver exports only
//! `cuMemAlloc`'s own memory and refuses memory mapped with `cuMemMap`, which managed
//! buffers are: then the program gets the driver's error, and the pin only costs the
//! daemon a buffer it may not move).

use std::ffi::CStr;

use crate::diag;
use crate::ffi::{self, CuResult, DevPtr, Handle, real};
use crate::hooks;

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetMemHandle(handle: Handle, dptr: DevPtr) -> CuResult {
    hooks::guarded("cuIpcGetMemHandle", || {
        let real = real!(c"cuIpcGetMemHandle"; fn(Handle, DevPtr) -> CuResult);
        let Some(client) = hooks::managed() else {
            // SAFETY: forwarded as given.
            return unsafe { real(handle, dptr) };
        };
        // No move may start between the export and the pin: moves run while the
        // process is suspended, which waits for the gate.
        let _held = hooks::gate();
        if client.pin(dptr) {
            diag::trace_note("a managed buffer was pinned for an IPC export");
        }
        // SAFETY: forwarded as given.
        let rc = unsafe { real(handle, dptr) };
        if rc != ffi::CUDA_SUCCESS {
            diag::warn(&format!(
                "cuIpcGetMemHandle failed with CUDA error {rc}; a managed buffer stays pinned \
                 where it is until it is freed"
            ));
        }
        rc
    })
}

/// The entry points of this module, for the hooks' table.
pub(crate) fn table() -> Vec<(&'static CStr, usize)> {
    vec![(
        c"cuIpcGetMemHandle",
        cuIpcGetMemHandle as *const () as usize,
    )]
}
