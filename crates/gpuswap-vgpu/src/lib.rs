//! The simulated virtualised integrated GPU (`../shared/spec/dymgpu.md`): Intel GVT-g
//! style vGPUs sharing the global graphics memory, placed by the core's
//! [`gpuswap_core::placement`] algorithms, switched round robin in 16 ms slices, each
//! switch copying the private translation entries of every slot another vGPU used since.
//! A different device class from `gpuswap-sim`'s discrete GPUs; it shares their event
//! queue ([`gpuswap_sim::queue`]) and units.

pub mod engine;
pub mod preset;
pub mod workload;
