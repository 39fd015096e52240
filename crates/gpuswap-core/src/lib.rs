//! gpuswap-core: the memory manager of gpuswap as a pure state machine.
//!
//! The manager never reads a clock, starts a thread or performs I/O. Whoever drives it
//! (the simulator in `gpuswap-sim` today, a CUDA interposer later) feeds it events with
//! the `handle_*` methods of [`Manager`] and then drains [`Manager::poll_action`] for the
//! actions it must perform (grant an allocation, report a failure, ...). The shape follows
//! `quinn-proto`: getters, `handle_*` for events, `poll_*` for actions.

mod buffer;
mod ids;
mod lists;
mod manager;
mod policy;

pub use buffer::{Buffer, BufferKind, Chunk, Location, SystemBuffer, chunk_layout};
pub use ids::{BufferId, RequestId, TenantId};
pub use lists::ChunkRef;
pub use manager::{
    Action, AllocError, AllocRequest, CopyId, FreeError, KernelStats, Manager, ManagerConfig, Mode,
    Purpose, TenantUsage,
};
pub use policy::{ChunkPolicy, PRIORITY_DEFAULT, PRIORITY_STACK, PRIORITY_SYSTEM, VictimPolicy};

/// One mebibyte in bytes; used by defaults and tests.
pub const MIB: u64 = 1 << 20;

/// Default chunk size: 4 MiB, the dissertation's default (the paper used 2 MiB).
pub const DEFAULT_CHUNK_BYTES: u64 = 4 * MIB;

/// Default period of the return check: 1 s, as in the prototype's code.
pub const DEFAULT_RETURN_INTERVAL_NS: u64 = 1_000_000_000;
