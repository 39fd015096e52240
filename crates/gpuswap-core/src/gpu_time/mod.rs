//! GPU time: who may run on the GPU when. One concern with three levels of policy, each
//! a small state machine fed by the driver's events:
//! - per launch, the launch gate ([`launch_gate`]): pass-through, or Gdev's one context
//!   at a time (`handle_launch`, answered `LaunchReady`);
//! - per kernel, PILOT's memory-aware scheduling ([`crate::gpu_time::scheduling`]:
//!   `handle_kernel_ready`, answered `Start` and `Preempt`);
//! - per tenant, [`GpuTime`]: everyone at once (`concurrent`), turns ([`turns`]): the
//!   driver reports demand (`handle_gpu_busy`, `handle_gpu_idle`) and the manager
//!   answers by parking tenants (a `Suspend` that lasts) and running the holder (its
//!   `Resume`), moving only the overflow between them in bulk; or the choice between
//!   the two by measurement (`auto`, [`auto`]), from each tenant's progress
//!   (`handle_progress`, [`progress`]). The same machine gives an idle tenant's memory
//!   back under pressure ([`Idle`]).
//!
//! The simulator's `exclusive-quantum` sharing is turns that hold even when memory
//! fits ([`TurnSettings::always`]), so the same policy runs on the simulated GPU, under
//! `gpuswap check` and in the daemon.

pub mod auto;
#[cfg(test)]
mod auto_tests;
pub(crate) mod launch_gate;
pub mod progress;
pub mod scheduling;
mod settings;
pub(crate) mod turns;
#[cfg(test)]
mod turns_tests;

pub use auto::{Choice, Switch};
pub use progress::Progress;
pub use settings::{
    AUTO_QUANTUM_HANDOVERS, AutoSettings, DEFAULT_DEMOTE_AFTER_NS, DEFAULT_HANDOVER_AFTER_NS,
    GpuTime, Idle, MAX_AUTO_QUANTUM_NS, MIN_AUTO_QUANTUM_NS, NVSHARE_IDLE_RELEASE_NS,
    NVSHARE_QUANTUM_NS, Quantum, SHARE_FIRST_MAX_REMOTE_COST, TurnSettings,
};
