//! The exported entry points. Each catches panics (none may unwind into C) and either
//! manages the call, forwards it to the real driver, or refuses it loudly.

use std::ffi::{CStr, c_char, c_int, c_uchar, c_uint, c_ushort, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{OnceLock, RwLockReadGuard};

use crate::client::{self, Client};
use crate::clients;
use crate::diag;
use crate::ffi::{self, CuResult, DevPtr, Handle, real};
use crate::pools;
use crate::progress::{self, Launch, Meter};

/// How the process runs.
enum Mode {
    /// Under the daemons: the first device's client (`clients` holds every device's).
    Managed(&'static Client),
    /// `GPUSWAP_PASSTHROUGH=1`: everything goes to the driver unchanged.
    Passthrough,
    /// The daemon could not be reached: CUDA calls fail with this message.
    Failed(String),
}

static MODE: OnceLock<Mode> = OnceLock::new();

/// Set in a child after `fork`: the parent's connection, buffers and reader thread are
/// not the child's, so the child manages nothing (CUDA itself does not support a
/// parent's context in a child).
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The child's side of `fork`: it manages nothing, and closes its copies of the
/// connections and of the IPC exports' socket, so that a parent that ends is seen gone
/// while the child lives (a program the child execs connects as a tenant of its own).
extern "C" fn forked_child() {
    FORKED.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(Mode::Managed(_)) = MODE.get() {
        // Lock-free: the clients' books are atomics.
        clients::every().for_each(Client::close_in_child);
        crate::ipc::close_in_child();
    }
}

/// The first device's client, connected or lost, unless this is a forked child: the
/// process is under the daemons.
fn client() -> Option<&'static Client> {
    match MODE.get()? {
        Mode::Managed(c) if !FORKED.load(std::sync::atomic::Ordering::Relaxed) => Some(c),
        _ => None,
    }
}

/// The first device's client, while it is connected.
fn managed() -> Option<&'static Client> {
    client().filter(|c| c.lost().is_none())
}

/// The client that holds `va`, connected or lost, unless this is a forked child.
fn holder(va: DevPtr) -> Option<&'static Client> {
    client().and_then(|_| clients::holding(va))
}

/// A call that must not start while the process is suspended holds this (a suspension
/// by any device's daemon: see `client`).
fn gate() -> Option<RwLockReadGuard<'static, ()>> {
    client().map(|_| client::gate())
}

/// [`gate`] for a call that starts GPU work, which the current device's daemon's turns
/// count as demand.
fn work_gate() -> Option<client::Work<'static>> {
    client().map(|_| client::start_work(clients::current_existing()))
}

/// The progress meter, while the daemon that asked for it is connected.
fn meter() -> Option<&'static Meter> {
    managed().and(progress::meter())
}

fn guarded(name: &'static str, f: impl FnOnce() -> CuResult) -> CuResult {
    diag::trace_call(name);
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        diag::warn("internal error (a panic) in the interposer; the call failed");
        ffi::CUDA_ERROR_UNKNOWN
    })
}

