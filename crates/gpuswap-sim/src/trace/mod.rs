//! Real workloads as tenant programs: recorded allocator traces and unified-memory
//! fault logs replayed on the simulated GPU.

pub mod pickle_scan;
pub mod synthetic;
pub mod torch;
pub mod uvm_log;
