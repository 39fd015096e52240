//! What a loop that one thread runs alone costs: its trips in a row, each waiting for
//! its own read.
//!
//! The timing model's compute term runs every instruction at the device's full issue
//! rate ([`crate::timing::compute_ns`]), which supposes enough warps to cover each
//! one's latency. A loop of one thread has none: each trip issues its read and waits
//! for it before the dependent arithmetic and the next trip (in-order issue; a load that
//! may alias the previous trip's store cannot be moved ahead of it). Rodinia
//! particlefilter's thread 0 runs two such loops (the blocks' partial sums, the CDF over
//! every particle, each trip one read of an element the kernel before or the same
//! kernel just wrote), and they are the kernel's time, not a rounding error in its
//! arithmetic.
//!
//! Only loops that the app gives one thread ([`OuterLoop::threads`] = 1) take this
//! floor: where many threads run a loop, the model's throughput terms (compute, VRAM
//! latency by Little's law) stand for it.

use crate::preset::Preset;
use crate::program::OuterLoop;

/// Latency of a read that hits in the L2: 193 cycles on Volta (Jia et al., "Dissecting
/// the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018), 140 ns at the V100's
/// 1.38 GHz. Taken for every preset (unconfirmed elsewhere; the loops that pay it are
/// PILOT's benchmarks', which ran on a V100 and a Titan Xp).
pub const L2_HIT_NS: f64 = 140.0;

/// The least time a kernel whose outermost loop is `outer` takes, launch included: one
/// L2 read per trip in a row where one thread runs the loop alone, nothing otherwise.
pub fn floor_ns(preset: &Preset, outer: OuterLoop) -> u64 {
    if outer.threads != 1 {
        return 0;
    }
    preset.kernel_launch_ns + (outer.trips as f64 * L2_HIT_NS).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset;

    #[test]
    fn a_loop_one_thread_runs_alone_waits_for_each_trips_read() {
        let p = preset::find("v100-pcie-32gb").unwrap();
        let alone = OuterLoop::uniform(1, 1000);
        assert_eq!(floor_ns(&p, alone), p.kernel_launch_ns + 140_000);
        // Many threads: the throughput terms cover the loop.
        assert_eq!(floor_ns(&p, OuterLoop::uniform(2, 1000)), 0);
        assert_eq!(floor_ns(&p, OuterLoop::default()), 0);
    }
}