/// Says once per name that a call is not managed, and why.
fn refuse_once(name: &str, why: &str) -> CuResult {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !said.iter().any(|s| s == name) {
        said.push(name.to_owned());
        diag::warn(&format!("{name} is not managed by gpuswap: {why}"));
    }
    ffi::CUDA_ERROR_NOT_SUPPORTED
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CuResult {
    guarded("cuInit", || {
        let real = real!(c"cuInit"; fn(c_uint) -> CuResult);
        // SAFETY: forwarded as given.
        let rc = unsafe { real(flags) };
        if rc != ffi::CUDA_SUCCESS {
            return rc;
        }
        let mode = MODE.get_or_init(|| {
            if std::env::var("GPUSWAP_PASSTHROUGH").is_ok_and(|v| v == "1") {
                return Mode::Passthrough;
            }
            match clients::connect_first() {
                Ok(c) => {
                    // SAFETY: registers a handler that reads only atomics and `OnceLock`s
                    // and calls only `close`, async-signal-safe as a forked child needs.
                    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
                    Mode::Managed(c)
                }
                Err(e) => {
                    diag::warn(&e);
                    Mode::Failed(e)
                }
            }
        });
        match mode {
            Mode::Failed(_) => ffi::CUDA_ERROR_NOT_INITIALIZED,
            _ => ffi::CUDA_SUCCESS,
        }
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut DevPtr, bytes: usize) -> CuResult {
    guarded("cuMemAlloc_v2", || {
        if let Some(rc) = failed_start() {
            return rc;
        }
        let Some(client) = allocating_client() else {
            let real = real!(c"cuMemAlloc_v2"; fn(*mut DevPtr, usize) -> CuResult);
            // SAFETY: forwarded as given.
            return unsafe { real(dptr, bytes) };
        };
        if bytes == 0 {
            // As the driver answers a zero-byte request.
            return ffi::CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the caller gives `dptr` as cuda.h says.
        unsafe { alloc_managed(client, dptr, bytes as u64) }
    })
}

/// The row alignment of a pitched allocation: 512 bytes, a multiple of every
/// alignment a pitched row must meet (the texture pitch alignment, 32 bytes on current
/// GPUs; the widest element, 16). cuMemAllocPitch promises a pitch that works with
/// cuMemcpy2D, not a particular one, so any such multiple keeps its contract.
const PITCH_ALIGN_BYTES: usize = 512;

/// A pitched allocation (issue 41, item 4) is a managed allocation of `pitch * height`
/// bytes, its pitch the width rounded up to [`PITCH_ALIGN_BYTES`].
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut DevPtr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> CuResult {
    guarded("cuMemAllocPitch_v2", || {
        if let Some(rc) = failed_start() {
            return rc;
        }
        let Some(client) = allocating_client() else {
            let real = real!(c"cuMemAllocPitch_v2"; fn(*mut DevPtr, *mut usize, usize, usize, c_uint) -> CuResult);
            // SAFETY: forwarded as given.
            return unsafe { real(dptr, pitch, width, height, elem) };
        };
        // cuda.h: the element size is 4, 8 or 16 bytes; a zero extent is invalid.
        let rows = width
            .checked_next_multiple_of(PITCH_ALIGN_BYTES)
            .filter(|_| matches!(elem, 4 | 8 | 16) && width > 0 && height > 0);
        let Some(row_bytes) = rows else {
            return ffi::CUDA_ERROR_INVALID_VALUE;
        };
        let Some(bytes) = row_bytes.checked_mul(height) else {
            return ffi::CUDA_ERROR_OUT_OF_MEMORY;
        };
        if pitch.is_null() {
            return ffi::CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the caller gives `dptr` as cuda.h says.
        let rc = unsafe { alloc_managed(client, dptr, bytes as u64) };
        if rc == ffi::CUDA_SUCCESS {
            // SAFETY: checked non-null; the caller gives a writable pointer.
            unsafe { *pitch = row_bytes };
        }
        rc
    })
}

/// The client that manages an allocation on the current device (each device's daemon
/// manages its own; `CUDA_VISIBLE_DEVICES` picks which GPUs the ordinals are),
/// connected at the device's first one, or `None` to forward it to the driver (a device
/// whose daemon cannot be reached is said once). See [`failed_start`] first.
fn allocating_client() -> Option<&'static client::Client> {
    client().and_then(|_| clients::current())
}

/// `CUDA_ERROR_NOT_INITIALIZED`, said again, when the connection to the daemon failed
/// at `cuInit`: allocations then fail as `cuInit` did.
fn failed_start() -> Option<CuResult> {
    let Some(Mode::Failed(e)) = MODE.get() else {
        return None;
    };
    diag::warn(e);
    Some(ffi::CUDA_ERROR_NOT_INITIALIZED)
}

/// A managed allocation of `bytes` for the program, its address written at `dptr`.
///
/// # Safety
/// `dptr` is null or writable.
pub(crate) unsafe fn alloc_managed(
    client: &client::Client,
    dptr: *mut DevPtr,
    bytes: u64,
) -> CuResult {
    if dptr.is_null() {
        return ffi::CUDA_ERROR_INVALID_VALUE;
    }
    // Buffers whose stream reached their free make room first.
    reap();
    match client.alloc(bytes) {
        Ok(va) => {
            // SAFETY: checked non-null; the caller gives a writable pointer.
            unsafe { *dptr = va };
            ffi::CUDA_SUCCESS
        }
        Err((rc, why)) => {
            diag::warn(&format!("an allocation of {bytes} bytes failed: {why}"));
            rc
        }
    }
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: DevPtr) -> CuResult {
    guarded("cuMemFree_v2", || {
        if client().is_some() {
            let _held = gate();
            let freed = clients::holding(dptr).and_then(|c| c.free(dptr));
            if freed.is_some() {
                crate::pools::forget(dptr);
                forget_unmovable(dptr);
            }
            match freed {
                Some(Ok(())) => return ffi::CUDA_SUCCESS,
                Some(Err(e)) => {
                    diag::warn(&format!("cuMemFree: {e}"));
                    return ffi::CUDA_ERROR_INVALID_VALUE;
                }
                None => {}
            }
        }
        let real = real!(c"cuMemFree_v2"; fn(DevPtr) -> CuResult);
        // SAFETY: not ours: forwarded as given.
        let rc = unsafe { real(dptr) };
        if rc == ffi::CUDA_SUCCESS && client().is_some() {
            // Managed memory is the driver's: freed there, out of the books here.
            forget_unmovable(dptr);
        }
        rc
    })
}

/// Memory at `dptr` was freed: out of the unmovable books (`managed`) and the IPC
/// exports, and its device's daemon told if it was in the books.
fn forget_unmovable(dptr: DevPtr) {
    crate::ipc::forget(dptr);
    if let Some(device) = crate::managed::forget(dptr)
        && let Some(client) = clients::existing(device)
    {
        client.report_unmovable();
    }
}

/// The tenant's view: the daemon's VRAM as the total, less what the process holds.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    guarded("cuMemGetInfo_v2", || {
        let Some(client) = allocating_client() else {
            let real = real!(c"cuMemGetInfo_v2"; fn(*mut usize, *mut usize) -> CuResult);
            // SAFETY: forwarded as given.
            return unsafe { real(free, total) };
        };
        if free.is_null() || total.is_null() {
            return ffi::CUDA_ERROR_INVALID_VALUE;
        }
        if ffi::driver::current_context().is_null() {
            // As the driver answers without a context.
            return ffi::CUDA_ERROR_INVALID_CONTEXT;
        }
        reap();
        // Managed memory counts at its size, as the daemon counts it.
        let held = client.vram_held_bytes() + crate::managed::managed_bytes(client.device);
        // SAFETY: checked non-null; the caller gives writable pointers.
        unsafe {
            *total = client.view_bytes as usize;
            *free = client.view_bytes.saturating_sub(held) as usize;
        }
        ffi::CUDA_SUCCESS
    })
}

/// A stream-ordered allocation (`pools`) from `pool` (0: the device's current pool):
/// managed as `cuMemAlloc`'s, else forwarded by `forward`.
fn alloc_stream_ordered(
    dptr: *mut DevPtr,
    bytes: usize,
    pool: usize,
    forward: impl FnOnce() -> CuResult,
) -> CuResult {
    if let Some(rc) = failed_start() {
        return rc;
    }
    let Some(client) = allocating_client() else {
        return forward();
    };
    if bytes == 0 {
        return ffi::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller gives `dptr` as cuda.h says.
    let rc = unsafe { alloc_managed(client, dptr, bytes as u64) };
    if rc == ffi::CUDA_SUCCESS {
        let pool = if pool == 0 {
            pools::current_pool()
        } else {
            pool
        };
        // SAFETY: written by the allocation just now.
        pools::served(unsafe { *dptr }, pool, bytes as u64);
    }
    rc
}

/// The stream-ordered allocation entry points (issue 41, item 2; the design: `pools`),
/// each `name(dptr, bytes, args)`: managed by [`alloc_stream_ordered`], from
/// the pool the expression after `from` says (0: the device's current one), else
/// forwarded to the driver's function of the same name.
macro_rules! stream_ordered_allocs {
    ($($name:ident($($arg:ident: $ty:ty),*) from $pool:expr;)*) => {
        $(
            /// # Safety
            /// Called by C with cuda.h's contract.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(dptr: *mut DevPtr, bytes: usize, $($arg: $ty),*) -> CuResult {
                guarded(stringify!($name), || {
                    alloc_stream_ordered(dptr, bytes, $pool, || {
                        let real = real!(cname(concat!(stringify!($name), "\0")); fn(*mut DevPtr, usize, $($ty),*) -> CuResult);
                        // SAFETY: forwarded as given.
                        unsafe { real(dptr, bytes, $($arg),*) }
                    })
                })
            }
        )*
        /// The stream-ordered entry points by name, the frees and pool figures included.
        fn stream_ordered_allocs_table() -> Vec<(&'static CStr, usize)> {
            let mut t = vec![$((cname(concat!(stringify!($name), "\0")), $name as *const () as usize)),*];
            t.extend([
                (c"cuMemFreeAsync", cuMemFreeAsync as *const () as usize),
                (c"cuMemFreeAsync_ptsz", cuMemFreeAsync_ptsz as *const () as usize),
                (c"cuMemPoolGetAttribute", cuMemPoolGetAttribute as *const () as usize),
                (c"cuMemPoolSetAttribute", cuMemPoolSetAttribute as *const () as usize),
            ]);
            t
        }
    };
}

stream_ordered_allocs! {
    cuMemAllocAsync(stream: P) from 0;
    cuMemAllocAsync_ptsz(stream: P) from 0;
    cuMemAllocFromPoolAsync(pool: P, stream: P) from pool as usize;
    cuMemAllocFromPoolAsync_ptsz(pool: P, stream: P) from pool as usize;
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
        pools::STREAM_PER_THREAD as Handle
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
    guarded(name, || {
        if holder(dptr).is_some_and(|c| c.holds(dptr)) {
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
        // SAFETY: our own entry point, with a pointer we manage.
        return unsafe { cuMemFree_v2(dptr) };
    };
    if events.capturing(stream) {
        return refuse_once(
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
    pools::defer(dptr, event);
    reap();
    ffi::CUDA_SUCCESS
}

/// Frees the buffers whose stream reached their stream-ordered free. Called at
/// allocations, stream-ordered frees, synchronizations and `cuMemGetInfo`.
fn reap() {
    for dptr in pools::reached() {
        // SAFETY: our own entry point, with a pointer we manage.
        let rc = unsafe { cuMemFree_v2(dptr) };
        if rc != ffi::CUDA_SUCCESS {
            diag::warn(&format!(
                "a stream-ordered free failed with CUDA error {rc}"
            ));
        }
    }
}

/// A pool's attribute, as the driver keeps it; its memory figures with the bytes of
/// the pool's allocations served as managed ones.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> CuResult {
    guarded("cuMemPoolGetAttribute", || {
        let real = real!(c"cuMemPoolGetAttribute"; fn(Handle, c_int, *mut c_void) -> CuResult);
        // SAFETY: forwarded as given.
        let rc = unsafe { real(pool, attr, value) };
        if rc == ffi::CUDA_SUCCESS
            && let Some(ours) = pools::figure(pool as usize, attr)
        {
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
    guarded("cuMemPoolSetAttribute", || {
        let real = real!(c"cuMemPoolSetAttribute"; fn(Handle, c_int, *mut c_void) -> CuResult);
        // SAFETY: forwarded as given.
        let rc = unsafe { real(pool, attr, value) };
        if rc == ffi::CUDA_SUCCESS {
            pools::set_figure(pool as usize, attr);
        }
        rc
    })
}

/// Managed memory (issue 41, item 3; `managed`): the driver allocates it, the daemon is
/// told it cannot move it.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut DevPtr,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    guarded("cuMemAllocManaged", || {
        if let Some(rc) = failed_start() {
            return rc;
        }
        let real = real!(c"cuMemAllocManaged"; fn(*mut DevPtr, usize, c_uint) -> CuResult);
        // SAFETY: forwarded as given.
        let rc = unsafe { real(dptr, bytes, flags) };
        if rc == ffi::CUDA_SUCCESS
            && let Some(client) = allocating_client()
        {
            let bytes = client.granules(bytes as u64);
            // SAFETY: the driver wrote the address there.
            crate::managed::allocated(unsafe { *dptr }, client.device, bytes);
            client.report_unmovable();
        }
        rc
    })
}

/// An IPC export (issue 41, item 4) of an address in a managed buffer (`ipc`): the
/// buffer is pinned where it is (another process maps its memory, which the interposer
/// cannot remap under that process, so the daemon never moves it again; the process
/// counts it as pinned, `managed`), its chunks made exportable, and the handle is
/// gpuswap's, served by the interposer. It is counted once, at the exporter: the
/// importer's interposer counts nothing. A buffer is pinned as it is: chunks in VRAM
/// stay there, chunks in host memory at the export stay in host memory (mapped into
/// the device's address space, as the importer then sees them); all of it counts as
/// pinned, until the buffer is freed. Other memory's export is the driver's.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetMemHandle(handle: Handle, dptr: DevPtr) -> CuResult {
    guarded("cuIpcGetMemHandle", || {
        let exported = holder(dptr)
            .filter(|_| !handle.is_null())
            .and_then(|client| crate::ipc::export(client, dptr));
        match exported {
            Some(Ok(ours)) => {
                diag::trace_note("a managed buffer was pinned for an IPC export");
                // SAFETY: checked non-null; the caller gives a CUipcMemHandle.
                unsafe { *handle.cast::<crate::ipc::IpcMemHandle>() = ours };
                ffi::CUDA_SUCCESS
            }
            Some(Err((rc, why))) => {
                diag::warn(&format!(
                    "cuIpcGetMemHandle of a managed buffer failed (CUDA error {rc}): {why}"
                ));
                rc
            }
            None => {
                let real = real!(c"cuIpcGetMemHandle"; fn(Handle, DevPtr) -> CuResult);
                // SAFETY: not ours: forwarded as given.
                unsafe { real(handle, dptr) }
            }
        }
    })
}

/// Opens an IPC handle: a gpuswap handle maps the exporter's buffer here (`ipc`),
/// whether or not this process is managed, and counts nothing; another goes to the
/// driver.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    dptr: *mut DevPtr,
    handle: crate::ipc::IpcMemHandle,
    flags: c_uint,
) -> CuResult {
    guarded("cuIpcOpenMemHandle_v2", || {
        let Some(ticket) = crate::ipc::Ticket::read(&handle) else {
            let real = real!(c"cuIpcOpenMemHandle_v2"; fn(*mut DevPtr, crate::ipc::IpcMemHandle, c_uint) -> CuResult);
            // SAFETY: not ours: forwarded as given.
            return unsafe { real(dptr, handle, flags) };
        };
        if dptr.is_null() {
            return ffi::CUDA_ERROR_INVALID_VALUE;
        }
        match crate::ipc::open(ticket, flags) {
            Ok(va) => {
                // SAFETY: checked non-null; the caller gives a writable pointer.
                unsafe { *dptr = va };
                ffi::CUDA_SUCCESS
            }
            Err(rc) => rc,
        }
    })
}

/// Closes an opened IPC handle: ours (`ipc`), or the driver's.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcCloseMemHandle(dptr: DevPtr) -> CuResult {
    guarded("cuIpcCloseMemHandle", || {
        crate::ipc::close(dptr).unwrap_or_else(|| {
            let real = real!(c"cuIpcCloseMemHandle"; fn(DevPtr) -> CuResult);
            // SAFETY: not ours: forwarded as given.
            unsafe { real(dptr) }
        })
    })
}

/// Managed memory's and IPC's entry points by name.
fn unmovable_table() -> Vec<(&'static CStr, usize)> {
    vec![
        (
            c"cuMemAllocManaged",
            cuMemAllocManaged as *const () as usize,
        ),
        (
            c"cuIpcGetMemHandle",
            cuIpcGetMemHandle as *const () as usize,
        ),
        (
            c"cuIpcOpenMemHandle_v2",
            cuIpcOpenMemHandle_v2 as *const () as usize,
        ),
        (
            c"cuIpcCloseMemHandle",
            cuIpcCloseMemHandle as *const () as usize,
        ),
    ]
}

/// Allocation paths the daemon cannot manage: refused while managed, forwarded otherwise.
macro_rules! refused {
    ($($name:ident($($arg:ident: $ty:ty),*) because $why:literal;)*) => {
        $(
            /// # Safety
            /// Called by C with cuda.h's contract.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
                guarded(stringify!($name), || {
                    if managed().is_some() {
                        return refuse_once(
                            stringify!($name),
                            concat!($why, "; it fails with CUDA_ERROR_NOT_SUPPORTED"),
                        );
                    }
                    let real = real!(cname(concat!(stringify!($name), "\0")); fn($($ty),*) -> CuResult);
                    // SAFETY: forwarded as given.
                    unsafe { real($($arg),*) }
                })
            }
        )*
        fn refused_table() -> Vec<(&'static CStr, usize)> {
            vec![$((cname(concat!(stringify!($name), "\0")), $name as *const () as usize)),*]
        }
    };
}

