//! libgpuswap_cuda.so: loaded with `LD_PRELOAD` into an unmodified CUDA program, it puts
//! the program's device memory under gpuswapd (`gpuswap daemon`). Every `cuMemAlloc` is
//! a virtual-address reservation backed chunk by chunk with physical memory where the
//! daemon placed it (VRAM, or host memory mapped into the device's address space); on
//! the daemon's command the process suspends its launches, drains its streams and moves
//! chunks between VRAM and host memory at unchanged addresses (CUDA's virtual memory
//! management API, host-located allocations since CUDA 12.2).
//!
//! Each GPU has its own daemon (`gpuswap daemon --device`), and a process that uses
//! several holds a connection to each: the first device's (ordinal 0) at `cuInit`,
//! another's at its first allocation there, each found by the device's UUID
//! (`cuDeviceGetUuid_v2`) at `$XDG_RUNTIME_DIR/gpuswap/<uuid>.sock`, then
//! `/run/gpuswap/<uuid>.sock`. A device without a daemon is said once and left
//! unmanaged. A move on any device suspends the whole process's launches and copies
//! (`client`); progress reports, the process's launches on every device as one count,
//! go to the first device's daemon.
//!
//! - `diag`: warnings and the `GPUSWAP_TRACE` trace, which every other module reports
//!   through (it imports none of them);
//! - `ffi`: cuda.h's types and the real driver's functions (the only C calls besides
//!   the exported hooks);
//! - `client`: one device's daemon connection, the buffers, and the thread that carries
//!   out the daemon's commands, and its reconnection to a restarted daemon;
//! - `clients`: the registry of the process's clients, one per device, which calls
//!   find by their current device or by the address they name;
//! - `hooks`: the exported driver entry points, `cuGetProcAddress` and `dlsym` (the CUDA
//!   runtime finds the driver through them, so `cudaMalloc` reaches `cuMemAlloc_v2`);
//! - `batch`: chunk moves, one or a batch at a time, with their copies in flight
//!   together;
//! - `demand`: the busy and idle reports of the daemon's turns;
//! - `progress`: the progress reports (launches, completions, synchronization waits,
//!   idleness), aggregated per window;
//! - `touch`: the touch hints, which managed buffers a launch names in its parameters;
//! - `host_pool`: pinned host memory kept across moves for evictions;
//! - `probe`: the link's remote-read cost, measured once when the daemon asks (a kernel
//!   of its own reads VRAM and pinned host memory);
//! - `liveness`: the watch of the daemon's process, given up when it shows no sign of
//!   life;
//! - `rejoin`: what reconnection needs (the lost state, the pace of attempts, the
//!   declaration of the buffers held) and the device's real free memory;
//! - `vmm`: a program's own virtual memory management (`cuMemCreate`, `cuMemMap`, ...),
//!   its handles backed by managed buffers that move under its mappings;
//! - `trust`: whom the interposer takes for its daemon (the socket's folder, the
//!   listening process's uid);
//! - `pools`: the books of stream-ordered allocations (served as managed allocations,
//!   their frees honoured in stream order): the pool figures they add to, the frees
//!   waiting for their streams;
//! - `managed`: the books of memory the daemon cannot move (managed memory, buffers
//!   pinned for IPC exports), which the daemon is told of;
//! - `ipc`: IPC of managed buffers, by descriptor passing: the exporter's handles, the
//!   thread that serves their memory to importers, and the importer's mappings.
//!
//! Environment: `GPUSWAP_SOCKET` (the first device's daemon's socket; other devices'
//! are found by their UUID only), `GPUSWAP_DAEMON_USER` (the user,
//! a name or a uid, of a daemon run as neither the process's user nor root),
//! `GPUSWAP_DAEMON_TIMEOUT` (how long the daemon's process may be stopped or gone before
//! the interposer gives it up, default `30s`; `0`, never), `GPUSWAP_PASSTHROUGH=1` (forward
//! everything, manage nothing), `GPUSWAP_TENANT_NAME` (the name reports show),
//! `GPUSWAP_REAL_LIBCUDA` (the driver library to forward to, default `libcuda.so.1`),
//! `GPUSWAP_HOST_POOL` (pinned host memory kept for evictions, one pool for every
//! device: unset, host memory that moves back to VRAM is kept, up to the daemons' VRAM,
//! for the next eviction; a size
//! such as `64MiB` caps it and pins that much ahead, a size beyond the daemon's VRAM or
//! the machine's available memory is cut to it with a warning; `0`, none kept),
//! `GPUSWAP_TOUCH=0` (progress reports name no touched buffers: launches' parameters
//! are not scanned), `GPUSWAP_TRACE=1` (count the calls of every interposed entry point and print them
//! with the interposer's notes at exit, to see which paths a program takes, the time
//! its chunk moves took per phase, and its bulk moves' count, bytes and GB/s per batch).

mod batch;
mod client;
mod clients;
mod demand;
mod diag;
mod ffi;
mod hami;
mod hooks;
mod host_pool;
mod ipc;
mod liveness;
mod managed;
mod pools;
mod probe;
mod progress;
mod rejoin;
mod touch;
mod vmm;

/// The names of the driver entry points the interposer exports, for documentation and
/// tests.
pub fn hooked_symbols() -> Vec<&'static str> {
    hooks::table()
        .iter()
        .map(|(name, _)| name.to_str().unwrap_or("?"))
        .collect()
}
