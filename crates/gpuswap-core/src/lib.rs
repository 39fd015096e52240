//! gpuswap-core: the memory manager of gpuswap as a pure state machine.
//!
//! The manager never reads a clock, starts a thread or performs I/O. Whoever drives it
//! (the simulator in `gpuswap-sim` today, a CUDA interposer later) feeds it events with
//! the `handle_*` methods of [`Manager`] and then drains [`Manager::poll_action`] for the
//! actions it must perform (grant an allocation, report a failure, ...). The shape follows
//! `quinn-proto`: getters, `handle_*` for events, `poll_*` for actions.

mod buffer;
mod ids;
mod manager;

pub use buffer::{Buffer, BufferKind, Chunk, Location, SystemBuffer, chunk_layout};
pub use ids::{BufferId, RequestId, TenantId};
pub use manager::{
    Action, AllocError, AllocRequest, FreeError, Manager, ManagerConfig, Mode, TenantUsage,
};

/// One mebibyte in bytes; used by defaults and tests.
pub const MIB: u64 = 1 << 20;