/// Entry points forwarded to the driver's function of the same name through a wrapper
/// of this module, `fn(name, call)`, or `fn(name, call, launch)` for entries with a
/// [`Launch`] after `=>`: the wrapper runs the call (gated, timed or counted) and
/// returns its result. `$table` lists them.
macro_rules! forwarded {
    ($table:ident by $wrap:ident: $($name:ident($($arg:ident: $ty:ty),*) $(=> $launch:expr)?;)*) => {
        $(
            /// # Safety
            /// Called by C with cuda.h's contract.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
                $wrap(stringify!($name), || {
                    let real = real!(cname(concat!(stringify!($name), "\0")); fn($($ty),*) -> CuResult);
                    // SAFETY: forwarded as given.
                    unsafe { real($($arg),*) }
                } $(, || $launch)?)
            }
        )*
        fn $table() -> Vec<(&'static CStr, usize)> {
            vec![$((cname(concat!(stringify!($name), "\0")), $name as *const () as usize)),*]
        }
    };
}

fn cname(with_nul: &'static str) -> &'static CStr {
    CStr::from_bytes_with_nul(with_nul.as_bytes()).expect("a NUL-terminated literal")
}

type P = Handle;

// None now: stream-ordered pools (`pools`), managed memory (`managed`) and IPC exports
// (`ipc`) are served (issue 41).
refused! {}

// Calls that start GPU work (copies, memsets, stream memory operations): they wait
// while the process is suspended.
forwarded! { gated_table by starts_work:
    cuMemcpy(dst: DevPtr, src: DevPtr, n: usize);
    cuMemcpy_ptds(dst: DevPtr, src: DevPtr, n: usize);
    cuMemcpyAsync(dst: DevPtr, src: DevPtr, n: usize, stream: P);
    cuMemcpyAsync_ptsz(dst: DevPtr, src: DevPtr, n: usize, stream: P);
    cuMemcpyHtoD_v2(dst: DevPtr, src: *const c_void, n: usize);
    cuMemcpyHtoD_v2_ptds(dst: DevPtr, src: *const c_void, n: usize);
    cuMemcpyDtoH_v2(dst: *mut c_void, src: DevPtr, n: usize);
    cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: DevPtr, n: usize);
    cuMemcpyDtoD_v2(dst: DevPtr, src: DevPtr, n: usize);
    cuMemcpyDtoD_v2_ptds(dst: DevPtr, src: DevPtr, n: usize);
    cuMemcpyHtoDAsync_v2(dst: DevPtr, src: *const c_void, n: usize, stream: P);
    cuMemcpyHtoDAsync_v2_ptsz(dst: DevPtr, src: *const c_void, n: usize, stream: P);
    cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: DevPtr, n: usize, stream: P);
    cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: DevPtr, n: usize, stream: P);
    cuMemcpyDtoDAsync_v2(dst: DevPtr, src: DevPtr, n: usize, stream: P);
    cuMemcpyDtoDAsync_v2_ptsz(dst: DevPtr, src: DevPtr, n: usize, stream: P);
    cuMemcpy2D_v2(copy: P);
    cuMemcpy2D_v2_ptds(copy: P);
    cuMemcpy2DUnaligned_v2(copy: P);
    cuMemcpy2DUnaligned_v2_ptds(copy: P);
    cuMemcpy2DAsync_v2(copy: P, stream: P);
    cuMemcpy2DAsync_v2_ptsz(copy: P, stream: P);
    cuMemcpy3D_v2(copy: P);
    cuMemcpy3D_v2_ptds(copy: P);
    cuMemcpy3DAsync_v2(copy: P, stream: P);
    cuMemcpy3DAsync_v2_ptsz(copy: P, stream: P);
    cuMemcpyPeer(dst: DevPtr, dctx: P, src: DevPtr, sctx: P, n: usize);
    cuMemcpyPeerAsync(dst: DevPtr, dctx: P, src: DevPtr, sctx: P, n: usize, stream: P);
    cuMemsetD8_v2(dst: DevPtr, value: c_uchar, n: usize);
    cuMemsetD8_v2_ptds(dst: DevPtr, value: c_uchar, n: usize);
    cuMemsetD16_v2(dst: DevPtr, value: c_ushort, n: usize);
    cuMemsetD16_v2_ptds(dst: DevPtr, value: c_ushort, n: usize);
    cuMemsetD32_v2(dst: DevPtr, value: c_uint, n: usize);
    cuMemsetD32_v2_ptds(dst: DevPtr, value: c_uint, n: usize);
    cuMemsetD8Async(dst: DevPtr, value: c_uchar, n: usize, stream: P);
    cuMemsetD8Async_ptsz(dst: DevPtr, value: c_uchar, n: usize, stream: P);
    cuMemsetD16Async(dst: DevPtr, value: c_ushort, n: usize, stream: P);
    cuMemsetD16Async_ptsz(dst: DevPtr, value: c_ushort, n: usize, stream: P);
    cuMemsetD32Async(dst: DevPtr, value: c_uint, n: usize, stream: P);
    cuMemsetD32Async_ptsz(dst: DevPtr, value: c_uint, n: usize, stream: P);
    cuMemsetD2D8_v2(dst: DevPtr, pitch: usize, value: c_uchar, w: usize, h: usize);
    cuMemsetD2D32_v2(dst: DevPtr, pitch: usize, value: c_uint, w: usize, h: usize);
    cuMemsetD2D16_v2(dst: DevPtr, pitch: usize, value: c_ushort, w: usize, h: usize);
    cuMemsetD2D8_v2_ptds(dst: DevPtr, pitch: usize, value: c_uchar, w: usize, h: usize);
    cuMemsetD2D16_v2_ptds(dst: DevPtr, pitch: usize, value: c_ushort, w: usize, h: usize);
    cuMemsetD2D32_v2_ptds(dst: DevPtr, pitch: usize, value: c_uint, w: usize, h: usize);
    cuMemsetD2D8Async(dst: DevPtr, pitch: usize, value: c_uchar, w: usize, h: usize, stream: P);
    cuMemsetD2D16Async(dst: DevPtr, pitch: usize, value: c_ushort, w: usize, h: usize, stream: P);
    cuMemsetD2D32Async(dst: DevPtr, pitch: usize, value: c_uint, w: usize, h: usize, stream: P);
    cuMemsetD2D8Async_ptsz(dst: DevPtr, pitch: usize, value: c_uchar, w: usize, h: usize, stream: P);
    cuMemsetD2D16Async_ptsz(dst: DevPtr, pitch: usize, value: c_ushort, w: usize, h: usize, stream: P);
    cuMemsetD2D32Async_ptsz(dst: DevPtr, pitch: usize, value: c_uint, w: usize, h: usize, stream: P);
    cuMemcpyPeer_ptds(dst: DevPtr, dctx: P, src: DevPtr, sctx: P, n: usize);
    cuMemcpyPeerAsync_ptsz(dst: DevPtr, dctx: P, src: DevPtr, sctx: P, n: usize, stream: P);
    cuStreamWriteValue32_v2(stream: P, addr: DevPtr, value: c_uint, flags: c_uint);
    cuStreamWriteValue32_v2_ptsz(stream: P, addr: DevPtr, value: c_uint, flags: c_uint);
    cuStreamWriteValue64_v2(stream: P, addr: DevPtr, value: u64, flags: c_uint);
    cuStreamWriteValue64_v2_ptsz(stream: P, addr: DevPtr, value: u64, flags: c_uint);
    cuStreamWaitValue32_v2(stream: P, addr: DevPtr, value: c_uint, flags: c_uint);
    cuStreamWaitValue32_v2_ptsz(stream: P, addr: DevPtr, value: c_uint, flags: c_uint);
    cuStreamWaitValue64_v2(stream: P, addr: DevPtr, value: u64, flags: c_uint);
    cuStreamWaitValue64_v2_ptsz(stream: P, addr: DevPtr, value: u64, flags: c_uint);
    cuStreamBatchMemOp_v2(stream: P, count: c_uint, ops: P, flags: c_uint);
    cuStreamBatchMemOp_v2_ptsz(stream: P, count: c_uint, ops: P, flags: c_uint);
}

