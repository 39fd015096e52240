//! Real workloads as tenant programs: recorded allocator traces replayed on the
//! simulated GPU.

pub mod synthetic;
pub mod torch;
