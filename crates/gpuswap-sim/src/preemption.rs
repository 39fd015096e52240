//! What PILOT's preemption instrumentation costs a kernel (`../shared/spec/pilot.md`).
//!
//! PILOT's binary instrumentation makes every thread read a global preemption flag
//! before the back-edge of its kernel's outermost loop and exit when it is set. Every
//! trip of that loop, in every thread, so pays for:
//! - the check's instructions ([`CHECK_INSTRUCTIONS`]), issued like the kernel's own:
//!   they join its arithmetic ([`check_ops`]), which a memory-bound kernel hides and a
//!   compute-bound one does not;
//! - the flag read's latency: the branch waits for the load, and the next trip's
//!   loads wait for the branch. The scheduler hides that wait behind the other resident
//!   warps' instructions where there are enough of them; a kernel with few threads (a
//!   small input) or with a loop that a few threads run alone has none to hide it
//!   behind, and each trip of its longest thread takes the whole latency
//!   ([`exposed_ns`]). That is why the overhead is large for small inputs and falls with
//!   size, as PILOT reports.
//!
//! Not modelled: the registers the check adds. Compiled for `sm_70` with and without a
//! check before the back-edge, no benchmark kernel's resident warps change
//! (docs/pilot-reproduction.md, "Registers and occupancy"), so the check hides behind
//! as many warps as the kernel alone.

use crate::preset::Preset;
use crate::program::OuterLoop;
use crate::serial_loop;

/// Instructions one check adds per trip: load the flag, compare it with zero, branch to
/// the exit on the result (the least a flag test compiles to; the flag's address is set
/// up once, outside the loop). Unconfirmed: PILOT gives neither the instrumentation's
/// code nor a count.
pub const CHECK_INSTRUCTIONS: u64 = 3;

/// Latency of the flag read. The flag is written almost never and read by every thread,
/// so the read hits in the L2 ([`serial_loop::L2_HIT_NS`], Volta's).
pub const FLAG_READ_NS: f64 = serial_loop::L2_HIT_NS;

/// Warp schedulers per SM, each issuing one warp instruction per cycle: four processing
/// blocks per SM on Volta (NVIDIA Tesla V100 GPU architecture whitepaper, 2017), as on
/// Pascal GP100, Turing and Ampere.
const SCHEDULERS_PER_SM: f64 = 4.0;

/// Threads per warp.
const WARP: f64 = 32.0;

/// The instructions the checks add to a kernel.
pub fn check_ops(outer: OuterLoop) -> u64 {
    outer.trips.saturating_mul(CHECK_INSTRUCTIONS)
}

/// The time the checks' flag reads add to a kernel of `ops` instructions (its own)
/// whose outermost loop is `outer`, beyond their instructions: per wave of resident
/// threads, each trip of a thread waits for the flag for [`FLAG_READ_NS`], less what the
/// other warps of its scheduler issue meanwhile (the instructions of one trip each,
/// `ops / trips`).
pub fn exposed_ns(preset: &Preset, ops: u64, outer: OuterLoop) -> f64 {
    if outer.trips == 0 || outer.threads == 0 {
        return 0.0;
    }
    let sms = f64::from(preset.sms);
    let resident = sms * f64::from(preset.resident_threads_per_sm);
    let threads = outer.threads as f64;
    let waves = (threads / resident).ceil();
    // Warps of one wave per scheduler: at least the waiting one.
    let warps = (threads.min(resident) / sms / WARP / SCHEDULERS_PER_SM).max(1.0);
    let warp_instruction_ns = WARP / (preset.ops_per_s / sms / SCHEDULERS_PER_SM) * 1e9;
    let per_trip_ops = ops as f64 / outer.trips as f64;
    let hidden_ns = (warps - 1.0) * per_trip_ops * warp_instruction_ns;
    let exposed = (FLAG_READ_NS - hidden_ns).max(0.0);
    waves * (outer.trips as f64 / threads) * exposed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset;
    use crate::timing;

    fn v100() -> Preset {
        preset::find("v100-pcie-32gb").unwrap()
    }

    /// A kernel of `threads` threads of `trips` trips of `ops_per_trip` instructions: its
    /// instrumentation's share of its compute time.
    fn overhead(threads: u64, trips: u64, ops_per_trip: u64) -> f64 {
        let p = v100();
        let outer = OuterLoop::uniform(threads, trips);
        let ops = outer.trips * ops_per_trip;
        let base = timing::compute_ns(&p, ops);
        let checked = timing::compute_ns(&p, ops + check_ops(outer)) + exposed_ns(&p, ops, outer);
        checked / base - 1.0
    }

    #[test]
    fn overhead_is_large_for_small_inputs_and_falls_with_size() {
        // PILOT: the instrumentation's overhead matters for small inputs and shrinks as
        // the problem grows. A thousand threads cannot hide the flag's latency; a full
        // device can, leaving only the instructions.
        let sizes = [1_000, 20_000, 160_000, 1_000_000];
        let overheads: Vec<f64> = sizes.iter().map(|&n| overhead(n, 100, 30)).collect();
        assert!(
            overheads[0] > overheads[1] && overheads[1] > overheads[2],
            "{overheads:?} should fall with size"
        );
        assert!(overheads[0] > 1.0, "{overheads:?}");
        // Hidden entirely: what is left is three instructions per thirty.
        let instructions = CHECK_INSTRUCTIONS as f64 / 30.0;
        assert!((overheads[3] - instructions).abs() < 1e-9, "{overheads:?}");
    }

    #[test]
    fn a_loop_one_thread_runs_alone_waits_for_every_flag_read() {
        let p = v100();
        let alone = OuterLoop::uniform(1, 1000);
        assert!((exposed_ns(&p, 10_000, alone) - 1000.0 * FLAG_READ_NS).abs() < 1e-6);
        // No loop, no check.
        assert_eq!(exposed_ns(&p, 10_000, OuterLoop::default()), 0.0);
        assert_eq!(check_ops(OuterLoop::uniform(5, 0)), 0);
    }
}