// Launches: gated as other work, then counted.
forwarded! { launches_table by launches:
    cuLaunchKernel(f: P, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: P, params: *mut P, extra: *mut P) => kernel(f, [gx, gy, gz], stream, params, extra);
    cuLaunchKernel_ptsz(f: P, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: P, params: *mut P, extra: *mut P) => kernel(f, [gx, gy, gz], stream, params, extra);
    cuLaunchKernelEx(config: *const ffi::LaunchConfig, f: P, params: *mut P, extra: *mut P) => configured(config, f, params, extra);
    cuLaunchKernelEx_ptsz(config: *const ffi::LaunchConfig, f: P, params: *mut P, extra: *mut P) => configured(config, f, params, extra);
    cuLaunchCooperativeKernel(f: P, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: P, params: *mut P) => kernel(f, [gx, gy, gz], stream, params, std::ptr::null_mut());
    cuLaunchCooperativeKernel_ptsz(f: P, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: P, params: *mut P) => kernel(f, [gx, gy, gz], stream, params, std::ptr::null_mut());
    cuGraphLaunch(exec: P, stream: P) => kernel(std::ptr::null_mut(), [0, 0, 0], stream, std::ptr::null_mut(), std::ptr::null_mut());
    cuGraphLaunch_ptsz(exec: P, stream: P) => kernel(std::ptr::null_mut(), [0, 0, 0], stream, std::ptr::null_mut(), std::ptr::null_mut());
}

