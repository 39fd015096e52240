//! What the daemon's backend supplies a manager, declared as data, and the check that
//! refuses a mode needing what it lacks.

use gpuswap_core::{Needs, PolicySettings};

/// What the daemon's backend supplies a manager, declared as the needs it meets: it
/// sees allocations, frees, the wall clock (so timers) and whether each process has GPU
/// work (its interposer's `Busy` and `Idle`, for turns) and its progress with the
/// buffers its launches named (`Progress`, for the automatic choice), not kernels, page
/// faults, reference bits or access counts.
pub const SUPPLIES: Needs = Needs {
    timers: true,
    gpu_demand: true,
    progress: true,
    ..Needs::NONE
};

/// Refuses modes that need what the daemon's backend lacks ([`SUPPLIES`]), naming the
/// first thing lacking.
pub fn check_policy(policy: &PolicySettings) -> Result<(), String> {
    match first_lacking(policy.needs().lacking(SUPPLIES)) {
        Some(what) => Err(format!(
            "mode {} needs {what}, which the daemon cannot provide on a real GPU; \
             use mode gpuswap (victim largest-share; a chunk policy without reference bits), \
             fcfs, static or native",
            policy.name()
        )),
        None => Ok(()),
    }
}

/// How a refusal names the first of `lacking`, as a real GPU's user knows each thing.
fn first_lacking(lacking: Needs) -> Option<&'static str> {
    [
        (
            lacking.page_faults,
            "replayable page faults (unified memory)",
        ),
        (lacking.launch_gating, "launch gating"),
        (lacking.reference_bits, "reference bits of host pages"),
        (
            lacking.kernel_estimates,
            "hardware counters of each kernel (all-in-VRAM time, accesses)",
        ),
        (lacking.access_counts, "access counters"),
        (lacking.timers, "timers"),
    ]
    .into_iter()
    .find_map(|(lacks, what)| lacks.then_some(what))
}
