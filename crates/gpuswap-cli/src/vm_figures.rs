//! The figures of a VM run that its table, the placements' comparison and a sweep's
//! results each show: the VMs refused and the frame rates of those that rendered.

use gpuswap_vgpu::engine::{VgpuOutcome, VmOutcome};

/// How many VMs the placement refused: they failed to start.
pub fn refused(outcome: &VgpuOutcome) -> usize {
    outcome.vms.iter().filter(|v| v.error.is_some()).count()
}

/// A VM's frame rate; none for a VM that rendered no frame (refused, or a job), rather
/// than 0.
pub fn fps(vm: &VmOutcome) -> Option<f64> {
    (vm.frames > 0).then(|| vm.fps())
}

/// The mean frame rate over the VMs that rendered; none when none did.
pub fn mean_fps(outcome: &VgpuOutcome) -> Option<f64> {
    let rendered: Vec<f64> = outcome.vms.iter().filter_map(fps).collect();
    (!rendered.is_empty()).then(|| rendered.iter().sum::<f64>() / rendered.len() as f64)
}

/// A VM scenario's run as the JSON `run --json` prints (and `compare --json` lists, one
/// per placement).
pub fn report_json(
    scenario: &str,
    config: &gpuswap_vgpu::engine::VgpuConfig,
    outcome: &VgpuOutcome,
) -> serde_json::Value {
    serde_json::json!({
        "scenario": scenario,
        "device": config.preset.name,
        "placement": config.placement.name,
        "vms": outcome.vms.iter().map(|v| {
            let mut value = serde_json::to_value(v).expect("outcomes serialize");
            // A VM that rendered no frame (refused) has no frame rate, not 0.
            value["fps"] = serde_json::json!(fps(v));
            value
        }).collect::<Vec<_>>(),
        "system": {
            "switches": outcome.switches,
            "slot_copies": outcome.slot_copies,
            "entries_copied": outcome.entries_copied,
            "switch_cycles": outcome.switch_cycles,
            "cycles_per_switch": (outcome.switches > 0).then(|| outcome.cycles_per_switch()),
            "reallocations": outcome.reallocations,
            "idle_releases": outcome.idle_releases,
            "makespan_ns": outcome.makespan_ns,
        },
    })
}