/// A launch of `func` (null: a graph, which counts once and no blocks) on a grid of
/// `grid` blocks.
fn kernel(func: P, grid: [c_uint; 3], stream: P, params: *mut P, extra: *mut P) -> Launch {
    Launch {
        func,
        stream,
        blocks: grid.iter().map(|&d| u64::from(d)).product(),
        params,
        extra,
    }
}

/// A `cuLaunchKernelEx` launch, its grid and stream in `config`.
fn configured(config: *const ffi::LaunchConfig, func: P, params: *mut P, extra: *mut P) -> Launch {
    // SAFETY: the driver accepted the launch, so `config` points at a CUlaunchConfig.
    match unsafe { config.as_ref() } {
        Some(c) => kernel(func, c.grid, c.stream, params, extra),
        None => kernel(func, [0, 0, 0], std::ptr::null_mut(), params, extra),
    }
}

forwarded! { context_syncs_table by waits_for_context:
    cuCtxSynchronize();
}

forwarded! { syncs_table by waits:
    cuStreamSynchronize(stream: P);
    cuStreamSynchronize_ptsz(stream: P);
    cuEventSynchronize(event: P);
}

forwarded! { capture_begins_table by begins_capture:
    cuStreamBeginCapture(stream: P);
    cuStreamBeginCapture_ptsz(stream: P);
    cuStreamBeginCapture_v2(stream: P, mode: c_int);
    cuStreamBeginCapture_v2_ptsz(stream: P, mode: c_int);
    cuStreamBeginCaptureToGraph(stream: P, graph: P, deps: *const P, edges: *const c_void, n: usize, mode: c_int);
    cuStreamBeginCaptureToGraph_ptsz(stream: P, graph: P, deps: *const P, edges: *const c_void, n: usize, mode: c_int);
}

