//! libgpuswap_cuda.so: loaded with `LD_PRELOAD` into an unmodified CUDA program, it puts
//! the program's device memory under gpuswapd (`gpuswap daemon`). Every `cuMemAlloc` is
//! a virtual-address reservation backed chunk by chunk with physical memory where the
//! daemon placed it (VRAM, or host memory mapped into the device's address space); on
//! the daemon's command the process suspends its launches, drains its streams and moves
//! chunks between VRAM and host memory at unchanged addresses (CUDA's virtual memory
//! management API, host-located allocations since CUDA 12.2).
//!
//! - `ffi`: cuda.h's types and the real driver's functions (the only C calls besides
//!   the exported hooks);
//! - `client`: the daemon connection, the buffers, and the thread that carries out the
//!   daemon's commands;
//! - `hooks`: the exported driver entry points, `cuGetProcAddress` and `dlsym` (the CUDA
//!   runtime finds the driver through them, so `cudaMalloc` reaches `cuMemAlloc_v2`);
//! - `host_pool`: pinned host memory kept ready for evictions.
//!
//! Environment: `GPUSWAP_SOCKET` (the daemon's socket), `GPUSWAP_PASSTHROUGH=1` (forward
//! everything, manage nothing), `GPUSWAP_TENANT_NAME` (the name reports show),
//! `GPUSWAP_REAL_LIBCUDA` (the driver library to forward to, default `libcuda.so.1`),
//! `GPUSWAP_HOST_POOL` (pinned host memory kept ready for evictions, e.g. `64MiB`;
//! unset, none),
//! `GPUSWAP_TRACE=1` (count the calls of every interposed entry point and print them
//! with the interposer's notes at exit, to see which paths a program takes, and the
//! time its chunk moves took per phase).

mod client;
mod ffi;
mod hooks;
mod host_pool;

/// Prints a warning of the interposer to standard error (a closed stderr is no reason
/// to fail a CUDA call).
pub(crate) fn warn(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "gpuswap: {message}");
}

/// Whether `GPUSWAP_TRACE=1`.
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let on = std::env::var("GPUSWAP_TRACE").is_ok_and(|v| v == "1");
        if on {
            extern "C" fn report() {
                let _ = std::panic::catch_unwind(print_trace);
            }
            // SAFETY: registers a function that takes nothing and never unwinds.
            unsafe { libc::atexit(report) };
        }
        on
    })
}

static TRACE: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Counts a call of an interposed entry point (with `GPUSWAP_TRACE=1`).
pub(crate) fn trace_call(name: &'static str) {
    if tracing() {
        *TRACE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(name)
            .or_default() += 1;
    }
}

/// A note for the trace (with `GPUSWAP_TRACE=1`).
pub(crate) fn trace_note(note: &'static str) {
    if tracing() {
        warn(note);
    }
}

fn print_trace() {
    let calls = TRACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let list: Vec<String> = calls.iter().map(|(n, c)| format!("{n}={c}")).collect();
    warn(&format!("trace: {}", list.join(" ")));
    for line in [client::move_report(), host_pool::report()]
        .into_iter()
        .flatten()
    {
        warn(&format!("trace: {line}"));
    }
}

/// Ends the process with a message: the interposer cannot go on safely. `_exit`, not
/// `exit`: exit handlers could call back into CUDA while this thread holds the gate.
pub(crate) fn die(message: &str) -> ! {
    warn(message);
    // SAFETY: _exit ends the process at once; nothing is required of the caller.
    unsafe { libc::_exit(70) }
}

/// The names of the driver entry points the interposer exports, for documentation and
/// tests.
pub fn hooked_symbols() -> Vec<&'static str> {
    hooks::table()
        .iter()
        .map(|(name, _)| name.to_str().unwrap_or("?"))
        .collect()
}
