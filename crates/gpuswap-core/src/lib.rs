//! gpuswap-core: the memory manager of gpuswap as a pure state machine.
//!
//! The manager never reads a clock, starts a thread or performs I/O. Whoever drives it
//! (the simulator in `gpuswap-sim`, the daemon in `gpuswap-daemon` for real processes) feeds it events with
//! the `handle_*` methods of [`Manager`] and then drains [`Manager::poll_action`] for the
//! actions it must perform ([`protocol`] says what must follow each). The shape follows
//! `quinn-proto`: getters, `handle_*` for events, `poll_*` for actions.
//!
//! Inside: [`accounting`](crate) keeps the books (buffers, chunks, byte counts), the
//! relocation state machine moves chunks, a memory policy from the [`registry`] decides,
//! and [`gpu_time`] decides who runs on the GPU when.

mod accounting;
mod buffer;
pub mod cache_hint;
pub mod contract;
pub mod gpu_time;
mod held;
mod ids;
mod lists;
mod manager;
pub mod mix;
mod order;
mod params;
pub mod placement;
mod policy;
pub mod protocol;
pub mod registry;
mod relocation;
pub mod uvm;

pub use buffer::{
    Buffer, BufferKind, Chunk, Location, PRIORITY_DEFAULT, PRIORITY_STACK, PRIORITY_SYSTEM,
    SystemBuffer, chunk_layout,
};
pub use contract::{AtLimit, Contract};
pub use held::Held;
pub use ids::{BufferId, CopyId, LaunchId, RequestId, TenantId};
pub use lists::ChunkRef;
pub use manager::{MAX_COPY_ATTEMPTS, Manager, ManagerConfig};
pub use params::Needs;
pub use protocol::{
    Action, AdmitError, AllocError, AllocRequest, BatchMove, Dma, Execution, FreeError,
    KernelStats, KillReason, Mapping, ProtocolError, Purpose, Reply, TenantUsage,
};
pub use registry::PolicySettings;
pub use relocation::MAX_BATCH_MOVES;

/// One mebibyte in bytes; used by defaults and tests.
pub const MIB: u64 = 1 << 20;

/// Default chunk size: 4 MiB, the dissertation's default (the paper used 2 MiB).
pub const DEFAULT_CHUNK_BYTES: u64 = 4 * MIB;

/// Default period of the return check: 50 ms, the period of the prototype the GPUswap
/// paper evaluated (its published code checks every 1 s; `return_interval = "1s"` gives
/// that).
pub const DEFAULT_RETURN_INTERVAL_NS: u64 = 50_000_000;

/// Cases of a property test: `default`, or `PROPTEST_CASES` for a long run.
#[cfg(test)]
pub(crate) fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