forwarded! { capture_ends_table by ends_capture:
    cuStreamEndCapture(stream: P, graph: *mut P);
    cuStreamEndCapture_ptsz(stream: P, graph: *mut P);
}

/// Calls that start GPU work: they wait while the process is suspended, and count as
/// work for the progress reports' idleness.
fn starts_work(name: &'static str, call: impl FnOnce() -> CuResult) -> CuResult {
    guarded(name, || {
        let _held = work_gate();
        let rc = call();
        if let Some(meter) = meter() {
            meter.worked();
        }
        rc
    })
}

/// Launches: gated as other work, then counted with what `launch` says of them.
fn launches(
    name: &'static str,
    call: impl FnOnce() -> CuResult,
    launch: impl FnOnce() -> Launch,
) -> CuResult {
    guarded(name, || {
        let _held = work_gate();
        let rc = call();
        if rc == ffi::CUDA_SUCCESS
            && let Some(meter) = meter()
        {
            // SAFETY: `launch` is made of the hook's own arguments, valid during its call.
            unsafe { meter.launched(&launch()) };
        }
        rc
    })
}

/// A synchronization of one stream or event: its wait timed, and work for the busy
/// and idle reports while it waits.
fn waits(name: &'static str, call: impl FnOnce() -> CuResult) -> CuResult {
    guarded(name, || {
        let _waiting = clients::current_existing().and_then(Client::waits);
        let rc = match meter() {
            Some(meter) => meter.synchronize(false, call),
            None => call(),
        };
        // The streams waited for may have reached stream-ordered frees.
        reap();
        rc
    })
}

/// `cuCtxSynchronize`: its wait timed (and work, as [`waits`]), and every launch
/// before it complete when it returns.
fn waits_for_context(name: &'static str, call: impl FnOnce() -> CuResult) -> CuResult {
    guarded(name, || {
        let _waiting = clients::current_existing().and_then(Client::waits);
        let rc = match meter() {
            Some(meter) => meter.synchronize(true, call),
            None => call(),
        };
        reap();
        rc
    })
}

/// A stream starts being captured into a graph.
fn begins_capture(name: &'static str, call: impl FnOnce() -> CuResult) -> CuResult {
    guarded(name, || match meter() {
        Some(meter) => meter.begin_capture(call),
        None => call(),
    })
}

/// A capture ends, whatever the driver answers.
fn ends_capture(name: &'static str, call: impl FnOnce() -> CuResult) -> CuResult {
    guarded(name, || {
        let rc = call();
        if let Some(meter) = meter() {
            meter.end_capture();
        }
        rc
    })
}

