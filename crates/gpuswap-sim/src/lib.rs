//! gpuswap-sim: the simulated GPU around the memory manager.

pub mod apps;
pub mod program;
pub mod units;
