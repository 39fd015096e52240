//! gpuswap-sim: the simulated GPU around the memory manager.

pub mod apps;
pub mod check;
pub mod device;
pub mod engine;
pub mod forwarding;
pub mod gdev;
pub mod link;
pub mod mmu;
pub mod preemption;
pub mod preset;
pub mod profile;
pub mod program;
pub mod queue;
pub mod report;
pub mod runtime;
pub mod serial_loop;
pub mod timing;
pub mod trace;
/// Sizes and durations written by people (its own crate: the interposer reads them too),
/// for the CLI; the simulator's own modules name `gpuswap_units`, since a path through the
/// crate root would tie them to every other module (`crates/gpuswap-house/tests/layering.rs`).
pub use gpuswap_units as units;