// A program's own virtual memory management (`vmm`): its handles on the current
// context's device are virtual handles of ours while that device's daemon is connected,
// and stay ours (its client's, connected or lost) until they go; every other handle,
// and every call on one, goes to the driver.

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    bytes: usize,
    prop: *const ffi::ProgramProp,
    flags: u64,
) -> CuResult {
    guarded("cuMemCreate", || {
        if let Some(rc) = failed_start() {
            return rc;
        }
        // SAFETY: the caller gives `prop` null or pointing at a CUmemAllocationProp.
        let program_prop = unsafe { prop.as_ref() }.copied();
        let mut on_device = program_prop.filter(|p| p.device().is_some());
        if on_device.is_some() && managed().is_some() && ffi::driver::current_context().is_null() {
            // The daemon's buffers are mapped in a context of the program's.
            let why = "passed through unmanaged (uncounted)";
            let _ = refuse_once("cuMemCreate without a current context", why);
            on_device = None;
        }
        let device = on_device.and_then(|p| p.device());
        // Whichever daemons are connected: the current device's client would place it.
        if on_device.is_some() && client().is_some() && device != ffi::driver::current_device() {
            // A daemon's buffers are mapped in a context of their device's.
            let why = "passed through unmanaged (uncounted)";
            let _ = refuse_once(
                "cuMemCreate on a device other than the current context's",
                why,
            );
            on_device = None;
        }
        // The current device's daemon places it (`Everyone` allocates there).
        let Some(p) = on_device.filter(|_| allocating_client().is_some()) else {
            let real = real!(c"cuMemCreate"; fn(*mut u64, usize, *const ffi::ProgramProp, u64) -> CuResult);
            // SAFETY: forwarded as given.
            return unsafe { real(handle, bytes, prop, flags) };
        };
        if handle.is_null() || flags != 0 {
            return ffi::CUDA_ERROR_INVALID_VALUE;
        }
        match crate::vmm::create(&clients::Everyone, bytes as u64, p) {
            Ok(h) => {
                // SAFETY: checked non-null; the caller gives a writable pointer.
                unsafe { *handle = h };
                ffi::CUDA_SUCCESS
            }
            Err(rc) => rc,
        }
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> CuResult {
    guarded("cuMemRelease", || {
        if client().is_some() && crate::vmm::is_virtual(handle) {
            let _held = gate();
            return crate::vmm::release(&clients::Everyone, handle);
        }
        let real = real!(c"cuMemRelease"; fn(u64) -> CuResult);
        // SAFETY: not ours: forwarded as given.
        unsafe { real(handle) }
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemMap(
    va: DevPtr,
    bytes: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> CuResult {
    guarded("cuMemMap", || {
        if client().is_some() && crate::vmm::is_virtual(handle) {
            if flags != 0 {
                return ffi::CUDA_ERROR_INVALID_VALUE;
            }
            let _held = gate();
            return crate::vmm::map(&clients::Everyone, va, bytes as u64, offset as u64, handle);
        }
        let real = real!(c"cuMemMap"; fn(DevPtr, usize, usize, u64, u64) -> CuResult);
        // SAFETY: not ours: forwarded as given.
        unsafe { real(va, bytes, offset, handle, flags) }
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemUnmap(va: DevPtr, bytes: usize) -> CuResult {
    guarded("cuMemUnmap", || {
        if client().is_some() {
            let _held = gate();
            if let Some(rc) = crate::vmm::unmap(&clients::Everyone, va, bytes as u64) {
                return rc;
            }
        }
        let real = real!(c"cuMemUnmap"; fn(DevPtr, usize) -> CuResult);
        // SAFETY: no mapping of ours in the range: forwarded as given.
        unsafe { real(va, bytes) }
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemSetAccess(
    va: DevPtr,
    bytes: usize,
    desc: *const c_void,
    count: usize,
) -> CuResult {
    guarded("cuMemSetAccess", || {
        let _held = gate();
        let real = real!(c"cuMemSetAccess"; fn(DevPtr, usize, *const c_void, usize) -> CuResult);
        // SAFETY: forwarded as given: our mappings are the driver's mappings too.
        let rc = unsafe { real(va, bytes, desc, count) };
        if rc == ffi::CUDA_SUCCESS && client().is_some() {
            // SAFETY: the driver accepted `count` descriptors at `desc`.
            let access = unsafe { ffi::Access::copied(desc, count) };
            crate::vmm::granted(va, bytes as u64, access);
        }
        rc
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut u64,
    addr: *mut c_void,
) -> CuResult {
    guarded("cuMemRetainAllocationHandle", || {
        if !handle.is_null()
            && client().is_some()
            && let Some(h) = crate::vmm::retain(addr as DevPtr)
        {
            // SAFETY: checked non-null; the caller gives a writable pointer.
            unsafe { *handle = h };
            return ffi::CUDA_SUCCESS;
        }
        let real = real!(c"cuMemRetainAllocationHandle"; fn(*mut u64, *mut c_void) -> CuResult);
        // SAFETY: not in a mapping of ours: forwarded as given.
        unsafe { real(handle, addr) }
    })
}

/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut ffi::ProgramProp,
    handle: u64,
) -> CuResult {
    guarded("cuMemGetAllocationPropertiesFromHandle", || {
        if crate::vmm::is_virtual(handle) {
            let Some(p) = crate::vmm::properties(handle) else {
                return ffi::CUDA_ERROR_INVALID_VALUE;
            };
            if prop.is_null() {
                return ffi::CUDA_ERROR_INVALID_VALUE;
            }
            // SAFETY: checked non-null; the caller gives a writable CUmemAllocationProp.
            unsafe { *prop = p };
            return ffi::CUDA_SUCCESS;
        }
        let real = real!(c"cuMemGetAllocationPropertiesFromHandle"; fn(*mut ffi::ProgramProp, u64) -> CuResult);
        // SAFETY: not ours: forwarded as given.
        unsafe { real(prop, handle) }
    })
}

/// An exported virtual handle could be mapped by another process, where gpuswap could
/// not move it: refused.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable: *mut c_void,
    handle: u64,
    kind: c_int,
    flags: u64,
) -> CuResult {
    guarded("cuMemExportToShareableHandle", || {
        if crate::vmm::is_virtual(handle) {
            return refuse_once(
                "cuMemExportToShareableHandle",
                "the memory of a handle gpuswap manages moves, and another process that \
                 mapped it could not follow; the export is refused (pinning exported \
                 handles: see issue 41)",
            );
        }
        let real =
            real!(c"cuMemExportToShareableHandle"; fn(*mut c_void, u64, c_int, u64) -> CuResult);
        // SAFETY: not ours: forwarded as given.
        unsafe { real(shareable, handle, kind, flags) }
    })
}

/// The entry points of a program's own virtual memory management.
fn vmm_table() -> Vec<(&'static CStr, usize)> {
    vec![
        (c"cuMemCreate", cuMemCreate as *const () as usize),
        (c"cuMemRelease", cuMemRelease as *const () as usize),
        (c"cuMemMap", cuMemMap as *const () as usize),
        (c"cuMemUnmap", cuMemUnmap as *const () as usize),
        (c"cuMemSetAccess", cuMemSetAccess as *const () as usize),
        (
            c"cuMemRetainAllocationHandle",
            cuMemRetainAllocationHandle as *const () as usize,
        ),
        (
            c"cuMemGetAllocationPropertiesFromHandle",
            cuMemGetAllocationPropertiesFromHandle as *const () as usize,
        ),
        (
            c"cuMemExportToShareableHandle",
            cuMemExportToShareableHandle as *const () as usize,
        ),
    ]
}

/// Every exported entry point by name.
pub fn table() -> &'static [(&'static CStr, usize)] {
    static TABLE: OnceLock<Vec<(&'static CStr, usize)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t: Vec<(&'static CStr, usize)> = vec![
            (c"cuInit", cuInit as *const () as usize),
            (c"cuMemAlloc_v2", cuMemAlloc_v2 as *const () as usize),
            (
                c"cuMemAllocPitch_v2",
                cuMemAllocPitch_v2 as *const () as usize,
            ),
            (c"cuMemFree_v2", cuMemFree_v2 as *const () as usize),
            (c"cuMemGetInfo_v2", cuMemGetInfo_v2 as *const () as usize),
            (c"cuGetProcAddress", cuGetProcAddress as *const () as usize),
            (
                c"cuGetProcAddress_v2",
                cuGetProcAddress_v2 as *const () as usize,
            ),
        ];
        t.extend(refused_table());
        t.extend(gated_table());
        t.extend(launches_table());
        t.extend(context_syncs_table());
        t.extend(syncs_table());
        t.extend(capture_begins_table());
        t.extend(capture_ends_table());
        t.extend(vmm_table());
        t.extend(stream_ordered_allocs_table());
        t.extend(unmovable_table());
        t
    })
}

/// Our entry point for the real driver's function at `addr`, if we export one.
fn substitute(addr: usize) -> Option<usize> {
    static BY_REAL: OnceLock<Vec<(usize, usize)>> = OnceLock::new();
    BY_REAL
        .get_or_init(|| {
            table()
                .iter()
                .map(|(name, ours)| (ffi::real_symbol(name), *ours))
                .filter(|(real, _)| *real != 0)
                .collect()
        })
        .iter()
        .find(|(real, _)| *real == addr)
        .map(|(_, ours)| *ours)
}

/// Replaces a looked-up real entry point with ours.
///
/// # Safety
/// `pfn` is null or valid for reads and writes.
unsafe fn swap_in(rc: CuResult, pfn: *mut *mut c_void) -> CuResult {
    if rc == ffi::CUDA_SUCCESS && !pfn.is_null() {
        // SAFETY: the caller's contract.
        let found = unsafe { *pfn } as usize;
        if let Some(ours) = substitute(found) {
            // SAFETY: as above.
            unsafe { *pfn = ours as *mut c_void };
        }
    }
    rc
}

/// The CUDA runtime finds every driver function through this: the answer is ours
/// wherever we interpose the function it names.
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    guarded("cuGetProcAddress", || {
        let real =
            real!(c"cuGetProcAddress"; fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult);
        // SAFETY: forwarded as given, then the answer checked.
        unsafe { swap_in(real(symbol, pfn, version, flags), pfn) }
    })
}

/// CUDA 12's form of [`cuGetProcAddress`].
///
/// # Safety
/// Called by C with cuda.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    guarded("cuGetProcAddress_v2", || {
        let real = real!(c"cuGetProcAddress_v2"; fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult);
        // SAFETY: forwarded as given, then the answer checked.
        unsafe { swap_in(real(symbol, pfn, version, flags, status), pfn) }
    })
}

/// Programs and the runtime that look the driver up with `dlsym` get our entry points
/// for the functions we interpose. (A caller's `RTLD_NEXT` is resolved from this
/// library, not from the caller: a documented limit.)
///
/// # Safety
/// Called by C with dlfcn.h's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let ours = catch_unwind(|| {
        if symbol.is_null() {
            return None;
        }
        // SAFETY: dlsym's contract: a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(symbol) };
        if !name.to_bytes().starts_with(b"cu") {
            return None;
        }
        // Only what the driver has: a program probing for a newer function must
        // learn that it is missing, not get ours that could not forward it.
        table()
            .iter()
            .find(|(n, _)| *n == name)
            .filter(|(n, _)| ffi::real_symbol(n) != 0)
            .map(|(_, a)| *a)
    });
    match ours {
        Ok(Some(addr)) => addr as *mut c_void,
        // SAFETY: forwarded as given to glibc's dlsym.
        _ => unsafe { ffi::real_dlsym()(handle, symbol) },
    }
}
